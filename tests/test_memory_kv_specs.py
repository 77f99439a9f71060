"""vLLM's KV pool for sliding-window, chunked-local, MLA and Mamba models, worked by hand.

Every expected number below is computed in the comment above it from vLLM 0.19's rules
(``kv_cache_utils.py``: grouping, page unification, ``get_num_blocks``, ``_report_kv_cache_config``,
``get_max_concurrency_for_kv_cache_config``; ``model_executor/models/config.py`` for Mamba).
"""

from __future__ import annotations

import dataclasses

import pytest

from budgetlab.attention import AttentionLayout
from budgetlab.catalog import hardware, model
from budgetlab.errors import ConfigError
from budgetlab.memory import (
    GiB,
    kv_block_size,
    kv_bytes_per_token,
    kv_capacity,
    layer_kv_bytes_per_token,
    mamba_state_bytes_per_gpu,
    plan_kv_pool,
)
from budgetlab.specs import EngineConfig, ModelSpec


def _model(name, layers, kv_heads, head_dim, layout, *, heads=16, hidden=2048):
    return ModelSpec(
        name=name, slug=name, num_params=1e9, num_active_params=1e9, num_layers=layers, hidden_size=hidden,
        num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=8192,
        vocab_size=32000, attention=AttentionLayout.parse(layout, layers),
    )  # fmt: skip


def _engine(**changes):
    values = dict(max_num_batched_tokens=2048, max_num_seqs=256, max_model_len=8192, enable_prefix_caching=False)
    return EngineConfig(**{**values, **changes})


OSS = _model("oss-like", 24, 8, 64, "sliding_window full; sliding_window=128", heads=64)
GEMMA3 = _model("gemma3-like", 62, 16, 128, "sliding_window*5 full; sliding_window=1024", heads=32)
MLA = _model("mla-like", 27, 16, 128, "mla; kv_lora_rank=512 qk_rope_head_dim=64")
HYBRID = _model("gdn-like", 48, 2, 256, "mamba*3 full; mamba_state_bytes=1097728")
SCOUT = _model("chunked-like", 48, 8, 128, "chunked_local*3 full; attention_chunk_size=8192", heads=40)


def test_layer_bytes_per_token():
    # full/sliding: 2 × 8 heads × 64 × 2 B = 2,048 B; split over min(tp, 8) GPUs
    assert layer_kv_bytes_per_token(OSS, "sliding_window") == layer_kv_bytes_per_token(OSS, "full") == 2048
    assert layer_kv_bytes_per_token(OSS, "full", tp=4) == 512
    assert layer_kv_bytes_per_token(OSS, "full", kv_cache_dtype="fp8") == 1024
    # MLA: (512 + 64) × 2 B, not split by TP
    assert layer_kv_bytes_per_token(MLA, "mla") == layer_kv_bytes_per_token(MLA, "mla", tp=8) == 1152
    assert layer_kv_bytes_per_token(HYBRID, "mamba") == 0
    assert mamba_state_bytes_per_gpu(HYBRID, tp=2) == 548864 and mamba_state_bytes_per_gpu(MLA) == 0
    # if every layer kept the token: 27 × 1,152; 12 full layers × 2 × 2 × 256 × 2 B
    assert kv_bytes_per_token(MLA, tp=8) == 31104
    assert kv_bytes_per_token(HYBRID) == 12 * 2048
    with pytest.raises(ConfigError, match="kind"):
        layer_kv_bytes_per_token(OSS, "linear")
    with pytest.raises(ConfigError, match="MLA"):
        layer_kv_bytes_per_token(OSS, "mla")


def test_gpt_oss_like_one_to_one_pool():
    # page 16 × 2,048 B = 32,768 B; 12 sliding + 12 full layers → 2 groups of 12
    # blocks = 1 GiB // 32,768 // 12 = 2,730; logged tokens 2,730 // 2 × 16 = 21,840
    # per request: sliding ceil(min(127 + 2,048, 8,192) / 16) + 1 = 137, full 8,192 / 16 = 512
    plan = plan_kv_pool(OSS, _engine(), 1 * GiB)
    assert plan.groups == (("sliding_window", 128), "full") and plan.layers_per_group == 12
    assert (plan.page_bytes, plan.num_gpu_blocks, plan.vllm_kv_cache_tokens) == (32768, 2730, 21840)
    assert plan.blocks_per_request == 649
    assert plan.max_concurrency == pytest.approx(2730 / 649)
    # vLLM 0.33 logs int(max_concurrency × max_model_len) instead
    assert plan.vllm033_kv_cache_tokens == int(2730 / 649 * 8192)
    # TP 2 halves the page: 5,461 blocks; 0.33's two in-flight batches: ceil(4,223 / 16) + 1 = 265
    assert plan_kv_pool(OSS, _engine(tensor_parallel_size=2), 1 * GiB).num_gpu_blocks == 5461
    assert plan_kv_pool(OSS, _engine(), 1 * GiB, in_flight_batches=2).blocks_per_request == 512 + 265


def test_gemma3_like_five_to_one_pool_with_padding():
    # 52 sliding + 10 full: group size 10 → 6 sliding groups (8 padding layers) + 1 full
    # page 16 × 2 × 16 × 128 × 2 B = 131,072 B; blocks = 20 GiB // 131,072 // 10 = 16,384
    plan = plan_kv_pool(GEMMA3, _engine(max_num_batched_tokens=8192), 20 * GiB)
    assert plan.groups == (("sliding_window", 1024),) * 6 + ("full",)
    assert (plan.layers_per_group, plan.num_gpu_blocks) == (10, 16384)
    assert plan.vllm_kv_cache_tokens == 16384 // 7 * 16 == 37440
    # window moot at max_model_len 8,192 and 8,192 batched: each sliding group ceil(8,192/16) + 1
    assert plan.blocks_per_request == 6 * 513 + 512
    # long requests, small budget: ceil(3,071 / 16) + 1 = 193 per sliding group
    long = plan_kv_pool(GEMMA3, _engine(max_model_len=32768), 20 * GiB)
    assert long.blocks_per_request == 6 * 193 + 2048
    assert long.max_concurrency == pytest.approx(16384 / 3206)


def test_mla_pool_is_not_split_by_tensor_parallelism():
    # one group of 27 layers, page 27 × 16 × 1,152 B = 497,664 B: 1 GiB → 2,157 blocks at TP 1 and 8
    for tp in (1, 8):
        plan = plan_kv_pool(MLA, _engine(tensor_parallel_size=tp), 1 * GiB)
        assert (plan.groups, plan.num_gpu_blocks, plan.vllm_kv_cache_tokens) == (("full",), 2157, 34512)
        assert plan.max_concurrency == pytest.approx(2157 / 512) and not plan.hybrid


def test_mamba_hybrid_raises_the_block_size():
    # attention 2 × 2 × 256 × 2 = 2,048 B/token; block = 16 × ceil(1,097,728 / (16 × 2,048)) = 544
    # page 544 × 2,048 = 1,114,112 B (the state padded to it); 36 Mamba + 12 full → 3 + 1 groups of 12
    engine = _engine()
    assert kv_block_size(HYBRID, engine) == 544 == kv_block_size(HYBRID, _engine(tensor_parallel_size=2))
    plan = plan_kv_pool(HYBRID, engine, 10 * GiB)
    assert plan.groups == (("mamba", 1097728),) * 3 + ("full",) and plan.page_bytes == 1114112
    # 10 GiB // 1,114,112 // 12 = 803; tokens 803 // 4 × 544; per request 3 states + ceil(8,192 / 544)
    assert (plan.num_gpu_blocks, plan.vllm_kv_cache_tokens, plan.blocks_per_request) == (803, 200 * 544, 19)
    # prefix caching ("align" mode): two state blocks per Mamba group
    assert plan_kv_pool(HYBRID, _engine(enable_prefix_caching=True), 10 * GiB).blocks_per_request == 22
    with pytest.raises(ConfigError, match="Mamba"):
        plan_kv_pool(HYBRID, _engine(kv_groups=("full",)), 10 * GiB)


def test_chunked_local_and_disabled_manager_give_one_full_group():
    # vLLM turns the hybrid manager off for chunked local attention: 48 full layers, one group
    plan = plan_kv_pool(SCOUT, _engine(tensor_parallel_size=4), 1 * GiB)
    # page 48 layers × 16 × 2 (K, V) × 2 heads × 128 × 2 B = 786,432 B → 1 GiB holds 1,365 blocks
    assert (plan.groups, plan.num_gpu_blocks, plan.blocks_per_request) == (("full",), 1365, 512)
    off = plan_kv_pool(OSS, _engine(kv_groups=("full",)), 1 * GiB)
    assert off.groups == ("full",) and off.num_gpu_blocks == 1 * GiB // (24 * 32768)


def test_full_layout_is_bit_identical_to_no_layout():
    h100, llama = hardware("h100-sxm"), model("llama-3.1-8b")
    laid_out = dataclasses.replace(llama, attention=AttentionLayout(("full",) * llama.num_layers))
    engine = EngineConfig.vllm_defaults(h100, max_model_len=8192)
    a, b = kv_capacity(h100, llama, engine), kv_capacity(h100, laid_out, engine)
    assert (a.num_gpu_blocks, a.vllm_kv_cache_tokens, a.num_tokens) == (
        b.num_gpu_blocks,
        b.vllm_kv_cache_tokens,
        b.num_tokens,
    )
    assert a.max_concurrency == b.max_concurrency == a.num_gpu_blocks / 512 and a.kv_groups == ("full",)


def test_kv_capacity_reports_the_hybrid_pool():
    h100 = hardware("h100-sxm")
    cap = kv_capacity(h100, OSS, _engine(gpu_memory_utilization=0.9))
    assert cap.plan is not None and cap.kv_groups == (("sliding_window", 128), "full")
    assert cap.vllm_kv_cache_tokens == cap.num_gpu_blocks // 2 * 16 and cap.num_tokens == cap.num_blocks // 2 * 16
    assert cap.max_concurrency == pytest.approx(cap.num_gpu_blocks / 649)
    mamba = kv_capacity(h100, HYBRID, _engine())
    assert mamba.block_size == 544
