"""Altair charts shared by the notebooks, and the tidy tables they draw.

Two kinds of functions live here:

*Frame builders* (``*_frame``) call the package's math (:mod:`budgetlab.roofline`,
:mod:`budgetlab.budget`, :mod:`budgetlab.memory`, :mod:`budgetlab.metrics`, :mod:`budgetlab.sweep`;
its public functions only) and return a tidy :class:`pandas.DataFrame`, one row per observation,
with times in seconds (``*_s``) and, for display only, in milliseconds (``*_ms``). Curves that
several cost models can share carry a ``cost_model`` column (``"ideal"`` here; a calibrated
model adds rows with its own name), so one chart draws them side by side.

*Chart builders* (``*_chart``) take such a frame and return an :class:`altair.Chart` (or a
layer/concat of charts) with axis titles that carry units, tooltips and one look: the same
palette, sizes and number formats everywhere. None of them calls ``configure_*``, so a notebook
can still concatenate them. Frames stay below :data:`MAX_ROWS` rows.

Formatting helpers (``fmt_*``) turn SI numbers into the short strings the notebooks' prose
uses (``fmt_ms(0.0332)`` → ``"33.2 ms"``), so no notebook does unit arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from budgetlab.budget import chunk_schedule, longest_gap_s, prefill_tokens_left, ttft_s
from budgetlab.calibrate import predict_step_ms, read_measurements
from budgetlab.calibrated import CalibratedCost
from budgetlab.memory import kv_capacity, weight_bytes_per_gpu, weights_fit
from budgetlab.metrics import GATES, busy_stats, step_gates
from budgetlab.roofline import IdealCost, knee_tokens
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec
from budgetlab.sweep import best_capacity, mean_sequence_tokens
from budgetlab.workload import trace_stats

__all__ = [
    "MAX_ROWS",
    "PALETTE",
    "fmt_ms",
    "fmt_us",
    "fmt_int",
    "fmt_tokens",
    "fmt_duration",
    "fmt_gb",
    "fmt_gflop",
    "fmt_bandwidth",
    "fmt_flops_rate",
    "fmt_budget",
    "fmt_count",
    "fmt_approx",
    "token_grid",
    "budget_grid",
    "step_cost_frame",
    "marks_frame",
    "catalog_step_cost_frame",
    "hardware_comparison_frame",
    "hardware_comparison_table",
    "step_fill_frame",
    "decoder_interaction_frame",
    "tradeoff_table",
    "tradeoff_numbers_table",
    "table_markdown",
    "budget_sweep_frame",
    "budget_sweep_table",
    "flattening_budget",
    "longest_gap_comparison_frame",
    "step_cost_chart",
    "step_fill_chart",
    "step_timeline_chart",
    "decoder_interaction_chart",
    "budget_sweep_chart",
    "ttft_and_step_time_chart",
    "longest_gap_bars_chart",
    "log_token_grid",
    "cost_variants_frame",
    "tile_cliffs_frame",
    "tensor_parallel_frame",
    "tensor_parallel_table",
    "moe_frame",
    "moe_table",
    "moe_chart",
    "budget_payoff_frame",
    "budget_payoff_table",
    "longest_gap_models_chart",
    "measured_points_frame",
    "calibration_rows_table",
    "calibration_parameters_table",
    "calibration_numbers",
    "residual_frame",
    "residual_summary",
    "calibration_chart",
    "residual_chart",
    "kv_capacity_table",
    "memory_split_frame",
    "memory_split_chart",
    "kv_budget_frame",
    "kv_budget_chart",
    "sim_timeline_frame",
    "sim_timeline_chart",
    "GATE_LABELS",
    "gate_share_frame",
    "gate_share_chart",
    "sim_cases_frame",
    "sim_cases_table",
    "sim_case_numbers",
    "policy_comparison_frame",
    "policy_comparison_table",
    "policy_comparison_chart",
]

#: Largest frame a chart builder accepts: Altair inlines the data in every report.
MAX_ROWS = 5000

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


# --------------------------------------------------------------------------------------------
# Formatting for prose and tables
# --------------------------------------------------------------------------------------------


def fmt_ms(seconds: float, digits: int = 1) -> str:
    """``0.03324`` → ``"33.2 ms"`` (seconds in, milliseconds shown)."""
    return f"{float(seconds) * 1e3:,.{digits}f} ms"


def fmt_us(seconds: float, digits: int = 1) -> str:
    """``1.623e-5`` → ``"16.2 µs"`` (seconds in, microseconds shown)."""
    return f"{float(seconds) * 1e6:,.{digits}f} µs"


def fmt_int(value: float) -> str:
    """``2048`` → ``"2,048"`` (rounded to the nearest whole number)."""
    return f"{int(round(float(value))):,d}"


def fmt_tokens(value: float) -> str:
    """``2048`` → ``"2,048 tokens"``; ``1`` → ``"1 token"``."""
    text = fmt_int(value)
    return f"{text} {'token' if text == '1' else 'tokens'}"


def fmt_duration(seconds: float, digits: int = 1) -> str:
    """A latency in the unit that reads best: ``0.036`` → ``"36.0 ms"``, ``15.06`` → ``"15.1 s"``."""
    seconds = float(seconds)
    if abs(seconds) < 1.0:
        return fmt_ms(seconds, digits)
    return f"{seconds:,.{digits}f} s"


def fmt_gb(num_bytes: float, digits: int = 1) -> str:
    """``16.06e9`` → ``"16.1 GB"`` (GB = 1e9 bytes)."""
    return f"{float(num_bytes) / 1e9:,.{digits}f} GB"


def fmt_gflop(flops: float, digits: int = 1) -> str:
    """``16.06e9`` → ``"16.1 GFLOP"``."""
    return f"{float(flops) / 1e9:,.{digits}f} GFLOP"


def fmt_bandwidth(bytes_per_s: float, digits: int = 2) -> str:
    """``3.35e12`` → ``"3.35 TB/s"`` (TB = 1e12 bytes)."""
    return f"{float(bytes_per_s) / 1e12:,.{digits}f} TB/s"


def fmt_flops_rate(flops_per_s: float, digits: int = 1) -> str:
    """``989.4e12`` → ``"989.4 TFLOP/s"``."""
    return f"{float(flops_per_s) / 1e12:,.{digits}f} TFLOP/s"


def fmt_count(count: int, noun: str, plural: str | None = None) -> str:
    """``(3, "step")`` → ``"3 steps"``; ``(1, "step")`` → ``"1 step"``."""
    count = int(count)
    return f"{count:,d} {noun if count == 1 else (plural or noun + 's')}"


def fmt_approx(value: float, significant: int = 2) -> str:
    """A round figure for prose: ``2464`` → ``"2,500"``, ``295.3`` → ``"300"``."""
    value = float(value)
    if value == 0 or not np.isfinite(value):
        return f"{value:g}"
    digits = significant - 1 - int(np.floor(np.log10(abs(value))))
    rounded = round(value, digits)
    return f"{rounded:,.0f}" if digits <= 0 else f"{rounded:,.{digits}f}"


def fmt_budget(budget_tokens: int | None) -> str:
    """``2048`` → ``"budget 2,048"``; ``None`` → ``"no budget"`` (labels for scenarios)."""
    return "no budget" if budget_tokens is None else f"budget {fmt_int(budget_tokens)}"


# --------------------------------------------------------------------------------------------
# Grids
# --------------------------------------------------------------------------------------------


def token_grid(max_tokens: int, *, include: Iterable[float] = (), num_points: int = 400) -> np.ndarray:
    """Token counts from 1 to ``max_tokens`` for a step-cost curve [tokens].

    ``num_points`` evenly spaced counts plus every value of ``include`` (rounded down and up,
    so a kink such as the knee is drawn exactly), sorted and unique.
    """
    if max_tokens < 2:
        raise ValueError(f"max_tokens must be >= 2, got {max_tokens}")
    extra = np.asarray(list(include), dtype=float)
    extra = extra[(extra >= 1) & (extra <= max_tokens)]
    grid = np.concatenate(
        [np.linspace(1, max_tokens, min(num_points, max_tokens)), np.floor(extra), np.ceil(extra)]
    )
    return np.unique(np.round(grid).astype(np.int64))


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
    """
    low = num_decodes + 1 if min_budget_tokens is None else max(num_decodes + 1, int(min_budget_tokens))
    if max_budget_tokens < low:
        raise ValueError(
            f"max_budget_tokens ({max_budget_tokens}) must be at least {low} "
            f"(above num_decodes = {num_decodes} and min_budget_tokens)"
        )
    extra = np.asarray([b for b in include if low <= b <= max_budget_tokens], dtype=np.int64)
    grid = np.linspace(low, max_budget_tokens, min(num_points, max_budget_tokens - low + 1))
    return np.unique(np.concatenate([np.round(grid).astype(np.int64), extra]))


# --------------------------------------------------------------------------------------------
# Frames: step cost (notebook 01)
# --------------------------------------------------------------------------------------------


def _names(cost: Any) -> dict[str, str]:
    hardware = getattr(cost, "hardware", None)
    model = getattr(cost, "model", None)
    return {
        "hardware": getattr(hardware, "name", ""),
        "model": getattr(model, "name", ""),
    }


def step_cost_frame(cost: IdealCost, tokens: Sequence[int], *, cost_model: str = "ideal") -> pd.DataFrame:
    """The step time for each token count: one curve of a cost model.

    Parameters
    ----------
    cost : IdealCost
        Any model with a vectorized ``step_time_s(num_tokens)``.
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
    tokens = np.asarray(tokens, dtype=np.int64)
    _check_rows(len(tokens))
    step_s = np.asarray(cost.step_time_s(tokens), dtype=float)
    frame = pd.DataFrame(
        {
            "tokens": tokens,
            "step_time_s": step_s,
            "step_time_ms": step_s * 1e3,
            "time_per_token_us": step_s / np.maximum(tokens, 1) * 1e6,
        }
    )
    if isinstance(cost, IdealCost):
        knee = knee_tokens(cost)
        frame["bound"] = np.where(tokens <= knee, "weight read (memory)", "math (compute)")
    frame["cost_model"] = cost_model
    for column, value in _names(cost).items():
        frame[column] = value
    return frame


def marks_frame(cost: IdealCost, token_marks: Sequence[int], *, cost_model: str = "ideal") -> pd.DataFrame:
    """The step time at a few marked token counts, with a label ``"2,048 → 33.2 ms"``."""
    frame = step_cost_frame(cost, token_marks, cost_model=cost_model)
    frame["label"] = [f"{fmt_int(n)} → {fmt_ms(s)}" for n, s in zip(frame.tokens, frame.step_time_s)]
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


def hardware_comparison_frame(
    model: ModelSpec, hardware_specs: Iterable[HardwareSpec], *, token_marks: Sequence[int] = ()
) -> pd.DataFrame:
    """One row per accelerator: this model's ideal weight read, per-token time and knee.

    Returns
    -------
    pandas.DataFrame
        ``hardware_slug``, ``hardware``, ``weight_read_s``, ``per_token_s``, ``knee_tokens``,
        ``weights_fit`` (the weights fit in the GPU's memory), and ``step_<n>_s`` for each mark.
    """
    rows = []
    for hardware in hardware_specs:
        cost = IdealCost(hardware, model)
        row: dict[str, Any] = {
            "hardware_slug": hardware.slug,
            "hardware": hardware.name,
            "weight_read_s": cost.weight_read_s,
            "per_token_s": cost.per_token_s,
            "knee_tokens": knee_tokens(cost),
            "weights_fit": weights_fit(hardware, model),
        }
        for mark in token_marks:
            row[f"step_{int(mark)}_s"] = float(cost.step_time_s(int(mark)))
        rows.append(row)
    return pd.DataFrame(rows)


def hardware_comparison_table(frame: pd.DataFrame, *, highlight: str | None = None) -> pd.DataFrame:
    """:func:`hardware_comparison_frame` for reading: units in the headers, rounded numbers.

    ``highlight`` (a hardware slug) gets a ``◀`` after its name.
    """
    table = pd.DataFrame(
        {
            "Hardware": [
                name + (" ◀" if slug == highlight else "")
                for slug, name in zip(frame.hardware_slug, frame.hardware)
            ],
            "Weight read [ms]": (frame.weight_read_s * 1e3).round(2),
            "Per token [µs]": (frame.per_token_s * 1e6).round(2),
            "Knee [tokens]": frame.knee_tokens.round().astype(int),
        }
    )
    for column in frame.columns:
        if column.startswith("step_") and column.endswith("_s"):
            mark = int(column[len("step_") : -len("_s")])
            table[f"Step at {mark:,d} tokens [ms]"] = (frame[column] * 1e3).round(1)
    table["Weights fit on one GPU"] = np.where(frame.weights_fit, "yes", "no")
    return table


# --------------------------------------------------------------------------------------------
# Frames: the budget filled (notebooks 02 and 04)
# --------------------------------------------------------------------------------------------


def step_fill_frame(
    cost: IdealCost,
    *,
    budget_tokens: int | None,
    num_decodes: int,
    prompt_tokens: int,
    max_steps: int = 40,
) -> pd.DataFrame:
    """How each step's budget is shared while one prompt is ingested: one row per step × part.

    The prompt's chunks come from :func:`budgetlab.budget.chunk_schedule`: the ``num_decodes``
    decoding requests (admitted earlier) take one token each, the prompt takes what is left.
    ``budget_tokens=None`` means no budget: the whole prompt goes into one step.

    Parameters
    ----------
    cost : IdealCost
        Step-cost model, for each step's duration.
    budget_tokens : int or None
        Token budget [tokens].
    num_decodes : int
        Decoding requests [count].
    prompt_tokens : int
        Prompt length [tokens].
    max_steps : int
        Keep only the first ``max_steps`` steps (the total is in ``frame.attrs["num_steps"]``).

    Returns
    -------
    pandas.DataFrame
        ``step`` (1-based), ``part`` (``decode``, ``prompt``, ``unused``), ``part_label``,
        ``tokens``, ``step_tokens`` (tokens the step processes), ``step_time_s``,
        ``step_time_ms``, ``start_s``, ``end_s``, ``start_ms``, ``end_ms``, ``scenario``
        (:func:`fmt_budget`), ``budget_tokens``.
    """
    chunks = chunk_schedule(budget_tokens=budget_tokens, num_decodes=num_decodes, prompt_tokens=prompt_tokens)
    steps = []
    clock_s = 0.0
    for step, chunk in enumerate(chunks, start=1):
        step_tokens = num_decodes + chunk
        step_s = float(cost.step_time_s(step_tokens))
        steps.append(
            {
                "step": step,
                "decode": num_decodes,
                "prompt": chunk,
                "unused": int(budget_tokens) - step_tokens if budget_tokens is not None else 0,
                "step_tokens": step_tokens,
                "step_time_s": step_s,
                "start_s": clock_s,
                "end_s": clock_s + step_s,
            }
        )
        clock_s += step_s
    num_steps = len(steps)
    wide = pd.DataFrame(steps[:max_steps])
    frame = wide.melt(
        id_vars=["step", "step_tokens", "step_time_s", "start_s", "end_s"],
        value_vars=["decode", "prompt", "unused"],
        var_name="part",
        value_name="tokens",
    )
    frame["part_label"] = frame.part.map(PART_LABELS)
    for column in ("step_time", "start", "end"):
        frame[f"{column}_ms"] = frame[f"{column}_s"] * 1e3
    frame["scenario"] = fmt_budget(budget_tokens)
    frame["budget_tokens"] = budget_tokens if budget_tokens is not None else np.nan
    frame = frame.sort_values(["step", "part"], ignore_index=True)
    frame.attrs["num_steps"] = num_steps
    return frame


def decoder_interaction_frame(*, budget_tokens: int, decoder_counts: Sequence[int]) -> pd.DataFrame:
    """One step's budget split between decodes and prompt for several decoder counts.

    Returns
    -------
    pandas.DataFrame
        Two rows per count: ``num_decodes``, ``label`` (``"60 decoding users"``), ``part``
        (``decode``/``prompt``), ``part_label``, ``tokens``, ``budget_tokens``.
    """
    rows = []
    for count in decoder_counts:
        left = prefill_tokens_left(budget_tokens=budget_tokens, num_decodes=count)
        label = f"{fmt_int(count)} decoding users"
        rows.append({"num_decodes": count, "label": label, "part": "decode", "tokens": int(count)})
        rows.append({"num_decodes": count, "label": label, "part": "prompt", "tokens": int(left)})
    frame = pd.DataFrame(rows)
    frame["part_label"] = frame.part.map(
        {"decode": PART_LABELS["decode"], "prompt": "left for prompt chunks"}
    )
    frame["budget_tokens"] = budget_tokens
    return frame


def tradeoff_table(tradeoff: pd.DataFrame) -> pd.DataFrame:
    """The seeds' small-vs-big budget table, each cell with the numbers behind it.

    Parameters
    ----------
    tradeoff : pandas.DataFrame
        The output of :func:`budgetlab.budget.budget_tradeoff` (rows ``small`` and ``big``).

    Returns
    -------
    pandas.DataFrame
        Rows "Each step", "Decoding users", "Long prompts"; one column per budget.
    """
    columns = {}
    for which in ("small", "big"):
        row = tradeoff.loc[which]
        steps = int(row.num_prompt_steps)
        step_word = "step" if steps == 1 else "steps"
        if which == "small":
            cells = [
                f"Short: {fmt_ms(row.prompt_step_s)} even with a prompt chunk "
                f"({fmt_ms(row.decode_only_step_s)} with decodes only)",
                f"Steady stream: low inter-token latency, longest gap {fmt_ms(row.prompt_step_s)}",
                f"Spread over {steps} {step_word}: later first token, "
                f"TTFT {fmt_ms(row.ttft_s)} ({fmt_int(row.prefill_tokens_per_s)} prompt tokens/s)",
            ]
        else:
            cells = [
                f"Long when it carries a big prompt chunk: {fmt_ms(row.prompt_step_s)} "
                f"({fmt_ms(row.decode_only_step_s)} with decodes only)",
                f"Wait longer on prompt-heavy steps: longest gap {fmt_ms(row.prompt_step_s)}",
                f"Finish in {steps} {step_word}: better TTFT and throughput, "
                f"TTFT {fmt_ms(row.ttft_s)} ({fmt_int(row.prefill_tokens_per_s)} prompt tokens/s)",
            ]
        title = f"{which.capitalize()} budget ({fmt_tokens(row.budget_tokens)})"
        columns[title] = cells
    return pd.DataFrame(columns, index=pd.Index(["Each step", "Decoding users", "Long prompts"], name=""))


def table_markdown(frame: pd.DataFrame, *, index: bool = True) -> str:
    """A small table as GitHub-flavoured Markdown, for cells of prose that must not be cut.

    pandas' HTML view shortens long text cells; ``display(Markdown(table_markdown(t)))`` shows
    them whole, in JupyterLab and in the HTML reports alike.
    """
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    header = ([cell(frame.index.name or "")] if index else []) + [cell(c) for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, row in zip(frame.index, frame.itertuples(index=False)):
        cells = ([f"**{cell(label)}**"] if index else []) + [cell(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tradeoff_numbers_table(tradeoff: pd.DataFrame) -> pd.DataFrame:
    """:func:`budgetlab.budget.budget_tradeoff` for reading: units in headers, rounded."""
    table = pd.DataFrame(
        {
            "Budget [tokens]": tradeoff.budget_tokens.astype(int),
            "Decode-only step [ms]": (tradeoff.decode_only_step_s * 1e3).round(2),
            "Step with a prompt chunk = longest gap [ms]": (tradeoff.prompt_step_s * 1e3).round(1),
            "Steps to ingest the prompt": tradeoff.num_prompt_steps.astype(int),
            "TTFT [ms]": (tradeoff.ttft_s * 1e3).round(1),
            "Prompt throughput [tokens/s]": tradeoff.prefill_tokens_per_s.round().astype(int),
        },
        index=tradeoff.index,
    )
    table.index.name = "budget"
    return table


# --------------------------------------------------------------------------------------------
# Frames: sweeps over the budget (notebooks 03 and 04)
# --------------------------------------------------------------------------------------------


def budget_sweep_frame(
    cost: IdealCost,
    budgets: Sequence[int],
    *,
    num_decodes: int,
    prompt_tokens: int,
    listed: Iterable[int] = (),
    cost_model: str = "ideal",
    decode_context_tokens: int = 0,
) -> pd.DataFrame:
    """TTFT, full-step time and longest gap for each budget, for one prompt among decoders.

    Parameters
    ----------
    cost : IdealCost
        Step-cost model.
    budgets : sequence of int
        Budgets to evaluate [tokens], each above ``num_decodes`` (e.g. :func:`budget_grid`).
    num_decodes, prompt_tokens : int
        The scripted scenario: decoders [count], prompt length [tokens].
    listed : iterable of int
        Budgets to flag in the ``listed`` column (the notebook's ``budgets`` parameter).
    cost_model : str
        Name of the curve.
    decode_context_tokens : int
        Tokens each decoder has cached when the prompt arrives [tokens]; only cost models with
        attention or KV reads (:class:`~budgetlab.calibrated.CalibratedCost`) care.

    Returns
    -------
    pandas.DataFrame
        ``budget_tokens``, ``ttft_s``, ``step_time_s`` (a step that fills the whole budget:
        the longest step the budget allows), ``longest_gap_s`` (the decoders' longest wait in
        this scenario), their ``*_ms`` twins, ``listed``, ``cost_model``.
    """
    budgets = np.asarray(budgets, dtype=np.int64)
    _check_rows(len(budgets))
    scenario = {
        "num_decodes": num_decodes,
        "prompt_tokens": prompt_tokens,
        "decode_context_tokens": decode_context_tokens,
    }
    frame = pd.DataFrame(
        {
            "budget_tokens": budgets,
            "ttft_s": np.atleast_1d(ttft_s(cost, budget_tokens=budgets, **scenario)),
            "step_time_s": np.atleast_1d(cost.step_time_s(budgets)),
            "longest_gap_s": np.atleast_1d(longest_gap_s(cost, budget_tokens=budgets, **scenario)),
        }
    )
    for metric in ("ttft", "step_time", "longest_gap"):
        frame[f"{metric}_ms"] = frame[f"{metric}_s"] * 1e3
    listed = set(int(b) for b in listed)
    frame["listed"] = frame.budget_tokens.isin(listed)
    frame["cost_model"] = cost_model
    return frame


def budget_sweep_table(
    frame: pd.DataFrame, *, num_decodes: int, prompt_tokens: int, listed_only: bool = True
) -> pd.DataFrame:
    """:func:`budget_sweep_frame` for reading: one row per (listed) budget, units in headers.

    Adds the chunks the prompt is ingested in (:func:`budgetlab.budget.chunk_schedule`).
    """
    rows = frame[frame.listed] if listed_only else frame
    _check_rows(len(rows) * 50)  # a table is for reading: keep it short
    chunks = [
        chunk_schedule(budget_tokens=int(b), num_decodes=num_decodes, prompt_tokens=prompt_tokens)
        for b in rows.budget_tokens
    ]
    table = pd.DataFrame(
        {
            "Budget [tokens]": rows.budget_tokens.astype(int).to_numpy(),
            "Prompt chunk [tokens]": [c[0] for c in chunks],
            "Steps to first token": [len(c) for c in chunks],
            "TTFT [ms]": rows.ttft_ms.round(1).to_numpy(),
            "Full step = longest gap the budget allows [ms]": rows.step_time_ms.round(1).to_numpy(),
            "Longest gap in this scenario [ms]": rows.longest_gap_ms.round(1).to_numpy(),
        }
    )
    if rows.cost_model.nunique() > 1:
        table.insert(0, "Cost model", rows.cost_model.to_numpy())
    return table


def flattening_budget(
    frame: pd.DataFrame, *, column: str, reference_s: float, within_fraction: float = 0.1
) -> int | None:
    """Read off a sweep where its curve has flattened [tokens].

    The smallest budget in ``frame`` from which on every budget's ``column`` stays within
    ``within_fraction`` of ``reference_s`` (e.g. the TTFT with no budget at all), above or
    below it; ``None`` if even the largest budget is farther away. ``within_fraction=0`` finds
    where the curve reaches the reference exactly (the longest gap once the whole prompt fits
    in one step).
    """
    ordered = frame.sort_values("budget_tokens")
    close = (np.abs(ordered[column] - reference_s) <= abs(reference_s) * within_fraction).to_numpy()
    if not close[-1]:
        return None
    far = np.flatnonzero(~close)
    first = 0 if len(far) == 0 else far[-1] + 1
    return int(ordered.budget_tokens.iloc[first])


def longest_gap_comparison_frame(
    cost: IdealCost,
    *,
    budget_tokens: int,
    num_decodes: int,
    prompt_tokens: int,
    cost_model: str = "ideal",
    decode_context_tokens: int = 0,
) -> pd.DataFrame:
    """The decoders' longest gap with the budget and without one: two rows.

    ``decode_context_tokens`` (tokens each decoder has cached [tokens]) matters only to cost
    models with attention or KV reads.

    Returns
    -------
    pandas.DataFrame
        ``scenario`` (``"budget 2,048"``, ``"no budget"``), ``budget_tokens`` (NaN without),
        ``longest_gap_s``, ``longest_gap_ms``, ``label`` (``"33.2 ms"``), ``cost_model``.
    """
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
                "budget_tokens": np.nan if budget is None else budget,
                "longest_gap_s": gap,
                "longest_gap_ms": gap * 1e3,
                "label": fmt_ms(gap),
                "cost_model": cost_model,
            }
        )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# Charts
# --------------------------------------------------------------------------------------------


def _check_rows(num_rows: int) -> None:
    if num_rows > MAX_ROWS:
        raise ValueError(
            f"{num_rows} rows is more than a report should inline (limit {MAX_ROWS}); "
            "use a coarser grid"
        )


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
    return alt.X(f"{field}:Q", title=title, axis=alt.Axis(format="~s"))


def _y_ms(field: str, title: str, *, zero: bool = True) -> alt.Y:
    return alt.Y(f"{field}:Q", title=title, scale=alt.Scale(zero=zero))


def _color(frame: pd.DataFrame, column: str | None, title: str) -> alt.Color | alt.Value:
    if column is None or frame[column].nunique() <= 1:
        return alt.value(PALETTE["curve"])
    # colours in the frame's order, so "idealized" then "calibrated" look the same in every chart
    order = list(dict.fromkeys(frame[column]))
    return alt.Color(f"{column}:N", title=title, sort=order, legend=alt.Legend(labelLimit=320))


def _reference_rules(references: Sequence[tuple[str, float]], *, label_x: Any = "width") -> list[alt.Chart]:
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
    return (f"{fmt_ms(target_step_s, 0)} target", target_step_s)


def step_cost_chart(
    frame: pd.DataFrame,
    *,
    marks: pd.DataFrame | None = None,
    knee_tokens: float | None = None,
    color: str | None = "cost_model",
    title: str = "",
) -> alt.LayerChart:
    """Step time against tokens in the step: flat at the weight read, then a straight line.

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
    legend_pick = alt.selection_point(fields=[color], bind="legend") if many else None
    hover = alt.selection_point(
        fields=["tokens"], nearest=True, on="pointerover", clear="pointerout", empty=False
    )
    tooltip = [
        alt.Tooltip("tokens:Q", title="tokens in the step", format=TOKENS_FORMAT),
        alt.Tooltip("step_time_ms:Q", title="step time [ms]", format=",.2f"),
        alt.Tooltip("time_per_token_us:Q", title="time per token [µs]", format=",.1f"),
    ]
    if "bound" in frame:
        tooltip.append(alt.Tooltip("bound:N", title="set by"))
    if many:
        tooltip.insert(0, alt.Tooltip(f"{color}:N"))
    base = alt.Chart(frame).encode(
        x=_x_tokens(),
        y=_y_ms("step_time_ms", "Step time [ms]"),
        color=_color(frame, color, color.replace("_", " ") if color else ""),
    )
    line = base.mark_line(strokeWidth=2.5)
    if legend_pick is not None:
        line = line.encode(
            opacity=alt.condition(legend_pick, alt.value(1.0), alt.value(0.15))
        ).add_params(legend_pick)
    points = base.mark_point(size=60, filled=True).encode(
        opacity=alt.condition(hover, alt.value(1.0), alt.value(0.0)), tooltip=tooltip
    ).add_params(hover)
    rule = alt.Chart(frame).mark_rule(color=PALETTE["muted"]).encode(x="tokens:Q").transform_filter(hover)
    layers: list[alt.Chart] = [line, rule, points]
    if knee_tokens is not None:
        knee = pd.DataFrame({"tokens": [float(knee_tokens)], "label": [f"knee ≈ {fmt_int(knee_tokens)} tokens"]})
        knee_rule = alt.Chart(knee).mark_rule(strokeDash=[4, 4], color=PALETTE["muted"]).encode(x="tokens:Q")
        knee_text = alt.Chart(knee).mark_text(
            align="left", dx=4, dy=-4, baseline="bottom", color=PALETTE["muted"]
        ).encode(x="tokens:Q", y=alt.value(12), text="label:N")
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
            mark_base.mark_text(align="left", dx=10, dy=12, stroke="white", strokeWidth=4).encode(
                text="label:N"
            ),
            mark_base.mark_text(align="left", dx=10, dy=12, color=PALETTE["highlight"]).encode(
                text="label:N"
            ),
        ]
    return alt.layer(*layers).properties(width=WIDTH, height=HEIGHT, title=title)


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
            y=alt.Y("tokens:Q", title="Tokens in the step [tokens]", stack="zero", axis=alt.Axis(format="~s")),
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
    budget = frame.budget_tokens.dropna()
    if len(budget):
        budget_frame = pd.DataFrame(
            {"budget_tokens": [float(budget.iloc[0])], "label": [fmt_budget(int(budget.iloc[0]))]}
        )
        layers.append(
            alt.Chart(budget_frame).mark_rule(strokeDash=[6, 3], color="black").encode(y="budget_tokens:Q")
        )
        layers.append(
            alt.Chart(budget_frame)
            .mark_text(align="right", baseline="bottom", dy=-3)
            .encode(x=alt.value("width"), y="budget_tokens:Q", text="label:N")
        )
    num_steps = frame.attrs.get("num_steps", frame.step.nunique())
    if not title and num_steps > frame.step.nunique():
        title = f"First {frame.step.nunique()} of {num_steps} steps"
    return alt.layer(*layers).properties(width=max(160, 60 * frame.step.nunique()), height=HEIGHT, title=title)


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
    return alt.layer(bars, ticks).properties(width=WIDTH + 120, height=alt.Step(44), title=title)


def decoder_interaction_chart(frame: pd.DataFrame, *, title: str = "") -> alt.LayerChart:
    """One horizontal bar per decoder count: decode tokens, then what is left for prompts."""
    _check_rows(len(frame))
    labels = list(dict.fromkeys(frame.part_label))
    bars = (
        alt.Chart(frame)
        .mark_bar(height=26)
        .encode(
            y=alt.Y("label:N", title="", sort=list(dict.fromkeys(frame.label))),
            x=alt.X("tokens:Q", title="Tokens of one step's budget [tokens]", stack="zero", axis=alt.Axis(format="~s")),
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
            x="budget_tokens:Q",
            text=alt.Text("tokens:Q", format=TOKENS_FORMAT),
        )
    )
    return alt.layer(bars, text).properties(width=WIDTH, height=alt.Step(40), title=title)


_METRICS = {
    "ttft": "Time to first token [ms]",
    "step_time": "Step time of a full budget [ms]",
    "longest_gap": "Longest gap between tokens [ms]",
}


def _budget_x() -> alt.X:
    return alt.X(
        "budget_tokens:Q",
        title="Token budget, max_num_batched_tokens [tokens]",
        axis=alt.Axis(format="~s"),
    )


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
    frame = _slim(frame, ["budget_tokens", "ttft_ms", "step_time_ms", "longest_gap_ms", "listed", "cost_model"])
    field = f"{metric}_ms"
    tooltip = [
        alt.Tooltip("budget_tokens:Q", title="budget [tokens]", format=TOKENS_FORMAT),
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
        marks = pd.DataFrame({"label": [m[0] for m in budget_marks], "budget_tokens": [m[1] for m in budget_marks]})
        layers.append(
            alt.Chart(marks).mark_rule(strokeDash=[2, 3], color=PALETTE["muted"]).encode(x="budget_tokens:Q")
        )
        layers.append(
            alt.Chart(marks)
            .mark_text(align="left", dx=4, baseline="top", color=PALETTE["muted"], y=4)
            .encode(x="budget_tokens:Q", text="label:N")
        )
    if budget_param is not None:
        picked = (
            alt.Chart(frame)
            .transform_calculate(distance=f"abs(datum.budget_tokens - {budget_param.name})")
            .transform_joinaggregate(nearest="min(distance)", groupby=["cost_model"])
            .transform_filter("datum.distance == datum.nearest")
            .transform_calculate(
                readout=f"format(datum.budget_tokens, ',d') + ' tokens: ' + format(datum.{field}, ',.1f') + ' ms'"
            )
            .encode(x=_budget_x(), y=alt.Y(f"{field}:Q"), tooltip=tooltip)
        )
        layers.append(picked.mark_point(size=160, filled=True, color=PALETTE["highlight"]))
        text = {"align": "left", "dx": 8, "dy": -14, "fontWeight": "bold"}
        layers.append(  # a white halo keeps the readout legible over lines
            picked.mark_text(**text, stroke="white", strokeWidth=4).encode(text="readout:N")
        )
        layers.append(picked.mark_text(**text, color=PALETTE["highlight"]).encode(text="readout:N"))
    return alt.layer(*layers).properties(width=WIDTH - 60, height=height, title=title)


def ttft_and_step_time_chart(
    frame: pd.DataFrame,
    *,
    initial_budget_tokens: int,
    ttft_without_budget_s: float | None = None,
    target_step_s: float | None = None,
    budget_for_target: int | None = None,
    extra_ttft_references: Sequence[tuple[str, float]] = (),
) -> alt.HConcatChart:
    """TTFT and step time against the budget, side by side, with a budget slider.

    The slider (an Altair parameter bound to ``binding_range``) picks a budget; both panels
    highlight the nearest budget of the sweep and print its value, so a reader trades TTFT
    against step time by hand. Works in the offline HTML (Vega-Embed draws it in the page).

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
    budget_for_target : int, optional
        Largest budget meeting the target, drawn on the right [tokens].
    extra_ttft_references : sequence of (label, seconds)
        More horizontal lines on the left, e.g. another cost model's no-budget TTFT.
    """
    low, high = int(frame.budget_tokens.min()), int(frame.budget_tokens.max())
    budget = alt.param(
        name="budget",
        value=int(min(max(initial_budget_tokens, low), high)),
        bind=alt.binding_range(min=low, max=high, step=1, name="Token budget [tokens] "),
    )
    left_refs = [("no budget: whole prompt in one step", ttft_without_budget_s)] if ttft_without_budget_s else []
    left_refs += list(extra_ttft_references)
    right_refs = [_target_reference(target_step_s)] if target_step_s else []
    right_marks = (
        [(f"{fmt_int(budget_for_target)} tokens", budget_for_target)] if budget_for_target is not None else []
    )
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


def longest_gap_bars_chart(
    frame: pd.DataFrame, *, target_step_s: float | None = None, title: str = ""
) -> alt.LayerChart:
    """The seeds' side-by-side comparison: longest gap with and without the budget."""
    _check_rows(len(frame))
    scenarios = list(frame.scenario)
    base = alt.Chart(frame).encode(
        x=alt.X("scenario:N", title="", sort=scenarios, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("longest_gap_ms:Q", title="Longest gap between tokens [ms]"),
    )
    bars = base.mark_bar(size=70).encode(
        color=alt.Color(
            "scenario:N",
            scale=alt.Scale(domain=scenarios, range=[PALETTE["decode"], PALETTE["prompt"]][: len(scenarios)]),
            legend=None,
        ),
        tooltip=[
            alt.Tooltip("scenario:N"),
            alt.Tooltip("longest_gap_ms:Q", title="longest gap [ms]", format=MS_FORMAT),
        ],
    )
    text = base.mark_text(dy=-8, fontWeight="bold").encode(text="label:N")
    layers: list[alt.Chart] = [bars, text]
    if target_step_s is not None:
        layers += _reference_rules([_target_reference(target_step_s)])
    return alt.layer(*layers).properties(width=260, height=HEIGHT, title=title)


# --------------------------------------------------------------------------------------------
# Cost-model variants: calibrated, GEMM tiles, tensor parallelism, experts (notebooks 01, 03,
# 04, 06)
# --------------------------------------------------------------------------------------------


def log_token_grid(max_tokens: int, *, num_points: int = 60, include: Iterable[float] = ()) -> np.ndarray:
    """Token counts from 1 to ``max_tokens``, evenly spaced on a log axis, plus ``include`` [tokens].

    Rounded to whole tokens, sorted and unique (so fewer than ``num_points`` at the low end).
    """
    if max_tokens < 2:
        raise ValueError(f"max_tokens must be >= 2, got {max_tokens}")
    extra = np.asarray([v for v in include if 1 <= v <= max_tokens], dtype=float)
    grid = np.concatenate([np.geomspace(1, max_tokens, num_points), extra])
    return np.unique(np.round(grid).astype(np.int64))


def cost_variants_frame(costs: Mapping[str, Any], tokens: Sequence[int]) -> pd.DataFrame:
    """:func:`step_cost_frame` of several cost models over the same token counts.

    Parameters
    ----------
    costs : mapping of str to cost model
        Curve name (the ``cost_model`` column) → any model with a vectorized
        ``step_time_s(num_tokens)`` (:class:`~budgetlab.roofline.IdealCost`,
        :class:`~budgetlab.calibrated.CalibratedCost`): a pure-prefill step of that many tokens.
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


def tile_cliffs_frame(cost: Any, *, max_tokens: int) -> pd.DataFrame:
    """The step time at each GEMM tile boundary and one token past it: the tile cliffs.

    A GEMM pads its token dimension to whole tiles, so the step of ``k × tile + 1`` tokens
    costs what ``(k + 1) × tile`` tokens do.

    Parameters
    ----------
    cost : CalibratedCost
        A model with ``tile_tokens`` set.
    max_tokens : int
        Largest token count to consider [tokens].

    Returns
    -------
    pandas.DataFrame
        One row per boundary: ``tokens`` (``k × tile``), ``past_tokens`` (one more),
        ``step_time_s``, ``past_step_time_s``, ``jump_s``, ``jump_fraction`` (jump / step at
        the boundary), ``tile_tokens``.
    """
    tile = getattr(cost, "tile_tokens", None)
    if not tile:
        raise ValueError("tile_cliffs_frame needs a cost model with tile_tokens set")
    edges = np.arange(tile, max_tokens, tile, dtype=np.int64)
    _check_rows(len(edges))
    at = np.atleast_1d(np.asarray(cost.step_time_s(edges), dtype=float))
    past = np.atleast_1d(np.asarray(cost.step_time_s(edges + 1), dtype=float))
    return pd.DataFrame(
        {
            "tokens": edges,
            "past_tokens": edges + 1,
            "step_time_s": at,
            "past_step_time_s": past,
            "jump_s": past - at,
            "jump_fraction": (past - at) / at,
            "tile_tokens": int(tile),
        }
    )


def tensor_parallel_frame(
    hardware: HardwareSpec,
    model: ModelSpec,
    tp_degrees: Sequence[int],
    *,
    token_marks: Sequence[int] = (),
) -> pd.DataFrame:
    """One row per tensor-parallel degree of :meth:`CalibratedCost.typical`.

    Parameters
    ----------
    hardware, model : HardwareSpec, ModelSpec
    tp_degrees : sequence of int
        GPUs per replica to compare [count]; each must divide the model's attention heads.
    token_marks : sequence of int
        Step sizes to evaluate [tokens].

    Returns
    -------
    pandas.DataFrame
        ``tp``, ``weight_bytes_per_gpu``, ``weights_fit`` (one GPU's share of the weights fits
        in its memory: :func:`budgetlab.memory.weights_fit`), ``weight_read_s`` (one GPU's
        share at the achieved bandwidth), ``per_token_s`` (at the achieved FLOP rate, split
        over the GPUs), and for each mark ``step_<n>_s``, ``all_reduce_<n>_s`` and
        ``speedup_<n>`` (over the first degree listed).
    """
    rows = []
    for tp in tp_degrees:
        cost = CalibratedCost.typical(hardware, model, tp=int(tp))
        row: dict[str, Any] = {
            "tp": int(tp),
            "weight_bytes_per_gpu": weight_bytes_per_gpu(model, tp=int(tp)),
            "weights_fit": weights_fit(hardware, model, tp=int(tp)),
            "weight_read_s": cost.weight_read_s,
            "per_token_s": cost.per_token_s,
        }
        for mark in token_marks:
            row[f"step_{int(mark)}_s"] = float(cost.step_time_s(int(mark)))
            row[f"all_reduce_{int(mark)}_s"] = float(cost.all_reduce_s(int(mark)))
        rows.append(row)
    frame = pd.DataFrame(rows)
    for mark in token_marks:
        column = f"step_{int(mark)}_s"
        frame[f"speedup_{int(mark)}"] = frame[column].iloc[0] / frame[column]
    return frame


def tensor_parallel_table(frame: pd.DataFrame, *, highlight_mark: int | None = None) -> pd.DataFrame:
    """:func:`tensor_parallel_frame` for reading: units in the headers, rounded numbers.

    ``highlight_mark`` (a token count of the frame) adds the all-reduce and speed-up columns
    for that step size.
    """
    table = pd.DataFrame(
        {
            "GPUs (tp)": frame.tp.astype(int),
            "Weights per GPU [GB]": (frame.weight_bytes_per_gpu / 1e9).round(1),
            "Fits one GPU": np.where(frame.weights_fit, "yes", "no"),
            "Weight read [ms]": (frame.weight_read_s * 1e3).round(2),
            "Per token [µs]": (frame.per_token_s * 1e6).round(2),
        }
    )
    table = table.set_index("GPUs (tp)")
    for column in frame.columns:
        if column.startswith("step_") and column.endswith("_s"):
            mark = int(column[len("step_") : -len("_s")])
            table[f"Step at {mark:,d} tokens [ms]"] = (frame[column] * 1e3).round(1).to_numpy()
            if mark == highlight_mark:
                table[f"All-reduce at {mark:,d} tokens [ms]"] = (frame[f"all_reduce_{mark}_s"] * 1e3).round(2).to_numpy()
                table[f"Speed-up at {mark:,d} tokens [×]"] = frame[f"speedup_{mark}"].round(2).to_numpy()
    return table


def moe_frame(cost: Any, tokens: Sequence[int]) -> pd.DataFrame:
    """Weights read and step time of a mixture-of-experts model against the step's tokens.

    Parameters
    ----------
    cost : CalibratedCost
        With ``moe=True`` (e.g. :meth:`CalibratedCost.typical` of Mixtral 8x7B).
    tokens : sequence of int
        Token counts [tokens].

    Returns
    -------
    pandas.DataFrame
        ``tokens``, ``expected_experts`` (distinct experts touched per layer),
        ``num_experts``, ``weight_bytes`` (all GPUs), ``weight_bytes_per_gpu``,
        ``weight_gb``, ``step_time_s``, ``step_time_ms``, ``dense_step_time_s`` and
        ``dense_step_time_ms`` (the same step if every expert were read and computed, as in
        the idealized model), ``model``, ``hardware``, ``tp``.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    _check_rows(len(tokens))
    dense = cost.with_(moe=False)
    weight_bytes = np.asarray(cost.weight_bytes(tokens), dtype=float)
    step_s = np.asarray(cost.step_time_s(tokens), dtype=float)
    dense_s = np.asarray(dense.step_time_s(tokens), dtype=float)
    frame = pd.DataFrame(
        {
            "tokens": tokens,
            "expected_experts": np.asarray(cost.expected_experts(tokens), dtype=float),
            "num_experts": cost.model.num_experts,
            "weight_bytes": weight_bytes,
            "weight_bytes_per_gpu": np.asarray(cost.weight_bytes_per_gpu(tokens), dtype=float),
            "weight_gb": weight_bytes / 1e9,
            "step_time_s": step_s,
            "step_time_ms": step_s * 1e3,
            "dense_step_time_s": dense_s,
            "dense_step_time_ms": dense_s * 1e3,
        }
    )
    frame["tp"] = cost.tp
    for column, value in _names(cost).items():
        frame[column] = value
    return frame


def moe_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`moe_frame` at a few token counts, for reading."""
    return pd.DataFrame(
        {
            "Tokens in the step": frame.tokens.astype(int),
            "Experts touched per layer (of "
            + fmt_int(frame.num_experts.iloc[0])
            + ")": frame.expected_experts.round(2),
            "Weights read [GB]": frame.weight_gb.round(1),
            "Step time [ms]": frame.step_time_ms.round(1),
            "Every expert read [ms]": frame.dense_step_time_ms.round(1),
        }
    ).set_index("Tokens in the step")


def moe_chart(frame: pd.DataFrame, *, title: str = "") -> alt.HConcatChart:
    """Left: weight bytes a step reads; right: its time, against the step's tokens (log axis)."""
    _check_rows(len(frame))
    frame = _slim(frame, ["tokens", "expected_experts", "weight_gb", "step_time_ms", "dense_step_time_ms"])
    x = alt.X(
        "tokens:Q", title="Tokens in the step [tokens]", scale=alt.Scale(type="log"), axis=alt.Axis(format="~s")
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


def budget_payoff_frame(
    costs: Mapping[str, Any],
    *,
    budget_tokens: int,
    factor: int = 4,
    num_decodes: int,
    prompt_tokens: int,
    decode_context_tokens: int = 0,
) -> pd.DataFrame:
    """What ``factor`` × a bigger budget still buys the prompt's TTFT, per cost model.

    Parameters
    ----------
    costs : mapping of str to cost model
        Name → model (``batch_time_s``).
    budget_tokens : int
        The starting budget, e.g. where the idealized TTFT curve flattens [tokens].
    factor : int
        The bigger budget is ``factor × budget_tokens`` [-].
    num_decodes, prompt_tokens, decode_context_tokens : int
        The scripted scenario (see :func:`budgetlab.budget.ttft_s`).

    Returns
    -------
    pandas.DataFrame
        One row per model: ``cost_model``, ``budget_tokens``, ``bigger_budget_tokens``,
        ``ttft_s``, ``bigger_ttft_s``, ``ttft_without_budget_s``, ``saved_s`` (TTFT the bigger
        budget saves), ``saved_fraction`` (of the TTFT at ``budget_tokens``),
        ``above_floor_fraction`` (how far the TTFT at ``budget_tokens`` is above the no-budget
        TTFT, relative to it).
    """
    bigger = int(budget_tokens) * int(factor)
    scenario = {
        "num_decodes": num_decodes,
        "prompt_tokens": prompt_tokens,
        "decode_context_tokens": decode_context_tokens,
    }
    rows = []
    for name, cost in costs.items():
        at = float(ttft_s(cost, budget_tokens=int(budget_tokens), **scenario))
        big = float(ttft_s(cost, budget_tokens=bigger, **scenario))
        floor = float(ttft_s(cost, budget_tokens=None, **scenario))
        rows.append(
            {
                "cost_model": name,
                "budget_tokens": int(budget_tokens),
                "bigger_budget_tokens": bigger,
                "ttft_s": at,
                "bigger_ttft_s": big,
                "ttft_without_budget_s": floor,
                "saved_s": at - big,
                "saved_fraction": (at - big) / at,
                "above_floor_fraction": at / floor - 1.0,
            }
        )
    return pd.DataFrame(rows)


def budget_payoff_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`budget_payoff_frame` for reading."""
    start = fmt_int(frame.budget_tokens.iloc[0])
    bigger = fmt_int(frame.bigger_budget_tokens.iloc[0])
    return pd.DataFrame(
        {
            "Cost model": frame.cost_model.to_numpy(),
            f"TTFT at {start} tokens [ms]": (frame.ttft_s * 1e3).round(1).to_numpy(),
            f"TTFT at {bigger} tokens [ms]": (frame.bigger_ttft_s * 1e3).round(1).to_numpy(),
            "Saved [ms]": (frame.saved_s * 1e3).round(1).to_numpy(),
            "Saved [%]": (frame.saved_fraction * 100).round(1).to_numpy(),
            "No budget [ms]": (frame.ttft_without_budget_s * 1e3).round(1).to_numpy(),
        }
    ).set_index("Cost model")


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
    return alt.layer(*layers).properties(width=320, height=HEIGHT, title=title)


# --------------------------------------------------------------------------------------------
# Calibration (notebook 06)
# --------------------------------------------------------------------------------------------

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


def calibration_rows_table(result: Any) -> pd.DataFrame:
    """A :class:`~budgetlab.CalibrationResult`'s rows for reading: measured, fitted, error."""
    t = result.table
    return pd.DataFrame(
        {
            "Prefill tokens": t.num_prefill_tokens.astype(int),
            "Decodes": t.num_decode_tokens.astype(int),
            "Context [tokens]": t.context_tokens.astype(int),
            "Measured [ms]": t.step_time_ms.round(2),
            "Fitted model [ms]": t.predicted_ms.round(2),
            "Error [%]": (t.relative_error * 100).round(1),
            "Used for": t["split"].map(_FIT_SPLITS),
        }
    )


_PARAMETER_DISPLAY = {
    "step_overhead_s": ("Per-step overhead", "ms", 1e3),
    "layer_overhead_s": ("Per-layer overhead", "µs", 1e6),
    "bandwidth_efficiency": ("Bandwidth efficiency", "of peak", 1.0),
    "flop_efficiency": ("FLOP efficiency", "of peak", 1.0),
    "knee_overlap_loss": ("Knee overlap loss", "(0: perfect overlap)", 1.0),
    "tile_tokens": ("GEMM tile", "tokens", 1.0),
}


def calibration_parameters_table(result: Any) -> pd.DataFrame:
    """Fitted parameters with one standard error each, in display units.

    ``∞`` means the rows do not constrain the parameter; "at a bound" that the optimum sits on
    its allowed range's edge, where the standard error understates the uncertainty.
    """
    rows = []
    for row in result.parameters.itertuples(index=False):
        label, unit, scale = _PARAMETER_DISPLAY.get(row.name, (row.name, row.unit, 1.0))
        value = float(row.value) * scale if row.value is not None else float("nan")
        err = float(row.stderr) * scale if row.stderr is not None else float("nan")
        digits = 2 if scale != 1.0 else 3
        rows.append(
            {
                "Parameter": label,
                "Name": row.name,
                "Fitted value": f"{value:,.{digits}f}",
                "± 1 std. error": "–" if np.isnan(err) else ("∞" if np.isinf(err) else f"{err:,.{digits}f}"),
                "Unit": unit,
                "Note": "at a bound" if bool(row.at_bound) else "",
            }
        )
    return pd.DataFrame(rows).set_index("Parameter")


def calibration_numbers(result: Any) -> dict[str, Any]:
    """A :class:`~budgetlab.CalibrationResult`'s key numbers as plain values (for results JSON).

    ``parameters`` maps each fitted name to ``{"value", "stderr", "relative_stderr",
    "at_bound"}`` in SI units (``relative_stderr`` = stderr / |value|, infinite at 0).
    """
    parameters = {}
    for row in result.parameters.itertuples(index=False):
        value, stderr = float(row.value), float(row.stderr)
        relative = stderr / abs(value) if value != 0 else float("inf")
        parameters[row.name] = {
            "value": value,
            "stderr": stderr,
            "relative_stderr": relative,
            "at_bound": bool(row.at_bound),
        }
    return {
        "parameters": parameters,
        "train_mape": result.train_mape,
        "train_max_error": result.train_max_error,
        "holdout_mape": result.holdout_mape,
        "holdout_max_error": result.holdout_max_error,
        "num_train": result.num_train,
        "num_holdout": result.num_holdout,
    }


def residual_frame(table: Any, costs: Mapping[str, Any]) -> pd.DataFrame:
    """Each cost model's error on every measured row (via :func:`budgetlab.predict_step_ms`).

    Parameters
    ----------
    table : path or pandas.DataFrame
        Measured steps; a :class:`~budgetlab.CalibrationResult`'s ``table`` keeps its split.
    costs : mapping of str to cost model
        Name → model.

    Returns
    -------
    pandas.DataFrame
        One row per measured row × model: the columns of :func:`measured_points_frame` plus
        ``cost_model``, ``predicted_ms``, ``residual_ms`` (predicted − measured) and
        ``relative_error`` (residual / measured).
    """
    frame = table if isinstance(table, pd.DataFrame) and "split" in table else read_measurements(table)
    points = measured_points_frame(frame)
    frames = []
    for name, cost in costs.items():
        predicted = predict_step_ms(cost, frame)
        part = points.copy()
        part["cost_model"] = name
        part["predicted_ms"] = predicted
        part["residual_ms"] = predicted - part.step_time_ms.to_numpy()
        part["relative_error"] = part.residual_ms / part.step_time_ms
        frames.append(part)
    out = pd.concat(frames, ignore_index=True)
    _check_rows(len(out))
    return out


def residual_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per cost model of :func:`residual_frame`: ``mape`` and ``max_error`` (absolute relative
    errors) over all rows, and ``mean_error`` (signed: > 0 means the model is too slow)."""
    grouped = frame.assign(abs_error=frame.relative_error.abs()).groupby("cost_model", sort=False)
    return pd.DataFrame(
        {
            "mape": grouped.abs_error.mean(),
            "max_error": grouped.abs_error.max(),
            "mean_error": grouped.relative_error.mean(),
        }
    )


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
    x = alt.X("tokens:Q", title="Tokens in the step [tokens]", scale=scale, axis=alt.Axis(format="~s"))
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
    return alt.layer(lines, points).resolve_scale(color="independent", shape="independent").properties(
        width=WIDTH, height=HEIGHT + 40, title=title
    )


def residual_chart(frame: pd.DataFrame, *, title: str = "") -> alt.LayerChart:
    """Each cost model's relative error on every measured row, against the step's tokens.

    Points above zero: the model predicts a slower step than measured.
    """
    _check_rows(len(frame))
    models = list(dict.fromkeys(frame.cost_model))
    data = frame.assign(error_percent=frame.relative_error * 100)
    x = alt.X("tokens:Q", title="Tokens in the step [tokens]", scale=alt.Scale(type="log"), axis=alt.Axis(format="~s"))
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
    return alt.layer(zero, lines, points).properties(width=WIDTH, height=HEIGHT, title=title)


# --------------------------------------------------------------------------------------------
# KV memory and simulated runs (notebook 05)
# --------------------------------------------------------------------------------------------

_MEMORY_PARTS = {
    "weights": ("model weights", PALETTE["muted"]),
    "activations": ("activations (peak, for the budget)", PALETTE["prompt"]),
    "kv": ("KV cache", PALETTE["decode"]),
}


def kv_capacity_table(capacity: Any) -> pd.DataFrame:
    """A :class:`~budgetlab.memory.KVCapacity` for reading: where the usable memory goes."""
    usable = capacity.usable_bytes
    rows = [
        ("Usable memory (total × gpu_memory_utilization)", fmt_gb(usable, 2), "100.0 %"),
        ("Model weights", fmt_gb(capacity.weight_bytes, 2), f"{capacity.weight_bytes / usable:.1%}"),
        ("Activations (estimated peak for the budget)", fmt_gb(capacity.activation_bytes, 2),
         f"{capacity.activation_bytes / usable:.1%}"),
        ("KV cache", fmt_gb(capacity.kv_bytes, 2), f"{capacity.kv_fraction:.1%}"),
        ("KV bytes per token", f"{capacity.kv_bytes_per_token / 2**10:,.0f} KiB", ""),
        ("KV cache in tokens", fmt_tokens(capacity.num_tokens), ""),
        ("KV cache in blocks", f"{fmt_int(capacity.num_blocks)} blocks of {capacity.block_size} tokens", ""),
    ]
    return pd.DataFrame(rows, columns=["", "Amount", "Share of usable memory"]).set_index("")


def memory_split_frame(capacity: Any) -> pd.DataFrame:
    """The usable memory split into weights, activations and KV cache: three rows."""
    values = {
        "weights": capacity.weight_bytes,
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
    frame["gb"] = frame["bytes"] / 1e9
    frame["fraction"] = frame["bytes"] / capacity.usable_bytes
    frame["order"] = np.arange(len(frame))
    return frame


def memory_split_chart(frame: pd.DataFrame, *, title: str = "") -> alt.Chart:
    """One horizontal bar: the usable GPU memory as weights, activations and KV cache."""
    labels = list(frame.part_label)
    return (
        alt.Chart(frame)
        .mark_bar(height=34)
        .encode(
            x=alt.X("gb:Q", title="Usable GPU memory [GB]", stack="zero"),
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
                alt.Tooltip("gb:Q", title="GB", format=",.2f"),
                alt.Tooltip("fraction:Q", title="share", format=".1%"),
            ],
        )
        .properties(width=WIDTH + 80, height=60, title=title)
    )


def kv_budget_frame(
    hardware: HardwareSpec,
    model: ModelSpec,
    budgets: Sequence[int],
    *,
    max_num_seqs: int,
    gpu_memory_utilization: float = 0.9,
    block_size: int = 16,
) -> pd.DataFrame:
    """KV capacity for each token budget: a bigger budget needs more activation memory.

    Budgets below ``max_num_seqs`` (a configuration vLLM refuses) are skipped.

    Returns
    -------
    pandas.DataFrame
        ``budget_tokens``, ``activation_bytes``, ``activation_gb``, ``kv_bytes``, ``kv_gb``,
        ``kv_tokens``, ``kv_blocks``, ``kv_tokens_lost`` (fewer KV tokens than at the smallest
        budget) and ``kv_tokens_lost_fraction`` (that, relative to the smallest budget's).
    """
    rows = []
    for budget in sorted(set(int(b) for b in budgets)):
        if budget < max_num_seqs:
            continue
        engine = EngineConfig(
            max_num_batched_tokens=budget,
            max_num_seqs=max_num_seqs,
            gpu_memory_utilization=gpu_memory_utilization,
            block_size=block_size,
        )
        cap = kv_capacity(hardware, model, engine)
        rows.append(
            {
                "budget_tokens": budget,
                "activation_bytes": cap.activation_bytes,
                "kv_bytes": cap.kv_bytes,
                "kv_tokens": cap.num_tokens,
                "kv_blocks": cap.num_blocks,
            }
        )
    if not rows:
        raise ValueError(f"every budget is below max_num_seqs ({max_num_seqs}); vLLM refuses those")
    frame = pd.DataFrame(rows)
    _check_rows(len(frame))
    frame["activation_gb"] = frame.activation_bytes / 1e9
    frame["kv_gb"] = frame.kv_bytes / 1e9
    frame["kv_tokens_lost"] = frame.kv_tokens.iloc[0] - frame.kv_tokens
    frame["kv_tokens_lost_fraction"] = frame.kv_tokens_lost / frame.kv_tokens.iloc[0]
    return frame


def kv_budget_chart(frame: pd.DataFrame, *, budget_tokens: int | None = None, title: str = "") -> alt.LayerChart:
    """KV-cache tokens against the token budget (activations grow with the budget)."""
    _check_rows(len(frame))
    base = alt.Chart(frame).encode(
        x=_budget_x(),
        y=alt.Y("kv_tokens:Q", title="KV cache [tokens]", scale=alt.Scale(zero=False), axis=alt.Axis(format="~s")),
        tooltip=[
            alt.Tooltip("budget_tokens:Q", title="budget [tokens]", format=TOKENS_FORMAT),
            alt.Tooltip("activation_gb:Q", title="activations [GB]", format=",.2f"),
            alt.Tooltip("kv_gb:Q", title="KV cache [GB]", format=",.2f"),
            alt.Tooltip("kv_tokens:Q", title="KV cache [tokens]", format=TOKENS_FORMAT),
            alt.Tooltip("kv_tokens_lost:Q", title="KV tokens lost vs the smallest budget", format=TOKENS_FORMAT),
        ],
    )
    layers: list[alt.Chart] = [
        base.mark_line(strokeWidth=2.5, color=PALETTE["decode"]),
        base.mark_point(size=70, filled=True, color=PALETTE["decode"]),
    ]
    if budget_tokens is not None and (frame.budget_tokens == budget_tokens).any():
        picked = frame[frame.budget_tokens == budget_tokens]
        layers.append(
            alt.Chart(picked).mark_point(size=180, filled=True, color=PALETTE["highlight"]).encode(
                x="budget_tokens:Q", y="kv_tokens:Q"
            )
        )
    return alt.layer(*layers).properties(width=WIDTH, height=HEIGHT - 40, title=title)


def _time_weighted(values: np.ndarray, weights: np.ndarray, bins: np.ndarray, num_bins: int) -> np.ndarray:
    total = np.bincount(bins, weights=weights, minlength=num_bins)
    summed = np.bincount(bins, weights=values * weights, minlength=num_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, summed / total, 0.0)


def _steps_with_tokens(result: Any) -> pd.DataFrame:
    steps = result.steps
    return steps.assign(
        num_tokens=steps.num_decode_tokens + steps.num_prefill_tokens,
        kv_used_fraction=1.0 - steps.num_free_kv_blocks / result.num_kv_blocks,
    )


def sim_timeline_frame(results: Mapping[str, Any], *, num_bins: int = 120) -> pd.DataFrame:
    """Simulated runs over time, aggregated into ``num_bins`` equal time bins per run.

    Each step counts in the bin where it starts, weighted by its duration; bins share their
    edges across runs so the runs line up on one time axis.

    Parameters
    ----------
    results : mapping of str to SimResult
        Case name → :func:`budgetlab.simulator.simulate` output.
    num_bins : int
        Time bins [count].

    Returns
    -------
    pandas.DataFrame
        One row per case × bin with steps in it: ``case``, ``time_s`` (bin start),
        ``running_mean`` (duration-weighted mean running requests), ``running_max``,
        ``waiting_mean``, ``kv_used_fraction_mean``, ``kv_used_fraction_max`` (share of KV
        blocks in use after scheduling), ``tokens_per_step_mean``, ``num_preemptions`` (sum),
        ``busy_fraction`` (share of the bin spent running steps), ``max_num_seqs``.
    """
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    _check_rows(len(results) * num_bins)
    end_s = max(float((r.steps.start_at_s + r.steps.duration_s).max()) for r in results.values())
    width = end_s / num_bins
    frames = []
    for case, result in results.items():
        steps = _steps_with_tokens(result)
        bins = np.minimum((steps.start_at_s.to_numpy() / width).astype(np.int64), num_bins - 1)
        weight = steps.duration_s.to_numpy()
        grouped = steps.assign(bin=bins).groupby("bin")
        frame = pd.DataFrame(
            {
                "bin": np.arange(num_bins),
                "running_mean": _time_weighted(steps.num_running.to_numpy(float), weight, bins, num_bins),
                "waiting_mean": _time_weighted(steps.num_waiting.to_numpy(float), weight, bins, num_bins),
                "kv_used_fraction_mean": _time_weighted(steps.kv_used_fraction.to_numpy(), weight, bins, num_bins),
                "tokens_per_step_mean": _time_weighted(steps.num_tokens.to_numpy(float), weight, bins, num_bins),
                "num_preemptions": np.bincount(bins, weights=steps.num_preemptions.to_numpy(float), minlength=num_bins),
                "busy_fraction": np.minimum(np.bincount(bins, weights=weight, minlength=num_bins) / width, 1.0),
            }
        )
        frame = frame.merge(
            pd.DataFrame(
                {
                    "running_max": grouped.num_running.max(),
                    "kv_used_fraction_max": grouped.kv_used_fraction.max(),
                }
            ),
            left_on="bin",
            right_index=True,
            how="inner",
        )
        frame["time_s"] = frame.bin * width
        frame["case"] = case
        frame["max_num_seqs"] = result.engine.max_num_seqs
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
        ["case", "time_s", "running_mean", "running_max", "waiting_mean", "kv_used_fraction_max",
         "tokens_per_step_mean", "num_preemptions", "max_num_seqs"],
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
        alt.layer(*running_layers).properties(width=width, height=height),
        base.mark_line(strokeWidth=2, interpolate="step-after")
        .encode(y=alt.Y("kv_used_fraction_max:Q", title="KV blocks in use", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])))
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


GATE_LABELS = {
    "none": "nobody waiting",
    "slot": "sequence slot (max_num_seqs)",
    "budget": "token budget",
    "kv": "KV memory",
}
_GATE_COLORS = {
    "none": PALETTE["unused"],
    "slot": PALETTE["highlight"],
    "budget": PALETTE["prompt"],
    "kv": PALETTE["decode"],
}


def gate_share_frame(results: Mapping[str, Any]) -> pd.DataFrame:
    """Which of the three gates held the waiting requests back, as a share of busy time.

    Each step is classified by :func:`budgetlab.metrics.step_gates` (``slot``, ``budget``,
    ``kv``, or ``none`` with nobody waiting) and weighs its duration.

    Returns
    -------
    pandas.DataFrame
        Four rows per case: ``case``, ``gate``, ``gate_label``, ``time_s``, ``fraction``.
    """
    rows = []
    for case, result in results.items():
        engine = result.engine
        gates = step_gates(
            result.steps, max_num_seqs=engine.max_num_seqs, max_num_batched_tokens=engine.max_num_batched_tokens
        )["gate"].to_numpy()
        duration = result.steps.duration_s.to_numpy()
        busy = float(duration.sum())
        for gate in GATES:
            time = float(duration[gates == gate].sum())
            rows.append(
                {
                    "case": case,
                    "gate": gate,
                    "gate_label": GATE_LABELS[gate],
                    "time_s": time,
                    "fraction": time / busy if busy > 0 else 0.0,
                }
            )
    return pd.DataFrame(rows)


def gate_share_chart(frame: pd.DataFrame, *, title: str = "") -> alt.Chart:
    """One stacked bar per case: the share of busy time each gate held requests back."""
    _check_rows(len(frame))
    gates = [g for g in GATE_LABELS if g in set(frame.gate)]
    order = {g: i for i, g in enumerate(gates)}
    return (
        alt.Chart(frame.assign(order=frame.gate.map(order)))
        .mark_bar(height=24)
        .encode(
            y=alt.Y("case:N", title="", sort=list(dict.fromkeys(frame.case)), axis=alt.Axis(labelLimit=360)),
            x=alt.X("fraction:Q", title="Share of the time the GPU was busy", axis=alt.Axis(format="%"), stack="zero"),
            color=alt.Color(
                "gate_label:N",
                title="requests waiting, held back by",
                sort=[GATE_LABELS[g] for g in gates],
                scale=alt.Scale(domain=[GATE_LABELS[g] for g in gates], range=[_GATE_COLORS[g] for g in gates]),
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


def sim_cases_frame(results: Mapping[str, Any]) -> pd.DataFrame:
    """One row per simulated case: its configuration and headline numbers (SI units).

    Returns
    -------
    pandas.DataFrame
        ``case``, ``policy``, ``max_num_seqs``, ``max_num_batched_tokens``, ``num_kv_blocks``,
        ``kv_tokens``, every key of ``SimResult.summary()``, plus ``running_mean``
        (duration-weighted mean running requests), ``running_max``, ``tokens_per_step_mean``
        (duration-weighted), ``busy_fraction`` (steps' time over the makespan): see
        :func:`budgetlab.metrics.busy_stats`.
    """
    rows = []
    for case, result in results.items():
        summary = result.summary()
        rows.append(
            {
                "case": case,
                "policy": result.engine.policy,
                "max_num_seqs": result.engine.max_num_seqs,
                "max_num_batched_tokens": result.engine.max_num_batched_tokens,
                "long_prefill_token_threshold": result.engine.long_prefill_token_threshold,
                "num_kv_blocks": result.num_kv_blocks,
                "kv_tokens": result.num_kv_blocks * result.engine.block_size,
                **summary,
                **busy_stats(result.steps, makespan_s=summary["makespan_s"]),
            }
        )
    return pd.DataFrame(rows)


def sim_cases_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`sim_cases_frame` for reading: one column per case, units in the row labels."""
    table = pd.DataFrame(
        {
            "max_num_seqs": frame.max_num_seqs.map(fmt_int),
            "KV pool [tokens]": frame.kv_tokens.map(fmt_int),
            "TTFT p50 [s]": frame.ttft_p50_s.map(lambda v: f"{v:,.2f}"),
            "TTFT p90 [s]": frame.ttft_p90_s.map(lambda v: f"{v:,.2f}"),
            "ITL p50 [ms]": (frame.itl_p50_s * 1e3).map(lambda v: f"{v:,.1f}"),
            "ITL p99 [ms]": (frame.itl_p99_s * 1e3).map(lambda v: f"{v:,.1f}"),
            "Longest gap [ms]": (frame.max_itl_s * 1e3).map(lambda v: f"{v:,.0f}"),
            "Output throughput [tokens/s]": frame.throughput_tokens_per_s.map(fmt_int),
            "Preemptions": frame.num_preemptions.map(fmt_int),
            "Peak KV use [%]": (frame.kv_peak_fraction * 100).map(lambda v: f"{v:,.0f}"),
            "Running requests, mean": frame.running_mean.map(lambda v: f"{v:,.1f}"),
            "Tokens per step, mean": frame.tokens_per_step_mean.map(fmt_int),
            "All requests done after [s]": frame.makespan_s.map(lambda v: f"{v:,.1f}"),
        }
    )
    table.index = frame.case
    out = table.T
    out.columns.name = None
    out.index.name = ""
    return out


def sim_case_numbers(frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """:func:`sim_cases_frame` as ``{case: {column: value}}`` (for results JSON)."""
    return {row["case"]: {k: v for k, v in row.items() if k != "case"} for row in frame.to_dict("records")}


_POLICY_METRICS = {
    "ttft_p50_s": "TTFT p50",
    "ttft_p90_s": "TTFT p90",
    "ttft_p99_s": "TTFT p99",
    "itl_p50_s": "ITL p50",
    "itl_p90_s": "ITL p90",
    "itl_p99_s": "ITL p99",
    "max_itl_s": "longest gap",
}


def policy_comparison_frame(results: Mapping[str, Any]) -> pd.DataFrame:
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
                {"case": case, "metric": label, "key": key, "value_s": value, "value_ms": value * 1e3,
                 "label": fmt_ms(value, 0 if value >= 1 else 1)}
            )
    return pd.DataFrame(rows)


def policy_comparison_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`policy_comparison_frame` side by side: one row per metric, one column per run [ms]."""
    table = frame.pivot(index="metric", columns="case", values="value_ms").round(1)
    table = table.reindex([m for m in _POLICY_METRICS.values() if m in table.index])
    table = table[list(dict.fromkeys(frame.case))]
    table.index.name = "[ms]"
    table.columns.name = None
    return table


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


# --------------------------------------------------------------------------------------------
# Load sweeps, capacity per replica and the tuner (notebooks 07 and 08)
# --------------------------------------------------------------------------------------------

__all__ += [
    "LOAD_PERCENTILES",
    "candidates_chart",
    "candidates_table",
    "capacity_frame",
    "capacity_table",
    "frontier_chart",
    "frontier_frame",
    "load_grid",
    "load_sweep_chart",
    "load_sweep_frame",
    "slo_check_frame",
    "slo_check_table",
    "workload_stats_table",
]

#: Percentiles a load sweep reports for TTFT and ITL (keys ``ttft_p90_s`` ... of a summary).
LOAD_PERCENTILES = ("p50", "p90", "p99")

_LOAD_METRICS = {"ttft": "TTFT", "itl": "ITL"}


def _metric_label(metric: str) -> str:
    """``"ttft_p90_s"`` → ``"TTFT p90"``; ``"max_itl_s"`` → ``"longest gap"``."""
    if metric == "max_itl_s":
        return "longest gap"
    parts = metric.removesuffix("_s").split("_")
    return " ".join([parts[0].upper(), *parts[1:]])


def _fmt_rate(rate_per_s: float) -> str:
    """``34.556`` → ``"34.6 req/s"`` (three significant digits); ``"n/a"`` when not finite."""
    rate = float(rate_per_s)
    return f"{rate:,.3g} req/s" if np.isfinite(rate) else "n/a"


def _fmt_latency(seconds: float) -> str:
    """Three significant digits, milliseconds below a second and seconds above: ``0.8`` →
    ``"800 ms"``, ``0.0332`` → ``"33.2 ms"``, ``0.00831`` → ``"8.31 ms"``, ``2.5`` → ``"2.50 s"``."""
    seconds = float(seconds)
    if not np.isfinite(seconds):
        return "n/a"
    if seconds >= 1:
        return f"{seconds:,.2f} s"
    return f"{float(f'{seconds * 1e3:.3g}'):g} ms" if seconds * 1e3 >= 100 else f"{seconds * 1e3:.3g} ms"


def load_grid(service_rate_per_s: float, *, num_loads: int, max_load_fraction: float = 1.1) -> np.ndarray:
    """Offered loads for a sweep: ``num_loads`` evenly spaced up to ``max_load_fraction`` of the
    replica's service rate [1/s], rounded to three significant digits.

    With the defaults the grid stops just past the service rate
    (:func:`budgetlab.sweep.service_rate_per_s`), where every configuration's queue grows
    without bound, so each curve shows its hockey stick.

    Examples
    --------
    >>> load_grid(38.0, num_loads=4).tolist()
    [10.5, 20.9, 31.4, 41.8]
    """
    if num_loads < 1:
        raise ValueError(f"num_loads must be >= 1, got {num_loads}")
    if not (np.isfinite(service_rate_per_s) and service_rate_per_s > 0 and max_load_fraction > 0):
        raise ValueError(
            f"service_rate_per_s ({service_rate_per_s}) and max_load_fraction ({max_load_fraction}) must be > 0"
        )
    top = float(service_rate_per_s) * float(max_load_fraction)
    rates = top * np.arange(1, num_loads + 1) / num_loads
    return np.unique([float(f"{r:.3g}") for r in rates])


def workload_stats_table(workloads: dict[str, Any], *, seed: int = 0) -> pd.DataFrame:
    """Prompt and output lengths of one or more workloads, side by side [tokens].

    Parameters
    ----------
    workloads : mapping of str to SweepWorkload
        Column name → workload (its requests are drawn at 1 req/s; lengths do not depend on the
        load).
    seed : int
        Workload seed [-].

    Returns
    -------
    pandas.DataFrame
        One row per statistic (median, 90th percentile and mean of the prompt, the output and
        their sum), one column per workload, whole tokens.
    """
    columns = {}
    for name, workload in workloads.items():
        requests = workload.requests(rate_per_s=1.0, seed=seed)
        stats = trace_stats(requests)
        columns[name] = [
            stats["prompt_p50_tokens"],
            stats["prompt_p90_tokens"],
            stats["prompt_mean_tokens"],
            stats["output_p50_tokens"],
            stats["output_p90_tokens"],
            stats["output_mean_tokens"],
            mean_sequence_tokens(workload, seed=seed),
            len(requests),
        ]
    index = [
        "Prompt, median [tokens]",
        "Prompt, 90th percentile [tokens]",
        "Prompt, mean [tokens]",
        "Output, median [tokens]",
        "Output, 90th percentile [tokens]",
        "Output, mean [tokens]",
        "Prompt + output, mean [tokens]",
        "Requests per simulation",
    ]
    table = pd.DataFrame(columns, index=index).map(fmt_int)
    table.index.name = ""
    return table


def capacity_frame(capacities: pd.DataFrame) -> pd.DataFrame:
    """:func:`budgetlab.sweep.capacity_by_budget`'s capacities with the labels prose and charts
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
    frame["label"] = [_fmt_rate(c) if s == "ok" else s for c, s in zip(frame.capacity_per_s, frame.status)]
    return frame


def _breaks_labels(capacities: pd.DataFrame) -> list[str]:
    return [_metric_label(m) if m else "" for m in capacities.breaks_on]


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
    slo: Any = None,
    budget_tokens: int | None = None,
) -> pd.DataFrame:
    """TTFT and ITL percentiles against offered load, tidy: one row per point × metric × percentile.

    Parameters
    ----------
    tables : DataFrame or sequence of them
        :func:`budgetlab.sweep.sweep` outputs (one per workload when comparing workloads).
    evaluations : DataFrame or sequence of them
        The simulations of capacity searches (the second output of
        :func:`budgetlab.sweep.capacity_by_budget`):
        they add points where each curve crosses the SLO. Points beyond the sweep's highest
        load are left out; a load the sweep already has keeps the sweep's row.
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
        ``series``, ``budget_tokens``, ``workload``, ``rate_per_s``, ``metric`` (``"TTFT"``,
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
            parts.append(
                searched.rename(columns={"budget_tokens": "max_num_batched_tokens"})
                .loc[lambda f: f.rate_per_s <= top]
                .assign(source="capacity search")
            )
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
        for metric, metric_label in _LOAD_METRICS.items():
            for pct in LOAD_PERCENTILES:
                value = float(record[f"{metric}_{pct}_s"])
                row = {
                    "series": record["series"],
                    "budget_tokens": int(record["max_num_batched_tokens"]),
                    "workload": record["workload"],
                    "rate_per_s": float(record["rate_per_s"]),
                    "metric": metric_label,
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


def _slo_lines(slo: Any, metric: str) -> pd.DataFrame:
    """The SLO's limits on one metric (``"ttft"`` or ``"itl"``) as rules: ``value_ms``, ``label``."""
    limits = {m: v for m, v in slo.limits.items() if m.startswith(f"{metric}_")}
    return pd.DataFrame(
        {
            "value_ms": [v * 1e3 for v in limits.values()],
            "label": [f"SLO: {_metric_label(m)} ≤ {_fmt_latency(v)}" for m, v in limits.items()],
        }
    )


def load_sweep_chart(
    frame: pd.DataFrame,
    capacities: pd.DataFrame | None = None,
    *,
    slo: Any = None,
    ttft_percentile: str = "p90",
    itl_percentile: str = "p99",
    title: str = "",
) -> alt.HConcatChart:
    """TTFT and ITL against offered load, one line per series, with percentile dropdowns.

    Two dropdowns under the charts pick the percentile each panel shows (p50, p90, p99); they
    start at the SLO's percentiles. The SLO's limits are dashed horizontal lines; each series'
    capacity per replica is a dashed vertical line in its colour. TTFT is on a log axis: it
    spans from the prompt's own prefill to minutes of queueing past the service rate.

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`load_sweep_frame` output.
    capacities : pandas.DataFrame, optional
        First output of :func:`budgetlab.sweep.capacity_by_budget` (rows with a capacity are
        drawn); its series must match the frame's (``budget_tokens`` or ``workload``).
    slo : SLO, optional
        Draws its TTFT and ITL limits.
    ttft_percentile, itl_percentile : {"p50", "p90", "p99"}
        Where the dropdowns start.
    title : str
    """
    _check_rows(len(frame))
    for pct in (ttft_percentile, itl_percentile):
        if pct not in LOAD_PERCENTILES:
            raise ValueError(f"percentile must be one of {', '.join(LOAD_PERCENTILES)}, got {pct!r}")
    order = list(dict.fromkeys(frame.series))
    color = alt.Color(
        "series:N", title="", sort=order, scale=alt.Scale(domain=order), legend=alt.Legend(orient="top", labelLimit=320)
    )
    x = alt.X("rate_per_s:Q", title="Offered load [requests/s]")
    params = {
        "TTFT": alt.param(
            name="ttft_percentile",
            value=ttft_percentile,
            bind=alt.binding_select(options=list(LOAD_PERCENTILES), name="TTFT percentile "),
        ),
        "ITL": alt.param(
            name="itl_percentile",
            value=itl_percentile,
            bind=alt.binding_select(options=list(LOAD_PERCENTILES), name="ITL percentile "),
        ),
    }
    caps = None
    if capacities is not None and len(capacities):
        caps = capacities[capacities.status == "ok"].copy()
        caps["breaks_label"] = _breaks_labels(caps)
        by_budget = bool((frame.series == frame.budget_tokens.map(lambda b: f"budget {fmt_int(b)}")).all())
        if by_budget:
            caps["series"] = caps.budget_tokens.map(lambda b: f"budget {fmt_int(b)}")
        else:
            caps["series"] = caps.workload.astype(str)
        caps = caps[caps.series.isin(order)]
    panels = []
    for metric, axis_title, scale in (
        ("TTFT", "Time to first token [ms], log scale", alt.Scale(type="log", nice=False, padding=12)),
        ("ITL", "Inter-token latency [ms]", alt.Scale(zero=True)),
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
            .encode(x=x, y=alt.Y("value_ms:Q", title=axis_title, scale=scale), color=color)
        )
        layers: list[alt.Chart] = [
            base.mark_line(strokeWidth=2),
            base.mark_point(filled=True, size=45).encode(tooltip=tooltip),
        ]
        if slo is not None:
            lines = _slo_lines(slo, metric.lower())
            if len(lines):
                layers.append(
                    alt.Chart(lines).mark_rule(strokeDash=[6, 3], color=PALETTE["reference"]).encode(y="value_ms:Q")
                )
                layers.append(
                    alt.Chart(lines)
                    .mark_text(align="left", baseline="bottom", dx=4, dy=-3, color=PALETTE["reference"])
                    .encode(x=alt.value(0), y="value_ms:Q", text="label:N")
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
        panels.append(
            alt.layer(*layers).properties(width=WIDTH - 80, height=HEIGHT, title=f"{metric} against offered load")
        )
    return alt.hconcat(*panels, title=title).add_params(*params.values())


def capacity_table(capacities: pd.DataFrame, *, by: str = "budget") -> pd.DataFrame:
    """:func:`budgetlab.sweep.capacity_by_budget` for reading: one row per budget (or workload),
    units in headers."""
    first = (
        capacities.budget_tokens.map(fmt_int)
        if by == "budget"
        else capacities.workload.astype(str)
    )
    table = pd.DataFrame(
        {
            "Budget [tokens]" if by == "budget" else "Workload": first.to_numpy(),
            "max_num_seqs": capacities.max_num_seqs.map(fmt_int).to_numpy(),
            "Capacity per replica [requests/s]": [
                f"{c:,.3g}" if np.isfinite(c) else s for c, s in zip(capacities.capacity_per_s, capacities.status)
            ],
            "TTFT p90 at capacity": capacities.ttft_p90_s.map(_fmt_latency).to_numpy(),
            "ITL p99 at capacity": capacities.itl_p99_s.map(_fmt_latency).to_numpy(),
            "Just above, the SLO breaks on": [
                f"{d} (at {u:,.3g} req/s)" if d and np.isfinite(u) else (d or "—")
                for d, u in zip(capacities.breaks_detail, capacities.upper_per_s)
            ],
            "Simulations": capacities.num_simulations.map(lambda n: fmt_int(n) if np.isfinite(n) else "—").to_numpy(),
        }
    )
    return table.set_index(table.columns[0])


# --- the tuner (notebook 08) --------------------------------------------------------------------

_PHASES = {"budget": "1 · budget", "max_num_seqs": "2 · max_num_seqs"}


def candidates_table(candidates: pd.DataFrame) -> pd.DataFrame:
    """:attr:`budgetlab.tune.TuneResult.candidates` for reading, in the order searched."""

    def note(row: pd.Series) -> str:
        marks = []
        if row["chosen"]:
            marks.append("**recommended**")
        if row["is_first_guess"]:
            marks.append("first guess")
        return ", ".join(marks)

    def pct(value: float) -> str:
        return f"{value:.0%}" if np.isfinite(value) else "—"

    return pd.DataFrame(
        {
            "Search step": candidates.phase.map(_PHASES).to_numpy(),
            "max_num_batched_tokens": candidates.max_num_batched_tokens.map(fmt_int).to_numpy(),
            "max_num_seqs": candidates.max_num_seqs.map(fmt_int).to_numpy(),
            "Capacity [requests/s]": [
                f"{c:,.3g}" if s == "ok" else s for c, s in zip(candidates.capacity_per_s, candidates.status)
            ],
            "Just above, breaks on": candidates.breaks_on.map(lambda m: _metric_label(m) if m else "—").to_numpy(),
            "TTFT p90 at capacity": candidates.ttft_p90_s.map(_fmt_latency).to_numpy(),
            "ITL p99 at capacity": candidates.itl_p99_s.map(_fmt_latency).to_numpy(),
            "Steps filling the budget": candidates.budget_full_fraction.map(pct).to_numpy(),
            "Steps at the cap": candidates.cap_bound_fraction.map(pct).to_numpy(),
            "KV peak": candidates.kv_peak_fraction.map(pct).to_numpy(),
            "": candidates.apply(note, axis=1).to_numpy(),
        }
    )


def candidates_chart(candidates: pd.DataFrame, *, title: str = "") -> alt.HConcatChart:
    """Capacity of every candidate the tuner simulated: left the budgets (cap fixed), right the
    caps (budget fixed). The recommended candidate is red; the first guess is ringed."""
    _check_rows(len(candidates))
    frame = candidates.assign(
        phase_label=candidates.phase.map(_PHASES),
        breaks_label=candidates.breaks_on.map(lambda m: _metric_label(m) if m else "—"),
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
            x=alt.X(f"{knob}:Q", title=axis_title, scale=alt.Scale(zero=False), axis=alt.Axis(format="~s")),
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


def slo_check_frame(table: pd.DataFrame, slo: Any) -> pd.DataFrame:
    """Each simulated row of ``table`` against each limit of ``slo``: one row per load × limit.

    Returns
    -------
    pandas.DataFrame
        ``rate_per_s``, ``max_num_batched_tokens``, ``max_num_seqs``, ``metric`` (summary key),
        ``metric_label``, ``value_s``, ``limit_s``, ``used_fraction`` (value over limit),
        ``meets``, ``slo_met`` (every limit of the row met).
    """
    rows = []
    for record in table.to_dict("records"):
        broken = {v.metric for v in slo.violations(record)}
        for metric, limit in slo.limits.items():
            value = float(record[metric])
            rows.append(
                {
                    "rate_per_s": float(record["rate_per_s"]),
                    "max_num_batched_tokens": int(record["max_num_batched_tokens"]),
                    "max_num_seqs": int(record["max_num_seqs"]),
                    "metric": metric,
                    "metric_label": _metric_label(metric),
                    "value_s": value,
                    "limit_s": float(limit),
                    "used_fraction": value / float(limit),
                    "meets": metric not in broken,
                    "slo_met": not broken,
                }
            )
    return pd.DataFrame(rows)


def slo_check_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`slo_check_frame` for reading: one row per load × limit."""
    return pd.DataFrame(
        {
            "Offered load [requests/s]": frame.rate_per_s.map(lambda r: f"{r:,.3g}").to_numpy(),
            "Limit": frame.metric_label.to_numpy(),
            "Simulated": frame.value_s.map(_fmt_latency).to_numpy(),
            "SLO": frame.limit_s.map(_fmt_latency).to_numpy(),
            "Share of the limit": frame.used_fraction.map(lambda f: f"{f:.0%}").to_numpy(),
            "Met": np.where(frame.meets, "yes", "**no**"),
        }
    ).set_index("Offered load [requests/s]")


def frontier_frame(
    table: pd.DataFrame,
    *,
    slo: Any,
    chosen_budget: int | None = None,
    ttft_metric: str | None = None,
    itl_metric: str | None = None,
) -> pd.DataFrame:
    """The TTFT-versus-ITL trade-off across budgets at one load: one row per budget.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`budgetlab.sweep.sweep` over budgets at a single offered load.
    slo : SLO
        ``meets`` says whether each budget meets it.
    chosen_budget : int, optional
        Flags this budget (the tuner's recommendation) in ``chosen``.
    ttft_metric, itl_metric : str, optional
        Summary keys drawn; default the SLO's TTFT limit (else ``ttft_p90_s``) and its
        tightest ITL limit (else ``itl_p99_s``).

    Returns
    -------
    pandas.DataFrame
        ``budget_tokens``, ``label`` (``"2,048"``), ``rate_per_s``, ``max_num_seqs``,
        ``ttft_s``, ``ttft_ms``, ``itl_s``, ``itl_ms``, ``ttft_metric``, ``itl_metric``
        (their labels, ``"TTFT p90"``), ``meets``, ``chosen``.
    """
    if ttft_metric is None:
        ttft_metric = next((m for m in slo.limits if m.startswith("ttft_")), "ttft_p90_s")
    if itl_metric is None:
        itl_metric = slo.itl_target_metric if slo.itl_target_metric is not None else "itl_p99_s"
    ordered = table.sort_values("max_num_batched_tokens")
    frame = pd.DataFrame(
        {
            "budget_tokens": ordered.max_num_batched_tokens.astype(int).to_numpy(),
            "label": ordered.max_num_batched_tokens.map(fmt_int).to_numpy(),
            "rate_per_s": ordered.rate_per_s.to_numpy(dtype=float),
            "max_num_seqs": ordered.max_num_seqs.astype(int).to_numpy(),
            "ttft_s": ordered[ttft_metric].to_numpy(dtype=float),
            "itl_s": ordered[itl_metric].to_numpy(dtype=float),
            "meets": [slo.holds(r) for r in ordered.to_dict("records")],
        }
    )
    frame["ttft_ms"] = frame.ttft_s * 1e3
    frame["itl_ms"] = frame.itl_s * 1e3
    frame["ttft_metric"] = _metric_label(ttft_metric)
    frame["itl_metric"] = _metric_label(itl_metric)
    frame["chosen"] = frame.budget_tokens == chosen_budget if chosen_budget is not None else False
    frame.loc[frame.chosen, "label"] = frame.loc[frame.chosen, "label"] + " (recommended)"
    frame["label_above"] = np.arange(len(frame)) % 2 == 0  # alternate, so neighbours' labels do not collide
    _check_rows(len(frame))
    return frame


def frontier_chart(frame: pd.DataFrame, *, slo: Any, title: str = "") -> alt.LayerChart:
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
        alt.Tooltip("budget_tokens:Q", title="budget [tokens]", format=TOKENS_FORMAT),
        alt.Tooltip("ttft_ms:Q", title=f"{ttft_label} [ms]", format=",.1f"),
        alt.Tooltip("itl_ms:Q", title=f"{itl_label} [ms]", format=",.1f"),
        alt.Tooltip("rate_per_s:Q", title="offered load [req/s]", format=",.3~g"),
        alt.Tooltip("verdict:N", title=""),
    ]
    base = alt.Chart(data).encode(x=x, y=y)
    layers: list[alt.Chart] = [
        base.mark_line(color=PALETTE["muted"], strokeWidth=1.5).encode(order="budget_tokens:Q"),
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
        text = {"align": "left", "dx": 6, "dy": dy}
        layers += [
            base.mark_text(**text, stroke="white", strokeWidth=4).encode(text="label:N").transform_filter(where),
            base.mark_text(**text).encode(text="label:N").transform_filter(where),
        ]
    limits = slo.limits
    ttft_key = next((m for m in limits if _metric_label(m) == ttft_label), None)
    itl_key = next((m for m in limits if _metric_label(m) == itl_label), None)
    if ttft_key is not None:
        label = f"SLO: {ttft_label} ≤ {_fmt_latency(limits[ttft_key])}"
        layers += _reference_rules([(label, limits[ttft_key])], label_x=WIDTH)
    if itl_key is not None:
        ref = pd.DataFrame(
            {"value_ms": [limits[itl_key] * 1e3], "label": [f"SLO: {itl_label} ≤ {_fmt_latency(limits[itl_key])}"]}
        )
        layers += [
            alt.Chart(ref).mark_rule(strokeDash=[6, 3], color=PALETTE["reference"]).encode(x="value_ms:Q"),
            alt.Chart(ref)
            .mark_text(align="left", baseline="top", dx=4, color=PALETTE["reference"])
            .encode(x="value_ms:Q", y=alt.value(4), text="label:N"),
        ]
    return alt.layer(*layers).properties(width=WIDTH, height=HEIGHT + 40, title=title)


# --- prose helpers for notebooks 07 and 08 ------------------------------------------------------

__all__ += [
    "capacity_note",
    "fmt_latency",
    "fmt_percent_change",
    "fmt_rate",
    "fmt_slo",
    "metric_label",
    "percentiles_by_budget",
]

fmt_rate = _fmt_rate
fmt_latency = _fmt_latency
metric_label = _metric_label


def fmt_slo(slo: Any) -> str:
    """``SLO(ttft_p90_s=0.8, itl_p99_s=0.04)`` → ``"TTFT p90 ≤ 800 ms and ITL p99 ≤ 40 ms"``."""
    return " and ".join(f"{_metric_label(m)} ≤ {_fmt_latency(v)}" for m, v in slo.limits.items())


def fmt_percent_change(value: float, reference: float) -> str:
    """How far ``value`` is above or below ``reference``: ``(37.2, 35.6)`` → ``"4.5 % more"``."""
    value, reference = float(value), float(reference)
    if not (np.isfinite(value) and np.isfinite(reference)) or reference == 0:
        return "n/a"
    change = value / reference - 1.0
    if abs(change) < 0.0005:
        return "the same"
    return f"{abs(change):.1%}".replace("%", " %") + (" more" if change > 0 else " less")


def capacity_note(capacities: pd.DataFrame) -> str:
    """Why a :func:`budgetlab.sweep.capacity_by_budget` table has no best budget (``""`` when
    :func:`budgetlab.sweep.best_capacity` finds one)."""
    if best_capacity(capacities) is not None:
        return ""
    if (capacities.status == "holds at every load").any():
        return (
            "The SLO still held at the highest loads searched: with so few requests per simulation "
            "the queue never builds up. Raise num_requests_per_load, or replay a longer trace."
        )
    return (
        "No budget meets the SLO even at the lightest load searched: loosen the SLO, or pick faster "
        "hardware (the table above names the limit that breaks)."
    )


def percentiles_by_budget(table: pd.DataFrame) -> dict[int, dict[str, list[float]]]:
    """A load sweep's TTFT and ITL percentiles as ``{budget: {"ttft_p90_s": [one per load]}}``,
    loads in increasing order (for results files)."""
    out: dict[int, dict[str, list[float]]] = {}
    for budget, rows in table.sort_values("rate_per_s").groupby("max_num_batched_tokens", sort=True):
        out[int(budget)] = {
            f"{metric}_{pct}_s": rows[f"{metric}_{pct}_s"].astype(float).tolist()
            for metric in _LOAD_METRICS
            for pct in LOAD_PERCENTILES
        }
        out[int(budget)]["rate_per_s"] = rows.rate_per_s.astype(float).tolist()
    return out
