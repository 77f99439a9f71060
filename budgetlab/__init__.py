"""budgetlab: how an LLM server's token budget and sequence cap shape latency.

The package holds all the math behind the notebooks: the ideal and calibrated step costs, the
budget filled in vLLM's order with chunked prompts, KV memory and three-gate admission, a
continuous-batching simulator with vLLM V1's scheduling rules, workloads, load sweeps,
capacity under an SLO and a knob tuner. Everything listed here is importable as
``budgetlab.<name>``.
"""

from __future__ import annotations

from budgetlab.admission import Admission, Gate, admit, budget_has_room, kv_blocks_fit, seq_slot_free
from budgetlab.budget import (
    prompt_steps,
    StepFill,
    budget_tradeoff,
    chunk_schedule,
    fill_step,
    longest_gap_s,
    prefill_tokens_left,
    ttft_s,
)
from budgetlab.calibrate import CalibrationError, CalibrationResult, calibrate, predict_step_ms, read_measurements
from budgetlab.calibrated import CalibratedCost
from budgetlab.catalog import (
    data_path,
    hardware,
    hardware_table,
    list_hardware,
    list_models,
    model,
    model_table,
)
from budgetlab.errors import (
    BudgetlabError,
    CatalogError,
    ConfigError,
    DoesNotFitError,
    NoBudgetMeetsTargetError,
    ParameterError,
    RequestTooLargeError,
    TraceFormatError,
    UnknownNameError,
)
from budgetlab.memory import KVCapacity, activation_bytes, blocks_for_tokens, kv_bytes_per_token, kv_capacity
from budgetlab.parameters import Parameters, validate_parameters
from budgetlab.results import load_results, save_results
from budgetlab.roofline import Batch, ConstantCost, CostModel, IdealCost, budget_for_step_time, knee_tokens
from budgetlab.simulator import SimResult, simulate
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request
from budgetlab.sweep import (
    SLO,
    CapacityAboveBoundsError,
    CapacityResult,
    SerialExecutor,
    SLOUnattainableError,
    SweepWorkload,
    SyntheticWorkload,
    TraceWorkload,
    capacity,
    sweep,
)
from budgetlab.tune import FirstGuess, TuneResult, first_guess, tile_budget, tune
from budgetlab.workload import (
    Empirical,
    Fixed,
    LengthDistribution,
    LogNormal,
    Uniform,
    code_like,
    conversation_like,
    gamma_arrivals,
    load_trace,
    poisson_arrivals,
    requests_from_frame,
    requests_to_frame,
    synthetic_workload,
    trace_stats,
)

__version__ = "0.1.0"

__all__ = [
    "activation_bytes",
    "Admission",
    "admit",
    "Batch",
    "blocks_for_tokens",
    "budget_for_step_time",
    "budget_has_room",
    "budget_tradeoff",
    "BudgetlabError",
    "calibrate",
    "CalibratedCost",
    "CalibrationError",
    "CalibrationResult",
    "capacity",
    "CapacityAboveBoundsError",
    "CapacityResult",
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
    "save_results",
    "seq_slot_free",
    "SerialExecutor",
    "SimResult",
    "simulate",
    "SLO",
    "SLOUnattainableError",
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
]
