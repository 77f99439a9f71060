"""Recorded traces: validated trace CSVs as requests, and a trace replayed at any offered load.

:func:`load_trace` reads a Splitwise/Vidur or Azure LLM-inference trace CSV, checking every cell
(the message names the file, line and column of the first bad one), into a list of
:class:`~budgetlab.specs.Request`. :class:`TraceWorkload` holds a trace once and replays it at any
offered load by scaling its time axis (what :func:`budgetlab.sweep` and :func:`budgetlab.capacity`
take).
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np
import pandas as pd

from budgetlab._checks import PLAIN_ERRORS, finite_number, int_at_least, positive_rate, random_seed
from budgetlab.errors import ParameterError, TraceFormatError
from budgetlab.specs import Request
from budgetlab.workload.frames import PREFIX_ID_COLUMN, PREFIX_TOKENS_COLUMN, fixed_lengths_label, mean_lengths_tokens

__all__ = ["SPLITWISE_COLUMNS", "AZURE_COLUMNS", "PREFIX_COLUMNS", "load_trace", "TraceWorkload"]

SPLITWISE_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
"""Splitwise/Vidur trace columns: arrival [s], prompt [tokens], output [tokens]."""

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
"""Azure LLM inference trace columns: datetime string, prompt [tokens], output [tokens]."""

PREFIX_COLUMNS = (PREFIX_ID_COLUMN, PREFIX_TOKENS_COLUMN)
"""Optional trace columns, in either format: ``prefix_id`` (text naming a shared token stream;
empty: none) and ``prefix_tokens`` (how many leading tokens are that stream [tokens])."""

_FORMATS = {"Splitwise/Vidur": SPLITWISE_COLUMNS, "Azure": AZURE_COLUMNS}
_PARSER_LINE_RE = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


class _Lines:
    """Exact 1-based file line numbers (header = line 1) of a trace's data rows, for messages."""

    def __init__(self, path: Path, frame: pd.DataFrame) -> None:
        self.path = path
        self.frame = frame

    def line(self, position: int) -> int:
        """Line where data row ``position`` (0-based, blank lines included) starts.

        That is ``position + 2`` unless an earlier cell holds a quoted line break; those are
        counted only here, when a message needs the number.
        """
        before = self.frame.iloc[:position]
        breaks = sum(int(before[col].str.count("\n").sum()) for col in before.columns)
        return position + 2 + breaks

    def error(self, position: int, column: str, problem: str) -> TraceFormatError:
        return TraceFormatError(f"{self.path}, line {self.line(position)}, column {column!r}: {problem}")


def _first(mask: np.ndarray) -> int | None:
    """Index of the first True, or None."""
    if mask.size and mask.any():
        return int(np.argmax(mask))
    return None


_MAX_TOKENS = 2**53  # whole numbers above this are not exact as floats


def _parse_tokens(raw: np.ndarray, what: str) -> tuple[np.ndarray, int | None, str]:
    """Token counts of one column of stripped strings, the first bad row (or None), its problem."""
    numbers = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(dtype=float)
    finite = np.isfinite(numbers)
    whole = finite & (numbers == np.round(numbers))
    good = whole & (numbers >= 1) & (numbers <= _MAX_TOKENS)
    bad = _first(~good)
    if bad is None:
        return numbers.astype(np.int64), None, ""
    text = raw[bad]
    if text == "":
        problem = f"is empty; every row needs its {what} length in tokens"
    elif not finite[bad]:
        problem = f"expected a whole number of tokens, got {text!r}"
    elif not whole[bad]:
        problem = f"expected a whole number of tokens, got the fraction {text!r}"
    elif what == "output" and numbers[bad] == 0:
        problem = (
            f"got {text!r}: every request generates at least its first token, so the output "
            "length must be >= 1; remove or fix such rows before loading (nothing is dropped "
            "silently)"
        )
    elif numbers[bad] > _MAX_TOKENS:
        problem = f"{text!r} tokens is implausibly large (more than 2**53)"
    else:
        problem = f"expected a whole number of tokens >= 1, got {text!r}"
    return numbers, bad, problem


def _parse_seconds(raw: np.ndarray) -> tuple[np.ndarray, int | None, str]:
    """Splitwise ``arrived_at``: finite numbers of seconds >= 0."""
    numbers = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(dtype=float)
    good = np.isfinite(numbers) & (numbers >= 0)
    bad = _first(~good)
    if bad is None:
        return numbers, None, ""
    text = raw[bad]
    if text == "":
        problem = "is empty; every row needs its arrival time in seconds"
    elif not np.isfinite(numbers[bad]):
        problem = f"expected a finite number of seconds, got {text!r}"
    else:
        problem = f"expected a number of seconds >= 0, got {text!r}"
    return numbers, bad, problem


_INT_TEXT_RE = re.compile(r"[+-]?\d+")


def _parse_prefixes(
    raw_ids: np.ndarray, raw_tokens: np.ndarray, totals: np.ndarray
) -> tuple[list[int | str | None], np.ndarray, int | None, str]:
    """``prefix_id`` and ``prefix_tokens`` cells: the ids (None where empty; an int where the
    text is an integer such as ``42``; any other text as it is), the token counts (0 where
    empty), and the first bad ``prefix_tokens`` row (or None) and its problem. ``totals`` is
    each row's prompt + output [tokens] (NaN where they did not parse)."""
    ids: list[int | str | None] = [
        None if text == "" else int(text) if _INT_TEXT_RE.fullmatch(text) else text for text in raw_ids
    ]
    numbers = pd.to_numeric(pd.Series(raw_tokens, dtype=object), errors="coerce").to_numpy(dtype=float)
    numbers = np.where(raw_tokens == "", 0.0, numbers)  # an empty cell: nothing shared
    whole = np.isfinite(numbers) & (numbers == np.round(numbers)) & (numbers >= 0)
    over = whole & (numbers > totals)  # False where the total is NaN
    orphan = whole & (numbers > 0) & (raw_ids == "")
    tokens_bad = _first(~whole | over | orphan)
    tokens_problem = ""
    if tokens_bad is not None:
        text = raw_tokens[tokens_bad]
        if not whole[tokens_bad]:
            tokens_problem = f"expected a whole number of tokens >= 0 (or an empty cell), got {text!r}"
        elif over[tokens_bad]:
            tokens_problem = (
                f"{text!r} shared tokens is more than the request's prompt + output ({int(totals[tokens_bad])} tokens)"
            )
        else:
            tokens_problem = f"{text!r} shared tokens but no prefix_id on this row names what they share"
    return ids, np.where(whole, numbers, 0).astype(np.int64), tokens_bad, tokens_problem


def _parse_timestamps(raw: np.ndarray) -> tuple[np.ndarray, int | None, str]:
    """Azure ``TIMESTAMP``: ISO-8601 datetime strings -> seconds since the first data row."""
    stamps = pd.to_datetime(pd.Series(raw, dtype=object), format="ISO8601", utc=True, errors="coerce")
    # seconds since the first row; NaN where a cell did not parse (so earlier rows can still
    # be checked for order before the unparseable one is reported)
    seconds = ((stamps - stamps.iloc[0]) / pd.Timedelta(seconds=1)).to_numpy(dtype=float)
    bad = _first(stamps.isna().to_numpy())
    if bad is None:
        return seconds, None, ""
    text = raw[bad]
    if text == "":
        problem = "is empty; every row needs its arrival timestamp"
    else:
        problem = f"cannot parse {text!r} as a date and time; expected ISO 8601 like '2023-11-16 18:15:46.6805900'"
    return seconds, bad, problem


def _read_cells(path: Path) -> tuple[pd.DataFrame, list[str]]:
    """The CSV as stripped strings (object dtype) and its header.

    Blank lines are kept, as rows of empty strings, so row ``i`` sits on line ``i + 2``.
    """
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            header = next(csv.reader(handle), None)
    except FileNotFoundError:
        raise TraceFormatError(f"trace file {path} does not exist") from None
    except IsADirectoryError:
        raise TraceFormatError(f"trace file {path} is a directory, not a CSV file") from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path}, line 1: not a readable UTF-8 CSV header ({exc})") from None
    except (OSError, csv.Error) as exc:
        raise TraceFormatError(f"trace file {path} cannot be read: {exc}") from None
    if header is None or not any(name.strip() for name in header):
        raise TraceFormatError(
            f"{path} is empty; line 1 must be a header naming the columns {_expected_columns_text()}"
        )
    header = [name.strip() for name in header]
    duplicated = sorted({name for name in header if name and header.count(name) > 1})
    if duplicated:
        raise TraceFormatError(f"{path}, line 1: column(s) {', '.join(duplicated)} appear twice")
    try:
        frame = pd.read_csv(
            path,
            dtype=str,
            keep_default_na=False,
            na_filter=False,
            skip_blank_lines=False,
            index_col=False,
            encoding="utf-8-sig",
        )
    except pd.errors.ParserError as exc:
        match = _PARSER_LINE_RE.search(str(exc))
        if match:
            expected, line, saw = match.groups()
            raise TraceFormatError(f"{path}, line {line}: {saw} cells but the header has {expected} columns") from None
        raise TraceFormatError(f"{path}: not a readable CSV ({exc})") from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path}: not a readable UTF-8 CSV ({exc})") from None
    frame.columns = [str(name).strip() for name in frame.columns]
    frame = frame.astype(object).apply(lambda col: col.str.strip())
    return frame, header


def _expected_columns_text() -> str:
    return " or ".join(f"{', '.join(cols)} ({name})" for name, cols in _FORMATS.items())


def _detect_format(path: Path, header: list[str]) -> tuple[str, tuple[str, str, str]]:
    present = {name: all(c in header for c in cols) for name, cols in _FORMATS.items()}
    if all(present.values()):
        raise TraceFormatError(
            f"{path}, line 1: the header holds both the Splitwise/Vidur columns "
            f"({', '.join(SPLITWISE_COLUMNS)}) and the Azure ones ({', '.join(AZURE_COLUMNS)}); "
            "keep one set so it is clear which to read"
        )
    for name, ok in present.items():
        if ok:
            return name, _FORMATS[name]
    # name the missing columns of the format the header is closest to
    closest = max(_FORMATS, key=lambda name: sum(c in header for c in _FORMATS[name]))
    missing = [c for c in _FORMATS[closest] if c not in header]
    raise TraceFormatError(
        f"{path}, line 1: missing column(s) {', '.join(repr(c) for c in missing)}; a trace "
        f"needs the columns {_expected_columns_text()}; the header has {', '.join(header)}"
    )


def load_trace(
    path: str | PathLike[str],
    *,
    time_scale: float = 1.0,
    rate_per_s: float | None = None,
    max_requests: int | None = None,
) -> list[Request]:
    """Read a workload trace CSV, validating every cell, into requests.

    Two formats are recognised by their header (extra columns are allowed and ignored):

    * Splitwise/Vidur: ``arrived_at`` [s, number >= 0], ``num_prefill_tokens``,
      ``num_decode_tokens``; arrival instants are taken as they are.
    * Azure LLM inference trace: ``TIMESTAMP`` (ISO 8601 date and time such as
      ``2023-11-16 18:15:46.6805900``; an offset such as ``+01:00`` is honoured, a
      timestamp without one is read as UTC),
      ``ContextTokens``, ``GeneratedTokens``; arrivals become seconds since the first row.

    Either format may add the optional :data:`PREFIX_COLUMNS` (both or neither), which say what
    each request shares with others (``Request.prefix_id`` and ``prefix_tokens``): a
    ``prefix_id`` cell is any text, read as an int when it is an integer such as ``42`` (so the
    ids of :func:`~budgetlab.workload.requests_to_frame` round-trip), and empty for a request
    that shares nothing; a ``prefix_tokens`` cell is a whole number of tokens from 0 to the
    request's prompt + output, empty meaning 0, and above 0 only with a ``prefix_id``.

    Token counts must be whole numbers >= 1 (``12`` or ``12.0``). An output of 0 tokens is an
    error, not a skipped row: the simulator's requests always generate their first token, and
    nothing in a trace is dropped silently. Arrival times must be non-decreasing (ties are
    fine). Blank lines are ignored; they hold no request.

    Parameters
    ----------
    path : str or path-like
        The CSV file.
    time_scale : float
        Multiplies every arrival instant, hence every inter-arrival gap [-], > 0: 0.5 replays
        the trace twice as fast (twice the load, half the duration), 2.0 at half the load.
    rate_per_s : float or None
        Instead of ``time_scale``: rescale time so the mean rate,
        ``(num_requests - 1) / (last - first arrival)``, equals this [1/s]. Not both.
    max_requests : int or None
        Keep only the first this many requests [count], >= 1 (the whole file is still
        validated); the rate rescaling then applies to the kept ones.

    Returns
    -------
    list of Request
        In file order; ``request_id`` is the 0-based index of the data row (blank lines not
        counted), ``arrival_at_s`` in seconds, ``prompt_tokens`` and ``output_tokens``, and
        ``prefix_id`` / ``prefix_tokens`` from the prefix columns (None / 0 without them).

    Raises
    ------
    TraceFormatError
        A missing or unreadable file, an empty file or one with only a header, a missing or
        duplicated column (the message lists both formats' columns), a ragged row, or a bad
        cell: empty, non-numeric, NaN/inf or negative time, unparseable timestamp, time going
        backwards, fractional, zero or negative token count, or a prefix column without the
        other, a bad ``prefix_tokens`` cell (not a whole number >= 0, more than the prompt +
        output, or shared tokens without a ``prefix_id``). The message names the file, the
        line (header = line 1) and the column.
        ``rate_per_s`` on requests that all arrive at one instant (no rate to rescale) is
        also refused with this error.
    ValueError, TypeError
        Invalid ``time_scale``, ``rate_per_s`` or ``max_requests``, or both scaling options.
    """
    scale = finite_number("time_scale", time_scale, positive=True, unit="-", **PLAIN_ERRORS)
    target_rate = (
        None
        if rate_per_s is None
        else finite_number("rate_per_s", rate_per_s, positive=True, unit="1/s", **PLAIN_ERRORS)
    )
    if target_rate is not None and scale != 1.0:
        raise ValueError("pass either time_scale or rate_per_s, not both: each one alone sets the replay speed")
    limit = None if max_requests is None else int_at_least("max_requests", max_requests, 1, **PLAIN_ERRORS)

    path = Path(path)
    frame, header = _read_cells(path)
    kind, (time_col, prompt_col, output_col) = _detect_format(path, header)

    blank = (frame == "").all(axis=1).to_numpy()
    keep = np.flatnonzero(~blank)
    if keep.size == 0:
        raise TraceFormatError(
            f"{path}, line 2: the file ends after its header ({', '.join(header)}); a trace "
            "needs at least one data row, one request per line"
        )
    rows = frame.iloc[keep]
    raw_times = rows[time_col].to_numpy(dtype=object)
    if kind == "Azure":
        times, t_bad, t_problem = _parse_timestamps(raw_times)
    else:
        times, t_bad, t_problem = _parse_seconds(raw_times)
    prompts, p_bad, p_problem = _parse_tokens(rows[prompt_col].to_numpy(dtype=object), "prompt")
    outputs, o_bad, o_problem = _parse_tokens(rows[output_col].to_numpy(dtype=object), "output")
    prefix_ids: list[int | str | None] = [None] * keep.size
    shared = np.zeros(keep.size, dtype=np.int64)
    s_bad, s_problem = None, ""
    prefix_present = [c for c in PREFIX_COLUMNS if c in header]
    if len(prefix_present) == 1:
        (absent,) = set(PREFIX_COLUMNS) - set(prefix_present)
        raise TraceFormatError(
            f"{path}, line 1: column {prefix_present[0]!r} needs its companion {absent!r}: a "
            "request shares its first prefix_tokens tokens with the others of its prefix_id"
        )
    if prefix_present:
        totals = prompts.astype(float) + outputs  # NaN where either did not parse
        prefix_ids, shared, s_bad, s_problem = _parse_prefixes(
            rows[PREFIX_ID_COLUMN].to_numpy(dtype=object), rows[PREFIX_TOKENS_COLUMN].to_numpy(dtype=object), totals
        )

    # report the first problem in file order: lowest row, then the format's column order
    checks = [
        (t_bad, time_col, t_problem),
        (p_bad, prompt_col, p_problem),
        (o_bad, output_col, o_problem),
        (s_bad, PREFIX_TOKENS_COLUMN, s_problem),
    ]
    found = [(row, order, column, problem) for order, (row, column, problem) in enumerate(checks) if row is not None]
    first_bad = min(row for row, *_ in found) if found else len(keep)
    back = _first(np.diff(times[:first_bad]) < 0)  # rows before first_bad all parsed
    if back is not None:
        found.append(
            (
                back + 1,
                0,
                time_col,
                f"time goes backwards: {raw_times[back + 1]!r} comes after "
                f"{raw_times[back]!r} on the previous data row; sort the trace by arrival time",
            )
        )
    if found:
        row, _, column, problem = min(found)
        raise _Lines(path, frame).error(int(keep[row]), column, problem)

    if limit is not None:
        times, prompts, outputs = times[:limit], prompts[:limit], outputs[:limit]
        prefix_ids, shared = prefix_ids[:limit], shared[:limit]
    if target_rate is not None:
        span = float(times[-1] - times[0])
        if times.size < 2 or span <= 0:
            raise TraceFormatError(
                f"{path}: cannot rescale to rate_per_s={target_rate:g}: the "
                f"{times.size} request(s) kept all arrive at the same instant, so the trace has "
                "no rate; use time_scale or keep more requests"
            )
        scale = (times.size - 1) / (target_rate * span)
    if scale != 1.0:
        times = times * scale
    columns = zip(times.tolist(), prompts.tolist(), outputs.tolist(), prefix_ids, shared.tolist())
    return [Request(i, t, p, o, prefix_id=k, prefix_tokens=s) for i, (t, p, o, k, s) in enumerate(columns)]


@dataclass(frozen=True, eq=False)
class TraceWorkload:
    """A recorded trace, loaded once and replayed at any offered load by time scaling.

    Replaying at ``rate_per_s`` multiplies every gap by ``time_scale = native_rate_per_s /
    rate_per_s`` (the trace's shape, bursts included, is kept); the first request arrives at
    0 s. The seed is ignored: a trace is one fixed sample.

    Build one with :meth:`from_csv` (any format :func:`budgetlab.workload.load_trace` reads) or
    :meth:`from_requests`.

    Attributes
    ----------
    arrival_at_s : numpy.ndarray
        Arrival instants as recorded [s], non-decreasing.
    prompt_tokens, output_tokens : numpy.ndarray
        Lengths [tokens].
    label : str
        Name in tables.
    prefix_id : tuple or None
        Each request's ``Request.prefix_id`` (int, str or None), or None (default) when no
        request shares anything; replayed as it is.
    prefix_tokens : numpy.ndarray or None
        Each request's ``Request.prefix_tokens`` [tokens]; given with ``prefix_id`` or not at all.
    """

    arrival_at_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    label: str = "trace"
    prefix_id: tuple[int | str | None, ...] | None = None
    prefix_tokens: np.ndarray | None = None

    def __post_init__(self) -> None:
        arrivals = np.array(self.arrival_at_s, dtype=float)
        prompts = np.array(self.prompt_tokens, dtype=float)
        outputs = np.array(self.output_tokens, dtype=float)
        if not (arrivals.ndim == prompts.ndim == outputs.ndim == 1) or not (
            arrivals.size == prompts.size == outputs.size
        ):
            raise ParameterError("arrival_at_s, prompt_tokens and output_tokens must be 1-D and equally long")
        if not np.isfinite(arrivals).all():
            raise ParameterError("trace arrival_at_s must hold finite numbers of seconds")
        _check_replayable(arrivals)
        if np.any(np.diff(arrivals) < 0):
            raise ParameterError("trace arrival_at_s must be non-decreasing; sort the trace by arrival time")
        for tokens in (prompts, outputs):
            if not (np.isfinite(tokens) & (tokens == np.floor(tokens)) & (tokens >= 1)).all():
                raise ParameterError(
                    "trace prompt_tokens and output_tokens must all be whole numbers >= 1 (nothing is rounded)"
                )
        self._freeze(arrivals, prompts.astype(np.int64), outputs.astype(np.int64))
        self._freeze_prefixes(self.prefix_id, self.prefix_tokens)
        if self.prefix_id is not None:
            try:  # Request checks every prefix id and length against its request
                self.requests(rate_per_s=1.0)
            except ValueError as exc:
                raise ParameterError(f"trace {exc}") from None

    def _freeze(self, arrivals: np.ndarray, prompts: np.ndarray, outputs: np.ndarray) -> None:
        """Store the three arrays, read-only."""
        arrays = {"arrival_at_s": arrivals, "prompt_tokens": prompts, "output_tokens": outputs}
        for name, array in arrays.items():
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    def _freeze_prefixes(self, ids: Sequence[int | str | None] | None, tokens: object) -> None:
        """Store the prefix ids as a tuple and the prefix lengths as a read-only int64 array
        (both None when neither is given); Request checks their values when replayed."""
        if ids is None and tokens is None:
            object.__setattr__(self, "prefix_id", None)
            object.__setattr__(self, "prefix_tokens", None)
            return
        if ids is None or tokens is None:
            raise ParameterError("give a trace's prefix_id and prefix_tokens together, or neither")
        numbers = np.array(tokens, dtype=float)
        id_tuple = tuple(int(k) if isinstance(k, np.integer) else k for k in ids)
        if numbers.shape != (self.num_requests,) or len(id_tuple) != self.num_requests:
            raise ParameterError(f"trace prefix_id and prefix_tokens must be 1-D with {self.num_requests} entries")
        if not (np.isfinite(numbers) & (numbers == np.floor(numbers)) & (numbers >= 0)).all():
            raise ParameterError("trace prefix_tokens must all be whole numbers >= 0 (nothing is rounded)")
        array = numbers.astype(np.int64)
        array.setflags(write=False)
        object.__setattr__(self, "prefix_id", id_tuple)
        object.__setattr__(self, "prefix_tokens", array)

    @classmethod
    def _from_loaded(cls, requests: Sequence[Request], *, label: str) -> TraceWorkload:
        """A trace from what :func:`load_trace` returned: every cell and the arrival order are
        already checked, so only the replay condition (two distinct instants) is."""
        arrivals = np.array([r.arrival_at_s for r in requests], dtype=float)
        _check_replayable(arrivals)
        trace = object.__new__(cls)
        object.__setattr__(trace, "label", label)
        trace._freeze(
            arrivals,
            np.array([r.prompt_tokens for r in requests], dtype=np.int64),
            np.array([r.output_tokens for r in requests], dtype=np.int64),
        )
        trace._freeze_prefixes(*_prefix_columns(requests))
        return trace

    def __repr__(self) -> str:
        return f"TraceWorkload({self.label!r}, {self.num_requests} requests, {self.native_rate_per_s:.3g} req/s native)"

    @classmethod
    def from_csv(
        cls, path: str | PathLike[str], *, max_requests: int | None = None, label: str | None = None
    ) -> TraceWorkload:
        """Load a trace CSV (Splitwise/Vidur or Azure columns), validated by
        :func:`budgetlab.workload.load_trace`.

        Parameters
        ----------
        path : str or path-like
            The CSV file.
        max_requests : int or None
            Keep the first this many requests [count] (simulations grow with requests).
        label : str or None
            Name in tables; the file's stem by default.
        """
        reqs = load_trace(path, max_requests=max_requests)
        if label is None:
            label = os.path.splitext(os.path.basename(path))[0]
        return cls._from_loaded(reqs, label=label)

    @classmethod
    def from_requests(cls, requests: Sequence[Request], *, label: str = "trace") -> TraceWorkload:
        """Wrap a list of requests (e.g. from :func:`budgetlab.workload.load_trace`)."""
        reqs = sorted(requests, key=lambda r: r.arrival_at_s)
        prefix_id, prefix_tokens = _prefix_columns(reqs)
        return cls(
            np.array([r.arrival_at_s for r in reqs], dtype=float),
            np.array([r.prompt_tokens for r in reqs], dtype=np.int64),
            np.array([r.output_tokens for r in reqs], dtype=np.int64),
            label=label,
            prefix_id=prefix_id,
            prefix_tokens=prefix_tokens,
        )

    @property
    def num_requests(self) -> int:
        """Requests in the trace [count]."""
        return int(self.arrival_at_s.size)

    @property
    def native_rate_per_s(self) -> float:
        """The trace's own rate, ``(n − 1) / (last − first arrival)`` [1/s]."""
        return (self.num_requests - 1) / float(self.arrival_at_s[-1] - self.arrival_at_s[0])

    def time_scale_for(self, rate_per_s: float) -> float:
        """Factor on every gap that replays the trace at ``rate_per_s`` [-] (2 = half the load)."""
        return self.native_rate_per_s / positive_rate("rate_per_s", rate_per_s)

    def rate_for(self, time_scale: float) -> float:
        """Offered load of a replay with this time scale [1/s]."""
        scale = positive_rate("time_scale", time_scale)
        return self.native_rate_per_s / scale

    def requests(self, *, rate_per_s: float, seed: int = 0) -> list[Request]:
        """The trace replayed at ``rate_per_s`` [1/s], first arrival at 0 s (``seed`` ignored)."""
        scale = self.time_scale_for(rate_per_s)
        random_seed("seed", seed)
        times = (self.arrival_at_s - self.arrival_at_s[0]) * scale
        columns = zip(times.tolist(), self.prompt_tokens.tolist(), self.output_tokens.tolist())
        if self.prefix_id is None or self.prefix_tokens is None:
            return [Request(i, t, p, o) for i, (t, p, o) in enumerate(columns)]
        prefixes = zip(self.prefix_id, self.prefix_tokens.tolist())
        return [
            Request(i, t, p, o, prefix_id=k, prefix_tokens=n)
            for i, ((t, p, o), (k, n)) in enumerate(zip(columns, prefixes))
        ]

    def mean_sequence_tokens(self, *, seed: int = 0) -> float:
        """Mean prompt + output length [tokens]."""
        return float(np.mean(self.prompt_tokens + self.output_tokens))

    def with_fixed_lengths(self, *, seed: int = 0) -> TraceWorkload:
        """This trace's fixed-length twin: the same arrivals, every prompt and every output at
        the trace's mean length (rounded to whole tokens, at least 1); ``seed`` is ignored.
        The twin shares nothing (no prefix columns): its lengths no longer fit the streams.

        See :meth:`SyntheticWorkload.with_fixed_lengths`.
        """
        prompt_tokens, output_tokens = mean_lengths_tokens(self.requests(rate_per_s=1.0, seed=seed))
        return TraceWorkload(
            self.arrival_at_s,
            np.full(self.num_requests, prompt_tokens),
            np.full(self.num_requests, output_tokens),
            label=fixed_lengths_label(prompt_tokens, output_tokens),
        )


def _prefix_columns(
    requests: Sequence[Request],
) -> tuple[tuple[int | str | None, ...] | None, np.ndarray | None]:
    """The requests' prefix ids and lengths [tokens], or (None, None) when none has a prefix id."""
    if all(r.prefix_id is None for r in requests):
        return None, None
    return tuple(r.prefix_id for r in requests), np.array([r.prefix_tokens for r in requests], dtype=np.int64)


def _check_replayable(arrivals: np.ndarray) -> None:
    """A trace has a rate, so can be replayed at another, only with two distinct arrival instants."""
    if arrivals.size < 2 or not arrivals[-1] > arrivals[0]:
        raise ParameterError(
            "a trace to replay at other loads needs at least two requests arriving at different "
            f"instants (it has {arrivals.size}); its rate is undefined otherwise"
        )
