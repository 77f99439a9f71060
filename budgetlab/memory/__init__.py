"""GPU memory as vLLM 0.19 accounts for it: weights, KV bytes per token, the start-up profile, the pool.

Three modules, imported in this order:

* :mod:`budgetlab.memory.sizes`: bytes per weight and per KV token for a deployment (tensor
  parallelism, ``dtype``, ``kv_cache_dtype``, ``quantization``); shared with the cost model.
* :mod:`budgetlab.memory.profile`: what vLLM's start-up profiler subtracts besides the weights
  (non-torch memory, the activation peak fitted to real logs).
* :mod:`budgetlab.memory.kv_specs`: the pool of a model with sliding-window, chunked-local,
  MLA or Mamba layers as vLLM groups and logs it (:func:`plan_kv_pool`, :func:`kv_block_size`).
* :mod:`budgetlab.memory.pool`: :func:`kv_capacity` (every term, and the blocks left),
  :func:`num_kv_blocks`, :func:`kv_by_budget`.
* :mod:`budgetlab.memory.levers`: when the pool is tight, what sharding, precision or a smaller
  budget buys, in tokens (:func:`memory_levers`).
"""

from __future__ import annotations

from budgetlab.memory.kv_specs import (
    KVPoolPlan,
    hybrid_manager_enabled,
    kv_block_size,
    plan_kv_pool,
    scheduler_kv_groups,
)
from budgetlab.memory.levers import TIGHT_KV_FRACTION, is_tight, memory_levers, tight_memory_text
from budgetlab.memory.pool import KVCapacity, blocks_for_tokens, ceil_blocks, kv_by_budget, kv_capacity, num_kv_blocks
from budgetlab.memory.profile import (
    ACTIVATION_COEFFICIENTS,
    NON_TORCH_BYTES_ONE_GPU,
    NON_TORCH_BYTES_TENSOR_PARALLEL,
    PROFILER_VERSION,
    ActivationCoefficients,
    ActivationFit,
    ActivationPeak,
    GiB,
    activation_peak,
    encoder_cache_bytes,
    encoder_profile_items,
    fit_activation_coefficients,
    non_torch_bytes,
)
from budgetlab.memory.sizes import (
    QUANTIZED_BYTES_PER_WEIGHT,
    activation_dtype_bytes,
    check_tp,
    embedding_params,
    engine_kv_bytes_per_token,
    engine_weight_bytes_per_gpu,
    kv_bytes_per_token,
    kv_dtype_bytes,
    layer_kv_bytes_per_token,
    mamba_state_bytes_per_gpu,
    mxfp4_loaded_expert_bytes_per_gpu,
    rope_table_bytes,
    valid_tp_sizes,
    vision_weight_bytes,
    weight_bytes,
    weight_bytes_per_gpu,
    weights_fit,
)

__all__ = [
    "ACTIVATION_COEFFICIENTS",
    "NON_TORCH_BYTES_ONE_GPU",
    "NON_TORCH_BYTES_TENSOR_PARALLEL",
    "PROFILER_VERSION",
    "QUANTIZED_BYTES_PER_WEIGHT",
    "TIGHT_KV_FRACTION",
    "ActivationCoefficients",
    "ActivationFit",
    "ActivationPeak",
    "GiB",
    "KVCapacity",
    "KVPoolPlan",
    "hybrid_manager_enabled",
    "kv_block_size",
    "scheduler_kv_groups",
    "plan_kv_pool",
    "activation_dtype_bytes",
    "activation_peak",
    "blocks_for_tokens",
    "ceil_blocks",
    "check_tp",
    "embedding_params",
    "engine_kv_bytes_per_token",
    "engine_weight_bytes_per_gpu",
    "rope_table_bytes",
    "mxfp4_loaded_expert_bytes_per_gpu",
    "encoder_cache_bytes",
    "encoder_profile_items",
    "vision_weight_bytes",
    "fit_activation_coefficients",
    "is_tight",
    "memory_levers",
    "tight_memory_text",
    "kv_by_budget",
    "kv_bytes_per_token",
    "kv_capacity",
    "kv_dtype_bytes",
    "layer_kv_bytes_per_token",
    "mamba_state_bytes_per_gpu",
    "non_torch_bytes",
    "num_kv_blocks",
    "valid_tp_sizes",
    "weight_bytes",
    "weight_bytes_per_gpu",
    "weights_fit",
]
