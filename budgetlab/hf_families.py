"""What a ``config.json`` says beyond Llama-style keys: the attention kind of every layer, the
parameters of families whose layers are not all alike, and the weight format.

:func:`budgetlab.hf_config.model_from_hf_config` calls these three readers:

* :func:`attention_layout` — an :class:`~budgetlab.attention.AttentionLayout` from
  ``layer_types`` (``full_attention``, ``sliding_attention``, ``chunked_attention``,
  ``linear_attention``), Gemma 3's older ``sliding_window_pattern``, Gemma 2's alternation,
  Llama 4's ``no_rope_layers`` / ``attention_chunk_size``, multi-head latent attention
  (``kv_lora_rank``) and Gated DeltaNet state sizes (``linear_*`` keys), as vLLM 0.33 reads them;
* :func:`layer_params` — parameters per decoder layer (all experts, and those one token uses) for
  GPT-OSS, Llama 4, DeepSeek V2/V3 and Kimi K2, and Qwen3-Next / Qwen3.5;
* :func:`hf_quantization` — the :attr:`~budgetlab.specs.EngineConfig.quantization` value of a
  checkpoint's ``quantization_config``.

The rules, with the vLLM 0.33 file each one follows:

* Gemma 2 (``models/gemma2.py``) and Gemma 3 (``gemma3.py``): a layer is sliding-window when its
  ``layer_types`` entry is ``sliding_attention``. Without ``layer_types`` the transformers config
  classes fill it in: Gemma 2 alternates from a sliding layer 0; Gemma 3 makes every
  ``sliding_window_pattern``-th layer full (default 6: five sliding, then one full).
* A ``sliding_window`` without ``layer_types`` (Mistral 7B v0.1) applies to every layer, unless
  ``use_sliding_window`` is false (Qwen2/Qwen3 configs carry an unused window).
* Llama 4 (``llama4.py``): a layer without rotary embedding (``no_rope_layers[i] == 0``; by default
  every 4th layer, ``no_rope_layer_interval``) is global full attention; every other layer is
  chunked local attention of ``attention_chunk_size`` tokens. A layer is MoE when
  ``(i + 1) % interleave_moe_layer_step == 0``; the others are dense MLPs of
  ``intermediate_size_mlp``. Every MoE layer adds one shared expert of ``intermediate_size``.
* DeepSeek V2/V3, Kimi K2 (``deepseek_v2.py``): every layer is MLA and caches
  ``kv_lora_rank + qk_rope_head_dim`` elements per token. Layers ``i >= first_k_dense_replace``
  with ``i % moe_layer_freq == 0`` are MoE (``n_routed_experts`` experts of
  ``moe_intermediate_size``, ``n_shared_experts`` shared ones fused into one MLP, a router and, for
  ``topk_method: noaux_tc``, a per-expert correction bias); the rest are dense. The
  multi-token-prediction layers (``num_nextn_predict_layers``) are not counted: vLLM loads them
  only as a speculative draft model.
* Qwen3-Next and Qwen3.5 (``qwen3_next.py``, ``qwen3_5.py``): ``linear_attention`` layers are Gated
  DeltaNet; their per-request state is a convolution state of
  ``(2·linear_num_key_heads·linear_key_head_dim + linear_num_value_heads·linear_value_head_dim) ×
  (linear_conv_kernel_dim - 1)`` elements and a recurrent state of ``linear_num_value_heads ×
  linear_value_head_dim × linear_key_head_dim`` elements
  (``MambaStateShapeCalculator.gated_delta_net_state_shape``), in the model dtype; the recurrent
  state in ``mamba_ssm_dtype`` where the config names one (Qwen3.5: float32;
  ``model_executor/models/config.py``). Without ``layer_types`` every ``full_attention_interval``-th
  layer is full attention.

Still refused, naming what is missing: Mamba/Mamba2 hybrids (Jamba, Granite-4.0-H, Nemotron-H,
``mamba`` layer kinds), ``layer_types`` kinds not listed above, and weight formats other than
those :func:`hf_quantization` lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from budgetlab._checks import MAX_MODEL_DIMENSION, int_at_least, is_int
from budgetlab.attention import AttentionLayout
from budgetlab.errors import ParameterError
from budgetlab.vision import VisionEncoder

__all__ = [
    "LAYER_TYPE_KINDS",
    "FAMILY_TYPES",
    "attention_layout",
    "layer_params",
    "hf_quantization",
    "gated_delta_net_state_bytes",
    "vision_tower_params",
    "vision_encoder",
    "refuse_unsupported",
    "UNSUPPORTED_TYPES",
]

LAYER_TYPE_KINDS: Mapping[str, str] = {
    "full_attention": "full",
    "attention": "full",
    "sliding_attention": "sliding_window",
    "chunked_attention": "chunked_local",
    "linear_attention": "mamba",
}
"""``layer_types`` entries read, and the :data:`~budgetlab.attention.LAYER_KINDS` kind each is."""

_DEEPSEEK_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2"})
_QWEN_NEXT_TYPES = frozenset({"qwen3_next", "qwen3_5_text", "qwen3_5", "qwen3_5_moe_text", "qwen3_5_moe"})
_LLAMA4_TYPES = frozenset({"llama4", "llama4_text"})
FAMILY_TYPES = frozenset({"gpt_oss", *_DEEPSEEK_TYPES, *_QWEN_NEXT_TYPES, *_LLAMA4_TYPES})
"""``model_type`` values whose layers :func:`layer_params` counts one by one."""

_STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

Reader = Callable[[str], int]


def _reader(config: Mapping[str, object], where: str) -> Callable[..., int]:
    """``read(key, default=None, minimum=1)``: the int at ``key``, named in any error."""

    def read(key: str, default: int | None = None, minimum: int = 1) -> int:
        raw = config.get(key)
        if raw is None:
            if default is None:
                raise ParameterError(f"{where} lacks {key!r}, which its model_type needs")
            return default
        return int_at_least(f"{where}: {key}", raw, minimum, what=f"an int >= {minimum}", maximum=MAX_MODEL_DIMENSION)

    return read


def _model_type(config: Mapping[str, object]) -> str:
    raw = config.get("model_type")
    return raw if isinstance(raw, str) else ""


UNSUPPORTED_TYPES: Mapping[str, str] = {
    "phi": "a two-matrix (ungated) MLP and LayerNorms with biases",
    "gpt2": "a two-matrix (ungated) MLP and LayerNorms with biases",
    "gpt_neox": "a two-matrix (ungated) MLP and LayerNorms with biases",
    "gptj": "a two-matrix (ungated) MLP",
    "gpt_bigcode": "a two-matrix (ungated) MLP and multi-query attention with biases",
    "starcoder2": "a two-matrix (ungated) MLP with biases",
    "falcon": "a two-matrix (ungated) MLP and parallel attention",
    "opt": "a two-matrix (ungated) MLP with biases",
    "bloom": "a two-matrix (ungated) MLP with biases",
    "mllama": "cross-attention layers to a vision encoder",
    "jamba": "Mamba layers between attention layers",
    "granitemoehybrid": "Mamba2 layers between attention layers",
    "nemotron_h": "Mamba2 layers between attention layers",
    "falcon_h1": "Mamba2 heads beside attention heads",
}
"""``model_type`` values a :class:`ModelSpec` cannot describe, and why."""


def refuse_unsupported(config: Mapping[str, object], where: str) -> None:
    """Raise :class:`~budgetlab.errors.ParameterError` for an architecture a
    :class:`~budgetlab.specs.ModelSpec` cannot describe, naming the key (:data:`UNSUPPORTED_TYPES`,
    MLA or shared experts outside :data:`FAMILY_TYPES`, linear-attention layers outside Qwen3-Next/3.5)."""
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in FAMILY_TYPES:
        return  # attention_layout and layer_params read and check their keys
    if isinstance(model_type, str) and model_type in UNSUPPORTED_TYPES:
        raise ParameterError(
            f"{where}: model_type {model_type!r} has {UNSUPPORTED_TYPES[model_type]}, which a ModelSpec "
            "(gated MLP, grouped-query attention, optional uniform MoE) cannot describe; write its "
            "ModelSpec by hand with the published parameter count"
        )
    reasons = {
        "kv_lora_rank": "multi-head latent attention (its KV cache is not heads × head_dim)",
        "q_lora_rank": "low-rank query projections (multi-head latent attention)",
        "shared_expert_intermediate_size": "a shared expert beside the routed ones",
        "n_shared_experts": "shared experts beside the routed ones",
        "first_k_dense_replace": "dense layers before the MoE layers",
        "mlp_only_layers": "dense layers among the MoE layers",
        "cross_attention_layers": "cross-attention layers",
    }
    for key, reason in reasons.items():
        if config.get(key):  # absent, null, 0 and [] are all "not used"
            raise ParameterError(
                f"{where}: {key}={config[key]!r} means {reason}, which a ModelSpec cannot describe; "
                "write its ModelSpec by hand with the published parameter count"
            )
    for key in ("decoder_sparse_step", "interleave_moe_layer_step"):
        step = config.get(key)
        if step is not None and not is_int(step):
            raise ParameterError(f"{where}: {key} must be an int (a layer step), got {step!r}")
        if is_int(step) and step > 1:  # type: ignore[operator]
            raise ParameterError(
                f"{where}: {key}={step!r} mixes dense and MoE layers, which a ModelSpec cannot describe"
            )
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list):
        odd = sorted({str(t) for t in layer_types} - {"full_attention", "sliding_attention", "chunked_attention"})
        if odd:
            raise ParameterError(
                f"{where}: layer_types holds {', '.join(odd)}; for model_type {model_type!r} only full, "
                "sliding-window and chunked attention layers have the q/k/v/o count a ModelSpec assumes "
                "(linear-attention layers are read for Qwen3-Next and Qwen3.5)"
            )


# --------------------------------------------------------------------------------------------
# Attention layout
# --------------------------------------------------------------------------------------------


def gated_delta_net_state_bytes(config: Mapping[str, object], where: str, *, dtype_bytes: int = 2) -> int:
    """Bytes one Gated DeltaNet layer keeps per request at tensor parallelism 1 [B].

    Convolution state ``(2·n_k·d_k + n_v·d_v) × (kernel - 1)`` elements in the model dtype,
    recurrent state ``n_v × d_v × d_k`` in ``mamba_ssm_dtype`` (default: the model dtype).
    Qwen3-Next-80B-A3B in BF16: ``8,192 × 3 × 2 + 32 × 128 × 128 × 2 = 1,097,728`` B.
    """
    read = _reader(config, where)
    n_k, d_k = read("linear_num_key_heads"), read("linear_key_head_dim")
    n_v, d_v = read("linear_num_value_heads"), read("linear_value_head_dim")
    kernel = read("linear_conv_kernel_dim", 4, minimum=2)
    ssm_dtype = config.get("mamba_ssm_dtype")
    if ssm_dtype is None:
        ssm_bytes = dtype_bytes
    elif isinstance(ssm_dtype, str) and ssm_dtype.removeprefix("torch.") in _STATE_DTYPE_BYTES:
        ssm_bytes = _STATE_DTYPE_BYTES[ssm_dtype.removeprefix("torch.")]
    else:
        raise ParameterError(
            f"{where}: mamba_ssm_dtype must be one of {', '.join(_STATE_DTYPE_BYTES)}, got {ssm_dtype!r}"
        )
    conv_elements = (2 * n_k * d_k + n_v * d_v) * (kernel - 1)
    return conv_elements * dtype_bytes + n_v * d_v * d_k * ssm_bytes


def _kinds_from_layer_types(config: Mapping[str, object], where: str, num_layers: int) -> list[str] | None:
    layer_types = config.get("layer_types")
    if layer_types is None:
        return None
    if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
        raise ParameterError(f"{where}: layer_types must be a list of layer kinds, got {layer_types!r}")
    odd = sorted(set(layer_types) - set(LAYER_TYPE_KINDS))
    if odd:
        raise ParameterError(
            f"{where}: layer_types holds {', '.join(odd)}; budgetlab reads {', '.join(LAYER_TYPE_KINDS)} "
            "(Mamba/Mamba2 layers of Jamba, Granite-4.0-H or Nemotron-H are not described yet)"
        )
    if len(layer_types) != num_layers:
        raise ParameterError(
            f"{where}: layer_types lists {len(layer_types)} layers but num_hidden_layers is {num_layers}"
        )
    return [LAYER_TYPE_KINDS[t] for t in layer_types]


def _default_kinds(config: Mapping[str, object], where: str, num_layers: int) -> list[str] | None:
    """The kinds transformers' config classes fill in when ``layer_types`` is absent."""
    model_type = _model_type(config)
    read = _reader(config, where)
    if model_type in _DEEPSEEK_TYPES or config.get("kv_lora_rank"):
        return ["mla"] * num_layers
    if model_type in _LLAMA4_TYPES:
        interval = read("no_rope_layer_interval", 4)
        no_rope = config.get("no_rope_layers")
        if not no_rope:
            no_rope = [int((i + 1) % interval != 0) for i in range(num_layers)]
        if not isinstance(no_rope, list) or len(no_rope) != num_layers or any(v not in (0, 1) for v in no_rope):
            raise ParameterError(f"{where}: no_rope_layers must be {num_layers} zeros and ones, got {no_rope!r}")
        if not config.get("attention_chunk_size"):
            return None
        return ["full" if v == 0 else "chunked_local" for v in no_rope]
    if model_type in _QWEN_NEXT_TYPES:
        interval = read("full_attention_interval", 4)
        return ["full" if (i + 1) % interval == 0 else "mamba" for i in range(num_layers)]
    if not config.get("sliding_window"):
        return None
    if model_type == "gemma2":
        return ["sliding_window" if (i + 1) % 2 else "full" for i in range(num_layers)]
    if model_type in ("gemma3", "gemma3_text"):
        pattern = read("sliding_window_pattern", 6)
        return ["sliding_window" if (i + 1) % pattern else "full" for i in range(num_layers)]
    if config.get("use_sliding_window") is False or model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        return None
    return ["sliding_window"] * num_layers


def attention_layout(
    config: Mapping[str, object], where: str, *, num_layers: int, dtype_bytes: int = 2
) -> AttentionLayout | None:
    """The attention kind of every layer as vLLM 0.33 runs the model, or ``None`` when every
    layer is full grouped-query attention (see the module docstring for the rules).

    Raises
    ------
    ParameterError
        A ``layer_types`` entry budgetlab does not read, a list of the wrong length, or a size
        the kinds need (window, chunk, MLA ranks, Gated DeltaNet heads) missing or not an int.
    """
    kinds = _kinds_from_layer_types(config, where, num_layers)
    if kinds is None:
        kinds = _default_kinds(config, where, num_layers)
    elif config.get("kv_lora_rank"):
        kinds = ["mla" if k == "full" else k for k in kinds]
    if kinds is None or set(kinds) == {"full"}:
        return None
    read = _reader(config, where)
    sizes: dict[str, int | None] = {}
    if "sliding_window" in kinds:
        sizes["sliding_window"] = read("sliding_window")
    if "chunked_local" in kinds:
        sizes["attention_chunk_size"] = read("attention_chunk_size")
    if "mla" in kinds:
        sizes["kv_lora_rank"] = read("kv_lora_rank")
        sizes["qk_rope_head_dim"] = read("qk_rope_head_dim")
        sizes["qk_nope_head_dim"] = read("qk_nope_head_dim")
        sizes["v_head_dim"] = read("v_head_dim")
        sizes["q_lora_rank"] = read("q_lora_rank") if config.get("q_lora_rank") else None
    if "mamba" in kinds:
        sizes["mamba_state_bytes"] = gated_delta_net_state_bytes(config, where, dtype_bytes=dtype_bytes)
    return AttentionLayout(tuple(kinds), source=where, **sizes)


# --------------------------------------------------------------------------------------------
# Parameters, layer by layer
# --------------------------------------------------------------------------------------------


def _gqa_attention(h: int, n_q: int, n_kv: int, d: int) -> int:
    return h * n_q * d + 2 * h * n_kv * d + n_q * d * h


def _gpt_oss(config: Mapping[str, object], read: Callable[..., int], num_layers: int) -> list[tuple[int, int]]:
    h, n_q, n_kv, d = read("hidden_size"), read("num_attention_heads"), read("num_key_value_heads"), read("head_dim")
    f, experts, top_k = read("intermediate_size"), read("num_local_experts"), read("num_experts_per_tok")
    # q, k, v and o with biases, and one attention-sink logit per query head
    attention = _gqa_attention(h, n_q, n_kv, d) + n_q * d + 2 * n_kv * d + h + n_q
    expert = 3 * h * f + 2 * f + h  # gate_up (with bias 2f) and down (with bias h)
    shared = attention + h * experts + experts + 2 * h  # router with bias, two norms
    return [(shared + experts * expert, shared + top_k * expert)] * num_layers


def _llama4(config: Mapping[str, object], read: Callable[..., int], num_layers: int) -> list[tuple[int, int]]:
    h, n_q = read("hidden_size"), read("num_attention_heads")
    n_kv, d = read("num_key_value_heads", n_q), read("head_dim", h // n_q)
    experts, top_k = read("num_local_experts"), read("num_experts_per_tok", 1)
    f, f_dense = read("intermediate_size"), read("intermediate_size_mlp")
    step = read("interleave_moe_layer_step", 1, minimum=0)
    common = _gqa_attention(h, n_q, n_kv, d) + 2 * h  # q/k norms of Llama 4 carry no weights
    layers = []
    for i in range(num_layers):
        if step > 0 and (i + 1) % step == 0:
            moe = 3 * h * f + h * experts  # shared expert and router
            layers.append((common + moe + experts * 3 * h * f, common + moe + top_k * 3 * h * f))
        else:
            layers.append((common + 3 * h * f_dense,) * 2)
    return layers


def _deepseek(config: Mapping[str, object], read: Callable[..., int], num_layers: int) -> list[tuple[int, int]]:
    h, n = read("hidden_size"), read("num_attention_heads")
    rank, rope = read("kv_lora_rank"), read("qk_rope_head_dim")
    nope, v = read("qk_nope_head_dim"), read("v_head_dim")
    q_rank = read("q_lora_rank") if config.get("q_lora_rank") else 0
    query = (h * q_rank + q_rank + q_rank * n * (nope + rope)) if q_rank else h * n * (nope + rope)
    attention = query + h * (rank + rope) + rank + rank * n * (nope + v) + n * v * h
    common = attention + 2 * h
    dense = 3 * h * read("intermediate_size")
    experts = read("n_routed_experts", 0, minimum=0)
    first_dense, freq = read("first_k_dense_replace", 0, minimum=0), read("moe_layer_freq", 1)
    layers = []
    for i in range(num_layers):
        if experts and i >= first_dense and i % freq == 0:
            f, top_k = read("moe_intermediate_size"), read("num_experts_per_tok")
            shared = 3 * h * f * read("n_shared_experts", 0, minimum=0) + h * experts
            if config.get("topk_method") == "noaux_tc":
                shared += experts  # e_score_correction_bias
            layers.append((common + shared + experts * 3 * h * f, common + shared + top_k * 3 * h * f))
        else:
            layers.append((common + dense,) * 2)
    return layers


def _qwen_next(config: Mapping[str, object], read: Callable[..., int], num_layers: int, kinds: tuple[str, ...]):
    h, n_q = read("hidden_size"), read("num_attention_heads")
    n_kv, d = read("num_key_value_heads"), read("head_dim")
    gate = 2 if config.get("attn_output_gate", True) else 1
    full = h * n_q * d * gate + 2 * h * n_kv * d + n_q * d * h + 2 * d  # gated q, k, v, o, q/k norms
    n_k, d_k = read("linear_num_key_heads"), read("linear_key_head_dim")
    n_v, d_v = read("linear_num_value_heads"), read("linear_value_head_dim")
    key_dim, value_dim = n_k * d_k, n_v * d_v
    kernel = read("linear_conv_kernel_dim", 4, minimum=2)
    linear = (
        h * (2 * key_dim + 2 * value_dim)  # in_proj q, k, v, z
        + h * 2 * n_v  # in_proj b, a
        + (2 * key_dim + value_dim) * kernel  # depthwise conv1d, no bias
        + 2 * n_v  # dt_bias, A_log
        + d_v  # gated RMSNorm
        + value_dim * h  # out_proj
    )
    experts = read("num_experts", 0, minimum=0)
    step = read("decoder_sparse_step", 1)
    mlp_only = config.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list):
        raise ParameterError(f"mlp_only_layers must be a list of layer indices, got {mlp_only!r}")
    layers = []
    for i, kind in enumerate(kinds):
        common = (full if kind == "full" else linear) + 2 * h
        if experts and i not in mlp_only and (i + 1) % step == 0:
            f, top_k = read("moe_intermediate_size"), read("num_experts_per_tok")
            shared_f = read("shared_expert_intermediate_size", 0, minimum=0)
            shared = 3 * h * shared_f + (h if shared_f else 0) + h * experts  # shared expert, its gate, router
            layers.append((common + shared + experts * 3 * h * f, common + shared + top_k * 3 * h * f))
        else:
            layers.append((common + 3 * h * read("intermediate_size"),) * 2)
    return layers


def layer_params(
    config: Mapping[str, object], where: str, *, num_layers: int, layout: AttentionLayout | None
) -> tuple[tuple[int, int], ...]:
    """Parameters of every decoder layer, ``(all experts, experts one token uses)`` [count], norms
    included, for a :data:`FAMILY_TYPES` model; ``()`` for any other (the uniform count applies).

    Raises
    ------
    ParameterError
        A key the family needs missing or not an int.
    """
    model_type = _model_type(config)
    read = _reader(config, where)
    if model_type == "gpt_oss":
        return tuple(_gpt_oss(config, read, num_layers))
    if model_type in _LLAMA4_TYPES:
        return tuple(_llama4(config, read, num_layers))
    if model_type in _DEEPSEEK_TYPES:
        return tuple(_deepseek(config, read, num_layers))
    if model_type in _QWEN_NEXT_TYPES:
        kinds = layout.layer_kinds if layout is not None else ("full",) * num_layers
        return tuple(_qwen_next(config, read, num_layers, kinds))
    return ()


def vision_tower_params(config: Mapping[str, object], where: str = "the config dict") -> int | None:
    """Parameters of a multimodal wrapper's vision encoder and projector [count], which
    :func:`~budgetlab.hf_config.model_from_hf_config` leaves out of ``num_params``; ``None``
    when the config has no ``vision_config`` or one of a tower not described here.

    Described: Gemma 3's SigLIP (``siglip_vision_model``, vLLM ``siglip.py`` without a head)
    and its projector (``gemma3_mm.py``): patch convolution ``3·p²·H + H``, position embeddings
    ``(image/p)²·H``, per layer q/k/v/o with biases ``4·(H² + H)``, the MLP ``2·H·I + I + H`` and
    two LayerNorms ``4·H``, the final LayerNorm ``2·H``, then the projection ``H·hidden + H``.
    Gemma 3: 416,866,032 in the tower (the report's 417M) plus 6,194,304 for 27B's projector.

    And Llama 4's (``llama4_vision_model``, vLLM ``mllama4.py``): the unfold patch projection
    ``3·p²·H`` without bias, a class embedding ``H`` and ``((image/p)² + 1)·H`` position
    embeddings, two LayerNorms ``4·H``, per layer q/k/v/o with biases, the MLP ``2·H·I + I + H``
    and two LayerNorms, then the pixel-shuffle adapter ``I·P_in + P_in·P_out`` (without biases
    unless ``multi_modal_projector_bias``) and the projector ``vision_output_dim × hidden``:
    871,932,416 for Llama 4 Scout (its checkpoint's module table gives the same parts).
    """
    vision = config.get("vision_config")
    kind = vision.get("model_type") if isinstance(vision, Mapping) else None
    if not isinstance(vision, Mapping) or kind not in ("siglip_vision_model", "llama4_vision_model"):
        return None
    text = config.get("text_config")
    text = text if isinstance(text, Mapping) else {}
    read, read_text = _reader(vision, f"{where} (vision_config)"), _reader(text, f"{where} (text_config)")
    h, i, layers = read("hidden_size"), read("intermediate_size"), read("num_hidden_layers")
    patch, image, channels = read("patch_size"), read("image_size"), read("num_channels", 3)
    block = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
    if kind == "llama4_vision_model":
        p_in, p_out = read("projector_input_dim"), read("projector_output_dim")
        adapter = i * p_in + p_in * p_out + ((p_in + p_out) if vision.get("multi_modal_projector_bias") else 0)
        tower = channels * patch * patch * h + h + ((image // patch) ** 2 + 1) * h + 4 * h + layers * block
        return tower + adapter + read("vision_output_dim") * read_text("hidden_size")
    tower = channels * patch * patch * h + h + (image // patch) ** 2 * h + 2 * h + layers * block
    return tower + h * read_text("hidden_size") + h


LLAMA4_MAX_TILES = 16
"""Tiles ``Llama4ImageProcessor`` cuts an image into at most (its ``max_patches`` default) [count]."""


def vision_encoder(config: Mapping[str, object], where: str = "the config dict") -> VisionEncoder | None:
    """The :class:`~budgetlab.vision.VisionEncoder` vLLM 0.19 loads and profiles for a
    multimodal config, or ``None`` where :func:`vision_tower_params` does not describe its tower.

    * Gemma 3 (SigLIP): ``mm_tokens_per_image`` (default 256) embeddings and one
      ``num_channels × image_size²`` image (pan-and-scan is off by default, so the largest
      image is one crop; vLLM ``gemma3_mm.py``).
    * Llama 4: the largest image is ``LLAMA4_MAX_TILES`` tiles plus a global one, each
      ``(image_size / patch_size)² × pixel_shuffle_ratio²`` embeddings (144 for Scout) and
      ``num_channels × image_size²`` pixels (vLLM ``mllama4.py``): 2,448 embeddings.
    """
    params = vision_tower_params(config, where)
    vision = config.get("vision_config")
    if params is None or not isinstance(vision, Mapping):
        return None
    read = _reader(vision, f"{where} (vision_config)")
    pixels = read("num_channels", 3) * read("image_size") ** 2
    if vision.get("model_type") == "llama4_vision_model":
        ratio = vision.get("pixel_shuffle_ratio", 0.5)
        if not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            raise ParameterError(f"{where} (vision_config): pixel_shuffle_ratio must be in (0, 1], got {ratio!r}")
        per_tile = (read("image_size") // read("patch_size")) ** 2 // round(1 / ratio**2)
        tiles = LLAMA4_MAX_TILES + 1
        return VisionEncoder(params=params, tokens_per_item=tiles * per_tile, pixels_per_item=tiles * pixels)
    tokens = _reader(config, where)("mm_tokens_per_image", 256)
    return VisionEncoder(params=params, tokens_per_item=tokens, pixels_per_item=pixels)


# --------------------------------------------------------------------------------------------
# Weight format
# --------------------------------------------------------------------------------------------


def _bits_value(bits: object, method: str, where: str) -> str:
    if bits == 4:
        return "int4"
    if bits == 8:
        return "int8"
    raise ParameterError(
        f"{where}: quantization_config {method!r} with bits={bits!r}; budgetlab models 4- and 8-bit "
        "weights (EngineConfig.quantization 'int4' or 'int8')"
    )


def _compressed_tensors(qc: Mapping[str, object], where: str) -> str:
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ParameterError(f"{where}: compressed-tensors quantization_config without config_groups")
    values = set()
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping):
            raise ParameterError(f"{where}: compressed-tensors config group without a 'weights' entry: {group!r}")
        bits, kind, size = weights.get("num_bits"), weights.get("type"), weights.get("group_size")
        if kind == "float" and bits == 8:
            values.add("fp8")
        elif kind == "float" and bits == 4 and size == 16:
            values.add("nvfp4")
        elif kind == "float" and bits == 4 and size == 32:
            values.add("mxfp4")
        elif kind == "int":
            values.add(_bits_value(bits, "compressed-tensors", where))
        else:
            raise ParameterError(
                f"{where}: compressed-tensors weights {kind!r} of {bits!r} bits (group {size!r}) are not modelled"
            )
    if len(values) > 1:
        raise ParameterError(f"{where}: compressed-tensors groups mix weight formats {sorted(values)}")
    return values.pop()


def hf_quantization(config: Mapping[str, object], where: str = "the config dict") -> str | None:
    """The :attr:`~budgetlab.specs.EngineConfig.quantization` value of a checkpoint's
    ``quantization_config`` (``None`` without one).

    ``mxfp4`` (GPT-OSS) → ``"mxfp4"``; ``fp8`` with or without ``weight_block_size`` (DeepSeek V3,
    Qwen FP8) → ``"fp8"`` (a 128×128 block's FP32 scale adds 0.02 %); ``modelopt`` /
    ``modelopt_fp4`` ``NVFP4`` → ``"nvfp4"`` and ``FP8`` → ``"fp8"``; ``compressed-tensors`` by
    its weight groups (float 8 → ``"fp8"``, float 4 in groups of 16 → ``"nvfp4"``, of 32 →
    ``"mxfp4"``, int 8/4 → ``"int8"``/``"int4"``); ``awq``/``gptq`` (and their ``_marlin``
    forms) by ``bits`` → ``"int4"``/``"int8"``; ``bitsandbytes`` 8-bit → ``"int8"``.

    Raises
    ------
    ParameterError
        A method or bit width budgetlab does not model, named.
    """
    config_qc = config.get("quantization_config")
    if config_qc is None:
        text = config.get("text_config")
        config_qc = text.get("quantization_config") if isinstance(text, Mapping) else None
    if config_qc is None:
        return None
    if not isinstance(config_qc, Mapping):
        raise ParameterError(f"{where}: quantization_config must be an object, got {config_qc!r}")
    method = str(config_qc.get("quant_method", "")).lower()
    if method == "mxfp4":
        return "mxfp4"
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(config_qc.get("quant_algo", "")).upper()
        if algo in ("NVFP4", "FP4"):
            return "nvfp4"
        if algo == "FP8":
            return "fp8"
        raise ParameterError(f"{where}: modelopt quant_algo {algo!r} is not modelled (NVFP4 and FP8 are)")
    if method == "compressed-tensors":
        return _compressed_tensors(config_qc, where)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = config_qc.get("bits", config_qc.get("w_bit"))
        return _bits_value(bits if is_int(bits) else None, method, where)
    if method == "bitsandbytes" and config_qc.get("load_in_8bit"):
        return "int8"
    raise ParameterError(
        f"{where}: quantization_config quant_method {method or '(none)'!r} is not modelled; budgetlab reads "
        "mxfp4, fp8, modelopt (NVFP4/FP8), compressed-tensors, awq, gptq and 8-bit bitsandbytes. Pass "
        "EngineConfig(quantization=...) yourself with the closest format"
    )
