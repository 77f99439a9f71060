"""budgetlab's scheduler against vLLM 0.33.0's own, step by step, with KV-cache groups.

``tests/fixtures/kv_groups/vllm_0_33_hybrid.json`` holds scenarios run through vLLM's
``Scheduler`` (synchronous engine) and ``AsyncScheduler`` (pipelined engine, batch queue of 2)
with a hand-made hybrid KV cache: one pool shared by full-attention and sliding-window groups
(GPT-OSS-like 1:1, Gemma-3-like 5:1, all-sliding), plus full-only scenarios that check this
harness on the single-group scheduler, and a few hand-made edge cases. The generator is
``tests/fixtures/kv_groups/make_vllm_hybrid.py`` (its docstring says how to regenerate it).
Each scenario is replayed through :func:`budgetlab.simulate` with ``EngineConfig(kv_groups=...)``
and ``ConstantCost(1.0)`` (step ``i`` of a busy engine starts at ``t = i``; an idle engine jumps
to the next arrival, where the fixture's step numbers jump too; a pipelined iteration that
schedules nothing is a step in both), and every step must be identical: the chunks scheduled
(request, tokens, computed position the chunk starts at) in scheduling order, the requests
preempted (in vLLM's order), those finished (filed under the step that sampled their last
token), and the free blocks right after scheduling. vLLM's ``num_blocks`` counts its null
block: ``num_kv_blocks = num_blocks − 1``. Requests sharing leading token ids in vLLM are
``Request(prefix_id=..., prefix_tokens=...)`` here (the generator encodes exactly those
semantics in its token ids).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from budgetlab import ConstantCost, EngineConfig, Request
from budgetlab.simulator import SimResult, simulate

FIXTURE = Path(__file__).parent / "fixtures" / "kv_groups" / "vllm_0_33_hybrid.json"
STEP = ConstantCost(1.0)
#: Steps shown either side of the first difference in a failure message.
CONTEXT_STEPS = 2


@cache
def scenarios() -> tuple[dict, ...]:
    return tuple(json.loads(FIXTURE.read_text())["scenarios"])


def names(pattern_is_full: bool) -> list[str]:
    """The drawn scenarios, full-attention-only or hybrid."""
    return [
        s["name"]
        for s in scenarios()
        if (s["pattern"] == "full") == pattern_is_full and not s["name"].startswith("edge-")
    ]


def edge_names() -> list[str]:
    """The generator's hand-made scenarios (``edge_scenarios``)."""
    return [s["name"] for s in scenarios() if s["name"].startswith("edge-")]


def prefix_hits(sc: dict) -> int:
    """Admissions in vLLM's steps that started past position 0 (prefix-cache hits)."""
    running: set[str] = set()
    hits = 0
    for _step, scheduled, preempted, finished, _free in sc["steps"]:
        running -= set(preempted)
        for rid, _n, start in scheduled:
            hits += rid not in running and start > 0
            running.add(rid)
        running -= set(finished)
    return hits


def scenario(name: str) -> dict:
    return next(s for s in scenarios() if s["name"] == name)


def kv_groups_of(sc: dict) -> tuple:
    """The fixture's groups as ``EngineConfig.kv_groups`` entries."""
    return tuple(g if g == "full" else (g[0], int(g[1])) for g in sc["kv_groups"])


def engine_of(sc: dict) -> EngineConfig:
    return EngineConfig(
        max_num_batched_tokens=sc["max_num_batched_tokens"],
        max_num_seqs=sc["max_num_seqs"],
        block_size=sc["block_size"],
        num_kv_blocks=sc["num_blocks"] - 1,  # vLLM's null block
        long_prefill_token_threshold=sc["long_prefill_token_threshold"],
        max_model_len=sc["max_model_len"],
        enable_prefix_caching=sc["enable_prefix_caching"],
        scheduler_reserve_full_isl=sc["scheduler_reserve_full_isl"],
        async_scheduling=sc["async_scheduling"],
        kv_groups=kv_groups_of(sc),
    )


def requests_of(sc: dict) -> list[Request]:
    return [
        Request(
            r["id"],
            float(r["arrival_step"]),
            r["prompt_tokens"],
            r["output_tokens"],
            prefix_id=r.get("prefix_id"),
            prefix_tokens=r.get("prefix_tokens", 0),
        )
        for r in sc["requests"]
    ]


def steps_of(result: SimResult) -> list[list]:
    """budgetlab's steps in the fixture's form ``[step, scheduled, preempted, finished, free]``."""
    free = result.steps["num_free_kv_blocks"].tolist()
    rows = []
    for entry, free_blocks in zip(result.step_log(), free, strict=True):
        scheduled = [
            [rid, int(n), int(start)] for (rid, n, _kind), start in zip(entry["scheduled"], entry["start"], strict=True)
        ]
        rows.append(
            [round(entry["start_at_s"]), scheduled, list(entry["preempted"]), list(entry["finished"]), int(free_blocks)]
        )
    return rows


def describe_mismatch(sc: dict, got: list[list], want: list[list]) -> str:
    """Where budgetlab first departs from vLLM, with the scenario's knobs and nearby steps."""
    first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    knobs = {k: v for k, v in sc.items() if k not in ("requests", "steps")}
    lines = [
        f"scenario {sc['name']}: budgetlab departs from vLLM at step index {first} "
        f"(budgetlab {len(got)} steps, vLLM {len(want)})",
        f"knobs: {knobs}",
        "  [step, scheduled [id, tokens, start], preempted, finished, free]",
    ]
    for i in range(max(0, first - CONTEXT_STEPS), first + CONTEXT_STEPS + 1):
        lines.append(f"  vLLM      {want[i] if i < len(want) else '-'}")
        lines.append(f"  budgetlab {got[i] if i < len(got) else '-'}")
    ids = {rid for row in want[max(0, first - CONTEXT_STEPS) : first + CONTEXT_STEPS + 1] for rid, *_ in row[1]}
    lines.append(f"requests there: {[r for r in sc['requests'] if r['id'] in ids]}")
    return "\n".join(lines)


def check(name: str, mode: str) -> None:
    sc = scenario(name)
    result = simulate(requests_of(sc), engine=engine_of(sc), cost=STEP, mode=mode)
    got, want = steps_of(result), sc["steps"]
    assert got == want, describe_mismatch(sc, got, want)


def test_fixture_covers_the_patterns_of_the_issue():
    by_pattern: dict[str, list[dict]] = {}
    for sc in scenarios():
        by_pattern.setdefault(sc["pattern"], []).append(sc)
    assert {p: len(v) >= 20 for p, v in by_pattern.items()} == dict.fromkeys(
        ("full", "gpt_oss", "gemma3", "all_sliding"), True
    )
    hybrid = [sc for sc in scenarios() if sc["pattern"] != "full"]
    assert len(hybrid) >= 90
    # Every kind of scenario occurs: tight and roomy pools, prefix caching, preemptions,
    # prefix-cache hits, both admission rules, both engines, a threshold, several windows.
    for knob in ("pool", "enable_prefix_caching", "scheduler_reserve_full_isl", "async_scheduling"):
        assert len({sc[knob] for sc in hybrid}) == 2, knob
    assert any(sc["long_prefill_token_threshold"] for sc in hybrid)
    assert sum(len(step[2]) for sc in hybrid for step in sc["steps"]) >= 100
    assert sum(prefix_hits(sc) for sc in hybrid) >= 50
    windows = {g[1] for sc in hybrid for g in sc["kv_groups"] if g != "full"}
    assert min(windows) <= 16 and max(windows) >= 1024


@pytest.mark.parametrize("name", names(pattern_is_full=True))
def test_full_attention_only_matches_vllm_step_by_step(name):
    # The harness itself, on the single-group scheduler budgetlab already has.
    check(name, "reference")


@pytest.mark.parametrize("name", names(pattern_is_full=False))
def test_hybrid_kv_groups_match_vllm_step_by_step(name):
    check(name, "reference")


@pytest.mark.parametrize("name", edge_names())
def test_hand_made_edge_cases_match_vllm_step_by_step(name):
    # A pipelined request's last block, completed by its last in-flight token, is cached by
    # vLLM 0.33 when update_from_output delivers that token: a later request hits it.
    check(name, "reference")


@pytest.mark.parametrize("name", names(pattern_is_full=False)[::5] + names(pattern_is_full=True)[::5])
def test_fast_mode_matches_vllm_step_by_step(name):
    check(name, "fast")
