"""The shipped preset against published vLLM serving runs on H100 (issue 12's check).

Every run of ``../shared/data/real/vllm_serving_h100_inference_sim.csv``, simulated with
``CalibratedCost.typical`` and ``ServingOverhead.vllm()`` and vLLM's defaults, no per-run
fitting: time per output token and end-to-end mean within 15 %, TTFT mean within 25 % on the
steady runs, and the overloaded runs predicted overloaded. The table is printed (``pytest -s``).
Skipped in a user's clone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from budgetlab.catalog import hardware
from budgetlab.errors import DataFormatError
from budgetlab.experiments.accuracy import accuracy_summary, format_accuracy
from budgetlab.experiments.serving_runs import (
    BOUNDS,
    check_serving_runs,
    gpu_from_name,
    matches_typical,
    model_from_checkpoint,
    read_serving_runs,
    run_engine,
    run_requests,
)

from conftest import shared_real_file


@pytest.fixture(scope="module")
def runs():
    return read_serving_runs(shared_real_file("vllm_serving_h100_inference_sim.csv"))


@pytest.fixture(scope="module")
def check(runs):
    return check_serving_runs(runs, max_duration_s=60.0)


def test_every_published_run_within_the_bounds(check):
    table = check.table
    with pd.option_context("display.width", 200):
        print(
            "\nPublished vLLM runs on H100, shipped preset, no per-run fitting:\n"
            + table[
                ["run", "model", "tp", "rate_per_s", "ttft_mean_s_error", "tpot_s_error", "e2e_mean_s_error",
                 "overloaded_measured", "overloaded_predicted"]
            ].round(3).to_string(index=False)
        )  # fmt: skip
    steady = check.steady
    assert len(steady) == 10 and len(table) == 12
    for metric, bound in BOUNDS.items():
        assert steady[f"{metric}_error"].abs().max() <= bound, metric
    assert (table.overloaded_measured == table.overloaded_predicted).all()
    assert table.overloaded_measured.sum() == 2


def test_accuracy_stated_as_blis_states_it(check):
    summary = check.accuracy
    print("\nAccuracy over the real serving runs of ../shared/data/real (shipped preset):\n" + format_accuracy(summary))
    steady = check.steady
    for metric, bound in BOUNDS.items():
        errors = steady[f"{metric}_error"].abs()
        row = summary.loc[metric]
        assert row.runs == len(steady) == 10
        assert row.median_abs_error == pytest.approx(float(np.median(errors)))
        assert row.p90_abs_error == pytest.approx(float(np.percentile(errors, 90)))
        assert row.median_abs_error <= row.p90_abs_error <= row.max_abs_error == pytest.approx(errors.max())
        assert row.p90_abs_error <= bound and row.within == row.runs, metric  # issue 12's bounds
    assert (summary.loc["overloaded", "within"], summary.loc["overloaded", "runs"]) == (12, 12)


def test_measured_values_are_read_as_published(runs, check):
    first = check.table.iloc[0]
    assert first.ttft_mean_s_measured == runs.ttft_mean_s.iloc[0]
    # the README's time per output token: (e2e − TTFT) / (output − 1) on the means
    row = runs.iloc[0]
    assert first.tpot_s_measured == pytest.approx((row.e2e_mean_s - row.ttft_mean_s) / (row.output_len_mean - 1))


def test_the_workload_is_rebuilt_from_the_published_stage(runs):
    row = runs.iloc[6]  # Mixtral at TP2, 5 requests/s, 11 system prompts of 100 tokens
    requests = run_requests(row, max_duration_s=10.0)
    assert len(requests) == 50 and requests[1].arrival_at_s == pytest.approx(0.2)
    assert {r.prompt_tokens for r in requests} == {round(row.prompt_len_mean)}
    assert {r.prefix_id for r in requests} == {f"system-{k}" for k in range(11)}
    assert {r.prefix_tokens for r in requests} == {100}
    engine = run_engine(row)
    assert (engine.max_num_batched_tokens, engine.max_num_seqs, engine.tensor_parallel_size) == (2048, 128, 2)
    assert engine.enable_prefix_caching and engine.async_scheduling  # vLLM's defaults


def test_matches_typical():
    assert matches_typical(0.90, 2.0e-3) and not matches_typical(0.85, 2.0e-3)


def test_a_file_without_a_needed_column_is_refused(tmp_path):
    from budgetlab.errors import DataFormatError

    path = tmp_path / "runs.csv"
    path.write_text("model,tp\nmeta-llama/Llama-2-7b-hf,1\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="missing column"):
        read_serving_runs(path)


def test_accuracy_summary_by_hand():
    table = pd.DataFrame(
        {
            "ttft_mean_s_error": [0.10, -0.30, 0.20, 5.0],  # the last run was overloaded: not scored
            "tpot_s_error": [0.0, 0.2, -0.1, 1.0],
            "e2e_mean_s_error": [0.05, -0.05, 0.16, 1.0],
            "overloaded_measured": [False, False, False, True],
            "overloaded_predicted": [False, True, False, True],
        }
    )
    summary = accuracy_summary(table)
    assert list(summary.index) == ["ttft_mean_s", "tpot_s", "e2e_mean_s", "overloaded"]
    ttft = summary.loc["ttft_mean_s"]
    # |errors| 0.1, 0.2, 0.3: median 0.2; P90 at rank 0.9 × 2 = 1.8, 0.2 + 0.8 × 0.1 = 0.28
    assert (ttft.runs, ttft.median_abs_error, ttft.p90_abs_error, ttft.max_abs_error) == (3, 0.2, 0.28, 0.3)
    assert ttft.within == 2  # 0.30 > 0.25
    assert summary.loc["e2e_mean_s", "within"] == 2  # 0.16 > 0.15
    assert (summary.loc["overloaded", "within"], summary.loc["overloaded", "runs"]) == (3, 4)
    assert "median 20.0 %, P90 28.0 %" in format_accuracy(summary)


# --------------------------------------------------------------------------------------------
# Any file in the published format: GPUs and checkpoints resolved through the catalog
# --------------------------------------------------------------------------------------------

_ROW = {
    "model": "meta-llama/Llama-2-7b-hf", "tp": 1, "max_model_len": 4096, "max_num_batched_tokens": 2048,
    "max_num_seqs": 128, "system_prompt_len": 100, "num_unique_system_prompts": 2, "requested_rate_per_s": 2,
    "stage_duration_s": 600, "num_requests": 1200, "num_failures": 0, "prompt_len_mean": 500,
    "output_len_mean": 50, "ttft_mean_s": 0.05, "e2e_mean_s": 0.5, "gpu": "H100 SXM (repo README)",
}  # fmt: skip


def _write_runs(tmp_path, *changes: dict[str, object]):
    path = tmp_path / "runs.csv"
    pd.DataFrame([{**_ROW, **change} for change in changes]).to_csv(path, index=False)
    return path


def test_an_a100_row_with_an_instruct_checkpoint_and_blank_knobs(tmp_path):
    path = _write_runs(
        tmp_path,
        {},
        {"gpu": "NVIDIA A100-SXM4-80GB", "model": "meta-llama/Llama-3.1-8B-Instruct", "tp": 2,
         "max_num_seqs": None, "max_num_batched_tokens": None},
    )  # fmt: skip
    runs = read_serving_runs(path)
    a100 = runs.iloc[1]
    engine = run_engine(a100)
    # vLLM's defaults on an A100 (no large-GPU defaults for it): 2,048 tokens, 256 sequences
    assert (engine.max_num_batched_tokens, engine.max_num_seqs) == (2048, 256)
    assert engine.tensor_parallel_size == 2 and engine.max_model_len == 4096
    assert run_engine(runs.iloc[0]).max_num_seqs == 128  # as written
    table = check_serving_runs(runs, max_duration_s=3.0, progress=False).table
    assert list(table.model) == ["llama-2-7b", "llama-3.1-8b"]
    assert list(table.hardware) == ["h100-sxm", "a100-80gb-sxm"] and list(table.tp) == [1, 2]
    assert table.ttft_mean_s_predicted.gt(0).all() and not table.overloaded_predicted.any()


def test_an_unknown_gpu_is_refused_naming_the_catalog(tmp_path):
    path = _write_runs(tmp_path, {}, {"gpu": "NVIDIA A100 80GB PCIe"})
    with pytest.raises(DataFormatError, match=r"run 1: GPU 'NVIDIA A100 80GB PCIe' names no GPU .*a100-80gb-sxm"):
        check_serving_runs(path, max_duration_s=1.0, progress=False)


def test_an_unknown_model_is_refused_naming_the_closest_ids(tmp_path):
    path = _write_runs(tmp_path, {"model": "meta-llama/Llama-3.2-3B-Instruct"})
    with pytest.raises(DataFormatError, match=r"run 0: model .*Did you mean meta-llama/Llama-3\.1-8B-Instruct"):
        check_serving_runs(path, max_duration_s=1.0, progress=False)


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("H100 SXM", "h100-sxm"),
        ("H100 SXM (repo README/DESIGN.md)", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("4x H100 80G", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("A100 SXM4 80GB", "a100-80gb-sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
        ("A100 80GB", "a100-80gb-sxm"),
        ("1x A100 80G", "a100-80gb-sxm"),
        ("A100 40GB", "a100-40gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("a100-80gb-sxm", "a100-80gb-sxm"),
        ("NVIDIA H200 SXM 141GB", "h200-sxm"),
        ("AMD Instinct MI300X", "mi300x"),
    ],
)
def test_gpu_names_as_people_and_tools_write_them(name, slug):
    assert gpu_from_name(name) == hardware(slug)


@pytest.mark.parametrize("name", ["H100 NVL", "NVIDIA A100 80GB PCIe", "GH200", "L40", "A100 H100", "TPU v5e"])
def test_gpus_without_a_row_are_refused(name):
    with pytest.raises(DataFormatError, match=r"list_hardware\(\).*h100-sxm \(NVIDIA H100 SXM5 80GB\)"):
        gpu_from_name(name)


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("META-LLAMA/LLAMA-2-70B-CHAT-HF", "llama-2-70b"),
        ("/models/codellama/CodeLlama-34b-Instruct-hf", "codellama-34b"),  # a local path
        ("Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),  # owner left out
        ("mistral-community/Mixtral-8x22B-v0.1", "mixtral-8x22b"),  # a re-upload
    ],
)
def test_checkpoints_resolve_through_the_catalog(name, slug):
    assert model_from_checkpoint(name).slug == slug
