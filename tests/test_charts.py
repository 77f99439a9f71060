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


# --- calibrated and variant step costs (01, 03, 04) ----------------------------------------------------


@pytest.fixture(scope="module")
def calibrated(h100, llama8b):
    from budgetlab import CalibratedCost

    return CalibratedCost.typical(h100, llama8b)


def test_fmt_tokens_singular_and_fmt_duration():
    assert charts.fmt_tokens(1) == "1 token" and charts.fmt_tokens(2) == "2 tokens"
    assert charts.fmt_duration(0.036) == "36.0 ms" and charts.fmt_duration(15.06) == "15.1 s"


def test_log_token_grid():
    grid = charts.log_token_grid(4096, num_points=20, include=[300, 5000])
    assert grid[0] == 1 and grid[-1] == 4096 and 300 in grid and 5000 not in grid
    assert np.all(np.diff(grid) > 0)


def test_step_cost_chart_inlines_only_the_drawn_columns(ideal):
    frame = charts.step_cost_frame(ideal, charts.token_grid(2000, num_points=50))
    spec = _spec(charts.step_cost_chart(frame))
    rows = next(iter(spec["datasets"].values()))
    assert set(rows[0]) == {"tokens", "step_time_ms", "time_per_token_us", "bound", "cost_model"}


def test_cost_variants_frame(ideal, calibrated):
    frame = charts.cost_variants_frame({"idealized": ideal, "calibrated": calibrated}, [1, 512, 2048])
    assert frame.cost_model.tolist() == ["idealized"] * 3 + ["calibrated"] * 3
    assert "bound" not in frame  # only the idealized model has a sharp knee
    ideal_s, real_s = frame.step_time_s.to_numpy().reshape(2, 3)
    assert np.all(real_s > ideal_s)
    spec = _spec(charts.step_cost_chart(frame))
    assert any(p.get("bind") == "legend" for node in _walk(spec) for p in node.get("params", []) if isinstance(p, dict))


def test_tile_cliffs_frame(calibrated):
    tiled = calibrated.with_(tile_tokens=128)
    cliffs = charts.tile_cliffs_frame(tiled, max_tokens=1024)
    linear_only = charts.tile_cliffs_frame(tiled.with_(attention=False), max_tokens=1024)
    assert cliffs.tokens.tolist() == [128, 256, 384, 512, 640, 768, 896]
    assert np.all(cliffs.jump_s > 0) and np.all(cliffs.past_tokens == cliffs.tokens + 1)
    # in the linear layers, 129 tokens cost what 256 do (attention still counts the real tokens)
    assert linear_only.past_step_time_s.iloc[0] == pytest.approx(float(tiled.with_(attention=False).step_time_s(256)))
    with pytest.raises(ValueError, match="tile_tokens"):
        charts.tile_cliffs_frame(calibrated, max_tokens=1024)


def test_tensor_parallel_frame_and_table(h100):
    from budgetlab.catalog import model

    frame = charts.tensor_parallel_frame(h100, model("llama-3.1-70b"), [1, 2, 4, 8], token_marks=[512, 2048])
    assert frame.weights_fit.tolist() == [False, True, True, True]  # 141 GB of weights, 80 GB GPUs
    assert frame.weight_read_s.iloc[0] == pytest.approx(4 * frame.weight_read_s.iloc[2])
    assert frame.all_reduce_2048_s.iloc[0] == 0 and np.all(np.diff(frame.all_reduce_2048_s) > 0)
    assert frame.speedup_2048.iloc[0] == 1 and np.all(np.diff(frame.speedup_2048) > 0)
    assert frame.speedup_2048.iloc[-1] < 8  # the all-reduces do not shrink with more GPUs
    table = charts.tensor_parallel_table(frame, highlight_mark=2048)
    assert table.index.name == "GPUs (tp)" and "All-reduce at 2,048 tokens [ms]" in table


def test_moe_frame_table_and_chart(h100):
    from budgetlab import CalibratedCost
    from budgetlab.catalog import model

    cost = CalibratedCost.typical(h100, model("mixtral-8x7b"), tp=2)
    frame = charts.moe_frame(cost, [1, 8, 4096])
    assert frame.expected_experts.iloc[0] == pytest.approx(2.0)
    assert frame.weight_bytes.iloc[0] == pytest.approx(25.8e9, rel=0.01)
    assert frame.weight_bytes.iloc[-1] == pytest.approx(93.4e9, rel=0.01)
    assert np.all(frame.dense_step_time_s >= frame.step_time_s)
    assert charts.moe_table(frame).index.name == "Tokens in the step"
    spec = _spec(charts.moe_chart(charts.moe_frame(cost, charts.log_token_grid(8192))))
    assert {"Weights read per step [GB]", "Step time [ms]"} <= _titles(spec)


def test_budget_sweep_frame_with_decode_context(calibrated):
    grid = [512, 2048]
    plain = charts.budget_sweep_frame(calibrated, grid, cost_model="calibrated", **SEED)
    busy = charts.budget_sweep_frame(calibrated, grid, cost_model="calibrated", decode_context_tokens=1000, **SEED)
    assert np.all(busy.ttft_s > plain.ttft_s)  # the decoders' KV reads lengthen every step
    assert busy.ttft_s.iloc[0] == pytest.approx(ttft_s(calibrated, budget_tokens=512, decode_context_tokens=1000, **SEED))


def test_budget_payoff_shows_that_bigger_budgets_keep_helping(ideal, calibrated):
    payoff = charts.budget_payoff_frame(
        {"idealized": ideal, "calibrated": calibrated}, budget_tokens=1024, decode_context_tokens=1000, **SEED
    ).set_index("cost_model")
    assert payoff.bigger_budget_tokens.tolist() == [4096, 4096]
    assert payoff.loc["idealized", "ttft_s"] == pytest.approx(ttft_s(ideal, budget_tokens=1024, **SEED))
    assert payoff.loc["calibrated", "saved_fraction"] > 2 * payoff.loc["idealized", "saved_fraction"]
    assert payoff.loc["calibrated", "above_floor_fraction"] > payoff.loc["idealized", "above_floor_fraction"]
    table = charts.budget_payoff_table(payoff.reset_index())
    assert "TTFT at 4,096 tokens [ms]" in table and table.index.name == "Cost model"


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
    spec = _spec(charts.longest_gap_models_chart(frame, target_step_s=0.04))
    assert any("xOffset" in node.get("encoding", {}) for node in _walk(spec) if isinstance(node.get("encoding"), dict))


# --- calibration (06) -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fit():
    from budgetlab import calibrate, data_path

    return calibrate(
        data_path("measured", "vidur-h100-llama2-7b-linear.csv"), hardware="h100-sxm", model="llama-2-7b", attention=False
    )


def test_calibration_tables_and_numbers(fit):
    params = charts.calibration_parameters_table(fit)
    assert params.Name.tolist() == ["step_overhead_s", "bandwidth_efficiency", "flop_efficiency", "knee_overlap_loss"]
    assert params.Unit.tolist()[0] == "ms"
    rows = charts.calibration_rows_table(fit)
    assert len(rows) == 8 and set(rows["Used for"]) == {"fitted", "held back"}
    numbers = charts.calibration_numbers(fit)
    assert numbers["num_train"] == 6 and numbers["num_holdout"] == 2
    flop = numbers["parameters"]["flop_efficiency"]
    assert flop["relative_stderr"] == pytest.approx(flop["stderr"] / flop["value"])
    json.dumps(numbers)


def test_residuals_and_calibration_charts(fit):
    from budgetlab import IdealCost
    from budgetlab.catalog import hardware, model

    ideal = IdealCost(hardware("h100-sxm"), model("llama-2-7b"))
    residuals = charts.residual_frame(fit.table, {"fitted": fit.cost, "idealized": ideal})
    assert len(residuals) == 16 and set(residuals.used_for) == {"fitted", "held back"}
    summary = charts.residual_summary(residuals)
    assert summary.loc["fitted", "mape"] < 0.05 < 0.25 < summary.loc["idealized", "mape"]
    assert summary.loc["idealized", "mean_error"] < 0  # the idealized model is too fast
    assert set(residuals.cost_model) == {"fitted", "idealized"}
    spec = _spec(charts.residual_chart(residuals))
    assert "Predicted − measured [% of measured]" in _titles(spec)
    points = charts.measured_points_frame(fit.table)
    curves = charts.cost_variants_frame({"fitted": fit.cost, "idealized": ideal}, charts.log_token_grid(4096))
    spec = _spec(charts.calibration_chart(curves, points))
    assert {"Tokens in the step [tokens]", "Step time [ms]"} <= _titles(spec)
    assert '"type": "log"' in json.dumps(spec)


# --- KV memory and simulated runs (05) -------------------------------------------------------------------


def test_kv_capacity_table_and_memory_split(h100, llama8b):
    from budgetlab import EngineConfig, kv_capacity

    cap = kv_capacity(h100, llama8b, EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256))
    table = charts.kv_capacity_table(cap)
    assert table.loc["KV cache in tokens", "Amount"] == "464,864 tokens"
    assert table.loc["KV bytes per token", "Amount"] == "128 KiB"
    split = charts.memory_split_frame(cap)
    assert split.part.tolist() == ["weights", "activations", "kv"]
    assert split.fraction.sum() == pytest.approx(1.0)
    assert "Usable GPU memory [GB]" in _titles(_spec(charts.memory_split_chart(split)))


def test_kv_budget_frame(h100, llama8b):
    frame = charts.kv_budget_frame(h100, llama8b, [128, 256, 2048, 8192], max_num_seqs=256)
    assert frame.budget_tokens.tolist() == [256, 2048, 8192]  # 128 < max_num_seqs is refused by vLLM
    assert np.all(np.diff(frame.kv_tokens) < 0) and np.all(np.diff(frame.activation_bytes) > 0)
    assert frame.kv_tokens_lost.iloc[0] == 0 and frame.kv_tokens_lost_fraction.iloc[-1] > 0
    assert "KV cache [tokens]" in _titles(_spec(charts.kv_budget_chart(frame, budget_tokens=2048)))
    with pytest.raises(ValueError, match="below max_num_seqs"):
        charts.kv_budget_frame(h100, llama8b, [128], max_num_seqs=256)


@pytest.fixture(scope="module")
def runs(h100, llama8b):
    import dataclasses

    from budgetlab import EngineConfig, IdealCost, conversation_like
    from budgetlab.simulator import simulate

    requests = conversation_like(num_requests=120, rate_per_s=4.0, seed=1)
    cost = IdealCost(h100, llama8b)
    engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256)
    small = dataclasses.replace(engine, num_kv_blocks=1000)
    return {
        "baseline": simulate(requests, engine=engine, cost=cost),
        "cap 2": simulate(requests, engine=dataclasses.replace(engine, max_num_seqs=2), cost=cost),
        "small pool": simulate(requests, engine=small, cost=cost),
    }


def test_sim_timeline_frame_and_chart(runs):
    frame = charts.sim_timeline_frame(runs, num_bins=50)
    assert set(frame.case) == set(runs) and len(frame) <= 3 * 50
    capped = frame[frame.case == "cap 2"]
    assert capped.running_max.max() == 2 and capped.max_num_seqs.iloc[0] == 2
    assert frame.kv_used_fraction_max.between(0, 1).all() and frame.busy_fraction.between(0, 1).all()
    assert frame.num_preemptions.sum() == sum(r.summary()["num_preemptions"] for r in runs.values())
    spec = _spec(charts.sim_timeline_chart(frame))
    assert {"Running requests (max)", "KV blocks in use", "Waiting requests", "Simulated time [s]"} <= _titles(spec)
    assert "max_num_seqs = 2" in json.dumps(spec)
    assert _num_rows(spec) < charts.MAX_ROWS
    quiet = _spec(charts.sim_timeline_chart(charts.sim_timeline_frame({"baseline": runs["baseline"]}, num_bins=20)))
    assert "Preemptions" not in _titles(quiet)  # no empty panel


def test_gate_share_frame(runs):
    gates = charts.gate_share_frame(runs)
    share = gates.pivot(index="case", columns="gate", values="fraction")
    assert np.allclose(share.sum(axis=1), 1.0)
    assert share.loc["cap 2", "slot"] > 0.5  # the sequence-slot gate binds
    assert share.loc["cap 2", "slot"] > share.loc["baseline", "slot"] == 0
    assert share.loc["small pool", "kv"] > share.loc["baseline", "kv"]
    assert "Share of the time the GPU was busy" in _titles(_spec(charts.gate_share_chart(gates)))


def test_sim_cases_frame_table_and_numbers(runs):
    cases = charts.sim_cases_frame(runs).set_index("case")
    assert cases.loc["cap 2", "running_max"] == 2 and cases.loc["small pool", "kv_tokens"] == 16_000
    assert cases.loc["cap 2", "ttft_p50_s"] > cases.loc["baseline", "ttft_p50_s"]
    assert cases.loc["small pool", "kv_peak_fraction"] == 1.0
    assert (cases.busy_fraction <= 1).all() and (cases.tokens_per_step_mean > 0).all()
    table = charts.sim_cases_table(cases.reset_index())
    assert list(table.columns) == list(runs) and "Preemptions" in table.index
    numbers = charts.sim_case_numbers(cases.reset_index())
    assert set(numbers) == set(runs) and numbers["baseline"]["num_requests"] == 120
    json.dumps(numbers)


def test_policy_comparison(runs):
    frame = charts.policy_comparison_frame({"a": runs["baseline"], "b": runs["small pool"]})
    assert len(frame) == 2 * 7 and set(frame.metric) >= {"TTFT p90", "ITL p99", "longest gap"}
    table = charts.policy_comparison_table(frame)
    assert list(table.columns) == ["a", "b"] and table.index[0] == "TTFT p50"
    spec = _spec(charts.policy_comparison_chart(frame))
    assert "Latency [ms], log scale" in _titles(spec)
    assert any(isinstance(node.get("encoding", {}).get("y2"), dict) for node in _walk(spec) if isinstance(node.get("encoding"), dict))


# --- load sweeps, capacity and the tuner (notebooks 07 and 08) ----------------------------------

from budgetlab.sweep import (
    SLO,
    SerialExecutor,
    SyntheticWorkload,
    best_capacity,
    capacity_by_budget,
    make_cost,
    max_service_rate_per_s,
    service_rate_per_s,
)
from budgetlab.sweep import sweep as run_sweep  # renamed: ``sweep`` is a fixture above

SWEEP_SLO = SLO(ttft_p90_s=0.8, itl_p99_s=0.040)
SWEEP_KNOBS = {"hardware": "h100-sxm", "model": "llama-3.1-8b", "cost": "ideal", "seed": 0}


@pytest.fixture(scope="module")
def small_chat():
    return SyntheticWorkload.conversation_like(num_requests=150)


@pytest.fixture(scope="module")
def load_sweep(small_chat):
    service = service_rate_per_s(small_chat, budgets=[512, 2048], **SWEEP_KNOBS)
    rates = charts.load_grid(service, num_loads=3, max_load_fraction=2.0)  # 150 requests queue up late
    table = run_sweep(
        small_chat, budgets=[512, 2048], max_num_seqs=256, rates_per_s=rates, hardware="h100-sxm",
        model="llama-3.1-8b", executor=SerialExecutor(), progress=False,
    )
    found, searched = capacity_by_budget(
        small_chat, slo=SWEEP_SLO, budgets=[512, 2048], max_num_seqs=256, sweep_table=table,
        executor=SerialExecutor(), **SWEEP_KNOBS,
    )
    return service, rates, table, charts.capacity_frame(found), searched


def test_sweep_prose_helpers():
    assert charts.fmt_slo(SWEEP_SLO) == "TTFT p90 ≤ 800 ms and ITL p99 ≤ 40 ms"
    assert [charts.fmt_latency(s) for s in (0.0332, 0.00831, 0.8, 2.5, float("nan"))] == [
        "33.2 ms", "8.31 ms", "800 ms", "2.50 s", "n/a"
    ]
    assert charts.fmt_rate(34.5566) == "34.6 req/s"
    assert charts.fmt_percent_change(37.2, 35.6) == "4.5 % more"
    assert charts.fmt_percent_change(11.07, 15.64) == "29.2 % less"
    assert charts.fmt_percent_change(1.0, 0.0) == "n/a"
    assert charts.metric_label("ttft_p90_s") == "TTFT p90" and charts.metric_label("max_itl_s") == "longest gap"


def test_service_rate_and_load_grid(small_chat, ideal):
    service = service_rate_per_s(small_chat, budgets=[256, 8192], **SWEEP_KNOBS)
    mean = small_chat.mean_sequence_tokens()
    expected = max(max_service_rate_per_s(ideal, max_num_batched_tokens=b, mean_sequence_tokens=mean) for b in (256, 8192))
    assert service == pytest.approx(expected)
    assert charts.load_grid(38.0, num_loads=4).tolist() == [10.5, 20.9, 31.4, 41.8]
    assert charts.load_grid(38.0, num_loads=2, max_load_fraction=1.0).tolist() == [19.0, 38.0]
    with pytest.raises(ValueError, match="num_loads"):
        charts.load_grid(38.0, num_loads=0)
    with pytest.raises(ValueError, match="must be > 0"):
        charts.load_grid(0.0, num_loads=3)


def test_workload_stats_table(small_chat):
    table = charts.workload_stats_table({"chat": small_chat, "again": small_chat})
    assert list(table.columns) == ["chat", "again"]
    assert table.loc["Requests per simulation", "chat"] == "150"
    assert table.loc["Prompt, median [tokens]", "chat"] == table.loc["Prompt, median [tokens]", "again"]


def test_capacity_by_budget(load_sweep):
    _, _, table, capacities, searched = load_sweep
    assert capacities.budget_tokens.tolist() == [512, 2048]
    assert (capacities.status == "ok").all() and (capacities.max_num_seqs == 256).all()
    for row in capacities.itertuples():
        assert 0 < row.capacity_per_s < row.upper_per_s <= row.capacity_per_s * 1.05 + 1e-9
        assert row.breaks_on in {"ttft_p90_s", "itl_p99_s"} and row.label.endswith("req/s")
        assert row.ttft_p90_s <= 0.8 and row.itl_p99_s <= 0.040  # the SLO holds at capacity
    # the searches started from the sweep's bracket: the loads they simulated lie inside it
    for budget, rows in searched.groupby("budget_tokens"):
        swept = table[table.max_num_batched_tokens == budget].sort_values("rate_per_s")
        holds = [SWEEP_SLO.holds(r) for r in swept.to_dict("records")]
        first_fail = holds.index(False)
        assert rows.rate_per_s.min() >= swept.rate_per_s.iloc[first_fail - 1] - 1e-9
        assert rows.rate_per_s.max() <= swept.rate_per_s.iloc[first_fail] + 1e-9
    table_shown = charts.capacity_table(capacities)
    assert table_shown.index.name == "Budget [tokens]" and "Capacity per replica [requests/s]" in table_shown


def test_capacity_by_budget_reports_an_unattainable_slo(small_chat):
    capacities, searched = capacity_by_budget(
        small_chat, slo=SLO(ttft_p90_s=0.001), budgets=[2048], max_num_seqs=256, executor=SerialExecutor(), **SWEEP_KNOBS
    )
    row = capacities.iloc[0]
    assert row.status == "fails at every load" and np.isnan(row.capacity_per_s) and row.breaks_on == "ttft_p90_s"
    assert searched.empty
    assert best_capacity(capacities) is None
    assert charts.capacity_table(capacities)["Capacity per replica [requests/s]"].iloc[0] == "fails at every load"


def test_load_sweep_frame_and_chart(load_sweep):
    _, rates, table, capacities, searched = load_sweep
    frame = charts.load_sweep_frame(table, searched, slo=SWEEP_SLO)
    points = frame.drop_duplicates(["series", "rate_per_s"])
    assert len(frame) == len(points) * 6  # TTFT and ITL × p50, p90, p99
    assert set(frame.series) == {"budget 512", "budget 2,048"}
    assert set(frame.source) == {"sweep", "capacity search"}
    assert frame.rate_per_s.max() == pytest.approx(rates[-1])
    assert frame.holds.dtype == bool
    spec = _spec(charts.load_sweep_chart(frame, capacities, slo=SWEEP_SLO))
    assert {"Offered load [requests/s]", "Inter-token latency [ms]", "Time to first token [ms], log scale"} <= _titles(spec)
    selects = [p for p in spec["params"] if p.get("bind", {}).get("input") == "select"]
    assert {p["name"] for p in selects} == {"ttft_percentile", "itl_percentile"}
    assert {p["value"] for p in selects} == {"p90", "p99"}
    text = json.dumps(spec, ensure_ascii=False)
    assert "SLO: TTFT p90 ≤ 800 ms" in text and "SLO: ITL p99 ≤ 40 ms" in text
    assert _has_tooltip(spec) and _num_rows(spec) < charts.MAX_ROWS
    with pytest.raises(ValueError, match="percentile must be one of"):
        charts.load_sweep_chart(frame, slo=SWEEP_SLO, ttft_percentile="p95")
    results = charts.percentiles_by_budget(table)
    assert sorted(results) == [512, 2048] and results[2048]["rate_per_s"] == sorted(rates.tolist())
    assert len(results[512]["itl_p99_s"]) == len(rates)


def test_best_capacity_prefers_the_smaller_budget_on_ties():
    frame = pd.DataFrame(
        {"budget_tokens": [512, 2048, 8192], "capacity_per_s": [30.0, 30.0, np.nan], "status": ["ok", "ok", "fails at every load"]}
    )
    assert best_capacity(frame).budget_tokens == 512


def _candidates() -> pd.DataFrame:
    rows = []
    for phase, budget, cap, capacity, chosen in [
        ("budget", 1024, 288, 34.1, False),
        ("budget", 2304, 288, 35.6, True),
        ("budget", 2560, 288, 8.9, False),
        ("max_num_seqs", 2304, 64, 26.3, False),
        ("max_num_seqs", 2304, 288, 35.6, True),
    ]:
        rows.append({
            "phase": phase, "max_num_batched_tokens": budget, "max_num_seqs": cap, "capacity_per_s": capacity,
            "upper_per_s": capacity * 1.04, "status": "ok", "breaks_on": "itl_p99_s" if budget == 2560 else "ttft_p90_s",
            "ttft_p90_s": 0.7, "itl_p99_s": 0.037, "budget_full_fraction": 0.2, "cap_bound_fraction": 0.0,
            "kv_peak_fraction": 0.8, "is_first_guess": budget == 2304 and cap == 288, "chosen": chosen,
        })
    return pd.DataFrame(rows)


def test_candidates_table_and_chart():
    candidates = _candidates()
    table = charts.candidates_table(candidates)
    assert table["Search step"].tolist()[:1] == ["1 · budget"] and table["Search step"].iloc[-1] == "2 · max_num_seqs"
    assert table[""].iloc[1] == "**recommended**, first guess"
    assert table["Just above, breaks on"].iloc[2] == "ITL p99"
    assert table["TTFT p90 at capacity"].iloc[0] == "700 ms"
    spec = _spec(charts.candidates_chart(candidates))
    assert {"Token budget, max_num_batched_tokens [tokens]", "Sequence cap, max_num_seqs [requests]",
            "Capacity per replica [requests/s]"} <= _titles(spec)
    assert _has_tooltip(spec)


def test_slo_check_frame_and_table():
    table = pd.DataFrame(
        {"rate_per_s": [35.6, 37.2], "max_num_batched_tokens": [2304, 2304], "max_num_seqs": [288, 288],
         "ttft_p90_s": [0.73, 0.97], "itl_p99_s": [0.0374, 0.0374]}
    )
    frame = charts.slo_check_frame(table, SWEEP_SLO)
    assert len(frame) == 4 and frame.slo_met.tolist() == [True, True, False, False]
    assert frame.meets.tolist() == [True, True, False, True]
    assert frame.used_fraction.iloc[0] == pytest.approx(0.73 / 0.8)
    shown = charts.slo_check_table(frame)
    assert shown["Met"].tolist() == ["yes", "yes", "**no**", "yes"] and shown["SLO"].iloc[0] == "800 ms"


def test_frontier_frame_and_chart(small_chat):
    table = run_sweep(
        small_chat, budgets=[512, 2048, 8192], max_num_seqs=256, rates_per_s=30.0, hardware="h100-sxm",
        model="llama-3.1-8b", executor=SerialExecutor(), progress=False,
    )
    frame = charts.frontier_frame(table, slo=SWEEP_SLO, chosen_budget=2048)
    assert frame.budget_tokens.tolist() == [512, 2048, 8192]
    assert frame.label.tolist() == ["512", "2,048 (recommended)", "8,192"]
    assert frame.chosen.tolist() == [False, True, False] and frame.label_above.tolist() == [True, False, True]
    assert frame.itl_metric.iloc[0] == "ITL p99" and frame.ttft_metric.iloc[0] == "TTFT p90"
    assert frame.itl_s.is_monotonic_increasing  # bigger budgets, longer steps
    assert not frame.meets.iloc[-1]  # a full 8,192-token step (133 ms) breaks a 40 ms ITL limit
    assert frame.itl_ms.iloc[1] == pytest.approx(frame.itl_s.iloc[1] * 1e3)
    spec = _spec(charts.frontier_chart(frame, slo=SWEEP_SLO))
    assert {"ITL p99 inter-token latency [ms]", "TTFT p90 time to first token [ms], log scale"} <= _titles(spec)
    text = json.dumps(spec, ensure_ascii=False)
    assert "SLO: ITL p99 ≤ 40 ms" in text and "SLO: TTFT p90 ≤ 800 ms" in text
    step = make_cost("ideal", hardware("h100-sxm"), __import__("budgetlab").model("llama-3.1-8b")).step_time_s(8192)
    assert frame.itl_s.iloc[-1] <= step + 1e-9


def test_load_sweep_chart_marks_only_the_capacities_found(load_sweep):
    _, _, table, capacities, searched = load_sweep
    frame = charts.load_sweep_frame(table, searched, slo=SWEEP_SLO)
    one_failed = capacities.assign(status=["fails at every load", "ok"], capacity_per_s=[np.nan, 30.0])
    spec = _spec(charts.load_sweep_chart(frame, one_failed, slo=SWEEP_SLO))
    rules = [
        values for values in spec["datasets"].values() if values and "capacity_per_s" in values[0] and "series" in values[0]
    ]
    assert rules and all(row["series"] == "budget 2,048" and row["capacity_per_s"] == 30.0 for row in rules[0])
