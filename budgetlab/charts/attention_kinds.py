"""Charts and tables of models with different attention (notebook 12): the KV pool, the KV gate, the logs.

The numbers are the experiments': :mod:`budgetlab.experiments.attention_kinds` returns the tidy
tables drawn here (:func:`~budgetlab.experiments.attention_kinds.model_layouts`,
:func:`~budgetlab.experiments.attention_kinds.deployments`,
:func:`~budgetlab.experiments.attention_kinds.concurrency_by_length`,
:func:`~budgetlab.experiments.attention_kinds.kv_gate_runs`,
:func:`~budgetlab.experiments.attention_kinds.recommended_knobs`,
:func:`~budgetlab.experiments.attention_kinds.kv_log_rows`). The functions here only reshape
them for display (labels, long format, ``*_ms`` twins) and draw them with the look of
:mod:`budgetlab.charts.style`; every chart names the model that produced its numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import altair as alt
import pandas as pd

from budgetlab.charts.style import HEIGHT, TOKENS_FORMAT, WIDTH, _check_rows, _check_table_rows, _slim
from budgetlab.text import fmt_gb, fmt_int, fmt_percent, fmt_tokens

__all__ = [
    "FAMILY_COLORS",
    "layouts_table",
    "pools_table",
    "concurrency_chart",
    "gate_share_chart",
    "kv_timeline_chart",
    "knobs_table",
    "kv_logs_chart",
    "kv_logs_table",
]

#: One colour per attention family, the same in every chart of the notebook.
FAMILY_COLORS = {
    "full attention": "#4c78a8",
    "sliding window": "#f58518",
    "chunked local": "#b279a2",
    "MLA": "#54a24b",
    "hybrid (Mamba / linear)": "#e45756",
}

#: Colours of the gates, in :data:`budgetlab.metrics.GATES` order.
_GATE_COLORS = {"slot": "#72b7b2", "budget": "#eeca3b", "kv": "#e45756", "none": "#bab0ac"}
_GATE_LABELS = {
    "slot": "sequence slots (max_num_seqs)",
    "budget": "token budget",
    "kv": "KV blocks",
    "none": "nobody waiting",
}


def _require(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame]
    if missing:
        raise ValueError(
            f"{what} needs the columns {', '.join(missing)}; pass the table budgetlab.experiments.attention_kinds made"
        )


def _first(column: pd.Series) -> str:
    """The model a column names (its first value), ``"no rows"`` for an empty table."""
    return str(column.iloc[0]) if len(column) else "no rows"


def _family_color(frame: pd.DataFrame) -> alt.Color:
    present = [f for f in FAMILY_COLORS if f in set(frame.family)]
    return alt.Color(
        "family:N",
        title="Attention",
        scale=alt.Scale(domain=present, range=[FAMILY_COLORS[f] for f in present]),
        legend=alt.Legend(orient="bottom", columns=3),
    )


def layouts_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`~budgetlab.experiments.attention_kinds.model_layouts` for reading, one row per model."""
    _require(
        frame,
        ("name", "family", "num_params", "num_active_params", "layout", "kv_groups", "kv_bytes_per_token_every_token"),
        "the layouts table",
    )
    _check_table_rows(len(frame))
    return pd.DataFrame(
        {
            "Model": frame.name.to_numpy(),
            "Attention": frame.family.to_numpy(),
            "Parameters (active)": [
                f"{total / 1e9:.1f} B ({active / 1e9:.1f} B)"
                for total, active in zip(frame.num_params, frame.num_active_params, strict=True)
            ],
            "Layers": frame.layout.to_numpy(),
            "vLLM KV-cache groups": frame.kv_groups.to_numpy(),
            "KV per token, layers keeping every token [B]": frame.kv_bytes_per_token_every_token.map(
                fmt_int
            ).to_numpy(),
            "KV per token, windowed layers [B]": frame.kv_bytes_per_token_windowed.map(fmt_int).to_numpy(),
            "State per request [MB]": (frame.state_bytes_per_request / 1e6).map(lambda v: f"{v:,.1f}").to_numpy(),
        }
    ).set_index("Model")


def pools_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`~budgetlab.experiments.attention_kinds.deployments` for reading, one row per model."""
    _require(frame, ("name", "tp", "deployable", "reason", "max_model_len", "memory_model"), "the pools table")
    _check_table_rows(len(frame))

    def cell(row: pd.Series, column: str, fmt: Callable[[Any], str]) -> str:
        value = row.get(column)
        return fmt(value) if row.deployable and value is not None and value == value else "–"

    length = fmt_tokens(int(frame.max_model_len.iloc[0])) if len(frame) else "max_model_len"
    rows = []
    for _, row in frame.iterrows():
        rows.append(
            {
                "Model": row["name"],
                "GPUs (TP)": int(row.tp) if row.deployable else f"none: {row.reason}",
                "Weights per GPU": cell(row, "weight_bytes_per_gpu", fmt_gb),
                "KV memory per GPU": cell(row, "kv_bytes", fmt_gb),
                "KV-cache groups": cell(row, "kv_groups", str),
                "Block [tokens]": cell(row, "block_size", fmt_int),
                "GPU KV cache size (vLLM's log) [tokens]": cell(row, "vllm_kv_cache_tokens", fmt_int),
                f"Max concurrency at {length}": cell(row, "max_concurrency", lambda v: f"{v:,.2f}"),
                "… with every layer full": cell(row, "max_concurrency_full_only", lambda v: f"{v:,.2f}"),
            }
        )
    return pd.DataFrame(rows, columns=list(rows[0]) if rows else ["Model"]).set_index("Model")


def concurrency_chart(frame: pd.DataFrame, *, title: str = "") -> alt.Chart:
    """vLLM's "Maximum concurrency" [requests, log] against ``max_model_len`` [tokens, log], one
    line per model and manager (dashed: every layer full)."""
    _require(frame, ("name", "family", "max_model_len", "manager", "max_concurrency", "memory_model"), "the chart")
    _check_rows(len(frame))
    data = _slim(frame[frame.max_concurrency > 0], ["name", "family", "max_model_len", "manager", "max_concurrency"])
    data["series"] = data["name"] + " — " + data["manager"]
    return (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "max_model_len:Q",
                title="Tokens per request, max_model_len [tokens, log scale]",
                scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(format=TOKENS_FORMAT),
            ),
            y=alt.Y(
                "max_concurrency:Q",
                title=f"Requests the pool holds [log scale] ({_first(frame.memory_model)})",
                scale=alt.Scale(type="log"),
            ),
            color=_family_color(data),
            strokeDash=alt.StrokeDash("manager:N", title="KV cache manager", legend=alt.Legend(orient="bottom")),
            detail="series:N",
            tooltip=[
                alt.Tooltip("name:N", title="model"),
                alt.Tooltip("manager:N"),
                alt.Tooltip("max_model_len:Q", format=TOKENS_FORMAT),
                alt.Tooltip("max_concurrency:Q", title="max concurrency", format=",.2f"),
            ],
        )
        .properties(width=WIDTH, height=HEIGHT, title=title)
    )


def _run_label(frame: pd.DataFrame) -> pd.Series:
    short = frame.manager.astype(str).map(lambda m: "hybrid manager" if m.startswith("hybrid") else "every layer full")
    return frame.name.astype(str) + " (" + short.astype(str) + ")"


def gate_share_chart(table: pd.DataFrame, *, title: str = "") -> alt.Chart:
    """Which gate held waiting requests back, as a share of busy time, one bar per simulated run."""
    _require(table, ("name", "manager", "simulated", "cost_model", *(f"gate_{g}" for g in _GATE_COLORS)), "the chart")
    runs = table[table.simulated.astype(bool)]
    _check_rows(4 * len(runs))
    label = _run_label(runs)
    long = pd.concat(
        [
            pd.DataFrame({"run": label, "gate": _GATE_LABELS[g], "order": i, "fraction": runs[f"gate_{g}"].to_numpy()})
            for i, g in enumerate(_GATE_COLORS)
        ],
        ignore_index=True,
    )
    return (
        alt.Chart(_slim(long, ["run", "gate", "order", "fraction"]))
        .mark_bar()
        .encode(
            y=alt.Y("run:N", title=None, sort=list(dict.fromkeys(label)), axis=alt.Axis(labelLimit=320)),
            x=alt.X(
                "fraction:Q",
                title=f"Share of busy time (simulated, {_first(table.cost_model)} cost)",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1]),
            ),
            color=alt.Color(
                "gate:N",
                title="Requests held back by",
                scale=alt.Scale(domain=list(_GATE_LABELS.values()), range=list(_GATE_COLORS.values())),
                legend=alt.Legend(orient="bottom", columns=2),
            ),
            order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("run:N"), alt.Tooltip("gate:N"), alt.Tooltip("fraction:Q", format=".1%")],
        )
        .properties(width=WIDTH, title=title)
    )


def kv_timeline_chart(timeline: pd.DataFrame, *, title: str = "") -> alt.FacetChart:
    """The share of the KV pool held [-] over time [s], one panel per model, one line per manager."""
    _require(timeline, ("name", "manager", "time_s", "kv_used_fraction", "cost_model"), "the chart")
    _check_rows(len(timeline))
    data = _slim(timeline, ["name", "manager", "time_s", "kv_used_fraction", "num_running"])
    return (
        alt.Chart(data)
        .mark_line()
        .encode(
            x=alt.X("time_s:Q", title=f"Time [s] (simulated, {_first(timeline.cost_model)} cost)"),
            y=alt.Y("kv_used_fraction:Q", title="KV pool held", axis=alt.Axis(format="%")),
            color=alt.Color("manager:N", title="KV cache manager", legend=alt.Legend(orient="bottom")),
            tooltip=[
                alt.Tooltip("name:N", title="model"),
                alt.Tooltip("manager:N"),
                alt.Tooltip("time_s:Q", format=".1f"),
                alt.Tooltip("kv_used_fraction:Q", format=".0%"),
                alt.Tooltip("num_running:Q", title="running"),
            ],
        )
        .properties(width=WIDTH, height=90)
        .facet(row=alt.Row("name:N", title=None, sort=list(dict.fromkeys(data.name))))
        .properties(title=title)
    )


def knobs_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`~budgetlab.experiments.attention_kinds.recommended_knobs` for reading, one row per model."""
    _require(frame, ("name", "tp", "tuned", "reason", "requests_pool_holds", "cost_model"), "the knobs table")
    _check_table_rows(len(frame))
    rows = []
    for _, row in frame.iterrows():
        tuned = bool(row.tuned)
        rows.append(
            {
                "Model": row["name"],
                "GPUs (TP)": int(row.tp),
                "max_num_batched_tokens": fmt_int(row.max_num_batched_tokens) if tuned else f"– ({row.reason})",
                "max_num_seqs": fmt_int(row.max_num_seqs) if tuned else "–",
                "Capacity [requests/s]": f"{row.capacity_per_s:.3g}" if tuned else "–",
                "Binding gate": row.binding_gate if tuned else "–",
                "Tuner's first max_num_seqs": fmt_int(row.first_max_num_seqs) if tuned else "–",
                "Mean requests the pool holds": f"{row.requests_pool_holds:,.1f}",
                "Step cost": row.cost_model,
            }
        )
    return pd.DataFrame(rows, columns=list(rows[0]) if rows else ["Model"]).set_index("Model")


def kv_logs_chart(rows: pd.DataFrame, *, title: str = "") -> alt.LayerChart | alt.FacetChart:
    """Predicted against logged "GPU KV cache size" [tokens, log-log], one point per compared
    start-up, coloured by attention family, with the line of equality."""
    _require(
        rows, ("status", "family", "checkpoint", "kv_tokens_logged", "kv_tokens_predicted", "memory_model"), "the chart"
    )
    done = rows[rows.status == "compared"]
    _check_rows(len(done))
    data = _slim(
        done,
        ["row_id", "checkpoint", "family", "tp", "kv_tokens_logged", "kv_tokens_predicted", "kv_tokens_error_fraction"],
    )
    low = float(min(data.kv_tokens_logged.min(), data.kv_tokens_predicted.min())) if len(data) else 1.0
    high = float(max(data.kv_tokens_logged.max(), data.kv_tokens_predicted.max())) if len(data) else 2.0
    scale = alt.Scale(type="log", domain=[low / 1.5, high * 1.5])
    points = (
        alt.Chart(data)
        .mark_point(filled=True, size=60)
        .encode(
            x=alt.X("kv_tokens_logged:Q", title="GPU KV cache size logged by vLLM 0.19 [tokens]", scale=scale),
            y=alt.Y("kv_tokens_predicted:Q", title=f"Predicted [tokens] ({_first(rows.memory_model)})", scale=scale),
            color=_family_color(data),
            tooltip=[
                alt.Tooltip("row_id:Q", title="row"),
                alt.Tooltip("checkpoint:N"),
                alt.Tooltip("tp:Q", title="TP"),
                alt.Tooltip("kv_tokens_logged:Q", title="logged", format=","),
                alt.Tooltip("kv_tokens_predicted:Q", title="predicted", format=","),
                alt.Tooltip("kv_tokens_error_fraction:Q", title="error", format="+.1%"),
            ],
        )
    )
    diagonal = (
        alt.Chart(pd.DataFrame({"x": [low / 1.5, high * 1.5]}))
        .mark_line(color="#888888", strokeDash=[4, 3])
        .encode(x="x:Q", y="x:Q")
    )
    return alt.layer(diagonal, points).properties(width=WIDTH, height=WIDTH, title=title)


def kv_logs_table(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`~budgetlab.experiments.attention_kinds.kv_log_rows` for reading, one row per log row."""
    _require(rows, ("row_id", "checkpoint", "status", "family", "tp", "reason"), "the logs table")
    _check_table_rows(len(rows))

    def error(value: float) -> str:
        return fmt_percent(value) if value == value else "–"

    return pd.DataFrame(
        {
            "Row": rows.row_id.to_numpy(),
            "Checkpoint": rows.checkpoint.to_numpy(),
            "Attention": rows.family.fillna("").to_numpy(),
            "TP": [fmt_int(t) if t == t else "–" for t in rows.tp],
            "KV tokens logged": [fmt_int(v) if v == v else "–" for v in rows.kv_tokens_logged],
            "predicted": [fmt_int(v) if v == v else "–" for v in rows.kv_tokens_predicted],
            "error": rows.kv_tokens_error_fraction.map(error).to_numpy(),
            "Concurrency error": rows.max_concurrency_error_fraction.map(error).to_numpy(),
            "Within tolerance": [
                ("yes" if w else "no") if s == "compared" else "skipped"
                for s, w in zip(rows.status, rows.within, strict=True)
            ],
            "Why skipped": rows.reason.fillna("").to_numpy(),
        }
    ).set_index("Row")
