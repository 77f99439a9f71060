"""Fuzz tier for trace loading: malformed traces give a clear TraceFormatError, valid ones load
exactly, and the fast numeric reader agrees with the cell-by-cell text reader.

Every input tried is counted in :data:`TRIED` (per kind); :func:`test_zz_fuzz_counts` reports the
counts in pytest's summary and checks that each kind was tried. Hypothesis runs derandomized, so the
counts and the inputs are the same on every run.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budgetlab._checks import MAX_TOKENS
from budgetlab.errors import BudgetlabError, TraceFormatError
from budgetlab.workload import TraceWorkload, load_trace
from budgetlab.workload.trace_cells import checked_columns
from budgetlab.workload.traces import _fast_columns

from conftest import record_fuzz_counts

TRIED: Counter[str] = Counter()
"""Inputs tried, by kind (module level, so the last test can report them)."""

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
SPLIT = "arrived_at,num_prefill_tokens,num_decode_tokens"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens"
EPOCHS_S = (0, 1_700_000_000, 1_700_000_000_000, 1_700_000_000_000_000)
"""Where generated arrivals start [s]: 0 (Splitwise), and epoch seconds up to 1.7e15, where a
float64 rounds to 0.25 s; the loaded offsets must still be exact to the microsecond."""


def _write(folder: Path, data: str | bytes, name: str = "fuzz.csv") -> Path:
    path = folder / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8", newline="")
    return path


def _load_or_refuse(path: Path) -> object:
    """load_trace's result, or None when it refused with a TraceFormatError; any other
    exception fails the test (it is unhandled)."""
    try:
        return load_trace(path)
    except TraceFormatError as exc:
        assert str(path.name) in str(exc) or "does not exist" in str(exc)
        return None


def _routes_agree(path: Path) -> None:
    """Whatever the fast reader accepts, the text reader accepts with the same columns."""
    fast = _fast_columns(path)
    if fast is None:
        return
    text = checked_columns(path)
    assert np.array_equal(fast.prompt_tokens, text.prompt_tokens)
    assert np.array_equal(fast.output_tokens, text.output_tokens)
    np.testing.assert_allclose(fast.arrival_at_s, text.arrival_at_s, rtol=1e-15, atol=0)
    np.testing.assert_allclose(fast.offset_s, text.offset_s, rtol=1e-12, atol=1e-9)
    assert fast.prefix_id == text.prefix_id


# --------------------------------------------------------------------------------------------
# Valid traces: every value loaded exactly (no silent wrong answer)
# --------------------------------------------------------------------------------------------

rows = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=10**7),  # gap [us]
        st.integers(min_value=1, max_value=MAX_TOKENS.value),  # prompt [tokens], up to the bound
        st.integers(min_value=1, max_value=20_000),  # output [tokens]
    ),
    min_size=1,
    max_size=30,
)


def _seconds_text(epoch_s: int, us: int, style: int) -> str:
    whole, part = epoch_s + us // 10**6, us % 10**6
    if style == 0:
        return f"{whole}.{part:06d}"
    if style == 1:  # trailing zeros dropped, an integer where whole
        return f"{whole}.{part:06d}".rstrip("0").rstrip(".") if part else str(whole)
    return f" {whole}.{part:06d}0 "  # surrounding blanks, an extra digit


@FUZZ
@given(
    rows=rows,
    epoch=st.sampled_from(EPOCHS_S),
    style=st.integers(0, 2),
    crlf=st.booleans(),
    quoted_note=st.booleans(),
    blank_lines=st.booleans(),
)
def test_valid_traces_load_exactly(rows, epoch, style, crlf, quoted_note, blank_lines):
    TRIED["valid trace"] += 1
    arrival_us = np.cumsum([0] + [gap for gap, _, _ in rows[1:]]).tolist()
    end = "\r\n" if crlf else "\n"
    lines = [SPLIT + (",note" if quoted_note else "")]
    for i, (us, (_, prompt, output)) in enumerate(zip(arrival_us, rows)):
        cells = [_seconds_text(epoch, us, style), str(prompt), str(output)]
        lines.append(",".join(cells + (['"a, b\nc"'] if quoted_note else [])))
        if blank_lines and i % 3 == 0:
            lines.append("")
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder), end.join(lines) + end)
        loaded = load_trace(path)
        _routes_agree(path)
        replayable = len(rows) > 1 and arrival_us[-1] > 0
        replay = TraceWorkload.from_csv(path) if replayable else None
    assert len(loaded) == len(rows)
    assert loaded.prompt_tokens.tolist() == [p for _, p, _ in rows]
    assert loaded.output_tokens.tolist() == [o for _, _, o in rows]
    expected = [(us - arrival_us[0]) / 1e6 for us in arrival_us]
    np.testing.assert_allclose(loaded.offset_s, expected, rtol=1e-12, atol=1e-12)
    firsts = [float(_seconds_text(epoch, us, style)) for us in arrival_us]
    np.testing.assert_allclose(loaded.arrival_at_s, firsts, rtol=1e-15, atol=0)
    assert loaded.origin_s == pytest.approx(epoch, rel=1e-15, abs=0)
    if replay is not None:  # replayed from the exact offsets, first arrival at 0 s
        np.testing.assert_allclose(replay.offset_s, expected, rtol=1e-12, atol=1e-12)
        again = TraceWorkload.from_requests(loaded).requests(rate_per_s=replay.native_rate_per_s)
        np.testing.assert_allclose([r.arrival_at_s for r in again], expected, rtol=1e-9, atol=1e-12)


def test_epoch_instants_one_microsecond_apart_are_two_instants(tmp_path):
    """Found by the fuzz tier: at 1.7e12 s two arrivals 1 µs apart are one float64, but a
    replay of the loaded columns must still see two instants (from the exact offsets)."""
    path = _write(tmp_path, f"{SPLIT}\n1700000000000.000000,1,1\n1700000000000.000001,1,1\n")
    loaded = load_trace(path)
    assert loaded.arrival_at_s[0] == loaded.arrival_at_s[1] and loaded.offset_s.tolist() == [0.0, 1e-6]
    for trace in (TraceWorkload.from_requests(loaded), TraceWorkload.from_csv(path)):
        assert trace.offset_s.tolist() == [0.0, 1e-6]
        assert trace.native_rate_per_s == pytest.approx(1e6)


# --------------------------------------------------------------------------------------------
# One bad cell in a valid trace: refused, naming its line and column
# --------------------------------------------------------------------------------------------

BAD_TOKENS = (
    "",
    "0",
    "-3",
    "2.5",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e400",
    "9" * 30,
    str(2**53 + 2),
    "lots",
    "True",
    "0x10",
    "\uff11\uff12",  # fullwidth digits
    "1_000",
    '"1,000"',
    "12 13",
    "caf\u00e9",
    "\u202e7",
    "None",
    "NA",
)
BAD_TIMES = ("", "nan", "inf", "-inf", "-1", "-0.5", "soon", "1e400", "3e15", "\uff11", "0x1p3", "NULL", "\u00a0")


@FUZZ
@given(
    rows=rows,
    epoch=st.sampled_from(EPOCHS_S),
    where=st.integers(min_value=0),
    column=st.integers(0, 2),
    pick=st.integers(min_value=0),
)
def test_one_bad_cell_is_refused_with_its_line_and_column(rows, epoch, where, column, pick):
    TRIED["bad cell"] += 1
    arrival_us = np.cumsum([0] + [gap for gap, _, _ in rows[1:]]).tolist()
    table = [[_seconds_text(epoch, us, 0), str(p), str(o)] for us, (_, p, o) in zip(arrival_us, rows)]
    row = where % len(table)
    bad = BAD_TIMES[pick % len(BAD_TIMES)] if column == 0 else BAD_TOKENS[pick % len(BAD_TOKENS)]
    table[row][column] = bad
    name = SPLIT.split(",")[column]
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder), "\n".join([SPLIT] + [",".join(cells) for cells in table]) + "\n")
        if all(cell.strip() == "" for cell in table[row]) or (bad == "" and len(table) == 1 and column == 0):
            return  # a blank row is no request (and may leave a header-only file): not a bad cell
        with pytest.raises(TraceFormatError) as info:
            load_trace(path)
    message = str(info.value)
    if "cells but the header has" not in message:  # a quoted comma makes a ragged row
        assert f"line {row + 2}," in message and repr(name) in message, message


# --------------------------------------------------------------------------------------------
# Garbage: random bytes, random text under a valid header, broken structure
# --------------------------------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=300), header=st.sampled_from(["", SPLIT + "\n", AZURE + "\n"]))
def test_binary_garbage_is_refused_or_read_consistently(data, header):
    TRIED["binary"] += 1
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder), header.encode() + data)
        loaded = _load_or_refuse(path)
        if loaded is not None:
            _routes_agree(path)


cell_text = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["0", "1", "2.5", "1e3", "nan", "inf", "-1", "", " ", '"', "\x00", "12.0", "+4"]),
    st.integers(min_value=-10, max_value=10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@FUZZ
@given(
    header=st.sampled_from([SPLIT, AZURE, SPLIT + ",prefix_id,prefix_tokens", SPLIT + ",extra"]),
    table=st.lists(st.lists(cell_text, min_size=1, max_size=6), max_size=8),
)
def test_random_cells_are_refused_or_read_consistently(header, table):
    TRIED["random cells"] += 1
    text = header + "\n" + "\n".join(",".join(cells) for cells in table)
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder), text)
        loaded = _load_or_refuse(path)
        if loaded is not None:
            _routes_agree(path)
            assert np.all(np.diff(loaded.offset_s) >= 0)
            assert np.all(loaded.prompt_tokens >= 1) and np.all(loaded.output_tokens >= 1)
            assert np.all(np.isfinite(loaded.arrival_at_s))


STRUCTURE = {
    "empty file": b"",
    "blank lines only": b"\n\n \n",
    "header only": (SPLIT + "\n").encode(),
    "header, blank rows": (SPLIT + "\n,,\n\n").encode(),
    "duplicated column": (SPLIT + ",num_decode_tokens\n0,1,1,1\n").encode(),
    "duplicated after strip": (SPLIT + ", arrived_at\n0,1,1,1\n").encode(),
    "both formats": (SPLIT + "," + AZURE + "\n").encode(),
    "missing column": b"arrived_at,num_prefill_tokens\n0,5\n",
    "renamed columns": b"time,prompt,output\n0,5,5\n",
    "lone prefix column": (SPLIT + ",prefix_id\n0,5,5,a\n").encode(),
    "long row": (SPLIT + "\n0,5,5\n1,5,5,9\n").encode(),
    "unclosed quote": (SPLIT + '\n0,5,5\n"1,5,5\n').encode(),
    "NUL in header": b"arrived_at\x00,num_prefill_tokens,num_decode_tokens\n0,5,5\n",
    "NUL in a row": (SPLIT + "\n0,5,5\n1,5\x00,5\n").encode(),
    "latin-1 bytes": (SPLIT + "\n0,5,5\n1,5,5 caf").encode() + b"\xe9\n",
    "UTF-16": (SPLIT + "\n0,5,5\n").encode("utf-16"),
    "unicode garbage": ("\u2603,\u00e9\u00e8,\U0001f600\n\u202e,\u0000,x\n").encode(),
    "huge prompt": (SPLIT + "\n0," + "9" * 400 + ",5\n").encode(),
    "huge time": (SPLIT + "\n1e308,5,5\n1e309,5,5\n").encode(),
    "ns epoch in seconds": (SPLIT + "\n1700000000000000000,5,5\n1700000000000000001,5,5\n").encode(),
    "NaN tokens": (SPLIT + "\n0,NaN,5\n").encode(),
    "inf output": (SPLIT + "\n0,5,inf\n").encode(),
    "backwards epoch within one float": (SPLIT + "\n1700000000000000.3,5,5\n1700000000000000.2,5,5\n").encode(),
    "azure bad timestamp": (AZURE + "\n2023-11-16 18:15:46,5,5\n2023-13-45 99:00:00,5,5\n").encode(),
    "azure numbers as time": (AZURE + "\n12,5,5\n").encode(),
    "carriage returns only": (SPLIT + "\r0,5,5\r1,5,x\r").encode(),
}


@pytest.mark.parametrize("case", list(STRUCTURE))
def test_malformed_structure_is_refused(tmp_path, case):
    TRIED["structure"] += 1
    path = _write(tmp_path, STRUCTURE[case], name="broken.csv")
    with pytest.raises(TraceFormatError, match=r"broken\.csv"):
        load_trace(path)


def test_missing_path_and_directory_are_refused(tmp_path):
    TRIED["structure"] += 3
    with pytest.raises(TraceFormatError, match="does not exist"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(TraceFormatError, match="directory"):
        load_trace(tmp_path)
    with pytest.raises(TraceFormatError, match="directory"):
        TraceWorkload.from_csv(tmp_path)


def test_refusals_are_budgetlab_errors():
    assert issubclass(TraceFormatError, BudgetlabError) and issubclass(TraceFormatError, ValueError)


def test_zz_fuzz_counts():
    """Reports how many inputs the fuzz tier tried (in pytest's summary); runs last in the file."""
    if not TRIED:
        pytest.skip("run together with the fuzz tests above to count their inputs")
    # every test above asserts each of its inputs, so reaching here means none was unhandled
    # or silently wrong; the counts appear in pytest's summary ("fuzz tier")
    for kind, tried in sorted(TRIED.items()):
        record_fuzz_counts(f"malformed and epoch traces: {kind}", tried=tried, unhandled=0, silent=0)
    if "structure" in TRIED:
        assert TRIED["structure"] >= len(STRUCTURE)
