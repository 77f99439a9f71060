"""Chart builders: tidy frames carry the seeds' numbers; charts have units, tooltips, a slider."""

from __future__ import annotations

import json

import altair as alt
import numpy as np
import pandas as pd
import pytest

from budgetlab import budget_tradeoff, chunk_schedule, ttft_s
from budgetlab import charts
from budgetlab.catalog import hardware, list_hardware

SEED = {"num_decodes": 100, "prompt_tokens": 5000}
BUDGETS = [256, 512, 1024, 2048, 4096, 8192]


def _spec(chart) -> dict:
    return chart.to_dict()


def _walk(node):
    """Every dict in a Vega-Lite spec."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _titles(spec: dict) -> set[str]:
    titles = set()
    for node in _walk(spec):
        for channel in ("x", "y"):
            enc = node.get("encoding", {}).get(channel) if isinstance(node.get("encoding"), dict) else None
            if isinstance(enc, dict) and isinstance(enc.get("title"), str):
                titles.add(enc["title"])
    return titles


def _num_rows(spec: dict) -> int:
    return sum(len(values) for values in spec.get("datasets", {}).values())


def _has_tooltip(spec: dict) -> bool:
    return any("tooltip" in node.get("encoding", {}) for node in _walk(spec) if isinstance(node.get("encoding"), dict))


# --- formatting ------------------------------------------------------------------------------------


def test_formatting_helpers():
    assert charts.fmt_ms(0.0332433) == "33.2 ms"
    assert charts.fmt_ms(0.004794, 2) == "4.79 ms"
    assert charts.fmt_us(1.6232e-5) == "16.2 µs"
    assert charts.fmt_int(1948.4) == "1,948"
    assert charts.fmt_tokens(2048) == "2,048 tokens"
    assert charts.fmt_gb(16.06e9) == "16.1 GB"
    assert charts.fmt_gflop(16.06e9) == "16.1 GFLOP"
    assert charts.fmt_bandwidth(3.35e12) == "3.35 TB/s"
    assert charts.fmt_flops_rate(989.4e12) == "989.4 TFLOP/s"
    assert charts.fmt_budget(2048) == "budget 2,048" and charts.fmt_budget(None) == "no budget"
    assert charts.fmt_count(1, "step") == "1 step" and charts.fmt_count(3, "step") == "3 steps"


@pytest.mark.parametrize(("value", "text"), [(2464, "2,500"), (295.34, "300"), (1024, "1,000"), (4.79, "4.8"), (0, "0")])
def test_fmt_approx(value, text):
    assert charts.fmt_approx(value) == text


# --- grids -----------------------------------------------------------------------------------------


def test_token_grid_includes_the_knee_exactly(ideal):
    grid = charts.token_grid(10_000, include=[295.34, 512])
    assert grid[0] == 1 and grid[-1] == 10_000
    assert {295, 296, 512} <= set(grid.tolist())
    assert np.all(np.diff(grid) > 0)
    with pytest.raises(ValueError):
        charts.token_grid(1)


def test_budget_grid():
    grid = charts.budget_grid(num_decodes=100, min_budget_tokens=256, max_budget_tokens=8192, include=[1000, 9000])
    assert grid[0] == 256 and grid[-1] == 8192 and 1000 in grid and 9000 not in grid
    assert charts.budget_grid(num_decodes=100, max_budget_tokens=200)[0] == 101
    with pytest.raises(ValueError, match="at least 101"):
        charts.budget_grid(num_decodes=100, max_budget_tokens=100)


# --- step cost (01) ----------------------------------------------------------------------------------


def test_step_cost_frame_and_marks(ideal):
    frame = charts.step_cost_frame(ideal, [1, 100, 295, 296, 2048])
    assert list(frame.step_time_s[:3]) == pytest.approx([ideal.weight_read_s] * 3)
    assert frame.step_time_ms.iloc[-1] == pytest.approx(33.24, abs=0.01)
    assert list(frame.bound) == ["weight read (memory)"] * 3 + ["math (compute)"] * 2
    assert set(frame.cost_model) == {"ideal"}
    assert set(frame.hardware) == {"NVIDIA H100 SXM5 80GB"} and set(frame.model) == {"Llama 3.1 8B"}
    marks = charts.marks_frame(ideal, [512, 2048, 8192])
    assert list(marks.label) == ["512 → 8.3 ms", "2,048 → 33.2 ms", "8,192 → 133.0 ms"]


def test_step_cost_chart(ideal):
    frame = charts.step_cost_frame(ideal, charts.token_grid(10_000, include=[295.3]))
    marks = charts.marks_frame(ideal, [512, 2048, 8192, 20_000])  # 20,000 is off the chart: dropped
    spec = _spec(charts.step_cost_chart(frame, marks=marks, knee_tokens=295.3, title="t"))
    assert {"Tokens in the step [tokens]", "Step time [ms]"} <= _titles(spec)
    assert _has_tooltip(spec)
    text = json.dumps(spec, ensure_ascii=False)
    assert "knee ≈ 295 tokens" in text and "8,192 → 133.0 ms" in text and "20,000" not in text
    assert _num_rows(spec) < charts.MAX_ROWS


def test_catalog_curves_with_legend_selection(llama8b):
    specs = [hardware(slug) for slug in list_hardware()]
    frame = charts.catalog_step_cost_frame(llama8b, specs, charts.token_grid(10_000, num_points=100))
    assert frame.hardware.nunique() == len(specs)
    spec = _spec(charts.step_cost_chart(frame, color="hardware"))
    assert any(p.get("bind") == "legend" for node in _walk(spec) for p in node.get("params", []) if isinstance(p, dict))


def test_hardware_comparison(llama8b):
    specs = [hardware(slug) for slug in list_hardware()]
    frame = charts.hardware_comparison_frame(llama8b, specs, token_marks=[512, 2048])
    h100 = frame.set_index("hardware_slug").loc["h100-sxm"]
    assert h100.knee_tokens == pytest.approx(295.3, abs=0.1)
    assert h100.weight_read_s == pytest.approx(4.79e-3, abs=1e-5)
    assert h100.step_2048_s == pytest.approx(0.03324, abs=1e-5)
    table = charts.hardware_comparison_table(frame, highlight="h100-sxm")
    assert "Weight read [ms]" in table and "Knee [tokens]" in table and "Step at 2,048 tokens [ms]" in table
    row = table[table.Hardware.str.endswith("◀")]
    assert len(row) == 1 and row["Knee [tokens]"].iloc[0] == 295


# --- filling the budget (02, 04) ----------------------------------------------------------------------


def test_step_fill_frame_reproduces_the_seed(ideal):
    frame = charts.step_fill_frame(ideal, budget_tokens=2048, **SEED)
    prompt = frame[frame.part == "prompt"]
    assert prompt.tokens.tolist() == [1948, 1948, 1104] == chunk_schedule(budget_tokens=2048, **SEED)
    assert frame[frame.part == "decode"].tokens.tolist() == [100, 100, 100]
    assert frame[frame.part == "unused"].tokens.tolist() == [0, 0, 844]
    ends = frame.drop_duplicates("step").end_s
    assert ends.iloc[-1] == pytest.approx(ttft_s(ideal, budget_tokens=2048, **SEED))
    assert frame.attrs["num_steps"] == 3 and set(frame.scenario) == {"budget 2,048"}


def test_step_fill_frame_without_budget_and_truncated(ideal):
    whole = charts.step_fill_frame(ideal, budget_tokens=None, **SEED)
    assert whole[whole.part == "prompt"].tokens.tolist() == [5000]
    assert whole.step_time_s.iloc[0] == pytest.approx(0.08278, abs=1e-5)
    assert set(whole.scenario) == {"no budget"} and whole.budget_tokens.isna().all()
    short = charts.step_fill_frame(ideal, budget_tokens=256, max_steps=5, **SEED)
    assert short.step.max() == 5 and short.attrs["num_steps"] == 33


def test_step_fill_and_timeline_charts(ideal):
    frame = charts.step_fill_frame(ideal, budget_tokens=2048, **SEED)
    spec = _spec(charts.step_fill_chart(frame))
    assert {"Step", "Tokens in the step [tokens]"} <= _titles(spec)
    assert "budget 2,048" in json.dumps(spec, ensure_ascii=False) and _has_tooltip(spec)
    both = pd.concat([frame, charts.step_fill_frame(ideal, budget_tokens=None, **SEED)], ignore_index=True)
    spec = _spec(charts.step_timeline_chart(both))
    assert "Time since the prompt arrived [ms]" in _titles(spec) and _has_tooltip(spec)
    truncated = charts.step_fill_frame(ideal, budget_tokens=256, max_steps=5, **SEED)
    assert "First 5 of 33 steps" in json.dumps(_spec(charts.step_fill_chart(truncated)), ensure_ascii=False)


def test_decoder_interaction():
    frame = charts.decoder_interaction_frame(budget_tokens=2048, decoder_counts=[60, 400])
    left = frame[frame.part == "prompt"].set_index("num_decodes").tokens
    assert left.to_dict() == {60: 1988, 400: 1648}
    spec = _spec(charts.decoder_interaction_chart(frame))
    assert "Tokens of one step's budget [tokens]" in _titles(spec) and _has_tooltip(spec)


def test_tradeoff_tables(ideal):
    tradeoff = budget_tradeoff(ideal, small_budget_tokens=512, big_budget_tokens=8192, **SEED)
    table = charts.tradeoff_table(tradeoff)
    assert list(table.index) == ["Each step", "Decoding users", "Long prompts"]
    assert list(table.columns) == ["Small budget (512 tokens)", "Big budget (8,192 tokens)"]
    assert "8.3 ms" in table.iloc[0, 0] and "82.8 ms" in table.iloc[0, 1]
    assert "Spread over 13 steps" in table.iloc[2, 0] and "Finish in 1 step:" in table.iloc[2, 1]
    numbers = charts.tradeoff_numbers_table(tradeoff)
    assert numbers.loc["small", "Steps to ingest the prompt"] == 13
    assert numbers.loc["big", "TTFT [ms]"] == pytest.approx(82.8)


# --- sweeps (03, 04) -----------------------------------------------------------------------------------


@pytest.fixture()
def sweep(ideal):
    grid = charts.budget_grid(num_decodes=100, min_budget_tokens=256, max_budget_tokens=8192, include=BUDGETS)
    return charts.budget_sweep_frame(ideal, grid, listed=BUDGETS, **SEED)


def test_budget_sweep_frame(sweep, ideal):
    listed = sweep[sweep.listed].set_index("budget_tokens")
    assert listed.index.tolist() == BUDGETS
    assert listed.loc[2048, "step_time_s"] == pytest.approx(0.03324, abs=1e-5)
    assert listed.loc[2048, "longest_gap_s"] == pytest.approx(0.03324, abs=1e-5)
    assert listed.loc[8192, "longest_gap_s"] == pytest.approx(0.08278, abs=1e-5)
    assert listed.loc[2048, "ttft_s"] == pytest.approx(ttft_s(ideal, budget_tokens=2048, **SEED))
    assert listed.loc[256, "ttft_ms"] == pytest.approx(listed.loc[256, "ttft_s"] * 1e3)
    assert len(sweep) < charts.MAX_ROWS and set(sweep.cost_model) == {"ideal"}


def test_budget_sweep_table(sweep):
    table = charts.budget_sweep_table(sweep, **SEED)
    assert table["Budget [tokens]"].tolist() == BUDGETS
    assert table["Steps to first token"].tolist() == [33, 13, 6, 3, 2, 1]
    assert table["Prompt chunk [tokens]"].tolist()[3] == 1948


def test_flattening_budget(sweep, ideal):
    without = ttft_s(ideal, budget_tokens=None, **SEED)
    listed = sweep[sweep.listed]
    assert charts.flattening_budget(listed, column="ttft_s", reference_s=without, within_fraction=0.1) == 1024
    assert charts.flattening_budget(listed, column="ttft_s", reference_s=without, within_fraction=0.01) == 8192
    assert charts.flattening_budget(listed, column="ttft_s", reference_s=without / 2, within_fraction=0.1) is None
    gap_without = listed.longest_gap_s.max()
    saturates = charts.flattening_budget(sweep, column="longest_gap_s", reference_s=gap_without, within_fraction=0)
    assert 5100 <= saturates < 5200  # the whole prompt plus the decodes fit in one step


def test_ttft_and_step_time_chart_has_a_slider(sweep, ideal):
    chart = charts.ttft_and_step_time_chart(
        sweep,
        initial_budget_tokens=2048,
        ttft_without_budget_s=ttft_s(ideal, budget_tokens=None, **SEED),
        target_step_s=0.04,
        budget_for_target=2464,
    )
    assert isinstance(chart, alt.HConcatChart)
    spec = _spec(chart)
    sliders = [p for p in spec.get("params", []) if p.get("bind", {}).get("input") == "range"]
    assert len(sliders) == 1
    slider = sliders[0]
    assert slider["name"] == "budget" and slider["value"] == 2048
    assert slider["bind"]["min"] == 256 and slider["bind"]["max"] == 8192
    text = json.dumps(spec, ensure_ascii=False)
    assert "abs(datum.budget_tokens - budget)" in text  # both panels follow the slider
    assert "40 ms target" in text and "2,464 tokens" in text and "no budget" in text
    assert {"Time to first token [ms]", "Step time of a full budget [ms]"} <= _titles(spec)
    assert "Token budget, max_num_batched_tokens [tokens]" in _titles(spec)
    assert _has_tooltip(spec) and _num_rows(spec) < charts.MAX_ROWS


def test_slider_starts_inside_the_sweep(sweep):
    spec = _spec(charts.ttft_and_step_time_chart(sweep, initial_budget_tokens=100_000))
    assert spec["params"][0]["value"] == 8192


def test_sweep_chart_with_two_cost_models(sweep):
    both = pd.concat([sweep, sweep.assign(cost_model="calibrated", ttft_ms=sweep.ttft_ms * 1.5)], ignore_index=True)
    spec = _spec(charts.budget_sweep_chart(both, metric="ttft"))
    assert any(
        isinstance(node.get("encoding"), dict) and node["encoding"].get("color", {}).get("field") == "cost_model"
        for node in _walk(spec)
    )
    with pytest.raises(ValueError, match="metric must be one of"):
        charts.budget_sweep_chart(sweep, metric="tpot")


def test_longest_gap_comparison(ideal):
    frame = charts.longest_gap_comparison_frame(ideal, budget_tokens=2048, **SEED)
    assert frame.scenario.tolist() == ["budget 2,048", "no budget"]
    assert frame.label.tolist() == ["33.2 ms", "82.8 ms"]
    spec = _spec(charts.longest_gap_bars_chart(frame, target_step_s=0.04))
    assert "Longest gap between tokens [ms]" in _titles(spec) and "40 ms target" in json.dumps(spec, ensure_ascii=False)


def test_sweep_longest_gap_chart(sweep):
    spec = _spec(
        charts.budget_sweep_chart(
            sweep, metric="longest_gap", references=[("no budget", 0.0828)], budget_marks=[("2,464 tokens", 2464)]
        )
    )
    assert "Longest gap between tokens [ms]" in _titles(spec)


def test_frames_refuse_too_many_rows(ideal):
    with pytest.raises(ValueError, match="more than a report should inline"):
        charts.step_cost_frame(ideal, np.arange(1, charts.MAX_ROWS + 2))


def test_table_markdown_keeps_long_cells_whole(ideal):
    tradeoff = budget_tradeoff(ideal, small_budget_tokens=512, big_budget_tokens=8192, **SEED)
    text = charts.table_markdown(charts.tradeoff_table(tradeoff))
    lines = text.splitlines()
    assert lines[0] == "|  | Small budget (512 tokens) | Big budget (8,192 tokens) |"
    assert lines[1] == "|---|---|---|"
    assert lines[2].startswith("| **Each step** | Short: 8.3 ms even with a prompt chunk")
    assert len(lines) == 5
    assert charts.table_markdown(pd.DataFrame({"a": ["x|y"]}), index=False) == "| a |\n|---|\n| x\\|y |"
