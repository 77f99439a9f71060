"""The replica planner (:func:`budgetlab.plan_replicas`): the planned fleet meets the SLO and one
replica fewer does not, both checked here by simulating them again; vLLM's queue caps sized by
hand; bad input refused with a message."""

from __future__ import annotations

import math

import pytest

import budgetlab as bl
from budgetlab.cost.named import make_cost
from budgetlab.errors import ParameterError, SLOUnattainableError
from budgetlab.experiments.replicas import queue_caps
from budgetlab.workload import workload_requests

H100, LLAMA8B = "h100-sxm", "llama-3.1-8b"
WORKLOAD = bl.SyntheticWorkload.conversation_like(num_requests=600)
SLO = bl.SLO(ttft_p90_s=1.0, itl_p90_s=0.05)
ENGINE = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64)


def _holds(plan, num_replicas: int) -> bool:
    """The SLO on a fleet of ``num_replicas`` simulated here, apart from the planner."""
    requests = workload_requests(WORKLOAD, rate_per_s=plan.rate_per_s)
    cost = make_cost("typical", bl.hardware(H100), bl.model(LLAMA8B), engine=plan.engine)
    fleet = bl.simulate_fleet(requests, replicas=num_replicas, engine=plan.engine, cost=cost, router=plan.router)
    return SLO.holds(fleet.summary())


@pytest.mark.parametrize("router", ["round_robin", "least_loaded"])
def test_the_planned_fleet_meets_the_slo_and_one_fewer_does_not(router):
    plan = bl.plan_replicas(
        WORKLOAD, rate_per_s=40.0, slo=SLO, hardware=H100, model=LLAMA8B, engine=ENGINE, tune_knobs=False, router=router
    )
    assert plan.num_replicas >= 2 and plan.engine == ENGINE and plan.tuned is None
    assert _holds(plan, plan.num_replicas) and not _holds(plan, plan.num_replicas - 1)
    assert SLO.holds(plan.fleet.summary()) and plan.fewer is not None and plan.fewer_violations
    assert plan.checked.set_index("num_replicas").meets.to_dict()[plan.num_replicas]
    assert plan.rate_per_replica_s == pytest.approx(40.0 / plan.num_replicas)
    assert f"--max-num-seqs 64 --max-num-queued-reqs {plan.max_num_queued_reqs}" in plan.vllm_args()
    assert f"{plan.num_replicas} replicas" in repr(plan) and plan.numbers()["num_replicas"] == plan.num_replicas


def test_the_tuned_plan_takes_the_tuners_knobs():
    plan = bl.plan_replicas(WORKLOAD, rate_per_s=40.0, slo=SLO, hardware=H100, model=LLAMA8B)
    assert plan.tuned is not None and plan.engine == plan.tuned.engine and plan.cost == "typical"
    assert _holds(plan, plan.num_replicas) and not _holds(plan, plan.num_replicas - 1)


def test_a_light_load_needs_one_replica_and_a_list_replays_at_its_own_rate():
    requests = bl.conversation_like(num_requests=200, rate_per_s=2.0, seed=1)
    plan = bl.plan_replicas(requests, slo=SLO, hardware=H100, model=LLAMA8B, engine=ENGINE, tune_knobs=False)
    assert plan.num_replicas == 1 and plan.fewer is None and plan.fewer_violations == ()
    assert plan.rate_per_s == pytest.approx(199 / (requests[-1].arrival_at_s - requests[0].arrival_at_s))


def test_a_limit_no_fleet_can_meet_is_unattainable():
    tight = bl.SLO(itl_p90_s=1e-4)  # below one decode step
    with pytest.raises(SLOUnattainableError, match=r"3 replicas still break the SLO \(itl_p90_s"):
        bl.plan_replicas(
            WORKLOAD, rate_per_s=5.0, slo=tight, hardware=H100, model=LLAMA8B, engine=ENGINE, tune_knobs=False,
            max_replicas=3,
        )  # fmt: skip


def test_queue_caps_by_hand():
    # a full budget of 2,048 prompt tokens takes 0.1 s: 20,480 tokens/s; TTFT p90 1 s (the
    # tightest TTFT limit) -> 20,480 tokens queued, 205 prompts of 100 tokens beyond the 64 running
    slo = bl.SLO(ttft_p90_s=1.0, ttft_p99_s=3.0, itl_p90_s=0.05)
    assert queue_caps(slo, ENGINE, bl.ConstantCost(0.1), 100.0) == (64 + 205, 20480)
    assert queue_caps(bl.SLO(itl_p90_s=0.05), ENGINE, bl.ConstantCost(0.1), 100.0) == (None, None)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rate_per_s": None}, ParameterError, "rate_per_s is needed: SyntheticWorkload has no load of its own"),
        ({"rate_per_s": -1.0}, ParameterError, "rate_per_s must be requests per second > 0"),
        ({"rate_per_s": math.nan}, ParameterError, "rate_per_s must be requests per second > 0"),
        ({"max_replicas": 0}, ParameterError, "max_replicas must be an int >= 1"),
        ({"max_replicas": 10**6}, ParameterError, "max_replicas must be at most 1,024"),
        ({"tune_knobs": "no"}, ParameterError, "tune_knobs must be True or False"),
        ({"router": "nearest"}, ValueError, "unknown router 'nearest'"),
    ],
)
def test_bad_plans_are_refused(kwargs, error, match):
    arguments = {"rate_per_s": 10.0, "slo": SLO, "hardware": H100, "model": LLAMA8B, "engine": ENGINE}
    with pytest.raises(error, match=match):
        bl.plan_replicas(WORKLOAD, **(arguments | {"tune_knobs": False} | kwargs))


def test_a_plan_from_a_cost_instance_and_a_list_is_checked_on_those_requests():
    requests = bl.conversation_like(num_requests=500, rate_per_s=30.0, seed=3)
    gpu, llm = bl.hardware(H100), bl.model(LLAMA8B)
    cost = bl.CalibratedCost.typical(gpu, llm, engine=ENGINE)
    slo = bl.SLO(ttft_p90_s=0.5, itl_p99_s=0.05)
    plan = bl.plan_replicas(requests, slo=slo, engine=ENGINE, cost=cost, router="least_loaded")
    assert plan.replicas == plan.num_replicas >= 2 and plan.cost == "CalibratedCost"
    for num, holds in ((plan.replicas, True), (plan.replicas - 1, False)):
        fleet = bl.simulate_fleet(requests, replicas=num, engine=plan.engine, cost=cost, router="least_loaded")
        assert slo.holds(fleet.summary()) is holds
    with pytest.raises(ParameterError, match="plan_replicas needs the hardware and model"):
        bl.plan_replicas(requests, slo=slo, engine=ENGINE, cost="typical")
