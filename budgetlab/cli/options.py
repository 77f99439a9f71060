"""The command line's shared options and what they resolve to: GPU, model, engine, cost,
workload, SLO.

Each ``add_*`` function adds one option group to a subcommand's parser; each ``*_from`` function
turns the parsed values into budgetlab objects. Defaults are vLLM's (``EngineConfig.vllm_defaults``
for the GPU) and the default scenario's (H100 SXM + Llama 3.1 8B, the typical cost).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budgetlab.catalog import hardware as catalog_hardware
from budgetlab.catalog import model as catalog_model
from budgetlab.cost.named import COST_NAMES
from budgetlab.errors import ParameterError
from budgetlab.experiments.slo import SLO, SLO_METRICS
from budgetlab.hf_config import model_from_hf_config
from budgetlab.specs import SCHEDULING_POLICIES, EngineConfig, HardwareSpec, ModelSpec
from budgetlab.speculative import SPECULATIVE_METHODS
from budgetlab.workload import SyntheticWorkload, TraceWorkload

__all__ = [
    "DEFAULT_GPU",
    "DEFAULT_MODEL",
    "DEFAULT_SLO_MS",
    "int_list",
    "float_list",
    "add_setting",
    "add_engine",
    "add_workload",
    "add_slo",
    "add_output",
    "Setting",
    "setting_from",
    "engine_changes",
    "engine_from",
    "synthetic_from",
    "trace_from",
    "slo_from",
]

DEFAULT_GPU = "h100-sxm"
DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_SLO_MS = {"ttft_p90_s": 800.0, "itl_p99_s": 40.0}
"""The SLO used when no limit is given: the default scenario's (``notebooks/params``) [ms]."""

WORKLOADS: dict[str, Callable[..., SyntheticWorkload]] = {
    "conversation": SyntheticWorkload.conversation_like,
    "code": SyntheticWorkload.code_like,
}


# --------------------------------------------------------------------------------------------
# Value parsers (argparse turns their ValueError into a usage error, exit status 2)
# --------------------------------------------------------------------------------------------


def _positive(kind: Callable[[str], Any], text: str) -> Any:
    value = kind(text)
    if not value > 0 or value != value:  # NaN fails both
        raise ValueError(text)
    return value


def positive_int(text: str) -> int:
    """An int > 0 from the command line."""
    return int(_positive(int, text))


def positive_float(text: str) -> float:
    """A finite float > 0 from the command line."""
    value = float(_positive(float, text))
    if value == float("inf"):
        raise ValueError(text)
    return value


def int_list(text: str) -> list[int]:
    """``512,2048,8192`` as ints > 0 (``_`` and spaces allowed inside numbers)."""
    values = [positive_int(part.strip()) for part in text.split(",") if part.strip()]
    if not values:
        raise ValueError(text)
    return values


def float_list(text: str) -> list[float]:
    """``2,4.5,8`` as finite floats > 0."""
    values = [positive_float(part.strip()) for part in text.split(",") if part.strip()]
    if not values:
        raise ValueError(text)
    return values


positive_int.__name__ = "positive int"  # argparse names the type in "invalid ... value"
positive_float.__name__ = "positive number"
int_list.__name__ = "comma-separated list of positive ints"
float_list.__name__ = "comma-separated list of positive numbers"


# --------------------------------------------------------------------------------------------
# Option groups
# --------------------------------------------------------------------------------------------


def add_setting(parser: argparse.ArgumentParser) -> None:
    """``--gpu``, ``--model`` and ``--cost``."""
    group = parser.add_argument_group("GPU, model and step cost")
    group.add_argument(
        "--gpu",
        default=DEFAULT_GPU,
        metavar="SLUG",
        help=f"GPU, a catalog slug (default {DEFAULT_GPU}); every slug: python -c 'import budgetlab as bl; "
        "print(bl.list_hardware())'",
    )
    group.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        metavar="NAME",
        help=f"model: a catalog slug (default {DEFAULT_MODEL}), a Hugging Face id the catalog lists, any "
        "case (meta-llama/Llama-3.1-8B-Instruct; budgetlab.catalog.hf_ids() lists them; nothing is "
        "downloaded), or the path of a config.json or of the folder holding it (read by "
        "budgetlab.model_from_hf_config)",
    )
    group.add_argument(
        "--cost",
        default="typical",
        choices=COST_NAMES,
        help="step-cost model every number is priced with: 'typical' (default; CalibratedCost.typical, fitted "
        "to published vLLM runs on H100) or 'ideal' (the seeds' idealized roofline, an upper bound on speed)",
    )


def add_engine(parser: argparse.ArgumentParser, *, grid: bool = False) -> None:
    """vLLM's engine options, defaults ``EngineConfig.vllm_defaults`` for the GPU.

    With ``grid`` (the sweep) the budget and cap take comma-separated lists (``--budgets``).
    """
    group = parser.add_argument_group(
        "engine (vLLM's option names)",
        "defaults: what `vllm serve` starts with on the GPU (EngineConfig.vllm_defaults):\n"
        "8192 tokens and 1024 sequences on an H100 or H200, 2048 and 256 on an A100 or L40S",
    )
    if grid:
        group.add_argument(
            "--budgets",
            type=int_list,
            default=[512, 2048, 8192],
            metavar="N,N,...",
            help="max_num_batched_tokens values to sweep [tokens] (default 512,2048,8192)",
        )
        group.add_argument(
            "--max-num-seqs",
            type=int_list,
            default=None,
            metavar="N,N,...",
            help="max_num_seqs values to sweep [sequences] (default: vLLM's for the GPU, at most the "
            "smallest budget); pairs with a budget below the cap are left out",
        )
    else:
        group.add_argument(
            "--max-num-batched-tokens",
            type=positive_int,
            metavar="N",
            help="token budget per step [tokens]",
        )
        group.add_argument("--max-num-seqs", type=positive_int, metavar="N", help="cap on running sequences")
    group.add_argument("--tensor-parallel-size", "-tp", type=positive_int, metavar="N", help="GPUs per replica")
    group.add_argument(
        "--gpu-memory-utilization", type=positive_float, metavar="F", help="share of GPU memory vLLM may use (0.9)"
    )
    group.add_argument("--block-size", type=positive_int, metavar="N", help="KV block size [tokens] (16)")
    group.add_argument("--max-model-len", type=positive_int, metavar="N", help="longest sequence [tokens]")
    group.add_argument(
        "--num-kv-blocks",
        type=positive_int,
        metavar="N",
        help="KV pool size [blocks] (default: derived from memory as vLLM 0.19 profiles it)",
    )
    group.add_argument(
        "--long-prefill-token-threshold", type=int, metavar="N", help="largest prompt chunk per step (0: off)"
    )
    group.add_argument("--scheduling-policy", choices=SCHEDULING_POLICIES, help="queue order (fcfs)")
    group.add_argument(
        "--no-prefix-caching",
        "--no-enable-prefix-caching",
        dest="enable_prefix_caching",
        action="store_false",
        default=None,
        help="turn off automatic prefix caching (vLLM: on)",
    )
    group.add_argument(
        "--no-async-scheduling",
        dest="async_scheduling",
        action="store_false",
        default=None,
        help="the synchronous scheduler loop (vLLM: async on)",
    )
    group.add_argument(
        "--num-speculative-tokens", type=int, metavar="K", help="speculative decoding: drafts per step (0: off)"
    )
    group.add_argument(
        "--speculative-method",
        choices=tuple(m for m in SPECULATIVE_METHODS if m != "draft_model"),
        help="speculative decoding's drafter (with --num-speculative-tokens; a draft model needs the Python "
        "API, which takes the draft model and its acceptance)",
    )
    group.add_argument("--dtype", metavar="DTYPE", help="weights and activations dtype (auto)")
    group.add_argument("--kv-cache-dtype", metavar="DTYPE", help="KV cache dtype (auto; e.g. fp8)")
    group.add_argument("--quantization", metavar="METHOD", help="weight quantization (e.g. fp8)")


def add_workload(parser: argparse.ArgumentParser, *, num_requests_help: str, rate_help: str) -> None:
    """``--trace`` or ``--workload``, with ``--num-requests``, ``--rate`` and ``--seed``."""
    group = parser.add_argument_group("workload: a trace file or a synthetic workload")
    source = group.add_mutually_exclusive_group()
    source.add_argument(
        "--trace",
        metavar="CSV",
        help="a trace CSV: Splitwise/Vidur columns (arrived_at, num_prefill_tokens, num_decode_tokens) or "
        "the Azure LLM inference trace's (TIMESTAMP, ContextTokens, GeneratedTokens)",
    )
    source.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        default="conversation",
        help="synthetic lengths when no --trace is given: 'conversation' (default) or 'code', Poisson arrivals",
    )
    group.add_argument("--num-requests", type=positive_int, metavar="N", help=num_requests_help)
    group.add_argument("--rate", type=positive_float, metavar="REQ_PER_S", help=rate_help)
    group.add_argument("--seed", type=int, default=0, help="workload seed (default 0; a trace ignores it)")


def add_slo(parser: argparse.ArgumentParser) -> None:
    """One ``--<metric>-ms`` option per SLO metric; none given: :data:`DEFAULT_SLO_MS`."""
    default = ", ".join(f"--{_slo_flag(m)} {v:g}" for m, v in DEFAULT_SLO_MS.items())
    group = parser.add_argument_group(f"latency SLO, in milliseconds (none given: {default})")
    for metric in SLO_METRICS:
        group.add_argument(
            f"--{_slo_flag(metric)}",
            dest=f"slo_{metric}",
            type=positive_float,
            metavar="MS",
            help=f"{metric.removesuffix('_s')} at most this [ms]",
        )


def _slo_flag(metric: str) -> str:
    return metric.removesuffix("_s").replace("_", "-") + "-ms"


def add_output(parser: argparse.ArgumentParser) -> None:
    """``--json`` and ``--progress``."""
    group = parser.add_argument_group("output")
    group.add_argument(
        "--json",
        metavar="PATH",
        help="also write the results and their inputs as JSON to PATH ('-': to stdout, the table then goes "
        "to stderr); no NaN or infinities: a missing value is null",
    )
    group.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress on stderr while simulating (default: when stderr is a terminal)",
    )


# --------------------------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """The GPU and model of a run, and what the user typed for the model."""

    hardware: HardwareSpec
    model: ModelSpec
    model_arg: str
    model_from: str  # "catalog", "hugging face id" or "config.json"


def _model_from(text: str) -> tuple[ModelSpec, str]:
    path = Path(text).expanduser()
    if path.is_file() or (path.is_dir() and (path / "config.json").is_file()) or text.lower().endswith(".json"):
        return model_from_hf_config(path), "config.json"
    spec = catalog_model(text)
    return spec, ("hugging face id" if "/" in text else "catalog")


def setting_from(args: argparse.Namespace) -> Setting:
    """The GPU and model the options name.

    Raises
    ------
    UnknownNameError
        A slug or Hugging Face id the catalog does not hold (close matches listed).
    ParameterError
        A config.json that cannot be read or describes no supported model.
    """
    model, source = _model_from(args.model)
    return Setting(catalog_hardware(args.gpu), model, args.model, source)


_ENGINE_FIELDS = (
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "block_size",
    "max_model_len",
    "num_kv_blocks",
    "long_prefill_token_threshold",
    "scheduling_policy",
    "enable_prefix_caching",
    "async_scheduling",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "num_speculative_tokens",
    "speculative_method",
)


def engine_changes(args: argparse.Namespace, *, knobs: bool = True) -> dict[str, object]:
    """The engine fields the options set (``knobs``: the budget and cap too)."""
    names = _ENGINE_FIELDS + (("max_num_batched_tokens", "max_num_seqs") if knobs else ())
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def engine_from(args: argparse.Namespace, hardware: HardwareSpec, *, knobs: bool = True) -> EngineConfig:
    """``EngineConfig.vllm_defaults(hardware)`` with the options' changes.

    Raises
    ------
    ConfigError
        A configuration vLLM refuses (a budget below the cap, ...).
    """
    return EngineConfig.vllm_defaults(hardware, **engine_changes(args, knobs=knobs))


def synthetic_from(args: argparse.Namespace, *, num_requests: int) -> SyntheticWorkload:
    """The synthetic workload ``--workload`` names, ``--num-requests`` (or ``num_requests``) long."""
    return WORKLOADS[args.workload](num_requests=args.num_requests or num_requests)


def trace_from(args: argparse.Namespace, *, num_requests: int | None) -> TraceWorkload:
    """The ``--trace`` file as a replayable workload, its first ``--num-requests`` (or
    ``num_requests``; ``None``: all) requests.

    Raises
    ------
    TraceFormatError
        A missing or malformed file (the message names the line and column).
    """
    return TraceWorkload.from_csv(args.trace, max_requests=args.num_requests or num_requests)


def slo_from(args: argparse.Namespace) -> tuple[SLO, bool]:
    """The SLO of the ``--*-ms`` options, or :data:`DEFAULT_SLO_MS`; and whether it is the default.

    Raises
    ------
    ParameterError
        A limit no SLO means (checked by :class:`SLO`).
    """
    given = {m: getattr(args, f"slo_{m}") for m in SLO_METRICS if getattr(args, f"slo_{m}", None) is not None}
    limits_ms = given or DEFAULT_SLO_MS
    try:
        return SLO(**{m: v / 1e3 for m, v in limits_ms.items()}), not given
    except TypeError as exc:  # pragma: no cover - SLO_METRICS are SLO's fields
        raise ParameterError(f"SLO: {exc}") from None
