"""Charts of load sweeps, capacity per replica and the tuner (notebooks 07 and 08).

The numbers are the experiments': the sweep tables of :func:`budgetlab.sweep`, the capacity
tables of :func:`budgetlab.capacity_by_budget`, the tuner's candidates, and the SLO's own
checks (:meth:`SLO.holds <budgetlab.SLO.holds>`, :meth:`SLO.check <budgetlab.SLO.check>`). The
load grid, the percentiles per budget and why no capacity was found are
:func:`budgetlab.load_grid`, :func:`budgetlab.percentiles_by_budget` and
:func:`budgetlab.why_no_capacity`; the TTFT-ITL trade-off across budgets is
:func:`budgetlab.budget_frontier`. The frames here add labels, ``*_ms`` twins and the series
that tell the lines apart; the token budget is ``max_num_batched_tokens`` in every frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import altair as alt
import numpy as np
import pandas as pd

from budgetlab.charts.style import (
    HEIGHT,
    PALETTE,
    TOKENS_FORMAT,
    WIDTH,
    _check_rows,
    _reference_rules,
)
from budgetlab.metrics import SUMMARY_QUANTILES
from budgetlab.text import fmt_int, fmt_latency, fmt_rate, metric_label

if TYPE_CHECKING:  # types only: charts import no experiment code
    from budgetlab.experiments.slo import SLO

#: The percentiles a run's summary reports for TTFT and ITL (``ttft_p90_s`` ...): the
#: dropdowns of :func:`load_sweep_chart`.
_PERCENTILES = tuple(SUMMARY_QUANTILES)


_LOAD_METRICS = {"ttft": "TTFT", "itl": "ITL"}


def capacity_frame(capacities: pd.DataFrame) -> pd.DataFrame:
    """:func:`budgetlab.capacity_by_budget`'s capacities with the labels prose and charts
    show.

    Returns
    -------
    pandas.DataFrame
        A copy with ``breaks_label`` (the limit broken just above capacity, ``"TTFT p90"``;
        ``""`` when none) and ``label`` (``"34.6 req/s"``, or the status when the search found
        no capacity) added.
    """
    frame = capacities.copy()
    frame["breaks_label"] = _breaks_labels(frame)
    frame["label"] = [fmt_rate(c) if s == "ok" else s for c, s in zip(frame.capacity_per_s, frame.status)]
    return frame


def _breaks_labels(capacities: pd.DataFrame) -> list[str]:
    return [metric_label(m) if m else "" for m in capacities.breaks_on]


def _series_labels(frame: pd.DataFrame, series: str) -> pd.Series:
    if series == "budget":
        return frame.max_num_batched_tokens.map(lambda b: f"budget {fmt_int(b)}")
    if series == "workload":
        return frame.workload.astype(str)
    raise ValueError(f"series must be 'budget' or 'workload', got {series!r}")


def load_sweep_frame(
    tables: pd.DataFrame | Sequence[pd.DataFrame],
    evaluations: pd.DataFrame | Sequence[pd.DataFrame] = (),
    *,
    series: str = "budget",
    slo: SLO | None = None,
    budget_tokens: int | None = None,
) -> pd.DataFrame:
    """TTFT and ITL percentiles against offered load, tidy: one row per point × metric × percentile.

    Parameters
    ----------
    tables : DataFrame or sequence of them
        :func:`budgetlab.sweep` outputs (one per workload when comparing workloads).
    evaluations : DataFrame or sequence of them
        The simulations of capacity searches (``.evaluations`` of
        :func:`budgetlab.capacity_by_budget`): they add points where each curve crosses the
        SLO. Points beyond the sweep's highest load are left out; a load the sweep already has
        keeps the sweep's row.
    series : {"budget", "workload"}
        What tells the lines apart (the ``series`` column): ``"budget 2,048"`` or the workload's
        label.
    slo : SLO, optional
        Adds ``holds``: whether the point meets every limit.
    budget_tokens : int, optional
        Keep only this budget.

    Returns
    -------
    pandas.DataFrame
        ``series``, ``max_num_batched_tokens``, ``workload``, ``rate_per_s``, ``metric`` (``"TTFT"``,
        ``"ITL"``), ``percentile`` (``"p50"``, ``"p90"``, ``"p99"``), ``value_s``, ``value_ms``,
        ``source`` (``"sweep"`` or ``"capacity search"``), ``holds`` (with ``slo``),
        ``requests_per_s`` (achieved).
    """
    tables = [tables] if isinstance(tables, pd.DataFrame) else list(tables)
    evaluations = [evaluations] if isinstance(evaluations, pd.DataFrame) else list(evaluations)
    grid = pd.concat(tables, ignore_index=True).assign(source="sweep")
    top = float(grid.rate_per_s.max())
    parts = [grid]
    for searched in evaluations:
        if len(searched):
            parts.append(searched.loc[lambda f: f.rate_per_s <= top].assign(source="capacity search"))
    points = pd.concat(parts, ignore_index=True)
    if budget_tokens is not None:
        points = points[points.max_num_batched_tokens == budget_tokens]
    points = points.drop_duplicates(["workload", "max_num_batched_tokens", "rate_per_s"], keep="first")
    points = points.sort_values(["workload", "max_num_batched_tokens", "rate_per_s"], kind="stable")
    points = points.assign(series=_series_labels(points, series))
    if slo is not None:
        points = points.assign(holds=[slo.holds(r) for r in points.to_dict("records")])
    rows = []
    for record in points.to_dict("records"):
        for metric, name in _LOAD_METRICS.items():
            for pct in _PERCENTILES:
                value = float(record[f"{metric}_{pct}_s"])
                row = {
                    "series": record["series"],
                    "max_num_batched_tokens": int(record["max_num_batched_tokens"]),
                    "workload": record["workload"],
                    "rate_per_s": float(record["rate_per_s"]),
                    "metric": name,
                    "percentile": pct,
                    "value_s": value,
                    "value_ms": value * 1e3,
                    "source": record["source"],
                    "requests_per_s": float(record["requests_per_s"]),
                }
                if slo is not None:
                    row["holds"] = bool(record["holds"])
                rows.append(row)
    _check_rows(len(rows))
    return pd.DataFrame(rows)


def _slo_lines(slo: SLO, metric: str) -> pd.DataFrame:
    """The SLO's limits on one metric (``"ttft"`` or ``"itl"``) as rules: ``value_ms``, ``label``."""
    limits = {m: v for m, v in slo.limits.items() if m.startswith(f"{metric}_")}
    return pd.DataFrame(
        {
            "value_ms": [v * 1e3 for v in limits.values()],
            "label": [f"SLO: {metric_label(m)} ≤ {fmt_latency(v)}" for m, v in limits.items()],
            "percentile": [m.split("_")[1] for m in limits],  # "ttft_p90_s" -> "p90"
        }
    )


#: Left of the plot, where a panel's y-axis title is written [px]
_Y_TITLE_OFFSET_PX = 50


def _percentile_axis_title(param: alt.Parameter, words: str, unit: str) -> alt.Chart:
    """A y-axis title that names the percentile the dropdown shows ("Time to first token p90
    [ms], log scale"), written as a rotated text left of the plot: Vega-Lite's axis titles cannot
    follow a parameter, a text mark's text can."""
    text = f"'{words} ' + {param.name} + ' {unit}'"
    return (
        alt.Chart(pd.DataFrame({"row": [0]}))
        .transform_calculate(axis_title=text)
        .mark_text(angle=270, align="center", baseline="bottom", fontWeight="bold", fontSize=11)
        .encode(x=alt.value(-_Y_TITLE_OFFSET_PX), y=alt.value(HEIGHT / 2), text="axis_title:N")
    )


def load_sweep_chart(
    frame: pd.DataFrame,
    capacities: pd.DataFrame | None = None,
    *,
    slo: SLO | None = None,
    ttft_percentile: str = "p90",
    itl_percentile: str = "p99",
    title: str = "",
) -> alt.HConcatChart:
    """TTFT and ITL against offered load, one line per series, with percentile dropdowns.

    Two dropdowns under the charts pick the percentile each panel shows (p50, p90, p99); they
    start at the SLO's percentiles, and each panel's title and y-axis title name the percentile
    shown (a printed chart, without its dropdowns, still says which one it is). The SLO's limits
    are dashed horizontal lines, drawn only while the panel shows the percentile the limit is on;
    each series' capacity per replica is a dashed vertical line in its colour. TTFT is on a log
    axis: it spans from the prompt's own prefill to minutes of queueing past the service rate.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`load_sweep_frame` output.
    capacities : pandas.DataFrame, optional
        ``capacities`` of :func:`budgetlab.capacity_by_budget` (rows with a capacity are
        drawn); its series must match the frame's (``max_num_batched_tokens`` or ``workload``).
    slo : SLO, optional
        Draws its TTFT and ITL limits.
    ttft_percentile, itl_percentile : {"p50", "p90", "p99"}
        Where the dropdowns start.
    title : str
    """
    _check_rows(len(frame))
    for pct in (ttft_percentile, itl_percentile):
        if pct not in _PERCENTILES:
            raise ValueError(f"percentile must be one of {', '.join(_PERCENTILES)}, got {pct!r}")
    order = list(dict.fromkeys(frame.series))
    color = alt.Color(
        "series:N", title="", sort=order, scale=alt.Scale(domain=order), legend=alt.Legend(orient="top", labelLimit=320)
    )
    x = alt.X("rate_per_s:Q", title="Offered load [requests/s]")
    params = {
        "TTFT": alt.param(
            name="ttft_percentile",
            value=ttft_percentile,
            bind=alt.binding_select(options=list(_PERCENTILES), name="TTFT percentile "),
        ),
        "ITL": alt.param(
            name="itl_percentile",
            value=itl_percentile,
            bind=alt.binding_select(options=list(_PERCENTILES), name="ITL percentile "),
        ),
    }
    caps = None
    if capacities is not None and len(capacities):
        caps = capacities[capacities.status == "ok"].copy()
        caps["breaks_label"] = _breaks_labels(caps)
        by_budget = bool((frame.series == frame.max_num_batched_tokens.map(lambda b: f"budget {fmt_int(b)}")).all())
        if by_budget:
            caps["series"] = caps.max_num_batched_tokens.map(lambda b: f"budget {fmt_int(b)}")
        else:
            caps["series"] = caps.workload.astype(str)
        caps = caps[caps.series.isin(order)]
    panels = []
    for metric, (words, unit), scale in (
        ("TTFT", ("Time to first token", "[ms], log scale"), alt.Scale(type="log", nice=False, padding=12)),
        ("ITL", ("Inter-token latency", "[ms]"), alt.Scale(zero=True)),
    ):
        param = params[metric]
        data = frame[frame.metric == metric]
        tooltip = [
            alt.Tooltip("series:N", title=""),
            alt.Tooltip("rate_per_s:Q", title="offered load [req/s]", format=",.3~g"),
            alt.Tooltip("requests_per_s:Q", title="completed [req/s]", format=",.3~g"),
            alt.Tooltip("percentile:N"),
            alt.Tooltip("value_ms:Q", title=f"{metric} [ms]", format=",.1f"),
            alt.Tooltip("source:N", title="simulated for"),
        ]
        if "holds" in data:
            tooltip.append(alt.Tooltip("holds:N", title="SLO met"))
        base = (
            alt.Chart(data)
            .transform_filter(f"datum.percentile == {param.name}")
            .encode(x=x, y=alt.Y("value_ms:Q", title=None, scale=scale), color=color)
        )
        layers: list[alt.Chart] = [
            base.mark_line(strokeWidth=2),
            base.mark_point(filled=True, size=45).encode(tooltip=tooltip),
        ]
        if slo is not None:
            lines = _slo_lines(slo, metric.lower())
            if len(lines):
                shown = alt.Chart(lines).transform_filter(f"datum.percentile == {param.name}")
                layers.append(shown.mark_rule(strokeDash=[6, 3], color=PALETTE["reference"]).encode(y="value_ms:Q"))
                layers.append(
                    shown.mark_text(align="left", baseline="bottom", dx=4, dy=-3, color=PALETTE["reference"]).encode(
                        x=alt.value(0), y="value_ms:Q", text="label:N"
                    )
                )
        if caps is not None and len(caps):
            layers.append(
                alt.Chart(caps)
                .mark_rule(strokeDash=[4, 3], strokeWidth=1.5)
                .encode(
                    x="capacity_per_s:Q",
                    color=color,
                    tooltip=[
                        alt.Tooltip("series:N", title=""),
                        alt.Tooltip("capacity_per_s:Q", title="capacity per replica [req/s]", format=",.3~g"),
                        alt.Tooltip("breaks_label:N", title="just above, the SLO breaks on"),
                    ],
                )
            )
        layers.append(_percentile_axis_title(param, words, unit))
        panel_title = alt.TitleParams(text=alt.ExprRef(expr=f"'{metric} ' + {param.name} + ' against offered load'"))
        panels.append(alt.LayerChart(layer=list(layers), width=WIDTH - 80, height=HEIGHT, title=panel_title))
    return alt.hconcat(*panels, title=title).add_params(*params.values())


_PHASES = {"budget": "1 · budget", "max_num_seqs": "2 · max_num_seqs"}


def candidates_chart(candidates: pd.DataFrame, *, title: str = "") -> alt.HConcatChart:
    """Capacity of every candidate the tuner simulated: left the budgets (cap fixed), right the
    caps (budget fixed). The recommended candidate is red; the first guess is ringed."""
    _check_rows(len(candidates))
    frame = candidates.assign(
        phase_label=candidates.phase.map(_PHASES),
        breaks_label=candidates.breaks_on.map(lambda m: metric_label(m) if m else "—"),
        role=np.where(candidates.chosen, "recommended", "candidate"),
    )
    panels = []
    for phase, knob, axis_title in (
        ("budget", "max_num_batched_tokens", "Token budget, max_num_batched_tokens [tokens]"),
        ("max_num_seqs", "max_num_seqs", "Sequence cap, max_num_seqs [requests]"),
    ):
        data = frame[frame.phase == phase]
        fixed = "max_num_seqs" if knob == "max_num_batched_tokens" else "max_num_batched_tokens"
        fixed_value = fmt_int(data[fixed].iloc[0]) if len(data) else ""
        base = alt.Chart(data).encode(
            x=alt.X(f"{knob}:Q", title=axis_title, scale=alt.Scale(zero=False), axis=alt.Axis(format=TOKENS_FORMAT)),
            y=alt.Y("capacity_per_s:Q", title="Capacity per replica [requests/s]", scale=alt.Scale(zero=True)),
        )
        tooltip = [
            alt.Tooltip("max_num_batched_tokens:Q", title="budget [tokens]", format=TOKENS_FORMAT),
            alt.Tooltip("max_num_seqs:Q", format=TOKENS_FORMAT),
            alt.Tooltip("capacity_per_s:Q", title="capacity [req/s]", format=",.3~g"),
            alt.Tooltip("breaks_label:N", title="just above, breaks on"),
            alt.Tooltip("status:N"),
        ]
        panels.append(
            alt.layer(
                base.mark_line(color=PALETTE["muted"], strokeWidth=1.5),
                base.mark_point(filled=True, size=90).encode(
                    color=alt.Color(
                        "role:N",
                        title="",
                        scale=alt.Scale(
                            domain=["candidate", "recommended"], range=[PALETTE["curve"], PALETTE["highlight"]]
                        ),
                        legend=alt.Legend(orient="top"),
                    ),
                    tooltip=tooltip,
                ),
                base.mark_point(size=260, strokeWidth=2, color="black").transform_filter("datum.is_first_guess"),
            ).properties(
                width=WIDTH - 120,
                height=HEIGHT - 40,
                title=f"Step {_PHASES[phase]}: {fixed} fixed at {fixed_value}",
            )
        )
    return alt.hconcat(*panels, title=title).resolve_scale(y="shared")


def slo_check_frame(table: pd.DataFrame, slo: SLO) -> pd.DataFrame:
    """:meth:`SLO.check <budgetlab.SLO.check>` of a sweep table, with each limit's label:
    one row per load × limit.

    Returns
    -------
    pandas.DataFrame
        ``rate_per_s``, ``max_num_batched_tokens``, ``max_num_seqs``, ``metric`` (summary key),
        ``metric_label``, ``value_s``, ``limit_s``, ``used_fraction`` (value over limit),
        ``meets``, ``slo_met`` (every limit of the row met).
    """
    frame = slo.check(table)
    frame.insert(frame.columns.get_loc("metric") + 1, "metric_label", frame.metric.map(metric_label))
    return frame


def frontier_frame(frontier: pd.DataFrame, *, chosen_budget: int | None = None) -> pd.DataFrame:
    """:func:`budgetlab.budget_frontier` ready to draw: labels, ``*_ms`` twins, the chosen budget.

    Parameters
    ----------
    frontier : pandas.DataFrame
        :func:`budgetlab.budget_frontier` output (one row per budget, budgets increasing).
    chosen_budget : int, optional
        Flags this budget (the tuner's recommendation) in ``chosen``.

    Returns
    -------
    pandas.DataFrame
        The frontier's ``max_num_batched_tokens``, ``rate_per_s``, ``max_num_seqs``,
        ``ttft_s``, ``itl_s`` and ``meets``, plus ``label`` (``"2,048"``, ``"(recommended)"``
        after the chosen one), ``ttft_ms``, ``itl_ms``, ``ttft_metric`` and ``itl_metric``
        (the metrics' labels, ``"TTFT p90"``), ``chosen`` and ``label_above`` (alternating, so
        neighbours' labels do not collide).
    """
    frame = frontier[["max_num_batched_tokens", "rate_per_s", "max_num_seqs", "ttft_s", "itl_s", "meets"]].copy()
    frame.insert(1, "label", frame.max_num_batched_tokens.map(fmt_int))
    frame["ttft_ms"] = frame.ttft_s * 1e3
    frame["itl_ms"] = frame.itl_s * 1e3
    frame["ttft_metric"] = frontier.ttft_metric.map(metric_label)
    frame["itl_metric"] = frontier.itl_metric.map(metric_label)
    frame["chosen"] = frame.max_num_batched_tokens == chosen_budget if chosen_budget is not None else False
    frame.loc[frame.chosen, "label"] = frame.loc[frame.chosen, "label"] + " (recommended)"
    frame["label_above"] = np.arange(len(frame)) % 2 == 0
    _check_rows(len(frame))
    return frame.reset_index(drop=True)


def frontier_chart(frame: pd.DataFrame, *, slo: SLO, title: str = "") -> alt.LayerChart:
    """TTFT against ITL, one labelled point per budget, joined in budget order.

    The SLO's limits are dashed lines; points that meet the whole SLO are green, the others
    grey, and the chosen budget is ringed by a red diamond. Smaller budgets sit up and to the left
    (short steps, slow prompts), larger ones down and to the right.
    """
    _check_rows(len(frame))
    ttft_label, itl_label = frame.ttft_metric.iloc[0], frame.itl_metric.iloc[0]
    data = frame.assign(verdict=np.where(frame.meets, "meets the SLO", "breaks the SLO"))
    x = alt.X("itl_ms:Q", title=f"{itl_label} inter-token latency [ms]", scale=alt.Scale(zero=False, nice=True))
    y = alt.Y(
        "ttft_ms:Q",
        title=f"{ttft_label} time to first token [ms], log scale",
        scale=alt.Scale(type="log", nice=False, padding=24),
    )
    tooltip = [
        alt.Tooltip("max_num_batched_tokens:Q", title="budget [tokens]", format=TOKENS_FORMAT),
        alt.Tooltip("ttft_ms:Q", title=f"{ttft_label} [ms]", format=",.1f"),
        alt.Tooltip("itl_ms:Q", title=f"{itl_label} [ms]", format=",.1f"),
        alt.Tooltip("rate_per_s:Q", title="offered load [req/s]", format=",.3~g"),
        alt.Tooltip("verdict:N", title=""),
    ]
    base = alt.Chart(data).encode(x=x, y=y)
    layers: list[alt.Chart] = [
        base.mark_line(color=PALETTE["muted"], strokeWidth=1.5).encode(order="max_num_batched_tokens:Q"),
        base.mark_point(filled=True, size=110).encode(
            color=alt.Color(
                "verdict:N",
                title="",
                scale=alt.Scale(
                    domain=["meets the SLO", "breaks the SLO"], range=[PALETTE["reference"], PALETTE["muted"]]
                ),
                legend=alt.Legend(orient="top"),
            ),
            tooltip=tooltip,
        ),
        base.mark_point(shape="diamond", filled=False, size=420, strokeWidth=2.5, color=PALETTE["highlight"])
        .encode(tooltip=tooltip)
        .transform_filter("datum.chosen"),
    ]
    for above, dy in ((True, -12), (False, 16)):
        where = "datum.label_above" if above else "!datum.label_above"
        text: dict[str, Any] = {"align": "left", "dx": 6, "dy": dy}
        layers += [
            base.mark_text(**text, stroke="white", strokeWidth=4).encode(text="label:N").transform_filter(where),
            base.mark_text(**text).encode(text="label:N").transform_filter(where),
        ]
    limits = slo.limits
    ttft_key = next((m for m in limits if metric_label(m) == ttft_label), None)
    itl_key = next((m for m in limits if metric_label(m) == itl_label), None)
    if ttft_key is not None:
        label = f"SLO: {ttft_label} ≤ {fmt_latency(limits[ttft_key])}"
        layers += _reference_rules([(label, limits[ttft_key])], label_x=WIDTH)
    if itl_key is not None:
        ref = pd.DataFrame(
            {"value_ms": [limits[itl_key] * 1e3], "label": [f"SLO: {itl_label} ≤ {fmt_latency(limits[itl_key])}"]}
        )
        layers += [
            alt.Chart(ref).mark_rule(strokeDash=[6, 3], color=PALETTE["reference"]).encode(x="value_ms:Q"),
            alt.Chart(ref)
            .mark_text(align="left", baseline="top", dx=4, color=PALETTE["reference"])
            .encode(x="value_ms:Q", y=alt.value(4), text="label:N"),
        ]
    return alt.LayerChart(layer=list(layers), width=WIDTH, height=HEIGHT + 40, title=title)
