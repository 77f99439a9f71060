"""KV bytes per token and the KV pool left after weights and activations."""

from __future__ import annotations

import numpy as np
import pytest

from budgetlab import (
    DoesNotFitError,
    EngineConfig,
    activation_bytes,
    blocks_for_tokens,
    kv_bytes_per_token,
    kv_capacity,
)
from budgetlab.memory import kv_by_budget, num_kv_blocks

ENGINE = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)


def test_llama_8b_kv_is_128_kib_per_token(llama8b):
    # 2 (K, V) × 32 layers × 8 KV heads × 128 head_dim × 2 B = 131,072 B.
    assert kv_bytes_per_token(llama8b) == 131_072


def test_activation_estimate_by_hand(llama8b):
    # 2048 × (2 × 14336 + 4 × 4096) × 2 B = 184,549,376 B of layer activations,
    # + 256 × 128,256 × 4 B = 131,334,144 B of FP32 logits.
    assert activation_bytes(llama8b, num_batched_tokens=2048, max_num_seqs=256) == 315_883_520


def test_kv_capacity_by_hand(h100, llama8b):
    cap = kv_capacity(h100, llama8b, ENGINE)
    usable = h100.memory_bytes * 0.9
    kv = usable - 16.06e9 - 315_883_520
    assert cap.usable_bytes == pytest.approx(usable)
    assert cap.kv_bytes == pytest.approx(kv)
    # 16 tokens × 128 KiB = 2 MiB per block; one block is vLLM's null block.
    assert cap.num_blocks == int(kv // 2_097_152) - 1
    assert cap.num_tokens == cap.num_blocks * 16
    assert 0.7 < cap.kv_fraction < 0.8
    # An 80 GiB H100 holds roughly 465k tokens of Llama 3.1 8B KV cache.
    assert 400_000 < cap.num_tokens < 500_000


def test_bigger_budget_leaves_less_kv(h100, llama8b):
    small = kv_capacity(h100, llama8b, ENGINE)
    big = kv_capacity(h100, llama8b, EngineConfig(max_num_batched_tokens=16384, max_num_seqs=256))
    assert big.activation_bytes > small.activation_bytes
    assert big.num_blocks < small.num_blocks


def test_lower_utilization_leaves_less_kv(h100, llama8b):
    lower = kv_capacity(
        h100, llama8b, EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256, gpu_memory_utilization=0.5)
    )
    assert lower.num_blocks < kv_capacity(h100, llama8b, ENGINE).num_blocks


def test_weights_that_do_not_fit_say_by_how_much():
    from budgetlab.catalog import hardware, model

    with pytest.raises(DoesNotFitError, match=r"does not fit.*by \d+\.\d GB.*tensor parallelism \(at least \d+ GPUs\)"):
        kv_capacity(hardware("h100-sxm"), model("llama-3.1-70b"), ENGINE)


def test_blocks_for_tokens():
    assert [blocks_for_tokens(n, 16) for n in (0, 1, 16, 17, 32)] == [0, 1, 1, 2, 2]


def test_num_kv_blocks_prefers_the_explicit_value(h100, llama8b):
    assert num_kv_blocks(EngineConfig(max_num_batched_tokens=64, max_num_seqs=4, num_kv_blocks=10)) == 10
    assert num_kv_blocks(ENGINE, h100, llama8b) == kv_capacity(h100, llama8b, ENGINE).num_blocks
    with pytest.raises(ValueError, match="pass both, or set num_kv_blocks"):
        num_kv_blocks(ENGINE)


def test_tensor_parallel_splits_weights_and_kv_heads(h100, llama8b):
    from budgetlab import weight_bytes_per_gpu, weights_fit
    from budgetlab.catalog import model

    llama70b = model("llama-3.1-70b")  # 141 GB of BF16 weights, 8 KV heads, 64 attention heads
    assert weight_bytes_per_gpu(llama70b, tp=2) == pytest.approx(llama70b.weight_bytes / 2)
    assert [weights_fit(h100, llama70b, tp=tp) for tp in (1, 2, 8)] == [False, True, True]
    assert weights_fit(h100, llama8b)
    # KV heads split up to their number, then replicated: 8 KV heads over 16 GPUs hold one each
    full = kv_bytes_per_token(llama70b)
    assert [kv_bytes_per_token(llama70b, tp=tp) for tp in (1, 2, 8, 16)] == [full, full // 2, full // 8, full // 8]
    assert isinstance(kv_bytes_per_token(llama70b, tp=8), int)


def test_kv_capacity_with_tensor_parallelism(h100, llama8b):
    from budgetlab.catalog import model

    one = kv_capacity(h100, llama8b, ENGINE)
    assert one == kv_capacity(h100, llama8b, ENGINE, tp=1) and one.tp == 1
    two = kv_capacity(h100, llama8b, ENGINE, tp=2)
    assert two.weight_bytes == pytest.approx(one.weight_bytes / 2) and two.kv_bytes_per_token == 65_536
    assert two.num_tokens > 2 * one.num_tokens  # half the bytes per token, and more bytes left
    sharded = kv_capacity(h100, model("llama-3.1-70b"), ENGINE, tp=2)
    assert sharded.num_blocks > 0 and sharded.tp == 2
    with pytest.raises(DoesNotFitError, match=r"does not fit on 2 × .*per GPU.*at least \d+ GPUs"):
        kv_capacity(h100, model("llama-3.1-405b"), ENGINE, tp=2)


def test_tensor_parallel_degree_must_divide_the_heads(llama8b):
    from budgetlab import ParameterError, weight_bytes_per_gpu

    with pytest.raises(ParameterError, match="tp=3 does not divide"):
        weight_bytes_per_gpu(llama8b, tp=3)
    with pytest.raises(ParameterError, match="tp must be an int >= 1"):
        kv_bytes_per_token(llama8b, tp=0)


def test_kv_by_budget(h100, llama8b):
    frame = kv_by_budget(h100, llama8b, [128, 2048, 256, 8192, 2048], max_num_seqs=256)
    assert frame.max_num_batched_tokens.tolist() == [256, 2048, 8192]  # 128 < max_num_seqs is refused by vLLM
    at_2048 = kv_capacity(h100, llama8b, ENGINE)
    row = frame.set_index("max_num_batched_tokens").loc[2048]
    assert row.kv_blocks == at_2048.num_blocks and row.kv_tokens == at_2048.num_tokens
    assert row.activation_bytes == at_2048.activation_bytes == 315_883_520
    assert np.all(np.diff(frame.kv_tokens) < 0) and np.all(np.diff(frame.activation_bytes) > 0)
    assert frame.kv_tokens_lost.tolist()[0] == 0
    assert frame.kv_tokens_lost.iloc[-1] == frame.kv_tokens.iloc[0] - frame.kv_tokens.iloc[-1]
    lost = frame.kv_tokens_lost.iloc[-1]
    assert frame.kv_tokens_lost_fraction.iloc[-1] == pytest.approx(lost / frame.kv_tokens.iloc[0])
    with pytest.raises(ValueError, match="below max_num_seqs"):
        kv_by_budget(h100, llama8b, [128], max_num_seqs=256)
