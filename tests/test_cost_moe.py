"""budgetlab.cost.moe: the fused-MoE kernel's routing, padding, FLOPs and bytes, worked by hand."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from budgetlab.catalog import hardware, model
from budgetlab.cost import moe
from budgetlab.cost.presets import TYPICAL
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.specs import ModelSpec

H100 = hardware("h100-sxm")
A100 = hardware("a100-80gb-sxm")
MIXTRAL = model("mixtral-8x7b")
#: Mixtral 8x22B (mistralai/Mixtral-8x22B-v0.1 config.json; 141B total, 39B active), not in the catalog.
MIXTRAL_8X22B = ModelSpec(
    slug="mixtral-8x22b",
    name="Mixtral 8x22B",
    num_params=141e9,
    num_active_params=39e9,
    num_layers=56,
    hidden_size=6144,
    num_attention_heads=48,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=16384,
    vocab_size=32768,
    num_experts=8,
    num_experts_per_token=2,
)
VLLM_CONFIGS = Path("/tmp/vllm_src/vllm/model_executor/layers/fused_moe/configs")


# --------------------------------------------------------------------------------------------
# Routing
# --------------------------------------------------------------------------------------------


def test_expected_experts_by_hand():
    touched = moe.expected_experts([0, 1, 2, 10_000], num_experts=8, experts_per_token=2)
    # D(0) = 0; D(1) = k = 2; D(2) = 8 (1 - 0.75^2) = 3.5; D(large) = E.
    np.testing.assert_allclose(touched, [0.0, 2.0, 3.5, 8.0], rtol=0, atol=1e-12)
    assert moe.expected_experts(1, num_experts=128, experts_per_token=8) == pytest.approx(8.0, abs=1e-12)
    assert isinstance(moe.expected_experts(3, num_experts=8, experts_per_token=2), float)


def test_expert_parallelism_halves_experts_per_gpu():
    tp_experts = moe.expected_experts_per_gpu(10_000, num_experts=8, experts_per_token=2, ep=1)
    ep_experts = moe.expected_experts_per_gpu(10_000, num_experts=8, experts_per_token=2, ep=2)
    assert (tp_experts, ep_experts) == (pytest.approx(8.0), pytest.approx(4.0))
    # The mean at one token: 2 experts touched, half of them on each of 2 GPUs.
    assert moe.expected_experts_per_gpu(1, num_experts=8, experts_per_token=2, ep=2) == pytest.approx(1.0)


def test_slowest_gpu_by_hand():
    # ep = 8: each GPU holds one expert, touched with probability 1/4; max of 8 = 1 - 0.75^8.
    slowest = moe.expected_experts_per_gpu(1, num_experts=8, experts_per_token=2, ep=8, slowest=True)
    assert slowest == pytest.approx(1.0 - 0.75**8, abs=1e-12)
    # ep = 2: each GPU's count is Binomial(4, 1/4): F(0..3) by hand, E[max] = sum (1 - F(c-1)^2).
    cdf = [0.31640625, 0.73828125, 0.94921875, 0.99609375]
    by_hand = sum(1.0 - f**2 for f in cdf)
    slowest = moe.expected_experts_per_gpu(1, num_experts=8, experts_per_token=2, ep=2, slowest=True)
    assert slowest == pytest.approx(by_hand, abs=1e-12)
    # Every expert touched: every GPU reads all of its own.
    full = moe.expected_experts_per_gpu(100_000, num_experts=8, experts_per_token=2, ep=4, slowest=True)
    assert full == pytest.approx(2.0, abs=1e-9)


# --------------------------------------------------------------------------------------------
# Tile configs
# --------------------------------------------------------------------------------------------


def test_tuned_config_is_the_nearest_key():
    # H100, Mixtral 8x7B at TP2 (N = 14336 / 2): 100 -> key 96, 500 -> 512, 2000 -> 2048.
    configs = moe.fused_moe_config([100, 500, 2000], hardware=H100, num_local_experts=8, shard_intermediate_size=7168)
    assert configs == [moe.MoeTileConfig(32, 64), moe.MoeTileConfig(64, 32), moe.MoeTileConfig(128, 32)]
    # A tie (20 is 4 from 16 and from 24) goes to the smaller key, as min() over ascending keys.
    assert moe.fused_moe_config(20, hardware=H100, num_local_experts=8, shard_intermediate_size=2048) == (
        moe.MoeTileConfig(16, 64)
    )
    assert moe.fused_moe_config(2000, hardware=A100, num_local_experts=8, shard_intermediate_size=7168) == (
        moe.MoeTileConfig(128, 16)
    )


def test_default_config_without_a_tuned_file():
    # Mixtral at TP1 on H100: vLLM ships no bf16 E=8,N=14336 file for H100 -> get_default_config.
    blocks = moe.moe_block_size_m(
        [1, 32, 33, 96, 97, 512, 513], hardware=H100, num_local_experts=8, shard_intermediate_size=14336
    )
    np.testing.assert_array_equal(blocks, [16, 16, 32, 32, 64, 64, 128])
    assert moe.fused_moe_config(1024, hardware=None, num_local_experts=8, shard_intermediate_size=7168) == (
        moe.MoeTileConfig(128, 1)  # 1024 // 8 = 128 tokens per expert: not above 128
    )
    assert moe.fused_moe_config(1032, hardware=None, num_local_experts=8, shard_intermediate_size=7168) == (
        moe.MoeTileConfig(128, 16)
    )


@pytest.mark.skipif(not VLLM_CONFIGS.is_dir(), reason="vLLM 0.33.0 source not extracted at /tmp/vllm_src")
def test_tuned_table_matches_vllm_files():
    for (device, experts, width), entries in moe.TUNED_CONFIGS.items():
        path = VLLM_CONFIGS / f"E={experts},N={width},device_name={device}.json"
        data = json.loads(path.read_text())
        data.pop("triton_version", None)
        expected = sorted(
            (int(key), moe.MoeTileConfig(value["BLOCK_SIZE_M"], value["GROUP_SIZE_M"])) for key, value in data.items()
        )
        assert list(entries) == expected, path.name
    names = {p.name for p in VLLM_CONFIGS.glob("E=8,N=*,device_name=*.json")}
    wanted = {
        name
        for name in names
        if re.fullmatch(r"E=8,N=\d+,device_name=(NVIDIA_H100_80GB_HBM3|NVIDIA_A100-SXM4-80GB|NVIDIA_H200)\.json", name)
    }
    table = {f"E={e},N={n},device_name={d}.json" for d, e, n in moe.TUNED_CONFIGS if e == 8}
    assert table == wanted


# --------------------------------------------------------------------------------------------
# Padding
# --------------------------------------------------------------------------------------------


def _blocks_brute_force(num_tokens: int, share: float, block: int) -> float:
    return sum(
        math.comb(num_tokens, x) * share**x * (1.0 - share) ** (num_tokens - x) * math.ceil(x / block)
        for x in range(num_tokens + 1)
    )


def test_m_blocks_by_hand():
    kwargs = {"num_experts": 8, "experts_per_token": 2}
    # One token, no expert map, 1 * 2 * 4 <= 8: one block per (token, expert) pair.
    assert moe.expected_m_blocks_per_gpu(1, ep=1, block_size_m=16, **kwargs) == 2.0
    # Two tokens: aligned; an expert gets a block when it gets any pair: 8 (1 - 0.75^2) = 3.5.
    assert moe.expected_m_blocks_per_gpu(2, ep=1, block_size_m=16, **kwargs) == pytest.approx(3.5, abs=1e-12)
    # Blocks of one row count pairs: E[X] = 2 * 1/4 per expert, 4 experts per GPU at ep = 2.
    assert moe.expected_m_blocks_per_gpu(2, ep=2, block_size_m=1, **kwargs) == pytest.approx(2.0, abs=1e-12)
    # With an expert map (ep = 2) one token is aligned too: 4 local experts x P(X >= 1) = 1.
    assert moe.expected_m_blocks_per_gpu(1, ep=2, block_size_m=16, **kwargs) == pytest.approx(1.0, abs=1e-12)
    # Every count against a direct sum over the binomial.
    for tokens, block in ((40, 16), (300, 64), (777, 128)):
        exact = 8 * _blocks_brute_force(tokens, 0.25, block)
        assert moe.expected_m_blocks_per_gpu(tokens, ep=1, block_size_m=block, **kwargs) == pytest.approx(
            exact, rel=1e-12
        )


def test_padded_rows_by_hand():
    # H100 Mixtral TP2: 1 token -> tuned key 1 (BLOCK_SIZE_M 16), two one-pair blocks: 32 rows.
    assert moe.padded_rows_per_gpu(MIXTRAL, tp=2, num_tokens=1, hardware=H100) == 32.0
    # 2 tokens -> key 2 (BLOCK_SIZE_M 16), 3.5 blocks: 56 rows for 4 routed pairs.
    assert moe.padded_rows_per_gpu(MIXTRAL, tp=2, num_tokens=2, hardware=H100) == pytest.approx(56.0)
    # Padding only adds rows, and the padded share shrinks as tokens grow (BLOCK_SIZE_M fixed).
    tokens = np.array([64, 256, 1024, 4096])
    rows = np.asarray(moe.padded_rows_per_gpu(MIXTRAL, tp=2, num_tokens=tokens, hardware=None))
    pairs = tokens * 2.0
    assert np.all(rows >= pairs)
    assert rows[3] / pairs[3] < rows[2] / pairs[2]


def test_vectorized_shapes():
    tokens = np.array([[0, 1], [500, 2000]])
    rows = moe.padded_rows_per_gpu(MIXTRAL, tp=2, num_tokens=tokens, hardware=H100)
    assert isinstance(rows, np.ndarray) and rows.shape == (2, 2) and rows[0, 0] == 0.0
    for i, j in np.ndindex(2, 2):
        one = moe.padded_rows_per_gpu(MIXTRAL, tp=2, num_tokens=int(tokens[i, j]), hardware=H100)
        assert rows[i, j] == one
    assert moe.moe_block_size_m(7, hardware=H100, num_local_experts=8, shard_intermediate_size=7168) == 16


# --------------------------------------------------------------------------------------------
# FLOPs and bytes
# --------------------------------------------------------------------------------------------


def test_tp1_is_twice_tp2_per_gpu():
    tokens = [1, 100, 500, 2000]
    flops_1 = np.asarray(moe.expert_flops_per_gpu(MIXTRAL, tp=1, num_tokens=tokens))
    flops_2 = np.asarray(moe.expert_flops_per_gpu(MIXTRAL, tp=2, num_tokens=tokens))
    np.testing.assert_allclose(flops_1, 2.0 * flops_2, rtol=1e-12)
    bytes_1 = np.asarray(moe.expert_bytes_read_per_gpu(MIXTRAL, tp=1, num_tokens=tokens, bytes_per_param=2))
    bytes_2 = np.asarray(moe.expert_bytes_read_per_gpu(MIXTRAL, tp=2, num_tokens=tokens, bytes_per_param=2))
    np.testing.assert_allclose(bytes_1, 2.0 * bytes_2, rtol=1e-12)


def test_unpadded_flops_are_the_active_expert_math():
    # 500 tokens x 2 experts x 32 layers x 2 FLOP x 3 x 4096 x 14336 / 2 GPUs.
    expected = 500 * 2 * 32 * 2 * 3 * 4096 * 14336 / 2
    assert moe.expert_flops_per_gpu(MIXTRAL, tp=2, num_tokens=500, padded=False) == pytest.approx(expected)
    assert moe.expert_params_per_layer(MIXTRAL) == 3 * 4096 * 14336


def test_all_experts_read_once_at_a_prefill():
    # 2000 tokens touch every expert: 32 layers x 8 experts x 3 x 4096 x 14336 / 2 x 2 B.
    expected = 32 * 8 * 3 * 4096 * 14336 / 2 * 2
    read = moe.expert_bytes_read_per_gpu(MIXTRAL, tp=2, num_tokens=2000, bytes_per_param=2, hardware=H100)
    assert read == pytest.approx(expected, rel=1e-12)
    # Without L2 reuse, once per M-block: more than once per expert.
    no_reuse = moe.expert_bytes_read_per_gpu(
        MIXTRAL, tp=2, num_tokens=2000, bytes_per_param=2, hardware=H100, l2_reuse=False
    )
    assert no_reuse > 3 * read


def test_expert_parallel_mean_equals_tensor_parallel():
    tokens = [1, 50, 700]
    for name in ("expert_flops_per_gpu", "expert_bytes_read_per_gpu"):
        extra = {"bytes_per_param": 2, "slowest": False} if name == "expert_bytes_read_per_gpu" else {}
        tp_side = np.asarray(getattr(moe, name)(MIXTRAL, tp=2, ep=1, num_tokens=tokens, **extra))
        ep_side = np.asarray(getattr(moe, name)(MIXTRAL, tp=2, ep=2, num_tokens=tokens, **extra))
        if name == "expert_flops_per_gpu":  # one token: tp runs 2 one-pair blocks, ep aligns 1 expected block
            tp_side, ep_side = tp_side[1:], ep_side[1:]
        np.testing.assert_allclose(ep_side, tp_side, rtol=1e-12, err_msg=name)


def test_expert_parallel_decode_waits_for_the_slowest_gpu():
    # One token at TP8 / EP8 of 8x22B: tp reads 2 experts x 1/8 each; the slowest ep GPU a whole one
    # with probability 1 - 0.75^8.
    expert = 56 * 3 * 6144 * 16384 * 2.0
    tp_read = moe.expert_bytes_read_per_gpu(MIXTRAL_8X22B, tp=8, num_tokens=1, bytes_per_param=2)
    ep_read = moe.expert_bytes_read_per_gpu(MIXTRAL_8X22B, tp=8, ep=8, num_tokens=1, bytes_per_param=2)
    assert tp_read == pytest.approx(2 * expert / 8)
    assert ep_read == pytest.approx((1.0 - 0.75**8) * expert)


def test_mixtral_8x22b_tp8_configs():
    blocks = moe.moe_block_size_m([100, 500, 2000], hardware=H100, num_local_experts=8, shard_intermediate_size=2048)
    np.testing.assert_array_equal(blocks, [32, 64, 128])
    flops = np.asarray(moe.expert_flops_per_gpu(MIXTRAL_8X22B, tp=8, num_tokens=[100, 500, 2000], hardware=H100))
    unpadded = np.asarray(
        moe.expert_flops_per_gpu(MIXTRAL_8X22B, tp=8, num_tokens=[100, 500, 2000], hardware=H100, padded=False)
    )
    assert np.all(flops > unpadded) and np.all(flops < 1.5 * unpadded)


def test_padded_kernel_roof_matches_published_kernel_times():
    """vLLM PR #24700: H100, Mixtral 8x7B bf16 TP2, tuned config, one MoE layer (benchmark_moe.py).

    The padded math at the TYPICAL preset's efficiencies, joined to the weight read with its knee
    rule, is within 7 % of each published time from 16 to 1,536 tokens.
    """
    tokens = np.array([16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536])
    measured_us = np.array([471.49, 478.27, 487.35, 487.85, 483.14, 494.42, 491.39, 536.77, 662.33, 833.72, 1122.93])
    layers = MIXTRAL.num_layers
    read = np.asarray(moe.expert_bytes_read_per_gpu(MIXTRAL, tp=2, num_tokens=tokens, bytes_per_param=2)) / layers
    math_ = np.asarray(moe.expert_flops_per_gpu(MIXTRAL, tp=2, num_tokens=tokens, hardware=H100)) / layers
    memory_s = read / (H100.mem_bandwidth_bytes_per_s * TYPICAL["bandwidth_efficiency"])
    compute_s = math_ / (H100.dense_bf16_flops_per_s * TYPICAL["flop_efficiency"])
    high, low = np.maximum(memory_s, compute_s), np.minimum(memory_s, compute_s)
    roof_us = (high + TYPICAL["knee_overlap_loss"] * low * low / high) * 1e6
    np.testing.assert_allclose(roof_us, measured_us, rtol=0.07)


# --------------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokens", [-1, 1.5, True, "3", None, [1, -2], float("nan")])
def test_bad_token_counts_refused(tokens):
    with pytest.raises(ParameterError, match="num_tokens"):
        moe.expected_experts(tokens, num_experts=8, experts_per_token=2)


def test_bad_routing_refused():
    with pytest.raises(ParameterError, match="below num_experts"):
        moe.expected_experts(1, num_experts=8, experts_per_token=8)
    with pytest.raises(ParameterError, match="num_experts"):
        moe.expected_experts(1, num_experts=1, experts_per_token=1)
    with pytest.raises(ParameterError, match="slowest"):
        moe.expected_experts_per_gpu(1, num_experts=8, experts_per_token=2, ep=2, slowest="yes")  # type: ignore[arg-type]


def test_bad_deployments_refused():
    with pytest.raises(ConfigError, match="does not divide the 8 experts"):
        moe.expected_experts_per_gpu(1, num_experts=8, experts_per_token=2, ep=3)
    with pytest.raises(ConfigError, match="ep must be 1"):
        moe.expert_flops_per_gpu(MIXTRAL, tp=2, ep=4, num_tokens=10)
    with pytest.raises(ParameterError, match="does not divide"):
        moe.expert_flops_per_gpu(MIXTRAL, tp=3, num_tokens=10)
    with pytest.raises(ParameterError, match="not a mixture of experts"):
        moe.expert_flops_per_gpu(model("llama-2-7b"), tp=1, num_tokens=10)
    with pytest.raises(ParameterError, match="ModelSpec"):
        moe.expert_params_per_layer("mixtral-8x7b")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="bytes_per_param"):
        moe.expert_bytes_read_per_gpu(MIXTRAL, tp=2, num_tokens=10, bytes_per_param=0)
    with pytest.raises(ParameterError, match="hardware"):
        moe.padded_rows_per_gpu(MIXTRAL, tp=2, num_tokens=10, hardware="h100-sxm")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="block_size_m"):
        moe.expected_m_blocks_per_gpu([1, 2], num_experts=8, experts_per_token=2, block_size_m=[16, 16, 16])
    with pytest.raises(ParameterError, match="block_size_m"):
        moe.expected_m_blocks_per_gpu(1, num_experts=8, experts_per_token=2, block_size_m=0)
