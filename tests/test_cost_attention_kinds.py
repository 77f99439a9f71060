"""Step cost of sliding-window, chunked-local, MLA and Mamba layers, worked by hand per term.

Every expected value below is written out from the layer sizes (bytes and FLOPs), then divided by
the H100's catalog bandwidth or FLOP rate; the formulas are in ``budgetlab/cost/attention_terms.py``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from budgetlab.attention import AttentionLayout
from budgetlab.catalog import hardware, model
from budgetlab.cost import CalibratedCost
from budgetlab.cost.attention_terms import (
    RECURRENT_FLOPS_PER_STATE_ELEMENT,
    attended_pairs,
    cached_tokens_read,
    layout_cost,
    layout_step,
    mla_decode_max_query_len,
)
from budgetlab.cost.step_terms import STEP_TERM_NAMES
from budgetlab.memory import embedding_params
from budgetlab.specs import Batch, EngineConfig, ModelSpec

H100 = hardware("h100-sxm")
BW = H100.mem_bandwidth_bytes_per_s
FLOPS = H100.dense_bf16_flops_per_s


def _spec(layout: AttentionLayout | None, *, layers: int = 4, heads: int = 64, kv_heads: int = 8, head_dim: int = 64):
    return ModelSpec(
        slug="toy",
        name="toy",
        num_params=1e9,
        num_active_params=1e9,
        num_layers=layers,
        hidden_size=2880,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=2880,
        vocab_size=1000,
        attention=layout,
    )


# A GPT-OSS-like 1:1 pattern: layers 0, 2 sliding (W = 128), layers 1, 3 full; 8 KV heads of 64.
SLIDING = _spec(AttentionLayout.from_pattern(["sliding_window", "full"], 4, sliding_window=128))
LAYER_KV_BYTES = 2 * 8 * 64 * 2  # K and V x KV heads x head_dim x 2 bytes = 2,048 B per layer
PAIR_FLOPS = 4 * 64 * 64  # QK^T and AV, 64 heads of 64, per layer per pair = 16,384


def _cost(m: ModelSpec, **changes) -> CalibratedCost:
    return CalibratedCost(hardware=H100, model=m, kv_reads=True, attention=True, **changes)


def _lc(cost: CalibratedCost):
    return layout_cost(cost, BW, FLOPS * cost.tp)


# ---- the per-chunk counting rules ---------------------------------------------------------------


def test_pairs_and_reads_by_kind_by_hand():
    # full: m c + m (m + 1) / 2
    assert attended_pairs("full", 300.0, 1000.0) == 300 * 1000 + 300 * 301 / 2
    # sliding W = 128, first chunk of 300: sum_{p=0}^{299} min(p + 1, 128) = 128*129/2 + 128*172
    assert attended_pairs("sliding_window", 300.0, 0.0, 128.0) == 8256 + 22016
    assert attended_pairs("sliding_window", 300.0, 1000.0, 128.0) == 300 * 128  # every query capped
    assert attended_pairs("sliding_window", 10.0, 5.0, 128.0) == attended_pairs("full", 10.0, 5.0)
    assert cached_tokens_read("sliding_window", 1000.0, 128.0) == 127  # vLLM's window (W - 1, 0)
    assert cached_tokens_read("sliding_window", 100.0, 128.0) == 100
    # chunked local C = 100: positions 230..279 attend to 31..80 keys; 30 cached tokens read
    assert attended_pairs("chunked_local", 50.0, 230.0, 100.0) == (31 + 80) * 50 / 2
    assert cached_tokens_read("chunked_local", 230.0, 100.0) == 30
    # across a chunk boundary: 180..199 attend to 81..100 keys, 200..229 to 1..30
    assert attended_pairs("chunked_local", 50.0, 180.0, 100.0) == 1810 + 465


def test_sliding_window_wider_than_the_context_is_full_attention():
    wide = _spec(AttentionLayout.from_pattern(["sliding_window", "full"], 4, sliding_window=1_000_000))
    full = dataclasses.replace(wide, attention=None)
    for batch in (Batch(3, 3000), Batch(2, 500, (700,), (4000,)), Batch(0, 0, (8192,), (0,))):
        assert _cost(wide).batch_time_s(batch) == pytest.approx(_cost(full).batch_time_s(batch), rel=1e-12)


def test_an_all_full_layout_is_bit_identical_to_no_layout():
    llama = model("llama-3.1-8b")
    laid_out = dataclasses.replace(llama, attention=AttentionLayout(("full",) * llama.num_layers))
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128, tensor_parallel_size=2)
    for batch in (Batch(7, 7 * 3000), Batch(3, 900, (500, 17), (0, 2000))):
        before = CalibratedCost.typical(H100, llama, engine=engine).batch_time_s(batch)
        assert CalibratedCost.typical(H100, laid_out, engine=engine).batch_time_s(batch) == before


# ---- sliding window: GPT-OSS-like 1:1 -------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "sliding_read"),
    [(100, 100), (1000, 127)],  # below the window every token is read; above it W - 1 = 127
)
def test_sliding_decode_reads_only_the_window(context, sliding_read):
    cost = _cost(SLIDING)
    terms = cost.step_terms(Batch(num_decodes=1, decode_context_tokens=context))
    kv_bytes = 2 * LAYER_KV_BYTES * context + 2 * LAYER_KV_BYTES * sliding_read  # 2 full + 2 sliding layers
    assert terms.bound == "memory"
    assert terms.terms["kv_read"] == pytest.approx(kv_bytes / BW, rel=1e-12)
    layout = layout_step(_lc(cost), 1.0, float(context))
    assert layout.kv_s == pytest.approx(2 * LAYER_KV_BYTES * sliding_read / BW, rel=1e-12)
    pairs = min(context + 1, 128)
    assert layout.attention_s == pytest.approx(2 * PAIR_FLOPS * pairs / FLOPS, rel=1e-12)


def test_sliding_prefill_chunk_sees_only_the_window():
    lc = _lc(_cost(SLIDING))
    one = layout_step(lc, 0.0, 0.0, (300,), (1000,))
    assert one.attention_s == pytest.approx(2 * PAIR_FLOPS * 300 * 128 / FLOPS, rel=1e-12)
    assert one.kv_s == pytest.approx(2 * LAYER_KV_BYTES * 127 / BW, rel=1e-12)


def test_decodes_on_both_sides_of_the_window_are_priced_as_equal_contexts():
    lc = _lc(_cost(SLIDING))
    # 4 decodes, 4000 context tokens: 4 x min(1000, 127) read, 4 x min(1001, 128) pairs
    step = layout_step(lc, 4.0, 4000.0)
    assert step.kv_s == pytest.approx(2 * LAYER_KV_BYTES * 4 * 127 / BW, rel=1e-12)
    assert step.attention_s == pytest.approx(2 * PAIR_FLOPS * 4 * 128 / FLOPS, rel=1e-12)


def test_chunked_local_decode_reads_its_chunk():
    chunked = _spec(AttentionLayout.from_pattern(["chunked_local"] * 3 + ["full"], 4, attention_chunk_size=100))
    step = layout_step(_lc(_cost(chunked)), 2.0, 460.0)  # two decodes at 230: 30 cached each in the chunk
    assert step.kv_s == pytest.approx(3 * LAYER_KV_BYTES * 2 * 30 / BW, rel=1e-12)
    assert step.attention_s == pytest.approx(3 * PAIR_FLOPS * 2 * 31 / FLOPS, rel=1e-12)


# ---- MLA ---------------------------------------------------------------------------------------

MLA = _spec(
    AttentionLayout(("mla",) * 2, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
    layers=2,
    heads=16,
    kv_heads=16,
    head_dim=192,
)
LATENT_BYTES = (512 + 64) * 2  # one latent per token per layer, 1,152 B, on every GPU
ABSORBED_PAIR_FLOPS = 2 * 16 * (512 + 64) + 2 * 16 * 512  # MQA over the latent: 34,816 per layer
MHA_PAIR_FLOPS = 2 * 16 * (128 + 64) + 2 * 16 * 128  # 10,240 per layer
PROJECTION_FLOPS = 2 * 16 * 512 * (128 + 128)  # W_UK and W_UV per token per layer: 4,194,304


@pytest.mark.parametrize("tp", [1, 8])
def test_mla_decode_reads_the_whole_latent_at_any_tp(tp):
    cost = _cost(MLA, tp=tp)
    batch = Batch(num_decodes=4, decode_context_tokens=4000)
    terms = cost.step_terms(batch)
    assert terms.terms["kv_read"] == pytest.approx(2 * LATENT_BYTES * 4000 / BW, rel=1e-12)  # not split by TP
    step = layout_step(_lc(cost), 4.0, 4000.0)
    # absorbed path: 4,004 pairs x 2 layers, the heads split over the TP group
    assert step.attention_s == pytest.approx(2 * ABSORBED_PAIR_FLOPS * 4004 / (FLOPS * tp), rel=1e-12)
    assert step.projection_s == 0.0  # the absorbed projections are kv_b_proj's 2 x params: linear math
    assert PROJECTION_FLOPS == 2 * 512 * 16 * (128 + 128)  # = 2 x kv_b_proj parameters per layer


def test_mla_prefill_runs_as_vllm_runs_it():
    assert mla_decode_max_query_len(H100) == 512 and mla_decode_max_query_len(hardware("b200")) == 1
    lc = _lc(_cost(MLA))
    long = layout_step(lc, 0.0, 0.0, (1000,), (3000,))  # MHA path: up-projects the cached latents
    pairs = 1000 * 3000 + 1000 * 1001 / 2
    assert long.attention_s == pytest.approx(2 * MHA_PAIR_FLOPS * pairs / FLOPS, rel=1e-12)
    assert long.projection_s == pytest.approx(2 * PROJECTION_FLOPS * 3000 / FLOPS, rel=1e-12)
    assert long.kv_s == pytest.approx(2 * LATENT_BYTES * 3000 / BW, rel=1e-12)
    short = layout_step(lc, 0.0, 0.0, (200,), (3000,))  # on Hopper a 200-token chunk runs absorbed
    pairs = 200 * 3000 + 200 * 201 / 2
    assert short.attention_s == pytest.approx(2 * ABSORBED_PAIR_FLOPS * pairs / FLOPS, rel=1e-12)
    assert short.projection_s == 0.0
    blackwell = layout_cost(_cost(MLA).with_(hardware=hardware("b200")), BW, FLOPS)
    assert layout_step(blackwell, 0.0, 0.0, (200,), (3000,)).projection_s > 0  # FlashInfer MLA: decodes only


# ---- Mamba hybrid ------------------------------------------------------------------------------

HYBRID = _spec(AttentionLayout(("mamba", "mamba", "mamba", "full"), mamba_state_bytes=1_000_000))


def test_mamba_hybrid_decode_reads_and_writes_the_state():
    cost = _cost(HYBRID, tp=2)
    batch = Batch(num_decodes=8, decode_context_tokens=8 * 2000)
    step = layout_step(_lc(cost), 8.0, 16000.0)
    state_bytes = 3 * (1_000_000 / 2) * 2 * 8  # 3 layers x state per GPU x (read + write) x 8 requests
    assert step.state_s == pytest.approx(state_bytes / BW, rel=1e-12)
    elements = 1_000_000 / 2  # state bytes / 2-byte elements, over the TP group
    recurrent_flops = 3 * RECURRENT_FLOPS_PER_STATE_ELEMENT * elements * 8
    assert step.recurrent_s == pytest.approx(recurrent_flops / (FLOPS * 2), rel=1e-12)
    terms = cost.step_terms(batch)
    assert terms.terms["state_read"] == pytest.approx(state_bytes / BW, rel=1e-12)
    # only the one full-attention layer holds KV: 2 x 8 x 64 x 2 B / min(tp, 8) per token
    assert terms.terms["kv_read"] == pytest.approx(LAYER_KV_BYTES / 2 * 16000 / BW, rel=1e-12)
    first = layout_step(_lc(cost), 0.0, 0.0, (500,), (0,))  # a first chunk starts from zero: write only
    assert first.state_s == pytest.approx(3 * 500_000 / BW, rel=1e-12)


# ---- every term named, summing to the step; decode runs equal batch steps -------------------------


@pytest.mark.parametrize("m", [SLIDING, MLA, HYBRID], ids=["sliding", "mla", "hybrid"])
@pytest.mark.parametrize(
    "batch",
    [Batch(64, 64 * 30000), Batch(2, 100, (1000,), (3000,)), Batch(0, 0, (8192,), (9000,))],
    ids=["decodes", "mixed", "prefill"],
)
def test_terms_sum_to_the_step(m, batch):
    engine = EngineConfig(max_num_batched_tokens=16384, max_num_seqs=256, tensor_parallel_size=2)
    cost = CalibratedCost.typical(H100, m, engine=engine)
    terms = cost.step_terms(batch)
    assert tuple(terms.terms) == STEP_TERM_NAMES
    assert terms.total_s == pytest.approx(cost.batch_time_s(batch), abs=1e-12)
    contexts = np.array([0, 10, 5000, 70000])
    run = cost.decode_run_time_s(num_decodes=3, decode_context_tokens=contexts)
    assert list(run) == [cost.batch_time_s(Batch(3, int(c))) for c in contexts]
    chunks = np.array([1, 300, 4000])
    curve = cost.step_time_s(chunks, context_tokens=600)
    assert list(curve) == [cost.batch_time_s(Batch(0, 0, (int(n),), (600,))) for n in chunks]


def test_compute_bound_terms_are_named():
    terms = _cost(MLA).step_terms(Batch(0, 0, (8192,), (60000,)))
    assert terms.bound == "compute" and terms.terms["mla_projection"] > 0
    hybrid = _cost(HYBRID).step_terms(Batch(0, 0, (8192,), (0,)))
    assert hybrid.bound == "compute" and hybrid.terms["recurrent_math"] > 0


# ---- MXFP4 weights at their bytes ----------------------------------------------------------------


def test_mxfp4_weights_read_at_4_25_bits():
    oss = model("gpt-oss-20b")
    cost = CalibratedCost(hardware=H100, model=oss, quantization="mxfp4")
    experts = 24 * 32 * 3 * 2880 * 2880  # MXFP4 quantizes the experts only: 19,110,297,600 weights
    expected = (oss.num_params - experts) * 2 + experts * (0.5 + 1 / 32)
    assert cost.weight_read_s == pytest.approx(expected / BW, rel=1e-12)
    moe = cost.with_(moe=True)  # a step of many tokens touches every expert: the same bytes
    assert moe.weight_bytes(1e6) == pytest.approx(expected, rel=1e-9)
    one = 3 * 2880 * 2880 * 24 * (0.5 + 1 / 32)  # about one expert's bytes over the layers
    assert moe.weight_bytes(1) == pytest.approx(expected - 28 * one, rel=0.02)  # D(1) = 4 of 32
    kept = embedding_params(oss)  # NVFP4: every linear weight; embedding and lm_head stay BF16
    nv = CalibratedCost(hardware=H100, model=oss, quantization="nvfp4")
    assert nv.weight_read_s == pytest.approx((kept * 2 + (oss.num_params - kept) * (0.5 + 1 / 16)) / BW, rel=1e-12)
