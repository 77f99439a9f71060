"""Trace loading speed: ``load_trace`` of 1 M rows against pandas' plain CSV read (issue 14).

Run ``python benchmarks/bench_traces.py`` (``make bench``). It builds, in a temporary folder,
a ``--rows``-row trace (default 1,000,000) by repeating the shared Splitwise conversation trace
(``../shared/data/traces/splitwise_conv.csv``, 19,366 requests) end to end in time, and a copy
whose arrivals are epoch seconds with microseconds (``1.7e12 + t``, where float64 keeps only
0.24 ms, so their offsets are read from the digits). For each it prints the best of
``--repeats`` times of

* ``pandas.read_csv(path)``, the plain read (no checks, no requests);
* ``budgetlab.load_trace(path)``, every cell checked, request columns out;
* ``TraceWorkload.from_csv(path)``;

and the ratio load_trace / read_csv, measured in this one run (the target: load_trace of 1 M
rows in at most 1 s, a small multiple of the plain read). Without the shared data it says so and
does nothing.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from budgetlab import load_trace
from budgetlab.workload import TraceWorkload

SHARED_TRACE = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "splitwise_conv.csv"
EPOCH_S = 1_700_000_000_000
"""Where the epoch copy's arrivals start [s]."""


def build_traces(source: Path, folder: Path, rows: int) -> tuple[Path, Path]:
    """A ``rows``-row trace repeating ``source`` end to end (each copy 0.25 s after the last
    arrival of the one before), written with microsecond arrivals, and its epoch twin."""
    base = pd.read_csv(source)
    copies = -(-rows // len(base))
    span_us = round(float(base["arrived_at"].iloc[-1]) * 1e6) + 250_000
    arrival_us = (
        np.round(base["arrived_at"].to_numpy() * 1e6).astype(np.int64)[None, :]
        + span_us * np.arange(copies, dtype=np.int64)[:, None]
    ).ravel()[:rows]
    prompts = np.tile(base["num_prefill_tokens"].to_numpy(), copies)[:rows]
    outputs = np.tile(base["num_decode_tokens"].to_numpy(), copies)[:rows]
    paths = folder / "trace_1m.csv", folder / "trace_1m_epoch.csv"
    for path, start_us in zip(paths, (0, EPOCH_S * 10**6)):
        us = arrival_us + start_us
        seconds = pd.Series(us // 10**6).astype(str) + "." + pd.Series(us % 10**6).astype(str).str.zfill(6)
        frame = pd.DataFrame({"arrived_at": seconds, "num_prefill_tokens": prompts, "num_decode_tokens": outputs})
        frame.to_csv(path, index=False)
    return paths


def _best_s(fn: Callable[[Path], object], path: Path, repeats: int) -> float:
    """The shortest of ``repeats`` timings of ``fn(path)`` [s]."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(path)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the built trace (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=3, help="timings per figure; the best is printed (default 3)")
    parser.add_argument("--source", type=Path, default=SHARED_TRACE, help="trace to repeat (default: shared Splitwise)")
    args = parser.parse_args(argv)
    if not args.source.is_file():
        print(f"trace benchmark skipped: {args.source} not found (the shared data lives next to the repo)")
        return
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    print(
        f"budgetlab trace benchmark: {os.cpu_count()} CPUs (load average {load}), "
        f"{args.rows:,} rows from {args.source.name}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for path in build_traces(args.source, Path(folder), args.rows):
            plain_s = _best_s(pd.read_csv, path, args.repeats)
            load_s = _best_s(load_trace, path, args.repeats)
            workload_s = _best_s(TraceWorkload.from_csv, path, args.repeats)
            columns = load_trace(path)
            print(
                f"{path.name}: pandas.read_csv {plain_s:.3f} s; load_trace {load_s:.3f} s "
                f"({load_s / plain_s:.2f}x the plain read, {load_s / len(columns) * 1e9:.0f} ns per row); "
                f"TraceWorkload.from_csv {workload_s:.3f} s; origin {columns.origin_s:.6f} s, "
                f"last offset {columns.offset_s[-1]:.6f} s"
            )


if __name__ == "__main__":
    main()
