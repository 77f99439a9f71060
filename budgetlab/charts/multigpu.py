"""Charts and tables of multi-GPU serving (notebook 11): tensor parallelism, CUDA graphs, experts.

The numbers are the experiments': :mod:`budgetlab.experiments.multigpu` returns the tidy tables
drawn here (:func:`~budgetlab.experiments.multigpu.tp_deployments`,
:func:`~budgetlab.experiments.multigpu.decode_step_by_tp`,
:func:`~budgetlab.experiments.multigpu.tpot_by_tp`,
:func:`~budgetlab.experiments.multigpu.run_tpot_by_tp`,
:func:`~budgetlab.experiments.multigpu.read_all_reduce`,
:func:`~budgetlab.experiments.multigpu.all_reduce_by_size`,
:func:`~budgetlab.experiments.multigpu.graph_ladder`,
:func:`~budgetlab.experiments.multigpu.moe_ttft_by_budget`) and
:func:`budgetlab.moe_step_costs`. The functions here only reshape them for display (long format,
``*_ms`` and ``*_us`` twins, labels) and draw them with the look of :mod:`budgetlab.charts.style`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
from budgetlab.text import fmt_gb, fmt_int, fmt_tokens

__all__ = [
    "tp_deployments_table",
    "tp_per_token_frame",
    "run_per_token_frame",
    "tp_per_token_chart",
    "all_reduce_frame",
    "all_reduce_chart",
    "ladder_sizes_table",
    "graph_ladder_chart",
    "step_terms_chart",
    "moe_ttft_chart",
    "touched_experts_chart",
]

#: Colours of the graph modes, the same in every chart: graphs replayed, pieces replayed, none.
MODE_COLORS = {"FULL": PALETTE["decode"], "PIECEWISE": PALETTE["prompt"], "NONE": PALETTE["highlight"]}

_SERIES_COLORS = [
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac", "#eeca3b",
    "#000000", "#8c6d31",
]  # fmt: skip


def _require(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame]
    if missing:
        raise ValueError(
            f"{what} needs the columns {', '.join(missing)}; pass the table budgetlab.experiments.multigpu made"
        )


def _tp_x() -> alt.X:
    return alt.X(
        "tp:Q",
        title="Tensor-parallel GPUs [count]",
        scale=alt.Scale(type="log", base=2),
        axis=alt.Axis(values=[1, 2, 4, 8, 16], format="d"),
    )


def _series_color(frame: pd.DataFrame, column: str, title: str) -> alt.Color:
    order = list(dict.fromkeys(frame[column]))
    return alt.Color(
        f"{column}:N",
        title=title,
        sort=order,
        scale=alt.Scale(domain=order, range=_SERIES_COLORS[: len(order)] or _SERIES_COLORS[:1]),
        legend=alt.Legend(orient="bottom", labelLimit=360, columns=1),
    )


# --------------------------------------------------------------------------------------------
# Tensor parallelism
# --------------------------------------------------------------------------------------------


def tp_deployments_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`~budgetlab.experiments.multigpu.tp_deployments` for reading."""
    _require(frame, ("tp", "weight_bytes_per_gpu", "memory_bytes", "deployable", "kv_tokens", "reason"), "the table")
    _check_table_rows(len(frame))
    return pd.DataFrame(
        {
            "GPUs (TP)": frame.tp.to_numpy(),
            "Weights per GPU": frame.weight_bytes_per_gpu.map(fmt_gb).to_numpy(),
            "GPU memory": frame.memory_bytes.map(fmt_gb).to_numpy(),
            "Deployable": ["yes" if d else f"no: {r}" for d, r in zip(frame.deployable, frame.reason, strict=True)],
            "KV cache [tokens]": [
                fmt_tokens(k) if d else "–" for k, d in zip(frame.kv_tokens, frame.deployable, strict=True)
            ],
        }
    ).set_index("GPUs (TP)")


def tp_per_token_frame(decode: pd.DataFrame, tpot: pd.DataFrame, *, panel: str) -> pd.DataFrame:
    """The modelled decode step and the simulated time per output token against TP, long form.

    Parameters
    ----------
    decode : pandas.DataFrame
        :func:`~budgetlab.experiments.multigpu.decode_step_by_tp`.
    tpot : pandas.DataFrame
        :func:`~budgetlab.experiments.multigpu.tpot_by_tp`.
    panel : str
        The panel's title (the model and GPU).

    Returns
    -------
    pandas.DataFrame
        ``panel``, ``tp``, ``series``, ``kind`` (``"model"``), ``deployable``, ``time_s`` and
        ``time_ms``; rows that are not deployable are left out (no server runs them).
    """
    _require(decode, ("tp", "deployable", "num_decodes", "decode_step_s", "cost_model"), "the decode frame")
    _require(tpot, ("tp", "deployable", "rate_per_s", "tpot_mean_s", "cost_model"), "the TPOT frame")
    batch, rate = int(decode.num_decodes.iloc[0]), float(tpot.rate_per_s.iloc[0])
    parts = [
        pd.DataFrame(
            {
                "tp": decode.tp,
                "series": f"decode step of {fmt_int(batch)} users ({decode.cost_model.iloc[0]} cost)",
                "deployable": decode.deployable,
                "time_s": decode.decode_step_s,
            }
        ),
        pd.DataFrame(
            {
                "tp": tpot.tp,
                "series": f"time per output token, simulated at {rate:g} req/s ({tpot.cost_model.iloc[0]} cost)",
                "deployable": tpot.deployable,
                "time_s": tpot.tpot_mean_s,
            }
        ),
    ]
    out = pd.concat(parts, ignore_index=True)
    out = out[out.deployable].assign(panel=panel, kind="model")
    return out.assign(time_ms=out.time_s * 1e3)[["panel", "tp", "series", "kind", "deployable", "time_s", "time_ms"]]


def run_per_token_frame(runs: pd.DataFrame, model_names: Mapping[str, str]) -> pd.DataFrame:
    """Published runs rebuilt at other TPs, with the measured point, in the long form of
    :func:`tp_per_token_frame` (``kind`` ``"model"`` or ``"measured"``).

    Parameters
    ----------
    runs : pandas.DataFrame
        :func:`~budgetlab.experiments.multigpu.run_tpot_by_tp`.
    model_names : mapping
        Catalog slug -> display name.
    """
    _require(
        runs, ("run", "model", "rate_per_s", "tp", "deployable", "tpot_s_predicted", "tpot_s_measured"), "the frame"
    )
    rows = []
    for _, row in runs.iterrows():
        panel = f"{model_names.get(row.model, row.model)}, run {int(row.run)} at {row.rate_per_s:g} req/s"
        if row.deployable:
            rows.append(
                {
                    "panel": panel,
                    "tp": int(row.tp),
                    "series": f"time per output token, simulated ({row.cost_model} cost)",
                    "kind": "model",
                    "deployable": True,
                    "time_s": float(row.tpot_s_predicted),
                }
            )
        if pd.notna(row.tpot_s_measured):
            rows.append(
                {
                    "panel": panel,
                    "tp": int(row.tp),
                    "series": "time per output token, measured (real vLLM on H100)",
                    "kind": "measured",
                    "deployable": True,
                    "time_s": float(row.tpot_s_measured),
                }
            )
    out = pd.DataFrame(rows, columns=["panel", "tp", "series", "kind", "deployable", "time_s"])
    return out.assign(time_ms=out.time_s * 1e3)


def tp_per_token_chart(frame: pd.DataFrame, *, title: str = "") -> alt.HConcatChart:
    """One panel per ``panel`` value: time [ms] against TP, model lines, measured points as diamonds."""
    _require(frame, ("panel", "tp", "series", "kind", "time_ms"), "the chart")
    _check_rows(len(frame))
    data = _slim(frame, ["panel", "tp", "series", "kind", "time_ms"])
    color = _series_color(data, "series", "")
    panels = []
    for panel in dict.fromkeys(data.panel):
        part = data[data.panel == panel]
        base = alt.Chart(part).encode(
            x=_tp_x(),
            y=alt.Y("time_ms:Q", title="Time [ms]", scale=alt.Scale(zero=True)),
            color=color,
            tooltip=[
                alt.Tooltip("series:N"),
                alt.Tooltip("tp:Q", title="GPUs"),
                alt.Tooltip("time_ms:Q", title="time [ms]", format=".2f"),
            ],
        )
        model = base.transform_filter(alt.datum.kind == "model")
        measured = base.transform_filter(alt.datum.kind == "measured").mark_point(
            shape="diamond", size=160, filled=True
        )
        panels.append(
            alt.layer(model.mark_line(point=True), measured).properties(
                width=WIDTH // 2 + 60, height=HEIGHT, title=panel
            )
        )
    return alt.hconcat(*panels).properties(title=title)


# --------------------------------------------------------------------------------------------
# All-reduce
# --------------------------------------------------------------------------------------------


def _implementation_label(name: str, cuda_graph: str) -> str:
    short = {
        "ca_1stage": "vLLM custom, one-shot",
        "ca_2stage": "vLLM custom, two-shot",
        "pynccl": "NCCL",
        "symm_mem_multimem": "symmetric memory, multimem",
        "symm_mem_two_shot": "symmetric memory, two-shot",
    }.get(name)
    if short is None:
        short = "custom, database lookup" if "aiconfigurator" in name else name.split("(")[0].strip()
    graph = {"yes": "CUDA graph", "no": "no graph"}.get(cuda_graph, "graph unknown")
    return f"{short} ({graph})"


def all_reduce_frame(measured: pd.DataFrame | None, modelled: pd.DataFrame) -> pd.DataFrame:
    """Measured all-reduce latencies and the collective model's, long form.

    Parameters
    ----------
    measured : pandas.DataFrame or None
        :func:`~budgetlab.experiments.multigpu.read_all_reduce` (``None``: the model alone).
    modelled : pandas.DataFrame
        :func:`~budgetlab.experiments.multigpu.all_reduce_by_size`.

    Returns
    -------
    pandas.DataFrame
        ``tp``, ``message_bytes`` [B], ``series``, ``kind`` (``"model"`` or ``"measured"``),
        ``latency_s`` and ``latency_us``.
    """
    _require(modelled, ("tp", "message_bytes", "cuda_graph", "all_reduce_s"), "the modelled frame")
    graph = "with CUDA graph" if bool(modelled.cuda_graph.iloc[0]) else "eager"
    parts = [
        pd.DataFrame(
            {
                "tp": modelled.tp,
                "message_bytes": modelled.message_bytes,
                "series": f"model ({graph})",
                "kind": "model",
                "latency_s": modelled.all_reduce_s,
            }
        )
    ]
    if measured is not None:
        _require(measured, ("tp", "message_bytes", "implementation", "cuda_graph", "latency_s"), "the measured frame")
        labels = [
            _implementation_label(i, g) for i, g in zip(measured.implementation, measured.cuda_graph, strict=True)
        ]
        parts.append(
            pd.DataFrame(
                {
                    "tp": measured.tp,
                    "message_bytes": measured.message_bytes,
                    "series": labels,
                    "kind": "measured",
                    "latency_s": measured.latency_s,
                }
            )
        )
    out = pd.concat(parts, ignore_index=True)
    return out.assign(latency_us=out.latency_s * 1e6)


def all_reduce_chart(frame: pd.DataFrame, *, title: str = "") -> alt.FacetChart:
    """One panel per TP: latency [µs] against message size (log-log), model line, measured points."""
    _require(frame, ("tp", "message_bytes", "series", "kind", "latency_us"), "the chart")
    _check_rows(len(frame))
    data = _slim(frame, ["tp", "message_bytes", "series", "kind", "latency_us"])
    base = alt.Chart().encode(
        x=alt.X("message_bytes:Q", title="Message [bytes]", scale=alt.Scale(type="log"), axis=alt.Axis(format="~s")),
        y=alt.Y("latency_us:Q", title="One all-reduce [µs]", scale=alt.Scale(type="log")),
        color=_series_color(data, "series", ""),
        tooltip=[
            alt.Tooltip("series:N"),
            alt.Tooltip("message_bytes:Q", title="bytes", format=","),
            alt.Tooltip("latency_us:Q", title="µs", format=".1f"),
        ],
    )
    model = base.transform_filter(alt.datum.kind == "model").mark_line(strokeWidth=2)
    measured = base.transform_filter(alt.datum.kind == "measured").mark_point(filled=True, size=40, opacity=0.8)
    return (
        alt.layer(model, measured, data=data)
        .properties(width=WIDTH // 2, height=HEIGHT - 60)
        .facet(column=alt.Column("tp:O", title="Tensor-parallel GPUs"))
        .properties(title=title)
    )


# --------------------------------------------------------------------------------------------
# The CUDA-graph ladder
# --------------------------------------------------------------------------------------------


def _size_list(sizes: Sequence[int]) -> str:
    sizes = list(sizes)
    if len(sizes) <= 8:
        return ", ".join(fmt_int(s) for s in sizes)
    return ", ".join(fmt_int(s) for s in sizes[:5]) + ", …, " + ", ".join(fmt_int(s) for s in sizes[-3:])


def ladder_sizes_table(sizes: pd.DataFrame) -> pd.DataFrame:
    """:func:`~budgetlab.experiments.multigpu.graph_ladder_sizes` for reading, one row per engine."""
    _require(sizes, ("engine", "max_num_seqs", "max_num_batched_tokens", "size_tokens", "full"), "the table")
    rows = []
    for engine, group in sizes.groupby("engine", sort=False):
        full = group[group.full]
        rows.append(
            {
                "Engine": engine,
                "max_num_seqs": fmt_int(group.max_num_seqs.iloc[0]),
                "max_num_batched_tokens": fmt_int(group.max_num_batched_tokens.iloc[0]),
                "Captured sizes": fmt_int(len(group)),
                "Sizes [tokens]": _size_list(group.size_tokens),
                "Largest": fmt_int(group.size_tokens.max()),
                "FULL decode graphs up to": fmt_int(full.size_tokens.max()) if len(full) else "–",
            }
        )
    _check_table_rows(len(rows))
    return pd.DataFrame(rows).set_index("Engine")


def graph_ladder_chart(ladder: pd.DataFrame, *, title: str = "") -> alt.VConcatChart:
    """Per engine: decode step time against batch, coloured by graph mode, with the padding below."""
    _require(ladder, ("engine", "num_decodes", "mode", "padded_tokens", "padding_tokens", "step_time_s"), "the chart")
    _check_rows(len(ladder))
    data = _slim(ladder.assign(step_time_ms=ladder.step_time_s * 1e3), [
        "engine", "num_decodes", "mode", "padded_tokens", "padding_tokens", "step_time_ms",
    ])  # fmt: skip
    modes = [m for m in MODE_COLORS if m in set(data["mode"])]
    color = alt.Color(
        "mode:N",
        title="CUDA graph",
        sort=modes,
        scale=alt.Scale(domain=modes, range=[MODE_COLORS[m] for m in modes]),
        legend=alt.Legend(orient="bottom"),
    )
    x = alt.X(
        "num_decodes:Q",
        title="Decode batch [users, one token each]",
        axis=alt.Axis(format=TOKENS_FORMAT),
        scale=alt.Scale(domain=[0, int(data.num_decodes.max())], nice=False),
    )
    tooltip = [
        alt.Tooltip("num_decodes:Q", title="users"),
        alt.Tooltip("mode:N"),
        alt.Tooltip("padded_tokens:Q", title="padded to"),
        alt.Tooltip("step_time_ms:Q", title="step [ms]", format=".2f"),
    ]
    rows = []
    for engine in dict.fromkeys(data.engine):
        part = data[data.engine == engine]
        step = (
            alt.Chart(part)
            .mark_point(filled=True, size=10)
            .encode(x=x, y=alt.Y("step_time_ms:Q", title="Decode step [ms]"), color=color, tooltip=tooltip)
            .properties(width=WIDTH + 100, height=HEIGHT - 60, title=str(engine))
        )
        padding = (
            alt.Chart(part)
            .mark_bar(width=1, clip=True)
            .encode(x=x, y=alt.Y("padding_tokens:Q", title="Padding [tokens]"), color=color, tooltip=tooltip)
            .properties(width=WIDTH + 100, height=70)
        )
        rows.append(alt.vconcat(step, padding, spacing=4))
    return alt.vconcat(*rows).properties(title=title)


def step_terms_chart(terms: pd.DataFrame, *, title: str = "") -> alt.Chart:
    """Stacked named terms of the step [ms] against the batch.

    Parameters
    ----------
    terms : pandas.DataFrame
        Long form: ``num_decodes``, ``term``, ``time_s``.
    """
    _require(terms, ("num_decodes", "term", "time_s"), "the chart")
    _check_rows(len(terms))
    data = _slim(terms.assign(time_ms=terms.time_s * 1e3), ["num_decodes", "term", "time_ms"])
    return (
        alt.Chart(data)
        .mark_area()
        .encode(
            x=alt.X("num_decodes:Q", title="Decode batch [users]", axis=alt.Axis(format=TOKENS_FORMAT)),
            y=alt.Y("time_ms:Q", title="Step time [ms]", stack=True),
            color=_series_color(data, "term", "term"),
            tooltip=[alt.Tooltip("term:N"), alt.Tooltip("num_decodes:Q"), alt.Tooltip("time_ms:Q", format=".3f")],
        )
        .properties(width=WIDTH + 100, height=HEIGHT, title=title)
    )


# --------------------------------------------------------------------------------------------
# Mixture of experts
# --------------------------------------------------------------------------------------------


def moe_ttft_chart(frame: pd.DataFrame, *, title: str = "") -> alt.Chart:
    """Simulated TTFT mean and p90 [ms, log scale] against the token budget (log-2 axis)."""
    _require(frame, ("max_num_batched_tokens", "ttft_mean_s", "ttft_p90_s", "cost_model"), "the chart")
    _check_rows(2 * len(frame))
    cost = str(frame.cost_model.iloc[0])
    long = pd.concat(
        [
            pd.DataFrame(
                {
                    "max_num_batched_tokens": frame.max_num_batched_tokens,
                    "series": f"TTFT {name}, simulated ({cost} cost)",
                    "ttft_ms": frame[column] * 1e3,
                }
            )
            for column, name in (("ttft_mean_s", "mean"), ("ttft_p90_s", "p90"))
        ],
        ignore_index=True,
    )
    data = _slim(long, ["max_num_batched_tokens", "series", "ttft_ms"])
    return (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "max_num_batched_tokens:Q",
                title="Token budget, max_num_batched_tokens [tokens]",
                scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(format=TOKENS_FORMAT),
            ),
            y=alt.Y("ttft_ms:Q", title="Time to first token [ms, log scale]", scale=alt.Scale(type="log")),
            color=_series_color(data, "series", ""),
            tooltip=[
                alt.Tooltip("series:N"),
                alt.Tooltip("max_num_batched_tokens:Q", title="budget", format=TOKENS_FORMAT),
                alt.Tooltip("ttft_ms:Q", title="TTFT [ms]", format=".1f"),
            ],
        )
        .properties(width=WIDTH, height=HEIGHT, title=title)
    )


def touched_experts_chart(frame: pd.DataFrame, *, title: str = "") -> alt.LayerChart:
    """Expected distinct experts per layer against the tokens in the step, with the expert count.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`budgetlab.moe_step_costs`: ``tokens``, ``expected_experts``, ``num_experts``.
    """
    _require(frame, ("tokens", "expected_experts", "num_experts"), "the chart")
    _check_rows(len(frame))
    data = _slim(frame, ["tokens", "expected_experts"])
    experts = int(frame.num_experts.iloc[0])
    curve = (
        alt.Chart(data)
        .mark_line(color=PALETTE["curve"])
        .encode(
            x=alt.X("tokens:Q", title="Tokens in the step [tokens]", scale=alt.Scale(type="log"),
                    axis=alt.Axis(format=TOKENS_FORMAT)),
            y=alt.Y("expected_experts:Q", title="Distinct experts per layer [expected]",
                    scale=alt.Scale(domain=[0, experts])),
            tooltip=[alt.Tooltip("tokens:Q", format=TOKENS_FORMAT), alt.Tooltip("expected_experts:Q", format=".2f")],
        )
    )  # fmt: skip
    ceiling = pd.DataFrame({"experts": [experts], "label": [f"all {experts} experts"]})
    rule = alt.Chart(ceiling).mark_rule(strokeDash=[6, 3], color=PALETTE["reference"]).encode(y="experts:Q")
    text = (
        alt.Chart(ceiling)
        .mark_text(align="right", baseline="top", dy=3, color=PALETTE["reference"])
        .encode(x=alt.value(WIDTH), y="experts:Q", text="label:N")
    )
    return (rule + text + curve).properties(width=WIDTH, height=HEIGHT, title=title)
