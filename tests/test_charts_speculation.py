"""budgetlab.charts.speculation: the tables and charts of notebook 13 reshape the experiments' frames.

Small hand-made frames with the experiments' columns, so each check says what the display must
show: the cost model behind every number, a row that is not reproduced with its reason, the
baseline drawn as the line at 1.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from budgetlab.charts import speculation as sc

from chart_spec import has_tooltip, num_rows, spec_of, titles


def _by_load() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rate_per_s": [1.0, 10.0] * 3,
            "num_speculative_tokens": [0, 0, 1, 1, 4, 4],
            "tpot_mean_s": [0.008, 0.012, 0.005, 0.008, 0.0035, 0.007],
            "speedup": [1.0, 1.0, 1.6, 1.5, 2.3, 1.7],
            "cost": "typical",
        }
    )


def test_speedup_chart_draws_each_k_against_the_line_at_one():
    spec = spec_of(sc.speedup_by_load_chart(_by_load(), title="t"))
    assert "Offered load [requests/s]" in titles(spec)
    assert any("typical cost" in t for t in titles(spec))
    assert num_rows(spec) == 4 + 1  # k = 0 is the rule, not a line
    assert has_tooltip(spec)


def test_prefill_room_table_reads_the_budget_arithmetic():
    frame = pd.DataFrame(
        {
            "num_speculative_tokens": [0, 5],
            "speculative_method": [None, "eagle3"],
            "max_num_batched_tokens": [2048, 2048],
            "num_decoding": [256, 256],
            "decode_tokens": [256, 1536],
            "drafting_slots": [0, 0],
            "prefill_room_tokens": [1792, 512],
            "prefill_room_fraction": [0.875, 0.25],
        }
    )
    table = sc.prefill_room_table(frame)
    assert table.loc[5, "Left for prompts [tokens]"] == "512" and table.loc[5, "Share of the budget"] == "25 %"
    assert table.loc[5, "Tokens the decodes ask, n (1 + k)"] == "1,536"
    with pytest.raises(ValueError, match="prefill_room_by_k"):
        sc.prefill_room_table(frame.drop(columns="drafting_slots"))


def test_capacity_table_names_the_cost_and_the_failures():
    frame = pd.DataFrame(
        {
            "num_speculative_tokens": [0, 2],
            "status": ["ok", "fails at every load"],
            "capacity_per_s": [3.5, math.nan],
            "gain": [1.0, math.nan],
        }
    )
    table = sc.capacity_by_k_table(frame, cost_model="typical")
    column = "Capacity under the SLO [requests/s] (typical cost)"
    assert table.loc[0, column] == "3.5" and table.loc[2, column] == "– (fails at every load)"
    assert table.loc[0, "Over k = 0"] == "1.00×" and table.loc[2, "Over k = 0"] == "–"


def _published() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "key": ["a-k2", "blog"],
            "source": ["vLLM issue #20780", "vLLM blog"],
            "method": ["eagle3", "draft_model"],
            "num_speculative_tokens": [2, None],
            "load": ["batch size 1", "high QPS"],
            "published_speedup_text": ["TPOT 7.07 -> 4.32 ms", "1.4x slowdown"],
            "reference_speedup": [1.637, math.nan],
            "predicted_speedup": [2.07, math.nan],
            "predicted_over_published": [1.264, math.nan],
            "direction_agrees": [True, None],
            "reproduced": [True, False],
            "cost_model": ["typical", ""],
            "not_reproduced_because": ["", "k is only in the blog's figures"],
        }
    )


def test_published_table_shows_the_prediction_or_why_there_is_none():
    table = sc.published_speedups_table(_published())
    assert table.loc["a-k2", "Predicted"] == "2.070 (typical cost)"
    assert table.loc["a-k2", "Same direction"] == "yes" and table.loc["a-k2", "Predicted / published"] == "1.26"
    assert table.loc["blog", "Predicted"] == "not reproduced" and table.loc["blog", "Published speed-up"] == "–"
    assert table.loc["blog", "Why not reproduced"].startswith("k is only")
    assert table.loc["blog", "Setting"] == "draft_model, k not in the text, high QPS"


def test_published_chart_plots_only_reproduced_rows():
    spec = spec_of(sc.published_speedups_chart(_published(), title="t"))
    assert "Published speed-up (measured in vLLM)" in titles(spec)
    assert any("typical cost" in t for t in titles(spec))
    assert num_rows(spec) == 1 + 2 + 1  # one point, the diagonal's two ends, the rules at 1
    with pytest.raises(ValueError, match="predict_published"):
        sc.published_speedups_chart(_published().drop(columns="source"))
