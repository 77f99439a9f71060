"""Tables for reading: units in the headers, rounded numbers, one row per thing compared.

Each ``*_table`` takes the frame (or result) of the matching frame builder and returns a
:class:`pandas.DataFrame` to ``display``; :func:`table_markdown` shows one whole, long text
cells included. No number is computed here that a notebook should read back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from budgetlab._checks import int_at_least
from budgetlab.charts.load import _PHASES
from budgetlab.charts.runs import _POLICY_METRICS
from budgetlab.charts.style import _check_table_rows
from budgetlab.errors import ParameterError
from budgetlab.memory import KVCapacity
from budgetlab.text import fmt_gib, fmt_int, fmt_latency, fmt_percent, fmt_tokens, md_cell, metric_label
from budgetlab.workload import SweepWorkload
from budgetlab.workload.frames import workload_stats

if TYPE_CHECKING:  # types only: charts import no fitting code
    from budgetlab.cost.fit import CalibrationResult


def table_markdown(frame: pd.DataFrame, *, index: bool = True) -> str:
    """A small table as GitHub-flavoured Markdown, for cells of prose that must not be cut.

    pandas' HTML view shortens long text cells; ``display(Markdown(table_markdown(t)))`` shows
    them whole, in JupyterLab and in the HTML reports alike.

    Every header, label and cell is text (:func:`~budgetlab.text.md_cell`): HTML, links,
    images, code and line breaks in it show as typed, so a file name or label from a user
    cannot become markup. The one markup kept is bold: ``**`` pairs in a cell (the tables'
    ``**recommended**``, ``**no**``) stay bold, with the text between them escaped.
    """

    def cell(value: Any) -> str:
        return "**".join(md_cell(part) for part in str(value).split("**"))

    header = ([cell(frame.index.name or "")] if index else []) + [cell(c) for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, row in zip(frame.index, frame.itertuples(index=False)):
        cells = ([f"**{md_cell(label)}**"] if index else []) + [cell(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def hardware_comparison_table(frame: pd.DataFrame, *, highlight: str | None = None) -> pd.DataFrame:
    """:func:`budgetlab.cost.variants.hardware_comparison` for reading: units in the headers,
    rounded numbers.

    ``highlight`` (a hardware slug) gets a ``◀`` after its name.
    """
    table = pd.DataFrame(
        {
            "Hardware": [
                name + (" ◀" if slug == highlight else "") for slug, name in zip(frame.hardware_slug, frame.hardware)
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


def tensor_parallel_table(frame: pd.DataFrame, *, highlight_mark: int | None = None) -> pd.DataFrame:
    """:func:`budgetlab.cost.variants.tensor_parallel_speedups` for reading: units in the
    headers, rounded numbers.

    ``highlight_mark`` (a token count of the frame) adds the all-reduce and speed-up columns
    for that step size.

    Raises
    ------
    ParameterError
        A ``highlight_mark`` that is neither None nor one of the frame's token marks.
    """
    marks = [int(c[len("step_") : -len("_s")]) for c in frame.columns if c.startswith("step_") and c.endswith("_s")]
    if highlight_mark is not None:
        what = f"None or one of the frame's token marks {marks}"
        if int_at_least("highlight_mark", highlight_mark, 1, what=what) not in marks:
            raise ParameterError(f"highlight_mark must be {what}, got {highlight_mark!r}")
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
                all_reduce_ms = (frame[f"all_reduce_{mark}_s"] * 1e3).round(2)
                table[f"All-reduce at {mark:,d} tokens [ms]"] = all_reduce_ms.to_numpy()
                table[f"Speed-up at {mark:,d} tokens [×]"] = frame[f"speedup_{mark}"].round(2).to_numpy()
    return table


def moe_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`budgetlab.cost.variants.moe_step_costs` at a few token counts, for reading."""
    return pd.DataFrame(
        {
            "Tokens in the step": frame.tokens.astype(int),
            "Experts touched per layer (of " + fmt_int(frame.num_experts.iloc[0]) + ")": frame.expected_experts.round(
                2
            ),
            "Weights read [GB]": (frame.weight_bytes / 1e9).round(1),
            "Step time [ms]": (frame.step_time_s * 1e3).round(1),
            "Every expert read [ms]": (frame.dense_step_time_s * 1e3).round(1),
        }
    ).set_index("Tokens in the step")


_PARAMETER_DISPLAY = {
    "step_overhead_s": ("Per-step overhead", "ms", 1e3),
    "layer_overhead_s": ("Per-layer overhead", "µs", 1e6),
    "bandwidth_efficiency": ("Bandwidth efficiency", "of peak", 1.0),
    "flop_efficiency": ("FLOP efficiency", "of peak", 1.0),
    "knee_overlap_loss": ("Knee overlap loss", "(0: perfect overlap)", 1.0),
    "tile_tokens": ("GEMM tile", "tokens", 1.0),
}


def calibration_parameters_table(result: CalibrationResult) -> pd.DataFrame:
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


def tradeoff_table(tradeoff: pd.DataFrame) -> pd.DataFrame:
    """The seeds' small-vs-big budget table, each cell with the numbers behind it.

    Parameters
    ----------
    tradeoff : pandas.DataFrame
        The output of :func:`budgetlab.tradeoffs.budget_tradeoff` (rows ``small`` and ``big``).

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
                f"Short: {fmt_latency(row.prompt_step_s)} even with a prompt chunk "
                f"({fmt_latency(row.decode_only_step_s)} with decodes only)",
                f"Steady stream: low inter-token latency, longest gap {fmt_latency(row.prompt_step_s)}",
                f"Spread over {steps} {step_word}: later first token, "
                f"TTFT {fmt_latency(row.ttft_s)} ({fmt_int(row.prefill_tokens_per_s)} prompt tokens/s)",
            ]
        else:
            cells = [
                f"Long when it carries a big prompt chunk: {fmt_latency(row.prompt_step_s)} "
                f"({fmt_latency(row.decode_only_step_s)} with decodes only)",
                f"Wait longer on prompt-heavy steps: longest gap {fmt_latency(row.prompt_step_s)}",
                f"Finish in {steps} {step_word}: better TTFT and throughput, "
                f"TTFT {fmt_latency(row.ttft_s)} ({fmt_int(row.prefill_tokens_per_s)} prompt tokens/s)",
            ]
        title = f"{which.capitalize()} budget ({fmt_tokens(row.max_num_batched_tokens)})"
        columns[title] = cells
    return pd.DataFrame(columns, index=pd.Index(["Each step", "Decoding users", "Long prompts"], name=""))


def tradeoff_numbers_table(tradeoff: pd.DataFrame) -> pd.DataFrame:
    """:func:`budgetlab.tradeoffs.budget_tradeoff` for reading: units in headers, rounded."""
    table = pd.DataFrame(
        {
            "Budget [tokens]": tradeoff.max_num_batched_tokens.astype(int),
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


def budget_sweep_table(sweep: pd.DataFrame, *, listed_only: bool = True) -> pd.DataFrame:
    """:func:`~budgetlab.charts.budget_sweep_frame` for reading: one row per (listed) budget,
    units in headers, with the prompt's first chunk and its number of steps."""
    rows = sweep[sweep.listed] if listed_only else sweep
    _check_table_rows(len(rows))
    table = pd.DataFrame(
        {
            "Budget [tokens]": rows.max_num_batched_tokens.astype(int).to_numpy(),
            "Prompt chunk [tokens]": rows.first_chunk_tokens.astype(int).to_numpy(),
            "Steps to first token": rows.num_prompt_steps.astype(int).to_numpy(),
            "TTFT [ms]": (rows.ttft_s * 1e3).round(1).to_numpy(),
            "Full step = longest gap the budget allows [ms]": (rows.step_time_s * 1e3).round(1).to_numpy(),
            "Longest gap in this scenario [ms]": (rows.longest_gap_s * 1e3).round(1).to_numpy(),
        }
    )
    if rows.cost_model.nunique() > 1:
        table.insert(0, "Cost model", rows.cost_model.to_numpy())
    return table


def budget_payoff_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`budget_payoff_frame` for reading."""
    start = fmt_int(frame.max_num_batched_tokens.iloc[0])
    bigger = fmt_int(frame.bigger_max_num_batched_tokens.iloc[0])
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


def kv_capacity_table(capacity: KVCapacity) -> pd.DataFrame:
    """A :class:`~budgetlab.memory.KVCapacity` for reading: where one GPU's memory goes (GiB)."""
    usable = capacity.usable_bytes
    share = capacity.terms().set_index("term")["fraction_of_usable"]
    pass_name = capacity.activation.binding_pass
    rows = [
        ("Memory CUDA reports", fmt_gib(capacity.reported_memory_bytes), ""),
        ("Usable (× gpu_memory_utilization)", fmt_gib(usable), fmt_percent(1.0)),
        ("Model weights" + ("" if capacity.tp == 1 else " (this GPU's share)"), fmt_gib(capacity.weight_bytes),
         fmt_percent(capacity.weight_bytes / usable)),
        ("Non-torch memory (CUDA context" + (", NCCL)" if capacity.tp > 1 else ")"),
         fmt_gib(capacity.non_torch_bytes), fmt_percent(capacity.non_torch_bytes / usable)),
        (f"Activation peak (the {pass_name} pass of the profile run)", fmt_gib(capacity.activation_bytes),
         fmt_percent(capacity.activation_bytes / usable)),
        ("KV cache", fmt_gib(capacity.kv_bytes), fmt_percent(float(share["KV cache"]))),
        ("KV bytes per token", f"{capacity.kv_bytes_per_token / 2**10:,.0f} KiB", ""),
        ("KV cache in tokens", fmt_tokens(capacity.num_tokens), ""),
        ("KV cache in blocks", f"{fmt_int(capacity.num_blocks)} blocks of {capacity.block_size} tokens", ""),
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["", "Amount", "Share of usable memory"]).set_index("")


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


def policy_comparison_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`policy_comparison_frame` side by side: one row per metric, one column per run [ms]."""
    table = frame.pivot(index="metric", columns="case", values="value_ms").round(1)
    table = table.reindex([m for m in _POLICY_METRICS.values() if m in table.index])
    table = table[list(dict.fromkeys(frame.case))]
    table.index.name = "[ms]"
    table.columns.name = None
    return table


def workload_stats_table(workloads: Mapping[str, SweepWorkload], *, seed: int = 0) -> pd.DataFrame:
    """:func:`budgetlab.workload.frames.workload_stats` of one or more workloads, side by side,
    for reading [tokens].

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
        their sum, and the requests per simulation), one column per workload, whole tokens.
    """
    columns = {}
    for name, workload in workloads.items():
        stats = workload_stats(workload, seed=seed)
        columns[name] = [stats[key] for key in _WORKLOAD_ROWS]
    table = pd.DataFrame(columns, index=list(_WORKLOAD_ROWS.values())).map(fmt_int)
    table.index.name = ""
    return table


_WORKLOAD_ROWS = {
    "prompt_p50_tokens": "Prompt, median [tokens]",
    "prompt_p90_tokens": "Prompt, 90th percentile [tokens]",
    "prompt_mean_tokens": "Prompt, mean [tokens]",
    "output_p50_tokens": "Output, median [tokens]",
    "output_p90_tokens": "Output, 90th percentile [tokens]",
    "output_mean_tokens": "Output, mean [tokens]",
    "sequence_mean_tokens": "Prompt + output, mean [tokens]",
    "num_requests": "Requests per simulation",
}


def capacity_table(capacities: pd.DataFrame, *, by: str = "budget") -> pd.DataFrame:
    """The ``capacities`` of :func:`budgetlab.capacity_by_budget` for reading: one row per budget
    (or workload), units in headers."""
    first = capacities.max_num_batched_tokens.map(fmt_int) if by == "budget" else capacities.workload.astype(str)
    table = pd.DataFrame(
        {
            "Budget [tokens]" if by == "budget" else "Workload": first.to_numpy(),
            "max_num_seqs": capacities.max_num_seqs.map(fmt_int).to_numpy(),
            "Capacity per replica [requests/s]": [
                f"{c:,.3g}" if np.isfinite(c) else s for c, s in zip(capacities.capacity_per_s, capacities.status)
            ],
            "TTFT p90 at capacity": capacities.ttft_p90_s.map(fmt_latency).to_numpy(),
            "ITL p99 at capacity": capacities.itl_p99_s.map(fmt_latency).to_numpy(),
            "Just above, the SLO breaks on": [
                f"{d} (at {u:,.3g} req/s)" if d and np.isfinite(u) else (d or "—")
                for d, u in zip(capacities.breaks_detail, capacities.upper_per_s)
            ],
            "Simulations": capacities.num_simulations.map(lambda n: fmt_int(n) if np.isfinite(n) else "—").to_numpy(),
        }
    )
    return table.set_index(table.columns[0])


def candidates_table(candidates: pd.DataFrame) -> pd.DataFrame:
    """:attr:`budgetlab.TuneResult.candidates` for reading, in the order searched."""

    def note(row: pd.Series) -> str:
        marks = []
        if row["chosen"]:
            marks.append("**recommended**")
        if row["is_first_guess"]:
            marks.append("first guess")
        return ", ".join(marks)

    def pct(value: float) -> str:
        return fmt_percent(value, 0)

    return pd.DataFrame(
        {
            "Search step": candidates.phase.map(_PHASES).to_numpy(),
            "max_num_batched_tokens": candidates.max_num_batched_tokens.map(fmt_int).to_numpy(),
            "max_num_seqs": candidates.max_num_seqs.map(fmt_int).to_numpy(),
            "Capacity [requests/s]": [
                f"{c:,.3g}" if s == "ok" else s for c, s in zip(candidates.capacity_per_s, candidates.status)
            ],
            "Just above, breaks on": candidates.breaks_on.map(lambda m: metric_label(m) if m else "—").to_numpy(),
            "TTFT p90 at capacity": candidates.ttft_p90_s.map(fmt_latency).to_numpy(),
            "ITL p99 at capacity": candidates.itl_p99_s.map(fmt_latency).to_numpy(),
            "Steps filling the budget": candidates.budget_full_fraction.map(pct).to_numpy(),
            "Steps at the cap": candidates.cap_bound_fraction.map(pct).to_numpy(),
            "KV peak": candidates.kv_peak_fraction.map(pct).to_numpy(),
            "": candidates.apply(note, axis=1).to_numpy(),
        }
    )


def slo_check_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`slo_check_frame` for reading: one row per load × limit."""
    return pd.DataFrame(
        {
            "Offered load [requests/s]": frame.rate_per_s.map(lambda r: f"{r:,.3g}").to_numpy(),
            "Limit": frame.metric_label.to_numpy(),
            "Simulated": frame.value_s.map(fmt_latency).to_numpy(),
            "SLO": frame.limit_s.map(fmt_latency).to_numpy(),
            "Share of the limit": frame.used_fraction.map(lambda f: fmt_percent(f, 0)).to_numpy(),
            "Met": np.where(frame.meets, "yes", "**no**"),
        }
    ).set_index("Offered load [requests/s]")


def kv_log_check_table(compared: pd.DataFrame) -> pd.DataFrame:
    """:attr:`KVLogCheck.compared <budgetlab.experiments.kv_logs.KVLogCheck>` for reading: one row
    per real vLLM start-up, logged next to predicted."""
    _check_table_rows(len(compared))
    return pd.DataFrame(
        {
            "Log row": compared.row_id.to_numpy(),
            "Model": compared.model.to_numpy(),
            "TP": compared.tp.to_numpy(),
            "PP": compared.pp.to_numpy(),
            "Weights": compared.quantization.fillna("16-bit").to_numpy(),
            "KV logged [GiB]": compared.available_kv_gib_logged.map(lambda v: f"{v:,.2f}").to_numpy(),
            "KV predicted [GiB]": compared.available_kv_gib_predicted.map(lambda v: f"{v:,.2f}").to_numpy(),
            "KV tokens logged": compared.kv_tokens_logged.map(fmt_int).to_numpy(),
            "KV tokens predicted": compared.kv_tokens_predicted.map(fmt_int).to_numpy(),
            "Error": compared.kv_tokens_error_fraction.map(lambda v: f"{v:+.1%}").to_numpy(),
            "Allowed": [
                f"±{t:.0%}" + (" (tight)" if tight else "") for t, tight in zip(compared.tolerance, compared.tight)
            ],
        }
    ).set_index("Log row")


def activation_fit_table(fit_table: pd.DataFrame) -> pd.DataFrame:
    """The activation-peak fit (:func:`budgetlab.experiments.kv_logs.activation_fit_from_logs`)
    for reading: logged and fitted peak per start-up, and which pass binds."""
    _check_table_rows(len(fit_table))
    return pd.DataFrame(
        {
            "Log row": fit_table.row_id.to_numpy(),
            "Model": fit_table.model.to_numpy(),
            "TP": fit_table.tp.to_numpy(),
            "Logged [GiB]": fit_table.activation_peak_gib_logged.map(lambda v: f"{v:.2f}").to_numpy(),
            "Fitted [GiB]": fit_table.activation_peak_gib_fitted.map(lambda v: f"{v:.2f}").to_numpy(),
            "Residual [GiB]": fit_table.residual_gib.map(lambda v: f"{v:+.3f}").to_numpy(),
            "Peak pass": fit_table.binding_pass.to_numpy(),
            "In the fit": ["yes" if used else "no (MoE)" for used in fit_table.used_in_fit],
        }
    ).set_index("Log row")


def memory_levers_table(levers: pd.DataFrame) -> pd.DataFrame:
    """:func:`budgetlab.memory.memory_levers` for reading: what each way out buys, in tokens."""
    _check_table_rows(len(levers))
    return pd.DataFrame(
        {
            "Change": levers.lever.to_numpy(),
            "GPUs": levers.gpus.to_numpy(),
            "KV pool [tokens]": levers.kv_tokens.map(fmt_int).to_numpy(),
            "Gained [tokens]": ["—" if i == 0 else f"{int(v):+,}" for i, v in enumerate(levers.kv_tokens_gained)],
            "Gain": ["—" if i == 0 else fmt_percent(v) for i, v in enumerate(levers.gain_fraction)],
            "KV share of usable memory": levers.kv_fraction.map(fmt_percent).to_numpy(),
            "Scheduler knob": ["yes" if k else "no" for k in levers.is_knob],
        }
    ).set_index("Change")
