"""Charts of prefix caching and async scheduling (notebook 09): turns, prompt work, budgets, KV.

The numbers are the experiments': :mod:`budgetlab.experiments.caching` simulates the variants and
returns the tidy tables drawn here (:func:`~budgetlab.experiments.caching.variants_table`,
:func:`~budgetlab.experiments.caching.ttft_by_turn`,
:func:`~budgetlab.experiments.caching.budget_by_caching`,
:func:`~budgetlab.experiments.caching.kv_pressure`). The functions here only reshape them for
display (long format, ``*_ms`` twins, labels) and draw them with the look of
:mod:`budgetlab.charts.style`; none computes a model number.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from budgetlab.charts.style import (
    HEIGHT,
    PALETTE,
    TOKENS_FORMAT,
    WIDTH,
    _check_rows,
    _check_table_rows,
    _slim,
)
from budgetlab.text import fmt_int, fmt_latency, fmt_percent

__all__ = [
    "ttft_by_turn_chart",
    "prompt_work_frame",
    "prompt_work_chart",
    "budget_caching_chart",
    "kv_pressure_chart",
    "caching_variants_table",
]

#: TTFT percentiles drawn, with their line style: solid p50, dashed p90.
_TTFT_PERCENTILES = {"ttft_p50_s": ("p50", [1, 0]), "ttft_p90_s": ("p90", [6, 3])}

#: The two parts of the prompt tokens sent: computed by a forward pass, or read from the cache.
_WORK_PARTS = {
    "computed": ("prompt tokens computed (prefill and recompute)", PALETTE["prompt"]),
    "cached": ("read from the prefix cache", PALETTE["decode"]),
}


def _require(frame: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in frame]
    if missing:
        raise ValueError(
            f"{what} needs the columns {', '.join(missing)}; pass the table budgetlab.experiments.caching made"
        )


def _ttft_long(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per key row × TTFT percentile: ``percentile`` ("p50"), ``ttft_ms``."""
    parts = []
    for column, (label, _) in _TTFT_PERCENTILES.items():
        part = frame[keys].copy()
        part["percentile"] = label
        part["ttft_ms"] = frame[column] * 1e3
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def _dash() -> alt.StrokeDash:
    labels = [label for label, _ in _TTFT_PERCENTILES.values()]
    dashes = [dash for _, dash in _TTFT_PERCENTILES.values()]
    return alt.StrokeDash("percentile:N", title="TTFT", sort=labels, scale=alt.Scale(domain=labels, range=dashes))


#: Colours of the runs, in the frame's order: "caching off" then "caching on" in every chart.
_SERIES_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2"]


def _series_color(frame: pd.DataFrame, column: str) -> alt.Color:
    """One colour per value of ``column``, fixed by an explicit domain and range, so a panel that
    draws only some of the values (the hit rate: caching on only) colours them as the legend does."""
    order = list(dict.fromkeys(frame[column]))
    return alt.Color(
        f"{column}:N",
        title="",
        sort=order,
        scale=alt.Scale(domain=order, range=_SERIES_COLORS[: len(order)]),
        legend=alt.Legend(orient="top", labelLimit=360),
    )


def ttft_by_turn_chart(frame: pd.DataFrame, *, title: str = "") -> alt.LayerChart:
    """TTFT p50 (solid) and p90 (dashed) per conversation turn, one colour per case.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`budgetlab.experiments.caching.ttft_by_turn` output (``case``, ``turn``,
        ``ttft_p50_s``, ``ttft_p90_s``, ``num_requests``, ``prompt_mean_tokens``,
        ``prefix_hit_mean_tokens``).
    title : str
    """
    _require(frame, ("case", "turn", "ttft_p50_s", "ttft_p90_s"), "ttft_by_turn_chart")
    keys = [c for c in ("case", "turn", "num_requests", "prompt_mean_tokens", "prefix_hit_mean_tokens") if c in frame]
    long = _slim(_ttft_long(frame, keys), [*keys, "percentile", "ttft_ms"])
    _check_rows(len(long))
    base = alt.Chart(long).encode(
        x=alt.X("turn:O", title="Turn of the conversation", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("ttft_ms:Q", title="Time to first token [ms]"),
        color=_series_color(long, "case"),
        tooltip=[
            alt.Tooltip("case:N"),
            alt.Tooltip("turn:O"),
            alt.Tooltip("percentile:N", title="TTFT"),
            alt.Tooltip("ttft_ms:Q", title="TTFT [ms]", format=",.1f"),
            alt.Tooltip("num_requests:Q", title="requests", format=",d"),
            alt.Tooltip("prompt_mean_tokens:Q", title="prompt, mean [tokens]", format=",.0f"),
            alt.Tooltip("prefix_hit_mean_tokens:Q", title="cache hit, mean [tokens]", format=",.0f"),
        ],
    )
    return alt.LayerChart(
        layer=[
            base.mark_line(strokeWidth=2.5).encode(strokeDash=_dash(), detail="percentile:N"),
            base.mark_point(size=50, filled=True),
        ],
        width=WIDTH + 60,
        height=HEIGHT,
        title=title,
    )


def prompt_work_frame(table: pd.DataFrame) -> pd.DataFrame:
    """Each run's prompt tokens split into computed and read from the cache: two rows per run.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`budgetlab.experiments.caching.variants_table` output (``variant``,
        ``prefill_tokens``, ``prefix_hit_tokens``, ``recompute_hit_tokens``).

    Returns
    -------
    pandas.DataFrame
        ``variant``, ``part`` (``computed`` or ``cached``), ``part_label``, ``tokens``
        (computed: ``prefill_tokens``; cached: first-admission plus recompute hits) [tokens],
        ``order``.
    """
    _require(table, ("variant", "prefill_tokens", "prefix_hit_tokens", "recompute_hit_tokens"), "prompt_work_frame")
    rows = []
    for row in table.itertuples():
        for order, (part, tokens) in enumerate(
            (("computed", row.prefill_tokens), ("cached", row.prefix_hit_tokens + row.recompute_hit_tokens))
        ):
            rows.append(
                {
                    "variant": row.variant,
                    "part": part,
                    "part_label": _WORK_PARTS[part][0],
                    "tokens": int(tokens),
                    "order": order,
                }
            )
    return pd.DataFrame(rows)


def prompt_work_chart(frame: pd.DataFrame, *, title: str = "") -> alt.Chart:
    """One stacked bar per run: the prompt tokens its forward passes computed, and the cache hits.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`prompt_work_frame` output.
    title : str
    """
    _require(frame, ("variant", "part", "part_label", "tokens", "order"), "prompt_work_chart")
    _check_rows(len(frame))
    parts = [p for p in _WORK_PARTS if p in set(frame.part)]
    labels = [_WORK_PARTS[p][0] for p in parts]
    return (
        alt.Chart(frame)
        .mark_bar(height=24)
        .encode(
            y=alt.Y("variant:N", title="", sort=list(dict.fromkeys(frame.variant)), axis=alt.Axis(labelLimit=360)),
            x=alt.X("tokens:Q", title="Prompt tokens [tokens]", stack="zero", axis=alt.Axis(format=TOKENS_FORMAT)),
            color=alt.Color(
                "part_label:N",
                title="",
                sort=labels,
                scale=alt.Scale(domain=labels, range=[_WORK_PARTS[p][1] for p in parts]),
                legend=alt.Legend(orient="bottom", labelLimit=360),
            ),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("variant:N", title="run"),
                alt.Tooltip("part_label:N", title="part"),
                alt.Tooltip("tokens:Q", title="[tokens]", format=TOKENS_FORMAT),
            ],
        )
        .properties(width=WIDTH + 60, height=alt.Step(36), title=title)
    )


def budget_caching_chart(frame: pd.DataFrame, *, budget_tokens: int | None = None, title: str = "") -> alt.LayerChart:
    """TTFT p50 (solid) and p90 (dashed) against the token budget, caching off and on.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`budgetlab.experiments.caching.budget_by_caching` output
        (``max_num_batched_tokens``, ``caching``, ``ttft_p50_s``, ``ttft_p90_s``,
        ``prefix_hit_rate``, ``prefill_tokens``).
    budget_tokens : int, optional
        A budget to mark with a vertical rule [tokens].
    title : str
    """
    _require(frame, ("max_num_batched_tokens", "caching", "ttft_p50_s", "ttft_p90_s"), "budget_caching_chart")
    keys = [
        c for c in ("max_num_batched_tokens", "caching", "prefix_hit_rate", "prefill_tokens", "itl_p99_s") if c in frame
    ]
    long = _slim(_ttft_long(frame, keys), [*keys, "percentile", "ttft_ms"])
    _check_rows(len(long))
    base = alt.Chart(long).encode(
        x=alt.X(
            "max_num_batched_tokens:Q",
            title="Token budget, max_num_batched_tokens [tokens], log scale",
            scale=alt.Scale(type="log", base=2),
            axis=alt.Axis(format=TOKENS_FORMAT),
        ),
        y=alt.Y("ttft_ms:Q", title="Time to first token [ms], log scale", scale=alt.Scale(type="log")),
        color=_series_color(long, "caching"),
        tooltip=[
            alt.Tooltip("caching:N", title="run"),
            alt.Tooltip("max_num_batched_tokens:Q", title="budget [tokens]", format=TOKENS_FORMAT),
            alt.Tooltip("percentile:N", title="TTFT"),
            alt.Tooltip("ttft_ms:Q", title="TTFT [ms]", format=",.1f"),
            alt.Tooltip("prefill_tokens:Q", title="prompt tokens computed", format=TOKENS_FORMAT),
            alt.Tooltip("prefix_hit_rate:Q", title="prefix-cache hit rate", format=".1%"),
        ],
    )
    layers: list[alt.Chart] = [
        base.mark_line(strokeWidth=2.5).encode(strokeDash=_dash(), detail="percentile:N"),
        base.mark_point(size=50, filled=True),
    ]
    if budget_tokens is not None:
        mark = pd.DataFrame({"max_num_batched_tokens": [budget_tokens]})
        layers.append(
            alt.Chart(mark).mark_rule(strokeDash=[2, 3], color=PALETTE["muted"]).encode(x="max_num_batched_tokens:Q")
        )
    return alt.LayerChart(layer=list(layers), width=WIDTH + 60, height=HEIGHT, title=title)


def kv_pressure_chart(frame: pd.DataFrame, *, title: str = "") -> alt.HConcatChart:
    """Left: the prefix-cache hit rate against the KV pool; right: TTFT p90, caching off and on.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`budgetlab.experiments.caching.kv_pressure` output (``kv_tokens``, ``caching``,
        ``enable_prefix_caching``, ``prefix_hit_rate``, ``ttft_p90_s``, ``num_preemptions``,
        ``recompute_hit_tokens``).
    title : str
    """
    _require(
        frame,
        ("kv_tokens", "caching", "enable_prefix_caching", "prefix_hit_rate", "ttft_p90_s", "num_preemptions"),
        "kv_pressure_chart",
    )
    _check_rows(len(frame))
    slim = _slim(
        frame.assign(ttft_p90_ms=frame.ttft_p90_s * 1e3),
        [
            "kv_tokens",
            "caching",
            "enable_prefix_caching",
            "prefix_hit_rate",
            "ttft_p90_ms",
            "num_preemptions",
            "recompute_hit_tokens",
        ],
    )
    x = alt.X(
        "kv_tokens:Q",
        title="KV pool [tokens], log scale",
        scale=alt.Scale(type="log", base=2),
        axis=alt.Axis(format=TOKENS_FORMAT),
    )
    tooltip = [
        alt.Tooltip("caching:N", title="run"),
        alt.Tooltip("kv_tokens:Q", title="KV pool [tokens]", format=TOKENS_FORMAT),
        alt.Tooltip("prefix_hit_rate:Q", title="prefix-cache hit rate", format=".1%"),
        alt.Tooltip("ttft_p90_ms:Q", title="TTFT p90 [ms]", format=",.1f"),
        alt.Tooltip("num_preemptions:Q", title="preemptions", format=",d"),
        alt.Tooltip("recompute_hit_tokens:Q", title="recompute hits [tokens]", format=TOKENS_FORMAT),
    ]
    color = _series_color(slim, "caching")
    cached = alt.Chart(slim[slim.enable_prefix_caching]).encode(
        x=x,
        y=alt.Y(
            "prefix_hit_rate:Q",
            title="Prefix-cache hit rate",
            axis=alt.Axis(format="%"),
            scale=alt.Scale(domain=[0, 1]),
        ),
        tooltip=tooltip,
    )
    hits = alt.LayerChart(
        layer=[
            cached.mark_line(strokeWidth=2.5).encode(color=color),
            cached.mark_point(size=60, filled=True).encode(color=color),
        ],
        width=WIDTH - 80,
        height=HEIGHT - 20,
    )
    both = alt.Chart(slim).encode(
        x=x,
        y=alt.Y("ttft_p90_ms:Q", title="TTFT p90 [ms], log scale", scale=alt.Scale(type="log")),
        color=color,
        tooltip=tooltip,
    )
    ttft = alt.LayerChart(
        layer=[both.mark_line(strokeWidth=2.5), both.mark_point(size=60, filled=True)],
        width=WIDTH - 80,
        height=HEIGHT - 20,
    )
    return alt.hconcat(hits, ttft, title=title)


def caching_variants_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`budgetlab.experiments.caching.variants_table` for reading: one column per run,
    units in the row labels."""
    _require(
        table,
        (
            "variant",
            "max_num_seqs",
            "ttft_p50_s",
            "ttft_p90_s",
            "itl_p99_s",
            "prefix_hit_rate",
            "prefill_tokens",
            "num_prompt_tokens",
            "num_steps",
            "num_forward_passes",
            "num_preemptions",
            "throughput_tokens_per_s",
            "makespan_s",
        ),
        "caching_variants_table",
    )
    _check_table_rows(len(table))
    rows = {
        "prefix caching": table.enable_prefix_caching.map({True: "on", False: "off"}),
        "scheduling": table.async_scheduling.map({True: "async", False: "sync"}),
        "max_num_seqs": table.max_num_seqs.map(fmt_int),
        "TTFT p50": table.ttft_p50_s.map(fmt_latency),
        "TTFT p90": table.ttft_p90_s.map(fmt_latency),
        "ITL p99": table.itl_p99_s.map(fmt_latency),
        "Prefix-cache hit rate": table.prefix_hit_rate.map(fmt_percent),
        "Prompt tokens sent": table.num_prompt_tokens.map(fmt_int),
        "Prompt tokens computed": table.prefill_tokens.map(fmt_int),
        "Steps": table.num_steps.map(fmt_int),
        "Forward passes": table.num_forward_passes.map(fmt_int),
        "Preemptions": table.num_preemptions.map(fmt_int),
        "Output throughput [tokens/s]": table.throughput_tokens_per_s.map(fmt_int),
        "All requests done after [s]": table.makespan_s.map(lambda v: f"{v:,.1f}"),
    }
    out = pd.DataFrame(rows)
    out.index = table.variant
    out = out.T
    out.columns.name = None
    out.index.name = ""
    return out
