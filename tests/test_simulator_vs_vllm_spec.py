"""budgetlab's scheduler against vLLM 0.33.0's own, step by step, with speculative decoding.

``tests/fixtures/spec_decode/vllm_0_33_spec.json`` holds scenarios run through vLLM's
``Scheduler`` with a ``SpeculativeConfig`` (methods ``ngram`` and ``draft_model``) and a stand-in
model runner that replays each request's ``accepted_drafts`` (a verification of ``d`` drafts yields
``min(a_i, d) + 1`` tokens; padding drafts are never accepted); the generator is
``tests/fixtures/spec_decode/make_vllm_spec.py`` (its docstring says how to regenerate it). Each
scenario is replayed through :func:`budgetlab.simulate` with ``ConstantCost(1.0)`` and every step
must be identical: the chunks scheduled (request, tokens — drafts included — and the computed
position the chunk starts at) in scheduling order, the requests preempted, those finished, and the
free blocks right after scheduling (the format of ``test_simulator_vs_vllm_hybrid.py``, whose
helpers this reuses).

Scenarios named ``priority-…`` ran under vLLM's priority policy (``scheduling_policy:
"priority"``, each request's ``priority``); vLLM stamped requests submitted at the same step a
moment apart in the order of ``requests``, which is budgetlab's reading of equal arrival times.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from test_simulator_vs_vllm_hybrid import describe_mismatch, steps_of

from budgetlab import ConstantCost, EngineConfig, Request
from budgetlab.simulator import simulate
from budgetlab.speculative import draft_rules

FIXTURE = Path(__file__).parent / "fixtures" / "spec_decode" / "vllm_0_33_spec.json"
STEP = ConstantCost(1.0)


@cache
def fixture() -> dict:
    return json.loads(FIXTURE.read_text())


def scenarios() -> list[dict]:
    return fixture()["scenarios"]


def names(async_scheduling: bool, policy: str = "fcfs") -> list[str]:
    return [
        s["name"] for s in scenarios() if s["async_scheduling"] == async_scheduling and s["scheduling_policy"] == policy
    ]


def scenario(name: str) -> dict:
    return next(s for s in scenarios() if s["name"] == name)


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
        num_speculative_tokens=sc["num_speculative_tokens"],
        speculative_method=sc["method"],
        scheduling_policy=sc["scheduling_policy"],
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
            accepted_drafts=r["accepted_drafts"],
            priority=r.get("priority", 0),
        )
        for r in sc["requests"]
    ]


def check(name: str) -> None:
    sc = scenario(name)
    result = simulate(requests_of(sc), engine=engine_of(sc), cost=STEP, mode="fast")
    got, want = steps_of(result), sc["steps"]
    assert got == want, describe_mismatch(sc, got, want)


def test_the_fixture_covers_the_issue():
    scs = scenarios()
    assert {sc["method"] for sc in scs} == {"ngram", "draft_model"}
    assert len(scs) >= 120
    for knob in ("pool", "enable_prefix_caching", "scheduler_reserve_full_isl", "async_scheduling"):
        assert len({sc[knob] for sc in scs}) == 2, knob
    summary = [sc["summary"] for sc in scs]
    assert sum(s["verifications"] for s in summary) >= 1000
    assert sum(s["preempted_with_drafts"] for s in summary) >= 20
    assert sum(s["padded_admissions"] for s in summary) >= 5
    assert sum(s["trimmed"]["budget"] for s in summary) >= 20
    assert sum(s["trimmed"]["max_model_len"] for s in summary) >= 5
    assert sum(s["prefix_hits"] for s in summary) >= 20


def test_the_fixture_covers_the_priority_policy():
    prio = [sc for sc in scenarios() if sc["scheduling_policy"] == "priority"]
    assert {sc["scheduling_policy"] for sc in scenarios()} == {"fcfs", "priority"}
    assert len(prio) >= 30
    assert {(sc["method"], sc["async_scheduling"]) for sc in prio} == {
        (m, a) for m in ("ngram", "draft_model") for a in (False, True)
    }
    assert sum(sc["enable_prefix_caching"] for sc in prio) >= 5
    summary = [sc["summary"] for sc in prio]
    assert sum(s["preemptions"] > 0 for s in summary) >= 15
    assert sum(s["priority_victims_not_tail"] for s in summary) >= 10  # not FCFS's victim
    assert sum(s["priority_victims_before_current"] for s in summary) >= 5  # chunks withdrawn
    assert sum(s["priority_victims_self"] for s in summary) >= 10
    priorities = [r["priority"] for sc in prio for r in sc["requests"]]
    assert min(priorities) < 0 < max(priorities)
    assert sum(len({r["arrival_step"] for r in sc["requests"]}) < len(sc["requests"]) for sc in prio) >= 15


def test_the_per_method_numbers_are_vllms():
    for sc in scenarios():
        rules = draft_rules(sc["method"], sc["num_speculative_tokens"])
        assert sc["vllm"]["num_lookahead_tokens"] == rules.lookahead_tokens, sc["name"]
        assert sc["vllm"]["max_num_new_slots_for_drafting"] == rules.new_slots_for_drafting, sc["name"]
        assert sc["vllm"]["max_num_scheduled_tokens"] == sc["max_num_batched_tokens"], sc["name"]


@pytest.mark.parametrize("name", names(async_scheduling=False))
def test_synchronous_speculative_decoding_matches_vllm_step_by_step(name):
    check(name)


@pytest.mark.parametrize("name", names(async_scheduling=True))
def test_pipelined_speculative_decoding_matches_vllm_step_by_step(name):
    check(name)


@pytest.mark.parametrize("name", names(async_scheduling=False, policy="priority") + names(True, "priority"))
def test_priority_speculative_decoding_matches_vllm_step_by_step(name):
    check(name)
