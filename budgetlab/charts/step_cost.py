"""Charts of one step's cost (notebooks 01 and 06): curves, hardware, experts, calibration.

The numbers come from the cost models (:mod:`budgetlab.cost`): the curves evaluate a model's
``step_time_s`` on a token grid, the what-if tables come from :mod:`budgetlab.cost.variants`,
the calibration errors from :func:`budgetlab.cost.fit.residuals`. Here they are reshaped and
drawn.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import altair as alt
import numpy as np
import pandas as pd

from budgetlab.charts.style import (
    HEIGHT,
    PALETTE,
    TOKENS_FORMAT,
    WIDTH,
    _check_rows,
    _color,
    _names,
    _slim,
    _x_tokens,
    _y_ms,
)
from budgetlab.cost.protocol import CostCurve
from budgetlab.cost.roofline import IdealCost, knee_tokens
from budgetlab.specs import HardwareSpec, ModelSpec
from budgetlab.text import fmt_int, fmt_latency


def token_grid(max_tokens: int, *, include: Iterable[float] = (), num_points: int = 400) -> np.ndarray:
    """Token counts from 1 to ``max_tokens`` for a step-cost curve [tokens].

    ``num_points`` evenly spaced counts plus every value of ``include`` (rounded down and up,
    so a kink such as the knee is drawn exactly), sorted and unique.
    """
    if max_tokens < 2:
        raise ValueError(f"max_tokens must be >= 2, got {max_tokens}")
    extra = np.asarray(list(include), dtype=float)
    extra = extra[(extra >= 1) & (extra <= max_tokens)]
    grid = np.concatenate([np.linspace(1, max_tokens, min(num_points, max_tokens)), np.floor(extra), np.ceil(extra)])
    return np.unique(np.round(grid).astype(np.int64))


def log_token_grid(max_tokens: int, *, num_points: int = 60, include: Iterable[float] = ()) -> np.ndarray:
    """Token counts from 1 to ``max_tokens``, evenly spaced on a log axis, plus ``include`` [tokens].

    Rounded to whole tokens, sorted and unique (so fewer than ``num_points`` at the low end).
    """
    if max_tokens < 2:
        raise ValueError(f"max_tokens must be >= 2, got {max_tokens}")
    extra = np.asarray([v for v in include if 1 <= v <= max_tokens], dtype=float)
    grid = np.concatenate([np.geomspace(1, max_tokens, num_points), extra])
    return np.unique(np.round(grid).astype(np.int64))


def step_cost_frame(cost: CostCurve, tokens: Sequence[int], *, cost_model: str = "ideal") -> pd.DataFrame:
    """The step time for each token count: one curve of a cost model.

    Parameters
    ----------
    cost : CostCurve
        Any model with a vectorized ``step_time_s(num_tokens)`` (every budgetlab model).
    tokens : sequence of int
        Token counts [tokens], e.g. from :func:`token_grid`.
    cost_model : str
        Name of the curve in the ``cost_model`` column.

    Returns
    -------
    pandas.DataFrame
        ``tokens``, ``step_time_s``, ``step_time_ms``, ``time_per_token_us`` (the step shared
        by its tokens), ``bound`` (what sets the step time: the weight read or the math, for
        models that have a knee), ``cost_model``, ``hardware``, ``model``.
    """
    counts = np.asarray(tokens, dtype=np.int64)
    _check_rows(len(counts))
    step_s = np.asarray(cost.step_time_s(counts), dtype=float)
    frame = pd.DataFrame(
        {
            "tokens": counts,
            "step_time_s": step_s,
            "step_time_ms": step_s * 1e3,
            "time_per_token_us": step_s / np.maximum(counts, 1) * 1e6,
        }
    )
    if isinstance(cost, IdealCost):
        knee = knee_tokens(cost)
        frame["bound"] = np.where(counts <= knee, "weight read (memory)", "math (compute)")
    frame["cost_model"] = cost_model
    for column, value in _names(cost).items():
        frame[column] = value
    return frame


def marks_frame(cost: CostCurve, token_marks: Sequence[int], *, cost_model: str = "ideal") -> pd.DataFrame:
    """The step time at a few marked token counts, with a label ``"2,048 → 33.2 ms"``."""
    frame = step_cost_frame(cost, token_marks, cost_model=cost_model)
    frame["label"] = [f"{fmt_int(n)} → {fmt_latency(s)}" for n, s in zip(frame.tokens, frame.step_time_s)]
    return frame


def catalog_step_cost_frame(
    model: ModelSpec, hardware_specs: Iterable[HardwareSpec], tokens: Sequence[int]
) -> pd.DataFrame:
    """:func:`step_cost_frame` of the ideal model for one model on several accelerators.

    The ``hardware`` column tells the curves apart (draw with ``color="hardware"``).
    """
    frames = [step_cost_frame(IdealCost(hardware, model), tokens) for hardware in hardware_specs]
    frame = pd.concat(frames, ignore_index=True)
    _check_rows(len(frame))
    return frame


def cost_variants_frame(costs: Mapping[str, CostCurve], tokens: Sequence[int]) -> pd.DataFrame:
    """:func:`step_cost_frame` of several cost models over the same token counts.

    Parameters
    ----------
    costs : mapping of str to cost model
        Curve name (the ``cost_model`` column) → any model with a vectorized
        ``step_time_s(num_tokens)`` (:class:`~budgetlab.cost.IdealCost`,
        :class:`~budgetlab.cost.CalibratedCost`): a pure-prefill step of that many tokens.
    tokens : sequence of int
        Token counts [tokens].

    Returns
    -------
    pandas.DataFrame
        The columns of :func:`step_cost_frame`, one curve per name, in the mapping's order
        (``bound`` only when every model is idealized).
    """
    frames = [step_cost_frame(cost, tokens, cost_model=name) for name, cost in costs.items()]
    frame = pd.concat(frames, ignore_index=True)
    if "bound" in frame and frame["bound"].isna().any():
        frame = frame.drop(columns="bound")
    _check_rows(len(frame))
    return frame


def moe_frame(moe: pd.DataFrame) -> pd.DataFrame:
    """:func:`budgetlab.cost.variants.moe_step_costs` ready to draw: GB and ms twins.

    Returns
    -------
    pandas.DataFrame
        The input's columns plus ``weight_gb``, ``step_time_ms`` and ``dense_step_time_ms``.
    """
    _check_rows(len(moe))
    return moe.assign(
        weight_gb=moe.weight_bytes / 1e9,
        step_time_ms=moe.step_time_s * 1e3,
        dense_step_time_ms=moe.dense_step_time_s * 1e3,
    )


#: Dash patterns of curves drawn together (solid first) [px on, px off, ...]
_DASHES: list[list[int]] = [[1, 0], [8, 4], [2, 3], [12, 3, 2, 3], [5, 5], [1, 6], [16, 4], [8, 3, 2, 3, 2, 3]]


def step_cost_chart(
    frame: pd.DataFrame,
    *,
    marks: pd.DataFrame | None = None,
    knee_tokens: float | None = None,
    color: str | None = "cost_model",
    log_log: bool = False,
    title: str = "",
) -> alt.LayerChart:
    """Step time against tokens in the step: flat at the weight read, then a straight line.

    On ``log_log`` axes the knee is a visible corner wherever it sits (on linear axes up to
    10,000 tokens a knee at 300 tokens is a 3 % sliver at the left edge). Several curves
    (``color``) also differ in dash pattern, so curves that run on top of each other (two GPUs
    with the same peak FLOP/s share their compute-bound line) stay distinguishable.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`step_cost_frame` output (several cost models or hardware concatenated).
    marks : pandas.DataFrame, optional
        :func:`marks_frame` output: labelled points.
    knee_tokens : float, optional
        Draws a dashed rule at the knee [tokens].
    color : str or None
        Column that tells curves apart (``"cost_model"``, ``"hardware"``); a legend click
        highlights one curve.
    log_log : bool
        Log scales on both axes (token counts from 1; use :func:`log_token_grid`).
    title : str
        Chart title.

    Returns
    -------
    altair.LayerChart
        With a hover readout (nearest token count) and tooltips.
    """
    _check_rows(len(frame))
    frame = _slim(frame, ["tokens", "step_time_ms", "time_per_token_us", "bound", color])
    many = color is not None and frame[color].nunique() > 1
    legend_pick = alt.selection_point(fields=[color], bind="legend") if color is not None and many else None
    hover = alt.selection_point(fields=["tokens"], nearest=True, on="pointerover", clear="pointerout", empty=False)
    tooltip = [
        alt.Tooltip("tokens:Q", title="tokens in the step", format=TOKENS_FORMAT),
        alt.Tooltip("step_time_ms:Q", title="step time [ms]", format=",.2f"),
        alt.Tooltip("time_per_token_us:Q", title="time per token [µs]", format=",.1f"),
    ]
    if "bound" in frame:
        tooltip.append(alt.Tooltip("bound:N", title="set by"))
    if many:
        tooltip.insert(0, alt.Tooltip(f"{color}:N"))
    if log_log:
        x = alt.X(
            "tokens:Q",
            title="Tokens in the step [tokens], log scale",
            scale=alt.Scale(type="log"),
            axis=alt.Axis(format=TOKENS_FORMAT),
        )
        y = alt.Y("step_time_ms:Q", title="Step time [ms], log scale", scale=alt.Scale(type="log"))
    else:
        x, y = _x_tokens(), _y_ms("step_time_ms", "Step time [ms]")
    base = alt.Chart(frame).encode(x=x, y=y, color=_color(frame, color, color.replace("_", " ") if color else ""))
    line = base.mark_line(strokeWidth=2.5)
    if many and color is not None:
        order = list(dict.fromkeys(frame[color]))
        dashes = [_DASHES[i % len(_DASHES)] for i in range(len(order))]
        line = line.encode(
            strokeDash=alt.StrokeDash(
                f"{color}:N", sort=order, scale=alt.Scale(domain=order, range=dashes), legend=None
            )
        )
    if legend_pick is not None:
        line = line.encode(opacity=alt.condition(legend_pick, alt.value(1.0), alt.value(0.15))).add_params(legend_pick)
    points = (
        base.mark_point(size=60, filled=True)
        .encode(opacity=alt.condition(hover, alt.value(1.0), alt.value(0.0)), tooltip=tooltip)
        .add_params(hover)
    )
    rule = alt.Chart(frame).mark_rule(color=PALETTE["muted"]).encode(x="tokens:Q").transform_filter(hover)
    layers: list[alt.Chart] = [line, rule, points]
    if knee_tokens is not None:
        knee = pd.DataFrame({"tokens": [float(knee_tokens)], "label": [f"knee ≈ {fmt_int(knee_tokens)} tokens"]})
        knee_rule = alt.Chart(knee).mark_rule(strokeDash=[4, 4], color=PALETTE["muted"]).encode(x="tokens:Q")
        knee_text = (
            alt.Chart(knee)
            .mark_text(align="left", dx=4, dy=-4, baseline="bottom", color=PALETTE["muted"])
            .encode(x="tokens:Q", y=alt.value(12), text="label:N")
        )
        layers += [knee_rule, knee_text]
    if marks is not None:
        marks = marks[marks.tokens <= frame.tokens.max()]
    if marks is not None and len(marks):
        mark_base = alt.Chart(marks).encode(
            x="tokens:Q",
            y="step_time_ms:Q",
            tooltip=[
                alt.Tooltip("tokens:Q", title="tokens in the step", format=TOKENS_FORMAT),
                alt.Tooltip("step_time_ms:Q", title="step time [ms]", format=",.2f"),
            ],
        )
        layers += [
            mark_base.mark_point(size=90, filled=True, color=PALETTE["highlight"]),
            mark_base.mark_text(align="left", dx=10, dy=12, stroke="white", strokeWidth=4).encode(text="label:N"),
            mark_base.mark_text(align="left", dx=10, dy=12, color=PALETTE["highlight"]).encode(text="label:N"),
        ]
    return alt.LayerChart(layer=list(layers), width=WIDTH, height=HEIGHT, title=title)


def moe_chart(frame: pd.DataFrame, *, title: str = "") -> alt.HConcatChart:
    """Left: weight bytes a step reads; right: its time, against the step's tokens (log axis)."""
    _check_rows(len(frame))
    frame = _slim(frame, ["tokens", "expected_experts", "weight_gb", "step_time_ms", "dense_step_time_ms"])
    x = alt.X(
        "tokens:Q",
        title="Tokens in the step [tokens]",
        scale=alt.Scale(type="log"),
        axis=alt.Axis(format=TOKENS_FORMAT),
    )
    tooltip = [
        alt.Tooltip("tokens:Q", title="tokens in the step", format=TOKENS_FORMAT),
        alt.Tooltip("expected_experts:Q", title="experts touched per layer", format=".2f"),
        alt.Tooltip("weight_gb:Q", title="weights read [GB]", format=".1f"),
        alt.Tooltip("step_time_ms:Q", title="step time [ms]", format=",.1f"),
        alt.Tooltip("dense_step_time_ms:Q", title="every expert read [ms]", format=",.1f"),
    ]
    weights = (
        alt.Chart(frame)
        .mark_line(strokeWidth=2.5, point=alt.OverlayMarkDef(size=30), color=PALETTE["curve"])
        .encode(x=x, y=alt.Y("weight_gb:Q", title="Weights read per step [GB]"), tooltip=tooltip)
        .properties(width=WIDTH - 120, height=HEIGHT - 40, title="Weights read")
    )
    long = frame.melt(
        id_vars=["tokens"],
        value_vars=["step_time_ms", "dense_step_time_ms"],
        var_name="curve",
        value_name="ms",
    )
    long["curve"] = long.curve.map(
        {"step_time_ms": "experts it routes to", "dense_step_time_ms": "every expert (dense)"}
    )
    times = (
        alt.Chart(long)
        .mark_line(strokeWidth=2.5, point=alt.OverlayMarkDef(size=30))
        .encode(
            x=x,
            y=alt.Y("ms:Q", title="Step time [ms]", scale=alt.Scale(type="log")),
            color=alt.Color(
                "curve:N",
                title="",
                scale=alt.Scale(
                    domain=["experts it routes to", "every expert (dense)"],
                    range=[PALETTE["curve"], PALETTE["muted"]],
                ),
                legend=alt.Legend(orient="bottom"),
            ),
            strokeDash=alt.StrokeDash(
                "curve:N",
                scale=alt.Scale(domain=["experts it routes to", "every expert (dense)"], range=[[1, 0], [5, 3]]),
                legend=None,
            ),
            tooltip=[
                alt.Tooltip("curve:N", title="reads"),
                alt.Tooltip("tokens:Q", title="tokens in the step", format=TOKENS_FORMAT),
                alt.Tooltip("ms:Q", title="step time [ms]", format=",.1f"),
            ],
        )
        .properties(width=WIDTH - 120, height=HEIGHT - 40, title="Step time")
    )
    return alt.hconcat(weights, times).properties(title=title)


_FIT_SPLITS = {"train": "fitted", "holdout": "held back"}


def measured_points_frame(table: pd.DataFrame) -> pd.DataFrame:
    """Measured steps as points: ``tokens`` (prefill + decodes), ``step_time_ms`` and more.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`budgetlab.read_measurements` output, or a :class:`~budgetlab.CalibrationResult`'s
        ``table`` (its ``split`` becomes ``used_for``: ``fitted`` or ``held back``).
    """
    _check_rows(len(table))
    frame = pd.DataFrame(
        {
            "tokens": (table.num_prefill_tokens + table.num_decode_tokens).astype(np.int64),
            "num_prefill_tokens": table.num_prefill_tokens.astype(np.int64),
            "num_decode_tokens": table.num_decode_tokens.astype(np.int64),
            "context_tokens": table.context_tokens.astype(np.int64),
            "step_time_ms": table.step_time_ms.astype(float),
        }
    )
    frame["step_time_s"] = frame.step_time_ms / 1e3
    frame["used_for"] = table["split"].map(_FIT_SPLITS).to_numpy() if "split" in table else "measured"
    return frame


def residual_frame(residuals: pd.DataFrame) -> pd.DataFrame:
    """Each cost model's error on every measured row, ready to draw.

    Parameters
    ----------
    residuals : pandas.DataFrame
        :func:`budgetlab.cost.fit.residuals` output: one row per measured row × cost model.

    Returns
    -------
    pandas.DataFrame
        The columns of :func:`measured_points_frame` plus ``cost_model``, ``predicted_ms``,
        ``residual_ms`` (predicted − measured) and ``relative_error`` (residual / measured).
    """
    frame = measured_points_frame(residuals)
    for column in ("cost_model", "predicted_ms", "residual_ms", "relative_error"):
        frame[column] = residuals[column].to_numpy()
    return frame


def calibration_chart(
    curves: pd.DataFrame, measured: pd.DataFrame, *, log_scale: bool = True, title: str = ""
) -> alt.LayerChart:
    """Measured step times as points over the cost models' curves.

    Parameters
    ----------
    curves : pandas.DataFrame
        :func:`cost_variants_frame` output (one line per ``cost_model``).
    measured : pandas.DataFrame
        :func:`measured_points_frame` output; the point shape tells fitted from held-back rows.
    log_scale : bool
        Logarithmic axes (the flat part and the line both stay visible).
    """
    _check_rows(len(curves) + len(measured))
    curves = _slim(curves, ["tokens", "step_time_ms", "cost_model"])
    scale = alt.Scale(type="log") if log_scale else alt.Scale(zero=True)
    x = alt.X("tokens:Q", title="Tokens in the step [tokens]", scale=scale, axis=alt.Axis(format=TOKENS_FORMAT))
    y = alt.Y("step_time_ms:Q", title="Step time [ms]", scale=scale)
    models = list(dict.fromkeys(curves.cost_model))
    lines = (
        alt.Chart(curves)
        .mark_line(strokeWidth=2.5)
        .encode(
            x=x,
            y=y,
            color=alt.Color("cost_model:N", title="model", sort=models, legend=alt.Legend(labelLimit=320)),
            tooltip=[
                alt.Tooltip("cost_model:N", title="model"),
                alt.Tooltip("tokens:Q", title="tokens in the step", format=TOKENS_FORMAT),
                alt.Tooltip("step_time_ms:Q", title="step time [ms]", format=",.2f"),
            ],
        )
    )
    points = (
        alt.Chart(measured)
        .mark_point(size=110, filled=True, color="black")
        .encode(
            x=x,
            y=y,
            shape=alt.Shape("used_for:N", title="measured step", legend=alt.Legend(orient="bottom")),
            tooltip=[
                alt.Tooltip("tokens:Q", title="tokens in the step", format=TOKENS_FORMAT),
                alt.Tooltip("num_decode_tokens:Q", title="of which decodes", format=TOKENS_FORMAT),
                alt.Tooltip("step_time_ms:Q", title="measured [ms]", format=",.2f"),
                alt.Tooltip("used_for:N", title="used for"),
            ],
        )
    )
    return (
        alt.LayerChart(layer=[lines, points])
        .resolve_scale(color="independent", shape="independent")
        .properties(width=WIDTH, height=HEIGHT + 40, title=title)
    )


def residual_chart(frame: pd.DataFrame, *, title: str = "") -> alt.LayerChart:
    """Each cost model's relative error on every measured row, against the step's tokens.

    Points above zero: the model predicts a slower step than measured.
    """
    _check_rows(len(frame))
    models = list(dict.fromkeys(frame.cost_model))
    data = frame.assign(error_percent=frame.relative_error * 100)
    x = alt.X(
        "tokens:Q",
        title="Tokens in the step [tokens]",
        scale=alt.Scale(type="log"),
        axis=alt.Axis(format=TOKENS_FORMAT),
    )
    base = alt.Chart(data).encode(
        x=x,
        y=alt.Y("error_percent:Q", title="Predicted − measured [% of measured]"),
        color=alt.Color("cost_model:N", title="model", sort=models, legend=alt.Legend(labelLimit=320)),
    )
    lines = base.mark_line(strokeWidth=1.5, opacity=0.5)
    points = base.mark_point(size=90, filled=True).encode(
        shape=alt.Shape("used_for:N", title="measured step"),
        tooltip=[
            alt.Tooltip("cost_model:N", title="model"),
            alt.Tooltip("tokens:Q", title="tokens in the step", format=TOKENS_FORMAT),
            alt.Tooltip("step_time_ms:Q", title="measured [ms]", format=",.2f"),
            alt.Tooltip("predicted_ms:Q", title="predicted [ms]", format=",.2f"),
            alt.Tooltip("error_percent:Q", title="error [%]", format="+.1f"),
            alt.Tooltip("used_for:N", title="used for"),
        ],
    )
    zero = alt.Chart(pd.DataFrame({"zero": [0.0]})).mark_rule(color=PALETTE["muted"]).encode(y="zero:Q")
    return alt.LayerChart(layer=[zero, lines, points], width=WIDTH, height=HEIGHT, title=title)
