"""The facade's public names: the redesign moves code, never a name a user imports.

``import budgetlab as bl`` and every name below keep working across the package layout; a name
added to the facade is added here on purpose, and none is removed without a deprecation.
"""

from __future__ import annotations

import importlib

import pytest

import budgetlab

PUBLIC_NAMES = (
    "activation_peak",
    "calibrate_serving",
    "client_metrics",
    "client_requests",
    "read_vllm_bench",
    "ServingOverhead",
    "is_tight",
    "memory_levers",
    "tight_memory_text",
    "Admission",
    "admit",
    "Batch",
    "best_capacity",
    "blocks_for_tokens",
    "budget_for_longest_gap",
    "budget_for_step_time",
    "budget_has_room",
    "budget_tradeoff",
    "BudgetlabError",
    "busy_stats",
    "calibrate",
    "CalibratedCost",
    "CalibrationError",
    "CalibrationResult",
    "capacity",
    "capacity_by_budget",
    "CapacityAboveBoundsError",
    "CapacityOutcome",
    "CapacityResult",
    "CapacityTask",
    "CatalogError",
    "chunk_schedule",
    "code_like",
    "ConfigError",
    "ConstantCost",
    "conversation_like",
    "CostModel",
    "data_path",
    "DoesNotFitError",
    "Empirical",
    "EngineConfig",
    "fill_step",
    "first_guess",
    "FirstGuess",
    "Fixed",
    "gamma_arrivals",
    "Gate",
    "hardware",
    "hardware_table",
    "HardwareSpec",
    "IdealCost",
    "knee_tokens",
    "kv_blocks_fit",
    "kv_bytes_per_token",
    "kv_capacity",
    "KVCapacity",
    "LengthDistribution",
    "list_hardware",
    "list_models",
    "load_results",
    "load_trace",
    "LogNormal",
    "longest_gap_s",
    "mean_sequence_tokens",
    "model",
    "model_table",
    "ModelSpec",
    "NoBudgetMeetsTargetError",
    "ParameterError",
    "Parameters",
    "poisson_arrivals",
    "predict_step_ms",
    "prefill_tokens_left",
    "prompt_steps",
    "read_measurements",
    "Request",
    "requests_from_frame",
    "requests_to_frame",
    "RequestTooLargeError",
    "run_capacity_task",
    "save_results",
    "seq_slot_free",
    "SerialExecutor",
    "service_rate_per_s",
    "SimResult",
    "simulate",
    "simulate_fleet",
    "plan_replicas",
    "ReplicaPlan",
    "ClosedLoopClients",
    "FleetResult",
    "LeastLoaded",
    "PrefixAware",
    "RoundRobin",
    "SessionAffinity",
    "SLO",
    "SLOUnattainableError",
    "step_gates",
    "StepFill",
    "sweep",
    "SweepWorkload",
    "synthetic_workload",
    "SyntheticWorkload",
    "tile_budget",
    "trace_stats",
    "TraceFormatError",
    "TraceWorkload",
    "ttft_s",
    "tune",
    "TuneResult",
    "Uniform",
    "UnknownNameError",
    "validate_parameters",
    "weight_bytes_per_gpu",
    "weights_fit",
    # the budget scenario, KV per budget and cost what-ifs, out of charts (issue 9)
    "BudgetPayoff",
    "budget_payoff",
    "budget_sweep",
    "flattening_budget",
    "hardware_comparison",
    "kv_by_budget",
    "moe_step_costs",
    "prompt_timeline",
    "tensor_parallel_speedups",
    "tile_cliffs",
    # run metrics, the load grid and sweep readings, out of charts (issue 9)
    "budget_frontier",
    "gate_shares",
    "load_grid",
    "percentiles_by_budget",
    "run_numbers",
    "why_no_capacity",
    "workload_stats",
)


def test_facade_exports_every_public_name() -> None:
    missing = sorted(set(PUBLIC_NAMES) - set(budgetlab.__all__))
    assert not missing, f"names dropped from budgetlab.__all__: {missing}"


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_name_resolves(name: str) -> None:
    assert getattr(budgetlab, name) is not None


def test_all_has_no_repeats_and_every_entry_resolves() -> None:
    assert len(budgetlab.__all__) == len(set(budgetlab.__all__))
    for name in budgetlab.__all__:
        assert hasattr(budgetlab, name), name


def test_charts_and_reports_are_still_importable_modules() -> None:
    charts = importlib.import_module("budgetlab.charts")
    assert callable(charts.step_cost_chart)
    reports = importlib.import_module("budgetlab.reports")
    assert callable(reports.main)


def test_facade_functions_are_functions_not_modules() -> None:
    # ``bl.sweep``, ``bl.tune`` and ``bl.calibrate`` are the functions, whatever modules exist
    for name in ("sweep", "tune", "calibrate", "capacity", "simulate"):
        assert callable(getattr(budgetlab, name)), name
