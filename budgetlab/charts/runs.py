"""Charts of KV memory and simulated runs (notebook 05): memory split, timelines, gates, policies.

The numbers are the model's: the KV pool per budget is :func:`budgetlab.memory.kv_by_budget`'s;
a run's time bins, gate shares and headline numbers are :func:`budgetlab.metrics.timeline`,
:func:`~budgetlab.metrics.gate_shares` and :func:`~budgetlab.metrics.run_numbers`. The frame
builders here only put several runs side by side (a ``case`` column) and add labels; the gates
are named by :attr:`budgetlab.admission.Gate.label`, the package's one gate vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import altair as alt
import numpy as np
import pandas as pd

from budgetlab.admission import Gate
from budgetlab.charts.style import (
    HEIGHT,
    PALETTE,
    TOKENS_FORMAT,
    WIDTH,
    _budget_x,
    _check_rows,
    _slim,
)
from budgetlab.memory import KVCapacity
from budgetlab.metrics import gate_shares, run_end_s, run_numbers, timeline
from budgetlab.text import fmt_latency

_MEMORY_PARTS = {
    "weights": ("model weights", PALETTE["muted"]),
    "non_torch": ("non-torch (CUDA context, NCCL)", PALETTE["unused"]),
    "activations": ("activation peak (profile run)", PALETTE["prompt"]),
    "kv": ("KV cache", PALETTE["decode"]),
}

if TYPE_CHECKING:  # types only: charts import no simulator code
    from budgetlab.simulator import SimResult


def memory_split_frame(capacity: KVCapacity) -> pd.DataFrame:
    """The usable memory split into weights, non-torch memory, activations and KV cache: four
    rows (``part``, ``part_label``, ``bytes``, ``gib``, ``fraction``, ``order``)."""
    values = {
        "weights": capacity.weight_bytes,
        "non_torch": capacity.non_torch_bytes,
        "activations": capacity.activation_bytes,
        "kv": capacity.kv_bytes,
    }
    frame = pd.DataFrame(
        {
            "part": list(values),
            "part_label": [_MEMORY_PARTS[p][0] for p in values],
            "bytes": list(values.values()),
        }
    )
    frame["gib"] = frame["bytes"] / 2**30
    frame["fraction"] = frame["bytes"] / capacity.usable_bytes
    frame["order"] = np.arange(len(frame))
    return frame


def memory_split_chart(frame: pd.DataFrame, *, title: str = "") -> alt.Chart:
    """One horizontal bar: the usable GPU memory as weights, non-torch, activations and KV cache."""
    labels = list(frame.part_label)
    return (
        alt.Chart(frame)
        .mark_bar(height=34)
        .encode(
            x=alt.X("gib:Q", title="Usable GPU memory [GiB]", stack="zero"),
            color=alt.Color(
                "part_label:N",
                title="",
                sort=labels,
                scale=alt.Scale(domain=labels, range=[_MEMORY_PARTS[p][1] for p in frame.part]),
                legend=alt.Legend(orient="bottom"),
            ),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("part_label:N", title="part"),
                alt.Tooltip("gib:Q", title="GiB", format=",.2f"),
                alt.Tooltip("fraction:Q", title="share", format=".1%"),
            ],
        )
        .properties(width=WIDTH + 80, height=60, title=title)
    )


def kv_budget_chart(frame: pd.DataFrame, *, budget_tokens: int | None = None, title: str = "") -> alt.LayerChart:
    """KV-cache tokens against the token budget (activations grow with the budget).

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`budgetlab.memory.kv_by_budget` output (``max_num_batched_tokens``, ``kv_tokens``,
        ``activation_bytes``, ``kv_bytes``, ``kv_tokens_lost``).
    budget_tokens : int, optional
        A budget of the frame to highlight [tokens].
    title : str
    """
    _check_rows(len(frame))
    frame = frame.assign(activation_gib=frame.activation_bytes / 2**30, kv_gib=frame.kv_bytes / 2**30)
    base = alt.Chart(frame).encode(
        x=_budget_x(),
        y=alt.Y(
            "kv_tokens:Q", title="KV cache [tokens]", scale=alt.Scale(zero=False), axis=alt.Axis(format=TOKENS_FORMAT)
        ),
        tooltip=[
            alt.Tooltip("max_num_batched_tokens:Q", title="budget [tokens]", format=TOKENS_FORMAT),
            alt.Tooltip("activation_gib:Q", title="activation peak [GiB]", format=",.2f"),
            alt.Tooltip("kv_gib:Q", title="KV cache [GiB]", format=",.2f"),
            alt.Tooltip("kv_tokens:Q", title="KV cache [tokens]", format=TOKENS_FORMAT),
            alt.Tooltip("kv_tokens_lost:Q", title="KV tokens lost vs the smallest budget", format=TOKENS_FORMAT),
        ],
    )
    layers: list[alt.Chart] = [
        base.mark_line(strokeWidth=2.5, color=PALETTE["decode"]),
        base.mark_point(size=70, filled=True, color=PALETTE["decode"]),
    ]
    if budget_tokens is not None and (frame.max_num_batched_tokens == budget_tokens).any():
        picked = frame[frame.max_num_batched_tokens == budget_tokens]
        layers.append(
            alt.Chart(picked)
            .mark_point(size=180, filled=True, color=PALETTE["highlight"])
            .encode(x="max_num_batched_tokens:Q", y="kv_tokens:Q")
        )
    return alt.LayerChart(layer=list(layers), width=WIDTH, height=HEIGHT - 40, title=title)


def sim_timeline_frame(results: Mapping[str, SimResult], *, num_bins: int = 120) -> pd.DataFrame:
    """Simulated runs over time, side by side: :func:`budgetlab.metrics.timeline` of each run.

    The runs share their bin edges (from 0 to the latest end of any run) so they line up on one
    time axis.

    Parameters
    ----------
    results : mapping of str to SimResult
        Case name → :func:`budgetlab.simulator.simulate` output.
    num_bins : int
        Time bins [count].

    Returns
    -------
    pandas.DataFrame
        One row per case × bin with steps in it: ``case`` and the columns of
        :func:`~budgetlab.metrics.timeline` (``time_s`` (bin start), ``running_mean``,
        ``running_max``, ``waiting_mean``, ``kv_used_fraction_mean``, ``kv_used_fraction_max``,
        ``tokens_per_step_mean``, ``num_preemptions``, ``busy_fraction``, ``max_num_seqs``).
    """
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    _check_rows(len(results) * num_bins)
    end_s = max(run_end_s(r) for r in results.values())
    frames = []
    for case, result in results.items():
        frame = timeline(result, num_bins=num_bins, end_s=end_s)
        frame.insert(len(frame.columns) - 1, "case", case)  # before max_num_seqs, as before
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def sim_timeline_chart(frame: pd.DataFrame, *, title: str = "") -> alt.VConcatChart:
    """Running requests, KV use, queue and preemptions over time, one line per case.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`sim_timeline_frame` output. Each case's ``max_num_seqs`` is drawn as a dashed
        rule in the running panel when the run reaches it.
    """
    _check_rows(len(frame))
    frame = _slim(
        frame,
        [
            "case",
            "time_s",
            "running_mean",
            "running_max",
            "waiting_mean",
            "kv_used_fraction_max",
            "tokens_per_step_mean",
            "num_preemptions",
            "max_num_seqs",
        ],
    )
    cases = list(dict.fromkeys(frame.case))
    color = alt.Color("case:N", title="", sort=cases, legend=alt.Legend(orient="top", labelLimit=360))
    x = alt.X("time_s:Q", title="Simulated time [s]", scale=alt.Scale(domainMin=0, nice=False))
    tooltip = [
        alt.Tooltip("case:N"),
        alt.Tooltip("time_s:Q", title="bin start [s]", format=",.1f"),
        alt.Tooltip("running_mean:Q", title="running (mean)", format=",.1f"),
        alt.Tooltip("running_max:Q", title="running (max)", format=",d"),
        alt.Tooltip("waiting_mean:Q", title="waiting (mean)", format=",.1f"),
        alt.Tooltip("kv_used_fraction_max:Q", title="KV blocks in use (max)", format=".0%"),
        alt.Tooltip("tokens_per_step_mean:Q", title="tokens per step (mean)", format=",.0f"),
        alt.Tooltip("num_preemptions:Q", title="preemptions", format=",d"),
    ]
    base = alt.Chart(frame).encode(x=x, color=color, tooltip=tooltip)
    width, height = WIDTH + 140, 120
    running = base.mark_line(strokeWidth=2, interpolate="step-after").encode(
        y=alt.Y("running_max:Q", title="Running requests (max)")
    )
    caps = (
        frame.groupby("case", sort=False)
        .agg(max_num_seqs=("max_num_seqs", "first"), reached=("running_max", "max"))
        .reset_index()
    )
    caps = caps[caps.reached >= caps.max_num_seqs]
    running_layers: list[alt.Chart] = [running]
    if len(caps):
        caps = caps.assign(label="max_num_seqs = " + caps.max_num_seqs.astype(str))
        rule = alt.Chart(caps).encode(y="max_num_seqs:Q", color=alt.Color("case:N", sort=cases, legend=None))
        running_layers += [
            rule.mark_rule(strokeDash=[6, 3]),
            rule.mark_text(align="right", baseline="bottom", dy=-2).encode(x=alt.value(width), text="label:N"),
        ]
    panels = [
        alt.LayerChart(layer=list(running_layers), width=width, height=height),
        base.mark_line(strokeWidth=2, interpolate="step-after")
        .encode(
            y=alt.Y(
                "kv_used_fraction_max:Q",
                title="KV blocks in use",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1]),
            )
        )
        .properties(width=width, height=height),
        base.mark_line(strokeWidth=2, interpolate="step-after")
        .encode(y=alt.Y("waiting_mean:Q", title="Waiting requests"))
        .properties(width=width, height=height),
    ]
    if frame.num_preemptions.sum() > 0:  # a panel only when someone was preempted
        panels.append(
            base.mark_bar(opacity=0.8)
            .encode(y=alt.Y("num_preemptions:Q", title="Preemptions", stack=None))
            .transform_filter("datum.num_preemptions > 0")
            .properties(width=width, height=height // 2 + 20)
        )
    return alt.vconcat(*panels, title=title).resolve_scale(x="shared")


#: The gates in stack order (nobody waiting first): the legend of :func:`gate_share_chart`
#: shows their :attr:`~budgetlab.admission.Gate.label`.
_GATE_ORDER = (Gate.NONE, Gate.SLOT, Gate.BUDGET, Gate.KV)


_GATE_COLORS = {
    "none": PALETTE["unused"],
    "slot": PALETTE["highlight"],
    "budget": PALETTE["prompt"],
    "kv": PALETTE["decode"],
}


def gate_share_frame(results: Mapping[str, SimResult]) -> pd.DataFrame:
    """Which of the three gates held the waiting requests back, as a share of busy time:
    :func:`budgetlab.metrics.gate_shares` of each run, side by side.

    Returns
    -------
    pandas.DataFrame
        Four rows per case: ``case``, ``gate`` (the :class:`~budgetlab.admission.Gate` key),
        ``gate_label`` (its :attr:`~budgetlab.admission.Gate.label`), ``time_s``, ``fraction``.
    """
    frames = []
    for case, result in results.items():
        shares = gate_shares(result).reset_index()
        shares.insert(0, "case", case)
        shares.insert(2, "gate_label", [Gate(key).label for key in shares.gate])
        frames.append(shares)
    if not frames:
        return pd.DataFrame(columns=["case", "gate", "gate_label", "time_s", "fraction"])
    return pd.concat(frames, ignore_index=True)


def gate_share_chart(frame: pd.DataFrame, *, title: str = "") -> alt.Chart:
    """One stacked bar per case: the share of busy time each gate held requests back."""
    _check_rows(len(frame))
    gates = [g.key for g in _GATE_ORDER if g.key in set(frame.gate)]
    order = {g: i for i, g in enumerate(gates)}
    labels = [Gate(g).label for g in gates]
    return (
        alt.Chart(frame.assign(order=frame.gate.map(order)))
        .mark_bar(height=24)
        .encode(
            y=alt.Y("case:N", title="", sort=list(dict.fromkeys(frame.case)), axis=alt.Axis(labelLimit=360)),
            x=alt.X("fraction:Q", title="Share of the time the GPU was busy", axis=alt.Axis(format="%"), stack="zero"),
            color=alt.Color(
                "gate_label:N",
                title="requests waiting, held back by",
                sort=labels,
                scale=alt.Scale(domain=labels, range=[_GATE_COLORS[g] for g in gates]),
                legend=alt.Legend(orient="bottom", columns=2),
            ),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("case:N"),
                alt.Tooltip("gate_label:N", title="gate"),
                alt.Tooltip("fraction:Q", title="share of busy time", format=".1%"),
                alt.Tooltip("time_s:Q", title="time [s]", format=",.1f"),
            ],
        )
        .properties(width=WIDTH, height=alt.Step(36), title=title)
    )


def sim_cases_frame(results: Mapping[str, SimResult]) -> pd.DataFrame:
    """One row per simulated case: :func:`budgetlab.metrics.run_numbers` of each run.

    Returns
    -------
    pandas.DataFrame
        ``case``, ``policy``, ``max_num_seqs``, ``max_num_batched_tokens``,
        ``long_prefill_token_threshold``, ``num_kv_blocks``, ``kv_tokens``, every key of
        ``SimResult.summary()``, plus ``running_mean`` (duration-weighted mean running
        requests), ``running_max``, ``tokens_per_step_mean`` (duration-weighted),
        ``busy_fraction`` (steps' time over the makespan): see
        :func:`budgetlab.metrics.busy_stats`.
    """
    return pd.DataFrame([{"case": case, **run_numbers(result)} for case, result in results.items()])


_POLICY_METRICS = {
    "ttft_p50_s": "TTFT p50",
    "ttft_p90_s": "TTFT p90",
    "ttft_p99_s": "TTFT p99",
    "itl_p50_s": "ITL p50",
    "itl_p90_s": "ITL p90",
    "itl_p99_s": "ITL p99",
    "max_itl_s": "longest gap",
}


def policy_comparison_frame(results: Mapping[str, SimResult]) -> pd.DataFrame:
    """TTFT and inter-token-latency percentiles of several runs, tidy: one row per run × metric.

    Returns
    -------
    pandas.DataFrame
        ``case``, ``metric`` (``"TTFT p90"``...), ``key`` (the summary key), ``value_s``,
        ``value_ms``, ``label`` (``"33.2 ms"``).
    """
    rows = []
    for case, result in results.items():
        summary = result.summary()
        for key, label in _POLICY_METRICS.items():
            value = float(summary[key])
            rows.append(
                {
                    "case": case,
                    "metric": label,
                    "key": key,
                    "value_s": value,
                    "value_ms": value * 1e3,
                    "label": fmt_latency(value),
                }
            )
    return pd.DataFrame(rows)


def policy_comparison_chart(frame: pd.DataFrame, *, title: str = "") -> alt.Chart:
    """Grouped bars: each metric for each run, on a log axis (TTFT and gaps span decades)."""
    _check_rows(len(frame))
    metrics = [m for m in _POLICY_METRICS.values() if m in set(frame.metric)]
    cases = list(dict.fromkeys(frame.case))
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("metric:N", title="", sort=metrics, axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("case:N", sort=cases),
            y=alt.Y("value_ms:Q", title="Latency [ms], log scale", scale=alt.Scale(type="log"), stack=None),
            y2=alt.value(HEIGHT),  # a log axis has no zero: bars rise from the bottom edge
            color=alt.Color("case:N", title="", sort=cases, legend=alt.Legend(orient="bottom", labelLimit=360)),
            tooltip=[
                alt.Tooltip("case:N"),
                alt.Tooltip("metric:N"),
                alt.Tooltip("value_ms:Q", title="[ms]", format=",.1f"),
            ],
        )
        .properties(width=WIDTH + 100, height=HEIGHT, title=title)
    )


def cap_sweep_chart(
    frame: pd.DataFrame,
    *,
    marks: Mapping[str, int] | None = None,
    title: str = "",
) -> alt.HConcatChart:
    """What ``max_num_seqs`` does at a fixed budget and load: left the TTFT p50 and p90, right
    the output throughput and the KV peak, against the cap (log axis).

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`budgetlab.sweep` output over several ``max_num_seqs`` at one budget and one
        offered load (``max_num_seqs``, ``ttft_p50_s``, ``ttft_p90_s``,
        ``throughput_tokens_per_s``, ``kv_peak_fraction``).
    marks : mapping of str to int, optional
        Caps to mark with a labelled rule, e.g. ``{"too low": 16, "baseline": 256}``.
    title : str

    Raises
    ------
    ValueError
        A missing column, or the sweep varies the budget or the load too (one line per cap only).
    """
    needed = ("max_num_seqs", "ttft_p50_s", "ttft_p90_s", "throughput_tokens_per_s", "kv_peak_fraction")
    missing = [c for c in needed if c not in frame]
    if missing:
        raise ValueError(f"cap_sweep_chart needs the columns {', '.join(missing)}; pass budgetlab.sweep's table")
    for knob in ("max_num_batched_tokens", "rate_per_s"):
        if knob in frame and frame[knob].nunique() > 1:
            raise ValueError(
                f"cap_sweep_chart draws one {knob}; the sweep has {frame[knob].nunique()}: filter it first"
            )
    _check_rows(len(frame))
    data = pd.DataFrame(
        {
            "max_num_seqs": frame.max_num_seqs.astype(int),
            "TTFT p50": frame.ttft_p50_s * 1e3,
            "TTFT p90": frame.ttft_p90_s * 1e3,
            "throughput": frame.throughput_tokens_per_s,
            "kv_peak_percent": frame.kv_peak_fraction * 100,
        }
    )
    x = alt.X(
        "max_num_seqs:Q",
        title="max_num_seqs [requests], log scale",
        scale=alt.Scale(type="log", base=2),
        axis=alt.Axis(format=TOKENS_FORMAT, values=sorted(data.max_num_seqs.unique().tolist())),
    )
    ttft = data.melt(id_vars=["max_num_seqs"], value_vars=["TTFT p50", "TTFT p90"], var_name="percentile")
    left_base = alt.Chart(ttft).encode(
        x=x,
        y=alt.Y("value:Q", title="Time to first token [ms], log scale", scale=alt.Scale(type="log")),
        strokeDash=alt.StrokeDash(
            "percentile:N",
            title="",
            scale=alt.Scale(domain=["TTFT p50", "TTFT p90"], range=[[1, 0], [6, 3]]),
            legend=alt.Legend(orient="top", symbolType="stroke"),
        ),
        tooltip=[
            alt.Tooltip("max_num_seqs:Q", format=TOKENS_FORMAT),
            alt.Tooltip("percentile:N"),
            alt.Tooltip("value:Q", title="TTFT [ms]", format=",.0f"),
        ],
    )
    right_base = alt.Chart(data).encode(
        x=x,
        y=alt.Y("throughput:Q", title="Output throughput [tokens/s]"),
        tooltip=[
            alt.Tooltip("max_num_seqs:Q", format=TOKENS_FORMAT),
            alt.Tooltip("throughput:Q", title="output [tokens/s]", format=",.0f"),
            alt.Tooltip("kv_peak_percent:Q", title="KV peak [%]", format=".0f"),
        ],
    )
    left_layers: list[alt.Chart] = [
        left_base.mark_line(strokeWidth=2.5, color=PALETTE["curve"]),
        left_base.mark_point(filled=True, size=50, color=PALETTE["curve"]),
    ]
    right_layers: list[alt.Chart] = [
        right_base.mark_line(strokeWidth=2.5, color=PALETTE["decode"]),
        right_base.mark_point(filled=True, size=50, color=PALETTE["decode"]),
        right_base.mark_text(dy=-10, color=PALETTE["muted"]).encode(text=alt.Text("kv_peak_percent:Q", format=".0f")),
    ]
    if marks:
        rules = pd.DataFrame(
            {
                "max_num_seqs": list(marks.values()),
                "label": [f"{name}: {cap:,d}" for name, cap in marks.items()],
                "label_y_px": [4 + 15 * i for i in range(len(marks))],
            }
        )
        for layers in (left_layers, right_layers):
            layers.append(
                alt.Chart(rules).mark_rule(strokeDash=[2, 3], color=PALETTE["highlight"]).encode(x="max_num_seqs:Q")
            )
            layers.append(
                alt.Chart(rules)
                .mark_text(align="right", dx=-4, baseline="top", color=PALETTE["highlight"])
                .encode(x="max_num_seqs:Q", y=alt.Y("label_y_px:Q", scale=None), text="label:N")
            )
    left = alt.LayerChart(layer=left_layers, width=WIDTH - 130, height=HEIGHT - 40, title="Queueing: TTFT")
    right = alt.LayerChart(
        layer=right_layers,
        width=WIDTH - 130,
        height=HEIGHT - 40,
        title="Throughput (labels: KV peak, % of the pool)",
    )
    return alt.hconcat(left, right, title=title)
