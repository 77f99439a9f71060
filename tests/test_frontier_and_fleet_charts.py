"""The throughput–interactivity frontier (:mod:`budgetlab.experiments.pareto`), the fleet
tables notebook 14 draws (:func:`~budgetlab.experiments.replicas.replicas_by_load`,
:func:`~budgetlab.experiments.replicas.compare_routers`) and their charts
(:mod:`budgetlab.charts.fleet`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import budgetlab as bl
from budgetlab.charts import fleet as fleet_charts
from budgetlab.errors import ParameterError
from budgetlab.experiments import pareto, replicas

from chart_spec import spec_of, titles

H100, LLAMA8B = "h100-sxm", "llama-3.1-8b"
SLO = bl.SLO(ttft_p90_s=0.8, itl_p99_s=0.04)
CHAT = bl.SyntheticWorkload.conversation_like(num_requests=150)


@pytest.mark.parametrize(
    ("x", "y", "front"),
    [
        ([1, 2, 3, 2], [3, 2, 1, 1], [True, True, True, False]),  # (2, 1) is beaten by (2, 2)
        ([1, 1, 2], [5, 5, 1], [True, True, True]),  # equal points are both on it
        ([1, 2, 3], [1, 2, 3], [False, False, True]),  # one point beats every other
        ([1, 2, math.nan], [2, 1, 9], [True, True, False]),  # NaN is never on it
        ([2, 2, 1], [1, 3, 3], [False, True, False]),  # (1, 3) is beaten by (2, 3)
    ],
)
def test_pareto_front_by_hand(x, y, front):
    assert pareto.pareto_front(x, y).tolist() == front


def test_pareto_front_refuses_mismatched_axes():
    with pytest.raises(ParameterError, match="two sequences of one length"):
        pareto.pareto_front([1, 2], [1])


def test_the_slos_interactivity_is_one_over_its_tightest_time_per_token():
    assert pareto.slo_tokens_per_s_per_user(bl.SLO(itl_p99_s=0.04, tpot_mean_s=0.02)) == pytest.approx(50.0)
    assert pareto.slo_tokens_per_s_per_user(bl.SLO(ttft_p90_s=1.0)) is None


@pytest.fixture(scope="module")
def frontier():
    return pareto.throughput_frontier(
        CHAT,
        hardware=H100,
        model=LLAMA8B,
        max_num_batched_tokens=[512, 2048],
        max_num_seqs=[64],
        concurrency=[1, 8],
        replicas=[1, 2],
        slo=SLO,
        executor=bl.SerialExecutor(),
        progress=False,
    )


def test_the_frontier_places_each_closed_loop_run(frontier):
    assert list(frontier.columns) == list(pareto.FRONTIER_COLUMNS) and len(frontier) == 8
    assert frontier.num_gpus.tolist() == frontier.num_replicas.tolist()  # one GPU a replica
    assert np.allclose(frontier.tokens_per_s_per_user * frontier.concurrency, frontier.throughput_tokens_per_s)
    assert np.allclose(frontier.tokens_per_s_per_gpu * frontier.num_gpus, frontier.throughput_tokens_per_s)
    # one point by hand: the closed loop of 8 clients on one replica, budget 2,048
    requests = bl.workload.workload_requests(CHAT, rate_per_s=1.0)
    engine = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64)
    cost = bl.CalibratedCost.typical(bl.hardware(H100), bl.model(LLAMA8B), engine=engine)
    alone = bl.simulate(bl.ClosedLoopClients(8, requests), engine=engine, cost=cost).summary()
    row = frontier.set_index(["max_num_batched_tokens", "concurrency", "num_replicas"]).loc[(2048, 8, 1)]
    assert row.throughput_tokens_per_s == alone["throughput_tokens_per_s"] and row.ttft_p90_s == alone["ttft_p90_s"]
    met = frontier[frontier.meets_slo]
    assert (met.on_front == pareto.pareto_front(met.tokens_per_s_per_user, met.tokens_per_s_per_gpu)).all()
    assert not frontier[~frontier.meets_slo].on_front.any() and set(frontier.cost) == {"typical"}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"concurrency": []}, "concurrency must name at least one value"),
        ({"concurrency": [0]}, "concurrency must be ints >= 1"),
        ({"max_num_seqs": "64"}, "max_num_seqs must be a sequence of ints >= 1"),
        ({"router": "nearest"}, "router must be one of"),
    ],
)
def test_bad_frontier_grids_are_refused(kwargs, match):
    grid = {"max_num_batched_tokens": [512], "max_num_seqs": [64], "concurrency": [1]}
    with pytest.raises(ParameterError, match=match):
        pareto.throughput_frontier(CHAT, hardware=H100, model=LLAMA8B, **(grid | kwargs))


def test_the_frontier_chart_and_table(frontier):
    spec = spec_of(fleet_charts.frontier_chart(frontier, slo_tokens_per_s_per_user=25.0))
    assert "Output tokens/s per GPU (simulated, typical cost)" in titles(spec)
    table = fleet_charts.frontier_table(frontier)
    assert len(table) == int(frontier.on_front.sum()) and "tokens/s per GPU (typical)" in table.columns
    with pytest.raises(ValueError, match="needs the columns"):
        fleet_charts.frontier_chart(frontier.drop(columns=["on_front"]))


def test_replicas_by_load_and_the_routers_compared():
    engine = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64)
    by_load = replicas.replicas_by_load(
        CHAT, rates_per_s=[5.0, 40.0], routers=["round_robin"], slo=SLO, hardware=H100, model=LLAMA8B, engine=engine
    )
    assert by_load.num_replicas.tolist()[0] <= by_load.num_replicas.tolist()[1] and set(by_load.cost) == {"typical"}
    assert "Replicas that meet the SLO (simulated, typical cost)" in titles(
        spec_of(fleet_charts.replicas_by_load_chart(by_load))
    )
    conversations = bl.multi_turn_workload(
        num_conversations=12, conversation_rate_per_s=2.0, turns=4, message=200, output=50, think_time_s=1.0
    )
    routed = replicas.compare_routers(
        conversations, replicas=2, routers=["round_robin", "session"], hardware=H100, model=LLAMA8B, engine=engine
    )
    assert routed.router.tolist() == ["round_robin", "session"]
    assert (routed.fewest_requests + routed.most_requests == len(conversations)).all()
    session = routed.set_index("router").prefix_hit_rate
    assert session["session"] > session["round_robin"]
    assert list(fleet_charts.router_comparison_table(routed).columns)[1] == "TTFT p50 [ms] (typical)"
