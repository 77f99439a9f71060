"""The step times the compiled core computes itself (:mod:`budgetlab.simulator.core_cost`).

The core prices ``CalibratedCost`` (the real-engine default) for dense full-attention models with
the model's own arithmetic; these tests hold it to ``batch_time_s`` bit for bit on hand-picked
and random steps (CUDA-graph dispatch, padding, launch time, tile rounding, the knee, the ring
and kernel-table all-reduce at TP 2 and 4), check one step by hand, check which costs go back to
Python, and run whole simulations both ways.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetlab import Batch, CalibratedCost, ConstantCost, EngineConfig, IdealCost, hardware, model
from budgetlab.simulator import RunOptions, simulate, simulate_with
from budgetlab.simulator.core_cost import calibrated_params, calibrated_step_s, cost_kind
from budgetlab.simulator.core_state import COST_CALIBRATED, COST_CONSTANT, COST_IDEAL, COST_PYTHON

from sim_modes import assert_same

H100 = hardware("h100-sxm")
ENGINE = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)


def core_time_s(cost: CalibratedCost, batch: Batch, max_tokens: int = 2048) -> float:
    """The core's time for ``batch``: its sums as ``core_cost.step_s`` forms them from a plan."""
    params = calibrated_params(cost, max_tokens)
    assert params is not None
    prefill_tokens = prefill_pairs = prefill_context = 0.0
    for m_int, c_int in zip(batch.prefill_tokens, batch.prefill_context_tokens):
        m, c = float(m_int), float(c_int)
        prefill_tokens = prefill_tokens + m
        prefill_pairs = prefill_pairs + (m * c + m * (m + 1.0) / 2.0)
        prefill_context = prefill_context + c
    uniform = all(m == 1 and c > 0 for m, c in zip(batch.prefill_tokens, batch.prefill_context_tokens))
    decodes, context = float(batch.num_decodes), float(batch.decode_context_tokens)
    tokens = (decodes + 0.0) + prefill_tokens
    return calibrated_step_s(params, tokens, prefill_pairs + (context + decodes), prefill_context + context, uniform)


def deployments() -> dict[str, CalibratedCost]:
    llama8, llama70 = model("llama-3.1-8b"), model("llama-3.1-70b")
    tp2 = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256, tensor_parallel_size=2)
    tp4_eager = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, tensor_parallel_size=4, enforce_eager=True)
    return {
        "8b, no engine (no graphs)": CalibratedCost.typical(H100, llama8),
        "8b, engine graphs": CalibratedCost.typical(H100, llama8, engine=ENGINE),
        "8b, tiles": CalibratedCost.typical(H100, llama8, engine=ENGINE).with_(tile_tokens=64),
        "70b TP2, kernel all-reduce": CalibratedCost.typical(H100, llama70, engine=tp2),
        "70b TP2, ring all-reduce": CalibratedCost.typical(H100, llama70, engine=tp2).with_(all_reduce_kernels=False),
        "70b TP4, eager": CalibratedCost.typical(H100, llama70, engine=tp4_eager),
    }


DEPLOYMENTS = deployments()

BATCHES = [
    Batch(num_decodes=1, decode_context_tokens=100),
    Batch(num_decodes=100, decode_context_tokens=50_000),  # a FULL graph
    Batch(num_decodes=256, decode_context_tokens=300_000),
    Batch(0, 0, (2048,), (0,)),  # beyond the largest graph: eager
    Batch(0, 0, (1,), (7,)),  # one token over a cache: a uniform decode
    Batch(3, 900, (1, 1), (5, 9)),  # uniform
    Batch(3, 900, (1, 1), (5, 0)),  # not uniform: a first token
    Batch(10, 4_000, (500, 17), (1_000, 0)),  # mixed: PIECEWISE
    Batch(0, 0, (), ()),  # the empty step of a pipelined engine
]


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
@pytest.mark.parametrize("batch", BATCHES, ids=repr)
def test_core_prices_calibrated_steps_bit_for_bit(name, batch):
    cost = DEPLOYMENTS[name]
    assert core_time_s(cost, batch) == cost.batch_time_s(batch)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(sorted(DEPLOYMENTS)),
    num_decodes=st.integers(0, 256),
    context_per_decode=st.integers(1, 8_000),
    chunks=st.lists(st.tuples(st.integers(1, 600), st.integers(0, 9_000)), max_size=4),
)
def test_core_prices_random_calibrated_steps_bit_for_bit(name, num_decodes, context_per_decode, chunks):
    cost = DEPLOYMENTS[name]
    room = 2048 - num_decodes
    kept, total = [], 0
    for m, c in chunks:
        if total + m <= room:
            kept.append((m, c))
            total += m
    batch = Batch(num_decodes, num_decodes * context_per_decode, tuple(m for m, _ in kept), tuple(c for _, c in kept))
    assert core_time_s(cost, batch) == cost.batch_time_s(batch)


def test_decode_runs_match_decode_run_time_s():
    """A decode-only run's steps, as the core prices them one by one, equal ``decode_run_time_s``."""
    for cost in DEPLOYMENTS.values():
        contexts = 40_000 + 128 * np.arange(300)
        expected = cost.decode_run_time_s(num_decodes=128, decode_context_tokens=contexts)
        got = [core_time_s(cost, Batch(num_decodes=128, decode_context_tokens=int(c))) for c in contexts]
        assert np.array_equal(np.array(got), expected)


def test_one_step_by_hand():
    """A decode step of 8 requests over 8,000 cached tokens without graphs (Llama 3.1 8B, H100):
    memory-bound, so ``overhead + (weights + KV) read + knee loss`` with the cost's own constants."""
    cost = CalibratedCost.typical(H100, model("llama-3.1-8b"))
    c = cost._constants
    memory_s = cost.weight_read_s + 8_000.0 * c.kv_s_per_token
    compute_s = 8.0 * cost.per_token_s + (8_000.0 + 8.0) * c.attention_s_per_pair
    assert memory_s > compute_s  # a small decode reads far more than it computes
    expected = c.overhead_s + (memory_s + c.knee_overlap_loss * compute_s * (compute_s / memory_s))
    got = core_time_s(cost, Batch(num_decodes=8, decode_context_tokens=8_000))
    assert got == expected
    assert 0.005 < got < 0.02  # about 2 ms of CPU plus 16 GB of weights at ~3 TB/s


def test_cost_kinds():
    llama = model("llama-3.1-8b")
    assert cost_kind(ConstantCost(0.1), 64)[0] == COST_CONSTANT
    assert cost_kind(IdealCost(H100, llama), 64)[0] == COST_IDEAL
    assert cost_kind(CalibratedCost.typical(H100, llama, engine=ENGINE), 2048)[0] == COST_CALIBRATED
    # the weights a mixture of experts reads depend on the step; other attention kinds add terms;
    # a proposer adds its passes: these are priced by the model, in Python
    assert cost_kind(CalibratedCost.typical(H100, model("mixtral-8x7b")), 2048)[0] == COST_PYTHON
    assert cost_kind(CalibratedCost.typical(H100, model("gemma-2-9b")), 2048)[0] == COST_PYTHON
    speculating = EngineConfig(
        max_num_batched_tokens=2048, max_num_seqs=64, num_speculative_tokens=2, speculative_method="ngram"
    )
    assert cost_kind(CalibratedCost.typical(H100, llama, engine=speculating), 2048)[0] == COST_PYTHON

    class Custom(CalibratedCost):  # a subclass may price steps its own way
        pass

    custom = Custom.typical(H100, llama)
    assert cost_kind(custom, 2048)[0] == COST_PYTHON


def test_all_reduce_table_ends_at_the_budget():
    """The kernel all-reduce is tabled per token count up to the budget (every graph size is
    within it); a step beyond it is refused (NaN: the core reports a bad duration) rather than
    read out of bounds."""
    tp2 = EngineConfig(max_num_batched_tokens=256, max_num_seqs=256, tensor_parallel_size=2)
    cost = CalibratedCost.typical(H100, model("llama-3.1-70b"), engine=tp2)
    assert max(cost._constants.graph.sizes) <= 256
    for batch in (Batch(num_decodes=256, decode_context_tokens=25_600), Batch(0, 0, (256,), (0,))):
        assert core_time_s(cost, batch, max_tokens=256) == cost.batch_time_s(batch)
    assert np.isnan(core_time_s(cost, Batch(0, 0, (257,), (0,)), max_tokens=256))


def test_a_budget_beyond_the_table_is_priced_in_python():
    """Chunked prefill off at a long context makes the budget the context: its all-reduce table
    would hold a million token counts, so the model prices the steps that occur instead."""
    cost = CalibratedCost.typical(H100, model("llama-3.1-70b")).with_(tp=2)
    assert cost._constants.all_reduce_table is not None
    assert cost_kind(cost, 2**20)[0] == COST_PYTHON
    assert cost_kind(cost, 2048)[0] == COST_CALIBRATED
    assert calibrated_params(cost, 2048) is not calibrated_params(cost, 2048)  # a fresh copy each time


@pytest.mark.parametrize(
    "engine",
    [
        EngineConfig(max_num_batched_tokens=512, max_num_seqs=32, num_kv_blocks=4000),
        EngineConfig(
            max_num_batched_tokens=512,
            max_num_seqs=32,
            num_kv_blocks=4000,
            enable_prefix_caching=False,
            async_scheduling=False,
        ),
        EngineConfig(max_num_batched_tokens=256, max_num_seqs=16, num_kv_blocks=4000, tensor_parallel_size=2),
    ],
    ids=["defaults", "synchronous", "tp2"],
)
def test_simulations_priced_in_the_core_equal_python_pricing(engine):
    import budgetlab as bl

    requests = bl.conversation_like(num_requests=120, rate_per_s=20.0, seed=3)
    name = "llama-3.1-70b" if engine.tensor_parallel_size > 1 else "llama-3.1-8b"
    cost = CalibratedCost.typical(H100, model(name), engine=engine)
    assert cost_kind(cost, engine.max_num_batched_tokens)[0] == COST_CALIBRATED
    core = simulate(requests, engine=engine, cost=cost)
    python = simulate_with(requests, engine=engine, cost=cost, options=RunOptions(mode="fast", price_in_python=True))
    assert_same(core, python)
    assert_same(core, simulate(requests, engine=engine, cost=cost, mode="reference"))
