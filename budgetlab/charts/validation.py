"""Charts and tables of the model against real engines (notebook 10): errors per published run.

The numbers come from :mod:`budgetlab.experiments.serving_runs` (predicted against measured on
published vLLM serving runs) and :mod:`budgetlab.serving.calibrate` (a fit to a benchmark file);
the functions here only reshape and draw them.
"""

from __future__ import annotations

from collections.abc import Callable

import altair as alt
import pandas as pd

from budgetlab.charts.style import HEIGHT, PALETTE, WIDTH, _check_rows, _check_table_rows
from budgetlab.text import fmt_latency, fmt_percent

__all__ = [
    "serving_errors_frame",
    "serving_errors_chart",
    "serving_runs_table",
    "preset_grid_table",
    "serving_fit_table",
    "closed_loop_runs_table",
    "closed_loop_accuracy_table",
]

#: The metrics compared, their labels, and the bound each must meet on a steady run.
_METRICS = {
    "ttft_mean_s": ("TTFT mean", 0.25),
    "tpot_s": ("time per output token", 0.15),
    "e2e_mean_s": ("end-to-end mean", 0.15),
}


def serving_errors_frame(table: pd.DataFrame) -> pd.DataFrame:
    """:attr:`ServingRunsCheck.table` in long form, steady runs only: one row per run and metric
    (``run_label``, ``metric_label``, ``error`` [-], ``bound`` [-], ``within``)."""
    steady = table[~table.overloaded_measured]
    rows = []
    for _, row in steady.iterrows():
        label = f"{int(row.run)}: {row.model}, TP{int(row.tp)}, {row.rate_per_s:g}/s"
        for metric, (name, bound) in _METRICS.items():
            error = float(row[f"{metric}_error"])
            rows.append(
                {
                    "run_label": label,
                    "metric_label": name,
                    "error": error,
                    "bound": bound,
                    "within": abs(error) <= bound,
                }
            )
    return pd.DataFrame(rows)


def serving_errors_chart(frame: pd.DataFrame, *, title: str = "") -> alt.LayerChart:
    """Each steady run's relative error per metric, with its ± bound (dashed)."""
    _check_rows(len(frame))
    labels = [name for name, _ in _METRICS.values()]
    colors = [PALETTE["prompt"], PALETTE["decode"], PALETTE["reference"]]
    points = (
        alt.Chart(frame)
        .mark_point(filled=True, size=80)
        .encode(
            x=alt.X("error:Q", title="predicted / measured − 1", axis=alt.Axis(format="+.0%")),
            y=alt.Y("run_label:N", title=None, sort=None),
            color=alt.Color(
                "metric_label:N",
                title="",
                sort=labels,
                scale=alt.Scale(domain=labels, range=colors),
                legend=alt.Legend(orient="bottom"),
            ),
            shape=alt.Shape("metric_label:N", sort=labels, legend=None),
            tooltip=[
                alt.Tooltip("run_label:N", title="run"),
                alt.Tooltip("metric_label:N", title="metric"),
                alt.Tooltip("error:Q", title="error", format="+.1%"),
                alt.Tooltip("bound:Q", format=".0%"),
            ],
        )
    )
    bounds = pd.DataFrame({"x": [-0.25, -0.15, 0.15, 0.25], "kind": ["TTFT", "others", "others", "TTFT"]})
    rules = (
        alt.Chart(bounds)
        .mark_rule(strokeDash=[4, 3], color=PALETTE["muted"])
        .encode(
            x="x:Q",
            opacity=alt.Opacity("kind:N", scale=alt.Scale(domain=["TTFT", "others"], range=[0.4, 0.8]), legend=None),
        )
    )
    zero = alt.Chart(pd.DataFrame({"x": [0.0]})).mark_rule(color="black").encode(x="x:Q")
    return (rules + zero + points).properties(
        width=WIDTH, height=max(HEIGHT, 22 * frame.run_label.nunique()), title=title
    )


def serving_runs_table(table: pd.DataFrame) -> pd.DataFrame:
    """:attr:`ServingRunsCheck.table` for reading: measured and predicted per run."""
    _check_table_rows(len(table))
    out = pd.DataFrame(
        {
            "Run": table.run.to_numpy(),
            "Model": [f"{m}, TP{int(t)}" for m, t in zip(table.model, table.tp, strict=True)],
            "Rate [req/s]": table.rate_per_s.map(lambda v: f"{v:g}").to_numpy(),
            "TTFT measured": table.ttft_mean_s_measured.map(fmt_latency).to_numpy(),
            "TTFT predicted": table.ttft_mean_s_predicted.map(fmt_latency).to_numpy(),
            "TPOT measured": table.tpot_s_measured.map(fmt_latency).to_numpy(),
            "TPOT predicted": table.tpot_s_predicted.map(fmt_latency).to_numpy(),
            "E2E measured": table.e2e_mean_s_measured.map(fmt_latency).to_numpy(),
            "E2E predicted": table.e2e_mean_s_predicted.map(fmt_latency).to_numpy(),
            "Overloaded (measured / predicted)": [
                f"{'yes' if a else 'no'} / {'yes' if b else 'no'}"
                for a, b in zip(table.overloaded_measured, table.overloaded_predicted, strict=True)
            ],
            "Prefix hit rate": table.prefix_hit_rate.map(lambda v: fmt_percent(v, decimals=0)).to_numpy(),
        }
    )
    return out.set_index("Run")


def _measured_predicted(measured: float, predicted: float, error: float, fmt: Callable[[float], str]) -> str:
    """``measured → predicted (error)``, or ``— (predicted)`` where the run publishes none."""
    if pd.isna(measured):
        return f"— ({fmt(predicted)})"
    return f"{fmt(measured)} → {fmt(predicted)} ({error:+.0%})"


def closed_loop_runs_table(table: pd.DataFrame) -> pd.DataFrame:
    """:attr:`ClosedLoopRunsCheck.table <budgetlab.experiments.closed_loop_runs.ClosedLoopRunsCheck>`
    for reading: per run, each metric as ``measured → predicted (error)``."""
    _check_table_rows(len(table))
    columns = {
        "Output throughput": ("output_tokens_per_s", lambda v: f"{v:,.0f} tok/s"),
        "Total throughput per GPU": ("total_tokens_per_s_per_gpu", lambda v: f"{v:,.0f} tok/s"),
        "TPOT": ("tpot_ms", lambda v: fmt_latency(v / 1e3)),
        "E2E": ("e2e_s", fmt_latency),
    }
    out = pd.DataFrame(
        {
            "Run": table.run.to_numpy(),
            "Model": [f"{m}, TP{int(t)}" for m, t in zip(table.model, table.tp, strict=True)],
            "Clients": table.concurrency.map(lambda v: f"{int(v)}").to_numpy(),
            **{
                label: [
                    _measured_predicted(m, p, e, fmt)
                    for m, p, e in zip(
                        table[f"{metric}_measured"], table[f"{metric}_predicted"], table[f"{metric}_error"], strict=True
                    )
                ]
                for label, (metric, fmt) in columns.items()
            },
        }
    )
    return out.set_index("Run")


def closed_loop_accuracy_table(accuracy: pd.DataFrame) -> pd.DataFrame:
    """:attr:`ClosedLoopRunsCheck.accuracy` for reading: per metric, the runs compared, median,
    P90 and largest absolute error, the bound and the runs within it."""
    _check_table_rows(len(accuracy))
    return pd.DataFrame(
        {
            "Metric": accuracy.label.to_numpy(),
            "Runs": accuracy.runs.map(lambda v: f"{int(v)}").to_numpy(),
            "Median |error|": accuracy.median_abs_error.map(fmt_percent).to_numpy(),
            "P90 |error|": accuracy.p90_abs_error.map(fmt_percent).to_numpy(),
            "Largest |error|": accuracy.max_abs_error.map(fmt_percent).to_numpy(),
            "Bound": accuracy.bound.map(lambda v: fmt_percent(v, decimals=0)).to_numpy(),
            "Within": [f"{int(w)} of {int(r)}" for w, r in zip(accuracy.within, accuracy.runs, strict=True)],
        }
    ).set_index("Metric")


def preset_grid_table(grid: pd.DataFrame) -> pd.DataFrame:
    """:func:`budgetlab.experiments.serving_runs.preset_grid` for reading, best first."""
    _check_table_rows(len(grid))
    return pd.DataFrame(
        {
            "Bandwidth efficiency": grid.bandwidth_efficiency.map(lambda v: f"{v:.2f}").to_numpy(),
            "CPU time per step": grid.step_overhead_s.map(fmt_latency).to_numpy(),
            "Largest TTFT error": grid.ttft_mean_s_max_error.map(fmt_percent).to_numpy(),
            "Largest TPOT error": grid.tpot_s_max_error.map(fmt_percent).to_numpy(),
            "Largest E2E error": grid.e2e_mean_s_max_error.map(fmt_percent).to_numpy(),
            "Overload right": ["yes" if v else "no" for v in grid.overload_right],
            "Worst error / bound": grid.score.map(lambda v: f"{v:.2f}").to_numpy(),
        }
    )


def serving_fit_table(parameters: pd.DataFrame) -> pd.DataFrame:
    """A :class:`~budgetlab.serving.ServingCalibration`'s parameters for reading (value ± error)."""
    _check_table_rows(len(parameters))
    return pd.DataFrame(
        {
            "Parameter": parameters.name.to_numpy(),
            "Fitted": [
                f"{fmt_latency(v)}" if u == "s" else f"{v:.3f}"
                for v, u in zip(parameters.value, parameters.unit, strict=True)
            ],
            "± one standard error": [
                f"{fmt_latency(e)}" if u == "s" else f"{e:.3f}"
                for e, u in zip(parameters.stderr, parameters.unit, strict=True)
            ],
            "At a bound": ["yes" if b else "no" for b in parameters.at_bound],
        }
    ).set_index("Parameter")
