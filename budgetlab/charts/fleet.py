"""Charts and tables of fleets (notebook 14): replicas needed by load and router, the
throughput–interactivity frontier, and what the router buys.

The numbers are the experiments': :func:`~budgetlab.experiments.replicas.replicas_by_load`,
:func:`~budgetlab.experiments.pareto.throughput_frontier` and
:func:`~budgetlab.experiments.replicas.compare_routers` make the tables; the functions here only
reshape them for display and draw them with the look of :mod:`budgetlab.charts.style`. Every
chart and table names the cost model that produced its numbers.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from budgetlab.charts.style import HEIGHT, PALETTE, WIDTH, _check_rows, _check_table_rows, _require_columns, _slim
from budgetlab.text import fmt_int, fmt_percent

__all__ = ["replicas_by_load_chart", "frontier_chart", "frontier_table", "router_comparison_table"]


def _cost(frame: pd.DataFrame) -> str:
    return str(frame.cost.iloc[0]) if len(frame) else "no rows"


def replicas_by_load_chart(table: pd.DataFrame, *, title: str = "") -> alt.LayerChart | alt.FacetChart:
    """Replicas needed against offered load, one line per router (steps: a replica is whole)."""
    _require_columns(
        table,
        ("rate_per_s", "router", "num_replicas", "ttft_p90_s", "itl_p90_s", "cost"),
        "the chart",
        "budgetlab.experiments.replicas.replicas_by_load",
    )
    _check_rows(len(table))
    data = _slim(table.assign(ttft_p90_ms=table.ttft_p90_s * 1e3, itl_p90_ms=table.itl_p90_s * 1e3), [
        "rate_per_s", "router", "num_replicas", "ttft_p90_ms", "itl_p90_ms",
    ])  # fmt: skip
    lines = (
        alt.Chart(data)
        .mark_line(point=True, interpolate="step-after")
        .encode(
            x=alt.X("rate_per_s:Q", title="Offered load [requests/s]"),
            y=alt.Y(
                "num_replicas:Q",
                title=f"Replicas that meet the SLO (simulated, {_cost(table)} cost)",
                axis=alt.Axis(tickMinStep=1),
                scale=alt.Scale(zero=True),
            ),
            color=alt.Color("router:N", title="Router", legend=alt.Legend(orient="right")),
            strokeDash=alt.StrokeDash("router:N", legend=None),
            tooltip=[
                alt.Tooltip("router:N"),
                alt.Tooltip("rate_per_s:Q", title="load [req/s]", format=",.3g"),
                alt.Tooltip("num_replicas:Q", title="replicas"),
                alt.Tooltip("ttft_p90_ms:Q", title="TTFT p90 [ms]", format=",.1f"),
                alt.Tooltip("itl_p90_ms:Q", title="ITL p90 [ms]", format=",.2f"),
            ],
        )
    )
    return alt.layer(lines).properties(width=WIDTH, height=HEIGHT, title=title)


_FRONTIER_COLUMNS = (
    "max_num_batched_tokens", "max_num_seqs", "concurrency", "num_replicas", "tokens_per_s_per_gpu",
    "tokens_per_s_per_user", "ttft_p90_s", "tpot_mean_s", "meets_slo", "on_front", "cost",
)  # fmt: skip
"""The frontier chart's input columns (:func:`budgetlab.experiments.pareto.throughput_frontier`)."""
_FRONTIER_DRAWN: dict[str, str | None] = {
    "ttft_p90_s": "ttft_p90_ms", "tpot_mean_s": "tpot_mean_ms", "meets_slo": "slo", "cost": None,
}  # fmt: skip
"""What the chart draws of an input column it converts (``None``: only its title uses it); the
others are drawn as they are."""


def frontier_chart(
    table: pd.DataFrame, *, slo_tokens_per_s_per_user: float | None = None, title: str = ""
) -> alt.LayerChart | alt.FacetChart:
    """Tokens/s per GPU against tokens/s per user, a point per configuration (colour: budget;
    filled: meets the SLO), the Pareto front joined, and the SLO's interactivity shaded (the
    region right of ``slo_tokens_per_s_per_user``, when given)."""
    _require_columns(table, _FRONTIER_COLUMNS, "the chart", "budgetlab.experiments.pareto.throughput_frontier")
    _check_rows(len(table))
    data = table.assign(
        budget=table.max_num_batched_tokens.map(fmt_int),
        slo=table.meets_slo.map({True: "meets the SLO", False: "breaks it"}),
        ttft_p90_ms=table.ttft_p90_s * 1e3,
        tpot_mean_ms=table.tpot_mean_s * 1e3,
    )
    data = _slim(data, ["budget", *(_FRONTIER_DRAWN.get(column, column) for column in _FRONTIER_COLUMNS)])
    budgets = list(dict.fromkeys(data.sort_values("max_num_batched_tokens").budget))
    x = alt.X("tokens_per_s_per_user:Q", title="Output tokens/s per user (throughput / concurrency)")
    y = alt.Y("tokens_per_s_per_gpu:Q", title=f"Output tokens/s per GPU (simulated, {_cost(table)} cost)")
    points = (
        alt.Chart(data)
        .mark_point(size=60)
        .encode(
            x=x,
            y=y,
            color=alt.Color("budget:N", title="Budget [tokens]", sort=budgets, scale=alt.Scale(scheme="viridis")),
            fill=alt.condition(
                alt.datum.slo == "meets the SLO",
                alt.Color("budget:N", sort=budgets, scale=alt.Scale(scheme="viridis"), legend=None),
                alt.value("white"),
            ),
            shape=alt.Shape(
                "slo:N",
                scale=alt.Scale(domain=["meets the SLO", "breaks it"], range=["square", "circle"]),
                legend=None,  # said by the subtitle: filled squares meet it, hollow circles break it
            ),
            tooltip=[
                alt.Tooltip("budget:N", title="budget [tokens]"),
                alt.Tooltip("max_num_seqs:Q", title="max_num_seqs"),
                alt.Tooltip("concurrency:Q", title="clients"),
                alt.Tooltip("num_replicas:Q", title="replicas"),
                alt.Tooltip("tokens_per_s_per_user:Q", title="tokens/s per user", format=",.1f"),
                alt.Tooltip("tokens_per_s_per_gpu:Q", title="tokens/s per GPU", format=",.0f"),
                alt.Tooltip("ttft_p90_ms:Q", title="TTFT p90 [ms]", format=",.1f"),
                alt.Tooltip("tpot_mean_ms:Q", title="TPOT [ms]", format=",.2f"),
                alt.Tooltip("slo:N", title="SLO"),
            ],
        )
    )
    front = (
        alt.Chart(data[data.on_front].sort_values("tokens_per_s_per_user"))
        .mark_line(color=PALETTE["highlight"], strokeWidth=2)
        .encode(x=x, y=y, order=alt.Order("tokens_per_s_per_user:Q"))
    )
    layers: list[alt.Chart] = []
    if slo_tokens_per_s_per_user is not None and len(data):
        right = max(float(data.tokens_per_s_per_user.max()), slo_tokens_per_s_per_user) * 1.05
        band = pd.DataFrame(
            {"start": [slo_tokens_per_s_per_user], "end": [right], "label": ["the SLO's time per token allows"]}
        )
        layers.append(
            alt.Chart(band)
            .mark_rect(color=PALETTE["reference"], opacity=0.12)
            .encode(x="start:Q", x2="end:Q", tooltip=[alt.Tooltip("label:N")])
        )
    heading = alt.TitleParams(
        title or "", subtitle=["Filled squares meet the SLO, hollow circles break it; the line is the Pareto front"]
    )
    return alt.layer(*layers, front, points).properties(width=WIDTH, height=HEIGHT, title=heading)


def frontier_table(table: pd.DataFrame) -> pd.DataFrame:
    """The Pareto front of :func:`~budgetlab.experiments.pareto.throughput_frontier` for
    reading, from the most interactive configuration to the most throughput per GPU."""
    _require_columns(
        table,
        ("max_num_batched_tokens", "max_num_seqs", "concurrency", "num_replicas", "tokens_per_s_per_gpu",
         "tokens_per_s_per_user", "ttft_p90_s", "tpot_mean_s", "on_front", "cost"),
        "the table",
        "budgetlab.experiments.pareto.throughput_frontier",
    )  # fmt: skip
    front = table[table.on_front].sort_values("tokens_per_s_per_user", ascending=False)
    _check_table_rows(len(front))
    cost = _cost(table)
    return pd.DataFrame(
        {
            "max_num_batched_tokens": front.max_num_batched_tokens.map(fmt_int),
            "max_num_seqs": front.max_num_seqs.map(fmt_int),
            "clients": front.concurrency.map(fmt_int),
            "replicas": front.num_replicas.map(fmt_int),
            f"tokens/s per user ({cost})": front.tokens_per_s_per_user.round(1),
            f"tokens/s per GPU ({cost})": front.tokens_per_s_per_gpu.round(0),
            "TTFT p90 [ms]": (front.ttft_p90_s * 1e3).round(1),
            "TPOT [ms]": (front.tpot_mean_s * 1e3).round(2),
        }
    ).reset_index(drop=True)


def router_comparison_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`~budgetlab.experiments.replicas.compare_routers` for reading, one row per router."""
    _require_columns(
        table,
        ("router", "ttft_p50_s", "ttft_p90_s", "itl_p90_s", "prefix_hit_rate", "throughput_tokens_per_s",
         "fewest_requests", "most_requests", "cost"),
        "the table",
        "budgetlab.experiments.replicas.compare_routers",
    )  # fmt: skip
    _check_table_rows(len(table))
    cost = _cost(table)
    return pd.DataFrame(
        {
            "router": table.router,
            f"TTFT p50 [ms] ({cost})": (table.ttft_p50_s * 1e3).round(1),
            f"TTFT p90 [ms] ({cost})": (table.ttft_p90_s * 1e3).round(1),
            f"ITL p90 [ms] ({cost})": (table.itl_p90_s * 1e3).round(2),
            "prefix-cache hits": table.prefix_hit_rate.map(lambda v: fmt_percent(v, decimals=0)),
            "output tokens/s": table.throughput_tokens_per_s.round(0),
            "requests per replica": [
                f"{fmt_int(a)}–{fmt_int(b)}" for a, b in zip(table.fewest_requests, table.most_requests, strict=True)
            ],
        }
    )
