"""Vidur's operator profiles at tensor parallelism 1-8 (``data/measured/vidur-*-tp.csv``).

The tables load like any measured-step table, a row recomputes by hand from the operator
medians the README quotes, and the step cost's linear layers are scored against them per GPU
and TP (run with ``-s`` to see the table): the preset as it is, and the preset with the two
terms of :mod:`budgetlab.cost.gemm` (the layers' own parameters, the replicated norms and
residual adds).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from budgetlab.catalog import data_path, hardware, model
from budgetlab.cost import CalibratedCost
from budgetlab.cost.gemm import (
    REPLICATED_BANDWIDTH_EFFICIENCY,
    gemm_shapes,
    replicated_bytes_per_token,
    replicated_time_s,
)
from budgetlab.cost.measurements import measured_batches, read_measurements
from budgetlab.errors import ParameterError

#: Table file -> (catalog hardware, catalog model, Vidur profile folder).
TABLES = {
    "vidur-h100-llama2-7b-tp.csv": ("h100-sxm", "llama-2-7b", "h100/meta-llama/Llama-2-7b-hf"),
    "vidur-h100-codellama34b-tp.csv": ("h100-sxm", "codellama-34b", "h100/codellama/CodeLlama-34b-Instruct-hf"),
    "vidur-h100-llama2-70b-tp.csv": ("h100-sxm", "llama-2-70b", "h100/meta-llama/Llama-2-70b-hf"),
    "vidur-a100-llama2-7b-tp.csv": ("a100-80gb-sxm", "llama-2-7b", "a100/meta-llama/Llama-2-7b-hf"),
    "vidur-a100-codellama34b-tp.csv": ("a100-80gb-sxm", "codellama-34b", "a100/codellama/CodeLlama-34b-Instruct-hf"),
    "vidur-a100-llama2-70b-tp.csv": ("a100-80gb-sxm", "llama-2-70b", "a100/meta-llama/Llama-2-70b-hf"),
    "vidur-a100-llama3-8b-tp.csv": ("a100-80gb-sxm", "llama-3.1-8b", "a100/meta-llama/Meta-Llama-3-8B"),
    "vidur-a100-llama3-70b-tp.csv": ("a100-80gb-sxm", "llama-3.1-70b", "a100/meta-llama/Meta-Llama-3-70B"),
}
TOKENS = [1, 64, 128, 256, 512, 1024, 2048, 4096]
TPS = [1, 2, 4, 8]


def _table(name: str) -> pd.DataFrame:
    return read_measurements(data_path("measured", name))


def _preset_ms(hw: str, mdl: str, tp: int, tokens: np.ndarray) -> np.ndarray:
    cost = CalibratedCost.gpu_profile(hardware(hw), model(mdl)).with_(tp=tp, attention=False, all_reduce=False)
    return np.asarray(cost.step_time_s(tokens)) * 1e3


def _constant_knee_ms(hw: str, mdl: str, tp: int, tokens: np.ndarray) -> np.ndarray:
    """The GPU profile before issue 22: one knee loss (0.70) for every model and TP."""
    cost = CalibratedCost.gpu_profile(hardware(hw), model(mdl)).with_(
        tp=tp, attention=False, all_reduce=False, knee_weight_exponent=0.0, knee_hidden_exponent=0.0
    )
    return np.asarray(cost.step_time_s(tokens)) * 1e3


def _errors(predict: Callable[[str, str, int, np.ndarray], np.ndarray]) -> pd.DataFrame:
    rows = []
    for name, (hw, mdl, _) in TABLES.items():
        table = _table(name)
        for tp, part in table.groupby("tp"):
            tokens = part["num_prefill_tokens"].to_numpy()
            relative = predict(hw, mdl, int(tp), tokens) / part["step_time_ms"].to_numpy() - 1
            rows += [(hw, mdl, int(tp), int(n), float(e)) for n, e in zip(tokens, relative, strict=True)]
    return pd.DataFrame(rows, columns=["hardware", "model", "tp", "tokens", "error"])


def _per_tp(errors: pd.DataFrame) -> pd.DataFrame:
    return (
        errors.assign(abs_error=errors["error"].abs()).groupby(["hardware", "tp"])["abs_error"].agg(["median", "max"])
    )


# --------------------------------------------------------------------------------------------
# The tables
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TABLES))
def test_table_loads_with_one_row_per_tp_and_token_count(name):
    table = _table(name)
    assert len(table) == 32 and len(measured_batches(table)) == 32
    assert sorted(table["tp"].unique()) == TPS
    for _, part in table.groupby("tp"):
        assert part["num_prefill_tokens"].tolist() == TOKENS
    assert (table["num_decode_tokens"] == 0).all() and (table["context_tokens"] == 0).all()
    folder = TABLES[name][2]
    for tp, source in zip(table["tp"], table["source"], strict=True):
        assert f"data/profiling/compute/{folder}/mlp.csv" in source and "microsoft/vidur@" in source
        assert f"num_tensor_parallel_workers={tp}" in source


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_gpus_share_of_a_step_shrinks_with_tp(name):
    table = _table(name).pivot(index="num_prefill_tokens", columns="tp", values="step_time_ms")
    assert (np.diff(table.to_numpy(), axis=1) < 0).all()


def test_hand_worked_rows_of_llama2_70b_on_h100():
    table = _table("vidur-h100-llama2-70b-tp.csv").set_index(["tp", "num_prefill_tokens"])["step_time_ms"]
    # Per-layer medians [µs] from the profile (README): norm, QKV, rope, out-proj, norm, up, act, down, add.
    tp8_one_token = [6, 13, 2, 9, 6, 43.5, 2, 22, 1]
    tp4_512_tokens = [11, 46, 4, 29, 12, 181, 11, 74, 7]
    assert table[(8, 1)] == pytest.approx(sum(tp8_one_token) * 80 / 1e3, abs=0.005)  # 8.36 ms
    assert table[(4, 512)] == pytest.approx(sum(tp4_512_tokens) * 80 / 1e3, abs=0.005)  # 30.00 ms


def test_tp1_rows_of_the_7b_table_are_the_example_unrounded():
    example = _table("vidur-h100-llama2-7b-linear.csv")
    tp1 = _table("vidur-h100-llama2-7b-tp.csv").query("tp == 1")
    np.testing.assert_array_equal(example["num_prefill_tokens"], tp1["num_prefill_tokens"])
    np.testing.assert_allclose(example["step_time_ms"], tp1["step_time_ms"], atol=0.05)


# --------------------------------------------------------------------------------------------
# budgetlab.cost.gemm
# --------------------------------------------------------------------------------------------


def test_gemm_shapes_of_llama2_70b_at_tp8():
    # 64 query heads / 8 = 8, 8 KV heads / 8 = 1, head_dim 128; MLP 28,672 / 8 = 3,584.
    assert gemm_shapes(model("llama-2-70b"), tp=8) == {
        "attn_pre_proj": (8192, (8 + 2 * 1) * 128),
        "attn_post_proj": (1024, 8192),
        "mlp_up_proj": (8192, 2 * 3584),
        "mlp_down_proj": (3584, 8192),
    }


@pytest.mark.parametrize("mdl", ["llama-2-7b", "llama-2-70b", "llama-3.1-8b"])
def test_gemm_shapes_shard_the_layer_weights(mdl):
    spec = model(mdl)
    full = sum(k * n for k, n in gemm_shapes(spec, tp=1).values())
    for tp in (2, 4, 8):  # no KV head is replicated at these degrees
        assert sum(k * n for k, n in gemm_shapes(spec, tp=tp).values()) * tp == full


def test_gemm_shapes_reject_a_tp_vllm_refuses():
    with pytest.raises(ParameterError, match="does not divide"):
        gemm_shapes(model("llama-2-7b"), tp=3)


def test_replicated_work_does_not_shrink_with_tp():
    h100, llama70 = hardware("h100-sxm"), model("llama-2-70b")
    assert replicated_bytes_per_token(llama70) == 80 * 7 * 8192 * 2
    # 4,096 tokens: 80 x 7 x 8192 x 2 B x 4096 / (3.35 TB/s x 0.45) = 24.93 ms on every GPU.
    expected_s = 80 * 7 * 8192 * 2 * 4096 / (h100.mem_bandwidth_bytes_per_s * REPLICATED_BANDWIDTH_EFFICIENCY)
    assert replicated_time_s(h100, llama70, 4096) == pytest.approx(expected_s, rel=1e-12)
    np.testing.assert_allclose(replicated_time_s(h100, llama70, [0, 1, 2]), [0.0, expected_s / 4096, expected_s / 2048])


def test_replicated_time_rejects_bad_input():
    h100, llama = hardware("h100-sxm"), model("llama-2-7b")
    with pytest.raises(ValueError, match="num_tokens"):
        replicated_time_s(h100, llama, -1)
    with pytest.raises(ParameterError, match="bandwidth_efficiency"):
        replicated_time_s(h100, llama, 8, bandwidth_efficiency=0.0)


# --------------------------------------------------------------------------------------------
# Accuracy per GPU and TP
# --------------------------------------------------------------------------------------------


def test_linear_layer_accuracy_per_tp():
    before, after = _errors(_constant_knee_ms), _errors(_preset_ms)
    table = pd.concat({"constant knee": _per_tp(before), "GPU_PROFILE": _per_tp(after)}, axis=1)
    print("\n|relative error| of the linear layers vs Vidur, 8 token counts x models per row:")
    print(table.round(3).to_string())
    print(after.pivot_table(index=["hardware", "model", "tp"], columns="tokens", values="error").round(2))
    summary = {
        name: (float(e["error"].abs().median()), float(e["error"].abs().quantile(0.9)), float(e["error"].abs().max()))
        for name, e in (("constant knee", before), ("GPU_PROFILE", after))
    }
    print("median / P90 / max:", {k: tuple(round(x, 3) for x in v) for k, v in summary.items()})
    # One knee loss for all: 6.7 % median, 20.6 % P90, 44.7 % max (the big models' knee).
    assert summary["constant knee"][2] > 0.44
    # The knee scaled by each GPU's layer bytes and the hidden size: better on every statistic.
    assert summary["GPU_PROFILE"][0] < 0.059 and summary["GPU_PROFILE"][1] < 0.162 and summary["GPU_PROFILE"][2] < 0.36
    assert all(
        after_stat < before_stat for after_stat, before_stat in zip(summary["GPU_PROFILE"], summary["constant knee"])
    )


def test_the_knee_scaling_keeps_the_tp1_example_exact():
    """At the calibration step (Llama 2 7B, TP1) the scaled loss is the preset's 0.70 exactly."""
    example = _table("vidur-h100-llama2-7b-linear.csv")
    tokens = example["num_prefill_tokens"].to_numpy()
    np.testing.assert_array_equal(
        _preset_ms("h100-sxm", "llama-2-7b", 1, tokens), _constant_knee_ms("h100-sxm", "llama-2-7b", 1, tokens)
    )
