"""The default scenario, and the model objects a notebook's validated parameters describe.

:data:`SCENARIO_DEFAULTS` is the default value of every shared notebook parameter: the scenario
of the project's two source documents (Llama 3.1 8B on one H100 SXM, a 2,048-token budget, 100
users decoding while a 5,000-token prompt arrives). ``notebooks/params/h100-llama-3.1-8b.yaml``
spells out the same values, and error messages quote them as examples of a valid value.

:func:`slo_from_parameters` and :func:`workload_from_parameters` build the
:class:`~budgetlab.experiments.slo.SLO` and the sweep workload that notebooks 07 and 08 simulate, and
:func:`conversations_from_parameters` the multi-turn conversations of notebook 09, from
parameters :func:`~budgetlab.notebook.parameters.validate_parameters` has already checked.
Validation itself lives in :mod:`budgetlab.notebook.parameters`; nothing here checks a value.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from budgetlab.errors import ParameterError
from budgetlab.experiments.slo import SLO, SLO_METRICS
from budgetlab.specs import Request
from budgetlab.workload import CONVERSATION_OUTPUT, CONVERSATION_PROMPT, LogNormal, Uniform
from budgetlab.workload.sharing import multi_turn_workload
from budgetlab.workload.synthetic import SyntheticWorkload
from budgetlab.workload.traces import TraceWorkload

if TYPE_CHECKING:
    from budgetlab.notebook.parameters import Parameters

__all__ = [
    "SCENARIO_DEFAULTS",
    "COST_MODELS",
    "WORKLOADS",
    "CUSTOM_MAX_PROMPT_TOKENS",
    "CUSTOM_MAX_OUTPUT_TOKENS",
    "CUSTOM_SHAPE",
    "MESSAGE_SIGMA",
    "MESSAGE_MAX_TOKENS",
    "slo_from_parameters",
    "workload_from_parameters",
    "conversations_from_parameters",
]

#: Step-cost models a notebook can simulate with (see :func:`budgetlab.cost.named.make_cost`).
COST_MODELS = ("ideal", "typical")

#: Synthetic workloads: the Splitwise conversation and code fits, or the medians and sigmas given.
WORKLOADS = ("conversation-like", "code-like", "custom")

#: Longest custom prompt and output a synthetic workload draws [tokens] (log-normal tails are
#: clipped there, like the presets' at their traces' longest requests).
CUSTOM_MAX_PROMPT_TOKENS = 32_768
CUSTOM_MAX_OUTPUT_TOKENS = 8_192

#: Spread of a conversation turn's new user message, std of ln(length) [-] (notebook 09): the
#: same order as the Splitwise conversation prompts' (0.77), so a few messages are long pastes.
MESSAGE_SIGMA = 0.8

#: Longest new user message a conversation turn draws [tokens] (the log-normal tail is clipped).
MESSAGE_MAX_TOKENS = 4000

#: The four parameters of a ``workload: custom`` length distribution (log-normal prompt and
#: output lengths); their defaults are the conversation-like preset's.
CUSTOM_SHAPE = ("prompt_median_tokens", "prompt_sigma", "output_median_tokens", "output_sigma")

#: The default scenario: the default value of every shared notebook parameter, grouped by the
#: notebooks that use it. Read-only; ``dict(SCENARIO_DEFAULTS)`` gives a copy to change.
SCENARIO_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        # 01-04: the one-step scenario
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "budget_tokens": 2048,
        "budgets": [256, 512, 1024, 2048, 4096, 8192],
        "num_decodes": 100,
        "prompt_tokens": 5000,
        "target_step_ms": 40.0,
        "token_marks": [512, 2048, 8192],
        "max_tokens": 10_000,
        "zoom_tokens": 1000,
        "flat_within_fraction": 0.1,
        "decoder_counts": [60, 400],
        "small_budget_tokens": 512,
        "big_budget_tokens": 8192,
        # 01: GEMM tiles, tensor parallelism, mixture of experts
        "tile_tokens": 128,
        "tile_zoom_tokens": 1024,
        "tp_model": "llama-3.1-70b",
        "tp_degrees": [1, 2, 4, 8],
        "moe_model": "mixtral-8x7b",
        "moe_tp": 2,
        "moe_token_marks": [1, 2, 8, 64, 512, 4096],
        # 03, 04: the calibrated curve
        "decode_context_tokens": 1000,
        # 05: max_num_seqs and KV memory on a simulated workload
        "max_num_seqs": 256,
        "low_max_num_seqs": 16,
        "small_kv_tokens": 16000,
        "long_prefill_token_threshold": 512,
        "num_requests": 300,
        "rate_per_s": 12.0,
        "seed": 0,  # the random seed of the workload (05) and of the hold-out split (06)
        "gpu_memory_utilization": 0.9,
        # 06: calibration
        "measurements_path": "",
        "measured_hardware": "h100-sxm",
        "measured_model": "llama-2-7b",
        "measured_attention": False,
        "holdout_fraction": 0.25,
        # 07, 08: load sweeps, capacity and the tuner
        "cost_model": "typical",  # the real-engine step cost (CalibratedCost.typical); "ideal" is the seeds'
        "trace_path": "",
        "workload": "conversation-like",
        # the custom shape starts at the conversation-like preset, so only a change counts
        "prompt_median_tokens": float(CONVERSATION_PROMPT.median_tokens),
        "prompt_sigma": float(CONVERSATION_PROMPT.sigma),
        "output_median_tokens": float(CONVERSATION_OUTPUT.median_tokens),
        "output_sigma": float(CONVERSATION_OUTPUT.sigma),
        "num_requests_per_load": 600,
        "sweep_budgets": [512, 2048, 8192],
        "num_loads": 5,
        "max_load_fraction": 1.1,
        "ttft_p90_ms": 800.0,
        "itl_p99_ms": 40.0,
        "capacity_tolerance_fraction": 0.05,
        "frontier_rate_per_s": 0.0,
        # A subset of the tuner's own grid (budgetlab.experiments.tune.BUDGET_FACTORS and
        # CAP_FACTORS: 5 x 4 = 20 candidates), so notebook 08 simulates 4 x 3 = 12 candidates
        # and renders in seconds; pass tune's factors with papermill -y to search the full grid.
        "budget_factors": [0.5, 0.75, 1.0, 1.125],
        "cap_factors": [0.25, 1.0, 1.5],
        # 09: prefix caching and async scheduling on multi-turn conversations
        "num_conversations": 150,
        "caching_budgets": [256, 512, 2048, 8192],
        "conversation_rate_per_s": 2.0,
        "max_turns": 8,
        "message_median_tokens": 300.0,
        "think_time_s": 20.0,
        "slot_bound_max_num_seqs": 8,
        "pressure_kv_tokens": [16000, 32000, 64000],
        # every notebook: where the renderer saves the key numbers ("": nowhere)
        "results_path": "",
    }
)


def slo_from_parameters(params: Parameters) -> SLO:
    """The :class:`~budgetlab.experiments.slo.SLO` a notebook's limits describe.

    Every validated parameter named after an SLO metric in milliseconds (``ttft_p90_ms``,
    ``itl_p99_ms``, ...; see :data:`budgetlab.experiments.slo.SLO_METRICS`) becomes that limit in seconds.

    Raises
    ------
    ParameterError
        When the notebook validated no such parameter.
    """
    limits = {}
    for metric in SLO_METRICS:
        name = metric.removesuffix("_s") + "_ms"
        if name in params.values:
            limits[metric] = params.values[name] / 1e3
    if not limits:
        raise ParameterError("no SLO limit among the validated parameters; validate e.g. ttft_p90_ms and itl_p99_ms")
    return SLO(**limits)


def workload_from_parameters(params: Parameters) -> SyntheticWorkload | TraceWorkload:
    """The sweep workload a notebook's parameters describe (see :mod:`budgetlab.workload`).

    * ``trace_path`` set: that trace (:meth:`~budgetlab.workload.traces.TraceWorkload.from_csv`), its first
      ``num_requests_per_load`` requests, replayed at any load by time scaling.
    * Otherwise ``workload``: ``conversation-like`` or ``code-like``
      (:meth:`~budgetlab.workload.synthetic.SyntheticWorkload.conversation_like`, ``code_like``), or
      ``custom``: log-normal prompt and output lengths with the given medians and sigmas,
      clipped at :data:`CUSTOM_MAX_PROMPT_TOKENS` and :data:`CUSTOM_MAX_OUTPUT_TOKENS`; Poisson
      arrivals, ``num_requests_per_load`` requests per simulation.

    Its fixed-length twin (the same arrivals, every length at the mean) is
    ``workload.with_fixed_lengths(seed=params.seed)``; see
    :meth:`~budgetlab.workload.synthetic.SyntheticWorkload.with_fixed_lengths`.

    Parameters
    ----------
    params : Parameters
        Validated; reads ``trace_path``, ``workload``, the four shape parameters and
        ``num_requests_per_load`` where present (:data:`SCENARIO_DEFAULTS` otherwise).
    """
    values = {**SCENARIO_DEFAULTS, **params.values}
    num = values["num_requests_per_load"]
    if values["trace_path"]:
        return TraceWorkload.from_csv(values["trace_path"], max_requests=num)
    if values["workload"] == "code-like":
        return SyntheticWorkload.code_like(num_requests=num)
    if values["workload"] == "custom":
        prompt = LogNormal(
            median_tokens=values["prompt_median_tokens"],
            sigma=values["prompt_sigma"],
            max_tokens=CUSTOM_MAX_PROMPT_TOKENS,
        )
        output = LogNormal(
            median_tokens=values["output_median_tokens"],
            sigma=values["output_sigma"],
            max_tokens=CUSTOM_MAX_OUTPUT_TOKENS,
        )
        label = f"custom (prompt median {prompt.median_tokens:,.0f}, output median {output.median_tokens:,.0f})"
        return SyntheticWorkload(prompt=prompt, output=output, num_requests=num, label=label)
    return SyntheticWorkload.conversation_like(num_requests=num)


def conversations_from_parameters(params: Parameters) -> list[Request]:
    """The multi-turn conversations notebook 09 simulates (:func:`~budgetlab.workload.multi_turn_workload`).

    ``num_conversations`` conversations start by a Poisson process of ``conversation_rate_per_s``;
    each has a number of turns drawn uniformly from 1 to ``max_turns``; every turn sends the
    conversation so far plus a new message (log-normal, median ``message_median_tokens``, sigma
    :data:`MESSAGE_SIGMA`, at most :data:`MESSAGE_MAX_TOKENS`) and gets an answer with the
    Splitwise conversation output lengths (:data:`~budgetlab.workload.CONVERSATION_OUTPUT`); the
    next turn arrives a think time (exponential, mean ``think_time_s``) after it. Turns that
    would pass :data:`~budgetlab.workload.DEFAULT_MAX_MODEL_LEN_TOKENS` end their conversation.

    Parameters
    ----------
    params : Parameters
        Validated; reads those five and ``seed`` (:data:`SCENARIO_DEFAULTS` where absent).
    """
    values = {**SCENARIO_DEFAULTS, **params.values}
    return multi_turn_workload(
        num_conversations=values["num_conversations"],
        conversation_rate_per_s=values["conversation_rate_per_s"],
        turns=Uniform(low_tokens=1, high_tokens=values["max_turns"]),
        message=LogNormal(
            median_tokens=values["message_median_tokens"], sigma=MESSAGE_SIGMA, max_tokens=MESSAGE_MAX_TOKENS
        ),
        output=CONVERSATION_OUTPUT,
        think_time_s=values["think_time_s"],
        seed=values["seed"],
    )
