"""Fleets (:func:`budgetlab.simulate_fleet`): replicas behind a router.

One replica is :func:`simulate` bit for bit; each replica of any fleet is the simulation of the
requests it was sent, bit for bit (round robin, heterogeneous engines, vLLM's defaults with
prefix caching); the routers decide as worked out by hand (vLLM 0.33's load balancer included);
bad input is refused with a message.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_simulator_properties import scenarios

from budgetlab import (
    CalibratedCost,
    ClosedLoopClients,
    ConstantCost,
    EngineConfig,
    FleetResult,
    IdealCost,
    LeastLoaded,
    PrefixAware,
    Request,
    hardware,
    model,
    multi_turn_workload,
    simulate,
    simulate_fleet,
)
from budgetlab.errors import ConfigError
from budgetlab.fleet import ReplicaLoad, RoutedRequest
from budgetlab.simulator import core_state as cs

from sim_modes import assert_same

H100, LLAMA8B = hardware("h100-sxm"), model("llama-3.1-8b")
IDEAL = IdealCost(H100, LLAMA8B)
STEP = ConstantCost(1.0)


def workload(num: int = 120, seed: int = 4) -> list[Request]:
    """Requests in shuffled input order, some sharing a conversation prefix."""
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0.0, 4.0, num))
    arrivals[5:9] = arrivals[5]  # equal arrivals
    reqs = [
        Request(
            f"r{i}",
            float(arrivals[i]) + 1000.0,  # not from 0: each replica keeps its own clock
            int(rng.integers(20, 600)),
            int(rng.integers(1, 90)),
            prefix_id=f"c{i % 7}" if i % 3 else None,
            prefix_tokens=16 if i % 3 else 0,
        )
        for i in range(num)
    ]
    order = rng.permutation(num)
    return [reqs[i] for i in order]


ENGINES = {
    "defaults": EngineConfig(max_num_batched_tokens=512, max_num_seqs=16, num_kv_blocks=600),
    "synchronous": EngineConfig(
        max_num_batched_tokens=256,
        max_num_seqs=8,
        num_kv_blocks=300,
        enable_prefix_caching=False,
        async_scheduling=False,
    ),
    "priority": EngineConfig(
        max_num_batched_tokens=512, max_num_seqs=8, num_kv_blocks=400, scheduling_policy="priority"
    ),
}


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_one_replica_is_simulate(name):
    reqs, eng = workload(), ENGINES[name]
    alone = simulate(reqs, engine=eng, cost=IDEAL)
    fleet = simulate_fleet(reqs, replicas=1, engine=eng, cost=IDEAL, router="least_loaded")
    assert_same(alone, fleet.replicas[0])
    summary = fleet.summary()
    assert summary.pop("num_replicas") == 1
    assert summary == alone.summary()
    assert (fleet.assignment == 0).all() and list(fleet.assignment.index) == [r.request_id for r in reqs]


def test_one_replica_with_the_real_engine_cost():
    reqs = workload(60)
    eng = ENGINES["defaults"]
    cost = CalibratedCost.typical(H100, LLAMA8B, engine=eng)
    assert_same(
        simulate(reqs, engine=eng, cost=cost), simulate_fleet(reqs, replicas=1, engine=eng, cost=cost).replicas[0]
    )


@pytest.mark.parametrize("name", sorted(ENGINES))
@pytest.mark.parametrize("replicas", [2, 3])
def test_round_robin_replicas_are_their_shares_simulated_alone(name, replicas):
    reqs, eng = workload(), ENGINES[name]
    fleet = simulate_fleet(reqs, replicas=replicas, engine=eng, cost=IDEAL)
    by_arrival = sorted(range(len(reqs)), key=lambda i: reqs[i].arrival_at_s)  # stable: input order on ties
    expected = {reqs[i].request_id: k % replicas for k, i in enumerate(by_arrival)}
    assert fleet.assignment.to_dict() == expected
    for index, result in enumerate(fleet.replicas):
        share = [r for r in reqs if expected[r.request_id] == index]
        assert_same(simulate(share, engine=eng, cost=IDEAL), result)
    summary = fleet.summary()
    assert summary["num_requests"] == len(reqs) and summary["num_replicas"] == replicas
    assert summary["num_steps"] == sum(r.summary()["num_steps"] for r in fleet.replicas)
    assert summary["max_itl_s"] == max(r.summary()["max_itl_s"] for r in fleet.replicas)
    first = min(r.arrival_at_s for r in reqs)
    last = max(r.time_origin_s + r.requests["finished_at_s"].max() for r in fleet.replicas)
    assert summary["makespan_s"] == pytest.approx(last - first, rel=1e-12)


def test_heterogeneous_replicas_each_run_their_own_engine():
    reqs = workload(80)
    engines = [ENGINES["synchronous"], ENGINES["defaults"]]
    fleet = simulate_fleet(reqs, replicas=2, engine=engines, cost=[IDEAL, STEP])
    for index, (eng, cost) in enumerate(zip(engines, [IDEAL, STEP])):
        share = [r for r in reqs if fleet.assignment[r.request_id] == index]
        assert_same(simulate(share, engine=eng, cost=cost), fleet.replicas[index])


def test_session_affinity_keeps_a_conversation_on_one_replica():
    reqs = workload(90)
    fleet = simulate_fleet(reqs, replicas=3, engine=ENGINES["defaults"], cost=IDEAL, router="session")
    homes: dict[str, set[int]] = {}
    for r in reqs:
        if r.prefix_id is not None:
            homes.setdefault(r.prefix_id, set()).add(int(fleet.assignment[r.request_id]))
    assert homes and all(len(h) == 1 for h in homes.values())
    # first requests and requests without a session take turns: c0..c6 start on 0, 1, 2, 0, ...
    assert len({next(iter(h)) for h in homes.values()}) == 3


# --------------------------------------------------------------------------------------------
# vLLM 0.33's load balancer by hand (steps of 1 s, 2 replicas, snapshots every second):
# A (t=0, 100 outputs) goes to replica 0 (both score 0; the scan starts at 0), its waiting count
# bumped to 1; B (t=0.1, 2 outputs) to replica 1 (the scan starts at 1: score 0 < replica 0's
# max(in flight 1, 1 waiting) = 1). B finishes at 2.1 s. At C (t=5.0) the snapshot of 5.0 s
# shows replica 0 running A (waiting 0 + running 1) and replica 1 idle; in flight 1 and 0:
# C goes to replica 1, where round robin sends it to replica 0.
# --------------------------------------------------------------------------------------------

BY_HAND = [Request("A", 0.0, 8, 100), Request("B", 0.1, 8, 2), Request("C", 5.0, 8, 2)]
SMALL = EngineConfig(max_num_batched_tokens=64, max_num_seqs=4, num_kv_blocks=64)


def test_least_loaded_by_hand():
    balanced = simulate_fleet(BY_HAND, replicas=2, engine=SMALL, cost=STEP, router=LeastLoaded(stats_interval_s=1.0))
    assert balanced.assignment.to_dict() == {"A": 0, "B": 1, "C": 1}
    assert balanced.replicas[1].requests.set_index("request_id")["finished_at_s"]["B"] == pytest.approx(2.0)
    turns = simulate_fleet(BY_HAND, replicas=2, engine=SMALL, cost=STEP, router="round_robin")
    assert turns.assignment.to_dict() == {"A": 0, "B": 1, "C": 0}


def test_least_loaded_spreads_a_burst_before_any_snapshot():
    # five requests at once: the snapshot (all idle) is bumped by each send and the scan start
    # rotates, so they alternate 0, 1, 0, 1, 0
    burst = [Request(i, 0.0, 8, 4) for i in range(5)]
    fleet = simulate_fleet(burst, replicas=2, engine=SMALL, cost=STEP, router="least_loaded")
    assert fleet.assignment.tolist() == [0, 1, 0, 1, 0]


def test_a_callable_router_sees_the_live_loads():
    seen = []

    def fewest_running(request, loads, time_s):
        seen.append((request.request_id, time_s, [x.num_running for x in loads], [x.num_in_flight for x in loads]))
        return int(np.argmin([x.num_running for x in loads]))

    fleet = simulate_fleet(BY_HAND, replicas=2, engine=SMALL, cost=STEP, router=fewest_running)
    assert fleet.assignment.to_dict() == {"A": 0, "B": 1, "C": 1}
    # at 5.0 s replica 0 runs A (steps of 1 s from 0.0), replica 1 finished B (in flight 0)
    assert seen[2] == ("C", 5.0, [1, 0], [1, 0])


def test_the_load_over_time_is_every_replicas_steps_on_the_fleets_clock():
    reqs = workload(60)
    fleet = simulate_fleet(reqs, replicas=2, engine=ENGINES["defaults"], cost=IDEAL)
    load = fleet.load()
    assert list(load.columns) == [
        "replica",
        "start_at_s",
        "num_running",
        "num_waiting",
        "kv_used_fraction",
        "num_cached_tokens",
        "num_prefill_tokens",
    ]
    for index, result in enumerate(fleet.replicas):
        mine = load[load["replica"] == index]
        assert len(mine) == len(result.steps)
        shift = result.time_origin_s - fleet.time_origin_s
        assert np.array_equal(mine["start_at_s"].to_numpy(), result.steps["start_at_s"].to_numpy() + shift)
    assert load["kv_used_fraction"].between(0.0, 1.0).all()


def test_a_replica_sent_nothing_is_none():
    fleet = simulate_fleet(BY_HAND[:1], replicas=3, engine=SMALL, cost=STEP)
    assert fleet.replicas[1] is None and fleet.replicas[2] is None
    assert fleet.summary()["num_requests"] == 1 and isinstance(fleet, FleetResult)


def test_bad_fleets_are_refused():
    with pytest.raises(ValueError, match="replicas must be an int >= 1"):
        simulate_fleet(BY_HAND, replicas=0, engine=SMALL, cost=STEP)
    with pytest.raises(ValueError, match="engine has 3 entries for 2 replicas"):
        simulate_fleet(BY_HAND, replicas=2, engine=[SMALL] * 3, cost=STEP)
    with pytest.raises(ValueError, match="unknown router 'random'"):
        simulate_fleet(BY_HAND, replicas=2, engine=SMALL, cost=STEP, router="random")
    with pytest.raises(ValueError, match="sent request 'A' to 7"):
        simulate_fleet(BY_HAND, replicas=2, engine=SMALL, cost=STEP, router=lambda r, loads, t: 7)
    with pytest.raises(ValueError, match="stats_interval_s must be a positive"):
        LeastLoaded(stats_interval_s=0.0)
    speculating = EngineConfig(
        max_num_batched_tokens=64,
        max_num_seqs=4,
        num_kv_blocks=64,
        num_speculative_tokens=2,
        speculative_method="ngram",
    )
    with pytest.raises(ConfigError, match="compiled engine core"):
        simulate_fleet(BY_HAND, replicas=2, engine=speculating, cost=STEP)


def test_the_assignment_follows_the_input_order():
    frame = pd.DataFrame(
        {
            "request_id": [10, 11, 12, 13],
            "arrival_at_s": [3.0, 0.0, 2.0, 1.0],
            "prompt_tokens": [8, 8, 8, 8],
            "output_tokens": [2, 2, 2, 2],
        }
    )
    fleet = simulate_fleet(frame, replicas=2, engine=SMALL, cost=STEP)
    # arrival order 11, 13, 12, 10 -> replicas 0, 1, 0, 1
    assert fleet.assignment.to_dict() == {10: 1, 11: 0, 12: 0, 13: 1}
    assert not math.isnan(fleet.summary()["ttft_p50_s"])


# --------------------------------------------------------------------------------------------
# Any routing: each replica is the simulation of its share alone (random workloads and engines
# of the simulator's property tests, a seeded random router reading the live loads)
# --------------------------------------------------------------------------------------------


@settings(max_examples=100)
@given(scenarios(max_output=60), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_any_routing_gives_each_replica_its_share_simulated_alone(scenario, replicas, seed):
    requests, eng, cost = scenario
    eng = dataclasses.replace(eng, scheduler_reserve_full_isl=True)  # no livelock
    rng = np.random.default_rng(seed)
    fleet = simulate_fleet(
        requests, replicas=replicas, engine=eng, cost=cost, router=lambda r, loads, t: int(rng.integers(replicas))
    )
    for index, result in enumerate(fleet.replicas):
        share = [r for r in requests if fleet.assignment[r.request_id] == index]
        if not share:
            assert result is None
            continue
        assert_same(simulate(share, engine=eng, cost=cost), result)


@pytest.mark.parametrize("name", list(ENGINES))
def test_a_replica_sent_more_than_its_share_grows_its_arrays_mid_run(name):
    """Replica 0 of 4, sized for a quarter of the requests, is sent nearly all of them while
    they queue behind its full slots (steps shorter than the gaps; the FCFS ring has moved on,
    the priority heap holds many): its arrays grow several times with requests waiting, and it
    is still the simulation of its share alone."""
    eng = ENGINES[name]
    reqs = [
        Request(f"b{i}", 2000.0 + 0.002 * i, 60 + (37 * i) % 400, 30 + (11 * i) % 90,
                prefix_id=f"p{i % 5}", prefix_tokens=32, priority=(7 * i) % 3)
        for i in range(200)
    ]  # fmt: skip
    fast = ConstantCost(0.001)
    fleet = simulate_fleet(
        reqs,
        replicas=4,
        engine=eng,
        cost=fast,
        router=lambda r, loads, t: 1 if int(str(r.request_id)[1:]) % 50 == 0 else 0,
    )
    mine = [r for r in reqs if fleet.assignment[r.request_id] == 0]
    assert len(mine) == 196
    assert_same(simulate(mine, engine=eng, cost=fast), fleet.replicas[0])
    others = [r for r in reqs if fleet.assignment[r.request_id] == 1]
    assert_same(simulate(others, engine=eng, cost=fast), fleet.replicas[1])


# --------------------------------------------------------------------------------------------
# The vLLM router's cache-aware policy, by hand (cache_threshold 0.3, imbalance when max − min
# > 2 and max > 1.5 × min): a conversation's second turn shares 60 of its 100 prompt tokens
# with the first, so it follows it; a turn sharing 20 of 100 (20 %) goes to the least loaded;
# with loads 5 and 1 (imbalanced) even a full match goes to the least loaded.
# --------------------------------------------------------------------------------------------


def _routed(rid, session, prompt, shared):
    return RoutedRequest(rid, 0.0, prompt, 10, 0, session, shared)


def _loads(*in_flight):
    return [ReplicaLoad(0, n, 0.0, n) for n in in_flight]


def test_prefix_aware_by_hand():
    router = PrefixAware(cache_threshold=0.3, balance_abs_threshold=2, balance_rel_threshold=1.5)
    router.reset(2)
    assert router.choose(_routed("a1", "a", 100, 80), _loads(1, 0), 0.0) == 1  # no match: least loaded
    assert router.choose(_routed("a2", "a", 100, 60), _loads(1, 2), 0.0) == 1  # 60 % shared: follows a1
    assert router.choose(_routed("a3", "a", 100, 20), _loads(1, 2), 0.0) == 0  # 20 %: least loaded
    # replica 1 holds 80 tokens of "a" (a1's prompt prefix), replica 0 holds 20: the longest wins
    assert router.choose(_routed("a4", "a", 200, 100), _loads(0, 1), 0.0) == 1  # 80 / 200 = 40 %
    assert router.choose(_routed("a5", "a", 100, 100), _loads(5, 1), 0.0) == 1  # imbalanced: least
    assert router.choose(_routed("a6", "a", 100, 100), _loads(1, 5), 0.0) == 0  # imbalanced: least
    assert router.choose(_routed("x", None, 100, 0), _loads(3, 3), 0.0) == 0  # no session, tie: first
    # equally long matches: the replica sent the session last (a6 went to 0, with 100 tokens;
    # replica 1 has 100 from a5)
    assert router.choose(_routed("a7", "a", 100, 100), _loads(1, 1), 0.0) == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cache_threshold": 1.5}, "cache_threshold must be a fraction"),
        ({"balance_abs_threshold": -1}, "balance_abs_threshold must be an int >= 0"),
        ({"balance_abs_threshold": 2.5}, "balance_abs_threshold must be an int >= 0"),
        ({"balance_rel_threshold": 0.5}, "balance_rel_threshold must be a finite number >= 1"),
    ],
)
def test_prefix_aware_refuses_bad_thresholds(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PrefixAware(**kwargs)


def test_prefix_aware_keeps_conversations_where_their_prefix_is_cached():
    requests = multi_turn_workload(
        num_conversations=40, conversation_rate_per_s=4.0, turns=6, message=200, output=100, think_time_s=2.0, seed=3
    )
    engine = EngineConfig(max_num_batched_tokens=1024, max_num_seqs=32)
    runs = {
        router: simulate_fleet(requests, replicas=4, engine=engine, cost=IDEAL, router=router).summary()
        for router in ("round_robin", "prefix_aware")
    }
    print({router: round(summary["prefix_hit_rate"], 3) for router, summary in runs.items()})
    assert runs["prefix_aware"]["prefix_hit_rate"] > runs["round_robin"]["prefix_hit_rate"] + 0.1


def test_the_timeline_bins_each_replicas_steps():
    requests = multi_turn_workload(
        num_conversations=10, conversation_rate_per_s=2.0, turns=3, message=120, output=20, think_time_s=0.5, seed=1
    )
    engine = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, num_kv_blocks=400)
    fleet = simulate_fleet(requests, replicas=2, engine=engine, cost=STEP, router="session")
    timeline = fleet.timeline(bin_s=4.0)
    assert (timeline.start_s % 4.0 == 0).all()
    for index, result in enumerate(fleet.replicas):
        mine = timeline[timeline.replica == index]
        assert mine.num_steps.sum() == len(result.steps)
        assert mine.num_cached_tokens.sum() == result.steps.num_cached_tokens.sum()
        assert mine.num_prefill_tokens.sum() == result.steps.num_prefill_tokens.sum()
    hits = timeline.num_cached_tokens / (timeline.num_cached_tokens + timeline.num_prefill_tokens)
    assert timeline.prefix_hit_rate.fillna(-1).tolist() == hits.fillna(-1).tolist()
    assert timeline.prefix_hit_rate.max() > 0  # later turns hit their history on their replica
    with pytest.raises(ValueError, match="bin_s must be a positive number of seconds"):
        fleet.timeline(bin_s=0)


def test_the_fleets_requests_are_every_replicas_on_the_fleets_clock():
    requests = workload(num=40)
    fleet = simulate_fleet(requests, replicas=3, engine=ENGINES["defaults"], cost=STEP, router="round_robin")
    table = fleet.requests
    assert table.request_id.tolist() == [r.request_id for r in requests]  # input order
    assert table.replica.tolist() == fleet.assignment.tolist()
    arrivals = {r.request_id: r.arrival_at_s for r in requests}
    origin = min(arrivals.values())
    assert table.arrival_at_s.to_numpy() == pytest.approx([arrivals[i] - origin for i in table.request_id])
    for index, result in enumerate(fleet.replicas):
        mine = table[table.replica == index].set_index("request_id")
        theirs = result.requests.set_index("request_id").loc[mine.index]
        assert mine.ttft_s.tolist() == theirs.ttft_s.tolist()


@pytest.mark.parametrize("priority", [False, True])
@pytest.mark.parametrize("count", sorted({3, 9, 10, 11, cs.N_SLOTS, cs.T_SLOTS, 601}))
def test_workloads_the_size_of_other_core_arrays_run_as_alone(count, priority):
    """A workload of as many requests as another core array has entries (the counters, the
    clock, max_num_seqs + 1 and + 2 slots, the pool + 1) is no different: each replica, and a
    closed loop, is still the simulation of its requests alone."""
    eng = dataclasses.replace(
        EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, num_kv_blocks=600),
        scheduling_policy="priority" if priority else "fcfs",
    )
    reqs = [
        Request(f"s{i}", 0.01 * i, 40 + (29 * i) % 300, 1 + (13 * i) % 30, prefix_id=f"p{i % 4}", prefix_tokens=16,
                priority=i % 3)
        for i in range(count)
    ]  # fmt: skip
    for replicas in (1, 2):
        fleet = simulate_fleet(reqs, replicas=replicas, engine=eng, cost=STEP, router="round_robin")
        for index, result in enumerate(fleet.replicas):
            share = [r for r in reqs if fleet.assignment[r.request_id] == index]
            assert_same(simulate(share, engine=eng, cost=STEP), result)
    clients = simulate(ClosedLoopClients(concurrency=3, requests=reqs), engine=eng, cost=STEP)
    assert clients.summary()["num_requests"] == count
