"""`make bench`: run every benchmark in one process and print its figures.

Each benchmark reports ratios and throughputs measured within this one run (the simulator's
fast mode against its reference stepping mode, the process pool against one process), so the
numbers compare like with like on whatever machine runs them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_accuracy
import bench_executors
import bench_fleet
import bench_kv_groups
import bench_scale
import bench_spec
import bench_traces

import bench_simulator
import bench_sweep


def main() -> None:
    print("== simulator ==", flush=True)
    bench_simulator.main([])
    print("\n== scale: memory per request, step log and summary ==", flush=True)
    bench_scale.main([])
    print("\n== KV-cache groups (sliding-window models) ==", flush=True)
    bench_kv_groups.main([])
    print("\n== speculative decoding ==", flush=True)
    bench_spec.main([])
    print("\n== fleets: replicas behind a router ==", flush=True)
    bench_fleet.main([])
    print("\n== trace loading ==", flush=True)
    bench_traces.main([])
    print("\n== sweeps and capacity ==", flush=True)
    bench_sweep.main([])
    print("\n== executors: overhead per grid point ==", flush=True)
    bench_executors.main([])
    print("\n== accuracy against real engines ==", flush=True)
    bench_accuracy.main([])


if __name__ == "__main__":
    main()
