"""The shipped preset against published vLLM serving runs on H100 (issue 12's check).

Every run of ``../shared/data/real/vllm_serving_h100_inference_sim.csv``, simulated with
``CalibratedCost.typical`` and ``ServingOverhead.vllm()`` and vLLM's defaults, no per-run
fitting: time per output token and end-to-end mean within 15 %, TTFT mean within 25 % on the
steady runs, and the overloaded runs predicted overloaded. The table is printed (``pytest -s``).
Skipped in a user's clone.
"""

from __future__ import annotations

import pandas as pd
import pytest

from budgetlab.experiments.serving_runs import (
    BOUNDS,
    check_serving_runs,
    matches_typical,
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
