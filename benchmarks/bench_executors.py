"""Per-point overhead of the executors: one sweep serially, on a process pool, on a Dask
LocalCluster (the workload scattered once, and Dask's own executor pickling it into every task)
and on a local Ray cluster (issue 26).

Run ``python benchmarks/bench_executors.py`` (``make bench``). It sweeps 2 budgets × 2
``max_num_seqs`` × ``--num-rates`` loads of a conversation-like workload (``--num-requests``
requests per point, default 300) on ``IdealCost`` H100 SXM + Llama 3.1 8B on each executor
(pools and clusters started and warmed by a first point before the clock starts, two workers
each), checks the tables are identical, and prints each one's wall time per point and its
overhead per point over the serial run. Dask and Ray are skipped when not installed. The machine
may be shared.
"""

from __future__ import annotations

import argparse
import pickle
import time

import pandas as pd

from budgetlab import EngineConfig, SerialExecutor, SyntheticWorkload, TraceWorkload, hardware, model, sweep
from budgetlab.experiments.executors import default_executor
from budgetlab.experiments.shipping import without_workload
from budgetlab.experiments.sweep import SweepPoint


def _sweep(workload, rates, executor):
    started = time.perf_counter()
    table = sweep(
        workload,
        budgets=[512, 2048],
        max_num_seqs=[64, 256],
        rates_per_s=rates,
        hardware="h100-sxm",
        model="llama-3.1-8b",
        cost="ideal",
        executor=executor,
        progress=False,
    )
    return table, time.perf_counter() - started


def _payload_line(num_requests: int) -> None:
    """What one grid point's task pickles when the workload is a trace: whole (Dask's own
    executor, a process pool) and without it (DaskExecutor and RayExecutor send it once)."""
    trace = TraceWorkload.from_requests(
        SyntheticWorkload.conversation_like(num_requests=num_requests).requests(rate_per_s=50.0, seed=1), label="trace"
    )
    point = SweepPoint(trace, 50.0, 0, EngineConfig(), hardware("h100-sxm"), model("llama-3.1-8b"), cost="ideal")
    whole, light = len(pickle.dumps(point)), len(pickle.dumps(without_workload(point)))
    print(
        f"  a {num_requests:,}-request trace: {whole / 1e6:.1f} MB pickled into every task whole, "
        f"{light / 1e3:.1f} kB a task with the trace sent once (DaskExecutor, RayExecutor)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=300)
    parser.add_argument("--num-rates", type=int, default=6)
    args = parser.parse_args(argv)
    workload = SyntheticWorkload.conversation_like(num_requests=args.num_requests)
    rates = [2.0 + 4.0 * i for i in range(args.num_rates)]
    num_points = 4 * len(rates)
    _sweep(workload, rates[:1], SerialExecutor())  # compiled, warm
    serial, serial_s = _sweep(workload, rates, SerialExecutor())
    print("budgetlab executor benchmark")
    print(f"  {num_points} points of {args.num_requests} requests; serial {serial_s / num_points * 1e3:.1f} ms a point")
    runs: list[tuple[str, pd.DataFrame, float]] = []
    pool = default_executor(2)
    try:
        _sweep(workload, rates[:1], pool)  # workers started and warm
        runs.append(("process pool (2)", *_sweep(workload, rates, pool)))
    finally:
        pool.shutdown()
    try:
        from budgetlab.experiments.dask_executor import DaskExecutor

        dask_executor = DaskExecutor(n_workers=2)
        try:
            _sweep(workload, rates[:1], dask_executor)  # workers import budgetlab and load the compiled core
            runs.append(("Dask LocalCluster (2)", *_sweep(workload, rates, dask_executor)))
            plain = dask_executor.client.get_executor()  # Dask's own executor: the workload pickled per task
            runs.append(("Dask, no scatter (2)", *_sweep(workload, rates, plain)))
        finally:
            dask_executor.shutdown()
    except ImportError:
        print("  Dask: not installed")
    try:
        from budgetlab.experiments.ray_executor import RayExecutor

        ray_executor = RayExecutor(num_cpus=2)
        try:
            _sweep(workload, rates[:1], ray_executor)  # workers started and warm
            runs.append(("Ray local cluster (2)", *_sweep(workload, rates, ray_executor)))
        finally:
            ray_executor.shutdown()
    except ImportError:
        print("  Ray: not installed")
    _payload_line(num_requests=100_000)
    for name, table, seconds in runs:
        same = table.equals(serial)
        overhead = (seconds - serial_s / 2) / num_points  # over an ideal two-worker split of the serial time
        print(
            f"  {name:<22}: {seconds / num_points * 1e3:6.1f} ms a point, overhead {overhead * 1e3:+6.1f} ms a point "
            f"over half the serial time; table {'identical' if same else 'DIFFERENT'}"
        )


if __name__ == "__main__":
    main()
