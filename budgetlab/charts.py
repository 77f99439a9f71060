"""Altair charts shared by the notebooks, and the tidy tables they draw.

Two kinds of functions live here:

*Frame builders* (``*_frame``) call the package's math (:mod:`budgetlab.roofline`,
:mod:`budgetlab.budget`) and return a tidy :class:`pandas.DataFrame`, one row per observation,
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

from collections.abc import Iterable, Sequence
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from budgetlab.budget import chunk_schedule, fill_step, longest_gap_s, prefill_tokens_left, ttft_s
from budgetlab.roofline import IdealCost, knee_tokens
from budgetlab.specs import HardwareSpec, ModelSpec

__all__ = [
    "MAX_ROWS",
    "PALETTE",
    "fmt_ms",
    "fmt_us",
    "fmt_int",
    "fmt_tokens",
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
    """``2048`` → ``"2,048 tokens"``."""
    return f"{fmt_int(value)} tokens"


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
            "weights_fit": bool(model.weight_bytes <= hardware.memory_bytes),
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

    Each step is filled with :func:`budgetlab.budget.fill_step`: the ``num_decodes`` decoding
    requests (admitted earlier) take one token each, the prompt takes what is left.
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
    budget = num_decodes + prompt_tokens if budget_tokens is None else int(budget_tokens)
    decodes = [1] * num_decodes
    remaining = prompt_tokens
    steps = []
    clock_s = 0.0
    while remaining > 0:
        first = not steps
        fill = fill_step(
            budget_tokens=budget,
            running_remaining_tokens=decodes if first else [*decodes, remaining],
            waiting_remaining_tokens=[remaining] if first else [],
        )
        chunk = fill.admitted_tokens[0] if first else fill.running_tokens[-1]
        if chunk <= 0:
            raise ValueError(
                f"a budget of {budget} tokens leaves nothing for the prompt after "
                f"{num_decodes} decodes; use a budget above {num_decodes}"
            )
        step_s = float(cost.step_time_s(fill.num_tokens))
        steps.append(
            {
                "step": len(steps) + 1,
                "decode": num_decodes,
                "prompt": chunk,
                "unused": fill.leftover_tokens if budget_tokens is not None else 0,
                "step_tokens": fill.num_tokens,
                "step_time_s": step_s,
                "start_s": clock_s,
                "end_s": clock_s + step_s,
            }
        )
        clock_s += step_s
        remaining -= chunk
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

    Returns
    -------
    pandas.DataFrame
        ``budget_tokens``, ``ttft_s``, ``step_time_s`` (a step that fills the whole budget:
        the longest step the budget allows), ``longest_gap_s`` (the decoders' longest wait in
        this scenario), their ``*_ms`` twins, ``listed``, ``cost_model``.
    """
    budgets = np.asarray(budgets, dtype=np.int64)
    _check_rows(len(budgets))
    scenario = {"num_decodes": num_decodes, "prompt_tokens": prompt_tokens}
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
    cost: IdealCost, *, budget_tokens: int, num_decodes: int, prompt_tokens: int
) -> pd.DataFrame:
    """The decoders' longest gap with the budget and without one: two rows.

    Returns
    -------
    pandas.DataFrame
        ``scenario`` (``"budget 2,048"``, ``"no budget"``), ``budget_tokens`` (NaN without),
        ``longest_gap_s``, ``longest_gap_ms``, ``label`` (``"33.2 ms"``).
    """
    rows = []
    for budget in (budget_tokens, None):
        gap = float(
            longest_gap_s(cost, budget_tokens=budget, num_decodes=num_decodes, prompt_tokens=prompt_tokens)
        )
        rows.append(
            {
                "scenario": fmt_budget(budget),
                "budget_tokens": np.nan if budget is None else budget,
                "longest_gap_s": gap,
                "longest_gap_ms": gap * 1e3,
                "label": fmt_ms(gap),
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


def _x_tokens(title: str = "Tokens in the step [tokens]", field: str = "tokens") -> alt.X:
    return alt.X(f"{field}:Q", title=title, axis=alt.Axis(format="~s"))


def _y_ms(field: str, title: str, *, zero: bool = True) -> alt.Y:
    return alt.Y(f"{field}:Q", title=title, scale=alt.Scale(zero=zero))


def _color(frame: pd.DataFrame, column: str | None, title: str) -> alt.Color | alt.Value:
    if column is None or frame[column].nunique() <= 1:
        return alt.value(PALETTE["curve"])
    return alt.Color(f"{column}:N", title=title, legend=alt.Legend(labelLimit=320))


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
        ref = pd.DataFrame({"label": [r[0] for r in references], "value_ms": [r[1] * 1e3 for r in references]})
        layers.append(
            alt.Chart(ref).mark_rule(strokeDash=[6, 3], color=PALETTE["reference"]).encode(y="value_ms:Q")
        )
        layers.append(
            alt.Chart(ref)
            .mark_text(align="right", baseline="bottom", dy=-3, color=PALETTE["reference"])
            .encode(x=alt.value("width"), y="value_ms:Q", text="label:N")
        )
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
    """
    low, high = int(frame.budget_tokens.min()), int(frame.budget_tokens.max())
    budget = alt.param(
        name="budget",
        value=int(min(max(initial_budget_tokens, low), high)),
        bind=alt.binding_range(min=low, max=high, step=1, name="Token budget [tokens] "),
    )
    left_refs = [("no budget: whole prompt in one step", ttft_without_budget_s)] if ttft_without_budget_s else []
    right_refs = [(f"{fmt_ms(target_step_s, 0)} target", target_step_s)] if target_step_s else []
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
        ref = pd.DataFrame({"value_ms": [target_step_s * 1e3], "label": [f"{fmt_ms(target_step_s, 0)} target"]})
        layers.append(alt.Chart(ref).mark_rule(strokeDash=[6, 3], color=PALETTE["reference"]).encode(y="value_ms:Q"))
        layers.append(
            alt.Chart(ref)
            .mark_text(align="right", baseline="bottom", dy=-3, color=PALETTE["reference"])
            .encode(x=alt.value("width"), y="value_ms:Q", text="label:N")
        )
    return alt.layer(*layers).properties(width=260, height=HEIGHT, title=title)
