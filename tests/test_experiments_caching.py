"""budgetlab.experiments.caching: engine variants, TTFT by turn, the budget and KV pressure.

Hand-worked on tiny scenarios with ``ConstantCost(1.0)`` (every step lasts 1 s, so a step of a
busy engine starts at the next whole second) and 16-token blocks:

* *shared prompt*: ``a`` (64 tokens, all of stream ``g``, 2 outputs) at 0 s and ``b`` (70 tokens,
  its first 64 are ``g``) at 10 s, budget 16. ``a`` needs 4 prompt steps (TTFT 4 s) and is done
  at 5 s. With caching off ``b`` reads 70 tokens in 5 steps (TTFT 5 s); with caching on it finds
  ``a``'s 4 full blocks (64 tokens) and computes 6 tokens in one step (TTFT 1 s). Prompt tokens
  sent 134; computed 134 off, 70 on; hit rate 64 / 134.
* *LRU eviction* (``vllm-v1-prefix-async-priority.md`` rule 19, ``evict_tail``): 12 usable blocks;
  ``a`` 64 tokens of ``g`` at 0 s frees 4 cached blocks behind 8 never used; ``x`` 144 tokens at
  2 s takes 9 blocks, the 8 unused and ``a``'s deepest; ``y`` 80 tokens (64 of ``g``) at 4 s then
  finds only 3 blocks (48 tokens). With 100 blocks nothing is evicted and ``y`` hits 64.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from budgetlab import ConstantCost, EngineConfig, Request
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.experiments import caching
from budgetlab.workload import multi_turn_workload

SYNC = {"async_scheduling": False}


def _shared_prompt() -> list[Request]:
    return [
        Request("a", 0.0, 64, 2, prefix_id="g", prefix_tokens=64),
        Request("b", 10.0, 70, 2, prefix_id="g", prefix_tokens=64),
    ]


def _engine(**changes: object) -> EngineConfig:
    base = EngineConfig(max_num_batched_tokens=16, max_num_seqs=4, num_kv_blocks=20, async_scheduling=False)
    return EngineConfig(**{**base.__dict__, **changes})


@pytest.fixture(scope="module")
def shared_runs():
    return caching.simulate_variants(
        _shared_prompt(),
        engine=_engine(),
        cost=ConstantCost(1.0),
        variants={"off": {"enable_prefix_caching": False}, "on": {}},
    )


def test_variants_hand_worked_shared_prompt(shared_runs):
    table = caching.variants_table(shared_runs).set_index("variant")
    assert list(table.index) == ["off", "on"]
    off, on = table.loc["off"], table.loc["on"]
    assert off.enable_prefix_caching == False and on.enable_prefix_caching == True  # noqa: E712 (numpy bools)
    assert off.num_prompt_tokens == on.num_prompt_tokens == 134
    assert off.prefill_tokens == 134 and on.prefill_tokens == 70  # b computes 6 of its 70 tokens
    assert off.prefill_fraction == 1.0 and on.prefill_fraction == pytest.approx(70 / 134)
    assert on.prefix_hit_tokens == 64 and on.prefix_hit_rate == pytest.approx(64 / 134)
    assert math.isnan(off.prefix_hit_rate) and off.prefix_hit_tokens == 0
    assert on.recompute_hit_tokens == off.recompute_hit_tokens == 0
    ttft = {name: run.requests.set_index("request_id").ttft_s.to_dict() for name, run in shared_runs.items()}
    assert ttft == {"off": {"a": 4.0, "b": 5.0}, "on": {"a": 4.0, "b": 1.0}}
    assert table.num_empty_steps.tolist() == [0, 0]  # sync: every step is a forward pass


def test_engine_variants_table_is_variants_table_of_simulate_variants(shared_runs):
    direct = caching.engine_variants_table(
        _shared_prompt(),
        engine=_engine(),
        cost=ConstantCost(1.0),
        variants={"off": {"enable_prefix_caching": False}, "on": {}},
    )
    pd.testing.assert_frame_equal(direct, caching.variants_table(shared_runs))
    reference = caching.engine_variants_table(
        _shared_prompt(),
        engine=_engine(),
        cost=ConstantCost(1.0),
        variants={"off": {"enable_prefix_caching": False}, "on": {}},
        mode="reference",
    )
    pd.testing.assert_frame_equal(reference, direct)  # the simulator's two paths agree


def test_async_adds_an_empty_iteration_when_the_last_token_is_in_flight():
    # vllm-v1-prefix-async-priority.md rule 25-26: prompt 16, 3 outputs. Pipelined: 16 tokens, 1, 1,
    # then an iteration with only the last token in flight that schedules nothing.
    runs = caching.simulate_variants(
        [Request("r", 0.0, 16, 3)],
        engine=EngineConfig(max_num_batched_tokens=64, max_num_seqs=2, num_kv_blocks=8),
        cost=ConstantCost(1.0),
        variants={"sync": SYNC, "async": {"async_scheduling": True}},
    )
    table = caching.variants_table(runs).set_index("variant")
    assert table.loc["sync", ["num_steps", "num_forward_passes", "num_empty_steps"]].tolist() == [3, 3, 0]
    assert table.loc["async", ["num_steps", "num_forward_passes", "num_empty_steps"]].tolist() == [4, 3, 1]
    assert table.loc["async", "async_scheduling"] == True  # noqa: E712


def test_ttft_by_turn_hand_worked():
    # two conversations of three turns: messages of 50, answers of 10 (prompts 50, 110, 170), 20 s apart
    requests = multi_turn_workload(
        num_conversations=2,
        conversation_rate_per_s=1.0,
        turns=3,
        message=50,
        output=10,
        think_time_s=20.0,
        think_time_cv=0.0,
    )
    runs = caching.simulate_variants(
        requests,
        engine=EngineConfig(max_num_batched_tokens=512, max_num_seqs=8, num_kv_blocks=100, async_scheduling=False),
        cost=ConstantCost(1.0),
        variants={"off": {"enable_prefix_caching": False}, "on": {}},
    )
    frame = caching.ttft_by_turn(runs, requests).set_index(["case", "turn"])
    assert frame.num_requests.tolist() == [2] * 6
    assert frame.loc["on"].prompt_mean_tokens.tolist() == [50, 110, 170]
    # turn 2 declares turn 1's 60 tokens (3 full blocks: 48); turn 3 turn 2's 120 (7 blocks: 112)
    assert frame.loc["on"].prefix_hit_mean_tokens.tolist() == [0, 48, 112]
    assert frame.loc["off"].prefix_hit_mean_tokens.tolist() == [0, 0, 0]
    # every prompt fits one 512-token step; a turn arriving mid-step waits for the step in flight
    assert frame.ttft_p50_s.between(1.0, 2.0).all()
    pooled = caching.ttft_by_turn(runs, requests, max_turn=2)
    assert sorted(set(pooled.turn)) == [1, 2] and pooled[pooled.turn == 2].num_requests.tolist() == [4, 4]


def test_ttft_by_turn_rejects_runs_of_other_requests(shared_runs):
    with pytest.raises(ParameterError, match="not in requests"):
        caching.ttft_by_turn(shared_runs, [Request("z", 0.0, 10, 1)])
    with pytest.raises(ParameterError, match="results is empty"):
        caching.ttft_by_turn({}, _shared_prompt())


def test_budget_by_caching_rows_and_hits():
    frame = caching.budget_by_caching(_shared_prompt(), engine=_engine(), cost=ConstantCost(1.0), budgets=[64, 16, 32])
    assert frame.max_num_batched_tokens.tolist() == [16, 32, 64, 16, 32, 64]  # caching off first, budgets ascending
    assert frame.caching.tolist() == ["prefix caching off"] * 3 + ["prefix caching on"] * 3
    on = frame[frame.enable_prefix_caching]
    assert (on.prefix_hit_tokens == 64).all() and (on.prefill_tokens == 70).all()
    assert frame[~frame.enable_prefix_caching].prefill_tokens.tolist() == [134] * 3
    # caching off: a needs 64 / budget prompt steps, b ceil(70 / budget): 4 and 5, 2 and 3, 1 and 2
    assert frame.ttft_p50_s.tolist()[:3] == [4.5, 2.5, 1.5]
    # caching on: b computes 6 tokens in one step at every budget
    assert frame.ttft_p50_s.tolist()[3:] == [2.5, 1.5, 1.0]
    effect = caching.budget_effect(frame).set_index("enable_prefix_caching")
    assert effect.loc[False, "smallest_budget_tokens"] == 16 and effect.loc[False, "largest_budget_tokens"] == 64
    assert effect.loc[False, "saved_s"] == pytest.approx(3.0)  # 4.5 s -> 1.5 s
    assert effect.loc[False, "saved_fraction"] == pytest.approx(3.0 / 4.5)
    assert effect.loc[True, "at_smallest_s"] == pytest.approx(2.5) and effect.loc[True, "saved_s"] == pytest.approx(1.5)
    assert effect.loc[True, "saved_s"] < effect.loc[False, "saved_s"]  # caching: the budget matters less


def test_budget_by_caching_checks_its_axes():
    kwargs = {"engine": _engine(), "cost": ConstantCost(1.0)}
    with pytest.raises(ParameterError, match="repeats"):
        caching.budget_by_caching(_shared_prompt(), budgets=[16, 16], **kwargs)
    with pytest.raises(ParameterError, match="budgets is empty"):
        caching.budget_by_caching(_shared_prompt(), budgets=[], **kwargs)
    with pytest.raises(ParameterError, match=r"caching\[0\] must be True or False"):
        caching.budget_by_caching(_shared_prompt(), budgets=[16], caching=["on"], **kwargs)
    with pytest.raises(ConfigError, match="max_num_seqs"):
        caching.budget_by_caching(_shared_prompt(), budgets=[2], **kwargs)  # below max_num_seqs 4
    with pytest.raises(ParameterError, match="lacks"):
        caching.budget_effect(pd.DataFrame({"caching": ["on"]}))


def _evict_tail() -> list[Request]:
    return [
        Request("a", 0.0, 64, 1, prefix_id="g", prefix_tokens=64),
        Request("x", 2.0, 144, 1),
        Request("y", 4.0, 80, 1, prefix_id="g", prefix_tokens=64),
    ]


def test_kv_pressure_lru_eviction_hand_worked():
    engine = EngineConfig(max_num_batched_tokens=256, max_num_seqs=4, async_scheduling=False)
    frame = caching.kv_pressure(_evict_tail(), engine=engine, cost=ConstantCost(1.0), kv_tokens=[1600, 192])
    assert frame.num_kv_blocks.tolist() == [12, 100, 12, 100]  # caching off then on, pools ascending
    assert frame.kv_tokens.tolist() == [192, 1600, 192, 1600] and not frame.from_memory.any()
    on = frame[frame.enable_prefix_caching].set_index("num_kv_blocks")
    assert on.loc[12, "prefix_hit_tokens"] == 48  # x evicted a's deepest block: y:P32@48
    assert on.loc[100, "prefix_hit_tokens"] == 64
    assert on.loc[12, "prefix_hit_rate"] == pytest.approx(48 / 288) and on.loc[100, "prefix_hit_rate"] == pytest.approx(
        64 / 288
    )
    assert on.loc[12, "prefill_tokens"] == 64 + 144 + 32
    assert frame[~frame.enable_prefix_caching].prefix_hit_tokens.tolist() == [0, 0]


def test_kv_pressure_pool_from_memory(ideal, h100, llama8b):
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    frame = caching.kv_pressure(
        _evict_tail(), engine=engine, cost=ideal, kv_tokens=[None, 200], caching=[True], hardware=h100, model=llama8b
    )
    from budgetlab.memory import kv_capacity

    # 200 tokens round up to 13 blocks; None: the pool vLLM 0.19 would allocate
    assert frame.num_kv_blocks.tolist() == [13, kv_capacity(h100, llama8b, engine).num_blocks]
    assert frame.from_memory.tolist() == [False, True]
    assert frame.prefix_hit_tokens.tolist() == [64, 64]


def test_kv_pressure_checks_pools():
    kwargs = {"engine": _engine(), "cost": ConstantCost(1.0)}
    with pytest.raises(ParameterError, match=r"kv_tokens\[0\] must be None or an int >= the block size \(16\)"):
        caching.kv_pressure(_shared_prompt(), kv_tokens=[8], **kwargs)
    with pytest.raises(ParameterError, match="repeats"):
        caching.kv_pressure(_shared_prompt(), kv_tokens=[320, 320], **kwargs)


def test_variant_numbers_recompute_hits_match_the_requests():
    # a pool too small for two long answers at once: preemptions, and recomputes that hit
    requests = [Request(i, 0.0, 60, 60) for i in range(2)]
    engine = EngineConfig(max_num_batched_tokens=64, max_num_seqs=2, num_kv_blocks=10, async_scheduling=False)
    result = caching.simulate_variants(requests, engine=engine, cost=ConstantCost(1.0), variants={"on": {}})["on"]
    numbers = caching.variant_numbers(result)
    assert numbers["num_preemptions"] > 0
    assert numbers["recompute_hit_tokens"] == result.requests.recompute_hit_tokens.sum() > 0
    assert numbers["prefill_tokens"] > numbers["num_prompt_tokens"] - numbers["prefix_hit_tokens"]  # recomputes


def test_simulate_variants_checks_its_arguments():
    kwargs = {"engine": _engine(), "cost": ConstantCost(1.0)}
    with pytest.raises(ParameterError, match="non-empty mapping"):
        caching.simulate_variants(_shared_prompt(), variants={}, **kwargs)
    with pytest.raises(ParameterError, match="EngineConfig does not have"):
        caching.simulate_variants(_shared_prompt(), variants={"x": {"prefix_caching": True}}, **kwargs)
    with pytest.raises(ParameterError, match="requests is empty"):
        caching.simulate_variants([], variants={"x": {}}, **kwargs)
    with pytest.raises(ParameterError, match="Request objects"):
        caching.simulate_variants([("a", 0.0, 1, 1)], variants={"x": {}}, **kwargs)  # type: ignore[list-item]
    with pytest.raises(ParameterError, match="engine must be an EngineConfig"):
        caching.simulate_variants(_shared_prompt(), engine={}, cost=ConstantCost(1.0), variants={"x": {}})  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        caching.simulate_variants(_shared_prompt(), variants={"x": {"max_num_seqs": 64}}, **kwargs)  # > budget 16
    with pytest.raises(ParameterError, match="results is empty"):
        caching.variants_table({})
    assert caching.caching_label(True) == "prefix caching on" and caching.caching_label(False) == "prefix caching off"
