"""Per-point overhead of the executors: one sweep serially, on a process pool, on a Dask
LocalCluster and on a local Ray cluster (issue 26).

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
import time

import pandas as pd

from budgetlab import SerialExecutor, SyntheticWorkload, sweep
from budgetlab.experiments.executors import default_executor


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
        import distributed

        with (
            distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            executor = client.get_executor()
            _sweep(workload, rates[:1], executor)  # workers import budgetlab and load the compiled core
            runs.append(("Dask LocalCluster (2)", *_sweep(workload, rates, executor)))
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
    for name, table, seconds in runs:
        same = table.equals(serial)
        overhead = (seconds - serial_s / 2) / num_points  # over an ideal two-worker split of the serial time
        print(
            f"  {name:<22}: {seconds / num_points * 1e3:6.1f} ms a point, overhead {overhead * 1e3:+6.1f} ms a point "
            f"over half the serial time; table {'identical' if same else 'DIFFERENT'}"
        )


if __name__ == "__main__":
    main()
