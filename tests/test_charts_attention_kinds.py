"""budgetlab.charts.attention_kinds: the tables and charts of notebook 12 reshape the experiments' frames.

The frames are small hand-made ones with the experiments' columns, so each check can say what
the display must show: a model that is not deployable shows why, a chart's data holds only its
rows and names the model that produced the numbers.
"""

from __future__ import annotations

import math

import altair as alt
import pandas as pd
import pytest

from budgetlab.charts import attention_kinds as kc
from budgetlab.experiments.attention_kinds import FULL_ONLY_MANAGER, HYBRID_MANAGER, MEMORY_MODEL


def _deployments() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": ["qwen3-32b", "gemma-3-27b", "big"],
            "name": ["Qwen3 32B", "Gemma 3 27B", "Big"],
            "family": ["full attention", "sliding window", "full attention"],
            "tp": [2, 1, 0],
            "deployable": [True, True, False],
            "reason": ["", "", "no degree of [1, 2] holds 8 requests of 32,768 tokens"],
            "weight_bytes_per_gpu": [32.8e9, 54.0e9, math.nan],
            "kv_bytes": [39.1e9, 18.2e9, math.nan],
            "kv_groups": ["1 × full", "6 × sliding window 1,024 tokens + 1 × full", math.nan],
            "block_size": [16, 16, math.nan],
            "vllm_kv_cache_tokens": [298_400, 31_744, math.nan],
            "max_concurrency": [9.11, 2.52, math.nan],
            "max_concurrency_full_only": [math.nan, 1.09, math.nan],
            "max_model_len": 32768,
            "memory_model": MEMORY_MODEL,
        }
    )


def test_pools_table_shows_why_a_model_is_not_deployed():
    table = kc.pools_table(_deployments())
    assert table.loc["Big", "GPUs (TP)"].startswith("none: no degree")
    assert table.loc["Big", "Weights per GPU"] == "–"
    assert table.loc["Qwen3 32B", "Max concurrency at 32,768 tokens"] == "9.11"
    assert table.loc["Qwen3 32B", "… with every layer full"] == "–"  # nothing to compare
    assert table.loc["Gemma 3 27B", "… with every layer full"] == "1.09"


def test_tables_refuse_frames_without_the_experiments_columns():
    with pytest.raises(ValueError, match="attention_kinds"):
        kc.pools_table(pd.DataFrame({"name": ["x"]}))
    with pytest.raises(ValueError, match="attention_kinds"):
        kc.layouts_table(pd.DataFrame({"name": ["x"]}))


def test_layouts_table_one_row_per_model():
    frame = pd.DataFrame(
        {
            "name": ["GPT-OSS 20B"],
            "family": ["sliding window"],
            "num_params": [20.9e9],
            "num_active_params": [4.2e9],
            "layout": ["12 full + 12 sliding-window (128 tokens)"],
            "kv_groups": ["1 × sliding window 128 + 1 × full"],
            "kv_bytes_per_token_every_token": [24_576.0],
            "kv_bytes_per_token_windowed": [24_576.0],
            "state_bytes_per_request": [0.0],
        }
    )
    table = kc.layouts_table(frame)
    assert table.loc["GPT-OSS 20B", "Parameters (active)"] == "20.9 B (4.2 B)"
    assert table.loc["GPT-OSS 20B", "KV per token, windowed layers [B]"] == "24,576"


def test_concurrency_chart_draws_both_managers_with_the_memory_model_named():
    frame = pd.DataFrame(
        {
            "name": ["Gemma 3 27B"] * 4,
            "family": ["sliding window"] * 4,
            "max_model_len": [4096, 32768, 4096, 32768],
            "manager": [HYBRID_MANAGER, HYBRID_MANAGER, FULL_ONLY_MANAGER, FULL_ONLY_MANAGER],
            "max_concurrency": [7.7, 2.5, 8.75, 1.09],
            "memory_model": MEMORY_MODEL,
        }
    )
    spec = kc.concurrency_chart(frame, title="t").to_dict()
    assert MEMORY_MODEL in spec["encoding"]["y"]["title"]
    assert spec["encoding"]["strokeDash"]["field"] == "manager"


def _gate_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "name": ["Gemma 3 27B", "Gemma 3 27B", "Qwen3-Next"],
            "manager": [HYBRID_MANAGER, FULL_ONLY_MANAGER, HYBRID_MANAGER],
            "simulated": [True, True, False],
            "cost_model": "typical",
            "gate_slot": [0.0, 0.0, math.nan],
            "gate_budget": [0.1, 0.05, math.nan],
            "gate_kv": [0.8, 0.9, math.nan],
            "gate_none": [0.1, 0.05, math.nan],
        }
    )


def test_gate_share_chart_stacks_the_four_gates_of_simulated_runs_only():
    chart = kc.gate_share_chart(_gate_table())
    data = chart.data
    assert len(data) == 8 and set(data.run) == {"Gemma 3 27B (hybrid manager)", "Gemma 3 27B (every layer full)"}
    assert data.groupby("run").fraction.sum().to_numpy() == pytest.approx([1.0, 1.0])
    assert "typical cost" in chart.to_dict()["encoding"]["x"]["title"]


def test_kv_timeline_chart_one_panel_per_model():
    timeline = pd.DataFrame(
        {
            "name": ["A", "A", "B"],
            "manager": [HYBRID_MANAGER] * 3,
            "time_s": [0.0, 1.0, 0.0],
            "num_running": [1, 2, 1],
            "kv_used_fraction": [0.1, 0.5, 0.2],
            "cost_model": "typical",
        }
    )
    chart = kc.kv_timeline_chart(timeline)
    assert isinstance(chart, alt.FacetChart) and chart.to_dict()["facet"]["row"]["field"] == "name"


def test_knobs_table_shows_the_reason_when_untuned():
    frame = pd.DataFrame(
        {
            "name": ["A", "B"],
            "tp": [1, 2],
            "tuned": [True, False],
            "reason": ["", "the simulations are too short"],
            "max_num_batched_tokens": [2048, math.nan],
            "max_num_seqs": [128, math.nan],
            "capacity_per_s": [14.7, math.nan],
            "binding_gate": ["token budget", math.nan],
            "first_max_num_seqs": [128, math.nan],
            "requests_pool_holds": [241.5, 10.4],
            "cost_model": "typical",
        }
    )
    table = kc.knobs_table(frame)
    assert table.loc["A", "max_num_batched_tokens"] == "2,048" and table.loc["A", "Capacity [requests/s]"] == "14.7"
    assert table.loc["B", "max_num_batched_tokens"] == "– (the simulations are too short)"
    assert table.loc["B", "Mean requests the pool holds"] == "10.4"


def _log_rows() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "row_id": [1, 2, 3],
            "checkpoint": ["a", "b", "c"],
            "model": ["qwen3-32b", "gemma-3-27b", ""],
            "family": ["full attention", "sliding window", ""],
            "status": ["compared", "compared", "skipped"],
            "tp": [1.0, 1.0, math.nan],
            "kv_tokens_logged": [1000.0, 2000.0, math.nan],
            "kv_tokens_predicted": [1010.0, 1900.0, math.nan],
            "kv_tokens_error_fraction": [0.01, -0.05, math.nan],
            "max_concurrency_error_fraction": [0.01, -0.05, math.nan],
            "within": [True, False, math.nan],
            "reason": ["", "", "multimodal"],
            "memory_model": MEMORY_MODEL,
        }
    )


def test_kv_logs_chart_draws_compared_rows_with_the_diagonal():
    chart = kc.kv_logs_chart(_log_rows())
    points = chart.layer[1]
    assert len(points.data) == 2 and MEMORY_MODEL in points.to_dict()["encoding"]["y"]["title"]


def test_kv_logs_table_marks_skipped_rows_and_errors():
    table = kc.kv_logs_table(_log_rows())
    assert table.loc[1, "error"] == "1.0 %" and table.loc[2, "Within tolerance"] == "no"
    assert table.loc[3, "Within tolerance"] == "skipped" and table.loc[3, "Why skipped"] == "multimodal"
    assert table.loc[3, "KV tokens logged"] == "–"


def test_empty_tables_draw_and_show_nothing():
    gates = _gate_table().iloc[0:0]
    assert kc.gate_share_chart(gates).data.empty
    knobs = pd.DataFrame(columns=["name", "tp", "tuned", "reason", "requests_pool_holds", "cost_model"])
    assert kc.knobs_table(knobs).empty
