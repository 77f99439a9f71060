"""Charts of one step's cost (notebooks 01, 06): curves, hardware, tiles, experts, calibration."""

from __future__ import annotations

import json

import numpy as np
import pytest

import budgetlab as bl
from budgetlab import charts
from budgetlab.catalog import hardware, list_hardware, model

from chart_spec import has_tooltip, num_rows, spec_of, titles, walk


@pytest.fixture(scope="module")
def calibrated(h100, llama8b):
    return bl.CalibratedCost.typical(h100, llama8b)


# --- grids -----------------------------------------------------------------------------------------


def test_token_grid_includes_the_knee_exactly(ideal):
    grid = charts.token_grid(10_000, include=[295.34, 512])
    assert grid[0] == 1 and grid[-1] == 10_000
    assert {295, 296, 512} <= set(grid.tolist())
    assert np.all(np.diff(grid) > 0)
    with pytest.raises(ValueError):
        charts.token_grid(1)


def test_log_token_grid():
    grid = charts.log_token_grid(4096, num_points=20, include=[300, 5000])
    assert grid[0] == 1 and grid[-1] == 4096 and 300 in grid and 5000 not in grid
    assert np.all(np.diff(grid) > 0)


# --- step cost (01) ----------------------------------------------------------------------------------


def test_step_cost_frame_and_marks(ideal):
    frame = charts.step_cost_frame(ideal, [1, 100, 295, 296, 2048])
    assert list(frame.step_time_s[:3]) == pytest.approx([ideal.weight_read_s] * 3)
    assert frame.step_time_ms.iloc[-1] == pytest.approx(33.24, abs=0.01)
    assert list(frame.bound) == ["weight read (memory)"] * 3 + ["math (compute)"] * 2
    assert set(frame.cost_model) == {"ideal"}
    assert set(frame.hardware) == {"NVIDIA H100 SXM5 80GB"} and set(frame.model) == {"Llama 3.1 8B"}
    marks = charts.marks_frame(ideal, [512, 2048, 8192])
    assert list(marks.label) == ["512 → 8.31 ms", "2,048 → 33.2 ms", "8,192 → 133 ms"]


def test_step_cost_frame_of_a_model_without_hardware():
    frame = charts.step_cost_frame(bl.ConstantCost(0.01), [1, 10])
    assert frame.step_time_s.tolist() == [0.01, 0.01]
    assert set(frame.hardware) == {""} and "bound" not in frame


def test_step_cost_chart(ideal):
    frame = charts.step_cost_frame(ideal, charts.token_grid(10_000, include=[295.3]))
    marks = charts.marks_frame(ideal, [512, 2048, 8192, 20_000])  # 20,000 is off the chart: dropped
    spec = spec_of(charts.step_cost_chart(frame, marks=marks, knee_tokens=295.3, title="t"))
    assert {"Tokens in the step [tokens]", "Step time [ms]"} <= titles(spec)
    assert has_tooltip(spec)
    text = json.dumps(spec, ensure_ascii=False)
    assert "knee ≈ 295 tokens" in text and "8,192 → 133 ms" in text and "20,000" not in text
    assert num_rows(spec) < charts.MAX_ROWS


def test_step_cost_chart_inlines_only_the_drawn_columns(ideal):
    frame = charts.step_cost_frame(ideal, charts.token_grid(2000, num_points=50))
    spec = spec_of(charts.step_cost_chart(frame))
    rows = next(iter(spec["datasets"].values()))
    assert set(rows[0]) == {"tokens", "step_time_ms", "time_per_token_us", "bound", "cost_model"}


def test_frames_refuse_too_many_rows(ideal):
    with pytest.raises(ValueError, match="more than a report should inline"):
        charts.step_cost_frame(ideal, np.arange(1, charts.MAX_ROWS + 2))


def test_catalog_curves_with_legend_selection(llama8b):
    specs = [hardware(slug) for slug in list_hardware()]
    frame = charts.catalog_step_cost_frame(llama8b, specs, charts.token_grid(10_000, num_points=100))
    assert frame.hardware.nunique() == len(specs)
    spec = spec_of(charts.step_cost_chart(frame, color="hardware"))
    assert any(p.get("bind") == "legend" for node in walk(spec) for p in node.get("params", []) if isinstance(p, dict))


def test_catalog_curves_log_log_with_distinct_dashes(llama8b):
    """issue 20: 01's curves on log-log axes (the knee a corner, not a 3 % sliver), each GPU with
    its own dash pattern (equal peak FLOP/s draw the same line), integer tick labels."""
    specs = [hardware(slug) for slug in list_hardware()]
    frame = charts.catalog_step_cost_frame(llama8b, specs, charts.log_token_grid(10_000, num_points=50))
    spec = spec_of(charts.step_cost_chart(frame, color="hardware", log_log=True))
    scales = [n["scale"]["type"] for n in walk(spec) if isinstance(n.get("scale"), dict) and "type" in n["scale"]]
    line = next(layer for layer in spec["layer"] if layer.get("mark", {}).get("type") == "line")
    assert line["encoding"]["x"]["scale"]["type"] == "log" and line["encoding"]["y"]["scale"]["type"] == "log"
    assert line["encoding"]["x"]["axis"]["format"] == ",d"  # "1,024", not "1.024k"
    dash = line["encoding"]["strokeDash"]
    assert dash["field"] == "hardware" and len(dash["scale"]["range"]) == len(specs)
    assert len({json.dumps(d) for d in dash["scale"]["range"]}) == min(len(specs), 8)
    assert "log" in scales
    linear = spec_of(charts.step_cost_chart(frame, color="hardware"))
    assert "Tokens in the step [tokens]" in titles(linear) and "Tokens in the step [tokens], log scale" in titles(spec)


def test_hardware_comparison_table(llama8b):
    specs = [hardware(slug) for slug in list_hardware()]
    frame = bl.hardware_comparison(llama8b, specs, token_marks=[512, 2048])
    table = charts.hardware_comparison_table(frame, highlight="h100-sxm")
    assert "Weight read [ms]" in table and "Knee [tokens]" in table and "Step at 2,048 tokens [ms]" in table
    row = table[table.Hardware.str.endswith("◀")]
    assert len(row) == 1 and row["Knee [tokens]"].iloc[0] == 295


def test_cost_variants_frame(ideal, calibrated):
    frame = charts.cost_variants_frame({"idealized": ideal, "calibrated": calibrated}, [1, 512, 2048])
    assert frame.cost_model.tolist() == ["idealized"] * 3 + ["calibrated"] * 3
    assert "bound" not in frame  # only the idealized model has a sharp knee
    ideal_s, real_s = frame.step_time_s.to_numpy().reshape(2, 3)
    assert np.all(real_s > ideal_s)
    spec = spec_of(charts.step_cost_chart(frame))
    assert any(p.get("bind") == "legend" for node in walk(spec) for p in node.get("params", []) if isinstance(p, dict))


def test_tensor_parallel_table(h100):
    frame = bl.tensor_parallel_speedups(h100, model("llama-3.1-70b"), [1, 2, 4, 8], token_marks=[512, 2048])
    table = charts.tensor_parallel_table(frame, highlight_mark=2048)
    assert table.index.name == "GPUs (tp)" and "All-reduce at 2,048 tokens [ms]" in table
    assert table["Fits one GPU"].tolist() == ["no", "yes", "yes", "yes"]
    assert "All-reduce at 512 tokens [ms]" not in table
    for bad in (1024, 2048.0, True, "2048"):  # 1,024 is not a mark of the frame
        with pytest.raises(bl.ParameterError, match=r"^highlight_mark must be None or one of the frame's token marks"):
            charts.tensor_parallel_table(frame, highlight_mark=bad)


def test_moe_frame_table_and_chart(h100):
    cost = bl.CalibratedCost.typical(h100, model("mixtral-8x7b"), tp=2)
    numbers = bl.moe_step_costs(cost, [1, 8, 4096])
    frame = charts.moe_frame(numbers)
    assert frame.weight_gb.iloc[0] == pytest.approx(numbers.weight_bytes.iloc[0] / 1e9)
    assert frame.step_time_ms.iloc[-1] == pytest.approx(numbers.step_time_s.iloc[-1] * 1e3)
    table = charts.moe_table(numbers)
    assert table.index.name == "Tokens in the step" and "Experts touched per layer (of 8)" in table
    assert table["Weights read [GB]"].iloc[0] == pytest.approx(25.8, abs=0.1)
    spec = spec_of(charts.moe_chart(charts.moe_frame(bl.moe_step_costs(cost, charts.log_token_grid(8192)))))
    assert {"Weights read per step [GB]", "Step time [ms]"} <= titles(spec)


# --- calibration (06) -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fit():
    return bl.calibrate(
        bl.data_path("measured", "vidur-h100-llama2-7b-linear.csv"),
        hardware="h100-sxm",
        model="llama-2-7b",
        attention=False,
    )


def test_calibration_parameters_table(fit):
    params = charts.calibration_parameters_table(fit)
    assert params.Name.tolist() == ["step_overhead_s", "bandwidth_efficiency", "flop_efficiency", "knee_overlap_loss"]
    assert params.Unit.tolist()[0] == "ms"


def test_residuals_and_calibration_charts(fit):
    from budgetlab.cost import residual_summary, residuals

    ideal = bl.IdealCost(hardware("h100-sxm"), model("llama-2-7b"))
    scored = residuals(fit.table, {"fitted": fit.cost, "idealized": ideal})
    summary = residual_summary(scored)  # the model's numbers; the frame below is what the chart draws
    assert summary.loc["fitted", "mape"] < 0.05 < 0.25 < summary.loc["idealized", "mape"]
    assert summary.loc["idealized", "mean_error"] < 0  # the idealized model is too fast
    frame = charts.residual_frame(scored)
    assert len(frame) == 16 and set(frame.used_for) == {"fitted", "held back"}
    assert set(frame.cost_model) == {"fitted", "idealized"}
    assert np.allclose(frame.residual_ms, frame.predicted_ms - frame.step_time_ms)
    spec = spec_of(charts.residual_chart(frame))
    assert "Predicted − measured [% of measured]" in titles(spec)
    points = charts.measured_points_frame(fit.table)
    curves = charts.cost_variants_frame({"fitted": fit.cost, "idealized": ideal}, charts.log_token_grid(4096))
    spec = spec_of(charts.calibration_chart(curves, points))
    assert {"Tokens in the step [tokens]", "Step time [ms]"} <= titles(spec)
