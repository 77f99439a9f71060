"""Scheduling with KV-cache groups: what a hybrid model's bookkeeping costs per simulation.

Run ``python benchmarks/bench_kv_groups.py`` (``make bench``). It simulates the Splitwise
conversation trace (``../shared/data/traces/splitwise_conv.csv``, or a synthetic workload of the
same shape when the file is absent; ``--limit`` requests, default 4,000) on
``ConstantCost(20 ms)`` with a 2,048 budget and 256 sequences on a pool of 40,000 blocks, with
vLLM 0.33's defaults (prefix caching and async on) and with both off, for three group
patterns: one full-attention group (the fast mode), GPT-OSS's 1:1 sliding (128) and full, and
Gemma 3's six sliding (1,024) groups and one full. It prints each run's wall time and its ratio
to the full-attention run of the same options, measured in this one run.

A run with several groups is scheduled step by step (the fast mode's decode-run jumps are for
one full-attention group), so the ratio is what the compiled core of issue 25 must remove.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from budgetlab import ConstantCost, EngineConfig, conversation_like, load_trace, requests_to_frame
from budgetlab.simulator import simulate

REPO_ROOT = Path(__file__).resolve().parents[1]
TRACE = REPO_ROOT.parent / "shared" / "data" / "traces" / "splitwise_conv.csv"
PATTERNS = {
    "full": ("full",),
    "gpt-oss 1:1": (("sliding_window", 128), "full"),
    "gemma-3 6+1": (("sliding_window", 1024),) * 6 + ("full",),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=4000, help="requests simulated (the trace's first N)")
    args = parser.parse_args(argv)
    if TRACE.exists():
        requests = requests_to_frame(load_trace(TRACE)).iloc[: args.limit]
        source = f"{TRACE.name}, first {len(requests):,} requests"
    else:
        requests = requests_to_frame(conversation_like(rate_per_s=5.5, num_requests=args.limit, seed=0))
        source = f"synthetic conversation-like workload, {len(requests):,} requests"
    print(f"input: {source}; ConstantCost(20 ms), budget 2,048, 256 sequences, 40,000 blocks")
    cost = ConstantCost(0.02)
    for defaults in (True, False):
        base = None
        label = "prefix caching + async (vLLM defaults)" if defaults else "synchronous, no prefix cache"
        print(f"-- {label}")
        for name, groups in PATTERNS.items():
            engine = EngineConfig(
                max_num_seqs=256,
                num_kv_blocks=40_000,
                kv_groups=groups,
                enable_prefix_caching=defaults,
                async_scheduling=defaults,
            )
            start = time.perf_counter()
            result = simulate(requests, engine=engine, cost=cost)
            wall = time.perf_counter() - start
            base = wall if base is None else base
            print(
                f"  {name:<13} {wall:6.2f} s  {wall / base:5.2f}x the full-attention run  "
                f"({len(result.steps):,} steps, {result.summary()['num_preemptions']:.0f} preemptions)"
            )


if __name__ == "__main__":
    main()
