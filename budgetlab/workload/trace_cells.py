"""Reading a trace CSV cell by cell, as text: the route that names the first bad cell.

:func:`read_header` and :func:`detect_format` read and check line 1; :func:`checked_columns`
reads every cell as stripped text, checks each column as a whole (NumPy/pandas over the
column, never a Python loop over rows), and raises a :class:`~budgetlab.errors.TraceFormatError`
naming the file, the line (quoted line breaks counted) and the column of the first bad cell in
file order, or returns the parsed columns (:class:`ParsedTrace`).
:func:`budgetlab.workload.load_trace` first tries a faster numeric read and comes here only
when that one finds anything to refuse, so the messages are always these.

:func:`decimal_offsets` turns the text of arrival instants into offsets from the first one
without the float64 rounding of the instants themselves: ``1700000000000.123456`` and
``1700000000000.123457`` are 1 us apart although both round to the same float64 ± 0.12 ms.
"""

from __future__ import annotations

import csv
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from budgetlab._checks import MAX_TOKENS
from budgetlab.errors import TraceFormatError
from budgetlab.workload.frames import PREFIX_ID_COLUMN, PREFIX_TOKENS_COLUMN

__all__ = [
    "SPLITWISE_COLUMNS",
    "AZURE_COLUMNS",
    "PREFIX_COLUMNS",
    "ParsedTrace",
    "read_header",
    "read_csv_whole",
    "detect_format",
    "check_prefix_pair",
    "parse_prefixes",
    "checked_columns",
    "decimal_offsets",
    "text_cells",
    "EXACT_BELOW_S",
    "MAX_ARRIVAL_S",
]

SPLITWISE_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
"""Splitwise/Vidur trace columns: arrival [s], prompt [tokens], output [tokens]."""

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
"""Azure LLM inference trace columns: datetime string, prompt [tokens], output [tokens]."""

PREFIX_COLUMNS = (PREFIX_ID_COLUMN, PREFIX_TOKENS_COLUMN)
"""Optional trace columns, in either format: ``prefix_id`` (text naming a shared token stream;
empty: none) and ``prefix_tokens`` (how many leading tokens are that stream [tokens])."""

_FORMATS = {"Splitwise/Vidur": SPLITWISE_COLUMNS, "Azure": AZURE_COLUMNS}
_PARSER_LINE_RE = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")

MAX_ARRIVAL_S = 2.0**51
"""The largest Splitwise ``arrived_at`` accepted [s] (71 million years): up to it the offsets
from the first arrival are exact from the text (:func:`decimal_offsets`)."""

EXACT_BELOW_S = 2.0**22
"""Arrival instants below this [s] (48 days) are exact to 1 ns as float64, so their offsets
are taken from the floats; at or above it they are taken from the text
(:func:`decimal_offsets`)."""


@dataclass(frozen=True, eq=False)
class ParsedTrace:
    """A trace's checked columns, in file order (blank lines dropped).

    Attributes
    ----------
    format : str
        ``"Splitwise/Vidur"`` or ``"Azure"``.
    arrival_at_s : numpy.ndarray of float64
        Arrival instants [s]: as written (Splitwise) or since the first row (Azure).
    origin_s : float
        The first arrival [s] (0 for Azure).
    offset_s : numpy.ndarray of float64
        Each arrival minus the first, exact from the text [s].
    prompt_tokens, output_tokens : numpy.ndarray of int64
        Lengths [tokens].
    prefix_id : tuple or None
        The ``prefix_id`` cells (None where empty, int where integer text), or None without
        the prefix columns.
    prefix_tokens : numpy.ndarray of int64 or None
        The ``prefix_tokens`` cells [tokens] (0 where empty), or None without the columns.
    """

    format: str
    arrival_at_s: np.ndarray
    origin_s: float
    offset_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_id: tuple[int | str | None, ...] | None
    prefix_tokens: np.ndarray | None


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


_MAX_TOKENS = MAX_TOKENS.value  # the bound on one sequence (also exact as float64 and int64)


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
        problem = f"{text!r} tokens is more than {MAX_TOKENS.value:,} ({MAX_TOKENS.why})"
    else:
        problem = f"expected a whole number of tokens >= 1, got {text!r}"
    return numbers, bad, problem


def _parse_seconds(raw: np.ndarray) -> tuple[np.ndarray, int | None, str]:
    """Splitwise ``arrived_at``: finite numbers of seconds from 0 to :data:`MAX_ARRIVAL_S`."""
    numbers = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(dtype=float)
    good = np.isfinite(numbers) & (numbers >= 0) & (numbers <= MAX_ARRIVAL_S)
    bad = _first(~good)
    if bad is None:
        return numbers, None, ""
    text = raw[bad]
    if text == "":
        problem = "is empty; every row needs its arrival time in seconds"
    elif not np.isfinite(numbers[bad]):
        problem = f"expected a finite number of seconds, got {text!r}"
    elif numbers[bad] > MAX_ARRIVAL_S:
        problem = (
            f"{text!r} s is implausibly large (more than 2**51 s, 71 million years, where float64 "
            "cannot keep the gaps between arrivals); Fix: write the arrivals in seconds (an epoch "
            "in nanoseconds is 1e9 times too large)"
        )
    else:
        problem = f"expected a number of seconds >= 0, got {text!r}"
    return numbers, bad, problem


_INT_TEXT_RE = re.compile(r"[+-]?\d+")


def parse_prefixes(
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


def read_header(path: Path) -> list[str]:
    """Line 1 of the CSV, its names stripped.

    Raises
    ------
    TraceFormatError
        A missing, unreadable or empty file, or a name given twice.
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
    return header


def _read_cells(path: Path) -> tuple[pd.DataFrame, list[str]]:
    """The CSV as stripped strings (object dtype) and its header.

    Blank lines are kept, as rows of empty strings, so row ``i`` sits on line ``i + 2``.
    """
    header = read_header(path)
    try:
        frame = read_csv_whole(path, dtype=str, keep_default_na=False, na_filter=False, skip_blank_lines=False)
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


def read_csv_whole(path: Path, **options: Any) -> pd.DataFrame:
    """``pandas.read_csv(path, index_col=False, encoding="utf-8-sig", **options)``, refusing a
    row with more cells than the header.

    pandas raises on such a row, except when the first data row is one: then it drops the
    extra cells with a warning (``index_col=False``). Those are refused here too, unless every
    extra cell is empty (a trailing comma on each line, which pandas' option is for).

    Raises
    ------
    TraceFormatError
        A row with more non-empty cells than the header (names its line).
    pandas.errors.ParserError, UnicodeDecodeError
        As ``pandas.read_csv``.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pd.errors.ParserWarning)
        warnings.simplefilter("ignore", pd.errors.DtypeWarning)  # a mixed column: checked after
        frame = pd.read_csv(path, index_col=False, encoding="utf-8-sig", **options)
    if any(issubclass(w.category, pd.errors.ParserWarning) for w in caught):
        _refuse_long_rows(path)
    return frame


def _refuse_long_rows(path: Path) -> None:
    """Raise for the first row with a non-empty cell beyond the header's columns, if any."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        width = len(next(reader, []))
        for cells in reader:
            if len(cells) > width and any(cell.strip() for cell in cells[width:]):
                raise TraceFormatError(
                    f"{path}, line {reader.line_num}: {len(cells)} cells but the header has {width} columns"
                )


def _expected_columns_text() -> str:
    return " or ".join(f"{', '.join(cols)} ({name})" for name, cols in _FORMATS.items())


def detect_format(path: Path, header: list[str]) -> tuple[str, tuple[str, str, str]]:
    """The trace format the header names and its time, prompt and output columns.

    Raises
    ------
    TraceFormatError
        Both formats' columns, or neither's (the message names the missing ones).
    """
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


def check_prefix_pair(path: Path, header: list[str]) -> bool:
    """Whether the header has the :data:`PREFIX_COLUMNS`; refuses one without the other."""
    present = [c for c in PREFIX_COLUMNS if c in header]
    if len(present) == 1:
        (absent,) = set(PREFIX_COLUMNS) - set(present)
        raise TraceFormatError(
            f"{path}, line 1: column {present[0]!r} needs its companion {absent!r}: a "
            "request shares its first prefix_tokens tokens with the others of its prefix_id"
        )
    return bool(present)


def checked_columns(path: Path) -> ParsedTrace:
    """Every cell of the trace CSV at ``path`` read as text and checked, column by column.

    Raises
    ------
    TraceFormatError
        The first problem in file order (lowest line, then the format's column order), naming
        the file, the line and the column; see :func:`budgetlab.workload.load_trace`.
    """
    frame, header = _read_cells(path)
    kind, (time_col, prompt_col, output_col) = detect_format(path, header)
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
    prefix_ids: tuple[int | str | None, ...] | None = None
    shared: np.ndarray | None = None
    s_bad, s_problem = None, ""
    if check_prefix_pair(path, header):
        totals = prompts.astype(float) + outputs  # NaN where either did not parse
        ids, shared, s_bad, s_problem = parse_prefixes(
            rows[PREFIX_ID_COLUMN].to_numpy(dtype=object), rows[PREFIX_TOKENS_COLUMN].to_numpy(dtype=object), totals
        )
        prefix_ids = tuple(ids)

    # report the first problem in file order: lowest row, then the format's column order
    checks = [
        (t_bad, time_col, t_problem),
        (p_bad, prompt_col, p_problem),
        (o_bad, output_col, o_problem),
        (s_bad, PREFIX_TOKENS_COLUMN, s_problem),
    ]
    found = [(row, order, column, problem) for order, (row, column, problem) in enumerate(checks) if row is not None]
    first_bad = min(row for row, *_ in found) if found else len(keep)
    parsed = times[:first_bad]  # the rows before first_bad all parsed
    if kind == "Azure" or not parsed.size or np.abs(parsed).max() < EXACT_BELOW_S:
        offsets = parsed - (parsed[0] if parsed.size else 0.0)
    else:
        offsets = decimal_offsets(*text_cells(raw_times[:first_bad]), parsed)
    back = _first(np.diff(offsets) < 0)
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
    return ParsedTrace(
        kind,
        times,
        0.0 if kind == "Azure" else float(times[0]),
        offsets,
        prompts.astype(np.int64),
        outputs.astype(np.int64),
        prefix_ids,
        shared,
    )


def text_cells(texts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stripped cell texts as one ASCII byte buffer and each cell's start and end in it (what
    :func:`decimal_offsets` reads); a cell that is not ASCII becomes empty (so its float is
    read instead)."""
    encoded = [text.strip().encode("ascii") if text.isascii() else b"" for text in texts]
    ends = np.cumsum([len(cell) for cell in encoded], dtype=np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), ends - np.array([len(c) for c in encoded]), ends


_CHUNK_ROWS = 1 << 17  # rows parsed at once: bounds the digit matrices to a few MB each
_DIGITS = 18  # fraction digits read: 10**18 - 1 fits int64
_BLANK = np.zeros(256, dtype=bool)
_BLANK[[0, ord(" "), ord("\t"), ord("\r"), ord("\n")]] = True
_PLACES = 10 ** np.arange(_DIGITS - 1, -1, -1, dtype=np.int64)  # 1e17 ... 1


def decimal_offsets(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Offsets of decimal numbers from the first one, from their text [s].

    Parameters
    ----------
    buffer : numpy.ndarray of uint8
        Bytes holding the cells (a file's, or :func:`text_cells`').
    starts, ends : numpy.ndarray of int
        Where cell ``i`` is: ``buffer[starts[i]:ends[i]]`` (surrounding blanks allowed).
    values : numpy.ndarray of float64
        The same cells as parsed floats (each cell a finite number to pandas' reader, so
        ``[sign]digits[.digits][e[sign]digits]``).

    Returns
    -------
    numpy.ndarray of float64
        ``value[i] - value[0]`` from the digits, rounded once. A cell with a point and no
        exponent, below 2**51, has its fraction read from the (first 18) digits after the
        point and its integer part is ``rint(value - fraction)``, exact there (the float is
        within a quarter of the text); any other cell (an integer, ``1.7e12``, one whose digits
        disagree with its float) is split from its float, which is exact for an integer below
        2**53 and all an exponent form says.
    """
    point, has_point = _first_at_or_after(np.flatnonzero(buffer == ord(".")), starts, ends)
    _, exponent = _first_at_or_after(np.flatnonzero((buffer | 0x20) == ord("e")), starts, ends)  # e or E
    plain = has_point & ~exponent & (np.abs(values) < 2.0**51)
    padded = np.concatenate((buffer, np.zeros(_DIGITS + 1, dtype=np.uint8)))  # windows never leave it
    whole = np.empty(values.size, dtype=np.int64)
    fraction = np.empty(values.size, dtype=np.int64)  # [1e-18 s]
    for first in range(0, values.size, _CHUNK_ROWS):
        part = slice(first, first + _CHUNK_ROWS)
        whole[part], fraction[part] = _split_decimals(padded, point[part], ends[part], plain[part], values[part])
    return (whole - whole[0]).astype(float) + (fraction - fraction[0]) / 1e18


def _first_at_or_after(positions: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first of the sorted ``positions`` in each ``[starts[i], ends[i])`` (``ends[i]``
    where there is none), and whether there is one."""
    if not positions.size:
        return ends, np.zeros(ends.size, dtype=bool)
    index = np.searchsorted(positions, starts)
    found = np.where(index < positions.size, positions[np.minimum(index, positions.size - 1)], ends)
    inside = found < ends
    return np.where(inside, found, ends), inside


def _split_decimals(
    padded: np.ndarray, point: np.ndarray, ends: np.ndarray, plain: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Integer parts and fractions [1e-18] of the cells whose point is at ``point`` (see
    :func:`decimal_offsets`); ``plain``: the cells with a point and no exponent."""
    after = np.lib.stride_tricks.sliding_window_view(padded, _DIGITS)[point + 1]
    places = np.arange(_DIGITS)[None, :]
    digit = (after >= ord("0")) & (after <= ord("9")) & (places < (ends - point - 1)[:, None])
    count = np.where(digit.all(axis=1), _DIGITS, np.argmin(digit, axis=1))  # digits right after the point
    follows = point + 1 + count
    plain = plain & ((count == _DIGITS) | (follows >= ends) | _BLANK[padded[follows]])
    digits = (np.where(places < count[:, None], after, ord("0")).astype(np.int64) - ord("0")) @ _PLACES
    fraction = digits / 1e18
    whole = np.rint(np.where(plain, values - fraction, 0.0))
    scale = np.spacing(np.maximum(np.abs(values), 1.0))
    plain &= np.abs(whole + fraction - values) <= 4 * scale  # the text is the float
    floor = np.floor(np.where(np.abs(values) < 2.0**62, values, 0.0))
    rest = np.rint((values - floor) * 1e18).astype(np.int64)
    return np.where(plain, whole, floor).astype(np.int64), np.where(plain, digits, rest)
