"""What-if tables of cost models: other GPUs, GEMM tiles, tensor parallelism, experts."""

from __future__ import annotations

import numpy as np
import pytest

import budgetlab as bl
from budgetlab.catalog import hardware, list_hardware, model
from budgetlab.cost.variants import hardware_comparison, moe_step_costs, tensor_parallel_speedups, tile_cliffs


@pytest.fixture(scope="module")
def calibrated(h100, llama8b):
    return bl.CalibratedCost.typical(h100, llama8b)


def test_hardware_comparison(llama8b):
    specs = [hardware(slug) for slug in list_hardware()]
    frame = hardware_comparison(llama8b, specs, token_marks=[512, 2048])
    assert len(frame) == len(specs)
    h100 = frame.set_index("hardware_slug").loc["h100-sxm"]
    assert h100.knee_tokens == pytest.approx(295.3, abs=0.1)
    assert h100.weight_read_s == pytest.approx(4.79e-3, abs=1e-5)
    assert h100.step_2048_s == pytest.approx(0.03324, abs=1e-5)
    # by hand: 2,048 tokens × 16.06 GFLOP per token at 989.4 TFLOP/s
    ideal = bl.IdealCost(hardware("h100-sxm"), llama8b)
    assert h100.step_2048_s == pytest.approx(2048 * ideal.flops_per_token / hardware("h100-sxm").dense_bf16_flops_per_s)
    assert bool(h100.weights_fit)


def test_tile_cliffs(calibrated):
    tiled = calibrated.with_(tile_tokens=128)
    cliffs = tile_cliffs(tiled, max_tokens=1024)
    linear_only = tile_cliffs(tiled.with_(attention=False), max_tokens=1024)
    assert cliffs.tokens.tolist() == [128, 256, 384, 512, 640, 768, 896]
    assert np.all(cliffs.jump_s > 0) and np.all(cliffs.past_tokens == cliffs.tokens + 1)
    assert np.allclose(cliffs.jump_fraction, cliffs.jump_s / cliffs.step_time_s)
    # in the linear layers, 129 tokens cost what 256 do (attention still counts the real tokens)
    assert linear_only.past_step_time_s.iloc[0] == pytest.approx(float(tiled.with_(attention=False).step_time_s(256)))
    with pytest.raises(ValueError, match="tile_tokens"):
        tile_cliffs(calibrated, max_tokens=1024)
    # below the first tile there is no cliff; a bad max_tokens is refused by name
    assert tile_cliffs(tiled, max_tokens=128).empty
    for bad in (0, 2.5, float("nan"), True, "600", None):
        with pytest.raises(bl.ParameterError, match=r"^max_tokens must be an int >= 1 \[tokens\], got "):
            tile_cliffs(tiled, max_tokens=bad)


def test_token_counts_and_degrees_are_checked_by_name(h100, llama8b):
    mixtral = bl.CalibratedCost.typical(h100, model("mixtral-8x7b"))
    assert moe_step_costs(mixtral, [1, 64]).tokens.tolist() == [1, 64]
    for bad in ([1, 2.5], [1, True], [1, None], [-1]):
        with pytest.raises(bl.ParameterError, match=r"^tokens must be whole numbers of tokens >= 0, got "):
            moe_step_costs(mixtral, bad)
    for bad in ([64, 2.5], [True], ["64"], [0]):
        with pytest.raises(bl.ParameterError, match=r"^token_marks must be a sequence of ints >= 1 \[tokens\]"):
            hardware_comparison(llama8b, [h100], token_marks=bad)
        with pytest.raises(bl.ParameterError, match=r"^token_marks must be"):
            tensor_parallel_speedups(h100, llama8b, tp_degrees=[1], token_marks=bad)
    with pytest.raises(bl.ParameterError, match=r"^tp_degrees\[1\] must be an int >= 1 \[GPUs\], got 2.5$"):
        tensor_parallel_speedups(h100, llama8b, tp_degrees=[1, 2.5])


def test_tensor_parallel_speedups(h100):
    frame = tensor_parallel_speedups(h100, model("llama-3.1-70b"), [1, 2, 4, 8], token_marks=[512, 2048])
    assert frame.tp.tolist() == [1, 2, 4, 8]
    assert frame.weights_fit.tolist() == [False, True, True, True]  # 141 GB of weights, 80 GB GPUs
    assert frame.weight_bytes_per_gpu.iloc[0] == pytest.approx(8 * frame.weight_bytes_per_gpu.iloc[-1])
    assert frame.weight_read_s.iloc[0] == pytest.approx(4 * frame.weight_read_s.iloc[2])
    assert frame.all_reduce_2048_s.iloc[0] == 0 and np.all(np.diff(frame.all_reduce_2048_s) > 0)
    assert frame.speedup_2048.iloc[0] == 1 and np.all(np.diff(frame.speedup_2048) > 0)
    assert frame.speedup_2048.iloc[-1] < 8  # the all-reduces do not shrink with more GPUs
    assert frame.speedup_512.iloc[1] == pytest.approx(frame.step_512_s.iloc[0] / frame.step_512_s.iloc[1])
    shuffled = tensor_parallel_speedups(h100, model("llama-3.1-70b"), [8, 1], token_marks=[2048]).set_index("tp")
    assert shuffled.speedup_2048[1] == 1 and shuffled.speedup_2048[8] == pytest.approx(frame.speedup_2048.iloc[-1])


def test_moe_step_costs(h100):
    cost = bl.CalibratedCost.typical(h100, model("mixtral-8x7b"), tp=2)
    frame = moe_step_costs(cost, [1, 8, 4096])
    assert frame.expected_experts.iloc[0] == pytest.approx(2.0)  # top-2 routing
    assert frame.num_experts.iloc[0] == 8 and set(frame.tp) == {2}
    assert frame.weight_bytes.iloc[0] == pytest.approx(25.8e9, rel=0.01)
    assert frame.weight_bytes.iloc[-1] == pytest.approx(93.4e9, rel=0.01)
    assert frame.weight_bytes_per_gpu.iloc[-1] == pytest.approx(frame.weight_bytes.iloc[-1] / 2)
    assert np.all(frame.dense_step_time_s >= frame.step_time_s)
