"""Issue 14, the simulator's part: time from the trace's own origin, columnar results, and a
step log that costs nothing until it is read.

* Arrivals in epoch seconds (1.7e9, 1.7e12, 1.7e15 s) give exactly the latencies of the same
  workload starting at 0, in every mode (before, 1.7e12 s shifted TTFT by 1 % and at 1.7e15 s
  reference mode reported TTFT = E2E = 0: float64's spacing there is 0.25 s).
* Memory per simulated request, measured with ``tracemalloc`` around ``simulate`` and
  ``summary`` (the per-request figure does not depend on the count: 486 B at 10 k requests,
  482 B at 40 k; the code of issue 13 took 954 B).
* The lazy :class:`~budgetlab.simulator.StepLog`: every way of reading it gives the same dicts,
  and its tables hold the same content.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pandas as pd
import pytest

from budgetlab import ConstantCost, EngineConfig, IdealCost, Request, hardware, model
from budgetlab.errors import ParameterError
from budgetlab.simulator import StepLog, simulate, steplog

from sim_modes import run_all_modes

LATENCY_COLUMNS = ["ttft_s", "e2e_s", "mean_itl_s", "max_itl_s", "queue_s", "num_preemptions"]
TIME_COLUMNS = ["arrival_at_s", "first_token_at_s", "finished_at_s"]
OFFSETS_S = (0.0, 1.7e9, 1.7e12, 1.7e15)


def engine(**kwargs) -> EngineConfig:
    """A small synchronous engine without a prefix cache (the hand-worked cases count its steps)."""
    defaults = {
        "max_num_batched_tokens": 64,
        "max_num_seqs": 4,
        "num_kv_blocks": 40,
        "block_size": 4,
        "enable_prefix_caching": False,
        "async_scheduling": False,
    }
    return EngineConfig(**(defaults | kwargs))


def shifted(requests: list[Request], offset_s: float) -> list[Request]:
    """The same requests ``offset_s`` later (arrivals on a 0.5 s grid: exact at every offset)."""
    return [Request(r.request_id, r.arrival_at_s + offset_s, r.prompt_tokens, r.output_tokens) for r in requests]


# --------------------------------------------------------------------------------------------
# Time from the trace's own origin
# --------------------------------------------------------------------------------------------


def test_one_request_at_an_epoch_keeps_its_milliseconds():
    # One request, 10 prompt tokens, 3 output tokens, 10 ms a step: the prompt's step samples
    # the first token (TTFT 0.01 s), two decodes follow (E2E 0.03 s, ITL 0.01 s). At 1.7e15 s
    # the old absolute clock rounded 1.7e15 + 0.01 back to 1.7e15 (TTFT = E2E = 0).
    for offset in OFFSETS_S:
        result = run_all_modes([Request("a", offset, 10, 3)], engine(), ConstantCost(0.01))
        row = result.requests.iloc[0]
        assert result.time_origin_s == offset
        assert row["arrival_at_s"] == 0.0
        assert row["ttft_s"] == 0.01
        assert row["e2e_s"] == pytest.approx(0.03, rel=1e-12)
        assert row["mean_itl_s"] == pytest.approx(0.01, rel=1e-12)
        assert result.summary()["ttft_p50_s"] == 0.01
        assert result.steps["start_at_s"].tolist() == pytest.approx([0.0, 0.01, 0.02], rel=1e-12)


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
@pytest.mark.parametrize("caching", [False, True])
def test_epoch_offsets_give_identical_latencies_in_every_mode(policy, caching):
    # A busy workload (preemptions in a 40-block pool, chunked prompts, decode-only runs) on
    # the H100 roofline: every latency, every relative time, the step table, the step log and
    # the summary are identical at every offset, bit for bit, in fast and reference mode.
    rng = np.random.default_rng(7)
    base = [
        Request(i, 0.5 * int(k), int(p), int(o))
        for i, (k, p, o) in enumerate(
            zip(np.sort(rng.integers(0, 40, 30)), rng.integers(1, 70, 30), rng.integers(1, 40, 30))
        )
    ]
    cost = IdealCost(hardware("h100-sxm"), model("llama-3.1-8b"))
    eng = engine(scheduling_policy=policy, enable_prefix_caching=caching, async_scheduling=caching)
    at_zero = run_all_modes(base, eng, cost)
    assert at_zero.time_origin_s == 0.0
    assert at_zero.summary()["num_preemptions"] > 0
    for offset in OFFSETS_S[1:]:
        result = run_all_modes(shifted(base, offset), eng, cost)
        assert result.time_origin_s == offset
        pd.testing.assert_frame_equal(result.requests, at_zero.requests, check_exact=True)
        pd.testing.assert_frame_equal(result.steps, at_zero.steps, check_exact=True)
        assert result.step_log() == at_zero.step_log()
        a, b = result.summary(), at_zero.summary()
        assert a.keys() == b.keys()
        assert all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def test_a_trace_that_does_not_start_at_zero_is_reported_from_its_first_arrival():
    # Arrivals 5 s and 6 s, 1 s a step: the origin is 5 s; b's arrival is 1 s after it.
    # a: prompt step 0..1 (first token at 1), finishes at 2. b arrives at 1 (relative), is
    # admitted in the step at 1 with a's decode, samples at 2 and 3.
    reqs = [Request("a", 5.0, 4, 2), Request("b", 6.0, 4, 2)]
    result = run_all_modes(reqs, engine(), ConstantCost(1.0))
    assert result.time_origin_s == 5.0
    table = result.requests.set_index("request_id")
    assert table[TIME_COLUMNS].to_numpy().tolist() == [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]
    assert (table["arrival_at_s"] + result.time_origin_s).tolist() == [5.0, 6.0]
    assert table["ttft_s"].tolist() == [1.0, 1.0]
    assert [e["start_at_s"] for e in result.step_log()] == [0.0, 1.0, 2.0]


# --------------------------------------------------------------------------------------------
# Memory per simulated request
# --------------------------------------------------------------------------------------------


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


def test_memory_per_simulated_request_is_a_few_hundred_bytes():
    # tracemalloc's peak over simulate() + summary(), per request: 486 B here (482 B at 40 k
    # requests: it does not grow with the count); the per-request Python objects of issue 13
    # (event lists, id lists, the eager request frame, one gap per token) took 954 B.
    num_requests = 10_000
    frame = cheap_workload(num_requests)
    cost = IdealCost(hardware("h100-sxm"), model("llama-3.1-8b"))
    eng = EngineConfig(
        max_num_batched_tokens=2048,
        max_num_seqs=256,
        num_kv_blocks=20_000,
        enable_prefix_caching=False,
        async_scheduling=False,
    )
    simulate(frame.iloc[:200], engine=eng, cost=cost).summary()  # warm the caches
    tracemalloc.start()
    try:
        result = simulate(frame, engine=eng, cost=cost)
        summary = result.summary()
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summary["num_requests"] == num_requests
    assert peak_bytes / num_requests < 700


# --------------------------------------------------------------------------------------------
# The step log
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def busy() -> tuple:
    rng = np.random.default_rng(3)
    reqs = [
        Request(f"r{i}", float(t), int(p), int(o))
        for i, (t, p, o) in enumerate(
            zip(np.sort(rng.uniform(0, 2, 60)), rng.integers(1, 90, 60), rng.integers(1, 60, 60))
        )
    ]
    cost = IdealCost(hardware("h100-sxm"), model("llama-3.1-8b"))
    eng = engine(max_num_seqs=8, num_kv_blocks=60, long_prefill_token_threshold=16)
    return reqs, eng, cost


def test_every_way_of_reading_the_step_log_gives_the_same_dicts(busy):
    reqs, eng, cost = busy
    fast = simulate(reqs, engine=eng, cost=cost, mode="fast")
    reference = simulate(reqs, engine=eng, cost=cost, mode="reference")
    assert fast.num_records < len(reference.step_log().chunks())  # decode runs are one row each
    log = fast.step_log()
    assert isinstance(log, StepLog)
    as_list = list(log)
    assert len(as_list) == len(log) == len(fast.steps) == fast.summary()["num_steps"]
    assert [log[i] for i in range(len(log))] == as_list == list(reference.step_log())
    assert log[-1] == as_list[-1] and log[3:9] == as_list[3:9] and log[::7] == as_list[::7]
    assert log == reference.step_log() and log == as_list and as_list == log
    assert log != as_list[:-1] and log != reference.step_log()[:-1]
    with pytest.raises(IndexError):
        log[len(log)]
    log[0]["scheduled"].append("changed")  # a new dict on every access
    assert log[0] == as_list[0]


def test_small_batches_read_the_same_step_log(busy, monkeypatch):
    # The log is built a batch of steps at a time (bounded by steps and by chunks); batches of
    # 3 steps / 5 chunks cut through normal steps and jumped runs alike.
    reqs, eng, cost = busy
    result = simulate(reqs, engine=eng, cost=cost, mode="fast")
    whole = list(result.step_log())
    monkeypatch.setattr(steplog, "_BATCH_STEPS", 3)
    monkeypatch.setattr(steplog, "_BATCH_CHUNKS", 5)
    assert list(result.step_log()) == whole == list(simulate(reqs, engine=eng, cost=cost, mode="reference").step_log())


def test_the_step_log_tables_hold_what_the_dicts_hold(busy):
    reqs, eng, cost = busy
    for mode in ("fast", "reference"):
        log = simulate(reqs, engine=eng, cost=cost, mode=mode).step_log()
        chunks = [
            (step, rid, n, kind, start)
            for step, entry in enumerate(log)
            for (rid, n, kind), start in zip(entry["scheduled"], entry["start"])
        ]
        table = log.chunks()
        assert list(table.itertuples(index=False, name=None)) == chunks
        events = [
            (step, kind, rid)
            for step, entry in enumerate(log)
            for kind in ("preempted", "first_token", "finished")
            for rid in entry[kind]
        ]
        assert list(log.events().itertuples(index=False, name=None)) == events
        assert sum(1 for e in events if e[1] == "finished") == len(reqs)


def test_a_different_run_gives_a_different_step_log(busy):
    reqs, eng, cost = busy
    a = simulate(reqs, engine=eng, cost=cost).step_log()
    b = simulate(reqs[:-1], engine=eng, cost=cost).step_log()
    renamed = [Request(f"x{r.request_id}", r.arrival_at_s, r.prompt_tokens, r.output_tokens) for r in reqs]
    c = simulate(renamed, engine=eng, cost=cost).step_log()
    assert a != b and a != c
    assert [e["start_at_s"] for e in a] == [e["start_at_s"] for e in c]


# --------------------------------------------------------------------------------------------
# Ids as one array
# --------------------------------------------------------------------------------------------


def test_ids_of_any_hashable_kind_come_back_as_given():
    # int ids come back as Python ints (not NumPy integers), tuples stay whole, mixed kinds work
    for ids in ([3, 1, 2], [(0, "a"), (0, "b"), (1, "a")], ["x", 7, (1, 2)]):
        reqs = [Request(rid, float(i), 4, 2) for i, rid in enumerate(ids)]
        result = simulate(reqs, engine=engine(), cost=ConstantCost(1.0))
        assert result.requests["request_id"].tolist() == ids
        finished = [rid for entry in result.step_log() for rid in entry["finished"]]
        assert finished == ids and all(type(a) is type(b) for a, b in zip(finished, ids))
    frame = pd.DataFrame({"request_id": [10, 11], "arrival_at_s": [0.0, 0.0], "prompt_tokens": 4, "output_tokens": 1})
    first = simulate(frame, engine=engine(), cost=ConstantCost(1.0)).step_log()[0]
    assert first["finished"] == [10, 11] and type(first["finished"][0]) is int


def test_duplicate_ids_are_named():
    reqs = [Request(i % 3, float(i), 4, 2) for i in range(5)]
    with pytest.raises(ParameterError, match="duplicate request_id 0"):
        simulate(reqs, engine=engine(), cost=ConstantCost(1.0))
    frame = pd.DataFrame({"request_id": [[1], [2]], "arrival_at_s": [0.0, 1.0], "prompt_tokens": 4, "output_tokens": 2})
    with pytest.raises(ParameterError, match="hashable"):
        simulate(frame, engine=engine(), cost=ConstantCost(1.0))


def test_a_loaded_trace_is_simulated_from_its_columns_as_from_its_requests(tmp_path):
    from budgetlab.workload import load_trace
    from budgetlab.workload.frames import RequestColumns

    path = tmp_path / "trace.csv"
    rows = [(1.7e9 + 0.25 * i, 100 + 37 * i, 4 + i % 5) for i in range(40)]
    path.write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(f"{a!r},{p},{d}\n" for a, p, d in rows),
        encoding="utf-8",
    )
    columns = load_trace(path)
    assert isinstance(columns, RequestColumns)
    engine = EngineConfig(max_num_batched_tokens=512, max_num_seqs=8)
    cost = IdealCost(hardware("h100-sxm"), model("llama-3.1-8b"))
    from_columns = simulate(columns, engine=engine, cost=cost)
    from_requests = simulate(list(columns), engine=engine, cost=cost)
    pd.testing.assert_frame_equal(from_columns.requests, from_requests.requests)
    assert from_columns.summary() == from_requests.summary()
    assert from_columns.time_origin_s == from_requests.time_origin_s == 1.7e9
