"""CUDA graphs in the calibrated step cost: dispatch per step, the graph terms worked by hand,
the named step breakdown, and each step's mode in the step log."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from budgetlab import Batch, IdealCost, Request, cudagraph_capture_sizes, cudagraph_dispatch, simulate
from budgetlab.catalog import hardware, list_hardware, list_models, model
from budgetlab.cost.calibrated import TYPICAL, CalibratedCost
from budgetlab.cost.step_terms import STEP_TERM_NAMES
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.specs import EngineConfig

H100 = hardware("h100-sxm")
LLAMA7B = model("llama-2-7b")
#: The published runs' engine: graphs up to min(2 x 128, 512) = 256 tokens, FULL up to 128.
ENGINE = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)
EAGER = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128, enforce_eager=True)
OFF = {"graph_padding": False, "piecewise_layer_launch_s": 0.0, "eager_layer_launch_s": 0.0}


def decode(n: int, context: int = 1000) -> Batch:
    return Batch(num_decodes=n, decode_context_tokens=n * context)


def mixed(decodes: int, chunk: int, chunk_context: int = 0) -> Batch:
    return Batch(
        num_decodes=decodes,
        decode_context_tokens=decodes * 500,
        prefill_tokens=(chunk,),
        prefill_context_tokens=(chunk_context,),
    )


# --------------------------------------------------------------------------------------------
# Dispatch: the engine's graphs, recorded by for_engine, as budgetlab.cudagraph dispatches them
# --------------------------------------------------------------------------------------------


def test_for_engine_records_the_engines_graphs():
    cost = CalibratedCost.ideal(H100, LLAMA7B).for_engine(ENGINE)
    assert cost.cudagraph_sizes == tuple(cudagraph_capture_sizes(ENGINE, H100))
    assert cost.cudagraph_sizes[-1] == 256 and cost.cudagraph_full_sizes[-1] == 128
    assert not cost.enforce_eager
    eager = cost.for_engine(EAGER)
    assert (eager.cudagraph_sizes, eager.cudagraph_full_sizes, eager.enforce_eager) == ((), (), True)
    assert CalibratedCost.typical(H100, LLAMA7B).cudagraph_sizes is None  # no engine, no graphs


def test_a_100_sequence_decode_pads_to_104_and_runs_full():
    cost = CalibratedCost.typical(H100, LLAMA7B, engine=ENGINE)
    terms = cost.step_terms(decode(100))
    assert (terms.mode, terms.num_tokens, terms.padded_tokens) == ("FULL", 100, 104)


def test_a_300_token_mixed_step_at_128_sequences_runs_without_a_graph():
    cost = CalibratedCost.typical(H100, LLAMA7B, engine=ENGINE)
    assert cost.step_terms(mixed(10, 290)).mode == "NONE"  # 300 > 256, the largest capture size
    assert cost.step_terms(mixed(10, 190)).mode == "PIECEWISE"  # 200 -> 200
    assert cost.step_terms(mixed(10, 193)).padded_tokens == 208  # 203 -> 208 (multiples of 8)
    assert cost.step_terms(mixed(0, 1, chunk_context=50)).mode == "FULL"  # one token over a cache
    assert cost.step_terms(mixed(0, 1, chunk_context=0)).mode == "PIECEWISE"  # a 1-token prompt


@given(
    tokens=st.integers(1, 3000),
    uniform=st.booleans(),
    max_num_seqs=st.sampled_from([1, 8, 100, 128, 256, 1024]),
    budget=st.sampled_from([300, 2048, 8192]),
)
def test_dispatch_is_budgetlab_cudagraph_dispatch(tokens, uniform, max_num_seqs, budget):
    engine = EngineConfig(max_num_batched_tokens=max(budget, max_num_seqs), max_num_seqs=max_num_seqs)
    cost = CalibratedCost.ideal(H100, LLAMA7B).for_engine(engine)
    modes, padded = cost.cudagraph_modes([tokens], [uniform])
    assert (modes[0], int(padded[0])) == cudagraph_dispatch(engine, H100, tokens, uniform)


def test_enforce_eager_makes_every_step_none_and_pays_the_eager_launch():
    cost = CalibratedCost.typical(H100, LLAMA7B, engine=EAGER).with_(eager_layer_launch_s=300e-6)
    for batch in (decode(1), decode(100), mixed(10, 190), mixed(10, 1500)):
        terms = cost.step_terms(batch)
        assert (terms.mode, terms.padded_tokens) == ("NONE", batch.num_tokens)
        assert terms.terms["graph_padding"] == 0.0 and terms.terms["piecewise_launch"] == 0.0
    # One decode: the GPU forward (layers + roof) is below 32 x 300 us = 9.6 ms, so the step
    # takes the launch time instead of the GPU forward.
    one = cost.step_terms(decode(1))
    assert one.terms["eager_launch"] > 0
    assert one.total_s == pytest.approx(TYPICAL["step_overhead_s"] + 32 * 300e-6, rel=1e-12)


# --------------------------------------------------------------------------------------------
# The terms by hand
# --------------------------------------------------------------------------------------------


def test_launch_time_shows_only_beyond_the_gpu_work():
    # Idealized roofline on H100: weight read 6.74e9 x 2 B / 3.35e12 B/s = 4.024 ms; math
    # 300 x 2 x 6.74e9 / 989.4e12 = 4.087 ms: the 300-token step's GPU forward is 4.087 ms.
    ideal = CalibratedCost.ideal(H100, LLAMA7B).for_engine(ENGINE)
    step = mixed(10, 290)
    assert ideal.batch_time_s(step) == pytest.approx(4.087e-3, rel=1e-3)
    # 32 layers x 200 us = 6.4 ms of host launches: the step takes 6.4 ms, 2.31 ms of it exposed.
    launching = ideal.with_(piecewise_layer_launch_s=200e-6)
    assert launching.batch_time_s(step) == pytest.approx(6.4e-3, rel=1e-12)
    terms = launching.step_terms(step)
    assert terms.mode == "NONE" and terms.terms["eager_launch"] == pytest.approx(6.4e-3 - 4.087e-3, rel=2e-3)
    # The same step PIECEWISE (200 tokens) pays the same host time under its own name.
    assert launching.step_terms(mixed(10, 190)).terms["piecewise_launch"] > 0
    # A FULL decode replays one graph: no launch term.
    assert launching.batch_time_s(decode(100)) == ideal.batch_time_s(decode(100))
    # A 2,048-token step's math (27.9 ms) hides every launch.
    assert launching.batch_time_s(mixed(0, 2048)) == ideal.batch_time_s(mixed(0, 2048))


def test_padding_adds_the_linear_math_of_the_padded_tokens():
    # Compute-bound (1 % of the FLOP rate, no attention): linear math only, on 104 not 100 tokens.
    base = CalibratedCost(hardware=H100, model=LLAMA7B, flop_efficiency=0.01).for_engine(ENGINE)
    padded = base.with_(graph_padding=True)
    per_token = base.per_token_s
    assert base.batch_time_s(decode(100)) == pytest.approx(100 * per_token, rel=1e-12)
    assert padded.batch_time_s(decode(100)) == pytest.approx(104 * per_token, rel=1e-12)
    terms = padded.step_terms(decode(100)).terms
    assert terms["linear_math"] == pytest.approx(100 * per_token, rel=1e-12)
    assert terms["graph_padding"] == pytest.approx(4 * per_token, rel=1e-12)
    # Tiles apply after the padding: 203 tokens pad to 208, two 128-token tiles.
    tiled = padded.with_(tile_tokens=128)
    assert tiled.batch_time_s(mixed(0, 203)) == pytest.approx(256 * per_token, rel=1e-12)
    # No graph (NONE): nothing to pad.
    assert padded.batch_time_s(mixed(0, 300)) == base.batch_time_s(mixed(0, 300))


def test_the_ideal_cost_stays_the_seeds_roofline_with_an_engine_recorded():
    ideal = IdealCost(H100, LLAMA7B)
    recorded = CalibratedCost.ideal(H100, LLAMA7B).for_engine(ENGINE)
    for batch in (decode(1), decode(100), mixed(10, 190), mixed(10, 290), mixed(0, 1, 50), Batch()):
        assert recorded.batch_time_s(batch) == ideal.batch_time_s(batch)
    contexts = np.array([0, 10, 5000, 123_456])
    np.testing.assert_array_equal(
        recorded.decode_run_time_s(num_decodes=100, decode_context_tokens=contexts),
        ideal.decode_run_time_s(num_decodes=100, decode_context_tokens=contexts),
    )
    tokens = np.array([0, 1, 100, 203, 300, 2048])
    np.testing.assert_array_equal(recorded.step_time_s(tokens), ideal.step_time_s(tokens))


@given(
    hw=st.sampled_from(list_hardware()),
    mdl=st.sampled_from(list_models()),
    max_num_seqs=st.sampled_from([1, 16, 128, 1024]),
    num_decodes=st.integers(0, 600),
    chunks=st.lists(st.integers(1, 3000), max_size=3),
)
def test_the_ideal_cost_with_any_engine_recorded_is_ideal_cost_bit_for_bit(hw, mdl, max_num_seqs, num_decodes, chunks):
    spec_h, spec_m = hardware(hw), model(mdl)
    engine = EngineConfig(max_num_batched_tokens=max(2048, max_num_seqs), max_num_seqs=max_num_seqs)
    recorded = CalibratedCost.ideal(spec_h, spec_m).for_engine(engine)
    batch = Batch(
        num_decodes=num_decodes,
        decode_context_tokens=7 * num_decodes,
        prefill_tokens=tuple(chunks),
        prefill_context_tokens=tuple(range(len(chunks))),
    )
    assert recorded.batch_time_s(batch) == IdealCost(spec_h, spec_m).batch_time_s(batch)


def test_typical_without_an_engine_has_no_graph_terms():
    cost = CalibratedCost.typical(H100, LLAMA7B)
    assert cost.graph_padding and cost.piecewise_layer_launch_s > 0  # on in the preset ...
    for batch in (decode(1), decode(100), mixed(10, 290)):  # ... but no engine's graphs to apply
        assert cost.batch_time_s(batch) == cost.with_(**OFF).batch_time_s(batch)
        assert cost.step_terms(batch).mode is None
    with pytest.raises(ConfigError, match="for_engine"):
        cost.cudagraph_modes([1], [True])


# --------------------------------------------------------------------------------------------
# The vectorized paths agree with batch_time_s bit for bit
# --------------------------------------------------------------------------------------------


COSTS = {
    "typical": CalibratedCost.typical(H100, LLAMA7B, engine=ENGINE),
    "eager": CalibratedCost.typical(H100, LLAMA7B, engine=EAGER),
    "launch-bound": CalibratedCost.typical(H100, model("qwen3-0.6b"), engine=ENGINE),
    "tiled": CalibratedCost.typical(H100, LLAMA7B, engine=ENGINE).with_(tile_tokens=64, flop_efficiency=0.05),
    "mixtral-tp2": CalibratedCost.typical(
        H100,
        model("mixtral-8x7b"),
        engine=EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128, tensor_parallel_size=2),
    ),
}


@pytest.mark.parametrize("name", list(COSTS))
def test_decode_runs_and_prefill_steps_equal_batch_time(name):
    cost = COSTS[name]
    contexts = np.array([0, 64, 4096, 300_000])
    for num_decodes in (1, 3, 100, 128, 200, 300):  # FULL, FULL, FULL, FULL, PIECEWISE, NONE
        run = cost.decode_run_time_s(num_decodes=num_decodes, decode_context_tokens=contexts)
        steps = [cost.batch_time_s(Batch(num_decodes=num_decodes, decode_context_tokens=int(c))) for c in contexts]
        np.testing.assert_array_equal(run, steps)
    tokens = np.array([0, 1, 1, 7, 100, 203, 256, 257, 2048])
    context = np.array([0, 0, 50, 0, 10, 300, 0, 5, 100])
    priced = cost.step_time_s(tokens, context_tokens=context)
    one_by_one = [cost.batch_time_s(mixed(0, int(n), int(c))) if n else 0.0 for n, c in zip(tokens, context)]
    np.testing.assert_array_equal(priced, one_by_one)


@given(
    name=st.sampled_from(list(COSTS)),
    num_decodes=st.integers(0, 300),
    chunks=st.lists(st.integers(1, 2048), max_size=3),
    context=st.integers(0, 50_000),
)
def test_step_terms_add_up_to_the_step_time(name, num_decodes, chunks, context):
    cost = COSTS[name]
    batch = Batch(
        num_decodes=num_decodes,
        decode_context_tokens=num_decodes * context,
        prefill_tokens=tuple(chunks),
        prefill_context_tokens=tuple(context // (i + 1) for i in range(len(chunks))),
    )
    terms = cost.step_terms(batch)
    assert tuple(terms.terms) == STEP_TERM_NAMES
    assert all(value >= 0 for value in terms.terms.values())
    assert terms.total_s == pytest.approx(cost.batch_time_s(batch), rel=1e-12, abs=0.0)
    row = terms.as_dict()
    assert row["total_s"] == terms.total_s and row["mode"] == terms.mode
    assert row["padded_tokens"] >= row["num_tokens"] == batch.num_tokens


def test_step_terms_name_what_bounds_the_step():
    cost = COSTS["typical"]
    memory = cost.step_terms(decode(100))
    assert memory.bound == "memory" and memory.terms["weight_read"] == cost.weight_read_s
    assert memory.terms["linear_math"] == 0.0  # hidden under the weight read
    compute = cost.step_terms(mixed(0, 2048))
    assert compute.bound == "compute" and compute.terms["weight_read"] == 0.0
    assert compute.terms["linear_math"] == pytest.approx(2048 * cost.per_token_s, rel=1e-12)
    assert "step_overhead" in repr(compute) and "FULL" in repr(memory)
    assert "<table" in memory._repr_html_()


def test_graph_fields_are_checked():
    cost = CalibratedCost.ideal(H100, LLAMA7B)
    for sizes, full in (((2, 1), ()), ((0, 8), ()), ((1, 2.0), ()), ((1, 2), (4,)), ([1, 2], ())):
        with pytest.raises(ParameterError, match="cudagraph"):
            cost.with_(cudagraph_sizes=sizes, cudagraph_full_sizes=full)
    with pytest.raises(ParameterError, match="eager_layer_launch_s"):
        cost.with_(eager_layer_launch_s=-1e-6)
    with pytest.raises(ParameterError, match="graph_padding"):
        cost.with_(graph_padding="yes")


# --------------------------------------------------------------------------------------------
# The step log's modes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "reference"])
def test_step_log_modes_are_the_costs_dispatch_of_each_step(mode):
    rng = np.random.default_rng(3)
    requests = [Request(f"r{i}", 0.02 * i, int(rng.integers(20, 900)), int(rng.integers(1, 150))) for i in range(150)]
    cost = COSTS["typical"]
    result = simulate(requests, engine=ENGINE, cost=cost, mode=mode)
    log = result.step_log()
    table = log.cudagraph_modes(cost)
    assert len(table) == len(log) == len(result.steps)
    assert set(table["mode"].dropna()) == {"FULL", "PIECEWISE", "NONE"}
    chunks = log.chunks(cost)
    assert (chunks["mode"].to_numpy() == table["mode"].to_numpy()[chunks["step"]]).all()
    assert chunks["mode"].dtype == "category" and list(log.chunks().columns) == list(chunks.columns[:-2])
    durations = result.steps["duration_s"].to_numpy()
    for step, row, duration in zip(log, table.itertuples(), durations):
        decodes = [(n, s) for (_, n, kind), s in zip(step["scheduled"], step["start"]) if kind == "decode"]
        chunks = [(n, s) for (_, n, kind), s in zip(step["scheduled"], step["start"]) if kind != "decode"]
        batch = Batch(
            num_decodes=len(decodes),
            decode_context_tokens=sum(s for _, s in decodes),
            prefill_tokens=tuple(n for n, _ in chunks),
            prefill_context_tokens=tuple(s for _, s in chunks),
        )
        terms = cost.step_terms(batch)
        assert (row.mode if isinstance(row.mode, str) else None) == terms.mode
        assert row.num_tokens == batch.num_tokens
        if batch.num_tokens:
            assert row.padded_tokens == terms.padded_tokens
            assert terms.total_s == pytest.approx(duration, rel=1e-12)


def test_a_cost_built_for_one_engine_dispatches_the_graphs_of_the_engine_it_simulates():
    h100, llama = hardware("h100-sxm"), model("llama-3.1-8b")
    small = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8)  # graphs up to 16 tokens
    large = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)  # up to 256
    cost = CalibratedCost.typical(h100, llama, engine=small)
    assert cost.graphs_for(small) is cost
    moved = cost.graphs_for(large)
    assert moved.cudagraph_sizes == CalibratedCost.typical(h100, llama, engine=large).cudagraph_sizes
    assert max(moved.cudagraph_sizes) == 256 and max(cost.cudagraph_sizes) == 16
    # 100 decodes: NONE under the small engine's ladder, FULL (padded to 104) under the large one's.
    assert cost.step_terms(Batch(num_decodes=100, decode_context_tokens=10_000)).mode == "NONE"
    assert moved.step_terms(Batch(num_decodes=100, decode_context_tokens=10_000)).mode == "FULL"
    requests = [Request(i, 0.0, 10, 5) for i in range(100)]
    with_instance = simulate(requests, engine=large, cost=cost)
    with_own = simulate(requests, engine=large, cost=CalibratedCost.typical(h100, llama, engine=large))
    assert with_instance.summary() == with_own.summary()
    # A cost without recorded graphs stays as it is.
    plain = CalibratedCost.typical(h100, llama)
    assert plain.graphs_for(large) is plain


def test_a_cost_for_another_expert_parallelism_is_refused():
    h100, mixtral = hardware("h100-sxm"), model("mixtral-8x7b")
    tp = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, tensor_parallel_size=2)
    ep = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, tensor_parallel_size=2, enable_expert_parallel=True)
    with pytest.raises(ConfigError, match="expert_parallel"):
        simulate([Request(0, 0.0, 10, 5)], engine=ep, cost=CalibratedCost.typical(h100, mixtral, engine=tp))


def test_the_step_log_dispatches_with_the_simulated_engines_graphs():
    h100, llama = hardware("h100-sxm"), model("llama-3.1-8b")
    small = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8)
    large = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)
    requests = [Request(i, 0.0, 10, 5) for i in range(100)]
    result = simulate(requests, engine=large, cost=CalibratedCost.typical(h100, llama, engine=large))
    with_other = result.step_log().cudagraph_modes(CalibratedCost.typical(h100, llama, engine=small))
    with_own = result.step_log().cudagraph_modes(CalibratedCost.typical(h100, llama, engine=large))
    assert with_other.equals(with_own) and "FULL" in set(with_own["mode"].dropna())


def test_an_eager_engine_fuses_no_norm_into_its_all_reduces():
    h100, llama70 = hardware("h100-sxm"), model("llama-3.1-70b")
    compiled = CalibratedCost.typical(
        h100, llama70, engine=EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, tensor_parallel_size=4)
    )
    eager = CalibratedCost.typical(
        h100,
        llama70,
        engine=EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, tensor_parallel_size=4, enforce_eager=True),
    )
    # 64 decodes (1 MiB messages, FlashInfer at TP4): the compiled engine's calls absorb the norm kernel.
    from budgetlab.cost.step_terms import FUSED_NORM_S

    assert eager.all_reduce_s(64, cuda_graph=False) - compiled.all_reduce_s(64, cuda_graph=False) == pytest.approx(
        2 * 80 * FUSED_NORM_S, rel=1e-9
    )
    with pytest.raises(ParameterError, match="enforce_eager"):
        compiled.with_(enforce_eager=True)
