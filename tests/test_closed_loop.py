"""Closed-loop clients (:class:`budgetlab.ClosedLoopClients`) on one engine and on a fleet.

Worked by hand for one and two clients; for any workload, engine and router: the run is the
simulation of the requests at the times they were sent, bit for bit (every replica's, in a
fleet), never more than ``concurrency`` in flight, and one client strictly one request after
another; paced clients never send before an arrival; bad clients are refused with a message.
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

from budgetlab import ClosedLoopClients, ConstantCost, EngineConfig, Request, simulate, simulate_fleet
from budgetlab.errors import ConfigError, ParameterError

from sim_modes import assert_same

STEP = ConstantCost(1.0)
SYNC = EngineConfig(
    max_num_batched_tokens=100,
    max_num_seqs=8,
    num_kv_blocks=100,
    block_size=4,
    enable_prefix_caching=False,
    async_scheduling=False,
)
ABC = [Request("a", 0.0, 4, 2), Request("b", 0.0, 4, 3), Request("c", 0.0, 4, 1)]


def sent_and_finished(result) -> tuple[list[float], list[float]]:
    frame = result.requests
    origin = result.time_origin_s
    return (frame["arrival_at_s"] + origin).tolist(), (frame["finished_at_s"] + origin).tolist()


def realized(requests: list[Request], result) -> list[Request]:
    """``requests`` arriving when ``result`` sent them (the result's order is the input's)."""
    sent, _ = sent_and_finished(result)
    return [dataclasses.replace(r, arrival_at_s=s) for r, s in zip(requests, sent)]


def most_in_flight(sent: list[float], finished: list[float]) -> int:
    """The most requests in flight just after a send: sent by then and not finished (a finish
    at the send's time, to a nanosecond, frees its client first: a fleet's times are each
    replica's clock plus its origin, exact to rounding)."""
    sent_at, finished_at = np.asarray(sent), np.asarray(finished)
    return max(int(np.sum((sent_at <= s) & (finished_at > s + 1e-9))) for s in sent)


# --------------------------------------------------------------------------------------------
# By hand: a step takes 1 s; prompts of 4 tokens fit one step.
# One client, think 0.5 s: a (2 outputs) steps [0,1) [1,2): done at 2; b sent at 2.5, steps
# [2.5,3.5) [3.5,4.5) [4.5,5.5): done at 5.5; c sent at 6, done at 7.
# Two clients, think 0.5 s: a and b at 0 share steps [0,1) [1,2) (a done at 2) and b takes
# [2,3) (done at 3); c, sent at 2.5 as a's client frees, waits for the step starting at 3.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("concurrency", "sent", "finished"),
    [(1, [0.0, 2.5, 6.0], [2.0, 5.5, 7.0]), (2, [0.0, 0.0, 2.5], [2.0, 3.0, 4.0])],
)
def test_clients_by_hand(concurrency, sent, finished):
    result = simulate(ClosedLoopClients(concurrency, ABC, think_time_s=0.5), engine=SYNC, cost=STEP)
    assert sent_and_finished(result) == (sent, finished)


def test_requests_arrival_times_are_ignored_unless_paced():
    late = [dataclasses.replace(r, arrival_at_s=100.0 + i) for i, r in enumerate(ABC)]
    result = simulate(ClosedLoopClients(1, late, think_time_s=0.5), engine=SYNC, cost=STEP)
    assert sent_and_finished(result) == ([0.0, 2.5, 6.0], [2.0, 5.5, 7.0])


def test_paced_clients_send_no_earlier_than_each_arrival():
    # a at 0 (done 2), b paced to 10 (done 13), c arrives at 11 while b holds the one client:
    # sent when b's client frees at 13.5
    paced = [Request("a", 0.0, 4, 2), Request("b", 10.0, 4, 3), Request("c", 11.0, 4, 1)]
    result = simulate(ClosedLoopClients(1, paced, think_time_s=0.5, paced=True), engine=SYNC, cost=STEP)
    assert sent_and_finished(result) == ([0.0, 10.0, 13.5], [2.0, 13.0, 14.5])


def test_enough_paced_clients_are_the_open_loop():
    requests = [Request(f"r{i}", 0.7 * i + (i % 3), 4 + i, 1 + i % 5) for i in range(12)][::-1]
    clients = ClosedLoopClients(len(requests), requests, paced=True)
    assert_same(simulate(requests, engine=SYNC, cost=STEP), simulate(clients, engine=SYNC, cost=STEP))


def test_a_generator_of_requests_is_kept_for_every_run():
    clients = ClosedLoopClients(2, (r for r in ABC))
    first = simulate(clients, engine=SYNC, cost=STEP)
    assert_same(first, simulate(clients, engine=SYNC, cost=STEP))
    assert "3 requests" in repr(clients)


def test_a_frame_of_requests():
    frame = pd.DataFrame(
        {"request_id": ["a", "b", "c"], "arrival_at_s": 0.0, "prompt_tokens": 4, "output_tokens": [2, 3, 1]}
    )
    result = simulate(ClosedLoopClients(1, frame, think_time_s=0.5), engine=SYNC, cost=STEP)
    assert sent_and_finished(result) == ([0.0, 2.5, 6.0], [2.0, 5.5, 7.0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"concurrency": 0}, r"ClosedLoopClients.concurrency must be an int >= 1"),
        ({"concurrency": True}, r"ClosedLoopClients.concurrency must be an int >= 1"),
        ({"concurrency": 2.0}, r"ClosedLoopClients.concurrency must be an int >= 1"),
        ({"think_time_s": -1.0}, r"ClosedLoopClients.think_time_s must be seconds >= 0"),
        ({"think_time_s": math.nan}, r"ClosedLoopClients.think_time_s must be seconds >= 0"),
        ({"paced": "yes"}, r"ClosedLoopClients.paced must be True or False"),
    ],
)
def test_bad_clients_are_refused(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        ClosedLoopClients(**({"concurrency": 2, "requests": ABC} | kwargs))


def test_clients_need_the_compiled_core():
    with pytest.raises(ConfigError, match=r"closed-loop clients run on the compiled engine core"):
        simulate(ClosedLoopClients(2, ABC), engine=SYNC, cost=STEP, mode="reference")
    with pytest.raises(ParameterError, match=r"empty|no requests"):
        simulate(ClosedLoopClients(2, []), engine=SYNC, cost=STEP)


# --------------------------------------------------------------------------------------------
# Properties: any workload, engine (vLLM's defaults with prefix caching and async scheduling,
# priority, synchronous), clients and think time.
# --------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(scenarios(max_output=40), st.integers(1, 6), st.sampled_from([0.0, 0.25, 3.0]))
def test_the_run_is_its_requests_simulated_at_the_times_they_were_sent(scenario, concurrency, think_s):
    requests, eng, cost = scenario
    eng = dataclasses.replace(eng, scheduler_reserve_full_isl=True)  # no livelock
    result = simulate(ClosedLoopClients(concurrency, requests, think_time_s=think_s), engine=eng, cost=cost)
    assert_same(simulate(realized(requests, result), engine=eng, cost=cost), result)
    sent, finished = sent_and_finished(result)
    assert sent == sorted(sent)  # sent in input order
    assert most_in_flight(sent, finished) <= concurrency
    if concurrency == 1:  # strictly one after another
        assert sent[1:] == [f + think_s for f in finished[:-1]]


@settings(max_examples=40, deadline=None)
@given(
    scenarios(max_output=40),
    st.integers(1, 3),
    st.integers(1, 8),
    st.sampled_from([0.0, 0.5]),
    st.sampled_from(["round_robin", "least_loaded", "random"]),
    st.integers(0, 2**32 - 1),
)
def test_a_fleet_of_clients_gives_each_replica_its_share_at_the_times_sent(
    scenario, replicas, concurrency, think_s, router, seed
):
    requests, eng, cost = scenario
    eng = dataclasses.replace(eng, scheduler_reserve_full_isl=True)
    rng = np.random.default_rng(seed)
    policy = (lambda r, loads, t: int(rng.integers(replicas))) if router == "random" else router
    clients = ClosedLoopClients(concurrency, requests, think_time_s=think_s)
    fleet = simulate_fleet(clients, replicas=replicas, engine=eng, cost=cost, router=policy)
    sent, finished = [], []
    for index, result in enumerate(fleet.replicas):
        share = [r for r in requests if fleet.assignment[r.request_id] == index]
        if result is None:
            assert not share
            continue
        assert_same(simulate(realized(share, result), engine=eng, cost=cost), result)
        each = sent_and_finished(result)
        sent += each[0]
        finished += each[1]
    assert most_in_flight(sent, finished) <= concurrency
    if replicas == 1:
        assert_same(simulate(clients, engine=eng, cost=cost), fleet.replicas[0])
