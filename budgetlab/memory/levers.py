"""When the KV pool is tight: what memory, sharding or precision would buy, in tokens.

The first seed ends on a warning: "if cache utilization is pinned and prompts are long, no
scheduler setting creates capacity — that is a memory, sharding, or replica-count
conversation". This module puts numbers on it. :func:`is_tight` says when the weights (and the
rest of the start-up profile) leave the KV cache a small share of the GPU, and
:func:`memory_levers` prices each way out by re-running :func:`~budgetlab.memory.kv_capacity`
with one change at a time:

* the next tensor-parallel size that divides the attention heads (twice the GPUs, or more);
* an fp8 KV cache (``kv_cache_dtype="fp8"``: half the bytes per token of a 16-bit model);
* fp8 weights (``quantization="fp8"``), when the weights are 16-bit;
* a smaller token budget (half of it, not below ``max_num_seqs`` or 512 tokens): a smaller
  activation peak — the one *knob* here, and usually the smallest gain;
* ``gpu_memory_utilization`` 0.95, when it is below that.

More replicas do not enlarge a replica's pool; they divide the load, which
:func:`budgetlab.capacity` sizes.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from budgetlab.errors import DoesNotFitError
from budgetlab.memory.pool import KVCapacity, kv_capacity
from budgetlab.memory.sizes import valid_tp_sizes
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec

__all__ = ["TIGHT_KV_FRACTION", "is_tight", "memory_levers", "tight_memory_text"]

TIGHT_KV_FRACTION = 0.15
"""A pool holding less than this share of the usable memory is tight [-]: the weights fill the
GPU, and the KV gate will bind long before ``max_num_seqs`` does."""

_HIGH_UTILIZATION = 0.95
_SMALLEST_BUDGET_TOKENS = 512


def is_tight(capacity: KVCapacity) -> bool:
    """Whether the KV cache has less than :data:`TIGHT_KV_FRACTION` of the usable memory."""
    return capacity.kv_fraction < TIGHT_KV_FRACTION


def _changes(model: ModelSpec, engine: EngineConfig) -> list[tuple[str, dict[str, object]]]:
    tp = engine.tensor_parallel_size
    changes: list[tuple[str, dict[str, object]]] = []
    larger = [d for d in valid_tp_sizes(model, at_most=max(16, 2 * tp)) if d > tp]
    if larger:
        changes.append((f"tensor_parallel_size {tp} → {larger[0]}", {"tensor_parallel_size": larger[0]}))
    if engine.kv_cache_dtype not in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        changes.append(("fp8 KV cache", {"kv_cache_dtype": "fp8"}))
    if engine.quantization is None:
        changes.append(("fp8 weights", {"quantization": "fp8"}))
    smaller = max(engine.max_num_seqs, _SMALLEST_BUDGET_TOKENS, engine.max_num_batched_tokens // 2)
    if smaller < engine.max_num_batched_tokens:
        changes.append(
            (
                f"budget {engine.max_num_batched_tokens:,} → {smaller:,} tokens",
                {"max_num_batched_tokens": smaller},
            )
        )
    if engine.gpu_memory_utilization < _HIGH_UTILIZATION:
        changes.append(
            (
                f"gpu_memory_utilization {engine.gpu_memory_utilization:g} → {_HIGH_UTILIZATION:g}",
                {"gpu_memory_utilization": _HIGH_UTILIZATION},
            )
        )
    return changes


def memory_levers(hardware: HardwareSpec, model: ModelSpec, engine: EngineConfig) -> pd.DataFrame:
    """The KV pool as configured and with each lever of the module docstring, one at a time.

    Parameters
    ----------
    hardware, model : HardwareSpec, ModelSpec
    engine : EngineConfig
        The configuration as deployed (its ``num_kv_blocks`` is ignored: the pool is derived).

    Returns
    -------
    pandas.DataFrame
        One row per option, the configuration first: ``lever`` (words), ``gpus`` (per replica),
        ``kv_tokens`` (usable pool) and ``kv_tokens_gained`` [tokens], ``gain_fraction``
        (relative to the configuration) [-], ``kv_fraction`` (the pool's share of usable
        memory) [-] and ``is_knob`` (only the budget is a scheduler knob). A configuration that
        does not fit at all has ``kv_tokens`` 0.

    Raises
    ------
    ParameterError
        A ``tensor_parallel_size`` that does not divide the attention heads.
    """
    base_engine = dataclasses.replace(engine, num_kv_blocks=None)
    options: list[tuple[str, dict[str, object]]] = [("as configured", {}), *_changes(model, base_engine)]
    rows = []
    for lever, change in options:
        variant = dataclasses.replace(base_engine, **change)  # type: ignore[arg-type]
        try:
            cap = kv_capacity(hardware, model, variant)
            tokens, fraction = cap.num_tokens, cap.kv_fraction
        except DoesNotFitError:
            tokens, fraction = 0, 0.0
        rows.append(
            {
                "lever": lever,
                "gpus": variant.tensor_parallel_size,
                "kv_tokens": tokens,
                "kv_fraction": fraction,
                "is_knob": "max_num_batched_tokens" in change,
            }
        )
    frame = pd.DataFrame(rows)
    base = int(frame.kv_tokens.iloc[0])
    frame["kv_tokens_gained"] = frame.kv_tokens - base
    frame["gain_fraction"] = frame.kv_tokens_gained / base if base else float("inf")
    return frame[["lever", "gpus", "kv_tokens", "kv_tokens_gained", "gain_fraction", "kv_fraction", "is_knob"]]


def tight_memory_text(capacity: KVCapacity, levers: pd.DataFrame) -> str:
    """One paragraph for a tight pool: the warning, and what each lever buys (plain text)."""
    options = levers.iloc[1:]
    parts = [
        f"{row.lever} {'+' if row.kv_tokens_gained >= 0 else '−'}{abs(int(row.kv_tokens_gained)):,} tokens"
        for row in options.itertuples()
    ]
    return (
        f"Memory is tight: the KV pool holds {capacity.num_tokens:,} tokens, "
        f"{capacity.kv_fraction:.0%} of the usable memory, after {capacity.weight_bytes / 2**30:.1f} GiB of "
        "weights per GPU. The KV gate will bind before max_num_seqs does: the answer is memory, sharding "
        "or replicas, not a knob. One change at a time: " + "; ".join(parts) + "."
    )
