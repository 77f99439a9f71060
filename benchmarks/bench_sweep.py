"""Sweep and capacity-search speed on the conversation-trace shape (issue 6).

Run ``python benchmarks/bench_sweep.py`` (``make bench``). It times, on this machine:

1. a load sweep of 5 budgets × 4 ``max_num_seqs`` × 8 offered loads = 160 simulations of a
   conversation-like workload (Splitwise conversation-trace lengths: prompt median ≈ 1,020,
   output median ≈ 129 tokens; Poisson arrivals), ``--num-requests`` requests per point
   (default 2,000), on ``IdealCost`` H100 SXM + Llama 3.1 8B, with the default executor (a
   local process pool, one worker per CPU);
2. one capacity search under TTFT p90 ≤ 800 ms and ITL p99 ≤ 40 ms (budget 2,304,
   ``max_num_seqs`` 256) with the default 2 % tolerance, in this process.

``--serial`` also runs the sweep in this process, to show the pool's speedup. The machine may
be shared: the CPU time of this process is printed next to the wall time (a pool's workers are
not counted in it).
"""

from __future__ import annotations

import argparse
import os
import time

from budgetlab import SLO, EngineConfig, SerialExecutor, SyntheticWorkload, capacity, sweep

BUDGETS = (512, 1024, 2048, 4096, 8192)
CAPS = (64, 128, 256, 512)
RATES_PER_S = (2.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0)
HARDWARE, MODEL = "h100-sxm", "llama-3.1-8b"
SLO_SEED = SLO(ttft_p90_s=0.8, itl_p99_s=0.040)


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=2000, help="requests per simulation (default 2000)")
    parser.add_argument("--serial", action="store_true", help="also time the sweep in one process")
    args = parser.parse_args(argv)

    workload = SyntheticWorkload.conversation_like(num_requests=args.num_requests)
    grid = dict(budgets=BUDGETS, max_num_seqs=CAPS, rates_per_s=RATES_PER_S, hardware=HARDWARE, model=MODEL)
    num_points = len(BUDGETS) * len(CAPS) * len(RATES_PER_S)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    print(
        f"budgetlab sweep benchmark: {os.cpu_count()} CPUs (load average {load} before starting), "
        f"conversation-like workload, {args.num_requests:,} requests per simulation, "
        f"IdealCost {HARDWARE} + {MODEL}"
    )

    table, wall, cpu = _timed(lambda: sweep(workload, **grid, progress=False))
    simulated_s = float(table["makespan_s"].sum())
    print(
        f"sweep {len(BUDGETS)} budgets × {len(CAPS)} caps × {len(RATES_PER_S)} loads = {num_points} points "
        f"(process pool, {os.cpu_count()} workers): {wall:.1f} s wall ({wall / num_points * 1e3:.0f} ms per point, "
        f"{simulated_s / wall:,.0f} simulated s per wall s; parent CPU {cpu:.1f} s)"
    )
    if args.serial:
        serial, wall_1, cpu_1 = _timed(lambda: sweep(workload, **grid, executor=SerialExecutor(), progress=False))
        assert serial.equals(table), "serial and pooled sweeps differ"
        print(f"sweep in one process: {wall_1:.1f} s wall (CPU {cpu_1:.1f} s); pool speedup {wall_1 / wall:.2f}×")

    engine = EngineConfig(max_num_batched_tokens=2304, max_num_seqs=256)
    result, wall, cpu = _timed(lambda: capacity(workload, slo=SLO_SEED, engine=engine, hardware=HARDWARE, model=MODEL))
    print(
        f"capacity search ({SLO_SEED}, budget 2,304, max_num_seqs 256, tolerance "
        f"{result.tolerance_fraction:.0%}): {wall:.2f} s wall, CPU {cpu:.2f} s, "
        f"{result.num_simulations} simulations -> {result.capacity_per_s:.2f} req/s "
        f"(breaks on {result.binding_limit} at {result.upper_per_s:.2f} req/s)"
    )


if __name__ == "__main__":
    main()
