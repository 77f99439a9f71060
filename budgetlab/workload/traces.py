"""Recorded traces: validated trace CSVs as request columns, and a trace replayed at any load.

:func:`load_trace` reads a Splitwise/Vidur or Azure LLM-inference trace CSV, checking every cell
(the message names the file, line and column of the first bad one), into a
:class:`~budgetlab.workload.frames.RequestColumns`: a sequence of
:class:`~budgetlab.specs.Request` held as arrays. :class:`TraceWorkload` holds a trace once and
replays it at any offered load by scaling its time axis (what :func:`budgetlab.sweep` and
:func:`budgetlab.capacity` take).

A valid trace is read as numbers in one pass of pandas' C reader and checked column by column
(1 M rows in well under a second); a trace that fails any check there is read again cell by cell
as text (:mod:`budgetlab.workload.trace_cells`), which names the first bad cell. Arrival offsets
from the first request are exact even for instants in epoch seconds (``1.7e15`` with
microseconds): above :data:`~budgetlab.workload.trace_cells.EXACT_BELOW_S` they come from the
text's digits, not from the float64 instants.
"""

from __future__ import annotations

import csv
import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

import numpy as np
import pandas as pd

from budgetlab._checks import (
    MAX_TIME_S,
    MAX_TOKENS,
    PLAIN_ERRORS,
    finite_number,
    int_at_least,
    positive_rate,
    random_seed,
)
from budgetlab.errors import ParameterError, TraceFormatError
from budgetlab.specs import Request
from budgetlab.workload.frames import RequestColumns, fixed_lengths_label, mean_lengths_tokens
from budgetlab.workload.trace_cells import (
    AZURE_COLUMNS,
    EXACT_BELOW_S,
    MAX_ARRIVAL_S,
    PREFIX_COLUMNS,
    SPLITWISE_COLUMNS,
    ParsedTrace,
    check_prefix_pair,
    checked_columns,
    decimal_offsets,
    detect_format,
    parse_prefixes,
    read_csv_whole,
    read_header,
    text_cells,
)

__all__ = ["SPLITWISE_COLUMNS", "AZURE_COLUMNS", "PREFIX_COLUMNS", "load_trace", "TraceWorkload"]

_MAX_TOKENS = float(MAX_TOKENS.value)  # the bound on one sequence (also exact as float64 and int64)


def _refuse_nul(path: Path) -> None:
    """Refuse a file holding a NUL byte, naming its line (memory-mapped: no copy of the file).

    Checked before either reader: pandas' C reader cuts a cell at a NUL in some versions
    (2.1 reads ``5\0`` as ``5``), so a binary or corrupted file could load silently."""
    if not path.is_file():
        return  # the readers name a missing file or a folder
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            return
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            at = data.find(b"\0")
            if at != -1:
                line = data[:at].count(b"\n") + 1
                raise TraceFormatError(
                    f"{path}, line {line}: holds a NUL byte (\\0), so it is not a text CSV; "
                    "Fix: export the trace again as plain text"
                )


def _fast_columns(path: Path) -> ParsedTrace | None:
    """The trace read as numbers by pandas' C reader and checked column by column, or None
    when anything is off (a bad header, a cell that is not a valid number, a ragged row, ...):
    then :func:`~budgetlab.workload.trace_cells.checked_columns` reads it again as text and
    names the first problem. Whatever this accepts, that one accepts with the same values (a
    float's parse may differ in its last bit: the C reader's against ``pandas.to_numeric``)."""
    try:
        header = read_header(path)
        kind, (time_col, prompt_col, output_col) = detect_format(path, header)
        prefixed = check_prefix_pair(path, header)
        text_columns = (time_col, *PREFIX_COLUMNS) if kind == "Azure" else PREFIX_COLUMNS
        frame = read_csv_whole(
            path,
            keep_default_na=False,  # an empty or "NaN" cell is not a number: refused below
            dtype=dict.fromkeys(_raw_names(path, header, text_columns), str),
        )
    except (TraceFormatError, OSError, UnicodeError, ValueError, csv.Error, pd.errors.ParserError):
        return None
    if [str(name).strip() for name in frame.columns] != header or frame.empty:
        return None
    frame.columns = header
    prompts = _tokens(frame[prompt_col])
    outputs = _tokens(frame[output_col])
    if prompts is None or outputs is None:
        return None
    if kind == "Azure":
        stamps = pd.to_datetime(frame[time_col].str.strip(), format="ISO8601", utc=True, errors="coerce")
        if stamps.isna().any():
            return None
        times = ((stamps - stamps.iloc[0]) / pd.Timedelta(seconds=1)).to_numpy(dtype=float)
        origin, offsets = 0.0, times
    else:
        column = frame[time_col]
        if column.dtype.kind not in "iuf":
            return None
        times = column.to_numpy(dtype=float)
        if not (np.isfinite(times) & (times >= 0) & (times <= MAX_ARRIVAL_S)).all():
            return None
        origin = float(times[0])
        exact = times - origin if np.abs(times).max() < EXACT_BELOW_S else _exact_offsets(path, header, time_col, times)
        if exact is None:
            return None
        offsets = exact
    if np.any(np.diff(offsets) < 0):
        return None
    prefix_ids: tuple[int | str | None, ...] | None = None
    shared: np.ndarray | None = None
    if prefixed:
        ids, shared, bad, _ = parse_prefixes(
            frame[PREFIX_COLUMNS[0]].str.strip().to_numpy(dtype=object),
            frame[PREFIX_COLUMNS[1]].str.strip().to_numpy(dtype=object),
            prompts.astype(float) + outputs,
        )
        if bad is not None:
            return None
        prefix_ids = tuple(ids)
    return ParsedTrace(kind, times, origin, offsets, prompts, outputs, prefix_ids, shared)


def _raw_names(path: Path, header: list[str], names: Sequence[str]) -> list[str]:
    """The header's names as pandas reads them (unstripped) for the stripped ``names``."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        raw = next(csv.reader(handle))
    return [raw[i] for i, name in enumerate(header) if name in names]


def _tokens(column: pd.Series) -> np.ndarray | None:
    """A token column as int64 if every cell is a whole number in [1, 2**27], else None."""
    if column.dtype.kind not in "iuf":
        return None
    numbers = column.to_numpy(dtype=float)
    if not (np.isfinite(numbers) & (numbers == np.floor(numbers)) & (numbers >= 1) & (numbers <= _MAX_TOKENS)).all():
        return None
    return numbers.astype(np.int64)


def _exact_offsets(path: Path, header: list[str], time_col: str, times: np.ndarray) -> np.ndarray | None:
    """Arrival offsets from the first row, from the text of the time column
    (:func:`~budgetlab.workload.trace_cells.decimal_offsets`): the cells are found in the
    file's bytes when it has no quotes (else read again as strings); None if the rows read do
    not line up with ``times``."""
    position = header.index(time_col)
    raw = path.read_bytes()
    data = np.frombuffer(raw, dtype=np.uint8)
    spans = None if b'"' in raw else _cell_spans(data, position, times.size)
    if spans is None:
        texts = read_csv_whole(path, keep_default_na=False, usecols=[position], dtype=str).iloc[:, 0]
        if texts.size != times.size:
            return None
        data, starts, ends = text_cells(texts.to_numpy(dtype=object))
    else:
        starts, ends = spans
    return decimal_offsets(data, starts, ends, times)


_SEPARATOR = np.zeros(256, dtype=bool)
_SEPARATOR[[ord(","), ord("\n")]] = True


def _cell_spans(data: np.ndarray, position: int, rows: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Where column ``position`` of each data row is in the bytes ``data`` of a file without
    quotes (starts and ends), or None when its lines are not the ``rows`` the C reader saw
    (``\\r``-only line ends, say). A line without a comma holds no request (the reader
    refused any but blank ones already)."""
    separators = np.append(np.flatnonzero(_SEPARATOR[data]), data.size)  # the end ends a last line
    line_ends = np.flatnonzero(data[np.minimum(separators, data.size - 1)] == ord("\n"))
    line_ends = np.append(line_ends[line_ends < separators.size - 1], separators.size - 1)
    first = line_ends[:-1]  # the separator before each data line (the header's is the first)
    commas = line_ends[1:] - first - 1
    first = first[commas > 0]
    if first.size != rows or not rows or (commas[commas > 0] < position).any():
        return None
    return separators[first + position] + 1, separators[first + position + 1]


def load_trace(
    path: str | PathLike[str],
    *,
    time_scale: float = 1.0,
    rate_per_s: float | None = None,
    max_requests: int | None = None,
) -> RequestColumns:
    """Read a workload trace CSV, validating every cell, into request columns.

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

    Token counts must be whole numbers from 1 to 2**27 (``12`` or ``12.0``;
    :data:`~budgetlab._checks.MAX_TOKENS`, far past any context window). An output of 0
    tokens is an error, not a skipped row: the simulator's requests always generate their first
    token, and nothing in a trace is dropped silently. Arrival times must be non-decreasing
    (ties are fine; compared on the text's digits, so epoch instants that round to one float64
    are still ordered). Blank lines are ignored; they hold no request.

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
    RequestColumns
        A sequence of :class:`~budgetlab.specs.Request` in file order (indexing, iterating and
        ``==`` with a list behave as on a list, each ``Request`` built on demand): ``request_id``
        is the 0-based index of the data row (blank lines not counted), ``arrival_at_s`` in
        seconds, ``prompt_tokens`` and ``output_tokens``, and ``prefix_id`` / ``prefix_tokens``
        from the prefix columns (None / 0 without them). Its arrays are ``arrival_at_s``,
        ``prompt_tokens``, ``output_tokens`` (and ``prefix_id``, ``prefix_tokens``), and
        ``origin_s`` (the first arrival; 0 for Azure) with ``offset_s``, each arrival minus it
        from the text's digits (both times the time scale).

    Raises
    ------
    TraceFormatError
        A missing or unreadable file, an empty file or one with only a header, a missing or
        duplicated column (the message lists both formats' columns), a ragged row, or a bad
        cell: empty, non-numeric, NaN/inf or negative time, unparseable timestamp, time going
        backwards, fractional, zero, negative or implausibly large (over 2**27) token count, or
        a prefix column without the
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
    _refuse_nul(path)
    trace = _fast_columns(path)
    if trace is None:  # something to refuse: read it as text, which names the first bad cell
        trace = checked_columns(path)
    keep = slice(0, limit)
    times, offsets = trace.arrival_at_s[keep], trace.offset_s[keep]
    prefix_ids = None if trace.prefix_id is None else trace.prefix_id[keep]
    shared = None if trace.prefix_tokens is None else trace.prefix_tokens[keep]
    if target_rate is not None:
        span = float(offsets[-1] - offsets[0])
        if times.size < 2 or span <= 0:
            raise TraceFormatError(
                f"{path}: cannot rescale to rate_per_s={target_rate:g}: the "
                f"{times.size} request(s) kept all arrive at the same instant, so the trace has "
                "no rate; use time_scale or keep more requests"
            )
        scale = (times.size - 1) / (target_rate * span)
    if offsets.size and float(offsets.max()) * scale > MAX_TIME_S.value:
        last = int(np.argmax(offsets))
        raise TraceFormatError(
            f"{path}: request {last} (data row {last + 1}) arrives {float(offsets[last]) * scale:.6g} s after the "
            f"first, more than {MAX_TIME_S.value:,.0f} s ({MAX_TIME_S.why}); check the arrival column's unit "
            "or time_scale"
        )
    return RequestColumns(
        times * scale,
        trace.prompt_tokens[keep],
        trace.output_tokens[keep],
        prefix_id=prefix_ids,
        prefix_tokens=shared,
        origin_s=trace.origin_s * scale,
        offset_s=offsets * scale,
    )


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
    offset_s : numpy.ndarray
        Each arrival minus the first [s] (not an argument): what a replay scales. From
        :meth:`from_csv` these come from the trace's text, exact even when the instants are
        epoch seconds that float64 rounds (1.7e15 s to 0.25 s).
    """

    arrival_at_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    label: str = "trace"
    prefix_id: tuple[int | str | None, ...] | None = None
    prefix_tokens: np.ndarray | None = None
    offset_s: np.ndarray = field(init=False, repr=False)

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
        _check_replayable(arrivals - arrivals[0] if arrivals.size else arrivals)
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
                self.columns(rate_per_s=1.0)
            except ValueError as exc:
                raise ParameterError(f"trace {exc}") from None

    def _freeze(
        self, arrivals: np.ndarray, prompts: np.ndarray, outputs: np.ndarray, offsets: np.ndarray | None = None
    ) -> None:
        """Store the arrays, read-only (the offsets from the first arrival unless given)."""
        arrays = {
            "arrival_at_s": arrivals,
            "prompt_tokens": prompts,
            "output_tokens": outputs,
            "offset_s": arrivals - arrivals[0] if offsets is None else np.array(offsets, dtype=float),
        }
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
    def _from_loaded(cls, columns: RequestColumns, *, label: str) -> TraceWorkload:
        """A trace from what :func:`load_trace` returned: every cell and the arrival order are
        already checked, so only the replay condition (two distinct instants) is."""
        offsets = np.asarray(columns.offset_s, dtype=float)
        _check_replayable(offsets)
        trace = object.__new__(cls)
        object.__setattr__(trace, "label", label)
        trace._freeze(
            columns.arrival_at_s.copy(), columns.prompt_tokens.copy(), columns.output_tokens.copy(), offsets.copy()
        )
        trace._freeze_prefixes(columns.prefix_id, columns.prefix_tokens)
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
        columns = load_trace(path, max_requests=max_requests)
        if label is None:
            label = os.path.splitext(os.path.basename(path))[0]
        return cls._from_loaded(columns, label=label)

    @classmethod
    def from_requests(cls, requests: Sequence[Request], *, label: str = "trace") -> TraceWorkload:
        """Wrap a list of requests (e.g. from :func:`budgetlab.workload.load_trace`), sorted by
        arrival (ties in list order); a :class:`RequestColumns` is read as arrays, its exact
        ``offset_s`` kept."""
        if isinstance(requests, RequestColumns):
            if len(requests) == 0:
                return cls._from_loaded(requests, label=label)  # refused: no rate
            order = np.argsort(requests.offset_s, kind="stable")
            offsets = requests.offset_s[order]
            arrivals = requests.arrival_at_s[order]
            ordered = RequestColumns(
                arrivals,
                requests.prompt_tokens[order],
                requests.output_tokens[order],
                prefix_id=None if requests.prefix_id is None else tuple(requests.prefix_id[i] for i in order.tolist()),
                prefix_tokens=None if requests.prefix_tokens is None else requests.prefix_tokens[order],
                origin_s=float(arrivals[0]),
                offset_s=offsets - offsets[0],
            )
            # the exact offsets decide whether it has a rate: epoch instants 1 µs apart are
            # one float64 (1.7e12 s rounds to 0.25 ms) but two instants
            return cls._from_loaded(ordered, label=label)
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
        return (self.num_requests - 1) / float(self.offset_s[-1] - self.offset_s[0])

    def time_scale_for(self, rate_per_s: float) -> float:
        """Factor on every gap that replays the trace at ``rate_per_s`` [-] (2 = half the load)."""
        return self.native_rate_per_s / positive_rate("rate_per_s", rate_per_s)

    def rate_for(self, time_scale: float) -> float:
        """Offered load of a replay with this time scale [1/s]."""
        scale = positive_rate("time_scale", time_scale)
        return self.native_rate_per_s / scale

    def requests(self, *, rate_per_s: float, seed: int = 0) -> list[Request]:
        """The trace replayed at ``rate_per_s`` [1/s], first arrival at 0 s (``seed`` ignored)."""
        return list(self.columns(rate_per_s=rate_per_s, seed=seed))

    def columns(self, *, rate_per_s: float, seed: int = 0) -> RequestColumns:
        """:meth:`requests` as columns (no ``Request`` built until one is asked for)."""
        scale = self.time_scale_for(rate_per_s)
        random_seed("seed", seed)
        return RequestColumns(
            self.offset_s * scale,
            self.prompt_tokens,
            self.output_tokens,
            prefix_id=self.prefix_id,
            prefix_tokens=self.prefix_tokens,
        )

    def mean_sequence_tokens(self, *, seed: int = 0) -> float:
        """Mean prompt + output length [tokens]."""
        return float(np.mean(self.prompt_tokens + self.output_tokens))

    def with_fixed_lengths(self, *, seed: int = 0) -> TraceWorkload:
        """This trace's fixed-length twin: the same arrivals, every prompt and every output at
        the trace's mean length (rounded to whole tokens, at least 1); ``seed`` is ignored.
        The twin shares nothing (no prefix columns): its lengths no longer fit the streams.

        See :meth:`SyntheticWorkload.with_fixed_lengths`.
        """
        prompt_tokens, output_tokens = mean_lengths_tokens(self.columns(rate_per_s=1.0, seed=seed))
        twin = TraceWorkload(
            self.arrival_at_s,
            np.full(self.num_requests, prompt_tokens),
            np.full(self.num_requests, output_tokens),
            label=fixed_lengths_label(prompt_tokens, output_tokens),
        )
        twin._freeze(twin.arrival_at_s, twin.prompt_tokens, twin.output_tokens, self.offset_s)
        return twin


def _prefix_columns(
    requests: Sequence[Request],
) -> tuple[tuple[int | str | None, ...] | None, np.ndarray | None]:
    """The requests' prefix ids and lengths [tokens], or (None, None) when none has a prefix id."""
    if all(r.prefix_id is None for r in requests):
        return None, None
    return tuple(r.prefix_id for r in requests), np.array([r.prefix_tokens for r in requests], dtype=np.int64)


def _check_replayable(offsets: np.ndarray) -> None:
    """A trace has a rate, so can be replayed at another, only with two distinct arrival
    instants (``offsets``: from the first arrival [s])."""
    if offsets.size < 2 or not offsets[-1] > offsets[0]:
        raise ParameterError(
            "a trace to replay at other loads needs at least two requests arriving at different "
            f"instants (it has {offsets.size}); its rate is undefined otherwise"
        )
