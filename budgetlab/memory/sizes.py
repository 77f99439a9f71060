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
    "layer_kv_bytes_per_token",
    "mamba_state_bytes_per_gpu",
    "valid_tp_sizes",
    "stage_layers",
    "stage_weight_bytes",
    "engine_weight_bytes_per_gpu",
    "engine_kv_bytes_per_token",
    "vision_weight_bytes",
    "rope_table_bytes",
    "mxfp4_loaded_expert_bytes_per_gpu",
]

QUANTIZED_BYTES_PER_WEIGHT: dict[str, float] = {
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 2.0 / 128.0,
    "mxfp4": 0.5 + 1.0 / 32.0,  # E2M1 values + one E8M0 scale byte per 32: 4.25 bits
    "nvfp4": 0.5 + 1.0 / 16.0,  # E2M1 values + one E4M3 scale byte per 16: 4.5 bits (+ FP32 per tensor)
}
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

    ``"mxfp4"`` quantizes the experts only (``layers × experts × 3 × hidden × intermediate``
    weights), as vLLM's ``Mxfp4Config`` does (its linear layers fall back to unquantized; 0.19
    and 0.33): GPT-OSS 20B is 19.1e9 expert weights at 4.25 bits plus 1.8e9 in BF16, 12.81 GiB,
    what a step reads. What vLLM 0.19 holds once the Hopper kernel has laid the experts out
    (13.60 GiB; 13.64 logged on an H100) is :func:`engine_weight_bytes_per_gpu`'s.

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
    if quantization == "mxfp4":
        experts = model.num_layers * model.num_experts * 3.0 * model.hidden_size * model.intermediate_size
        quantized = min(experts, float(model.num_params)) if model.is_moe else 0.0
        return (model.num_params - quantized) * full + quantized * QUANTIZED_BYTES_PER_WEIGHT[quantization]
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


def _whole(value: int, shards: int) -> int | float:
    """``value / shards``, an int when the split is even."""
    return value // shards if value % shards == 0 else value / shards


def layer_kv_bytes_per_token(
    model: ModelSpec, kind: str, *, tp: int = 1, dtype: str = "auto", kv_cache_dtype: str = "auto"
) -> int | float:
    """KV-cache bytes ONE decoder layer of ``kind`` stores per token on each GPU [B].

    * ``"full"``, ``"sliding_window"``, ``"chunked_local"``: ``2 (K and V) × KV heads ×
      head_dim × element bytes / min(tp, KV heads)``: 4,096 B for Llama 3.1 8B in BF16
      (2 × 8 × 128 × 2), 512 B at ``tp=8``. A sliding-window layer stores the same per token
      as a full one; it keeps fewer tokens (:mod:`budgetlab.memory.kv_specs`).
    * ``"mla"``: ``(kv_lora_rank + qk_rope_head_dim) × element bytes``, one latent "head"
      that tensor parallelism does NOT split (vLLM's ``MLAAttentionSpec`` has
      ``num_kv_heads=1`` on every GPU): 1,152 B for DeepSeek-V2-Lite in BF16 ((512 + 64) × 2)
      at every ``tp``.
    * ``"mamba"``: 0; a Mamba / linear-attention layer keeps a fixed state per request, not
      per token (:func:`mamba_state_bytes_per_gpu`).

    Parameters
    ----------
    model : ModelSpec
    kind : str
        One of :data:`budgetlab.attention.LAYER_KINDS`.
    tp : int
        GPUs per replica [count]; must divide the attention heads (:func:`check_tp`).
    dtype, kv_cache_dtype : str
        As :class:`~budgetlab.specs.EngineConfig`'s fields of those names.

    Raises
    ------
    ConfigError
        An unknown ``kind``, or ``"mla"`` for a model whose layout has no MLA sizes.
    """
    degree = check_tp(model, tp)
    element = kv_dtype_bytes(model, dtype=dtype, kv_cache_dtype=kv_cache_dtype)
    if kind in ("full", "sliding_window", "chunked_local"):
        return _whole(2 * model.num_kv_heads * model.head_dim * element, min(degree, model.num_kv_heads))
    if kind == "mla":
        latent = model.attention.mla_latent_dim if model.attention is not None else 0
        if not latent:
            raise ConfigError(f"{model.name} has no MLA sizes (kv_lora_rank, qk_rope_head_dim) in its attention layout")
        return latent * element
    if kind == "mamba":
        return 0
    raise ConfigError(f"kind must be one of full, sliding_window, chunked_local, mla, mamba; got {kind!r}")


def mamba_state_bytes_per_gpu(model: ModelSpec, *, tp: int = 1) -> int | float:
    """State ONE Mamba / linear-attention layer keeps for one request on each GPU [B].

    The layout's ``mamba_state_bytes`` (convolution and recurrent state together, at tensor
    parallelism 1) divided by ``tp``; 0 for a model without ``"mamba"`` layers. vLLM shards
    every part of the state over the TP group (``MambaStateShapeCalculator`` in
    ``vllm/model_executor/layers/mamba/mamba_utils.py``, vLLM 0.33): the convolution state's
    channels and the recurrent state's heads are divided by ``tp`` for Mamba 1 and 2, Gated
    DeltaNet, KDA and linear attention.

    Approximate where vLLM replicates instead of splitting: a Mamba 2 layer whose ``n_groups``
    does not divide ``tp`` gets ``tp - n_groups`` extra groups of B/C channels in its
    convolution state (``extra_groups_for_head_shards``), so its per-GPU state is a little
    larger than ``mamba_state_bytes / tp`` (the layout does not record ``n_groups``). The state
    dtypes (``--mamba-cache-dtype``, ``--mamba-ssm-cache-dtype``) are those the layout's bytes
    were computed with.

    Parameters
    ----------
    model : ModelSpec
    tp : int
        GPUs per replica [count]; must divide the attention heads (:func:`check_tp`).
    """
    degree = check_tp(model, tp)
    layout = model.attention
    if layout is None or layout.mamba_state_bytes is None:
        return 0
    return _whole(layout.mamba_state_bytes, degree)


def kv_bytes_per_token(
    model: ModelSpec, *, tp: int = 1, dtype: str = "auto", kv_cache_dtype: str = "auto"
) -> int | float:
    """KV-cache bytes one token occupies on each GPU [B].

    For a model with an attention layout (:attr:`~budgetlab.specs.ModelSpec.attention`), the
    sum over its layers of :func:`layer_kv_bytes_per_token`: what a token costs if every layer
    kept it (a sliding-window layer keeps only its window, a Mamba layer nothing per token;
    :func:`~budgetlab.memory.kv_capacity` counts the pool as vLLM does). Without a layout,
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
    if model.attention is not None:
        return _layers_kv_bytes(model, model.attention.layer_kinds, tp=tp, dtype=dtype, kv_cache_dtype=kv_cache_dtype)
    element = kv_dtype_bytes(model, dtype=dtype, kv_cache_dtype=kv_cache_dtype)
    per_token = 2 * model.num_layers * model.num_kv_heads * model.head_dim * element
    shards = min(check_tp(model, tp), model.num_kv_heads)
    return per_token // shards if per_token % shards == 0 else per_token / shards


def _layers_kv_bytes(
    model: ModelSpec, kinds: tuple[str, ...], *, tp: int, dtype: str, kv_cache_dtype: str
) -> int | float:
    """Sum of :func:`layer_kv_bytes_per_token` over layers of ``kinds`` [B]."""
    total: int | float = 0
    for kind in set(kinds):
        one = layer_kv_bytes_per_token(model, kind, tp=tp, dtype=dtype, kv_cache_dtype=kv_cache_dtype)
        total += kinds.count(kind) * one
    return int(total) if float(total).is_integer() else total


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


def vision_weight_bytes(model: ModelSpec, *, dtype: str = "auto") -> float:
    """Bytes of a multimodal model's vision encoder and projector, over its TP group [B].

    ``model.vision.params`` in ``dtype`` (0 without :attr:`~budgetlab.specs.ModelSpec.vision`):
    0.78 GiB for Gemma 3's SigLIP and projector, 1.62 GiB for Llama 4 Scout's encoder, adapter
    and projector (871,932,416 parameters). Loaded at start-up but not read by a text step, so
    :func:`weight_bytes` leaves it out; vLLM 0.19 shards it like the text layers (the default
    ``mm_encoder_tp_mode="weights"``) and builds it on every pipeline stage. Kept in ``dtype``
    whatever the ``quantization`` (the vision towers of the checkpoints here are unquantized).
    """
    return 0.0 if model.vision is None else float(model.vision.params * activation_dtype_bytes(model, dtype))


def rope_table_bytes(model: ModelSpec, *, dtype: str = "auto") -> float:
    """Bytes of the rotary cos/sin tables vLLM precomputes on every GPU [B].

    ``rope_table_rows × head_dim × dtype bytes`` (0 when
    :attr:`~budgetlab.specs.ModelSpec.rope_table_rows` is None). vLLM 0.19's ``RotaryEmbedding``
    registers a ``cos_sin_cache`` buffer of ``max_position_embeddings`` rows of ``rotary_dim``
    (cos and sin halves) in the model dtype, one per distinct rotary embedding
    (``get_rope`` caches them), on every GPU; linear scaling multiplies its rows by the factor
    (``LinearScalingRotaryEmbedding``). Gemma 3 (``max_position_embeddings`` 131,072, a global
    table scaled ×8 and a local one): 1,179,648 rows, 0.56 GiB at ``head_dim`` 256; Llama 4
    Scout Instruct (10,485,760 positions): 2.50 GiB on each GPU. A table of 131,072 rows at
    ``head_dim`` 128 is 32 MiB, which the catalog rows without ``rope_table_rows`` leave out.
    """
    rows = model.rope_table_rows
    return 0.0 if rows is None else float(rows * model.head_dim * activation_dtype_bytes(model, dtype))


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def mxfp4_loaded_expert_bytes_per_gpu(model: ModelSpec, *, tp: int = 1) -> float:
    """Bytes ONE MoE layer's MXFP4 experts take on each GPU once vLLM 0.19 has laid them out
    for its Triton MoE kernel on Hopper [B].

    On an H100 vLLM 0.19 picks the ``TRITON`` MXFP4 backend (``fused_moe/oracle/mxfp4.py``;
    the TRT-LLM kernels need Blackwell). It then holds, per layer, with ``E`` experts, hidden
    ``H`` and ``I_p = round_up(intermediate / tp, 64)`` (``mxfp4_round_up_hidden_size_and_
    intermediate_size``):

    * the E2M1 values swizzled by ``HopperMXValueLayout``, which pads both byte dimensions to
      multiples of 64: ``E × (round_up(H/2, 64) × 2 I_p + round_up(I_p/2, 64) × H)`` bytes
      (GPT-OSS: 1,440 bytes of a 2,880-wide row become 1,472);
    * the E8M0 scales twice: the loaded parameters (``w13_weight_scale``, ``w2_weight_scale``,
      which ``process_weights_after_loading`` does not free on this path) and their
      ``HopperMXScaleLayout`` copy, rows padded to multiples of 256;
    * the biases converted to FP32 (``w13_bias`` split by TP, ``w2_bias`` whole).

    GPT-OSS 20B: 13.60 GiB at ``tp=1`` and 6.96 GiB per GPU at ``tp=2`` with the other weights
    (vLLM 0.19 logged 13.64 and 7.01; the rest is the FP32 YaRN table, 32 MiB). Other GPUs'
    kernels (Marlin before Hopper, TRT-LLM on Blackwell) pad differently and are not modelled.
    """
    degree = check_tp(model, tp)
    experts, hidden = model.num_experts, model.hidden_size
    part = _round_up(model.intermediate_size // degree, 64)
    values = experts * (_round_up(hidden // 2, 64) * 2 * part + _round_up(part // 2, 64) * hidden)
    scales = experts * (2 * part * (hidden // 32) + hidden * (part // 32))
    swizzled = experts * (
        _round_up(2 * part, 256) * _round_up(hidden // 32, 2) + _round_up(hidden, 256) * _round_up(part // 32, 2)
    )
    return float(values + scales + swizzled + experts * (2 * part + hidden) * 4)


def _mxfp4_layout_extra_bytes(model: ModelSpec, engine: EngineConfig, layers: int) -> float:
    """What :func:`mxfp4_loaded_expert_bytes_per_gpu` adds on one GPU over ``layers`` MoE layers
    to the 4.25 bits per expert weight and 16-bit biases :func:`weight_bytes` counts [B]."""
    if engine.quantization != "mxfp4" or not model.is_moe:
        return 0.0
    tp = engine.tensor_parallel_size
    e, h, i = model.num_experts, model.hidden_size, model.intermediate_size
    counted = e * 3 * h * i * QUANTIZED_BYTES_PER_WEIGHT["mxfp4"] + e * (2 * i + h) * activation_dtype_bytes(
        model, engine.dtype
    )
    return layers * (mxfp4_loaded_expert_bytes_per_gpu(model, tp=tp) - counted / tp)


def engine_weight_bytes_per_gpu(model: ModelSpec, engine: EngineConfig, *, stage: int = 0) -> float:
    """What vLLM's "Model loading took" counts on one GPU of pipeline stage ``stage`` under
    ``engine``'s deployment [B]: the stage's share of the weights (:func:`weight_bytes_per_gpu`
    without pipeline parallelism), plus a vision encoder's share (:func:`vision_weight_bytes`
    ``/ tp``) and the rotary tables (:func:`rope_table_bytes`), both 0 for a text-only row
    without ``rope_table_rows``. Gemma 3 27B in BF16: 50.31 + 0.79 + 0.28 = 51.38 GiB (vLLM
    0.19 logged 51.45 on an H100). MXFP4 experts take their Hopper kernel layout
    (:func:`mxfp4_loaded_expert_bytes_per_gpu`)."""
    tp = check_tp(model, engine.tensor_parallel_size)
    pp = engine.pipeline_parallel_size
    text = stage_weight_bytes(model, stage=stage, pp=pp, dtype=engine.dtype, quantization=engine.quantization)
    extra = vision_weight_bytes(model, dtype=engine.dtype) / tp + rope_table_bytes(model, dtype=engine.dtype)
    extra += _mxfp4_layout_extra_bytes(model, engine, stage_layers(model.num_layers, pp)[stage])
    return text / tp + extra  # + 0.0 for a text-only row: bit-identical


def engine_kv_bytes_per_token(model: ModelSpec, engine: EngineConfig, *, stage: int = 0) -> int | float:
    """KV bytes per token one GPU of pipeline stage ``stage`` stores under ``engine`` [B]: its
    layers' share of :func:`kv_bytes_per_token`."""
    full = kv_bytes_per_token(
        model, tp=engine.tensor_parallel_size, dtype=engine.dtype, kv_cache_dtype=engine.kv_cache_dtype
    )
    pp = engine.pipeline_parallel_size
    if pp == 1:
        return full
    if model.attention is not None:
        counts = stage_layers(model.num_layers, pp)
        first = sum(counts[:stage])
        kinds = model.attention.layer_kinds[first : first + counts[stage]]
        return _layers_kv_bytes(
            model, kinds, tp=engine.tensor_parallel_size, dtype=engine.dtype, kv_cache_dtype=engine.kv_cache_dtype
        )
    layers = stage_layers(model.num_layers, pp)[stage]
    share = full * layers
    return share // model.num_layers if share % model.num_layers == 0 else share / model.num_layers
