"""Charts of the budget filled while one prompt arrives (notebooks 02-04): steps, sweeps, gaps.

The numbers are :mod:`budgetlab.budget`'s: :func:`~budgetlab.budget.prompt_timeline` (the
prompt's steps, priced as :func:`~budgetlab.budget.ttft_s` prices them),
:func:`~budgetlab.tradeoffs.budget_sweep`, :func:`~budgetlab.budget.longest_gap_s` and
:func:`~budgetlab.tradeoffs.budget_payoff`. The frame builders here only reshape them (long format,
labels, ``*_ms`` twins) and the chart builders draw them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from budgetlab._checks import int_at_least
from budgetlab.budget import longest_gap_s, prefill_tokens_left
from budgetlab.charts.style import (
    HEIGHT,
    MS_FORMAT,
    PALETTE,
    PART_LABELS,
    TOKENS_FORMAT,
    WIDTH,
    _budget_x,
    _check_rows,
    _color,
    _reference_rules,
    _slim,
    _target_reference,
    _y_ms,
)
from budgetlab.cost.protocol import CostModel
from budgetlab.text import fmt_budget, fmt_int, fmt_latency
from budgetlab.tradeoffs import BudgetPayoff


def budget_grid(
    *,
    num_decodes: int,
    max_budget_tokens: int,
    min_budget_tokens: int | None = None,
    include: Iterable[int] = (),
    num_points: int = 400,
) -> np.ndarray:
    """Token budgets for a sweep, from ``min_budget_tokens`` to ``max_budget_tokens`` [tokens].

    Evenly spaced, plus every value of ``include`` in that range (the notebook's listed
    budgets), sorted and unique. Every budget is above ``num_decodes``, so it leaves at least
    one token for the prompt (budgets just above it ingest a prompt a few tokens a step, which
    takes very long: start the sweep at the smallest budget of interest).

    Raises
    ------
    ParameterError
        A count that is not an int in its range (``num_decodes`` >= 0, the others >= 1), each
        named.
    ValueError
        ``max_budget_tokens`` below the smallest budget of the grid.
    """
    num_decodes = int_at_least("num_decodes", num_decodes, 0, what="an int >= 0 [requests]")
    max_budget_tokens = int_at_least("max_budget_tokens", max_budget_tokens, 1, what="an int >= 1 [tokens]")
    if min_budget_tokens is not None:
        int_at_least("min_budget_tokens", min_budget_tokens, 1, what="an int >= 1 [tokens], or None")
    num_points = int_at_least("num_points", num_points, 1, what="an int >= 1")
    listed = [int_at_least(f"include[{i}]", b, 1, what="an int >= 1 [tokens]") for i, b in enumerate(include)]
    low = num_decodes + 1 if min_budget_tokens is None else max(num_decodes + 1, int(min_budget_tokens))
    if max_budget_tokens < low:
        raise ValueError(
            f"max_budget_tokens ({max_budget_tokens}) must be at least {low} "
            f"(above num_decodes = {num_decodes} and min_budget_tokens)"
        )
    extra = np.asarray([b for b in listed if low <= b <= max_budget_tokens], dtype=np.int64)
    step = _nice_step((max_budget_tokens - low) / max(num_points - 1, 1))
    aligned = np.arange(-(-low // step) * step, max_budget_tokens + 1, step, dtype=np.int64)
    return np.unique(np.concatenate([[low, max_budget_tokens], aligned, extra]).astype(np.int64))


def _nice_step(raw: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 25, 50, 100, ... at least ``raw`` [tokens]: a grid step a
    slider can use, so every budget it shows is one the sweep computed."""
    for decade in (10**k for k in range(12)):
        for factor in (1, 2, 2.5, 5):
            step = factor * decade
            if step >= raw and float(step).is_integer():
                return int(step)
    return int(np.ceil(raw))


def _slider_steps(budgets: np.ndarray) -> tuple[int, int, int] | None:
    """``(low, high, step)`` of a slider whose every position is a budget of ``budgets``: the
    multiples of the grid's most common spacing, when the grid holds all of them; else ``None``."""
    values = np.unique(budgets.astype(np.int64))
    if len(values) < 3:
        return None
    gaps, counts = np.unique(np.diff(values), return_counts=True)
    step = int(gaps[np.argmax(counts)])
    aligned = values[values % step == 0]
    if len(aligned) < 2 or not np.array_equal(aligned, np.arange(aligned[0], aligned[-1] + 1, step)):
        return None
    return int(aligned[0]), int(aligned[-1]), step


def step_fill_frame(timeline: pd.DataFrame, *, max_steps: int = 40) -> pd.DataFrame:
    """How each step's budget is shared while one prompt is ingested: one row per step × part.

    Parameters
    ----------
    timeline : pandas.DataFrame
        :func:`budgetlab.budget.prompt_timeline` output (one scenario): the steps, their
        chunks and times, priced like :func:`budgetlab.budget.ttft_s`.
    max_steps : int
        Keep only the first ``max_steps`` steps (the total is in ``frame.attrs["num_steps"]``).

    Returns
    -------
    pandas.DataFrame
        ``step`` (1-based), ``part`` (``decode``, ``prompt``, ``unused``), ``part_label``,
        ``tokens``, ``step_tokens`` (tokens the step processes), ``step_time_s``,
        ``step_time_ms``, ``start_s``, ``end_s``, ``start_ms``, ``end_ms``, ``scenario``
        (:func:`~budgetlab.text.fmt_budget`), ``max_num_batched_tokens`` (NaN without a budget).
    """
    int_at_least("max_steps", max_steps, 1, what="an int >= 1 [steps]")
    budgets = timeline.max_num_batched_tokens.dropna()
    budget = int(budgets.iloc[0]) if len(budgets) else None
    wide = timeline.head(max_steps).rename(
        columns={"decode_tokens": "decode", "chunk_tokens": "prompt", "unused_tokens": "unused"}
    )
    frame = wide.melt(
        id_vars=["step", "step_tokens", "step_time_s", "start_s", "end_s"],
        value_vars=["decode", "prompt", "unused"],
        var_name="part",
        value_name="tokens",
    )
    frame["part_label"] = frame.part.map(PART_LABELS)
    for column in ("step_time", "start", "end"):
        frame[f"{column}_ms"] = frame[f"{column}_s"] * 1e3
    frame["scenario"] = fmt_budget(budget)
    frame["max_num_batched_tokens"] = float(budget) if budget is not None else np.nan
    frame = frame.sort_values(["step", "part"], ignore_index=True)
    frame.attrs["num_steps"] = len(timeline)
    return frame


def decoder_interaction_frame(*, budget_tokens: int, decoder_counts: Sequence[int]) -> pd.DataFrame:
    """One step's budget split between decodes and prompt for several decoder counts.

    The split is :func:`budgetlab.budget.prefill_tokens_left`.

    Returns
    -------
    pandas.DataFrame
        Two rows per count: ``num_decodes``, ``label`` (``"60 decoding users"``), ``part``
        (``decode``/``prompt``), ``part_label``, ``tokens``, ``max_num_batched_tokens``.
    """
    rows = []
    for count in decoder_counts:
        left = prefill_tokens_left(budget_tokens=budget_tokens, num_decodes=count)
        label = f"{fmt_int(count)} decoding users"
        rows.append({"num_decodes": count, "label": label, "part": "decode", "tokens": int(count)})
        rows.append({"num_decodes": count, "label": label, "part": "prompt", "tokens": int(left)})
    frame = pd.DataFrame(rows)
    frame["part_label"] = frame.part.map({"decode": PART_LABELS["decode"], "prompt": "left for prompt chunks"})
    frame["max_num_batched_tokens"] = budget_tokens
    return frame


def budget_sweep_frame(sweep: pd.DataFrame, *, listed: Iterable[int] = ()) -> pd.DataFrame:
    """:func:`budgetlab.tradeoffs.budget_sweep` ready to draw: ``*_ms`` twins and the listed budgets.

    Parameters
    ----------
    sweep : pandas.DataFrame
        :func:`budgetlab.tradeoffs.budget_sweep` output (one or several cost models).
    listed : iterable of int
        Budgets to flag in the ``listed`` column (the notebook's ``budgets`` parameter): the
        charts mark them with points, :func:`~budgetlab.charts.budget_sweep_table` lists them.

    Returns
    -------
    pandas.DataFrame
        The sweep's columns plus ``ttft_ms``, ``step_time_ms``, ``longest_gap_ms`` and ``listed``.
    """
    _check_rows(len(sweep))
    frame = sweep.copy()
    for metric in ("ttft", "step_time", "longest_gap"):
        frame[f"{metric}_ms"] = frame[f"{metric}_s"] * 1e3
    frame["listed"] = frame.max_num_batched_tokens.isin({int(b) for b in listed})
    return frame


def longest_gap_comparison_frame(
    cost: CostModel,
    *,
    budget_tokens: int,
    num_decodes: int,
    prompt_tokens: int,
    cost_model: str = "ideal",
    decode_context_tokens: int = 0,
) -> pd.DataFrame:
    """The decoders' longest gap (:func:`budgetlab.budget.longest_gap_s`) with the budget and
    without one: two rows.

    ``decode_context_tokens`` (tokens each decoder has cached [tokens]) matters only to cost
    models with attention or KV reads.

    Returns
    -------
    pandas.DataFrame
        ``scenario`` (``"budget 2,048"``, ``"no budget"``), ``max_num_batched_tokens`` (NaN
        without), ``longest_gap_s``, ``longest_gap_ms``, ``label`` (``"33.2 ms"``), ``cost_model``.
    """
    budget_tokens = int_at_least("budget_tokens", budget_tokens, 1, what="a whole number of tokens >= 1")
    rows = []
    for budget in (budget_tokens, None):
        gap = float(
            longest_gap_s(
                cost,
                budget_tokens=budget,
                num_decodes=num_decodes,
                prompt_tokens=prompt_tokens,
                decode_context_tokens=decode_context_tokens,
            )
        )
        rows.append(
            {
                "scenario": fmt_budget(budget),
                "max_num_batched_tokens": np.nan if budget is None else budget,
                "longest_gap_s": gap,
                "longest_gap_ms": gap * 1e3,
                "label": fmt_latency(gap),
                "cost_model": cost_model,
            }
        )
    return pd.DataFrame(rows)


def budget_payoff_frame(payoffs: Mapping[str, BudgetPayoff]) -> pd.DataFrame:
    """:func:`budgetlab.tradeoffs.budget_payoff` results of several cost models, one row each.

    Parameters
    ----------
    payoffs : mapping of str to BudgetPayoff
        Cost model name → its payoff (the same budgets for every model).

    Returns
    -------
    pandas.DataFrame
        ``cost_model`` and every number of :meth:`BudgetPayoff.numbers`, the budgets named as
        in every frame: ``max_num_batched_tokens`` and ``bigger_max_num_batched_tokens``
        [tokens] (the payoff's ``budget_tokens`` and ``bigger_budget_tokens``), ``ttft_s``,
        ``bigger_ttft_s``, ``ttft_without_budget_s``, ``saved_s``, ``saved_fraction``,
        ``above_floor_fraction``.
    """
    frame = pd.DataFrame([{"cost_model": name, **payoff.numbers()} for name, payoff in payoffs.items()])
    return frame.rename(
        columns={"budget_tokens": "max_num_batched_tokens", "bigger_budget_tokens": "bigger_max_num_batched_tokens"}
    )


def step_fill_chart(frame: pd.DataFrame, *, title: str = "") -> alt.LayerChart:
    """One stacked bar per step: decode tokens, the prompt chunk, the budget left unused.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`step_fill_frame` output (one scenario).
    """
    _check_rows(len(frame))
    order = ["decode", "prompt", "unused"]
    parts = [p for p in order if p in set(frame.part)]
    color = alt.Color(
        "part_label:N",
        title="",
        scale=alt.Scale(domain=[PART_LABELS[p] for p in parts], range=[PALETTE[p] for p in parts]),
        legend=alt.Legend(orient="bottom"),
    )
    shown = frame[frame.tokens > 0]
    bars = (
        alt.Chart(shown)
        .mark_bar()
        .encode(
            x=alt.X("step:O", title="Step", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("tokens:Q", title="Tokens in the step [tokens]", stack="zero", axis=alt.Axis(format=TOKENS_FORMAT)),
            color=color,
            order=alt.Order("part_order:Q"),
            tooltip=[
                alt.Tooltip("step:O"),
                alt.Tooltip("part_label:N", title="part"),
                alt.Tooltip("tokens:Q", title="tokens", format=TOKENS_FORMAT),
                alt.Tooltip("step_time_ms:Q", title="step time [ms]", format=",.1f"),
            ],
        )
        .transform_calculate(part_order=f"indexof({order!r}, datum.part)")
    )
    chunk = frame[frame.part == "prompt"]
    decode_tokens = float(frame[frame.part == "decode"].tokens.max() or 0)  # below each chunk
    labels = (
        alt.Chart(chunk)
        .mark_text(baseline="middle", color="white", fontWeight="bold")
        .encode(x="step:O", y=alt.Y("middle:Q"), text=alt.Text("tokens:Q", format=TOKENS_FORMAT))
        .transform_calculate(middle=f"datum.tokens / 2 + {decode_tokens}")
    )
    layers: list[alt.Chart] = [bars, labels]
    budget = frame.max_num_batched_tokens.dropna().unique()
    if len(budget):
        budget_frame = pd.DataFrame(
            {"max_num_batched_tokens": [float(budget[0])], "label": [fmt_budget(int(budget[0]))]}
        )
        layers.append(
            alt.Chart(budget_frame).mark_rule(strokeDash=[6, 3], color="black").encode(y="max_num_batched_tokens:Q")
        )
        layers.append(
            alt.Chart(budget_frame)
            .mark_text(align="right", baseline="bottom", dy=-3)
            .encode(x=alt.value("width"), y="max_num_batched_tokens:Q", text="label:N")
        )
    num_steps = frame.attrs.get("num_steps", frame.step.nunique())
    if not title and num_steps > frame.step.nunique():
        title = f"First {frame.step.nunique()} of {num_steps} steps"
    width = max(160, 60 * frame.step.nunique())
    return alt.LayerChart(layer=list(layers)).properties(width=width, height=HEIGHT, title=title)


def step_timeline_chart(frame: pd.DataFrame, *, title: str = "") -> alt.LayerChart:
    """Steps laid along time, one row per scenario: every decoder gets a token at each step end.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`step_fill_frame` outputs of several scenarios, concatenated.
    """
    _check_rows(len(frame))
    steps = frame[frame.part == "prompt"].rename(columns={"tokens": "prompt_tokens"})
    base = alt.Chart(steps).encode(
        y=alt.Y("scenario:N", title="", sort=list(dict.fromkeys(steps.scenario))),
    )
    bars = base.mark_bar(height=26, stroke="white", strokeWidth=2).encode(
        x=alt.X("start_ms:Q", title="Time since the prompt arrived [ms]"),
        x2="end_ms:Q",
        color=alt.Color(
            "prompt_tokens:Q",
            title="prompt tokens in the step",
            scale=alt.Scale(scheme="oranges"),
            legend=alt.Legend(format=TOKENS_FORMAT),
        ),
        tooltip=[
            alt.Tooltip("scenario:N"),
            alt.Tooltip("step:O"),
            alt.Tooltip("prompt_tokens:Q", title="prompt chunk [tokens]", format=TOKENS_FORMAT),
            alt.Tooltip("step_tokens:Q", title="tokens in the step", format=TOKENS_FORMAT),
            alt.Tooltip("step_time_ms:Q", title="step time = gap [ms]", format=",.1f"),
            alt.Tooltip("end_ms:Q", title="decoders get a token at [ms]", format=",.1f"),
        ],
    )
    ticks = base.mark_tick(color=PALETTE["decode"], thickness=3, size=34).encode(x="end_ms:Q")
    return alt.LayerChart(layer=[bars, ticks], width=WIDTH + 120, height=alt.Step(44), title=title)


def decoder_interaction_chart(frame: pd.DataFrame, *, title: str = "") -> alt.LayerChart:
    """One horizontal bar per decoder count: decode tokens, then what is left for prompts."""
    _check_rows(len(frame))
    labels = list(dict.fromkeys(frame.part_label))
    bars = (
        alt.Chart(frame)
        .mark_bar(height=26)
        .encode(
            y=alt.Y("label:N", title="", sort=list(dict.fromkeys(frame.label))),
            x=alt.X(
                "tokens:Q",
                title="Tokens of one step's budget [tokens]",
                stack="zero",
                axis=alt.Axis(format=TOKENS_FORMAT),
            ),
            color=alt.Color(
                "part_label:N",
                title="",
                scale=alt.Scale(domain=labels, range=[PALETTE["decode"], PALETTE["prompt"]]),
                legend=alt.Legend(orient="bottom"),
            ),
            order=alt.Order("part:N"),
            tooltip=[
                alt.Tooltip("label:N", title="decoders"),
                alt.Tooltip("part_label:N", title="part"),
                alt.Tooltip("tokens:Q", title="tokens", format=TOKENS_FORMAT),
            ],
        )
    )
    prompt = frame[frame.part == "prompt"]
    text = (
        alt.Chart(prompt)
        .mark_text(align="right", dx=-6, color="white", fontWeight="bold")
        .encode(
            y=alt.Y("label:N", sort=list(dict.fromkeys(frame.label))),
            x="max_num_batched_tokens:Q",
            text=alt.Text("tokens:Q", format=TOKENS_FORMAT),
        )
    )
    return alt.LayerChart(layer=[bars, text], width=WIDTH, height=alt.Step(40), title=title)


_METRICS = {
    "ttft": "Time to first token [ms]",
    "step_time": "Step time of a full budget [ms]",
    "longest_gap": "Longest gap between tokens [ms]",
}


def budget_sweep_chart(
    frame: pd.DataFrame,
    *,
    metric: str,
    references: Sequence[tuple[str, float]] = (),
    budget_marks: Sequence[tuple[str, int]] = (),
    budget_param: alt.Parameter | None = None,
    title: str = "",
    height: int = HEIGHT,
) -> alt.LayerChart:
    """One metric of :func:`budget_sweep_frame` against the budget, one line per cost model.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`budget_sweep_frame` output; several ``cost_model`` values draw several lines.
    metric : {"ttft", "step_time", "longest_gap"}
        Which column to draw (in ms).
    references : sequence of (label, seconds)
        Horizontal dashed lines, e.g. ``[("no budget", 0.0828), ("40 ms target", 0.04)]``.
    budget_marks : sequence of (label, tokens)
        Vertical dashed lines, e.g. ``[("2,464 tokens meet 40 ms", 2464)]``.
    budget_param : altair.Parameter, optional
        A budget chosen with a slider (see :func:`ttft_and_step_time_chart`): the point
        nearest to it is highlighted and labelled with its value.
    title : str
        Chart title.
    """
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {', '.join(_METRICS)}, got {metric!r}")
    _check_rows(len(frame))
    frame = _slim(
        frame, ["max_num_batched_tokens", "ttft_ms", "step_time_ms", "longest_gap_ms", "listed", "cost_model"]
    )
    field = f"{metric}_ms"
    tooltip = [
        alt.Tooltip("max_num_batched_tokens:Q", title="budget [tokens]", format=TOKENS_FORMAT),
        alt.Tooltip("ttft_ms:Q", title="TTFT [ms]", format=MS_FORMAT),
        alt.Tooltip("step_time_ms:Q", title="full step [ms]", format=MS_FORMAT),
        alt.Tooltip("longest_gap_ms:Q", title="longest gap [ms]", format=MS_FORMAT),
    ]
    many = frame.cost_model.nunique() > 1
    if many:
        tooltip.insert(0, alt.Tooltip("cost_model:N", title="cost model"))
    base = alt.Chart(frame).encode(
        x=_budget_x(),
        y=_y_ms(field, _METRICS[metric]),
        color=_color(frame, "cost_model", "cost model"),
    )
    layers: list[alt.Chart] = [
        base.mark_line(strokeWidth=2.5),
        base.mark_point(size=70, filled=True).encode(tooltip=tooltip).transform_filter("datum.listed"),
    ]
    if references:
        layers += _reference_rules(references)
    if budget_marks:
        marks = pd.DataFrame(
            {
                "label": [m[0] for m in budget_marks],
                "max_num_batched_tokens": [m[1] for m in budget_marks],
                "label_y_px": [4 + 15 * i for i in range(len(budget_marks))],  # one label under the other
            }
        )
        layers.append(
            alt.Chart(marks).mark_rule(strokeDash=[2, 3], color=PALETTE["muted"]).encode(x="max_num_batched_tokens:Q")
        )
        layers.append(
            alt.Chart(marks)
            .mark_text(align="left", dx=4, baseline="top", color=PALETTE["muted"])
            .encode(x="max_num_batched_tokens:Q", y=alt.Y("label_y_px:Q", scale=None), text="label:N")
        )
    if budget_param is not None:
        picked = (
            alt.Chart(frame)
            .transform_calculate(distance=f"abs(datum.max_num_batched_tokens - {budget_param.name})")
            .transform_joinaggregate(nearest="min(distance)", groupby=["cost_model"])
            .transform_filter("datum.distance == datum.nearest")
            .transform_calculate(
                readout=(
                    f"format(datum.max_num_batched_tokens, ',d') + ' tokens: ' + format(datum.{field}, ',.1f') + ' ms'"
                )
            )
            .encode(x=_budget_x(), y=alt.Y(f"{field}:Q"), tooltip=tooltip)
        )
        layers.append(picked.mark_point(size=160, filled=True, color=PALETTE["highlight"]))
        text: dict[str, Any] = {"align": "left", "dx": 8, "dy": -14, "fontWeight": "bold"}
        layers.append(  # a white halo keeps the readout legible over lines
            picked.mark_text(**text, stroke="white", strokeWidth=4).encode(text="readout:N")
        )
        layers.append(picked.mark_text(**text, color=PALETTE["highlight"]).encode(text="readout:N"))
    return alt.LayerChart(layer=list(layers), width=WIDTH - 60, height=height, title=title)


def ttft_and_step_time_chart(
    frame: pd.DataFrame,
    *,
    initial_budget_tokens: int,
    ttft_without_budget_s: float | None = None,
    target_step_s: float | None = None,
    budget_for_target: int | Mapping[str, int] | None = None,
    extra_ttft_references: Sequence[tuple[str, float]] = (),
) -> alt.HConcatChart:
    """TTFT and step time against the budget, side by side, with a budget slider.

    The slider (an Altair parameter bound to ``binding_range``) picks a budget; both panels
    highlight the nearest budget of the sweep and print its value, so a reader trades TTFT
    against step time by hand. On a :func:`budget_grid` the slider steps along the grid, so the
    budget it shows is always one the sweep computed (a step of 1 over a coarser grid showed 600
    while the panels read 615). Works in the offline HTML (Vega-Embed draws it in the page).

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`budget_sweep_frame` over a dense :func:`budget_grid`.
    initial_budget_tokens : int
        Where the slider starts [tokens].
    ttft_without_budget_s : float, optional
        TTFT with no budget, drawn as a reference on the left [s].
    target_step_s : float, optional
        Step-time target, drawn on the right [s].
    budget_for_target : int or mapping of str to int, optional
        Largest budget meeting the target, drawn on the right [tokens]; a mapping draws one per
        cost model, each labelled with its model (``{"idealized": 2464, "calibrated": 1548}``).
    extra_ttft_references : sequence of (label, seconds)
        More horizontal lines on the left, e.g. another cost model's no-budget TTFT.
    """
    low, high, step = int(frame.max_num_batched_tokens.min()), int(frame.max_num_batched_tokens.max()), 1
    steps = _slider_steps(frame.max_num_batched_tokens.to_numpy())
    if steps is not None:  # the slider moves along the grid: the budget it shows is the one drawn
        low, high, step = steps
    budget = alt.param(
        name="budget",
        value=int(min(max(initial_budget_tokens, low), high)),
        bind=alt.binding_range(min=low, max=high, step=step, name="Token budget [tokens] "),
    )
    left_refs = [("no budget: whole prompt in one step", ttft_without_budget_s)] if ttft_without_budget_s else []
    left_refs += list(extra_ttft_references)
    right_refs = [_target_reference(target_step_s)] if target_step_s else []
    if budget_for_target is None:
        right_marks: list[tuple[str, int]] = []
    elif isinstance(budget_for_target, Mapping):
        right_marks = [(f"{fmt_int(n)} tokens ({model})", int(n)) for model, n in budget_for_target.items()]
    else:
        right_marks = [(f"{fmt_int(budget_for_target)} tokens", budget_for_target)]
    left = budget_sweep_chart(
        frame, metric="ttft", references=left_refs, budget_param=budget, title="Time to first token"
    )
    right = budget_sweep_chart(
        frame,
        metric="step_time",
        references=right_refs,
        budget_marks=right_marks,
        budget_param=budget,
        title="Step time (every decoder's gap)",
    )
    return alt.hconcat(left, right).add_params(budget)


def longest_gap_models_chart(
    frame: pd.DataFrame, *, target_step_s: float | None = None, title: str = ""
) -> alt.LayerChart:
    """The longest gap with and without the budget, one bar per cost model side by side.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`longest_gap_comparison_frame` outputs of several cost models, concatenated.
    target_step_s : float, optional
        Draws the latency target [s].
    """
    _check_rows(len(frame))
    scenarios = list(dict.fromkeys(frame.scenario))
    models = list(dict.fromkeys(frame.cost_model))
    base = alt.Chart(frame).encode(
        x=alt.X("scenario:N", title="", sort=scenarios, axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("cost_model:N", sort=models),
        y=alt.Y("longest_gap_ms:Q", title="Longest gap between tokens [ms]"),
    )
    bars = base.mark_bar().encode(
        color=alt.Color("cost_model:N", title="cost model", sort=models, legend=alt.Legend(orient="bottom")),
        tooltip=[
            alt.Tooltip("scenario:N"),
            alt.Tooltip("cost_model:N", title="cost model"),
            alt.Tooltip("longest_gap_ms:Q", title="longest gap [ms]", format=MS_FORMAT),
        ],
    )
    text = base.mark_text(dy=-8, fontWeight="bold").encode(text="label:N")
    layers: list[alt.Chart] = [bars, text]
    if target_step_s is not None:
        layers += _reference_rules([_target_reference(target_step_s)])
    return alt.LayerChart(layer=list(layers), width=320, height=HEIGHT, title=title)
