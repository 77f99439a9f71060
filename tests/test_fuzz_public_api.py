"""Fuzz tier: bad numbers into every public function that takes numbers.

Each function below is called once with valid arguments (it must succeed), then once per
numeric argument and per bad value (NaN, ±infinity, a negative number, a fraction where a whole
number belongs, a bool, a string, ``None``), the other arguments kept valid. Every such call must
end in a *handled* refusal: a :class:`~budgetlab.errors.BudgetlabError`, or the ``ValueError`` /
``TypeError`` of budgetlab's checking dialect, whose message names the argument. Anything else is
counted as an unhandled exception (``ZeroDivisionError``, ``AttributeError``, numpy's own
messages...), and a call that *returns* is a silent wrong answer, unless the value is one the
function documents as valid (``ACCEPTED`` below, each with its reason).

Then once per numeric argument and per *large* value (1e12, 1e19, 2**63, 10**30, 1e308): a
value far past anything real must be refused up front, by a bound that says what it is and why
(:mod:`budgetlab._checks`), or be one the function documents as valid (``LARGE_ACCEPTED``);
every call, refused or not, must end within :data:`PROMPT_S` (no list of 10**12 entries, no
int64 overflow, no endless loop). A sequence argument is fuzzed with the bad value as its one
element (``SEQUENCE_ARGUMENTS``).

The counts (inputs tried, handled, unhandled, silent) are printed in pytest's summary.
"""

from __future__ import annotations

import json
import math
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
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
LLAMA_CONFIG: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


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
    "kv_by_budget": (
        bl.kv_by_budget,
        {"hardware": H100, "model": LLAMA, "budgets": [2048], "engine": ENGINE},
        ("budgets",),
    ),
    "tensor_parallel_speedups": (
        bl.tensor_parallel_speedups,
        {"hardware": H100, "model": LLAMA, "tp_degrees": [1, 2]},
        ("tp_degrees", "token_marks"),
    ),
    "model_from_hf_config": (
        bl.model_from_hf_config,
        {"path_or_dict": LLAMA_CONFIG, "slug": "fuzz-llama"},
        ("expected_params", "expected_active_params", "params_rtol", "dtype_bytes"),
    ),
    "tile_cliffs": (bl.tile_cliffs, {"cost": CALIBRATED.with_(tile_tokens=128), "max_tokens": 600}, ("max_tokens",)),
    "load_grid": (
        bl.load_grid,
        {"service_rate_per_s": 10.0, "num_loads": 4},
        ("service_rate_per_s", "num_loads", "max_load_fraction"),
    ),
    "ServingOverhead": (bl.ServingOverhead, {}, ("request_overhead_s", "output_lag_steps")),
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
LARGE_VALUES: tuple[object, ...] = (1e12, 1e19, 2**63, 10**30, 1e308)

#: arguments that take a sequence: fuzzed with the bad value as its one element
SEQUENCE_ARGUMENTS = {("kv_by_budget", "budgets"), ("tensor_parallel_speedups", "tp_degrees")}
SEQUENCE_ARGUMENTS |= {("tensor_parallel_speedups", "token_marks")}

PROMPT_S = 5.0
"""Longest any one fuzzed call may take [s] (a refusal takes microseconds; the margin is for a
loaded machine)."""


def _label(value: object) -> str:
    return "None" if value is None else repr(value)


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
    ("ServingOverhead", "request_overhead_s"),
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
for _arg in ("expected_params", "expected_active_params"):
    ACCEPTED[("model_from_hf_config", _arg, "None")] = "None: no published count to check against"
ACCEPTED[("model_from_hf_config", "dtype_bytes", "None")] = "None: bytes per weight from torch_dtype"

#: (function, argument, large value) -> why that value is valid there
LARGE_ACCEPTED: dict[tuple[str, str, str], str] = {}
LARGE_LABELS = tuple(_label(v) for v in (1e12, 1e19, 2**63, 10**30, 1e308))
INT_LABELS = (_label(2**63), _label(10**30))


def _accept(pairs: tuple[tuple[str, str], ...], labels: tuple[str, ...], why: str) -> None:
    for function, argument in pairs:
        for label in labels:
            LARGE_ACCEPTED[(function, argument, label)] = why


_accept(
    (
        ("budget_for_longest_gap", "target_s"),
        ("budget_for_step_time", "target_s"),
        *(("SLO", a) for a in ("ttft_p50_s", "ttft_p90_s", "itl_p99_s", "max_itl_s", "e2e_p99_s")),
    ),
    LARGE_LABELS,
    "a limit that loose is no limit: every budget meets it (the search stops at its largest budget)",
)
_accept(
    (("Request", "arrival_at_s"),),
    (_label(1e12),),
    "an instant on the input's clock (epoch milliseconds are ~1.7e12): times are measured from the first "
    "arrival, and the simulator bounds the span, not the instant (MAX_INSTANT_S is 2**62 s)",
)
_accept(
    (
        ("poisson_arrivals", "rate_per_s"),
        ("gamma_arrivals", "rate_per_s"),
        ("synthetic_workload", "rate_per_s"),
        ("conversation_like", "rate_per_s"),
        ("code_like", "rate_per_s"),
        ("multi_turn_workload", "conversation_rate_per_s"),
        ("system_prompt_workload", "rate_per_s"),
    ),
    LARGE_LABELS,
    "a huge rate is every request at (nearly) one instant: a valid burst, and the arrivals stay finite",
)
_accept(
    tuple(
        (f, "seed")
        for f in (
            "poisson_arrivals",
            "gamma_arrivals",
            "synthetic_workload",
            "conversation_like",
            "code_like",
            "multi_turn_workload",
            "system_prompt_workload",
        )
    ),
    INT_LABELS,
    "NumPy's SeedSequence takes any int >= 0 as entropy",
)
_accept(
    (("system_prompt_workload", "zipf_exponent"),),
    LARGE_LABELS,
    "the limit of a steep Zipf law: every request shares the most popular prompt (the weights stay finite)",
)
_accept(
    (
        *(("admit", a) for a in ("num_running", "max_num_seqs", "budget_left_tokens", "known_tokens")),
        *(("admit", a) for a in ("free_blocks", "block_size")),
        ("seq_slot_free", "num_running"),
        ("seq_slot_free", "max_num_seqs"),
        ("budget_has_room", "budget_left_tokens"),
        *(("kv_blocks_fit", a) for a in ("known_tokens", "free_blocks", "block_size", "held_hit_blocks")),
        ("kv_blocks_fit", "reserve_blocks"),
        ("blocks_for_tokens", "num_tokens"),
        ("blocks_for_tokens", "block_size"),
        ("tile_budget", "tokens"),
    ),
    INT_LABELS,
    "a pure integer rule (a comparison or a rounding) on Python ints, exact at any size: the answer is right",
)
_accept(
    (
        ("HardwareSpec", "dense_bf16_flops_per_s"),
        ("HardwareSpec", "mem_bandwidth_bytes_per_s"),
        ("HardwareSpec", "memory_bytes"),
        ("HardwareSpec", "interconnect_bandwidth_bytes_per_s"),
        ("ModelSpec", "num_params"),
        ("ModelSpec", "num_active_params"),
    ),
    (_label(1e12),),
    "within the physical ceiling: 1 TFLOP/s, 1 TB/s, 1 TB of memory and 1 T parameters all exist",
)


def _handled(error: BaseException, argument: str) -> bool:
    if isinstance(error, BudgetlabError):
        return True
    return isinstance(error, (ValueError, TypeError)) and argument in str(error)


class TookTooLong(Exception):
    """A fuzzed call ran past :data:`PROMPT_S`."""


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`TookTooLong` in the call if it runs past ``seconds`` (POSIX timer)."""

    def expire(signum: int, frame: object) -> None:
        raise TookTooLong(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _outcome(function: Callable[..., Any], kwargs: Mapping[str, Any], argument: str) -> str:
    try:
        with _deadline(PROMPT_S):
            function(**kwargs)
    except TookTooLong as error:
        return f"unhandled: {error}"
    except Exception as error:
        return "handled" if _handled(error, argument) else f"unhandled {type(error).__name__}: {error!s:.300}"
    return "returned"


def _fuzzed(name: str, argument: str, value: object) -> object:
    """``value`` as the argument takes it: wrapped in a list for a sequence argument."""
    return [value] if (name, argument) in SEQUENCE_ARGUMENTS else value


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
            outcome = _outcome(function, {**valid, argument: _fuzzed(name, argument, value)}, argument)
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


@pytest.mark.parametrize("name", sorted(CASES))
def test_large_numbers_are_refused_promptly_with_their_bound(name: str) -> None:
    """1e12 ... 1e308 into every numeric argument: refused naming it (and the bound), or documented valid."""
    function, valid, arguments = CASES[name]
    tried = 0
    unhandled: list[str] = []
    silent: list[str] = []
    for argument in arguments:
        for value in LARGE_VALUES:
            key = (name, argument, _label(value))
            started = time.perf_counter()
            outcome = _outcome(function, {**valid, argument: _fuzzed(name, argument, value)}, argument)
            tried += 1
            if outcome == "returned" and key not in LARGE_ACCEPTED:
                silent.append(f"{argument}={_label(value)}")
            elif outcome not in ("handled", "returned"):
                unhandled.append(f"{argument}={_label(value)}: {outcome}")
            elif outcome == "handled" and time.perf_counter() - started > 1.0:
                unhandled.append(
                    f"{argument}={_label(value)}: refused only after {time.perf_counter() - started:.1f} s"
                )
    record_fuzz_counts(f"large numbers into {name}", tried=tried, unhandled=len(unhandled), silent=len(silent))
    assert unhandled == [], f"{name}: {unhandled}"
    assert silent == [], f"{name}: silently accepted {silent}"


def test_every_accepted_value_names_a_fuzzed_case() -> None:
    for name, argument, _ in (*ACCEPTED, *LARGE_ACCEPTED):
        assert name in CASES and argument in CASES[name][2], (name, argument)


def test_every_case_fuzzes_something() -> None:
    """A case with no argument to fuzz would count as tried while testing nothing."""
    assert [name for name, (_, _, arguments) in CASES.items() if not arguments] == []


# ---------------------------------------------------------------------------------------------
# Malformed, deeply nested and wrongly typed JSON: read_vllm_bench and model_from_hf_config
# ---------------------------------------------------------------------------------------------

#: values of the wrong type or size for a JSON field (``inf`` stands for JSON's ``Infinity``)
WRONG_JSON: tuple[object, ...] = (None, True, "x", [], {}, -1, 2.7, 1e308, math.inf, 10**30, [[1]], {"a": 1})

#: bench fields read_vllm_bench does not read (their values cannot make a wrong answer)
BENCH_UNREAD = {
    "backend",
    "num_prompts",
    "request_throughput",
    "output_throughput",
    "budgetlab_request_overhead_s",
    "budgetlab_recipe",
}

#: (bench field, value label) -> why that value is valid there
BENCH_ACCEPTED: dict[tuple[str, str], str] = {
    ("failed", "None"): "null: a vLLM version that does not count failures (0)",
    ("burstiness", "None"): "null: Poisson arrivals, vLLM's default burstiness of 1",
    ("max_concurrency", "None"): "null: an open-loop run (no cap on requests in flight)",
    ("request_rate", "inf"): "vLLM's 'every request at once'",
}
for _field in ("label", "model_id"):
    for _value in WRONG_JSON:
        BENCH_ACCEPTED[(_field, _label(_value))] = "informational; anything but a string is read as unknown"
for _field in ("request_rate", "burstiness"):
    for _value in (2.7, 1e308, 10**30):
        BENCH_ACCEPTED[(_field, _label(_value))] = (
            "a rate or gamma shape: any finite number > 0 (a detailed file replays its start times)"
        )
for _stat in ("mean", "median", "std", "p99"):
    for _metric in ("ttft", "tpot", "e2el"):
        for _value in (2.7, 1e308, 10**30):
            BENCH_ACCEPTED[(f"{_stat}_{_metric}_ms", _label(_value))] = (
                "the published summary is kept as written; a detailed file is calibrated from its per-request lists"
            )
for _stat in ("mean", "median"):
    for _value in (2.7, 1e308, 10**30):
        BENCH_ACCEPTED[(f"{_stat}_itl_ms", _label(_value))] = "the published summary is kept as written"
BENCH_ACCEPTED[("duration", "2.7")] = "a finite number of seconds"

#: (list field, element label) -> why that element is valid there
ELEMENT_ACCEPTED: dict[tuple[str, str], str] = {
    ("start_times", "-1"): "a perf_counter reading: only differences between start times count",
    ("start_times", "2.7"): "a perf_counter reading: only differences between start times count",
    ("ttfts", "2.7"): "a finite number of seconds",
}
for _value in (None, [], {}):
    ELEMENT_ACCEPTED[("errors", _label(_value))] = "a falsy entry means no error (vLLM writes '')"


def _bench() -> dict[str, Any]:
    from budgetlab.serving import example_bench_path

    return json.loads(example_bench_path().read_text(encoding="utf-8"))


def _json_outcome(read: Callable[[Any], Any], data: object, field: str | None) -> str:
    """``handled`` (a budgetlab error naming ``field`` when given), ``returned`` or ``unhandled ...``."""
    try:
        with _deadline(PROMPT_S):
            read(data)
    except TookTooLong as error:
        return f"unhandled: {error}"
    except BudgetlabError as error:
        return "handled" if field is None or field in str(error) else f"unhandled: does not name {field}: {error}"
    except Exception as error:
        return f"unhandled {type(error).__name__}: {error!s:.200}"
    return "returned"


def _tally(name: str, outcomes: list[tuple[str, str, bool]]) -> None:
    """Record and check ``(input, outcome, documented valid)`` triples."""
    unhandled = [f"{what}: {outcome}" for what, outcome, _ in outcomes if outcome not in ("handled", "returned")]
    silent = [what for what, outcome, valid in outcomes if outcome == "returned" and not valid]
    record_fuzz_counts(name, tried=len(outcomes), unhandled=len(unhandled), silent=len(silent))
    assert unhandled == [], unhandled
    assert silent == [], f"silently accepted {silent}"


def test_bench_fields_of_the_wrong_type_are_refused_naming_the_field() -> None:
    base = _bench()
    bl.read_vllm_bench(base)  # the valid file reads
    outcomes = []
    for field in sorted(base):
        for value in WRONG_JSON:
            outcome = _json_outcome(bl.read_vllm_bench, {**base, field: value}, field)
            valid = field in BENCH_UNREAD or (field, _label(value)) in BENCH_ACCEPTED
            outcomes.append((f"{field}={_label(value)}", outcome, valid))
    _tally("wrong JSON types into read_vllm_bench fields", outcomes)


def test_bench_list_entries_of_the_wrong_type_are_refused() -> None:
    base = _bench()
    outcomes = []
    for field in ("input_lens", "output_lens", "ttfts", "itls", "errors", "start_times"):
        for value in WRONG_JSON:
            entries = list(base[field])
            entries[0] = value
            outcome = _json_outcome(bl.read_vllm_bench, {**base, field: entries}, None)
            outcomes.append((f"{field}[0]={_label(value)}", outcome, (field, _label(value)) in ELEMENT_ACCEPTED))
    for value in WRONG_JSON:
        gaps = [list(g) for g in base["itls"]]
        gaps[0][0] = value
        outcome = _json_outcome(bl.read_vllm_bench, {**base, "itls": gaps}, "itls")
        outcomes.append((f"itls[0][0]={_label(value)}", outcome, value == 2.7))  # 2.7: a gap of 2.7 s is a gap
    _tally("wrong JSON types into read_vllm_bench entries", outcomes)


#: hf config keys only read in some configurations (their values cannot make a wrong answer here)
HF_UNREAD = {
    "num_experts_per_tok": "read only for a mixture of experts (this config is dense)",
    "moe_intermediate_size": "read only for a mixture of experts (this config is dense)",
    "dtype": "read only when torch_dtype is absent",
    "architectures": "not read",
}
#: optional hf config keys: the values that mean "absent" (each documented)
HF_ABSENT = {
    "num_key_value_heads": ("None",),
    "head_dim": ("None",),
    "tie_word_embeddings": ("None",),
    "attention_bias": ("None",),
    "mlp_bias": ("None",),
    "torch_dtype": ("None",),
    "model_type": ("None",),
    "num_local_experts": ("None",),
    "num_experts": ("None",),
    "text_config": ("None",),
    "kv_lora_rank": ("None", "[]", "{}"),
    "decoder_sparse_step": ("None", "-1"),
    "layer_types": ("None", "[]"),
}


#: (hf config key, value label) -> why that value is valid there
HF_VALID = {
    ("model_type", "'x'"): "any string: an unknown model type is read with the plain Llama layout",
    ("tie_word_embeddings", "True"): "a bool, as the key takes",
    ("attention_bias", "True"): "a bool, as the key takes",
    ("mlp_bias", "True"): "a bool, as the key takes",
}


def test_hf_config_fields_of_the_wrong_type_are_refused_naming_the_field() -> None:
    base = {**LLAMA_CONFIG, "architectures": ["LlamaForCausalLM"]}
    extra = ("num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "kv_lora_rank")
    extra += ("layer_types", "text_config", "decoder_sparse_step", "dtype")
    outcomes = []
    for field in (*sorted(base), *extra):
        for value in WRONG_JSON:
            outcome = _json_outcome(bl.model_from_hf_config, {**base, field: value}, field)
            valid = (
                field in HF_UNREAD or _label(value) in HF_ABSENT.get(field, ()) or (field, _label(value)) in HF_VALID
            )
            outcomes.append((f"{field}={_label(value)}", outcome, valid))
    _tally("wrong JSON types into model_from_hf_config keys", outcomes)


def _nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


MALFORMED_FILES: dict[str, bytes] = {
    "nested 10,000 deep (objects)": _nested(10_000).encode(),
    "nested 10,000 deep (lists)": ("[" * 10_000 + "]" * 10_000).encode(),
    "nested 10,000 deep inside a field": ('{"completed": ' + _nested(10_000) + "}").encode(),
    "not UTF-8": b'{"model_type": "\xff\xfe", "completed": 1}',
    "UTF-16": '{"completed": 1}'.encode("utf-16"),
    "truncated": b'{"completed": 1, "hidden_size": ',
    "empty": b"",
    "a JSON list": b"[1, 2, 3]",
    "a JSON string": b'"config"',
    "NaN literals": b'{"completed": NaN, "duration": NaN, "hidden_size": NaN}',
    "a NUL byte": b'{"completed": 1\x00}',
    "huge integer": ('{"completed": ' + "9" * 4000 + "}").encode(),
}


@pytest.mark.parametrize("reader", ["read_vllm_bench", "model_from_hf_config"])
def test_malformed_and_deeply_nested_files_are_refused_naming_the_file(reader: str, tmp_path: Any) -> None:
    read = getattr(bl, reader)
    outcomes = []
    for what, content in MALFORMED_FILES.items():
        path = tmp_path / "config.json"
        path.write_bytes(content)
        outcome = _json_outcome(read, path, str(path))
        outcomes.append((what, outcome, False))
    _tally(f"malformed files into {reader}", outcomes)
