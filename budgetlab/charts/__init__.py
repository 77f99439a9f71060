"""Altair charts and reading tables for the notebooks: tidy frames in, charts and tables out.

This package draws; it does not model. The numbers come from the model modules
(:mod:`budgetlab.budget`, :mod:`budgetlab.memory`, :mod:`budgetlab.cost`, :mod:`budgetlab.metrics`,
:mod:`budgetlab.experiments`), and the functions here only reshape them for display (long format,
labels, ``*_ms`` twins of ``*_s`` columns) and draw them. A student who wants the physics
follows the function a frame builder calls.

*Frame builders* (``*_frame``) return a tidy :class:`pandas.DataFrame`, one row per observation,
with times in seconds (``*_s``) and, for display only, in milliseconds (``*_ms``). Curves that
several cost models can share carry a ``cost_model`` column, so one chart draws them side by
side.

*Chart builders* (``*_chart``) take such a frame and return an :class:`altair.Chart` (or a
layer/concat of charts) with axis titles that carry units, tooltips and one look
(:mod:`budgetlab.charts.style`). None of them calls ``configure_*``, so a notebook can still
concatenate them. Frames stay below :data:`MAX_ROWS` rows.

*Tables* (``*_table``, :mod:`budgetlab.charts.tables`) are for reading only: units in the
headers, rounded numbers. Prose takes its numbers from the model's results, never from a table.

*Formatters* (``fmt_*``) are re-exported from :mod:`budgetlab.text`, the one formatter per unit
(``fmt_latency(0.0332)`` → ``"33.2 ms"``).

Column names: the token budget is ``max_num_batched_tokens`` in every frame and table column,
as in :class:`~budgetlab.specs.EngineConfig`, the sweeps and the model functions behind notebooks
01-04 (:func:`budgetlab.tradeoffs.budget_sweep`, :func:`~budgetlab.budget.prompt_timeline`,
:func:`budgetlab.memory.kv_by_budget`); the functions' *argument* keeps its name,
``budget_tokens``. Times are ``*_s`` (``*_ms`` for display only), token counts ``*_tokens``.

The numbers themselves are the model's, imported from there: ``bl.flattening_budget``,
``bl.hardware_comparison``, ``bl.tile_cliffs``, ``bl.tensor_parallel_speedups``,
``bl.kv_by_budget``, ``bl.load_grid``, ``bl.percentiles_by_budget``, ``bl.why_no_capacity``,
:meth:`CalibrationResult.numbers <budgetlab.cost.fit.CalibrationResult.numbers>`,
:func:`budgetlab.cost.residual_summary`; an SLO prints itself (``str(slo)``).

Modules: :mod:`~budgetlab.charts.style` (palette, sizes, axes), :mod:`~budgetlab.charts.step_cost`
(notebooks 01, 06), :mod:`~budgetlab.charts.budget` (02-04), :mod:`~budgetlab.charts.runs` (05),
:mod:`~budgetlab.charts.load` (07, 08), :mod:`~budgetlab.charts.caching` (09),
:mod:`~budgetlab.charts.validation` (10), :mod:`~budgetlab.charts.multigpu` (11),
:mod:`~budgetlab.charts.attention_kinds` (12), :mod:`~budgetlab.charts.speculation` (13; imported
as a module, ``from budgetlab.charts import speculation``), :mod:`~budgetlab.charts.fleet` (14, the
same way), :mod:`~budgetlab.charts.tables` (every table).
"""

from __future__ import annotations

from budgetlab.charts.budget import (
    budget_grid,
    budget_payoff_frame,
    budget_sweep_chart,
    budget_sweep_frame,
    decoder_interaction_chart,
    decoder_interaction_frame,
    longest_gap_comparison_frame,
    longest_gap_models_chart,
    step_fill_chart,
    step_fill_frame,
    step_timeline_chart,
    ttft_and_step_time_chart,
)
from budgetlab.charts.caching import (
    budget_caching_chart,
    caching_variants_table,
    kv_pressure_chart,
    prompt_work_chart,
    prompt_work_frame,
    ttft_by_turn_chart,
)
from budgetlab.charts.load import (
    candidates_chart,
    capacity_frame,
    frontier_chart,
    frontier_frame,
    load_sweep_chart,
    load_sweep_frame,
    slo_check_frame,
)
from budgetlab.charts.runs import (
    cap_sweep_chart,
    gate_share_chart,
    gate_share_frame,
    kv_budget_chart,
    memory_split_chart,
    memory_split_frame,
    policy_comparison_chart,
    policy_comparison_frame,
    sim_cases_frame,
    sim_timeline_chart,
    sim_timeline_frame,
)
from budgetlab.charts.step_cost import (
    calibration_chart,
    catalog_step_cost_frame,
    cost_variants_frame,
    log_token_grid,
    marks_frame,
    measured_points_frame,
    moe_chart,
    moe_frame,
    residual_chart,
    residual_frame,
    step_cost_chart,
    step_cost_frame,
    token_grid,
)
from budgetlab.charts.style import MAX_ROWS, PALETTE
from budgetlab.charts.tables import (
    activation_fit_table,
    budget_payoff_table,
    budget_sweep_table,
    calibration_parameters_table,
    candidates_table,
    capacity_table,
    hardware_comparison_table,
    kv_capacity_table,
    kv_log_check_table,
    memory_levers_table,
    moe_table,
    policy_comparison_table,
    sim_cases_table,
    slo_check_table,
    table_markdown,
    tensor_parallel_table,
    tradeoff_numbers_table,
    tradeoff_table,
    workload_stats_table,
)
from budgetlab.charts.validation import (
    preset_grid_table,
    serving_errors_chart,
    serving_errors_frame,
    serving_fit_table,
    serving_runs_table,
)
from budgetlab.text import (
    fmt_approx,
    fmt_bandwidth,
    fmt_budget,
    fmt_count,
    fmt_duration,
    fmt_flops_rate,
    fmt_gb,
    fmt_gflop,
    fmt_gib,
    fmt_int,
    fmt_latency,
    fmt_ms,
    fmt_percent,
    fmt_percent_change,
    fmt_rate,
    fmt_tokens,
    fmt_us,
    md_code,
    md_text,
    metric_label,
)

__all__ = [
    # style
    "MAX_ROWS",
    "PALETTE",
    # formatters (budgetlab.text)
    "fmt_approx",
    "fmt_bandwidth",
    "fmt_budget",
    "fmt_count",
    "fmt_duration",
    "fmt_flops_rate",
    "fmt_gb",
    "fmt_gib",
    "md_code",
    "md_text",
    "fmt_gflop",
    "fmt_int",
    "fmt_latency",
    "fmt_ms",
    "fmt_percent",
    "fmt_percent_change",
    "fmt_rate",
    "fmt_tokens",
    "fmt_us",
    "metric_label",
    # step cost (notebooks 01, 06)
    "calibration_chart",
    "catalog_step_cost_frame",
    "cost_variants_frame",
    "log_token_grid",
    "marks_frame",
    "measured_points_frame",
    "moe_chart",
    "moe_frame",
    "residual_chart",
    "residual_frame",
    "step_cost_chart",
    "step_cost_frame",
    "token_grid",
    # the budget filled (notebooks 02-04)
    "budget_grid",
    "cap_sweep_chart",
    "budget_payoff_frame",
    "budget_sweep_chart",
    "budget_sweep_frame",
    "decoder_interaction_chart",
    "decoder_interaction_frame",
    "longest_gap_comparison_frame",
    "longest_gap_models_chart",
    "step_fill_chart",
    "step_fill_frame",
    "step_timeline_chart",
    "ttft_and_step_time_chart",
    # KV memory and simulated runs (notebook 05)
    "gate_share_chart",
    "gate_share_frame",
    "kv_budget_chart",
    "memory_split_chart",
    "memory_split_frame",
    "policy_comparison_chart",
    "policy_comparison_frame",
    "sim_cases_frame",
    "sim_timeline_chart",
    "sim_timeline_frame",
    # load sweeps and the tuner (notebooks 07, 08)
    "candidates_chart",
    "capacity_frame",
    "frontier_chart",
    "frontier_frame",
    "load_sweep_chart",
    "load_sweep_frame",
    "slo_check_frame",
    # prefix caching and async scheduling (notebook 09)
    "budget_caching_chart",
    "caching_variants_table",
    "preset_grid_table",
    "serving_errors_chart",
    "serving_errors_frame",
    "serving_fit_table",
    "serving_runs_table",
    "kv_pressure_chart",
    "prompt_work_chart",
    "prompt_work_frame",
    "ttft_by_turn_chart",
    # tables
    "budget_payoff_table",
    "budget_sweep_table",
    "calibration_parameters_table",
    "candidates_table",
    "capacity_table",
    "hardware_comparison_table",
    "activation_fit_table",
    "kv_capacity_table",
    "kv_log_check_table",
    "memory_levers_table",
    "moe_table",
    "policy_comparison_table",
    "sim_cases_table",
    "slo_check_table",
    "table_markdown",
    "tensor_parallel_table",
    "tradeoff_numbers_table",
    "tradeoff_table",
    "workload_stats_table",
]
