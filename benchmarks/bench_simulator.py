"""Simulator speed: the compiled core against the plain reference, on the full conversation trace.

Run ``python benchmarks/bench_simulator.py`` (``make bench``). It simulates the trace
(``../shared/data/traces/splitwise_conv.csv``: 19,366 requests, ≈ 3,500 s of traffic; a
synthetic workload of the same shape when the file is absent) on ``IdealCost`` H100 SXM +
Llama 3.1 8B, budget 2,048, ``max_num_seqs`` 256, KV pool from memory, and prints, all in one
run so the ratios compare like with like:

- the yardstick: the plain reference (``mode="reference"``: pure Python, one step at a time),
  synchronous engine without a prefix cache;
- the compiled core (``mode="fast"``, the default) on the same engine, and on vLLM 0.33's
  defaults (prefix caching and async scheduling on): wall time (best of ``--repeat``) and its
  ratio to the yardstick (targets, issue 25: >= 100x and >= 40x), and (synchronous) whether its summary equals
  the yardstick's bit for bit;
- a fresh process that imports budgetlab and simulates the trace with the defaults (the
  compiled core loaded from its disk cache), as a ratio to the yardstick (target >= 3x), and
  the first run's compile time when the cache is cold (``--cold``: in a new cache folder).

The machine may be shared: CPU times are printed beside the wall times.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from budgetlab import EngineConfig, IdealCost, conversation_like, hardware, load_trace, model, requests_to_frame
from budgetlab.simulator import simulate

REPO_ROOT = Path(__file__).resolve().parents[1]
TRACE = REPO_ROOT.parent / "shared" / "data" / "traces" / "splitwise_conv.csv"


def h100_llama8b() -> IdealCost:
    """IdealCost for H100 SXM + Llama 3.1 8B from the catalog."""
    return IdealCost(hardware("h100-sxm"), model("llama-3.1-8b"))


def timed(requests: pd.DataFrame, engine: EngineConfig, cost: IdealCost, mode: str):
    """Simulate and summarize once; returns (result, summary, wall s, CPU s)."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = simulate(requests, engine=engine, cost=cost, mode=mode)
    summary = result.summary()
    return result, summary, time.perf_counter() - wall0, time.process_time() - cpu0


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(x == y or (x != x and y != y) for x, y in zip(a.values(), b.values()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="compiled-core repetitions (best is reported)")
    parser.add_argument("--trace", type=Path, default=TRACE, help="Splitwise-format CSV (default: the conv trace)")
    parser.add_argument("--cold", action="store_true", help="also time a first run in an empty compile cache")
    args = parser.parse_args(argv)
    requests, source = workload(args.trace)
    cost = h100_llama8b()
    span = requests["arrival_at_s"].max() - requests["arrival_at_s"].min()
    print("budgetlab simulator benchmark")
    print(f"  workload : {source}: {len(requests):,} requests, {span:,.1f} s of arrivals")
    print(f"  cost     : IdealCost {cost.hardware.name} + {cost.model.name}, budget 2,048, max_num_seqs 256")
    simulate(requests.iloc[:200], engine=EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256), cost=cost)
    sync = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256, **ENGINES["synchronous, no prefix cache"])
    _, ref_summary, ref_wall, ref_cpu = timed(requests, sync, cost, "reference")
    print(f"  yardstick: plain reference, synchronous: {ref_wall:.2f} s wall ({ref_cpu:.2f} s CPU)")
    for label, options in ENGINES.items():
        engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256, **options)
        best = min((timed(requests, engine, cost, "fast") for _ in range(max(args.repeat, 1))), key=lambda r: r[2])
        result, summary, wall, cpu = best
        defaults = not options  # the yardstick's engine is the synchronous one
        target = 40 if defaults else 100
        verdict = "met" if ref_wall / wall >= target else "NOT met"
        same_text = f"; summary identical to the yardstick's: {'yes' if same(ref_summary, summary) else 'NO'}"
        print(
            f"  compiled : {label}: {wall:.3f} s wall ({cpu:.3f} s CPU), {ref_wall / wall:,.0f}x the yardstick "
            f"(target >= {target}x: {verdict}); {summary['num_steps']:,} steps in {result.num_records:,} records"
            + ("" if defaults else same_text)
        )
    fresh = fresh_process_s(args.trace)
    print(
        f"  fresh    : a new process importing budgetlab and simulating the trace with the defaults: "
        f"{fresh:.2f} s, {ref_wall / fresh:.1f}x the yardstick (target >= 3x)"
    )
    if args.cold:
        cold = fresh_process_s(args.trace, cold=True)
        print(f"  cold     : the same in an empty compile cache (the first run on a machine): {cold:.1f} s")


def workload(trace: Path) -> tuple[pd.DataFrame, str]:
    """The conversation trace, or a synthetic workload of its shape when the file is absent."""
    if trace.exists():
        return requests_to_frame(load_trace(trace)), trace.name
    synthetic = requests_to_frame(conversation_like(num_requests=19_366, rate_per_s=5.5, seed=0))
    return synthetic, "synthetic conversation-shaped workload (trace file absent; seed 0)"


def fresh_process_s(trace: Path, *, cold: bool = False) -> float:
    """Wall time of a new Python process that imports budgetlab and simulates the trace with vLLM's
    defaults [s] (interpreter start included); ``cold``: with an empty compile cache."""
    code = (
        "import sys, time\n"
        "start = time.perf_counter()\n"
        "import budgetlab as bl\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "from bench_simulator import h100_llama8b, workload\n"
        f"requests, _ = workload(__import__('pathlib').Path({str(trace)!r}))\n"
        "engine = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)\n"
        "bl.simulate(requests, engine=engine, cost=h100_llama8b()).summary()\n"
    )
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as folder:
        if cold:
            env["BUDGETLAB_CACHE_DIR"] = folder
        begin = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        return time.perf_counter() - begin


#: The engines timed: the seeds' synchronous engine without a prefix cache, and vLLM 0.33's
#: defaults (prefix caching and async scheduling on).
ENGINES = {
    "synchronous, no prefix cache": {"enable_prefix_caching": False, "async_scheduling": False},
    "vLLM 0.33 defaults (prefix caching, async scheduling)": {},
}


if __name__ == "__main__":
    main()
