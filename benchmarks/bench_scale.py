"""Simulator scale: memory per simulated request at a million requests, and what reading a
result costs next to simulating it.

Run ``python benchmarks/bench_scale.py`` (``make bench``). In one run it prints:

- **memory per request**: a child process (so its peak is its own) builds a columnar
  workload of ``--requests`` requests (default 1,000,000: Poisson arrivals at 1,000/s from 0,
  prompts of 16–63 tokens, outputs of 1–16), then runs ``simulate`` (fast mode, IdealCost H100
  SXM + Llama 3.1 8B, budget 2,048, ``max_num_seqs`` 256, the synchronous engine without a
  prefix cache) and ``summary()``; the figure is the peak resident memory after them less the
  resident memory just before, over the request count [bytes] (an upper bound: an earlier,
  higher peak would be counted too). Target (issue 14): <= 1 KB per request. The same with
  vLLM's defaults (prefix caching, async scheduling), and with the defaults on the Splitwise
  conversation trace tiled to ``--requests`` (each copy after the one before: real prompt and
  output lengths, some 35 steps a request; skipped when the trace is absent); target (issue
  25): <= 600 MB at a million requests.
- **reading a result** on the Splitwise conversation trace (``../shared/data/traces/
  splitwise_conv.csv``; skipped with a message when absent), same engine: the time of
  ``step_log()``, of ``summary()``, of the ``steps`` and ``requests`` tables, and of reading
  every step of the log (``list(step_log())``: one dict per step, millions of chunks), each as
  a ratio to the simulation's own time. Target: ``step_log()`` and ``summary()`` <= 1x.

The machine may be shared: CPU times of this process are used for the ratios.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from budgetlab import EngineConfig, IdealCost, hardware, load_trace, model, requests_to_frame
from budgetlab.simulator import simulate

REPO_ROOT = Path(__file__).resolve().parents[1]
TRACE = REPO_ROOT.parent / "shared" / "data" / "traces" / "splitwise_conv.csv"
TARGET_BYTES_PER_REQUEST = 1024
TARGET_MB = 600
ENGINE = {
    "max_num_batched_tokens": 2048,
    "max_num_seqs": 256,
    "enable_prefix_caching": False,
    "async_scheduling": False,
}
DEFAULTS_ENGINE = {"max_num_batched_tokens": 2048, "max_num_seqs": 256}


def h100_llama8b() -> IdealCost:
    """IdealCost for H100 SXM + Llama 3.1 8B from the catalog."""
    return IdealCost(hardware("h100-sxm"), model("llama-3.1-8b"))


def cheap_workload(num_requests: int, *, rate_per_s: float = 1000.0, seed: int = 0) -> pd.DataFrame:
    """A columnar workload: Poisson arrivals from 0, prompts of 16–63 tokens, outputs of 1–16."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_per_s, num_requests))
    return pd.DataFrame(
        {
            "request_id": np.arange(num_requests),
            "arrival_at_s": arrivals - arrivals[0],
            "prompt_tokens": rng.integers(16, 64, num_requests),
            "output_tokens": rng.integers(1, 17, num_requests),
        }
    )


def tiled_trace(num_requests: int, trace: Path = TRACE) -> pd.DataFrame:
    """The first ``num_requests`` requests of ``trace`` repeated end to end (each copy starts 1 s
    after the one before ends)."""
    base = requests_to_frame(load_trace(trace))
    arrival = base["arrival_at_s"].to_numpy()
    span = float(arrival.max() - arrival.min()) + 1.0
    copies = -(-num_requests // len(base))
    return pd.DataFrame(
        {
            "request_id": np.arange(copies * len(base)),
            "arrival_at_s": np.concatenate([arrival + k * span for k in range(copies)]),
            "prompt_tokens": np.tile(base["prompt_tokens"].to_numpy(), copies),
            "output_tokens": np.tile(base["output_tokens"].to_numpy(), copies),
        }
    ).iloc[:num_requests]


def _resident_bytes() -> int:
    """This process's resident memory now [bytes] (Linux ``/proc``; else its peak so far)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure_memory(num_requests: int, defaults: bool = False, trace: Path | None = None) -> dict[str, float]:
    """Run in the child: simulate and summarize ``num_requests`` requests (the synthetic workload,
    or ``trace`` tiled; the synchronous engine without a prefix cache, or vLLM's defaults); the
    resident memory they added at their peak [bytes] and their CPU time [s]."""
    frame = cheap_workload(num_requests) if trace is None else tiled_trace(num_requests, trace)
    cost = h100_llama8b()
    engine = EngineConfig(**(DEFAULTS_ENGINE if defaults else ENGINE))
    simulate(frame.iloc[:200], engine=engine, cost=cost).summary()  # warm the caches
    before = _resident_bytes()
    cpu0 = time.process_time()
    result = simulate(frame, engine=engine, cost=cost)
    summary = result.summary()
    cpu = time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {
        "num_requests": num_requests,
        "added_bytes": peak - before,
        "cpu_s": cpu,
        "num_steps": summary["num_steps"],
        "num_output_tokens": summary["num_output_tokens"],
    }


def bench_memory(num_requests: int, trace: Path) -> None:
    """Print the memory per simulated request, measured in a child process, for the synchronous
    engine and for vLLM's defaults (the synthetic workload), and for the defaults on ``trace``
    tiled."""
    runs: list[tuple[str, list[str]]] = [
        ("synchronous, no prefix cache", []),
        ("vLLM defaults", ["--child-defaults"]),
    ]
    if trace.exists():
        runs.append((f"vLLM defaults, {trace.name} tiled", ["--child-defaults", "--child-trace", str(trace)]))
    else:
        print(f"  memory   : the tiled trace skipped ({trace} is absent)")
    for label, flag in runs:
        child = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child-memory", str(num_requests), *flag],
            capture_output=True,
            text=True,
            check=True,
        )
        numbers = json.loads(child.stdout.strip().splitlines()[-1])
        per_request = numbers["added_bytes"] / numbers["num_requests"]
        added_mb = numbers["added_bytes"] / 1e6
        print(
            f"  memory   : {label}: {per_request:,.0f} bytes per simulated request at {numbers['num_requests']:,} "
            f"requests ({added_mb:,.0f} MB peak added; {numbers['num_output_tokens']:,} output tokens, "
            f"{numbers['num_steps']:,} steps, {numbers['cpu_s']:.1f} s CPU)"
        )
        targets = []
        if "--child-trace" not in flag:  # issue 14's target is the synthetic workload's
            verdict = "met" if per_request <= TARGET_BYTES_PER_REQUEST else "NOT met"
            targets.append(f"<= {TARGET_BYTES_PER_REQUEST:,} bytes per request: {verdict}")
        if flag and numbers["num_requests"] >= 1_000_000:
            verdict = "met" if added_mb <= TARGET_MB else "NOT met"
            targets.append(f"<= {TARGET_MB} MB at a million requests (issue 25): {verdict}")
        if targets:
            print("  target   : " + "; ".join(targets))


def _cpu(call) -> tuple[object, float]:
    cpu0 = time.process_time()
    value = call()
    return value, time.process_time() - cpu0


def bench_reading(trace: Path) -> None:
    """Print the cost of reading a result next to the simulation, on the conversation trace."""
    if not trace.exists():
        print(f"  reading  : skipped ({trace} is absent)")
        return
    requests = requests_to_frame(load_trace(trace))
    cost = h100_llama8b()
    engine = EngineConfig(**ENGINE)
    simulate(requests.iloc[:200], engine=engine, cost=cost)
    result, sim_s = _cpu(lambda: simulate(requests, engine=engine, cost=cost))
    log, log_s = _cpu(result.step_log)
    _, summary_s = _cpu(result.summary)
    _, steps_s = _cpu(lambda: result.steps)
    _, requests_s = _cpu(lambda: result.requests)
    _, read_s = _cpu(lambda: list(log))  # type: ignore[call-overload]
    print(f"  trace    : {trace.name}: {len(requests):,} requests, {len(log):,} steps")  # type: ignore[arg-type]
    print(f"  simulate : {sim_s:.3f} s CPU (compiled core)")
    for label, seconds in (
        ("step_log()", log_s),
        ("summary()", summary_s),
        ("steps", steps_s),
        ("requests", requests_s),
        ("list(step_log())", read_s),
    ):
        print(f"  {label:<17}: {seconds:.3f} s CPU = {seconds / sim_s:.2f}x the simulation")
    worst = max(log_s, summary_s) / sim_s
    print(f"  target   : step_log() and summary() <= 1x the simulation: {'met' if worst <= 1 else 'NOT met'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000, help="requests in the memory run")
    parser.add_argument("--trace", type=Path, default=TRACE, help="Splitwise-format CSV (default: the conv trace)")
    parser.add_argument("--child-memory", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child-defaults", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-trace", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_memory:
        print(json.dumps(measure_memory(args.child_memory, args.child_defaults, args.child_trace)))
        return
    print("budgetlab simulator scale benchmark")
    bench_memory(args.requests, args.trace)
    bench_reading(args.trace)


if __name__ == "__main__":
    main()
