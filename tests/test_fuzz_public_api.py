"""Fuzz tier: bad numbers into every public function that takes numbers.

Each function below is called once with valid arguments (it must succeed), then once per
numeric argument and per bad value (NaN, ±infinity, a negative number, a fraction where a whole
number belongs, a bool, a string, ``None``), the other arguments kept valid. Every such call must
end in a *handled* refusal: a :class:`~budgetlab.errors.BudgetlabError`, or the ``ValueError`` /
``TypeError`` of budgetlab's checking dialect, whose message names the argument. Anything else is
counted as an unhandled exception (``ZeroDivisionError``, ``AttributeError``, numpy's own
messages...), and a call that *returns* is a silent wrong answer, unless the value is one the
function documents as valid (``ACCEPTED`` below, each with its reason).

The counts (inputs tried, handled, unhandled, silent) are printed in pytest's summary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import pytest

import budgetlab as bl
from budgetlab.errors import BudgetlabError

from conftest import record_fuzz_counts

H100 = bl.hardware("h100-sxm")
LLAMA = bl.model("llama-3.1-8b")
IDEAL = bl.IdealCost(H100, LLAMA)
CALIBRATED = bl.CalibratedCost.typical(H100, LLAMA)
ENGINE = bl.EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64)


def _hardware_fields() -> dict[str, Any]:
    return {
        "slug": "fuzz-gpu",
        "name": "Fuzz GPU",
        "dense_bf16_flops_per_s": 1e15,
        "mem_bandwidth_bytes_per_s": 3e12,
        "memory_bytes": 80e9,
        "interconnect": "nvlink",
        "interconnect_bandwidth_bytes_per_s": 450e9,
        "interconnect_latency_s": 1e-5,
    }


def _model_fields() -> dict[str, Any]:
    return {
        "slug": "fuzz-model",
        "name": "Fuzz model",
        "num_params": 8e9,
        "num_active_params": 8e9,
        "num_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_kv_heads": 8,
        "head_dim": 128,
        "intermediate_size": 14336,
        "vocab_size": 128256,
    }


#: function name -> (the function, valid keyword arguments, the numeric arguments to fuzz)
CASES: dict[str, tuple[Callable[..., Any], dict[str, Any], tuple[str, ...]]] = {
    "admit": (
        bl.admit,
        {"num_running": 1, "max_num_seqs": 8, "budget_left_tokens": 100, "known_tokens": 50, "free_blocks": 10},
        ("num_running", "max_num_seqs", "budget_left_tokens", "known_tokens", "free_blocks", "block_size"),
    ),
    "blocks_for_tokens": (bl.blocks_for_tokens, {"num_tokens": 100, "block_size": 16}, ("num_tokens", "block_size")),
    "budget_for_longest_gap": (
        bl.budget_for_longest_gap,
        {"cost": IDEAL, "target_s": 0.05, "num_decodes": 8, "prompt_tokens": 4000},
        ("target_s", "num_decodes", "prompt_tokens", "decode_context_tokens", "long_prefill_token_threshold"),
    ),
    "budget_for_step_time": (bl.budget_for_step_time, {"cost": IDEAL, "target_s": 0.02}, ("target_s",)),
    "budget_has_room": (bl.budget_has_room, {"budget_left_tokens": 10}, ("budget_left_tokens",)),
    "budget_tradeoff": (
        bl.budget_tradeoff,
        {"cost": IDEAL, "small_budget_tokens": 512, "big_budget_tokens": 4096, "num_decodes": 8, "prompt_tokens": 4000},
        ("small_budget_tokens", "big_budget_tokens", "num_decodes", "prompt_tokens"),
    ),
    "chunk_schedule": (
        bl.chunk_schedule,
        {"budget_tokens": 2048, "num_decodes": 8, "prompt_tokens": 5000},
        ("budget_tokens", "num_decodes", "prompt_tokens", "long_prefill_token_threshold"),
    ),
    "prompt_steps": (
        bl.prompt_steps,
        {"budget_tokens": 2048, "num_decodes": 8, "prompt_tokens": 5000},
        ("budget_tokens", "num_decodes", "prompt_tokens", "decode_context_tokens", "long_prefill_token_threshold"),
    ),
    "ttft_s": (
        bl.ttft_s,
        {"cost": IDEAL, "budget_tokens": 2048, "num_decodes": 8, "prompt_tokens": 5000},
        ("budget_tokens", "num_decodes", "prompt_tokens", "decode_context_tokens", "long_prefill_token_threshold"),
    ),
    "longest_gap_s": (
        bl.longest_gap_s,
        {"cost": IDEAL, "budget_tokens": 2048, "num_decodes": 8, "prompt_tokens": 5000},
        ("budget_tokens", "num_decodes", "prompt_tokens", "decode_context_tokens", "long_prefill_token_threshold"),
    ),
    "prompt_timeline": (
        bl.prompt_timeline,
        {"cost": IDEAL, "budget_tokens": 2048, "num_decodes": 8, "prompt_tokens": 5000},
        ("budget_tokens", "num_decodes", "prompt_tokens", "decode_context_tokens", "long_prefill_token_threshold"),
    ),
    "budget_payoff": (
        bl.budget_payoff,
        {"cost": IDEAL, "budget_tokens": 512, "num_decodes": 8, "prompt_tokens": 5000},
        ("budget_tokens", "factor", "num_decodes", "prompt_tokens", "decode_context_tokens"),
    ),
    "prefill_tokens_left": (
        bl.prefill_tokens_left,
        {"budget_tokens": 2048, "num_decodes": 8},
        ("budget_tokens", "num_decodes"),
    ),
    "fill_step": (
        bl.fill_step,
        {"budget_tokens": 2048, "running_remaining_tokens": [1, 1], "waiting_remaining_tokens": [3000]},
        ("budget_tokens", "long_prefill_token_threshold", "max_num_seqs"),
    ),
    "seq_slot_free": (bl.seq_slot_free, {"num_running": 1, "max_num_seqs": 8}, ("num_running", "max_num_seqs")),
    "kv_blocks_fit": (
        bl.kv_blocks_fit,
        {"known_tokens": 100, "free_blocks": 10, "block_size": 16},
        ("known_tokens", "free_blocks", "block_size", "held_hit_blocks", "reserve_blocks"),
    ),
    "tile_budget": (bl.tile_budget, {"tokens": 1000}, ("tokens",)),
    "EngineConfig": (
        bl.EngineConfig,
        {"max_num_batched_tokens": 2048, "max_num_seqs": 64},
        (
            "max_num_batched_tokens",
            "max_num_seqs",
            "block_size",
            "num_kv_blocks",
            "long_prefill_token_threshold",
            "max_model_len",
            "gpu_memory_utilization",
        ),
    ),
    "Request": (
        bl.Request,
        {"request_id": 0, "arrival_at_s": 0.0, "prompt_tokens": 100, "output_tokens": 10},
        ("arrival_at_s", "prompt_tokens", "output_tokens", "priority", "prefix_tokens"),
    ),
    "SLO": (bl.SLO, {"ttft_p90_s": 1.0}, ("ttft_p50_s", "ttft_p90_s", "itl_p99_s", "max_itl_s", "e2e_p99_s")),
    "ConstantCost": (bl.ConstantCost, {"duration_s": 0.01}, ("duration_s",)),
    "Fixed": (bl.Fixed, {"tokens": 100}, ("tokens",)),
    "Uniform": (bl.Uniform, {"low_tokens": 10, "high_tokens": 100}, ("low_tokens", "high_tokens")),
    "LogNormal": (
        bl.LogNormal,
        {"median_tokens": 100.0, "sigma": 0.5},
        ("median_tokens", "sigma", "min_tokens", "max_tokens"),
    ),
    "poisson_arrivals": (
        bl.poisson_arrivals,
        {"rate_per_s": 2.0, "num_requests": 10},
        ("rate_per_s", "num_requests", "seed"),
    ),
    "gamma_arrivals": (
        bl.gamma_arrivals,
        {"rate_per_s": 2.0, "cv": 2.0, "num_requests": 10},
        ("rate_per_s", "cv", "num_requests", "seed"),
    ),
    "synthetic_workload": (
        bl.synthetic_workload,
        {"num_requests": 10, "rate_per_s": 2.0, "prompt": 100, "output": 10},
        ("num_requests", "rate_per_s", "prompt", "output", "cv", "seed"),
    ),
    "conversation_like": (
        bl.conversation_like,
        {"num_requests": 10, "rate_per_s": 2.0},
        ("num_requests", "rate_per_s", "seed", "cv"),
    ),
    "code_like": (bl.code_like, {"num_requests": 10, "rate_per_s": 2.0}, ("num_requests", "rate_per_s", "seed", "cv")),
    "multi_turn_workload": (
        bl.multi_turn_workload,
        {"num_conversations": 4, "conversation_rate_per_s": 1.0, "turns": 2, "message": 50, "output": 10},
        (
            "num_conversations",
            "conversation_rate_per_s",
            "turns",
            "message",
            "output",
            "think_time_s",
            "think_time_cv",
            "max_model_len_tokens",
            "seed",
        ),
    ),
    "system_prompt_workload": (
        bl.system_prompt_workload,
        {"num_requests": 10, "rate_per_s": 2.0, "num_prompts": 2, "system": 100, "message": 20, "output": 10},
        ("num_requests", "rate_per_s", "num_prompts", "system", "message", "output", "zipf_exponent", "seed"),
    ),
    "kv_bytes_per_token": (bl.kv_bytes_per_token, {"model": LLAMA}, ("tp",)),
    "weight_bytes_per_gpu": (bl.weight_bytes_per_gpu, {"model": LLAMA}, ("tp",)),
    "weights_fit": (bl.weights_fit, {"hardware": H100, "model": LLAMA}, ("tp",)),
    "kv_by_budget": (bl.kv_by_budget, {"hardware": H100, "model": LLAMA, "budgets": [2048], "engine": ENGINE}, ()),
    "tensor_parallel_speedups": (
        bl.tensor_parallel_speedups,
        {"hardware": H100, "model": LLAMA, "tp_degrees": [1, 2]},
        (),
    ),
    "tile_cliffs": (bl.tile_cliffs, {"cost": CALIBRATED.with_(tile_tokens=128), "max_tokens": 600}, ("max_tokens",)),
    "load_grid": (
        bl.load_grid,
        {"service_rate_per_s": 10.0, "num_loads": 4},
        ("service_rate_per_s", "num_loads", "max_load_fraction"),
    ),
    "ServingOverhead": (bl.ServingOverhead, {}, ("request_s", "output_lag_steps")),
    "HardwareSpec": (
        bl.HardwareSpec,
        _hardware_fields(),
        (
            "dense_bf16_flops_per_s",
            "mem_bandwidth_bytes_per_s",
            "memory_bytes",
            "interconnect_bandwidth_bytes_per_s",
            "interconnect_latency_s",
            "cuda_memory_bytes",
        ),
    ),
    "ModelSpec": (
        bl.ModelSpec,
        _model_fields(),
        (
            "num_params",
            "num_active_params",
            "num_layers",
            "hidden_size",
            "num_attention_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "num_experts",
            "num_experts_per_token",
            "dtype_bytes",
        ),
    ),
    "CalibratedCost": (
        bl.CalibratedCost,
        {"hardware": H100, "model": LLAMA},
        (
            "tp",
            "step_overhead_s",
            "layer_overhead_s",
            "bandwidth_efficiency",
            "flop_efficiency",
            "knee_overlap_loss",
            "tile_tokens",
        ),
    ),
}

NAN, INF = math.nan, math.inf
BAD_VALUES: tuple[object, ...] = (NAN, INF, -INF, -1, -0.5, 2.5, True, "3", None)

#: (function, argument, bad value) -> why that value is valid there
ACCEPTED: dict[tuple[str, str, str], str] = {}
for _name in ("ttft_p50_s", "ttft_p90_s", "itl_p99_s", "max_itl_s", "e2e_p99_s"):
    ACCEPTED[("SLO", _name, "None")] = "no limit on that metric"
    ACCEPTED[("SLO", _name, "inf")] = "an infinite limit is no limit"
for _fn in ("chunk_schedule", "prompt_steps", "ttft_s", "longest_gap_s", "prompt_timeline"):
    ACCEPTED[(_fn, "budget_tokens", "None")] = "None is the seeds' 'no budget' (the whole prompt at once)"
for _fn, _arg in (
    ("EngineConfig", "num_kv_blocks"),
    ("EngineConfig", "max_model_len"),
    ("LogNormal", "max_tokens"),
    ("fill_step", "max_num_seqs"),
    ("multi_turn_workload", "max_model_len_tokens"),
    ("CalibratedCost", "tile_tokens"),
    ("HardwareSpec", "cuda_memory_bytes"),
):
    ACCEPTED[(_fn, _arg, "None")] = "None is the documented default (no limit / not known)"
ACCEPTED[("Request", "priority", "-1")] = "vLLM priorities are any integer (lower runs first)"
ACCEPTED[("Request", "arrival_at_s", "-1")] = "a trace may start before zero; times are measured from its origin"
ACCEPTED[("Request", "arrival_at_s", "-0.5")] = "a trace may start before zero; times are measured from its origin"
ACCEPTED[("Request", "arrival_at_s", "2.5")] = "arrival times are real seconds"
for _fn, _arg in (
    ("budget_for_longest_gap", "target_s"),
    ("budget_for_step_time", "target_s"),
    ("SLO", "ttft_p90_s"),
    ("ConstantCost", "duration_s"),
    ("LogNormal", "median_tokens"),
    ("LogNormal", "sigma"),
    ("poisson_arrivals", "rate_per_s"),
    ("gamma_arrivals", "rate_per_s"),
    ("gamma_arrivals", "cv"),
    ("synthetic_workload", "rate_per_s"),
    ("synthetic_workload", "cv"),
    ("conversation_like", "rate_per_s"),
    ("conversation_like", "cv"),
    ("code_like", "rate_per_s"),
    ("code_like", "cv"),
    ("multi_turn_workload", "conversation_rate_per_s"),
    ("multi_turn_workload", "think_time_s"),
    ("multi_turn_workload", "think_time_cv"),
    ("system_prompt_workload", "rate_per_s"),
    ("system_prompt_workload", "zipf_exponent"),
    ("load_grid", "service_rate_per_s"),
    ("load_grid", "max_load_fraction"),
    ("ServingOverhead", "request_s"),
    ("EngineConfig", "gpu_memory_utilization"),
    ("CalibratedCost", "step_overhead_s"),
    ("CalibratedCost", "layer_overhead_s"),
    ("CalibratedCost", "bandwidth_efficiency"),
    ("CalibratedCost", "flop_efficiency"),
    ("CalibratedCost", "knee_overlap_loss"),
    ("HardwareSpec", "dense_bf16_flops_per_s"),
    ("HardwareSpec", "mem_bandwidth_bytes_per_s"),
    ("HardwareSpec", "memory_bytes"),
    ("HardwareSpec", "interconnect_bandwidth_bytes_per_s"),
    ("HardwareSpec", "interconnect_latency_s"),
    ("HardwareSpec", "cuda_memory_bytes"),
    ("ModelSpec", "num_params"),
    ("ModelSpec", "num_active_params"),
):
    ACCEPTED[(_fn, _arg, "2.5")] = "a real number, not a count"
ACCEPTED[("SLO", "ttft_p90_s", "2.5")] = "a real number of seconds"
for _arg in ("ttft_p50_s", "itl_p99_s", "max_itl_s", "e2e_p99_s"):
    ACCEPTED[("SLO", _arg, "2.5")] = "a real number of seconds"
ACCEPTED[("CalibratedCost", "knee_overlap_loss", "-0.5")] = "a fitted overlap term may be negative"
ACCEPTED[("CalibratedCost", "knee_overlap_loss", "-1")] = "a fitted overlap term may be negative"
ACCEPTED[("budget_for_step_time", "target_s", "inf")] = "no step-time limit: the largest budget searched"
ACCEPTED[("budget_for_longest_gap", "target_s", "inf")] = "no gap limit: the largest budget searched"


def _label(value: object) -> str:
    return "None" if value is None else repr(value)


def _handled(error: BaseException, argument: str) -> bool:
    if isinstance(error, BudgetlabError):
        return True
    return isinstance(error, (ValueError, TypeError)) and argument in str(error)


def _outcome(function: Callable[..., Any], kwargs: Mapping[str, Any], argument: str) -> str:
    try:
        function(**kwargs)
    except Exception as error:
        return "handled" if _handled(error, argument) else f"unhandled {type(error).__name__}: {error}"
    return "returned"


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_numbers_are_refused_clearly(name: str) -> None:
    function, valid, arguments = CASES[name]
    function(**valid)  # the valid call works
    tried = handled = 0
    unhandled: list[str] = []
    silent: list[str] = []
    for argument in arguments:
        for value in BAD_VALUES:
            key = (name, argument, _label(value))
            outcome = _outcome(function, {**valid, argument: value}, argument)
            tried += 1
            if outcome == "handled":
                handled += 1
            elif outcome == "returned":
                if key not in ACCEPTED:
                    silent.append(f"{argument}={_label(value)}")
            else:
                unhandled.append(f"{argument}={_label(value)}: {outcome}")
    record_fuzz_counts(f"bad numbers into {name}", tried=tried, unhandled=len(unhandled), silent=len(silent))
    assert unhandled == [], f"{name}: {len(unhandled)} of {tried} inputs raised an unhandled exception"
    assert silent == [], f"{name}: silently accepted {silent}"


def test_every_accepted_value_names_a_fuzzed_case() -> None:
    for name, argument, _ in ACCEPTED:
        assert name in CASES and argument in CASES[name][2], (name, argument)
