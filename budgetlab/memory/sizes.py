"""Bytes per weight and per KV token for a deployment: tensor parallelism, dtypes, quantization.

Every function here answers "how many bytes does one GPU hold?" for a model served with the
deployment knobs of :class:`~budgetlab.specs.EngineConfig` (``tensor_parallel_size``,
``dtype``, ``kv_cache_dtype``, ``quantization``). They are shared by the memory model
(:func:`budgetlab.memory.kv_capacity`) and the cost model (the weight read and the KV read of
every step), so the two can never disagree about a deployment.

Tensor parallelism
------------------
With ``tp`` GPUs per replica vLLM shards every weight matrix (the embedding and the output
projection by vocabulary rows), so each GPU holds ``weight_bytes / tp`` (norms, replicated, are
a few hundred kB). It splits the KV heads: each GPU stores ``num_kv_heads / min(tp,
num_kv_heads)`` heads of every token, because once ``tp`` exceeds the KV heads vLLM replicates
them rather than splitting a head. ``tp`` must divide the attention heads, as vLLM requires.

Pipeline parallelism
--------------------
With ``pp`` stages vLLM splits the layers as evenly as it can, giving the extra layers of an
uneven split to the stages before the last (``get_pp_indices``: 32 layers over 4 stages are 8
each; 30 over 4 are 8, 8, 7, 7 → vLLM's order 7, 8, 8, 7). The first stage also holds the
token embedding, the last the output projection (its own copy even when the model ties them).
Each stage stores the KV of its own layers only (:func:`stage_layers`,
:func:`stage_weight_bytes`). Measured: Llama 3.1 8B at ``pp=2`` holds 7.51 GiB on its first
stage (vLLM 0.19 log; 7.48 predicted).

Quantization
------------
``quantization`` names how the linear layers' weights are stored; the token embedding and the
output projection (:func:`embedding_params`) stay in ``dtype``, as in vLLM's fp8, W8A8 and
W4A16 checkpoints:

========  ==========================  ====================================================
value     bytes per linear weight     what
========  ==========================  ====================================================
None      ``dtype`` bytes (2 for 16-bit)
"fp8"     1                           fp8 E4M3 (vLLM ``--quantization fp8``, compressed-
                                      tensors fp8-dynamic); per-channel scales neglected
"int8"    1                           W8A8 int8 (compressed-tensors); scales neglected
"int4"    0.5 + 2 / 128 = 0.515625    4-bit GPTQ/AWQ/W4A16 with one 16-bit scale per group
                                      of 128 weights (the usual ``group_size``)
========  ==========================  ====================================================

Measured against vLLM 0.19's "Model loading took" on H100 (``vllm_kv_logs.csv``): Llama 3.1 8B
14.99 GiB (bf16; 14.96 predicted), 8.49 GiB (fp8 and W8A8; 8.46), 5.38 GiB (W4A16; 5.31);
Llama 3.3 70B fp8 33.88 GiB per GPU at TP2 (33.84). Quantized *activations* (W8A8's int8
GEMMs, fp8 tensor cores) are not modelled: the math runs at the 16-bit rate.
"""

from __future__ import annotations

from budgetlab._checks import int_at_least
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.specs import KV_CACHE_DTYPES, QUANTIZATIONS, EngineConfig, HardwareSpec, ModelSpec

__all__ = [
    "QUANTIZED_BYTES_PER_WEIGHT",
    "check_tp",
    "activation_dtype_bytes",
    "kv_dtype_bytes",
    "embedding_params",
    "weight_bytes",
    "weight_bytes_per_gpu",
    "weights_fit",
    "kv_bytes_per_token",
    "valid_tp_sizes",
    "stage_layers",
    "stage_weight_bytes",
    "engine_weight_bytes_per_gpu",
    "engine_kv_bytes_per_token",
]

QUANTIZED_BYTES_PER_WEIGHT: dict[str, float] = {"fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2.0 / 128.0}
"""Bytes one linear-layer weight takes under each ``quantization`` [B] (table above)."""

_FP8_KV = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2"})


def check_tp(model: ModelSpec, tp: object) -> int:
    """``tp`` as an int, if it is a tensor-parallel degree vLLM accepts for ``model`` [count].

    Raises
    ------
    ParameterError
        Not an int >= 1, or it does not divide the model's attention heads (the message lists
        the degrees that do).
    """
    degree = int_at_least("tp", tp, 1, what="an int >= 1 (GPUs per replica)")
    if model.num_attention_heads % degree:
        raise ParameterError(
            f"tp={degree} does not divide {model.name}'s {model.num_attention_heads} "
            "attention heads; vLLM requires it to. Pick a divisor such as "
            f"{', '.join(map(str, valid_tp_sizes(model)))}."
        )
    return degree


def valid_tp_sizes(model: ModelSpec, *, at_most: int = 16) -> list[int]:
    """Tensor-parallel degrees vLLM accepts for ``model``, up to ``at_most`` [count]."""
    return [d for d in range(1, at_most + 1) if model.num_attention_heads % d == 0]


def activation_dtype_bytes(model: ModelSpec, dtype: str = "auto") -> int:
    """Bytes per activation (and per unquantized weight) under vLLM's ``--dtype`` [B].

    ``"auto"`` keeps the model's ``dtype_bytes``; ``"float32"``/``"float"`` is 4; the 16-bit
    names are 2.
    """
    if dtype == "auto":
        return int(model.dtype_bytes)
    if dtype in ("float32", "float"):
        return 4
    if dtype in ("bfloat16", "float16", "half"):
        return 2
    raise ConfigError(f"dtype must be one of auto, bfloat16, float16, half, float32, float; got {dtype!r}")


def kv_dtype_bytes(model: ModelSpec, *, dtype: str = "auto", kv_cache_dtype: str = "auto") -> int:
    """Bytes per stored key or value element [B]: 1 for an fp8 cache, else the activation dtype's."""
    if kv_cache_dtype in _FP8_KV:
        return 1
    if kv_cache_dtype == "bfloat16":
        return 2
    if kv_cache_dtype == "auto":
        return activation_dtype_bytes(model, dtype)
    raise ConfigError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}; got {kv_cache_dtype!r}")


def embedding_params(model: ModelSpec) -> int:
    """Parameters of the token embedding and the output projection [count].

    ``vocab_size × hidden_size``, twice unless ``tie_word_embeddings``: 1,050,673,152 for
    Llama 3.1 8B (untied), 589,824,000 for Gemma 2 2B (tied). They stay in ``dtype`` under
    every ``quantization``.
    """
    one = model.vocab_size * model.hidden_size
    return one if model.tie_word_embeddings else 2 * one


def weight_bytes(model: ModelSpec, *, dtype: str = "auto", quantization: str | None = None) -> float:
    """Bytes of all the weights of one replica [B].

    ``num_params × dtype bytes`` unquantized; with ``quantization``, the embedding and output
    projection in ``dtype`` plus every other weight at :data:`QUANTIZED_BYTES_PER_WEIGHT`.
    8.03e9 × 2 = 16.06 GB for Llama 3.1 8B in BF16; 9.08 GB with ``"fp8"``.

    Raises
    ------
    ConfigError
        An unknown ``dtype`` or ``quantization``.
    """
    full = activation_dtype_bytes(model, dtype)
    if quantization is None:
        return model.num_params * full
    if quantization not in QUANTIZED_BYTES_PER_WEIGHT:
        names = ", ".join(repr(q) for q in QUANTIZATIONS)
        raise ConfigError(f"quantization must be one of {names}; got {quantization!r}")
    kept = min(float(embedding_params(model)), model.num_params)
    return kept * full + (model.num_params - kept) * QUANTIZED_BYTES_PER_WEIGHT[quantization]


def weight_bytes_per_gpu(
    model: ModelSpec, *, tp: int = 1, dtype: str = "auto", quantization: str | None = None
) -> float:
    """Weight bytes each GPU holds when tensor parallelism splits the model over ``tp`` [B].

    :func:`weight_bytes` ``/ tp``: 141 GB of Llama 3.1 70B in BF16 are 70.6 GB per GPU at
    ``tp=2``.

    Parameters
    ----------
    model : ModelSpec
    tp : int
        GPUs per replica [count]; must divide the attention heads (:func:`check_tp`).
    dtype, quantization : str, str or None
        As :class:`~budgetlab.specs.EngineConfig`'s fields of those names.
    """
    degree = check_tp(model, tp)
    return weight_bytes(model, dtype=dtype, quantization=quantization) / degree


def weights_fit(hardware: HardwareSpec, model: ModelSpec, *, tp: int = 1, quantization: str | None = None) -> bool:
    """Whether each GPU's share of the weights fits in its memory [-].

    ``weight_bytes / tp <= memory_bytes``: the first question before any KV cache (which
    :func:`~budgetlab.memory.kv_capacity` answers, after ``gpu_memory_utilization``, the
    non-torch memory and activations).
    """
    return bool(weight_bytes_per_gpu(model, tp=tp, quantization=quantization) <= hardware.memory_bytes)


def kv_bytes_per_token(
    model: ModelSpec, *, tp: int = 1, dtype: str = "auto", kv_cache_dtype: str = "auto"
) -> int | float:
    """KV-cache bytes one token occupies on each GPU [B].

    ``2 (K and V) × layers × KV heads × head_dim × element bytes``: 131,072 B (128 KiB) for
    Llama 3.1 8B in BF16 (2 × 32 × 8 × 128 × 2), 65,536 B with an fp8 cache. With tensor
    parallelism each GPU stores ``1 / min(tp, num_kv_heads)`` of it (vLLM replicates KV heads
    beyond their number): 16 KiB for Llama 3.1 8B at ``tp=8`` and at ``tp=16`` alike. An int
    whenever the split is even.

    Parameters
    ----------
    model : ModelSpec
    tp : int
        GPUs per replica [count]; must divide the attention heads (:func:`check_tp`).
    dtype, kv_cache_dtype : str
        As :class:`~budgetlab.specs.EngineConfig`'s fields of those names.
    """
    element = kv_dtype_bytes(model, dtype=dtype, kv_cache_dtype=kv_cache_dtype)
    per_token = 2 * model.num_layers * model.num_kv_heads * model.head_dim * element
    shards = min(check_tp(model, tp), model.num_kv_heads)
    return per_token // shards if per_token % shards == 0 else per_token / shards


def stage_layers(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers on each of ``pp`` pipeline stages, split as vLLM's ``get_pp_indices`` does [count].

    ``num_layers // pp`` each, and one more for each of the ``num_layers % pp`` stages just
    before the last: ``stage_layers(30, 4) == (7, 8, 8, 7)``.

    Raises
    ------
    ParameterError
        ``pp`` not an int in [1, num_layers].
    """
    degree = int_at_least("pipeline_parallel_size", pp, 1, what="an int >= 1 (pipeline stages)")
    if degree > num_layers:
        raise ParameterError(f"pipeline_parallel_size={degree} exceeds the model's {num_layers} layers")
    parts = [num_layers // degree] * degree
    for i in range(2, num_layers % degree + 2):
        parts[-i] += 1
    return tuple(parts)


def stage_weight_bytes(
    model: ModelSpec, *, stage: int, pp: int, dtype: str = "auto", quantization: str | None = None
) -> float:
    """Bytes of the weights pipeline stage ``stage`` of ``pp`` holds, over its TP group [B].

    Its layers' share of the non-embedding parameters (at the ``quantization``'s bytes), plus
    the embedding on the first stage and the output projection on the last, in ``dtype``. With
    ``pp=1`` this is :func:`weight_bytes`.
    """
    if pp == 1:
        return weight_bytes(model, dtype=dtype, quantization=quantization)
    layers = stage_layers(model.num_layers, pp)
    full = activation_dtype_bytes(model, dtype)
    per_layer = (model.num_params - embedding_params(model)) / model.num_layers
    layer_bytes = QUANTIZED_BYTES_PER_WEIGHT[quantization] if quantization is not None else full
    one_table = model.vocab_size * model.hidden_size
    tables = (stage == 0) + (stage == pp - 1)  # the embedding first, the output projection last
    return layers[stage] * per_layer * layer_bytes + tables * one_table * full


def engine_weight_bytes_per_gpu(model: ModelSpec, engine: EngineConfig, *, stage: int = 0) -> float:
    """Weight bytes one GPU of pipeline stage ``stage`` holds under ``engine``'s deployment [B]
    (:func:`weight_bytes_per_gpu` without pipeline parallelism)."""
    tp = check_tp(model, engine.tensor_parallel_size)
    pp = engine.pipeline_parallel_size
    return stage_weight_bytes(model, stage=stage, pp=pp, dtype=engine.dtype, quantization=engine.quantization) / tp


def engine_kv_bytes_per_token(model: ModelSpec, engine: EngineConfig, *, stage: int = 0) -> int | float:
    """KV bytes per token one GPU of pipeline stage ``stage`` stores under ``engine`` [B]: its
    layers' share of :func:`kv_bytes_per_token`."""
    full = kv_bytes_per_token(
        model, tp=engine.tensor_parallel_size, dtype=engine.dtype, kv_cache_dtype=engine.kv_cache_dtype
    )
    pp = engine.pipeline_parallel_size
    if pp == 1:
        return full
    layers = stage_layers(model.num_layers, pp)[stage]
    share = full * layers
    return share // model.num_layers if share % model.num_layers == 0 else share / model.num_layers
