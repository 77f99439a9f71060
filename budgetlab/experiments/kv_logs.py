"""The memory model against real vLLM start-ups: predicted KV pools next to what vLLM logged.

``vllm_kv_logs.csv`` (in the developers' real-engine data, ``../shared/data/real/`` or
``$BUDGETLAB_REAL_DATA``, :func:`~budgetlab.experiments.published.real_data_dir`; never shipped;
its README gives every source) holds one row per vLLM server start: the command line and what
the profiler printed (weights, non-torch memory, activation peak, memory left for KV, "GPU KV
cache size"). This module maps each row onto budgetlab's specs, predicts the same numbers with
:func:`budgetlab.memory.kv_capacity`, and says why a row cannot be compared when it cannot.

A row is compared when all of these hold:

* it is a vLLM |version| start-up (the version :mod:`budgetlab.memory.profile` follows) that
  succeeded and printed a KV cache size;
* its GPU is a catalog GPU with a CUDA-reported memory (:data:`GPU_NAMES`);
* its checkpoint is a catalog model, a quantized checkpoint of one, or a fine-tune with the
  same architecture (:data:`CHECKPOINTS`), sliding-window (Gemma 3, GPT-OSS), chunked-local
  (Llama 4) and MLA (DeepSeek-V2-Lite) models included once their catalog rows exist; every
  other row is skipped with what vLLM does there that budgetlab does not (:data:`NOT_EXPRESSIBLE`:
  a vision encoder budgetlab does not describe, an MLP the activation formula does not cover);
* a multimodal checkpoint (Gemma 3 ``-it``, Llama 4 Scout Instruct) is compared with what vLLM
  loads beside the catalog's text model (:data:`SERVED`): its vision encoder (weights, and the
  profile run's dummy images) and its rotary tables as the served ``config.json`` sizes them;
* (pipeline-parallel rows are compared too: their logged weights and activation peak are the
  first stage's, while the pool is the smallest stage's; ``stage`` says which one budgetlab's
  terms describe).

Unlogged ``max_num_batched_tokens`` / ``max_num_seqs`` are vLLM 0.19's ``vllm serve`` defaults
(:meth:`EngineConfig.vllm_defaults <budgetlab.specs.EngineConfig.vllm_defaults>`: 8,192 and 1,024
on an H100, which the other start-ups of the same source logged).

The check the tests assert (issue 11): predicted "GPU KV cache size" within 2 % of the logged one
where the logged pool holds at least 10 GiB, within 8 % where it is tight; the same for "Maximum
concurrency" where it was logged (issue 23). A start-up that failed *after* sizing its pool
(GPT-OSS 20B's sampler warm-up running out of memory) logged both and is compared.

The pool alone (:func:`check_kv_pools_from_logged_memory`): a row the whole profile cannot be
compared on (another vLLM version's profiler, a vision tower outside the catalog) that logged
its KV memory and a pool size is compared on the pool vLLM cuts from that memory, which does not
depend on the profiler: the same floor of memory over block bytes in V0, V1 0.8–0.18 and 0.19
for full attention (V0 logs "# GPU blocks" and a concurrency of ``blocks × block_size /
max_model_len``; V1 "GPU KV cache size" ``blocks × block_size`` and ``blocks / ceil(max_model_len
/ block_size)``; 0.19 groups a layout as :func:`~budgetlab.memory.plan_kv_pool` does). The logged
memory is printed to 0.01 GiB, so a prediction from it is uncertain by up to 0.005 GiB plus one
block (``rounding_fraction``: 0.01–0.24 % here); the tolerances are the same 2 % / 8 %. Every
other row is skipped with what vLLM did there that budgetlab does not, or what the row lacks.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from budgetlab.catalog import hardware, model
from budgetlab.errors import UnknownNameError
from budgetlab.experiments.published import read_published_csv, real_data_path
from budgetlab.formats import KV_CACHE_DTYPES, QUANTIZATIONS
from budgetlab.hf_families import vision_encoder
from budgetlab.memory import (
    PROFILER_VERSION,
    ActivationFit,
    GiB,
    ceil_blocks,
    engine_kv_bytes_per_token,
    fit_activation_coefficients,
    kv_capacity,
    plan_kv_pool,
)
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec

__all__ = [
    "CHECKPOINTS",
    "NOT_EXPRESSIBLE",
    "SERVED",
    "GPU_NAMES",
    "ROOMY_POOL_BYTES",
    "ROOMY_TOLERANCE",
    "TIGHT_TOLERANCE",
    "KVLogCheck",
    "KVPoolCheck",
    "POOL_CHECKPOINTS",
    "ROW_REASONS",
    "NOT_POOL_LAYOUT",
    "KV_LOG_ROUNDING_BYTES",
    "check_kv_pools_from_logged_memory",
    "read_kv_logs",
    "check_kv_logs",
    "activation_fit_from_logs",
    "default_logs_path",
]

__doc__ = (__doc__ or "").replace("|version|", PROFILER_VERSION)

CHECKPOINTS: dict[str, tuple[str, str | None]] = {
    "codellama/codellama-7b-hf": ("codellama-7b", None),
    "google/gemma-2-2b-it": ("gemma-2-2b", None),
    "google/gemma-2-9b-it": ("gemma-2-9b", None),
    "google/gemma-2-27b-it": ("gemma-2-27b", None),
    "google/gemma-7b": ("gemma-7b", None),
    "ibm-granite/granite-3.1-2b-instruct": ("granite-3.1-2b", None),
    "ibm-granite/granite-3.1-8b-instruct": ("granite-3.1-8b", None),
    "meta-llama/llama-3.1-8b-instruct": ("llama-3.1-8b", None),
    "redhatai/meta-llama-3.1-8b-instruct-quantized.w8a8": ("llama-3.1-8b", "int8"),
    "redhatai/meta-llama-3.1-8b-instruct-quantized.w4a16": ("llama-3.1-8b", "int4"),
    "redhatai/llama-3.3-70b-instruct-fp8-dynamic": ("llama-3.3-70b", "fp8"),
    "redhatai/llama-3.3-70b-instruct-quantized.w8a8": ("llama-3.3-70b", "int8"),
    "microsoft/phi-4": ("phi-4", None),
    "mistralai/mixtral-8x7b-instruct-v0.1": ("mixtral-8x7b", None),
    "qwen/qwen2.5-72b-instruct": ("qwen2.5-72b", None),
    "moonshotai/kimi-dev-72b": ("qwen2.5-72b", None),
    "google/gemma-3-4b-it": ("gemma-3-4b", None),
    "google/gemma-3-12b-it": ("gemma-3-12b", None),
    "google/gemma-3-27b-it": ("gemma-3-27b", None),
    "openai/gpt-oss-20b": ("gpt-oss-20b", "mxfp4"),
    "deepseek-ai/deepseek-v2-lite-chat": ("deepseek-v2-lite", None),
    "meta-llama/llama-4-scout-17b-16e-instruct": ("llama-4-scout", None),
    "redhatai/qwen2.5-7b-instruct-fp8-dynamic": ("qwen2.5-7b", "fp8"),
    "redhatai/qwen2.5-7b-instruct-quantized.w8a8": ("qwen2.5-7b", "int8"),
    "qwen/qwen3-8b": ("qwen3-8b", None),
    "qwen/qwen3-14b": ("qwen3-14b", None),
    "qwen/qwen3-30b-a3b": ("qwen3-30b-a3b", None),
}
"""Hugging Face checkpoint (lower case) → (catalog model, ``quantization``). Kimi-Dev-72B is a
fine-tune of Qwen2.5-72B (same ``config.json`` dimensions); the RedHatAI checkpoints are
quantizations of the catalog models they name. A row whose ``quantization`` column says
``fp8`` (vLLM's online quantization) gets ``"fp8"`` whatever the checkpoint."""

_GEMMA3_SIGLIP: Mapping[str, object] = {
    "model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
    "num_hidden_layers": 27, "patch_size": 14, "image_size": 896, "num_channels": 3,
}  # fmt: skip
_LLAMA4_SCOUT_VISION: Mapping[str, object] = {
    "model_type": "llama4_vision_model", "hidden_size": 1408, "intermediate_size": 4 * 1408, "num_hidden_layers": 34,
    "patch_size": 14, "image_size": 336, "num_channels": 3, "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096,
    "projector_output_dim": 4096, "vision_output_dim": 4096, "multi_modal_projector_bias": False,
}  # fmt: skip

SERVED: dict[str, tuple[Mapping[str, object], int]] = {
    "google/gemma-3-4b-it": (_GEMMA3_SIGLIP, 131_072 * (8 + 1)),
    "google/gemma-3-12b-it": (_GEMMA3_SIGLIP, 131_072 * (8 + 1)),
    "google/gemma-3-27b-it": (_GEMMA3_SIGLIP, 131_072 * (8 + 1)),
    "meta-llama/llama-4-scout-17b-16e-instruct": (_LLAMA4_SCOUT_VISION, 10_485_760),
}
"""Checkpoint (lower case) → (its ``vision_config``, :attr:`~budgetlab.specs.ModelSpec.rope_table_rows`):
what vLLM 0.19 loads beside the catalog row's text model. The vision configs are the checkpoints'
(Gemma 3: SigLIP, as in ``tests/fixtures/hf_configs/gemma-3-*.json``; Scout: the checkpoint's
``llama4_vision_model`` block), read by :func:`budgetlab.hf_families.vision_encoder`. The rotary
rows follow the served ``text_config``: Gemma 3 ``-it`` has ``max_position_embeddings`` 131,072
with a global table scaled linearly ×8 and an unscaled local one; Scout Instruct 10,485,760
positions (llama3 scaling, one table; the catalog row has the base checkpoint's 131,072)."""

NOT_EXPRESSIBLE: dict[str, str] = {
    "ibm-granite/granite-vision-3.3-2b": "multimodal: its SigLIP vision encoder and LLaVA-NeXT projector "
    "(weights and vLLM's encoder profiling pass) are not described by the catalog",
    "moonshotai/kimi-vl-a3b-instruct": "multimodal: its MoonViT vision encoder (weights and vLLM's encoder "
    "profiling pass) is not described by the catalog (its MLA text pool is)",
    "mistralai/mistral-small-3.1-24b-instruct-2503": "multimodal: its Pixtral vision encoder (about 0.4 B "
    "parameters and vLLM's encoder profiling pass) is not in the catalog's Mistral Small 24B row",
    "redhatai/mistral-small-3.1-24b-instruct-2503-quantized.w8a8": "multimodal: its Pixtral vision encoder "
    "(kept in 16 bits, and vLLM's encoder profiling pass) is not in the catalog's Mistral Small 24B row",
    "microsoft/phi-2": "not a catalog model: Phi-2's parallel attention/MLP block with a non-gated GELU MLP "
    "is outside the activation-peak formula vLLM's profile was fitted with",
    "qwen/qwen1.5-moe-a2.7b": "not a catalog model: Qwen1.5-MoE's 60 routed experts plus a 4-expert shared "
    "MLP per layer (the catalog has no shared-expert MoE)",
    "ibm-granite/granite-3.3-8b-instruct": "not a catalog model: Granite 3.3 8B (vocabulary 49,159, not "
    "Granite 3.1's 49,155) has no catalog row",
}
"""Checkpoint (lower case) → what vLLM does at its start-up that budgetlab does not describe."""

GPU_NAMES: dict[str, str] = {"H100-80GB": "h100-sxm"}
"""Start of the logs' ``gpu`` cell → catalog GPU (the llm-d-planner runs are on H100 SXM 80GB)."""

ROOMY_POOL_BYTES = 10 * GiB
"""Pools at least this large must be predicted within :data:`ROOMY_TOLERANCE` [B]."""
ROOMY_TOLERANCE = 0.02
"""Largest relative KV-token error allowed for a pool of ≥ 10 GiB [-]."""
TIGHT_TOLERANCE = 0.08
"""Largest relative KV-token error allowed for a tight pool (< 10 GiB) [-]."""


_NEEDED = (
    "row_id", "vllm_version", "gpu", "tp", "pp", "model", "quantization", "kv_cache_dtype",
    "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "status", "weights_gib",
    "non_torch_gib", "activation_peak_gib", "available_kv_gib", "kv_cache_tokens",
)  # fmt: skip


def default_logs_path() -> Path | None:
    """``vllm_kv_logs.csv`` in the developers' real-engine data, if present
    (:func:`~budgetlab.experiments.published.real_data_path`)."""
    return real_data_path("vllm_kv_logs.csv")


def read_kv_logs(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read ``vllm_kv_logs.csv`` as published (no value changed).

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    DataFormatError
        A needed column is missing (the message names it).
    """
    return read_published_csv(path, _NEEDED)


@dataclass(frozen=True)
class KVLogCheck:
    """Predicted against logged, row by row.

    Attributes
    ----------
    compared : pandas.DataFrame
        One row per comparable start-up: ``row_id``, ``checkpoint``, ``model``, ``gpu``, ``tp``,
        ``quantization``, ``kv_cache_dtype``, ``gpu_memory_utilization``,
        ``max_num_batched_tokens``, ``max_num_seqs``; logged and predicted ``weights_gib``,
        ``non_torch_gib``, ``activation_peak_gib``, ``available_kv_gib`` (``*_logged`` and
        ``*_predicted``; logged values exactly as published, blank where not published),
        ``kv_tokens_logged``, ``kv_tokens_predicted``, ``kv_tokens_error_fraction``
        (predicted / logged − 1), ``max_concurrency_logged``, ``max_concurrency_predicted``,
        ``max_concurrency_error_fraction`` (NaN where not logged), ``kv_groups`` (KV-cache groups
        of the pool), ``tight`` (logged pool < 10 GiB), ``tolerance`` and ``within``.
    skipped : pandas.DataFrame
        ``row_id``, ``checkpoint``, ``reason``: every other row, and why.
    """

    compared: pd.DataFrame
    skipped: pd.DataFrame

    @property
    def all_within(self) -> bool:
        """Whether every compared row is within its tolerance."""
        return bool(self.compared["within"].all())


def _float(value: object) -> float:
    try:
        return float(str(value))
    except ValueError:
        return float("nan")


def _quantization(row: pd.Series, default: str | None) -> str | None:
    return "fp8" if str(row["quantization"]).strip().lower() == "fp8" else default


def _specs(row: pd.Series) -> tuple[HardwareSpec, ModelSpec, EngineConfig] | str:
    """The specs of one log row, or the reason it cannot be compared."""
    version = str(row["vllm_version"])
    if not version.startswith(PROFILER_VERSION):
        return _profile_difference(row)
    status = str(row["status"])
    if not (status == "ok" or status.startswith("failed_after_kv_sizing")) or pd.isna(row["kv_cache_tokens"]):
        return "no KV cache size logged (failed start or not published)"
    gpu = next((slug for start, slug in GPU_NAMES.items() if str(row["gpu"]).startswith(start)), None)
    if gpu is None:
        return f"GPU {row['gpu']!r} has no catalog row with a CUDA-reported memory"
    checkpoint = str(row["model"]).strip().lower()
    if checkpoint in NOT_EXPRESSIBLE:
        return f"checkpoint not expressible by the catalog ({NOT_EXPRESSIBLE[checkpoint]})"
    if checkpoint not in CHECKPOINTS:
        return "checkpoint not expressible by the catalog (not a catalog model)"
    slug, quantization = CHECKPOINTS[checkpoint]
    try:
        spec = model(slug)
    except UnknownNameError:
        return f"checkpoint not expressible by the catalog (no catalog row {slug!r} yet)"
    if checkpoint in SERVED:
        vision, rope_rows = SERVED[checkpoint]
        config = {"vision_config": vision, "text_config": {"hidden_size": spec.hidden_size}}
        spec = dataclasses.replace(spec, vision=vision_encoder(config, checkpoint), rope_table_rows=rope_rows)
    if quantization is not None and quantization not in QUANTIZATIONS:
        return f"checkpoint not expressible by the catalog ({quantization} weights are not a budgetlab quantization)"
    limits = {
        name: int(_float(row[name]))
        for name in ("max_num_batched_tokens", "max_num_seqs")
        if not pd.isna(_float(row[name]))
    }
    kv_dtype = str(row["kv_cache_dtype"]) if not pd.isna(row["kv_cache_dtype"]) else "auto"
    max_model_len = _float(row["max_model_len"]) if "max_model_len" in row.index else float("nan")
    if not pd.isna(max_model_len):
        limits["max_model_len"] = int(max_model_len)
    prefix = str(row.get("enable_prefix_caching", "")).strip().lower()
    if prefix in ("true", "false"):
        limits["enable_prefix_caching"] = prefix == "true"
    gpu_spec = hardware(gpu)
    engine = EngineConfig.vllm_defaults(
        gpu_spec,
        **limits,
        gpu_memory_utilization=_float(row["gpu_memory_utilization"]),
        tensor_parallel_size=int(_float(row["tp"])),
        pipeline_parallel_size=int(_float(row["pp"])),
        kv_cache_dtype=kv_dtype,
        quantization=_quantization(row, quantization),
    )
    return gpu_spec, spec, engine


def check_kv_logs(logs: pd.DataFrame | str | os.PathLike[str]) -> KVLogCheck:
    """Predict every comparable start-up of ``vllm_kv_logs.csv`` (module docstring).

    Parameters
    ----------
    logs : pandas.DataFrame or path
        The logs as :func:`read_kv_logs` returns them, or the file's path.
    """
    frame = logs if isinstance(logs, pd.DataFrame) else read_kv_logs(logs)
    compared, skipped = [], []
    for _, row in frame.iterrows():
        specs = _specs(row)
        if isinstance(specs, str):
            skipped.append({"row_id": row["row_id"], "checkpoint": row["model"], "reason": specs})
            continue
        gpu, mdl, engine = specs
        cap = kv_capacity(gpu, mdl, engine)
        logged_tokens = int(row["kv_cache_tokens"])
        logged_kv = _float(row["available_kv_gib"])
        tight = logged_kv * GiB < ROOMY_POOL_BYTES
        tolerance = TIGHT_TOLERANCE if tight else ROOMY_TOLERANCE
        error = cap.vllm_kv_cache_tokens / logged_tokens - 1.0
        logged_concurrency = _float(row["max_concurrency"]) if "max_concurrency" in row.index else float("nan")
        predicted_concurrency = cap.max_concurrency if cap.max_concurrency is not None else float("nan")
        concurrency_error = predicted_concurrency / logged_concurrency - 1.0
        within = abs(error) <= tolerance and not abs(concurrency_error) > tolerance  # nan: not logged
        compared.append(
            {
                "row_id": row["row_id"],
                "checkpoint": row["model"],
                "model": mdl.slug,
                "gpu": gpu.slug,
                "tp": engine.tensor_parallel_size,
                "pp": engine.pipeline_parallel_size,
                "stage": cap.stage,
                "quantization": engine.quantization,
                "kv_cache_dtype": engine.kv_cache_dtype,
                "gpu_memory_utilization": engine.gpu_memory_utilization,
                "max_num_batched_tokens": engine.max_num_batched_tokens,
                "max_num_seqs": engine.max_num_seqs,
                "weights_gib_logged": _float(row["weights_gib"]),
                "weights_gib_predicted": cap.weight_bytes / GiB,
                "non_torch_gib_logged": _float(row["non_torch_gib"]),
                "non_torch_gib_predicted": cap.non_torch_bytes / GiB,
                "activation_peak_gib_logged": _float(row["activation_peak_gib"]),
                "activation_peak_gib_predicted": cap.activation_bytes / GiB,
                "available_kv_gib_logged": logged_kv,
                "available_kv_gib_predicted": cap.kv_bytes / GiB,
                "kv_tokens_logged": logged_tokens,
                "kv_tokens_predicted": cap.vllm_kv_cache_tokens,
                "kv_tokens_error_fraction": error,
                "max_concurrency_logged": logged_concurrency,
                "max_concurrency_predicted": predicted_concurrency,
                "max_concurrency_error_fraction": concurrency_error,
                "kv_groups": len(cap.kv_groups),
                "tight": bool(tight),
                "tolerance": tolerance,
                "within": bool(within),
            }
        )
    return KVLogCheck(
        compared=pd.DataFrame(compared), skipped=pd.DataFrame(skipped, columns=["row_id", "checkpoint", "reason"])
    )


# --- the pool alone, from the KV memory a start-up logged (every vLLM version) ----------------

POOL_CHECKPOINTS: dict[str, tuple[str, str]] = {
    "ibm-granite/granite-3.3-8b-instruct": ("granite-3.1-8b", "Granite 3.1 8B's attention"),
    "ibm-granite/granite-vision-3.3-2b": ("granite-3.1-2b", "Granite 3.1 2B text model"),
    "mistralai/mistral-small-3.1-24b-instruct-2503": ("mistral-small-24b", "its text model, Pixtral beside"),
    "redhatai/mistral-small-3.1-24b-instruct-2503-quantized.w8a8": ("mistral-small-24b", "its text model, 16-bit KV"),
    "mistralai/mistral-small-3.2-24b-instruct-2506": ("mistral-small-24b", "its text model, Pixtral beside"),
    "moonshotai/kimi-vl-a3b-instruct": ("deepseek-v2-lite", "27 MLA layers of 512 + 64"),
    "meta-llama/meta-llama-3-8b": ("llama-3.1-8b", "Llama 3.1 8B's attention"),
    "qwen3-235b-a22b-fp8": ("qwen3-235b-a22b", "FP8 weights of Qwen3-235B-A22B, 16-bit KV"),
    "qwen2.5-32b-instruct": ("qwen2.5-32b", "the catalog's Qwen2.5-32B"),
    "qwen/qwen3-0.6b": ("qwen3-0.6b", "the catalog's Qwen3 0.6B"),
    "qwen/qwen3-32b": ("qwen3-32b", "the catalog's Qwen3 32B"),
    "qwen3-8b": ("qwen3-8b", "the catalog's Qwen3 8B"),
    "deepseek-ai/deepseek-r1-distill-qwen-14b": ("deepseek-r1-distill-qwen-14b", "the catalog's R1 distill"),
}  # fmt: skip
"""Checkpoint (lower case, a trailing "(…)" remark dropped) → (catalog row whose KV layout it has,
why), for the pool-only check; :data:`CHECKPOINTS` rows count too."""

ROW_REASONS: dict[int, str] = {
    93: "vLLM V0 keeps the smallest pool over the tensor-parallel workers (min of their num_gpu_blocks) "
    "and this row logs one worker's 8.69 GiB; its error text's 81,536 tokens are 7.46 GiB of this "
    "model's KV per GPU, so another worker had about 1.2 GiB less, a per-worker profile budgetlab does not model",
    97: "vLLM allocates KV for the EAGLE draft model's layer beside the target's in the same pool (a "
    "spec-decode thread; 51.63 GiB / 410,128 tokens = 135,170 B per token, 33 Llama layers' worth, "
    "not 32), which budgetlab does not describe",
}
"""Row → what vLLM did at that start-up that keeps its logged pool from the pool-only check."""

NOT_POOL_LAYOUT: dict[str, str] = {
    "meta-llama/llama-3.2-11b-vision": "mllama: vLLM V0 runs it as an encoder-decoder model whose 8 "
    "cross-attention layers cache the image tokens beside the 32 self-attention layers; no catalog row",
    "google/gemma-4-26b-a4b": "Gemma 4 26B-A4B has no catalog row (its sliding/global layer layout is not stated)",
    "deepseek-v4-flash": "DeepSeek V4's compressed attention and sparse indexer key cache have no budgetlab layout",
    "qwen2.5-vl-72b": "Qwen2.5-VL's vision tower is not in the catalog",
}
"""Checkpoint (as :data:`POOL_CHECKPOINTS` keys it) → what vLLM caches that budgetlab cannot state."""

KV_LOG_ROUNDING_BYTES = 0.005 * GiB
"""Half the 0.01 GiB to which vLLM prints "Available KV cache memory" [B]: the logged memory may
be off by this much, so a pool predicted from it by this much over the bytes of one block."""


def _checkpoint_key(value: object) -> str:
    return re.sub(r"\s*\(.*$", "", str(value)).strip().lower()


def _leading_int(value: object) -> int | None:
    match = re.match(r"\s*(\d+)", str(value))
    return int(match.group(1)) if match else None


def _version_family(row: pd.Series) -> str:
    """``"V0"``, ``"V1"`` (vLLM 0.8–0.18) or ``"0.19"``: whose pool arithmetic and log lines apply."""
    version, engine = str(row["vllm_version"]), str(row.get("engine", ""))
    if version.startswith(PROFILER_VERSION):
        return PROFILER_VERSION
    return "V0" if engine.startswith("V0") else "V1"


def _profile_difference(row: pd.Series) -> str:
    """What that version's start-up profile does that budgetlab's 0.19 profile does not."""
    version, engine = str(row["vllm_version"]), str(row.get("engine", ""))
    minor = re.match(r"\s*v?0\.(\d+)", version)
    if engine.startswith("V0"):
        early = re.search(r"2023|Apr 2024|v0\.[2-6]\.", version) is not None
        return "vLLM V0's profile: one dummy batch of max_num_seqs sequences sharing max_num_batched_tokens" + (
            " tokens, its peak PyTorch's alone (0.2.4) or all memory in use (PR #2031, 0.2.5), before the "
            "weights / non-torch / activation split of PR #10511"
            if early
            else " tokens, not 0.19's forward pass then sampler pass"
        )
    if minor and int(minor.group(1)) == 17:
        return (
            "vLLM 0.17 ran its CUDA-graph estimate outside the profiling window (non-torch memory 0.13 GiB "
            "on one GPU, 0.25 GiB from 0.18, PR #30515)"
        )
    if minor and 11 <= int(minor.group(1)) <= 16:
        return (
            f"vLLM 0.{minor.group(1)}'s sampler warm-up sorted the whole FP32 logits for top-k/top-p "
            "(before PR #33538, 0.17), a sampler pass about 2.5 times 0.19's"
        )
    return f"a vLLM V1 profile of another version ({version[:40]}) than the 0.19 one budgetlab follows"


def _pool_specs(row: pd.Series) -> tuple[ModelSpec, EngineConfig, str, str] | str:
    """The model, engine, version family and layout basis of a row for the pool-only check, or why not."""
    if row["row_id"] in ROW_REASONS:
        return ROW_REASONS[row["row_id"]]
    key = _checkpoint_key(row["model"])
    if key in NOT_POOL_LAYOUT or (key in NOT_EXPRESSIBLE and key not in POOL_CHECKPOINTS):
        return NOT_POOL_LAYOUT.get(key) or NOT_EXPRESSIBLE[key]
    status = str(row["status"])
    kv = _float(row["available_kv_gib"])
    if status.startswith("failed") and "max seq len" not in status and "after_kv_sizing" not in status:
        return f"failed start ({status[:60]}): no pool was built"
    if not kv > 0:
        return "no KV memory logged in the published excerpt, so there is no memory to size the pool from"
    if all(pd.isna(_float(row[c])) for c in ("kv_cache_tokens", "gpu_blocks", "max_concurrency")):
        return "no pool size logged (neither tokens, blocks nor concurrency) to compare the pool with"
    if key in POOL_CHECKPOINTS:
        slug, basis = POOL_CHECKPOINTS[key]
    elif key in CHECKPOINTS:
        slug, basis = CHECKPOINTS[key][0], "a catalog model"
    else:
        return f"no catalog row states the KV layout of {row['model']!r}"
    mdl = model(slug)
    family = _version_family(row)
    if mdl.attention is not None and family != PROFILER_VERSION:
        return f"its {mdl.attention.to_text()} pool follows vLLM {row['vllm_version']}'s grouping, not 0.19's"
    dtype = {"bf16": "bfloat16", "float16": "float16", "bfloat16": "bfloat16"}.get(str(row["dtype"]), "auto")
    kv_dtype = str(row["kv_cache_dtype"]) if str(row["kv_cache_dtype"]) in KV_CACHE_DTYPES else "auto"
    block = _leading_int(row["block_size"]) or 16  # vLLM's CUDA default in every version logged
    length = _leading_int(row["max_model_len"]) or _leading_int(row["max_concurrency_len"])
    engine = EngineConfig(
        block_size=block,
        max_model_len=length,
        max_num_batched_tokens=max(8192, length or 0),
        tensor_parallel_size=int(_float(row["tp"])),
        dtype=dtype,
        kv_cache_dtype=kv_dtype,
        enable_prefix_caching=False,
    )
    return mdl, engine, family, basis


def _pool_from_bytes(mdl: ModelSpec, engine: EngineConfig, kv_bytes: float, family: str) -> tuple[int, int, float]:
    """(``num_gpu_blocks``, logged tokens, logged concurrency) vLLM builds from ``kv_bytes``.

    Full attention, every version: ``floor(kv_bytes / (block_size × Σ layer bytes per token))``
    (V0 ``CacheEngine.get_cache_block_size``; V1 ``available_memory // page_size // num_layers``,
    the same floor); tokens ``blocks × block_size``. Concurrency: V0 ``blocks × block_size /
    max_model_len``; V1 ``blocks / ceil(max_model_len / block_size)``. A layout: vLLM 0.19's
    :func:`~budgetlab.memory.plan_kv_pool`.
    """
    if mdl.attention is not None:
        plan = plan_kv_pool(mdl, engine, kv_bytes)
        return plan.num_gpu_blocks, plan.vllm_kv_cache_tokens, plan.max_concurrency
    block, length = engine.block_size, engine.max_model_len or 0
    blocks = math.floor(kv_bytes / (engine_kv_bytes_per_token(mdl, engine) * block))
    if family == "V0":
        return blocks, blocks * block, blocks * block / length if length else float("nan")
    return blocks, blocks * block, blocks / ceil_blocks(length, block) if length else float("nan")


@dataclass(frozen=True)
class KVPoolCheck:
    """The pool predicted from the KV memory each start-up logged, row by row.

    Attributes
    ----------
    compared : pandas.DataFrame
        One row per start-up not compared by :func:`check_kv_logs` whose KV memory and pool size
        were logged and whose KV layout the catalog states: ``row_id``, ``checkpoint``, ``model``
        (the catalog row whose layout it has), ``basis``, ``version_rules`` (``V0``, ``V1``,
        ``0.19``), ``profile_not_compared`` (why the whole profile is not), ``tp``,
        ``block_size``, ``max_model_len``, ``available_kv_gib_logged``; ``blocks_*``,
        ``kv_tokens_*``, ``max_concurrency_*`` (``_logged`` as published, ``_predicted``,
        ``_error_fraction``; NaN where not logged); ``rounding_fraction`` (the relative
        uncertainty of the prediction from the 0.01 GiB rounding of the logged memory plus one
        block); ``tight``, ``tolerance``, ``within``.
    skipped : pandas.DataFrame
        ``row_id``, ``checkpoint``, ``reason``: the rows compared by neither check, and what vLLM
        does there that budgetlab does not (or what the row does not log).
    """

    compared: pd.DataFrame
    skipped: pd.DataFrame

    @property
    def all_within(self) -> bool:
        """Whether every compared row is within its tolerance."""
        return bool(self.compared["within"].all())


def check_kv_pools_from_logged_memory(logs: pd.DataFrame | str | os.PathLike[str]) -> KVPoolCheck:
    """Predict the pool of every start-up the whole-profile check skips, from its logged KV memory.

    The pool's arithmetic does not depend on the profiler: from ``available_kv_gib`` (printed
    to 0.01 GiB) vLLM cuts ``num_gpu_blocks`` blocks (:func:`_pool_from_bytes`: the same floor in
    V0, V1 0.8–0.18 and 0.19 for full attention; 0.19's groups for a layout), logs them as "# GPU
    blocks" (V0) or "GPU KV cache size: N tokens" (V1, ``blocks × block_size``), and the
    concurrency for ``max_model_len`` tokens. Tolerances as :func:`check_kv_logs`: 2 %, 8 % for a
    pool < 10 GiB; the rounding of the logged memory is at most ``rounding_fraction`` of it.

    Parameters
    ----------
    logs : pandas.DataFrame or path
        The logs as :func:`read_kv_logs` returns them, or the file's path.
    """
    frame = logs if isinstance(logs, pd.DataFrame) else read_kv_logs(logs)
    compared, skipped = [], []
    for _, row in frame.iterrows():
        whole = _specs(row)
        if not isinstance(whole, str):
            continue  # compared through the whole profile
        specs = _pool_specs(row)
        if isinstance(specs, str):
            reason = whole if specs in whole else f"{specs}; whole profile: {whole}"
            skipped.append({"row_id": row["row_id"], "checkpoint": row["model"], "reason": reason})
            continue
        mdl, engine, family, basis = specs
        kv = _float(row["available_kv_gib"])
        blocks, tokens, concurrency = _pool_from_bytes(mdl, engine, kv * GiB, family)
        tight = kv * GiB < ROOMY_POOL_BYTES
        tolerance = TIGHT_TOLERANCE if tight else ROOMY_TOLERANCE
        logged = {c: _float(row[c]) for c in ("gpu_blocks", "kv_cache_tokens", "max_concurrency")}
        errors = {
            "blocks": blocks / logged["gpu_blocks"] - 1.0,
            "kv_tokens": tokens / logged["kv_cache_tokens"] - 1.0,
            "max_concurrency": concurrency / logged["max_concurrency"] - 1.0,
        }
        compared.append(
            {
                "row_id": row["row_id"],
                "checkpoint": row["model"],
                "model": mdl.slug,
                "basis": basis,
                "version_rules": family,
                "profile_not_compared": whole,
                "tp": engine.tensor_parallel_size,
                "block_size": engine.block_size,
                "max_model_len": engine.max_model_len,
                "available_kv_gib_logged": kv,
                "blocks_logged": logged["gpu_blocks"],
                "blocks_predicted": blocks,
                "blocks_error_fraction": errors["blocks"],
                "kv_tokens_logged": logged["kv_cache_tokens"],
                "kv_tokens_predicted": tokens,
                "kv_tokens_error_fraction": errors["kv_tokens"],
                "max_concurrency_logged": logged["max_concurrency"],
                "max_concurrency_predicted": concurrency,
                "max_concurrency_error_fraction": errors["max_concurrency"],
                "rounding_fraction": KV_LOG_ROUNDING_BYTES / (kv * GiB) + 1.0 / blocks,
                "within_rounding": not any(
                    abs(errors[k]) > KV_LOG_ROUNDING_BYTES / (kv * GiB) + 1.0 / blocks for k in ("blocks", "kv_tokens")
                ),
                "tight": bool(tight),
                "tolerance": tolerance,
                "within": not any(abs(e) > tolerance for e in errors.values()),  # nan: not logged
            }
        )
    return KVPoolCheck(
        compared=pd.DataFrame(compared), skipped=pd.DataFrame(skipped, columns=["row_id", "checkpoint", "reason"])
    )


def activation_fit_from_logs(logs: pd.DataFrame | str | os.PathLike[str]) -> tuple[ActivationFit, pd.DataFrame]:
    """Refit the activation-peak formula to every compared row without pipeline parallelism that
    logged its peak.

    Returns
    -------
    (ActivationFit, pandas.DataFrame)
        The fit, and one row per observation: ``row_id``, ``model``, ``tp``,
        ``activation_peak_gib_logged``, ``activation_peak_gib_fitted``, ``residual_gib``,
        ``binding_pass`` and ``used_in_fit``.
    """
    frame = logs if isinstance(logs, pd.DataFrame) else read_kv_logs(logs)
    observations, ids = [], []
    for _, row in frame.iterrows():
        specs = _specs(row)
        peak = _float(row["activation_peak_gib"])
        if isinstance(specs, str) or np.isnan(peak) or specs[2].pipeline_parallel_size > 1:
            continue  # a pipeline row logs its first stage, which runs no sampler
        _, mdl, engine = specs
        observations.append((mdl, engine, peak * GiB))
        ids.append(row["row_id"])
    fit = fit_activation_coefficients(observations)
    table = pd.DataFrame(
        {
            "row_id": ids,
            "model": [m.slug for m, _, _ in observations],
            "tp": [e.tensor_parallel_size for _, e, _ in observations],
            "activation_peak_gib_logged": fit.measured_bytes / GiB,
            "activation_peak_gib_fitted": fit.predicted_bytes / GiB,
            "residual_gib": fit.residual_bytes / GiB,
            "binding_pass": list(fit.binding_pass),
            "used_in_fit": fit.used_in_fit,
        }
    )
    return fit, table
