"""Fitting the calibrated cost to measured steps: recovery, honest hold-out, clear errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from budgetlab import BudgetlabError, ConstantCost, IdealCost
from budgetlab.catalog import data_path, model
from budgetlab.cost.calibrated import CalibratedCost
from budgetlab.cost.fit import (
    DEFAULT_FIT,
    CalibrationError,
    CalibrationResult,
    calibrate,
    predict_step_ms,
)
from budgetlab.cost.measurements import read_measurements

VIDUR_TABLE = ("measured", "vidur-h100-llama2-7b-linear.csv")

# The cost that generates the synthetic measurements, and what the fit must find again.
TRUE = {
    "step_overhead_s": 0.8e-3,
    "bandwidth_efficiency": 0.75,
    "flop_efficiency": 0.62,
    "knee_overlap_loss": 0.5,
}


def _synthetic_table(cost: CalibratedCost, *, noise: float, seed: int, num_rows: int = 48) -> pd.DataFrame:
    """Steps mixing prompt chunks, decodes and contexts, timed by ``cost`` × (1 + noise)."""
    rng = np.random.default_rng(seed)
    prefill = rng.choice([0, 0, 1, 16, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192], size=num_rows)
    decodes = rng.choice([0, 1, 8, 32, 64, 128, 256], size=num_rows)
    decodes = np.where(prefill + decodes == 0, 16, decodes)
    context = rng.choice([0, 0, 512, 2048, 8192], size=num_rows)
    table = pd.DataFrame(
        {
            "num_prefill_tokens": prefill,
            "num_decode_tokens": decodes,
            "context_tokens": context,
            "step_time_ms": 1.0,
        }
    )
    exact = predict_step_ms(cost, table)
    table["step_time_ms"] = exact * (1 + noise * rng.standard_normal(num_rows))
    return table


@pytest.fixture(scope="module")
def true_cost(h100, llama8b) -> CalibratedCost:
    return CalibratedCost.typical(h100, llama8b).with_(layer_overhead_s=0.0, **TRUE)


@pytest.fixture(scope="module")
def recovered(h100, llama8b, true_cost) -> CalibrationResult:
    table = _synthetic_table(true_cost, noise=0.01, seed=7)
    return calibrate(table, hardware=h100, model=llama8b, seed=3)


# --------------------------------------------------------------------------------------------
# Recovery and honest errors
# --------------------------------------------------------------------------------------------


def test_fit_recovers_known_parameters_within_their_uncertainty(recovered):
    params = recovered.parameters.set_index("name")
    assert list(params.index) == list(DEFAULT_FIT)
    for name, truth in TRUE.items():
        value, stderr = params.loc[name, "value"], params.loc[name, "stderr"]
        assert np.isfinite(stderr) and stderr > 0
        assert abs(value - truth) <= 3 * stderr, f"{name}: {value:.5g} ± {stderr:.2g}, true {truth}"
        # 1 % noise on 36 rows pins each parameter to a few percent of its value.
        assert stderr < 0.1 * truth
    assert params["unit"].to_dict() == {
        "step_overhead_s": "s",
        "bandwidth_efficiency": "fraction",
        "flop_efficiency": "fraction",
        "knee_overlap_loss": "fraction",
    }
    assert not params["at_bound"].any()


def test_fit_reports_train_and_held_back_error(recovered):
    assert recovered.num_train == 36 and recovered.num_holdout == 12
    # 1 % Gaussian noise: mean absolute error ~0.8 %, on rows fitted and held back alike.
    assert 0.002 < recovered.train_mape < 0.02
    assert 0.002 < recovered.holdout_mape < 0.03
    assert recovered.train_max_error >= recovered.train_mape
    assert recovered.holdout_max_error >= recovered.holdout_mape
    table = recovered.table
    assert set(table["split"]) == {"train", "holdout"}
    assert {"predicted_ms", "residual_ms", "relative_error", "split"} <= set(table.columns)
    np.testing.assert_allclose(table["residual_ms"], table["predicted_ms"] - table["step_time_ms"])
    holdout = table[table["split"] == "holdout"]
    assert recovered.holdout_mape == pytest.approx(np.mean(np.abs(holdout["relative_error"])))
    assert "held back (12 rows, not fitted)" in recovered.summary()


def test_held_back_rows_never_influence_the_fit(h100, llama8b, true_cost):
    table = _synthetic_table(true_cost, noise=0.01, seed=11)
    first = calibrate(table, hardware=h100, model=llama8b, seed=5)
    held = (first.table["split"] == "holdout").to_numpy()
    corrupted = table.copy()
    corrupted.loc[held, "step_time_ms"] *= 3.0  # wildly wrong, but only on held-back rows
    second = calibrate(corrupted, hardware=h100, model=llama8b, seed=5)
    assert (second.table["split"] == first.table["split"]).all()
    np.testing.assert_array_equal(second.parameters["value"], first.parameters["value"])
    assert second.train_mape == first.train_mape
    assert second.holdout_mape > 0.5  # and the corruption shows up where it should


def test_no_holdout_says_errors_are_in_sample(h100):
    result = calibrate(
        data_path(*VIDUR_TABLE),
        hardware=h100,
        model=model("llama-2-7b"),
        attention=False,
        holdout_fraction=0,
    )
    assert result.num_holdout == 0
    assert math.isnan(result.holdout_mape) and math.isnan(result.holdout_max_error)
    assert "in-sample only" in result.summary()


def test_fit_to_the_published_vidur_profile(h100):
    result = calibrate(
        data_path(*VIDUR_TABLE),
        hardware="h100-sxm",
        model="llama-2-7b",
        attention=False,
        holdout_fraction=0,
    )
    assert result.cost.hardware == h100 and result.cost.model.slug == "llama-2-7b"
    assert result.train_max_error < 0.05
    params = result.parameters.set_index("name")["value"]
    assert 0.6 < params["flop_efficiency"] < 0.8
    assert "source" in result.table.columns  # extra columns ride along


def test_fit_tile_finds_the_tile(h100, llama8b):
    truth = CalibratedCost.ideal(h100, llama8b).with_(flop_efficiency=0.7, tile_tokens=128)
    tokens = np.arange(300, 1400, 37)
    table = pd.DataFrame(
        {
            "num_prefill_tokens": tokens,
            "num_decode_tokens": 0,
            "step_time_ms": truth.step_time_s(tokens) * 1e3,
        }
    )
    result = calibrate(
        table,
        hardware=h100,
        model=llama8b,
        fit=("flop_efficiency",),
        start=CalibratedCost.ideal(h100, llama8b),
        fit_tile=True,
        holdout_fraction=0,
    )
    assert result.cost.tile_tokens == 128
    params = result.parameters.set_index("name")
    assert params.loc["tile_tokens", "value"] == 128 and math.isnan(params.loc["tile_tokens", "stderr"])
    assert params.loc["flop_efficiency", "value"] == pytest.approx(0.7, rel=1e-6)


def test_unconstrained_parameter_gets_infinite_uncertainty(h100, llama8b):
    # Pure decode steps of 1 token never reach the FLOP roof: flop_efficiency is not constrained.
    truth = CalibratedCost.ideal(h100, llama8b).with_(bandwidth_efficiency=0.8)
    decodes = [1, 2, 4, 8]
    table = pd.DataFrame(
        {
            "num_prefill_tokens": 0,
            "num_decode_tokens": decodes,
            "step_time_ms": [truth.step_time_s(n) * 1e3 for n in decodes],
        }
    )
    result = calibrate(
        table,
        hardware=h100,
        model=llama8b,
        fit=("bandwidth_efficiency", "flop_efficiency"),
        start=CalibratedCost.ideal(h100, llama8b),
        holdout_fraction=0,
    )
    stderr = result.parameters.set_index("name")["stderr"]
    assert np.isinf(stderr["flop_efficiency"])


# --------------------------------------------------------------------------------------------
# predict_step_ms: any cost model on any table
# --------------------------------------------------------------------------------------------


def test_predict_step_ms_evaluates_any_cost_model(h100):
    path = data_path(*VIDUR_TABLE)
    llama2 = model("llama-2-7b")
    tokens = pd.read_csv(path)["num_prefill_tokens"].to_numpy()
    ideal = IdealCost(h100, llama2)
    np.testing.assert_array_equal(predict_step_ms(ideal, path), ideal.step_time_s(tokens) * 1e3)
    np.testing.assert_array_equal(predict_step_ms(ConstantCost(0.002), path), np.full(8, 2.0))
    typical = CalibratedCost.typical(h100, llama2)
    np.testing.assert_array_equal(predict_step_ms(typical, Path(path)), typical.step_time_s(tokens) * 1e3)


def test_predict_builds_one_chunk_and_decodes_with_context(h100, llama8b):
    from budgetlab import Batch

    cost = CalibratedCost.typical(h100, llama8b)
    table = pd.DataFrame(
        {
            "num_prefill_tokens": [512, 0],
            "num_decode_tokens": [20, 64],
            "context_tokens": [1000, 3000],
            "step_time_ms": [1, 1],
        }
    )
    mixed = Batch(
        num_decodes=20,
        decode_context_tokens=20_000,
        prefill_tokens=(512,),
        prefill_context_tokens=(1000,),
    )
    expected = [
        cost.batch_time_s(mixed),
        cost.batch_time_s(Batch(num_decodes=64, decode_context_tokens=192_000)),
    ]
    np.testing.assert_array_equal(predict_step_ms(cost, table), np.array(expected) * 1e3)


def test_context_column_is_optional(h100, llama8b):
    table = pd.DataFrame({"num_prefill_tokens": [100], "num_decode_tokens": [3], "step_time_ms": [7.0]})
    assert read_measurements(table)["context_tokens"].tolist() == [0]


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

GOOD = {
    "num_prefill_tokens": [1, 512, 2048],
    "num_decode_tokens": [0, 10, 0],
    "step_time_ms": [5.0, 12.0, 40.0],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drop": "step_time_ms"}, "missing column.*step_time_ms"),
        ({"drop": "num_decode_tokens"}, "missing column.*num_decode_tokens"),
        ({"step_time_ms": [5.0, -1.0, 40.0]}, r"step_time_ms must be a finite time > 0.*row\(s\) 1"),
        ({"step_time_ms": [5.0, 0.0, 40.0]}, r"> 0 in milliseconds; row\(s\) 1"),
        ({"step_time_ms": [5.0, float("nan"), 40.0]}, "empty, NaN or not numeric"),
        ({"step_time_ms": [5.0, float("inf"), 40.0]}, "finite time > 0"),
        ({"step_time_ms": ["5", "fast", "40"]}, "must hold numbers"),
        ({"num_prefill_tokens": [1, -512, 2048]}, "whole token counts >= 0"),
        ({"num_prefill_tokens": [1, 512.5, 2048]}, "whole token counts >= 0"),
        (
            {"num_prefill_tokens": [0, 512, 2048], "num_decode_tokens": [0, 10, 0]},
            r"row\(s\) 0 have no tokens",
        ),
        ({"context_tokens": [0, -3, 0]}, "context_tokens"),
    ],
)
def test_bad_tables_give_clear_errors(h100, llama8b, change, message):
    data = dict(GOOD)
    drop = change.pop("drop", None)
    data.update(change)
    if drop:
        del data[drop]
    with pytest.raises(CalibrationError, match=message):
        calibrate(pd.DataFrame(data), hardware=h100, model=llama8b, holdout_fraction=0)


def test_calibration_error_is_a_value_error():
    assert issubclass(CalibrationError, ValueError) and issubclass(CalibrationError, BudgetlabError)


def test_fewer_rows_than_parameters(h100, llama8b):
    with pytest.raises(CalibrationError, match=r"3 usable training row.*4 free parameter.*fit fewer"):
        calibrate(pd.DataFrame(GOOD), hardware=h100, model=llama8b, holdout_fraction=0)
    # Eight rows, a quarter held back: 6 train rows are enough for 4 parameters, but not 7.
    with pytest.raises(CalibrationError, match="lower holdout_fraction"):
        calibrate(data_path(*VIDUR_TABLE), hardware=h100, model=model("llama-2-7b"), holdout_fraction=0.75)


def test_rows_equal_to_parameters_fit_without_uncertainty(h100, llama8b):
    result = calibrate(
        pd.DataFrame(GOOD),
        hardware=h100,
        model=llama8b,
        fit=("step_overhead_s", "bandwidth_efficiency", "flop_efficiency"),
        holdout_fraction=0,
    )
    assert result.parameters["stderr"].isna().all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fit": ("step_overhead_s", "layer_overhead_s")}, "collinear"),
        ({"fit": ("speed",)}, "cannot fit 'speed'"),
        ({"fit": ("flop_efficiency", "flop_efficiency")}, "twice"),
        ({"holdout_fraction": 1.0}, r"holdout_fraction must be in \[0, 1\)"),
        ({"holdout_fraction": -0.1}, "holdout_fraction"),
    ],
)
def test_bad_fit_requests(h100, llama8b, kwargs, message):
    with pytest.raises(CalibrationError, match=message):
        calibrate(data_path(*VIDUR_TABLE), hardware=h100, model=llama8b, **kwargs)


def test_missing_file_and_wrong_type(h100, llama8b, tmp_path):
    with pytest.raises(CalibrationError, match="does not exist"):
        calibrate(tmp_path / "nope.csv", hardware=h100, model=llama8b)
    with pytest.raises(CalibrationError, match="cannot be read"):  # was a bare IsADirectoryError
        calibrate(tmp_path, hardware=h100, model=llama8b)
    with pytest.raises(CalibrationError, match="CSV path or a pandas DataFrame"):
        calibrate([1, 2, 3], hardware=h100, model=llama8b)  # type: ignore[arg-type]
    empty = tmp_path / "empty.csv"
    empty.write_text("num_prefill_tokens,num_decode_tokens,step_time_ms\n")
    with pytest.raises(CalibrationError, match="no rows"):
        calibrate(empty, hardware=h100, model=llama8b)


def test_start_for_another_model_is_refused(h100, llama8b):
    with pytest.raises(CalibrationError, match="measurements are for"):
        calibrate(
            data_path(*VIDUR_TABLE),
            hardware=h100,
            model=model("llama-2-7b"),
            start=CalibratedCost.typical(h100, llama8b),
        )


def test_unknown_slug_is_a_lookup_error(llama8b):
    with pytest.raises(LookupError, match="unknown hardware"):
        calibrate(data_path(*VIDUR_TABLE), hardware="h1000", model=llama8b)


def test_hardware_or_model_of_the_wrong_type_is_a_parameter_error(h100, llama8b):
    from budgetlab import ParameterError

    with pytest.raises(ParameterError, match="hardware must be a hardware slug such as 'h100-sxm'"):
        calibrate(data_path(*VIDUR_TABLE), hardware=None, model=llama8b)  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="model must be a model slug"):
        calibrate(data_path(*VIDUR_TABLE), hardware=h100, model=7)  # type: ignore[arg-type]


def test_fittable_parameters_are_named_records():
    from budgetlab.cost import FITTABLE, Fittable

    overhead = FITTABLE["step_overhead_s"]
    assert isinstance(overhead, Fittable)
    assert (overhead.unit, overhead.low, overhead.high, overhead.scale) == ("s", 0.0, 1.0, 1e-3)
    assert FITTABLE["bandwidth_efficiency"] == Fittable(unit="fraction", low=1e-3, high=1.0, scale=1.0)
    assert set(DEFAULT_FIT) < set(FITTABLE)
    with pytest.raises(TypeError):
        FITTABLE["tile_tokens"] = Fittable("tokens", 1, 256, 64)  # type: ignore[index]


def test_numbers_are_the_report_values(h100, llama8b):
    # Hand-built result: 2 ms ± 0.5 ms (relative 0.25), 0.8 ± 0.02 (0.025) at a bound, 0 ± 0.1.
    parameters = pd.DataFrame(
        {
            "name": ["step_overhead_s", "bandwidth_efficiency", "knee_overlap_loss"],
            "value": [2e-3, 0.8, 0.0],
            "stderr": [0.5e-3, 0.02, 0.1],
            "unit": ["s", "fraction", "fraction"],
            "at_bound": [False, True, False],
        }
    )
    table = pd.DataFrame({"split": ["train", "train", "train", "holdout"]})
    result = CalibrationResult(
        cost=CalibratedCost.typical(h100, llama8b),
        parameters=parameters,
        train_mape=0.03,
        train_max_error=0.07,
        holdout_mape=0.05,
        holdout_max_error=0.05,
        table=table,
    )
    numbers = result.numbers()
    assert numbers == {
        "parameters": {
            "step_overhead_s": {"value": 2e-3, "stderr": 0.5e-3, "relative_stderr": 0.25, "at_bound": False},
            "bandwidth_efficiency": {"value": 0.8, "stderr": 0.02, "relative_stderr": 0.02 / 0.8, "at_bound": True},
            "knee_overlap_loss": {"value": 0.0, "stderr": 0.1, "relative_stderr": math.inf, "at_bound": False},
        },
        "train_mape": 0.03,
        "train_max_error": 0.07,
        "holdout_mape": 0.05,
        "holdout_max_error": 0.05,
        "num_train": 3,
        "num_holdout": 1,
    }
    assert all(type(v) in (float, int, dict) for v in numbers.values())  # plain JSON values


def test_numbers_of_a_real_fit(recovered):
    numbers = recovered.numbers()
    assert list(numbers["parameters"]) == list(DEFAULT_FIT)
    for name, row in recovered.parameters.set_index("name").iterrows():
        assert numbers["parameters"][name]["value"] == row.value
        assert numbers["parameters"][name]["relative_stderr"] == pytest.approx(row.stderr / abs(row.value))
    assert numbers["num_train"] + numbers["num_holdout"] == len(recovered.table)
    assert numbers["holdout_mape"] == recovered.holdout_mape


def test_measured_batches_one_chunk_and_decodes_with_context():
    from budgetlab import Batch
    from budgetlab.cost import measured_batches

    frame = read_measurements(
        pd.DataFrame(
            {
                "num_prefill_tokens": [512, 0, 7],
                "num_decode_tokens": [20, 64, 0],
                "context_tokens": [1000, 3000, 0],
                "step_time_ms": [1, 1, 1],
            }
        )
    )
    assert measured_batches(frame) == [
        Batch(num_decodes=20, decode_context_tokens=20_000, prefill_tokens=(512,), prefill_context_tokens=(1000,)),
        Batch(num_decodes=64, decode_context_tokens=192_000),
        Batch(prefill_tokens=(7,), prefill_context_tokens=(0,)),
    ]


def test_residuals_and_their_summary_by_hand():
    # Rows measured at 1 ms and 4 ms; a constant 2 ms step is off by +1 ms (+100 %) and
    # −2 ms (−50 %): MAPE 75 %, worst 100 %, mean +25 %. A 1 ms step: 0 and −75 %.
    from budgetlab.cost import residual_summary, residuals

    table = pd.DataFrame(
        {"num_prefill_tokens": [16, 0], "num_decode_tokens": [0, 8], "step_time_ms": [1.0, 4.0], "source": "x"}
    )
    frame = residuals(table, {"two": ConstantCost(0.002), "one": ConstantCost(0.001)})
    assert list(frame.columns) == [
        "num_prefill_tokens",
        "num_decode_tokens",
        "context_tokens",
        "step_time_ms",
        "cost_model",
        "predicted_ms",
        "residual_ms",
        "relative_error",
    ]
    assert frame.cost_model.tolist() == ["two", "two", "one", "one"]
    assert frame.predicted_ms.tolist() == [2.0, 2.0, 1.0, 1.0]
    assert frame.residual_ms.tolist() == [1.0, -2.0, 0.0, -3.0]
    assert frame.relative_error.tolist() == [1.0, -0.5, 0.0, -0.75]
    summary = residual_summary(frame)
    assert summary.index.tolist() == ["two", "one"]
    assert summary.loc["two"].tolist() == [0.75, 1.0, 0.25]
    assert summary.loc["one"].tolist() == [0.375, 0.75, -0.375]


def test_residuals_keep_the_split_of_a_fit(recovered):
    from budgetlab.cost import residuals

    frame = residuals(recovered.table, {"fitted": recovered.cost})
    assert frame.split.tolist() == recovered.table.split.tolist()
    np.testing.assert_array_equal(frame.predicted_ms, recovered.table.predicted_ms)
