"""The calibrated step cost: ideal when every extra is off, and each extra worked by hand."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetlab import Batch, CostModel, EngineConfig, IdealCost, ParameterError
from budgetlab.catalog import data_path, hardware, list_hardware, list_models, model
from budgetlab.cost.calibrated import TYPICAL, CalibratedCost

VIDUR_TABLE = ("measured", "vidur-h100-llama2-7b-linear.csv")


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------

hardware_slugs = st.sampled_from(list_hardware())
model_slugs = st.sampled_from(list_models())


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    num_decodes = draw(st.integers(0, 512))
    chunks = draw(st.lists(st.integers(1, 8192), max_size=4))
    contexts = draw(st.lists(st.integers(0, 100_000), min_size=len(chunks), max_size=len(chunks)))
    decode_context = draw(st.integers(0, 2_000_000)) if num_decodes else 0
    return Batch(
        num_decodes=num_decodes,
        decode_context_tokens=decode_context,
        prefill_tokens=tuple(chunks),
        prefill_context_tokens=tuple(contexts),
    )


# --------------------------------------------------------------------------------------------
# Extras off and efficiencies 1: the seeds' idealized model, to the last bit
# --------------------------------------------------------------------------------------------


@given(hw=hardware_slugs, mdl=model_slugs, batch=batches())
def test_ideal_batch_time_equals_ideal_cost_exactly(hw, mdl, batch):
    spec_h, spec_m = hardware(hw), model(mdl)
    calibrated = CalibratedCost.ideal(spec_h, spec_m)
    assert calibrated.batch_time_s(batch) == IdealCost(spec_h, spec_m).batch_time_s(batch)


@given(
    hw=hardware_slugs,
    mdl=model_slugs,
    tokens=st.lists(st.integers(0, 1_000_000), min_size=1, max_size=50),
    contexts=st.lists(st.integers(0, 1_000_000), min_size=1, max_size=1),
)
def test_ideal_step_time_equals_ideal_cost_exactly(hw, mdl, tokens, contexts):
    spec_h, spec_m = hardware(hw), model(mdl)
    calibrated = CalibratedCost.ideal(spec_h, spec_m)
    ideal = IdealCost(spec_h, spec_m)
    np.testing.assert_array_equal(
        calibrated.step_time_s(np.array(tokens), context_tokens=contexts[0]),
        ideal.step_time_s(np.array(tokens)),
    )
    assert calibrated.weight_read_s == ideal.weight_read_s
    assert calibrated.per_token_s == ideal.per_token_s


@given(
    hw=hardware_slugs,
    mdl=model_slugs,
    num_decodes=st.integers(0, 1024),
    contexts=st.lists(st.integers(0, 10**7), min_size=1, max_size=30),
)
def test_ideal_decode_run_equals_ideal_cost_exactly(hw, mdl, num_decodes, contexts):
    spec_h, spec_m = hardware(hw), model(mdl)
    ctx = np.array(contexts)
    calibrated = CalibratedCost.ideal(spec_h, spec_m)
    ideal = IdealCost(spec_h, spec_m)
    np.testing.assert_array_equal(
        calibrated.decode_run_time_s(num_decodes=num_decodes, decode_context_tokens=ctx),
        ideal.decode_run_time_s(num_decodes=num_decodes, decode_context_tokens=ctx),
    )


def test_default_constructor_is_the_ideal(h100, llama8b):
    assert CalibratedCost(hardware=h100, model=llama8b) == CalibratedCost.ideal(h100, llama8b)


# --------------------------------------------------------------------------------------------
# The simulator's jump: a decode run equals each step's batch_time_s bit for bit
# --------------------------------------------------------------------------------------------


@given(
    mdl=model_slugs,
    tp=st.sampled_from([1, 2, 4, 8]),
    tile=st.sampled_from([None, 64, 128]),
    num_decodes=st.integers(0, 1024),
    contexts=st.lists(st.integers(0, 10**7), min_size=1, max_size=40),
)
def test_typical_decode_run_matches_batch_time_bitwise(h100, mdl, tp, tile, num_decodes, contexts):
    spec = model(mdl)
    if spec.num_attention_heads % tp:
        tp = 1
    cost = CalibratedCost.typical(h100, spec, tp=tp).with_(tile_tokens=tile)
    run = cost.decode_run_time_s(num_decodes=num_decodes, decode_context_tokens=np.array(contexts))
    one_by_one = [cost.batch_time_s(Batch(num_decodes=num_decodes, decode_context_tokens=c)) for c in contexts]
    assert run.tolist() == one_by_one


@given(
    mdl=model_slugs,
    tp=st.sampled_from([1, 2, 4]),
    tile=st.sampled_from([None, 64, 128]),
    tokens=st.integers(0, 20_000),
    context=st.integers(0, 200_000),
)
def test_step_time_is_batch_time_of_one_chunk(h100, mdl, tp, tile, tokens, context):
    cost = CalibratedCost.typical(h100, model(mdl), tp=tp).with_(tile_tokens=tile)
    batch = Batch(prefill_tokens=(tokens,), prefill_context_tokens=(context,)) if tokens else Batch()
    assert cost.step_time_s(tokens, context_tokens=context) == cost.batch_time_s(batch)


@settings(max_examples=25)
@given(
    mdl=st.sampled_from(["mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    tokens=st.integers(0, 9000),
    num_decodes=st.integers(1, 512),
)
def test_moe_terms_keep_the_scalar_and_vectorized_paths_identical(h100, mdl, tp, tokens, num_decodes):
    engine = EngineConfig(max_num_batched_tokens=8192, max_num_seqs=512, tensor_parallel_size=tp)
    engine = dataclasses.replace(engine, enable_expert_parallel=True)
    cost = CalibratedCost.typical(h100, model(mdl), engine=engine).with_(moe_block_padding=True)
    batch = Batch(prefill_tokens=(tokens,), prefill_context_tokens=(0,)) if tokens else Batch()
    assert cost.step_time_s(tokens) == cost.batch_time_s(batch)
    run = cost.decode_run_time_s(num_decodes=num_decodes, decode_context_tokens=np.array([0, 10_000]))
    assert run.tolist() == [
        cost.batch_time_s(Batch(num_decodes=num_decodes, decode_context_tokens=c)) for c in (0, 10_000)
    ]


# --------------------------------------------------------------------------------------------
# The preset against the published profile it was set from
# --------------------------------------------------------------------------------------------


def test_gpu_profile_reproduces_vidur_h100_llama2_7b_within_15_percent(h100):
    table = pd.read_csv(data_path(*VIDUR_TABLE))
    cost = CalibratedCost.gpu_profile(h100, model("llama-2-7b")).with_(attention=False)  # linear layers only
    predicted_ms = cost.step_time_s(table["num_prefill_tokens"].to_numpy()) * 1e3
    relative = predicted_ms / table["step_time_ms"].to_numpy() - 1
    # 1/64/128/256/512/1024/2048/4096 tokens: measured 5.6/5.9/6.4/9.2/12.0/21.0/40.4/83.2 ms,
    # preset 5.67/5.89/6.53/9.12/12.38/21.46/40.95/80.58 ms.
    np.testing.assert_allclose(predicted_ms, [5.67, 5.89, 6.53, 9.12, 12.38, 21.46, 40.95, 80.58], atol=0.01)
    assert np.all(np.abs(relative) < 0.15)
    assert np.max(np.abs(relative)) < 0.035


def test_gpu_profile_is_about_1_5x_the_ideal_on_the_profile(h100):
    llama2 = model("llama-2-7b")
    tokens = np.array([1, 512, 2048, 4096])
    ratio = CalibratedCost.gpu_profile(h100, llama2).with_(attention=False).step_time_s(tokens) / IdealCost(
        h100, llama2
    ).step_time_s(tokens)
    assert np.all((ratio > 1.3) & (ratio < 1.8))


def test_typical_fields_come_from_the_preset(h100, llama8b):
    cost = CalibratedCost.typical(h100, llama8b, tp=2)
    assert cost.tp == 2
    for name, value in TYPICAL.items():
        assert getattr(cost, name) == value


# --------------------------------------------------------------------------------------------
# Attention and KV reads grow with context
# --------------------------------------------------------------------------------------------


def test_same_chunk_costs_more_at_a_later_position(h100, llama8b):
    cost = CalibratedCost.typical(h100, llama8b)
    positions = np.array([0, 2048, 8192, 32768, 131072])
    times = cost.step_time_s(2048, context_tokens=positions)
    assert np.all(np.diff(times) > 0)
    # 2048 tokens after 8192: extra attention pairs 2048 × 8192 = 16.8M, × 4 × 32 × 32 × 128
    # FLOP = 8.8 TFLOP at 0.70 × 989.4 TFLOP/s = 12.7 ms more than the same chunk first (the
    # step is compute-bound, so with a sharp knee the KV read it adds stays hidden).
    sharp = cost.with_(knee_overlap_loss=0.0)
    extra = 4 * 32 * 32 * 128 * 2048 * 8192 / (0.70 * 989.4e12)
    later = sharp.step_time_s(2048, context_tokens=8192)
    assert later - sharp.step_time_s(2048) == pytest.approx(extra, rel=1e-9)
    assert extra * 1e3 == pytest.approx(12.70, abs=0.01)
    # Switch both terms off and position no longer matters.
    flat = cost.with_(attention=False, kv_reads=False).step_time_s(2048, context_tokens=positions)
    assert np.all(flat == flat[0])


def test_decodes_pay_for_their_kv_cache(h100, llama8b):
    cost = CalibratedCost.gpu_profile(h100, llama8b)
    short = cost.batch_time_s(Batch(num_decodes=64, decode_context_tokens=64 * 100))
    long = cost.batch_time_s(Batch(num_decodes=64, decode_context_tokens=64 * 4000))
    # 64 × 3,900 more cached tokens × 131,072 B = 32.7 GB over 0.80 × 3.35e12 B/s = 12.2 ms
    # more: the decode step stays memory-bound (its math, attention included, is ~1.5 ms).
    extra_bytes = 64 * 3900 * 131072
    assert long - short == pytest.approx(extra_bytes / (0.80 * 3.35e12), rel=0.02)
    without = cost.with_(kv_reads=False, attention=False)
    long_without = without.batch_time_s(Batch(num_decodes=64, decode_context_tokens=64 * 4000))
    assert long_without == without.batch_time_s(Batch(num_decodes=64))


def _ttft_s(cost, *, budget, prompt_tokens=5000, num_decodes=100, decode_context=1000):
    """Sum of the steps that carry a prompt: chunk i sits after the earlier chunks."""
    chunk = budget - num_decodes
    done, total, step = 0, 0.0, 0
    while done < prompt_tokens:
        size = min(chunk, prompt_tokens - done)
        total += cost.batch_time_s(
            Batch(
                num_decodes=num_decodes,
                decode_context_tokens=num_decodes * (decode_context + step),
                prefill_tokens=(size,),
                prefill_context_tokens=(done,),
            )
        )
        done += size
        step += 1
    return total


def test_ttft_keeps_falling_with_bigger_budgets_in_practice(h100, llama8b):
    budgets = [512, 1024, 2048, 4096, 8192]
    typical = [_ttft_s(CalibratedCost.typical(h100, llama8b), budget=b) for b in budgets]
    ideal = [_ttft_s(IdealCost(h100, llama8b), budget=b) for b in budgets]
    assert np.all(np.diff(typical) < 0)
    # The seeds' idealized sweep flattens after ~1,000 tokens; the calibrated one keeps
    # falling, by more in absolute terms from 2,048 to 8,192 than the ideal one does.
    assert (typical[2] - typical[4]) > 2 * (ideal[2] - ideal[4])
    assert typical[0] / typical[-1] > ideal[0] / ideal[-1]


# --------------------------------------------------------------------------------------------
# Tensor parallelism and mixture of experts, worked by hand
# --------------------------------------------------------------------------------------------


def test_tensor_parallel_llama_70b_tp4_on_h100(h100):
    llama70 = model("llama-3.1-70b")
    cost = CalibratedCost.ideal(h100, llama70).with_(tp=4)
    # Weights: 70.6e9 params × 2 B = 141.2 GB, 35.3 GB per GPU; / 3.35e12 B/s = 10.537 ms
    # (one GPU would take 42.15 ms).
    assert cost.weight_read_s == pytest.approx(35.3e9 / 3.35e12, rel=1e-12)
    assert cost.weight_read_s * 1e3 == pytest.approx(10.537, abs=1e-3)
    # Math: 2 × 70.6e9 FLOP per token over 4 × 989.4e12 FLOP/s = 35.68 ns per token.
    assert cost.per_token_s == pytest.approx(141.2e9 / (4 * 989.4e12), rel=1e-12)
    # All-reduce of one token: 8192 × 2 B = 16,384 B; ring 2 × 3/4 × 16,384 / 450e9 = 54.6 ns
    # + 10 µs latency = 10.0546 µs; 2 per layer × 80 layers = 160 → 1.6087 ms per step.
    assert cost.all_reduce_s(1) * 1e3 == pytest.approx(1.6087, abs=1e-4)
    # 2048 tokens: 33.55 MB each; 1.5 × 33.55e6 / 450e9 = 111.8 µs + 10 µs = 121.8 µs; × 160 =
    # 19.49 ms.
    assert cost.all_reduce_s(2048) * 1e3 == pytest.approx(19.49, abs=0.01)
    # A decode step of 1 token: max(10.537 ms, 36 ns) + 1.609 ms = 12.146 ms.
    assert cost.step_time_s(1) * 1e3 == pytest.approx(10.537 + 1.609, abs=2e-3)
    # 2048 tokens: math 2048 × 35.68 ns = 73.07 ms > 10.54 ms; + 19.49 ms = 92.56 ms.
    assert cost.step_time_s(2048) * 1e3 == pytest.approx(73.07 + 19.49, abs=0.02)
    # Without the all-reduce, or at tp=1, no communication at all.
    assert cost.with_(all_reduce=False).step_time_s(2048) * 1e3 == pytest.approx(73.07, abs=0.01)
    assert CalibratedCost.ideal(h100, llama70).all_reduce_s(2048) == 0.0


def test_tensor_parallel_splits_kv_reads_over_kv_heads(h100):
    llama70 = model("llama-3.1-70b")  # 8 KV heads
    base = CalibratedCost.ideal(h100, llama70).with_(kv_reads=True, all_reduce=False)
    tp1 = base.batch_time_s(Batch(num_decodes=1, decode_context_tokens=100_000))
    tp4 = base.with_(tp=4).batch_time_s(Batch(num_decodes=1, decode_context_tokens=100_000))
    tp16 = base.with_(tp=16).batch_time_s(Batch(num_decodes=1, decode_context_tokens=100_000))
    assert tp4 == pytest.approx(tp1 / 4, rel=1e-12)
    # Beyond 8 GPUs the 8 KV heads are replicated: KV per GPU stops shrinking (weights do not).
    kv_per_token = 327_680  # 2 × 80 layers × 8 heads × 128 × 2 B
    expected16 = (141.2e9 / 16 + 100_000 * kv_per_token / 8) / 3.35e12
    assert tp16 == pytest.approx(expected16, rel=1e-12)


def test_mixtral_weight_bytes_one_token_vs_4096(h100):
    mixtral = model("mixtral-8x7b")
    cost = CalibratedCost.ideal(h100, mixtral).with_(moe=True)
    # One expert in all 32 layers: (46.7e9 − 12.9e9) / (8 − 2) = 5.633e9 params (176 M per
    # layer = 3 × 4096 × 14336); shared (attention, embeddings, router) = 46.7e9 − 8 × 5.633e9
    # = 1.633e9.
    expert = (46.7e9 - 12.9e9) / 6
    shared = 46.7e9 - 8 * expert
    assert expert / 32 == pytest.approx(3 * 4096 * 14336, rel=0.01)
    # 1 token touches exactly 2 experts per layer: shared + 2 experts = the 12.9e9 active.
    assert cost.expected_experts(1) == pytest.approx(2.0, rel=1e-12)
    assert cost.weight_bytes(1) == pytest.approx((shared + 2 * expert) * 2, rel=1e-12)
    assert cost.weight_bytes(1) == pytest.approx(12.9e9 * 2, rel=1e-12)
    # 4,096 tokens touch 8 × (1 − 0.75^4096) = 8 experts: every weight, 93.4 GB.
    assert cost.expected_experts(4096) == pytest.approx(8.0, rel=1e-12)
    assert cost.weight_bytes(4096) == pytest.approx(46.7e9 * 2, rel=1e-12)
    # In between: 4 tokens touch 8 × (1 − 0.75^4) = 5.47 experts per layer.
    assert cost.expected_experts(4) == pytest.approx(8 * (1 - 0.75**4), rel=1e-12)
    # FLOPs follow the active parameters: 2 × 12.9e9 per token.
    assert cost.flops_per_token == 2 * 12.9e9
    # And the step reads less at 1 token than the idealized model's whole 93.4 GB.
    assert cost.step_time_s(1) == pytest.approx(12.9e9 * 2 / 3.35e12, rel=1e-12)
    assert cost.with_(moe=False).step_time_s(1) == IdealCost(h100, mixtral).step_time_s(1)


def test_moe_switch_does_nothing_for_a_dense_model(h100, llama8b):
    cost = CalibratedCost.typical(h100, llama8b)
    tokens = np.array([1, 100, 1000, 10000])
    np.testing.assert_array_equal(cost.step_time_s(tokens), cost.with_(moe=False).step_time_s(tokens))
    assert cost.weight_bytes(7) == llama8b.weight_bytes


# --------------------------------------------------------------------------------------------
# Tile quantization, overheads, efficiencies: each term on its own
# --------------------------------------------------------------------------------------------


def test_tile_quantization_makes_cliffs(h100, llama8b):
    cost = CalibratedCost.ideal(h100, llama8b).with_(tile_tokens=256)
    # Above the knee (295 tokens) 513..768 tokens all cost what 768 do.
    assert cost.step_time_s(513) == cost.step_time_s(768) == IdealCost(h100, llama8b).step_time_s(768)
    assert cost.step_time_s(769) > cost.step_time_s(768)
    # Below the knee tiles do not matter: the weight read hides them.
    assert cost.step_time_s(1) == cost.step_time_s(256) == cost.weight_read_s


def test_overheads_add_per_step_and_per_layer(h100, llama8b):
    base = CalibratedCost.ideal(h100, llama8b)
    cost = base.with_(step_overhead_s=1e-3, layer_overhead_s=10e-6)
    tokens = np.array([1, 100, 5000])
    np.testing.assert_allclose(cost.step_time_s(tokens) - base.step_time_s(tokens), 1e-3 + 32 * 10e-6)
    assert cost.overhead_s == pytest.approx(1.32e-3)
    assert cost.step_time_s(0) == 0.0


def test_efficiencies_scale_their_roof(h100, llama8b):
    base = CalibratedCost.ideal(h100, llama8b)
    assert base.with_(bandwidth_efficiency=0.5).step_time_s(1) == pytest.approx(2 * base.step_time_s(1))
    assert base.with_(flop_efficiency=0.5).step_time_s(8192) == pytest.approx(2 * base.step_time_s(8192))


def test_knee_overlap_loss_blurs_the_knee(h100, llama8b):
    base = CalibratedCost.ideal(h100, llama8b)
    knee = base.weight_read_s / base.per_token_s  # 295.3 tokens
    lossy = base.with_(knee_overlap_loss=1.0)
    # At the knee the two roofs are equal: loss 1 means no overlap, M + C = 2 × weight read.
    at_knee = lossy.step_time_s(np.array([knee]))[0]
    assert at_knee == pytest.approx(2 * base.weight_read_s, rel=1e-9)
    # Far from it the loss fades: 1 token adds 1/295 of a token's math, 100k tokens ~0.3 %.
    assert lossy.step_time_s(1) == pytest.approx(base.step_time_s(1), rel=1e-2)
    assert lossy.step_time_s(100_000) == pytest.approx(base.step_time_s(100_000), rel=5e-3)


@pytest.mark.parametrize(
    "change",
    [
        {"step_overhead_s": 1e-4},
        {"layer_overhead_s": 1e-6},
        {"bandwidth_efficiency": 0.5},
        {"flop_efficiency": 0.5},
        {"knee_overlap_loss": 0.5},
        {"attention": True},
        {"kv_reads": True},
        {"tile_tokens": 128},
        {"tp": 2},
    ],
)
def test_every_extra_moves_the_cost_and_switches_off(h100, llama8b, change):
    base = CalibratedCost.ideal(h100, llama8b)
    varied = base.with_(**change)
    batch = Batch(
        num_decodes=50,
        decode_context_tokens=50 * 3000,
        prefill_tokens=(300,),
        prefill_context_tokens=(700,),
    )
    assert varied.batch_time_s(batch) != base.batch_time_s(batch)
    defaults = {f.name: f.default for f in dataclasses.fields(CalibratedCost) if f.init and f.name in change}
    assert varied.with_(**defaults) == base


# --------------------------------------------------------------------------------------------
# Interface and validation
# --------------------------------------------------------------------------------------------


def test_satisfies_the_cost_protocol_and_is_frozen(h100, llama8b):
    cost = CalibratedCost.typical(h100, llama8b)
    assert isinstance(cost, CostModel)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cost.tp = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        CalibratedCost(h100, llama8b)  # type: ignore[misc]  # keyword-only


def test_pickles_for_parallel_sweeps(h100):
    cost = CalibratedCost.typical(h100, model("mixtral-8x7b"), tp=2)
    again = pickle.loads(pickle.dumps(cost))
    assert again == cost
    assert again.step_time_s(300, context_tokens=1000) == cost.step_time_s(300, context_tokens=1000)


def test_step_time_vectorized_shape_and_scalar(h100, llama8b):
    cost = CalibratedCost.typical(h100, llama8b)
    assert isinstance(cost.step_time_s(512), float)
    assert cost.step_time_s(np.arange(6).reshape(2, 3)).shape == (2, 3)
    assert cost.step_time_s(np.array([100, 200]), context_tokens=np.array([[0], [10]])).shape == (2, 2)
    with pytest.raises(ValueError, match=">= 0"):
        cost.step_time_s(-1)
    with pytest.raises(ValueError, match="context_tokens"):
        cost.step_time_s(1, context_tokens=-5)
    for bad in (np.inf, True, "3", None, [100, False]):
        with pytest.raises(ValueError, match=r"^num_tokens must be finite numbers of tokens >= 0, got "):
            cost.step_time_s(bad)
        with pytest.raises(ValueError, match=r"^context_tokens must be finite numbers of tokens >= 0, got "):
            cost.step_time_s(100, context_tokens=bad)


def test_batch_with_mismatched_chunk_contexts_is_refused(h100, llama8b):
    cost = CalibratedCost.typical(h100, llama8b)
    with pytest.raises(ValueError, match="one prefill_context_tokens entry per chunk"):
        cost.batch_time_s(Batch(prefill_tokens=(10, 20), prefill_context_tokens=(0,)))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tp": 3}, "does not divide"),
        ({"tp": 0}, "tp must be an int >= 1"),
        ({"tp": 2.0}, "tp must be an int"),
        ({"bandwidth_efficiency": 0.0}, r"\(0, 1\]"),
        ({"flop_efficiency": 1.5}, r"\(0, 1\]"),
        ({"step_overhead_s": -1e-3}, "seconds >= 0"),
        ({"layer_overhead_s": float("nan")}, "seconds >= 0"),
        ({"step_overhead_s": float("inf")}, "seconds >= 0"),  # used to be accepted
        ({"layer_overhead_s": float("inf")}, "seconds >= 0"),
        ({"knee_overlap_loss": 2.0}, r"\[0, 1\]"),
        ({"tile_tokens": 0}, "tile_tokens"),
        ({"attention": "yes"}, "True or False"),
    ],
)
def test_bad_parameters_name_the_fix(h100, llama8b, change, message):
    with pytest.raises(ParameterError, match=message):
        CalibratedCost.typical(h100, llama8b).with_(**change)


def test_weight_bytes_per_gpu_splits_what_a_step_reads(h100):
    from budgetlab import weight_bytes_per_gpu

    mixtral = model("mixtral-8x7b")
    cost = CalibratedCost.gpu_profile(
        h100, mixtral, engine=EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, tensor_parallel_size=2)
    )
    tokens = np.array([1, 64, 4096])
    np.testing.assert_array_equal(cost.weight_bytes_per_gpu(tokens), cost.weight_bytes(tokens) / 2)
    assert cost.with_(moe=False).weight_bytes_per_gpu(5) == weight_bytes_per_gpu(mixtral, tp=2)
    assert cost.weight_read_s == weight_bytes_per_gpu(mixtral, tp=2) / (h100.mem_bandwidth_bytes_per_s * 0.8)


def test_display_names_the_cuda_graph_modelling():
    h100, llama = hardware("h100-sxm"), model("llama-2-7b")
    assert "not modelled" in CalibratedCost.typical(h100, llama)._repr_html_()
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)
    html = CalibratedCost.typical(h100, llama, engine=engine)._repr_html_()
    assert "35 sizes up to 256, FULL up to 128" in html and "piecewise 100 µs/layer" in html
    eager = CalibratedCost.typical(h100, llama, engine=dataclasses.replace(engine, enforce_eager=True))
    assert "enforce_eager: none captured" in eager._repr_html_()
