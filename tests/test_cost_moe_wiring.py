"""The fused-MoE terms in the step cost (budgetlab.cost.moe_step), worked by hand.

``moe_block_padding`` adds the expert math of each expert's tokens padded to ``BLOCK_SIZE_M``;
``expert_parallel`` (vLLM's ``--enable-expert-parallel``) makes a step read the slowest GPU's
touched whole experts. Both are off by default, so ``CalibratedCost.ideal`` is unchanged.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from budgetlab import memory
from budgetlab.catalog import hardware, model
from budgetlab.cost import CalibratedCost, IdealCost, moe
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.specs import Batch, EngineConfig

H100 = hardware("h100-sxm")
MIXTRAL = model("mixtral-8x7b")
MIXTRAL_8X22B = model("mixtral-8x22b")
TP2 = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128, tensor_parallel_size=2)
TP2_EP = dataclasses.replace(TP2, enable_expert_parallel=True)
PEAK = 989.4e12  # H100 SXM dense BF16 [FLOP/s] (the catalog's)


def _padded(engine: EngineConfig = TP2, m=MIXTRAL) -> CalibratedCost:
    return CalibratedCost.typical(H100, m, engine=engine).with_(moe_block_padding=True)


def _split(m) -> tuple[float, float]:
    """(shared, one expert over all layers) bytes in bf16, from the catalog's totals."""
    expert = (m.num_params - m.num_active_params) / (m.num_experts - m.num_experts_per_token)
    return (m.num_params - m.num_experts * expert) * 2.0, expert * 2.0


def _blocks_one_expert(n: int, block: int) -> float:
    """E[ceil(X / block)] for X ~ Binomial(n, 1/4) (Mixtral: 2 of 8 experts), summed exactly in
    integers: Σ C(n, x) 3^(n − x) ceil(x / block) / 4^n."""
    return sum(math.comb(n, x) * 3 ** (n - x) * math.ceil(x / block) for x in range(n + 1)) / 4**n


# --------------------------------------------------------------------------------------------
# moe_block_padding
# --------------------------------------------------------------------------------------------


def test_the_padding_term_is_the_kernels_extra_math_for_one_step():
    cost = _padded()
    batch = Batch(prefill_tokens=(2000,), prefill_context_tokens=(0,))
    terms = cost.step_terms(batch)
    assert (terms.mode, terms.padded_tokens, terms.bound) == ("NONE", 2000, "compute")
    # Mixtral at TP2 on an H100: vLLM's tuned file E=8,N=7168 has key 2048 nearest 2000: BLOCK_SIZE_M 128.
    assert moe.moe_block_size_m(2000, hardware=H100, num_local_experts=8, shard_intermediate_size=7168) == 128
    rows = 8 * 128 * _blocks_one_expert(2000, 128)  # each expert's ~500 pairs padded to 128-row blocks
    extra_flops = 32 * 2 * 3 * 4096 * 7168 * (rows - 2000 * 2)  # layers × 2 × 3 matrices × hidden × N
    expected_s = extra_flops / (PEAK * 0.70)
    by_module = moe.expert_flops_per_gpu(MIXTRAL, tp=2, num_tokens=2000, hardware=H100) - moe.expert_flops_per_gpu(
        MIXTRAL, tp=2, num_tokens=2000, hardware=H100, padded=False
    )
    assert terms.terms["moe_block_padding"] == pytest.approx(expected_s, rel=1e-9)
    assert terms.terms["moe_block_padding"] == pytest.approx(by_module / (PEAK * 0.70), rel=1e-12)
    assert 2e-3 < expected_s < 4e-3  # ~9 % more rows than the 4,000 pairs: 8 × 128 × E[ceil(X / 128)], X ≈ 500
    # it adds to the compute roof: the step without it is shorter by the term, less the knee loss
    # it takes away (the same memory roof now hides under a longer compute roof)
    plain = cost.with_(moe_block_padding=False)
    plain_terms = plain.step_terms(batch)
    assert plain_terms.terms["moe_block_padding"] == 0.0
    knee_change = terms.terms["knee_overlap_loss"] - plain_terms.terms["knee_overlap_loss"]
    assert knee_change < 0
    difference = cost.batch_time_s(batch) - plain.batch_time_s(batch)
    assert difference == pytest.approx(expected_s + knee_change, rel=1e-9)


def test_the_padding_is_priced_on_the_graphs_padded_tokens():
    engine = EngineConfig(max_num_batched_tokens=4096, max_num_seqs=256, tensor_parallel_size=2)
    engine = dataclasses.replace(engine, cudagraph_capture_sizes=(1024, 2048))
    cost = _padded(engine)
    terms = cost.step_terms(Batch(prefill_tokens=(1500,), prefill_context_tokens=(0,)))
    assert (terms.mode, terms.padded_tokens, terms.bound) == ("PIECEWISE", 2048, "compute")
    args = {"tp": 2, "num_tokens": 2048, "hardware": H100}
    extra = moe.expert_flops_per_gpu(MIXTRAL, **args) - moe.expert_flops_per_gpu(MIXTRAL, padded=False, **args)
    assert terms.terms["moe_block_padding"] == pytest.approx(extra / (PEAK * 0.70), rel=1e-12)


def test_the_terms_still_add_up_to_the_step():
    cost = _padded(TP2_EP)
    for batch in (
        Batch(prefill_tokens=(2000,), prefill_context_tokens=(0,)),
        Batch(num_decodes=40, decode_context_tokens=20_000, prefill_tokens=(200,), prefill_context_tokens=(100,)),
        Batch(num_decodes=64, decode_context_tokens=64_000),
    ):
        terms = cost.step_terms(batch)
        assert terms.total_s == pytest.approx(cost.batch_time_s(batch), rel=1e-14, abs=0.0)


def test_scalar_and_vectorized_paths_agree_bit_for_bit():
    cost = _padded(TP2_EP)
    counts = np.array([1.0, 7.0, 100.0, 257.0, 2000.0])
    vector = cost.step_time_s(counts)
    assert [cost.step_time_s(float(n)) for n in counts] == list(vector)
    prefills = [cost.batch_time_s(Batch(prefill_tokens=(int(n),), prefill_context_tokens=(0,))) for n in counts]
    assert prefills == list(vector)  # the simulator's scalar path
    contexts = np.array([1000.0, 5000.0, 9000.0])
    run = cost.decode_run_time_s(num_decodes=64, decode_context_tokens=contexts)
    assert list(run) == [cost.batch_time_s(Batch(num_decodes=64, decode_context_tokens=int(x))) for x in contexts]


def test_no_padding_term_with_quantized_weights_or_without_moe():
    quantized = _padded(dataclasses.replace(TP2, quantization="fp8"))
    batch = Batch(prefill_tokens=(2000,), prefill_context_tokens=(0,))
    assert quantized.step_terms(batch).terms["moe_block_padding"] == 0.0
    dense = CalibratedCost.typical(H100, model("llama-2-7b")).with_(moe_block_padding=True)
    assert dense.step_time_s(2000) == CalibratedCost.typical(H100, model("llama-2-7b")).step_time_s(2000)


def test_ideal_is_unchanged_and_the_switches_need_moe():
    ideal = CalibratedCost.ideal(H100, MIXTRAL)
    assert not ideal.moe_block_padding and not ideal.expert_parallel
    reference = IdealCost(H100, MIXTRAL)
    counts = np.array([1, 64, 512, 4096])
    assert list(ideal.step_time_s(counts)) == list(reference.step_time_s(counts))
    # moe=False prices every parameter, as the idealized model: neither switch changes it
    switched = ideal.with_(moe_block_padding=True)
    assert list(switched.step_time_s(counts)) == list(reference.step_time_s(counts))


# --------------------------------------------------------------------------------------------
# Expert parallelism
# --------------------------------------------------------------------------------------------


def test_expert_parallel_reads_the_slowest_gpus_whole_experts_at_one_token():
    shared, expert = _split(MIXTRAL)
    tp_cost = CalibratedCost.typical(H100, MIXTRAL, engine=TP2)
    ep_cost = CalibratedCost.typical(H100, MIXTRAL, engine=TP2_EP)
    assert ep_cost.expert_parallel and not tp_cost.expert_parallel
    # TP: each GPU reads half of each of the token's 2 experts
    assert tp_cost.weight_bytes_per_gpu(1) == pytest.approx(shared / 2 + 2 * expert / 2, rel=1e-12)
    # EP: 4 whole experts per GPU, each touched with probability 1/4; a GPU's count is
    # Binomial(4, 1/4) with CDF 81, 189, 243, 255 (/256) at 0..3; E[max of 2] = Σ (1 − F(c−1)²)
    slowest = 4 - (81**2 + 189**2 + 243**2 + 255**2) / 256**2  # 1.4616
    assert ep_cost.weight_bytes_per_gpu(1) == pytest.approx(shared / 2 + slowest * expert, rel=1e-12)
    decode = Batch(num_decodes=1, decode_context_tokens=100)
    weight_read = ep_cost.step_terms(decode).terms["weight_read"]
    assert weight_read == pytest.approx((shared / 2 + slowest * expert) / (3.35e12 * 0.90), rel=1e-3)
    assert ep_cost.batch_time_s(decode) > tp_cost.batch_time_s(decode)


def test_expert_parallel_at_tp8_reads_one_whole_expert_where_tp_reads_a_quarter():
    shared, expert = _split(MIXTRAL_8X22B)
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128, tensor_parallel_size=8)
    tp_cost = CalibratedCost.typical(H100, MIXTRAL_8X22B, engine=engine)
    ep_cost = tp_cost.for_engine(dataclasses.replace(engine, enable_expert_parallel=True))
    assert tp_cost.weight_bytes_per_gpu(1) == pytest.approx((shared + 2 * expert) / 8, rel=1e-12)
    # one expert per GPU, touched with probability 1/4: the slowest of 8 reads it with 1 − (3/4)^8
    assert ep_cost.weight_bytes_per_gpu(1) == pytest.approx(shared / 8 + (1 - 0.75**8) * expert, rel=1e-12)


def test_at_4096_tokens_both_read_every_weight_the_memory_model_holds():
    tp_cost = CalibratedCost.typical(H100, MIXTRAL, engine=TP2)
    ep_cost = CalibratedCost.typical(H100, MIXTRAL, engine=TP2_EP)
    held = memory.weight_bytes_per_gpu(MIXTRAL, tp=2)  # the same either way: E/2 whole experts = E halves
    assert tp_cost.weight_bytes_per_gpu(4096) == pytest.approx(held, rel=1e-12)
    assert ep_cost.weight_bytes_per_gpu(4096) == pytest.approx(held, rel=1e-12)
    assert ep_cost.weight_read_s == tp_cost.weight_read_s
    # the KV pool is sized from the same bytes: enable_expert_parallel does not change it
    assert memory.kv_capacity(H100, MIXTRAL, TP2) == memory.kv_capacity(H100, MIXTRAL, TP2_EP)


def test_expert_parallel_pads_with_the_local_experts_config():
    cost = _padded(TP2_EP)
    terms = cost.step_terms(Batch(prefill_tokens=(2000,), prefill_context_tokens=(0,)))
    args = {"tp": 2, "ep": 2, "num_tokens": 2000, "hardware": H100}
    extra = moe.expert_flops_per_gpu(MIXTRAL, **args) - moe.expert_flops_per_gpu(MIXTRAL, padded=False, **args)
    assert terms.terms["moe_block_padding"] == pytest.approx(extra / (PEAK * 0.70), rel=1e-12)
    # 4 local experts at full width (no tuned file for E=4: the default rule, 128-row blocks above 512)
    rows = 4 * 128 * _blocks_one_expert(2000, 128)
    assert extra == pytest.approx(32 * 2 * 3 * 4096 * 14336 * (rows - 2000 * 2 / 2), rel=1e-9)


def test_expert_parallel_has_no_effect_at_tp1():
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128)
    plain = CalibratedCost.typical(H100, MIXTRAL, engine=engine)
    ep = plain.for_engine(dataclasses.replace(engine, enable_expert_parallel=True))
    assert ep.expert_parallel and ep.step_time_s(1) == plain.step_time_s(1)


def test_expert_parallel_is_refused_where_vllm_refuses_it():
    dense = model("llama-2-7b")
    with pytest.raises(ConfigError, match=r"needs a mixture of experts.*enable_expert_parallel"):
        CalibratedCost.typical(H100, dense, engine=dataclasses.replace(TP2, enable_expert_parallel=True))
    with pytest.raises(ConfigError, match="does not divide"):
        CalibratedCost(hardware=H100, model=MIXTRAL, tp=16, expert_parallel=True)
    with pytest.raises(ParameterError, match="expert_parallel must be True or False"):
        CalibratedCost(hardware=H100, model=MIXTRAL, expert_parallel="yes")
    with pytest.raises(ParameterError, match="moe_block_padding must be True or False"):
        CalibratedCost(hardware=H100, model=MIXTRAL, moe_block_padding=1)


def test_the_cost_says_it_runs_expert_parallel():
    cost = _padded(TP2_EP)
    assert "expert parallel" in repr(cost) and "moe_block_padding" in cost._repr_html_()
