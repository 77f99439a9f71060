"""The one look of every chart: palette, sizes, number formats, axes and the row limit.

Every chart builder in :mod:`budgetlab.charts` draws with these, so a colour, an axis title or
a tooltip format means the same thing in every notebook. ``_slim`` and ``_check_rows`` keep
the data Altair inlines in a report small.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from budgetlab.cost.protocol import hardware_of, model_of
from budgetlab.text import fmt_latency

#: Largest frame a chart builder accepts: Altair inlines the data in every report.
MAX_ROWS = 5000

#: Most rows a table for reading shows: longer ones belong in a chart.
MAX_TABLE_ROWS = 100

WIDTH = 420
HEIGHT = 260

#: One colour per meaning, the same in every notebook.
PALETTE: dict[str, str] = {
    "decode": "#4c78a8",  # decode tokens, decoding users
    "prompt": "#f58518",  # prompt (prefill) tokens
    "unused": "#d9d9d9",  # budget left unused
    "curve": "#4c78a8",  # a single curve
    "highlight": "#e45756",  # the point the slider or the text picks
    "reference": "#54a24b",  # a target or reference level
    "muted": "#7f7f7f",  # annotations
}

PART_LABELS = {
    "decode": "decode tokens (1 per user)",
    "prompt": "prompt chunk",
    "unused": "budget left unused",
}


TOKENS_FORMAT = ",d"
MS_FORMAT = ",.1f"


def _names(cost: object) -> dict[str, str]:
    """The GPU's and the model's names of a cost model (``""`` for one that prices neither)."""
    hardware, model = hardware_of(cost), model_of(cost)
    return {"hardware": hardware.name if hardware else "", "model": model.name if model else ""}


def _require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str, maker: str) -> None:
    """``ValueError`` naming the columns ``frame`` lacks and the function (``maker``) whose table has them."""
    missing = [c for c in columns if c not in frame]
    if missing:
        raise ValueError(f"{what} needs the columns {', '.join(missing)}; pass the table {maker} made")


def _check_table_rows(num_rows: int) -> None:
    if num_rows > MAX_TABLE_ROWS:
        raise ValueError(
            f"{num_rows} rows is more than a table for reading should show (limit {MAX_TABLE_ROWS}); "
            "list fewer rows, or draw them in a chart"
        )


def _check_rows(num_rows: int) -> None:
    if num_rows > MAX_ROWS:
        raise ValueError(f"{num_rows} rows is more than a report should inline (limit {MAX_ROWS}); use a coarser grid")


def _slim(frame: pd.DataFrame, columns: Sequence[str | None], *, digits: int = 4) -> pd.DataFrame:
    """Only the columns a chart draws, floats rounded: Altair inlines the data twice per chart
    (the Vega-Lite JSON and the HTML fallback), and papermill rewrites the notebook after every
    cell, so smaller data renders reports faster."""
    keep = [c for c in dict.fromkeys(columns) if c is not None and c in frame]
    slim = frame[keep].copy()
    for column in keep:
        if pd.api.types.is_float_dtype(slim[column]):
            slim[column] = slim[column].round(digits)
    return slim


def _x_tokens(title: str = "Tokens in the step [tokens]", field: str = "tokens") -> alt.X:
    return alt.X(f"{field}:Q", title=title, axis=alt.Axis(format=TOKENS_FORMAT))


def _y_ms(field: str, title: str, *, zero: bool = True) -> alt.Y:
    return alt.Y(f"{field}:Q", title=title, scale=alt.Scale(zero=zero))


def _color(frame: pd.DataFrame, column: str | None, title: str) -> alt.Color | alt.Value:
    if column is None or frame[column].nunique() <= 1:
        return alt.value(PALETTE["curve"])
    # colours in the frame's order, so "idealized" then "calibrated" look the same in every chart
    order = list(dict.fromkeys(frame[column]))
    return alt.Color(f"{column}:N", title=title, sort=order, legend=alt.Legend(labelLimit=320))


def _reference_rules(references: Sequence[tuple[str, float]], *, label_x: str | float = "width") -> list[alt.Chart]:
    """Dashed horizontal lines at latencies given in seconds (drawn in ms), each labelled above
    the line at ``label_x`` (the right edge by default): targets, SLO limits, no-budget TTFT."""
    ref = pd.DataFrame({"label": [r[0] for r in references], "value_ms": [r[1] * 1e3 for r in references]})
    return [
        alt.Chart(ref).mark_rule(strokeDash=[6, 3], color=PALETTE["reference"]).encode(y="value_ms:Q"),
        alt.Chart(ref)
        .mark_text(align="right", baseline="bottom", dy=-3, color=PALETTE["reference"])
        .encode(x=alt.value(label_x), y="value_ms:Q", text="label:N"),
    ]


def _target_reference(target_step_s: float) -> tuple[str, float]:
    """``("40 ms target", 0.04)``: a step-time target as a reference line."""
    return (f"{fmt_latency(target_step_s)} target", target_step_s)


def _budget_x() -> alt.X:
    return alt.X(
        "max_num_batched_tokens:Q",
        title="Token budget, max_num_batched_tokens [tokens]",
        axis=alt.Axis(format=TOKENS_FORMAT),
    )
