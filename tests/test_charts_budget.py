"""Charts of the budget filled while one prompt arrives (notebooks 02-04): steps, sweeps, gaps."""

from __future__ import annotations

import json

import altair as alt
import numpy as np
import pandas as pd
import pytest

import budgetlab as bl
from budgetlab import charts

from chart_spec import BUDGETS, SEED, has_tooltip, num_rows, spec_of, titles, walk


@pytest.fixture(scope="module")
def calibrated(h100, llama8b):
    return bl.CalibratedCost.typical(h100, llama8b)


def test_budget_grid():
    grid = charts.budget_grid(num_decodes=100, min_budget_tokens=256, max_budget_tokens=8192, include=[1000, 9000])
    assert grid[0] == 256 and grid[-1] == 8192 and 1000 in grid and 9000 not in grid
    assert charts.budget_grid(num_decodes=100, max_budget_tokens=200)[0] == 101
    with pytest.raises(ValueError, match="at least 101"):
        charts.budget_grid(num_decodes=100, max_budget_tokens=100)
    # every count is checked by name (a float budget was floored, a NaN crashed in linspace)
    for changes, name in (
        ({"max_budget_tokens": float("nan")}, "max_budget_tokens"),
        ({"num_decodes": 2.5}, "num_decodes"),
        ({"min_budget_tokens": "256"}, "min_budget_tokens"),
        ({"num_points": 0}, "num_points"),
        ({"include": [1000, True]}, r"include\[1\]"),
    ):
        with pytest.raises(bl.ParameterError, match=rf"^{name} must be an int >= "):
            charts.budget_grid(**{"num_decodes": 100, "max_budget_tokens": 8192, **changes})


# --- filling the budget (02, 04) ----------------------------------------------------------------------


def _fill(cost, budget, **kwargs):
    return charts.step_fill_frame(bl.prompt_timeline(cost, budget_tokens=budget, **SEED), **kwargs)


def test_step_fill_frame_reproduces_the_seed(ideal):
    frame = _fill(ideal, 2048)
    prompt = frame[frame.part == "prompt"]
    assert prompt.tokens.tolist() == [1948, 1948, 1104] == bl.chunk_schedule(budget_tokens=2048, **SEED)
    assert frame[frame.part == "decode"].tokens.tolist() == [100, 100, 100]
    assert frame[frame.part == "unused"].tokens.tolist() == [0, 0, 844]
    ends = frame.drop_duplicates("step").end_s
    assert ends.iloc[-1] == bl.ttft_s(ideal, budget_tokens=2048, **SEED)
    assert frame.end_ms.iloc[-1] == pytest.approx(ends.iloc[-1] * 1e3)
    assert frame.attrs["num_steps"] == 3 and set(frame.scenario) == {"budget 2,048"}
    assert set(frame.max_num_batched_tokens) == {2048.0}


def test_step_fill_frame_without_budget_and_truncated(ideal):
    whole = _fill(ideal, None)
    assert whole[whole.part == "prompt"].tokens.tolist() == [5000]
    assert whole.step_time_s.iloc[0] == pytest.approx(0.08278, abs=1e-5)
    assert set(whole.scenario) == {"no budget"} and whole.max_num_batched_tokens.isna().all()
    short = _fill(ideal, 256, max_steps=5)
    assert short.step.max() == 5 and short.attrs["num_steps"] == 33


def test_step_fill_and_timeline_charts(ideal):
    frame = _fill(ideal, 2048)
    spec = spec_of(charts.step_fill_chart(frame))
    assert {"Step", "Tokens in the step [tokens]"} <= titles(spec)
    assert "budget 2,048" in json.dumps(spec, ensure_ascii=False) and has_tooltip(spec)
    both = pd.concat([frame, _fill(ideal, None)], ignore_index=True)
    spec = spec_of(charts.step_timeline_chart(both))
    assert "Time since the prompt arrived [ms]" in titles(spec) and has_tooltip(spec)
    truncated = _fill(ideal, 256, max_steps=5)
    assert "First 5 of 33 steps" in json.dumps(spec_of(charts.step_fill_chart(truncated)), ensure_ascii=False)


def test_decoder_interaction():
    frame = charts.decoder_interaction_frame(budget_tokens=2048, decoder_counts=[60, 400])
    left = frame[frame.part == "prompt"].set_index("num_decodes").tokens
    assert left.to_dict() == {60: 1988, 400: 1648}
    assert set(frame.max_num_batched_tokens) == {2048}
    spec = spec_of(charts.decoder_interaction_chart(frame))
    assert "Tokens of one step's budget [tokens]" in titles(spec) and has_tooltip(spec)


def test_tradeoff_tables(ideal):
    tradeoff = bl.budget_tradeoff(ideal, small_budget_tokens=512, big_budget_tokens=8192, **SEED)
    table = charts.tradeoff_table(tradeoff)
    assert list(table.index) == ["Each step", "Decoding users", "Long prompts"]
    assert list(table.columns) == ["Small budget (512 tokens)", "Big budget (8,192 tokens)"]
    assert "8.31 ms" in table.iloc[0, 0] and "82.8 ms" in table.iloc[0, 1]
    assert "Spread over 13 steps" in table.iloc[2, 0] and "Finish in 1 step:" in table.iloc[2, 1]
    numbers = charts.tradeoff_numbers_table(tradeoff)
    assert numbers.loc["small", "Steps to ingest the prompt"] == 13
    assert numbers.loc["big", "TTFT [ms]"] == pytest.approx(82.8)


def test_table_markdown_keeps_long_cells_whole(ideal):
    tradeoff = bl.budget_tradeoff(ideal, small_budget_tokens=512, big_budget_tokens=8192, **SEED)
    text = charts.table_markdown(charts.tradeoff_table(tradeoff))
    lines = text.splitlines()
    assert lines[0] == "|  | Small budget (512 tokens) | Big budget (8,192 tokens) |"
    assert lines[1] == "|---|---|---|"
    assert lines[2].startswith("| **Each step** | Short: 8.31 ms even with a prompt chunk")
    assert len(lines) == 5
    assert charts.table_markdown(pd.DataFrame({"a": ["x|y"]}), index=False) == "| a |\n|---|\n| x\\|y |"


# --- sweeps (03, 04) -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sweep(ideal):
    grid = charts.budget_grid(num_decodes=100, min_budget_tokens=256, max_budget_tokens=8192, include=BUDGETS)
    return charts.budget_sweep_frame(bl.budget_sweep({"ideal": ideal}, grid, **SEED), listed=BUDGETS)


def test_budget_sweep_frame(sweep, ideal):
    listed = sweep[sweep.listed].set_index("max_num_batched_tokens")
    assert listed.index.tolist() == BUDGETS
    assert listed.loc[2048, "step_time_s"] == pytest.approx(0.03324, abs=1e-5)
    assert listed.loc[2048, "ttft_s"] == pytest.approx(bl.ttft_s(ideal, budget_tokens=2048, **SEED))
    assert listed.loc[256, "ttft_ms"] == pytest.approx(listed.loc[256, "ttft_s"] * 1e3)
    assert listed.loc[8192, "longest_gap_ms"] == pytest.approx(82.78, abs=0.01)
    assert len(sweep) < charts.MAX_ROWS and set(sweep.cost_model) == {"ideal"}


def test_budget_sweep_table(sweep):
    table = charts.budget_sweep_table(sweep)
    assert table["Budget [tokens]"].tolist() == BUDGETS
    assert table["Steps to first token"].tolist() == [33, 13, 6, 3, 2, 1]
    assert table["Prompt chunk [tokens]"].tolist()[3] == 1948
    assert "Cost model" not in table
    with pytest.raises(ValueError, match="more than a table for reading"):
        charts.budget_sweep_table(sweep, listed_only=False)


def test_ttft_and_step_time_chart_has_a_slider(sweep, ideal):
    chart = charts.ttft_and_step_time_chart(
        sweep,
        initial_budget_tokens=2048,
        ttft_without_budget_s=bl.ttft_s(ideal, budget_tokens=None, **SEED),
        target_step_s=0.04,
        budget_for_target=2464,
    )
    assert isinstance(chart, alt.HConcatChart)
    spec = spec_of(chart)
    sliders = [p for p in spec.get("params", []) if p.get("bind", {}).get("input") == "range"]
    assert len(sliders) == 1
    slider = sliders[0]
    assert slider["name"] == "budget" and slider["value"] == 2048
    # issue 20: every position of the slider is a budget the sweep computed, so the budget the
    # slider shows is the one the panels read out (a step of 1 over the grid showed 600, read 615)
    low, high, step = slider["bind"]["min"], slider["bind"]["max"], slider["bind"]["step"]
    assert step > 1 and 256 <= low < 256 + step and 8192 - step < high <= 8192
    assert set(range(low, high + 1, step)) <= set(sweep.max_num_batched_tokens.astype(int))
    text = json.dumps(spec, ensure_ascii=False)
    assert "abs(datum.max_num_batched_tokens - budget)" in text  # both panels follow the slider
    assert "40 ms target" in text and "2,464 tokens" in text and "no budget" in text
    assert {"Time to first token [ms]", "Step time of a full budget [ms]"} <= titles(spec)
    assert "Token budget, max_num_batched_tokens [tokens]" in titles(spec)
    assert has_tooltip(spec) and num_rows(spec) < charts.MAX_ROWS


def test_budget_for_target_of_each_cost_model(sweep):
    """issue 20: 03 marks the calibrated budget for the target beside the idealized one, each
    labelled with its cost model, the labels one under the other."""
    spec = spec_of(
        charts.ttft_and_step_time_chart(
            sweep,
            initial_budget_tokens=2048,
            target_step_s=0.04,
            budget_for_target={"idealized": 2464, "calibrated": 1548},
        )
    )
    rows = [row for values in spec["datasets"].values() for row in values if "label_y_px" in row]
    assert [(r["label"], r["max_num_batched_tokens"]) for r in rows] == [
        ("2,464 tokens (idealized)", 2464),
        ("1,548 tokens (calibrated)", 1548),
    ]
    assert len({r["label_y_px"] for r in rows}) == 2


def test_budget_grid_steps_evenly_for_a_slider():
    grid = charts.budget_grid(num_decodes=100, max_budget_tokens=8192, num_points=400)
    inner = grid[1:-1]
    assert len(set(np.diff(inner))) == 1 and inner[0] % np.diff(inner)[0] == 0  # multiples of one step
    assert 600 in grid and 300 <= len(grid) <= 420


def test_slider_starts_inside_the_sweep(sweep):
    spec = spec_of(charts.ttft_and_step_time_chart(sweep, initial_budget_tokens=100_000))
    slider = spec["params"][0]
    assert slider["value"] == slider["bind"]["max"] and 8192 - slider["bind"]["step"] < slider["value"] <= 8192


def test_sweep_chart_with_two_cost_models(sweep):
    both = pd.concat([sweep, sweep.assign(cost_model="calibrated", ttft_ms=sweep.ttft_ms * 1.5)], ignore_index=True)
    spec = spec_of(charts.budget_sweep_chart(both, metric="ttft"))
    assert any(
        isinstance(node.get("encoding"), dict) and node["encoding"].get("color", {}).get("field") == "cost_model"
        for node in walk(spec)
    )
    with pytest.raises(ValueError, match="metric must be one of"):
        charts.budget_sweep_chart(sweep, metric="tpot")


def test_sweep_longest_gap_chart(sweep):
    spec = spec_of(
        charts.budget_sweep_chart(
            sweep, metric="longest_gap", references=[("no budget", 0.0828)], budget_marks=[("2,464 tokens", 2464)]
        )
    )
    assert "Longest gap between tokens [ms]" in titles(spec)


def test_two_cost_models_in_one_sweep_table(ideal, calibrated):
    costs = {"idealized": ideal, "calibrated": calibrated}
    swept = bl.budget_sweep(costs, [512, 2048], decode_context_tokens=1000, **SEED)
    table = charts.budget_sweep_table(charts.budget_sweep_frame(swept, listed=[512, 2048]))
    assert table["Cost model"].tolist() == ["idealized", "idealized", "calibrated", "calibrated"]


# --- the longest gap with and without a budget (04) --------------------------------------------------


def test_longest_gap_comparison(ideal):
    frame = charts.longest_gap_comparison_frame(ideal, budget_tokens=2048, **SEED)
    assert frame.scenario.tolist() == ["budget 2,048", "no budget"]
    assert frame.label.tolist() == ["33.2 ms", "82.8 ms"]
    assert frame.longest_gap_s.tolist() == [bl.longest_gap_s(ideal, budget_tokens=b, **SEED) for b in (2048, None)]
    assert frame.max_num_batched_tokens.iloc[0] == 2048 and np.isnan(frame.max_num_batched_tokens.iloc[1])


def test_longest_gap_models_chart(ideal, calibrated):
    frame = pd.concat(
        [
            charts.longest_gap_comparison_frame(ideal, budget_tokens=2048, cost_model="idealized", **SEED),
            charts.longest_gap_comparison_frame(
                calibrated, budget_tokens=2048, cost_model="calibrated", decode_context_tokens=1000, **SEED
            ),
        ]
    )
    gaps = frame.set_index(["cost_model", "scenario"]).longest_gap_s
    assert gaps["calibrated", "budget 2,048"] > gaps["idealized", "budget 2,048"]
    spec = spec_of(charts.longest_gap_models_chart(frame, target_step_s=0.04))
    assert any("xOffset" in node.get("encoding", {}) for node in walk(spec) if isinstance(node.get("encoding"), dict))
    assert "40 ms target" in json.dumps(spec, ensure_ascii=False)


# --- what a bigger budget still buys (03) ----------------------------------------------------------------


def test_budget_payoff_frame_and_table(ideal, calibrated):
    scenario = dict(SEED, decode_context_tokens=1000)
    payoffs = {
        "idealized": bl.budget_payoff(ideal, budget_tokens=1024, **scenario),
        "calibrated": bl.budget_payoff(calibrated, budget_tokens=1024, **scenario),
    }
    frame = charts.budget_payoff_frame(payoffs).set_index("cost_model")
    assert frame.max_num_batched_tokens.tolist() == [1024, 1024]  # the budget column every frame has
    assert frame.bigger_max_num_batched_tokens.tolist() == [4096, 4096]
    assert "budget_tokens" not in frame and "bigger_budget_tokens" not in frame
    assert frame.loc["idealized", "saved_s"] == pytest.approx(payoffs["idealized"].saved_s)
    table = charts.budget_payoff_table(frame.reset_index())
    assert "TTFT at 4,096 tokens [ms]" in table and table.index.name == "Cost model"
    assert table.loc["idealized", "Saved [%]"] == pytest.approx(round(payoffs["idealized"].saved_fraction * 100, 1))
