"""Speculative decoding: what scheduling drafts costs per simulation, and what it predicts.

Run ``python benchmarks/bench_spec.py`` (``make bench``). It simulates the Splitwise conversation
trace (``../shared/data/traces/splitwise_conv.csv``, or a synthetic workload of the same shape when
the file is absent; ``--limit`` requests, default 4,000) on an H100 with Llama 3.1 8B, vLLM's
default budget and cap, the real-engine cost (``cost="typical"``, with the drafter's own work),
prefix caching off (EAGLE-family drafters with prefix caching are not simulated yet), synchronous
and pipelined, for ``k = 0`` (no speculation, the fast mode) and EAGLE-3 with ``k = 1, 3, 5`` at
the published acceptance (``default_acceptance("eagle3")``). It prints each run's wall time and its
ratio to the ``k = 0`` run of the same engine loop, measured in this one run, and the predicted
mean time per output token.

A speculating run is scheduled step by step with per-request block tables (drafts roll back,
lookahead slots outlive the computed tokens), so the ratio is what the compiled core of issue 25
must remove.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from budgetlab import EngineConfig, conversation_like, hardware, load_trace, requests_to_frame
from budgetlab.simulator import simulate

REPO_ROOT = Path(__file__).resolve().parents[1]
TRACE = REPO_ROOT.parent / "shared" / "data" / "traces" / "splitwise_conv.csv"
TOKENS = (0, 1, 3, 5)


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
    h100 = hardware("h100-sxm")
    print(f"input: {source}; H100 + Llama 3.1 8B, typical cost, vLLM's default budget and cap, no prefix cache")
    for pipelined in (False, True):
        base = None
        print(f"-- {'async scheduling' if pipelined else 'synchronous'}")
        for k in TOKENS:
            engine = EngineConfig.vllm_defaults(
                h100,
                enable_prefix_caching=False,
                async_scheduling=pipelined,
                num_speculative_tokens=k,
                speculative_method="eagle3" if k else None,
            )
            start = time.perf_counter()
            result = simulate(requests, engine=engine, cost="typical", hardware=h100, model="llama-3.1-8b")
            wall = time.perf_counter() - start
            base = wall if base is None else base
            summary = result.summary()
            print(
                f"  k = {k}  {wall:6.2f} s  {wall / base:5.2f}x the k = 0 run  "
                f"({summary['num_steps']:,.0f} steps, TPOT mean {1000 * summary['tpot_mean_s']:.2f} ms, typical cost)"
            )


if __name__ == "__main__":
    main()
