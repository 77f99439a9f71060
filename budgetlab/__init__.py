"""budgetlab: how an LLM server's token budget and sequence cap shape latency.

The package holds all the math behind the notebooks: the ideal and calibrated step costs, the
budget filled in vLLM's order with chunked prompts, KV memory and three-gate admission, a
continuous-batching simulator with vLLM V1's scheduling rules, workloads, load sweeps,
capacity under an SLO and a knob tuner. Everything listed here is importable as
``budgetlab.<name>``.

Reading guide: which module to open for which question
------------------------------------------------------
* *What is a GPU, a model, an engine configuration, a request, a step?* :mod:`budgetlab.specs`
  (the catalog's rows and their sources: :mod:`budgetlab.catalog`).
* *How long does one step take?* :mod:`budgetlab.cost` -- the contract in
  :mod:`~budgetlab.cost.protocol`, the seeds' roofline in :mod:`~budgetlab.cost.roofline`, the
  realistic terms in :mod:`~budgetlab.cost.calibrated`, fitting to your measurements in
  :mod:`~budgetlab.cost.fit`.
* *How is one step's token budget filled, and what does it do to TTFT and the longest gap?*
  :mod:`budgetlab.budget`; across many budgets and cost models, :mod:`budgetlab.tradeoffs`.
* *How much KV memory is left, and who gets in?* :mod:`budgetlab.memory`, then the three gates
  in :mod:`budgetlab.admission`.
* *What happens over time, step by step, as vLLM schedules it?* :mod:`budgetlab.simulator`
  (start with its module docstring, then ``step.py``: the rules; ``core.py`` states them again,
  compiled, and only goes faster).
* *What traffic?* :mod:`budgetlab.workload`. *What numbers come out of a run?*
  :mod:`budgetlab.metrics`.
* *Which load does a replica carry under an SLO, and which knobs should I set?*
  :mod:`budgetlab.experiments` (sweep, capacity, tune).
* Presentation sits on top and is never imported by the model: :mod:`budgetlab.charts` draws,
  :mod:`budgetlab.notebook` checks parameters and renders reports, :mod:`budgetlab.text` formats.
"""

from __future__ import annotations

from budgetlab._version import __version__ as __version__
from budgetlab.admission import Admission, Gate, admit, budget_has_room, kv_blocks_fit, seq_slot_free
from budgetlab.budget import (
    StepFill,
    budget_for_longest_gap,
    chunk_schedule,
    fill_step,
    longest_gap_s,
    prefill_tokens_left,
    prompt_steps,
    prompt_timeline,
    ttft_s,
)
from budgetlab.catalog import (
    data_path,
    hardware,
    hardware_table,
    list_hardware,
    list_models,
    model,
    model_table,
)
from budgetlab.cost import (
    CalibratedCost,
    CalibrationError,
    CalibrationResult,
    ConstantCost,
    CostModel,
    Drafter,
    IdealCost,
    budget_for_step_time,
    calibrate,
    knee_tokens,
    predict_step_ms,
    read_measurements,
)
from budgetlab.cost.variants import hardware_comparison, moe_step_costs, tensor_parallel_speedups, tile_cliffs
from budgetlab.cudagraph import cudagraph_capture_sizes, cudagraph_dispatch
from budgetlab.errors import (
    BudgetlabError,
    CapacityAboveBoundsError,
    CatalogError,
    ConfigError,
    DoesNotFitError,
    NoBudgetMeetsTargetError,
    ParameterError,
    RequestTooLargeError,
    SchedulerStallError,
    SLOUnattainableError,
    TraceFormatError,
    UnknownNameError,
)
from budgetlab.experiments.by_budget import best_capacity, capacity_by_budget
from budgetlab.experiments.capacity import (
    CapacityOutcome,
    CapacityResult,
    CapacityTask,
    capacity,
    run_capacity_task,
    why_no_capacity,
)
from budgetlab.experiments.executors import SerialExecutor
from budgetlab.experiments.replicas import ReplicaPlan, plan_replicas
from budgetlab.experiments.slo import SLO
from budgetlab.experiments.speculation import (
    SpeculationResult,
    speculation_by_load,
    stops_paying_per_s,
    tune_speculation,
)
from budgetlab.experiments.sweep import load_grid, percentiles_by_budget, service_rate_per_s, sweep
from budgetlab.experiments.tune import FirstGuess, TuneResult, budget_frontier, first_guess, tile_budget, tune
from budgetlab.fleet import FleetResult, LeastLoaded, PrefixAware, RoundRobin, SessionAffinity, simulate_fleet
from budgetlab.hf_config import model_from_hf_config
from budgetlab.memory import (
    KVCapacity,
    activation_peak,
    blocks_for_tokens,
    is_tight,
    kv_by_budget,
    kv_bytes_per_token,
    kv_capacity,
    memory_levers,
    tight_memory_text,
    weight_bytes_per_gpu,
    weights_fit,
)
from budgetlab.metrics import busy_stats, gate_shares, run_numbers, step_gates
from budgetlab.notebook.parameters import Parameters, validate_parameters
from budgetlab.notebook.results import load_results, save_results
from budgetlab.serving import (
    ServingOverhead,
    calibrate_serving,
    client_metrics,
    client_requests,
    read_vllm_bench,
)
from budgetlab.simulator import SimResult, simulate
from budgetlab.specs import Batch, EngineConfig, HardwareSpec, ModelSpec, Request
from budgetlab.tradeoffs import BudgetPayoff, budget_payoff, budget_sweep, budget_tradeoff, flattening_budget
from budgetlab.workload import (
    AcceptanceRates,
    ClosedLoopClients,
    Empirical,
    Fixed,
    LengthDistribution,
    LogNormal,
    MeanAcceptanceLength,
    MultiTurnWorkload,
    SweepWorkload,
    SyntheticWorkload,
    SystemPromptWorkload,
    TraceWorkload,
    Uniform,
    code_like,
    conversation_like,
    default_acceptance,
    gamma_arrivals,
    load_trace,
    mean_sequence_tokens,
    multi_turn_workload,
    poisson_arrivals,
    requests_from_frame,
    requests_to_frame,
    synthetic_workload,
    system_prompt_workload,
    trace_stats,
    with_accepted_drafts,
)
from budgetlab.workload.frames import workload_stats

__all__ = [
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
    "multi_turn_workload",
    "MultiTurnWorkload",
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
    "SchedulerStallError",
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
    "StepFill",
    "step_gates",
    "sweep",
    "SweepWorkload",
    "synthetic_workload",
    "SyntheticWorkload",
    "system_prompt_workload",
    "SystemPromptWorkload",
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
    # any model from its Hugging Face config.json (issue 11)
    "model_from_hf_config",
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
    # CUDA graphs as vLLM 0.33 captures and dispatches them (issue 22)
    "cudagraph_capture_sizes",
    "cudagraph_dispatch",
    "SpeculationResult",
    "speculation_by_load",
    "stops_paying_per_s",
    "tune_speculation",
    "AcceptanceRates",
    "MeanAcceptanceLength",
    "with_accepted_drafts",
    "default_acceptance",
    "Drafter",
]
