"""Charts and tables of speculative decoding (notebook 13): the budget with drafts, speed-up by load,
capacity by ``k``, and the published speed-ups beside budgetlab's predictions.

The numbers are the experiments': :mod:`budgetlab.experiments.speculation` returns the budget
table (:func:`~budgetlab.experiments.speculation.prefill_room_by_k`), the speed-ups by load
(:func:`~budgetlab.experiments.speculation.speculation_by_load`) and the capacity per ``k``
(:func:`~budgetlab.experiments.speculation.tune_speculation`'s ``table``), and
:mod:`budgetlab.experiments.spec_published` the published rows with their predictions
(:func:`~budgetlab.experiments.spec_published.predict_published`). The functions here only reshape
them for display and draw them with the look of :mod:`budgetlab.charts.style`; every chart and
table names the cost model that produced its numbers.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from budgetlab.charts.style import HEIGHT, PALETTE, WIDTH, _check_rows, _check_table_rows, _require_columns, _slim
from budgetlab.text import fmt_int, fmt_percent

__all__ = [
    "prefill_room_table",
    "speedup_by_load_chart",
    "capacity_by_k_table",
    "published_speedups_chart",
    "published_speedups_table",
]


def _first(column: pd.Series) -> str:
    """A column's first value as text (the cost model a table names), ``"no rows"`` when empty."""
    return str(column.iloc[0]) if len(column) else "no rows"


def prefill_room_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`~budgetlab.experiments.speculation.prefill_room_by_k` for reading, one row per ``k``."""
    _require_columns(
        frame,
        (
            "num_speculative_tokens",
            "max_num_batched_tokens",
            "num_decoding",
            "decode_tokens",
            "drafting_slots",
            "prefill_room_tokens",
            "prefill_room_fraction",
        ),
        "the budget table",
        "budgetlab.experiments.speculation.prefill_room_by_k",
    )
    _check_table_rows(len(frame))
    return pd.DataFrame(
        {
            "Drafts per request, k": frame.num_speculative_tokens.to_numpy(),
            "Budget [tokens]": frame.max_num_batched_tokens.map(fmt_int).to_numpy(),
            "Decoding requests": frame.num_decoding.map(fmt_int).to_numpy(),
            "Tokens the decodes ask, n (1 + k)": frame.decode_tokens.map(fmt_int).to_numpy(),
            "Input slots for the drafter": frame.drafting_slots.map(fmt_int).to_numpy(),
            "Left for prompts [tokens]": frame.prefill_room_tokens.map(fmt_int).to_numpy(),
            "Share of the budget": frame.prefill_room_fraction.map(lambda v: fmt_percent(v, 0)).to_numpy(),
        }
    ).set_index("Drafts per request, k")


def speedup_by_load_chart(table: pd.DataFrame, *, title: str = "") -> alt.LayerChart | alt.FacetChart:
    """Speed-up over ``k = 0`` (time per output token) against offered load, one line per ``k``;
    the dashed line at 1 is ``k = 0`` itself (below it, drafting is slower)."""
    _require_columns(
        table,
        ("rate_per_s", "num_speculative_tokens", "speedup", "tpot_mean_s", "cost"),
        "the chart",
        "budgetlab.experiments.speculation.speculation_by_load",
    )
    drafted = table[table.num_speculative_tokens > 0].copy()
    _check_rows(len(drafted))
    drafted["k"] = drafted.num_speculative_tokens.map(lambda k: f"k = {int(k)}")
    drafted["tpot_mean_ms"] = drafted.tpot_mean_s * 1e3
    data = _slim(drafted, ["rate_per_s", "k", "num_speculative_tokens", "speedup", "tpot_mean_ms"])
    order = list(dict.fromkeys(data.sort_values("num_speculative_tokens").k))
    lines = (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=alt.X("rate_per_s:Q", title="Offered load [requests/s]"),
            y=alt.Y(
                "speedup:Q",
                title=f"Speed-up over k = 0, time per output token (simulated, {_first(table.cost)} cost)",
                scale=alt.Scale(zero=False),
            ),
            color=alt.Color(
                "k:N",
                title="Drafts per step",
                sort=order,
                scale=alt.Scale(scheme="viridis", domain=order),
                legend=alt.Legend(orient="right"),
            ),
            tooltip=[
                alt.Tooltip("k:N"),
                alt.Tooltip("rate_per_s:Q", title="load [req/s]", format=",.3g"),
                alt.Tooltip("speedup:Q", format=".2f"),
                alt.Tooltip("tpot_mean_ms:Q", title="TPOT [ms]", format=",.2f"),
            ],
        )
    )
    one = (
        alt.Chart(pd.DataFrame({"speedup": [1.0], "label": ["k = 0 (no drafts)"]}))
        .mark_rule(strokeDash=[6, 3], color=PALETTE["reference"])
        .encode(y="speedup:Q", tooltip=[alt.Tooltip("label:N")])
    )
    return alt.layer(one, lines).properties(width=WIDTH, height=HEIGHT, title=title)


def capacity_by_k_table(table: pd.DataFrame, *, cost_model: str) -> pd.DataFrame:
    """:func:`~budgetlab.experiments.speculation.tune_speculation`'s ``table`` for reading, one
    row per ``k``; ``cost_model`` names the step cost it was simulated with."""
    _require_columns(
        table,
        ("num_speculative_tokens", "status", "capacity_per_s", "gain"),
        "the capacity table",
        "budgetlab.experiments.speculation.tune_speculation",
    )
    _check_table_rows(len(table))
    return pd.DataFrame(
        {
            "Drafts per request, k": table.num_speculative_tokens.to_numpy(),
            f"Capacity under the SLO [requests/s] ({cost_model} cost)": [
                f"{c:.3g}" if c == c else f"– ({s})" for c, s in zip(table.capacity_per_s, table.status, strict=True)
            ],
            "Over k = 0": [f"{g:.2f}×" if g == g else "–" for g in table.gain],
        }
    ).set_index("Drafts per request, k")


def _setting(frame: pd.DataFrame) -> pd.Series:
    k = frame.num_speculative_tokens.map(lambda v: f"k = {int(v)}" if v == v and v is not None else "k not given")
    return frame.method.astype(str) + ", " + k + ", " + frame.load.astype(str)


def published_speedups_chart(frame: pd.DataFrame, *, title: str = "") -> alt.LayerChart | alt.FacetChart:
    """Predicted against published speed-up [-], one point per reproduced row, coloured by source,
    with the line of equality (above it, budgetlab predicts more than was measured) and dashed
    lines at 1 (no gain)."""
    _require_columns(
        frame,
        (
            "key",
            "source",
            "method",
            "num_speculative_tokens",
            "load",
            "reference_speedup",
            "predicted_speedup",
            "cost_model",
            "reproduced",
        ),
        "the chart",
        "budgetlab.experiments.spec_published.predict_published",
    )
    done = frame[frame.reproduced.astype(bool)].copy()
    _check_rows(len(done))
    done["setting"] = _setting(done)
    data = _slim(done, ["key", "source", "setting", "reference_speedup", "predicted_speedup"])
    values = [*data.reference_speedup, *data.predicted_speedup, 1.0]
    low, high = min(values) * 0.9, max(values) * 1.05
    scale = alt.Scale(domain=[low, high])
    points = (
        alt.Chart(data)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X("reference_speedup:Q", title="Published speed-up (measured in vLLM)", scale=scale),
            y=alt.Y(
                "predicted_speedup:Q",
                title=f"Predicted speed-up (simulated, {_first(done.cost_model)} cost)",
                scale=scale,
            ),
            color=alt.Color("source:N", title="Source", legend=alt.Legend(orient="bottom", columns=1, labelLimit=360)),
            shape=alt.Shape("source:N", legend=None),
            tooltip=[
                alt.Tooltip("key:N", title="row"),
                alt.Tooltip("setting:N"),
                alt.Tooltip("reference_speedup:Q", title="published", format=".3f"),
                alt.Tooltip("predicted_speedup:Q", title="predicted", format=".3f"),
            ],
        )
    )
    diagonal = (
        alt.Chart(pd.DataFrame({"x": [low, high]}))
        .mark_line(color=PALETTE["muted"], strokeDash=[4, 3])
        .encode(x="x:Q", y="x:Q")
    )
    ones = alt.Chart(pd.DataFrame({"v": [1.0]}))
    rules = [
        ones.mark_rule(color=PALETTE["reference"], strokeDash=[6, 3]).encode(x="v:Q"),
        ones.mark_rule(color=PALETTE["reference"], strokeDash=[6, 3]).encode(y="v:Q"),
    ]
    return alt.layer(diagonal, *rules, points).properties(width=WIDTH, height=WIDTH, title=title)


def published_speedups_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`~budgetlab.experiments.spec_published.predict_published`'s table for reading, one row
    per published row: the source's words, budgetlab's prediction, their ratio and direction."""
    _require_columns(
        frame,
        (
            "key",
            "source",
            "published_speedup_text",
            "reference_speedup",
            "predicted_speedup",
            "predicted_over_published",
            "direction_agrees",
            "reproduced",
            "cost_model",
            "not_reproduced_because",
        ),
        "the published table",
        "budgetlab.experiments.spec_published.predict_published",
    )
    _check_table_rows(len(frame))
    rows = []
    for _, row in frame.iterrows():
        done = bool(row.reproduced)
        rows.append(
            {
                "Row": row.key,
                "Source": row.source,
                "Setting": f"{row.method}, "
                + (f"k = {int(row.num_speculative_tokens)}" if done else "k not in the text")
                + f", {row.load}",
                "Published": row.published_speedup_text,
                "Published speed-up": f"{row.reference_speedup:.3f}"
                if row.reference_speedup == row.reference_speedup
                else "–",
                "Predicted": f"{row.predicted_speedup:.3f} ({row.cost_model} cost)" if done else "not reproduced",
                "Predicted / published": f"{row.predicted_over_published:.2f}" if done else "–",
                "Same direction": ("yes" if row.direction_agrees else "no") if done else "–",
                "Why not reproduced": row.not_reproduced_because,
            }
        )
    return pd.DataFrame(rows, columns=list(rows[0]) if rows else ["Row"]).set_index("Row")
