"""Any model from its Hugging Face ``config.json``: a :class:`~budgetlab.specs.ModelSpec` whose
parameter count is derived from the architecture and cross-checked against a published total.

The catalog (:mod:`budgetlab.catalog`) holds the models budgetlab ships; this module builds the
same record for any decoder-only transformer whose ``config.json`` uses the Llama-style keys that
Llama, Mistral, Mixtral, Qwen2, Qwen3 (dense and MoE), Gemma, Gemma 2, Granite and Phi-3/4 share
(`Hugging Face config docs <https://huggingface.co/docs/transformers/main_classes/configuration>`_;
the per-model pages such as ``model_doc/llama#transformers.LlamaConfig`` list each key and its
default). It works offline, from a local file, a folder holding ``config.json`` or an already
parsed dict. The catalog's own model rows are built through the same arithmetic
(``tests/test_hf_config.py`` checks each one against its config).

The count, per decoder layer (``h`` = ``hidden_size``, ``d`` = ``head_dim``, ``n_q`` / ``n_kv`` =
query / KV heads, ``f`` = MLP inner width, ``E`` = experts):

* attention: ``h·n_q·d`` (q) + ``2·h·n_kv·d`` (k, v) + ``n_q·d·h`` (o), plus biases where the
  family has them (Qwen2: q, k, v; ``attention_bias: true``: q, k, v and o) and the per-head
  q/k RMSNorm weights of Qwen3 and Gemma 3 (``2·d``);
* MLP: a gated MLP of three matrices, ``3·h·f`` (gate, up, down), once for a dense model and
  ``E`` times for a mixture of experts, plus the router ``h·E``;
* norms: two RMSNorm weight vectors of ``h`` (four in Gemma 2 and Gemma 3);

and once: the token embedding ``vocab·h``, the final norm ``h`` and the output projection
``vocab·h`` unless ``tie_word_embeddings``. Active parameters per token count ``top_k`` experts
instead of ``E``. Rotary embeddings have no weights. GPT-OSS, Llama 4, DeepSeek V2/V3, Kimi K2,
Qwen3-Next and Qwen3.5, whose layers differ, are counted layer by layer
(:func:`budgetlab.hf_families.layer_params`); a multimodal wrapper counts its language model only.

Examples
--------
>>> from budgetlab.hf_config import model_from_hf_config
>>> spec = model_from_hf_config(
...     {"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
...      "intermediate_size": 16, "vocab_size": 10, "tie_word_embeddings": True},
...     slug="toy",
... )
>>> int(spec.num_params), spec.head_dim
(1272, 4)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from budgetlab._checks import (
    MAX_DTYPE_BYTES,
    MAX_MODEL_DIMENSION,
    MAX_PARAMS,
    flag,
    fraction_in,
    int_at_least,
    is_int,
    number_in,
)
from budgetlab.attention import AttentionLayout
from budgetlab.catalog import model as catalog_model
from budgetlab.errors import ParameterError, UnknownNameError
from budgetlab.hf_families import attention_layout, hf_quantization, layer_params, refuse_unsupported
from budgetlab.specs import ModelSpec

__all__ = [
    "model_from_hf_config",
    "read_hf_config",
    "hf_quantization",
    "HFArchitecture",
    "ParamCount",
    "DEFAULT_PARAMS_RTOL",
    "DTYPE_BYTES",
    "TIED_BY_DEFAULT",
]

DEFAULT_PARAMS_RTOL = 0.01
"""Relative tolerance of the cross-check against a published parameter count [-]: 1 %. Model
cards round to three significant figures (at most 0.5 %)."""

DTYPE_BYTES: Mapping[str, int] = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 2, "float": 2}
"""Bytes per weight that vLLM's ``--dtype auto`` serves a checkpoint's ``torch_dtype`` in [B].
``float32`` is 2 on purpose: vLLM serves a float32 checkpoint in 16 bits under ``auto``
(``vllm/config/model.py``, ``_resolve_auto_dtype``); pass ``dtype_bytes=4`` for ``--dtype float32``."""

TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
"""``model_type`` values whose transformers config class defaults ``tie_word_embeddings`` to
true (``GemmaConfig``, ``Gemma2Config``, ``Gemma3TextConfig``); every other family read here
(``LlamaConfig``, ``MistralConfig``, ``Qwen2Config``, ``Qwen3Config``, ...) defaults to false."""

_QKV_BIAS_TYPES = frozenset({"qwen2", "qwen2_moe"})
"""Families whose q, k and v projections always carry a bias (``Qwen2Attention``: ``bias=True``)."""
_QK_NORM_TYPES = frozenset({"qwen3", "qwen3_moe", "gemma3", "gemma3_text"})
"""Families with per-head RMSNorm weights on queries and keys (``q_norm``, ``k_norm``: ``head_dim`` each)."""
_FOUR_NORM_TYPES = frozenset({"gemma2", "gemma3", "gemma3_text"})
"""Families with four norms per layer (pre/post attention, pre/post feed-forward)."""


_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
"""The catalog's slug rule (:mod:`budgetlab.catalog`): lower case, digits, '.', '-', '_'."""

_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")


# --------------------------------------------------------------------------------------------
# The count
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ParamCount:
    """Where a model's parameters are [count], per matrix group.

    Attributes
    ----------
    embedding : int
        Token embedding, ``vocab_size × hidden_size``.
    lm_head : int
        Output projection, ``vocab_size × hidden_size``; 0 when tied to the embedding.
    attention_per_layer : int
        q, k, v, o projections with their biases and q/k norms, one layer.
    mlp_per_expert : int
        One gated MLP (gate, up, down with any biases): the dense MLP, or one expert.
    router_per_layer : int
        The MoE router ``hidden_size × num_experts``; 0 for a dense model.
    norms_per_layer : int
        RMSNorm weights of one layer.
    final_norm : int
        The norm before the output projection.
    num_layers : int
        Decoder layers.
    num_experts : int
        Experts per MoE layer; 1 for a dense model.
    num_experts_per_token : int
        Experts each token uses; 1 for a dense model.
    per_layer : tuple of (int, int)
        For a model whose layers differ (:data:`budgetlab.hf_families.FAMILY_TYPES`: dense and MoE
        layers, linear-attention layers, shared experts, MLA), every layer's parameters with all
        experts and with the experts one token uses, norms included [count]; they replace the
        uniform per-layer sum. Empty (default) for the uniform families.
    """

    embedding: int
    lm_head: int
    attention_per_layer: int
    mlp_per_expert: int
    router_per_layer: int
    norms_per_layer: int
    final_norm: int
    num_layers: int
    num_experts: int
    num_experts_per_token: int
    per_layer: tuple[tuple[int, int], ...] = ()

    def _with_experts(self, experts: int, *, which: int) -> int:
        outside = self.embedding + self.lm_head + self.final_norm
        if self.per_layer:
            return sum(layer[which] for layer in self.per_layer) + outside
        per_layer = self.attention_per_layer + experts * self.mlp_per_expert + self.router_per_layer
        return self.num_layers * (per_layer + self.norms_per_layer) + outside

    @property
    def total(self) -> int:
        """Every parameter, all experts included [count]."""
        return self._with_experts(self.num_experts, which=0)

    @property
    def active(self) -> int:
        """Parameters one token uses: ``num_experts_per_token`` experts, router included [count]."""
        return self._with_experts(self.num_experts_per_token, which=1)

    @property
    def non_embedding(self) -> int:
        """``total`` without the embedding and the untied output projection, as model cards
        quote it [count]."""
        return self.total - self.embedding - self.lm_head


@dataclass(frozen=True, kw_only=True)
class HFArchitecture:
    """The architecture a ``config.json`` describes, every default resolved.

    Attributes
    ----------
    model_type : str
        The config's ``model_type`` (``""`` when absent).
    num_layers : int
        ``num_hidden_layers``.
    hidden_size : int
        ``hidden_size`` [elements].
    num_attention_heads : int
        ``num_attention_heads``.
    num_kv_heads : int
        ``num_key_value_heads``; default: ``num_attention_heads`` (no grouped-query attention).
    head_dim : int
        ``head_dim`` [elements]; default ``hidden_size / num_attention_heads`` (Gemma and Qwen3
        set it explicitly, and it may differ from that quotient).
    intermediate_size : int
        MLP inner width [elements]; for a mixture of experts, per expert:
        ``moe_intermediate_size`` when present (Qwen3-MoE), else ``intermediate_size`` (Mixtral).
    vocab_size : int
        ``vocab_size`` [tokens].
    num_experts : int
        ``num_local_experts`` (Mixtral) or ``num_experts`` (Qwen3-MoE); default 1 (dense).
    num_experts_per_token : int
        ``num_experts_per_tok``; required for a mixture of experts, 1 for a dense model.
    tie_word_embeddings : bool
        Whether the output projection reuses the embedding; default per family
        (:data:`TIED_BY_DEFAULT`).
    qkv_bias : bool
        Biases on q, k and v (Qwen2, or ``attention_bias: true``).
    o_bias : bool
        Bias on the output projection (``attention_bias: true``).
    mlp_bias : bool
        Biases on gate, up and down (``mlp_bias: true``; default false).
    qk_norm : bool
        Per-head q/k RMSNorm weights (Qwen3, Gemma 3).
    norms_per_layer : int
        RMSNorm weight vectors per layer: 2, or 4 for Gemma 2 and Gemma 3.
    dtype_bytes : int
        Bytes per weight as served [B] (:data:`DTYPE_BYTES`; default 2).
    attention : AttentionLayout or None
        The attention kind of every layer (:func:`budgetlab.hf_families.attention_layout`);
        ``None`` when every layer is full grouped-query attention.
    layer_params : tuple of (int, int)
        Per-layer counts of the families :func:`budgetlab.hf_families.layer_params` counts
        (:attr:`ParamCount.per_layer`); empty for the uniform families.
    """

    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_experts: int = 1
    num_experts_per_token: int = 1
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    norms_per_layer: int = 2
    dtype_bytes: int = 2
    attention: AttentionLayout | None = None
    layer_params: tuple[tuple[int, int], ...] = ()

    def param_count(self) -> ParamCount:
        """The parameters of this architecture, per matrix group (see the module docstring)."""
        h, d = self.hidden_size, self.head_dim
        q_width, kv_width = self.num_attention_heads * d, self.num_kv_heads * d
        attention = h * q_width + 2 * h * kv_width + q_width * h
        if self.qkv_bias:
            attention += q_width + 2 * kv_width
        if self.o_bias:
            attention += h
        if self.qk_norm:
            attention += 2 * d
        f = self.intermediate_size
        mlp = 3 * h * f + ((2 * f + h) if self.mlp_bias else 0)
        embedding = self.vocab_size * h
        return ParamCount(
            embedding=embedding,
            lm_head=0 if self.tie_word_embeddings else embedding,
            attention_per_layer=attention,
            mlp_per_expert=mlp,
            router_per_layer=h * self.num_experts if self.num_experts > 1 else 0,
            norms_per_layer=self.norms_per_layer * h,
            final_norm=h,
            num_layers=self.num_layers,
            num_experts=self.num_experts,
            num_experts_per_token=self.num_experts_per_token,
            per_layer=self.layer_params,
        )


# --------------------------------------------------------------------------------------------
# Reading a config
# --------------------------------------------------------------------------------------------


def _load(path_or_dict: Mapping[str, object] | str | os.PathLike[str]) -> tuple[Mapping[str, object], str, str]:
    """The config as a mapping, where it came from, and the repository-like name it suggests."""
    if isinstance(path_or_dict, Mapping):
        name = path_or_dict.get("_name_or_path")
        return path_or_dict, "the config dict", name if isinstance(name, str) else ""
    if not isinstance(path_or_dict, str | os.PathLike):
        raise ParameterError(
            "path_or_dict must be a dict parsed from config.json, or the path of a config.json "
            f"(or of the folder holding it), got {path_or_dict!r}"
        )
    path = Path(path_or_dict)
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParameterError(f"no Hugging Face config at {path}: the file does not exist") from None
    except UnicodeDecodeError as exc:
        raise ParameterError(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); give the model's config.json"
        ) from None
    except OSError as exc:
        raise ParameterError(f"the Hugging Face config {path} cannot be read: {exc}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParameterError(f"{path} is not valid JSON ({exc}); give the model's config.json") from None
    except RecursionError:
        raise ParameterError(f"{path}: JSON nested too deeply to be a config.json") from None
    if not isinstance(config, dict):
        raise ParameterError(f"{path} holds a JSON {type(config).__name__}, not the object a config.json holds")
    return config, str(path), _repo_name(path)


def _repo_name(path: Path) -> str:
    """``Qwen3-8B`` for ``.../models--Qwen--Qwen3-8B/snapshots/<hash>/config.json`` (the Hugging
    Face cache), else the folder name for a ``config.json``, else the file's stem."""
    parents = path.resolve().parents
    if len(parents) > 2 and parents[1].name == "snapshots" and parents[2].name.startswith("models--"):
        return parents[2].name.split("--")[-1]
    if path.name == "config.json":
        return parents[0].name if parents else ""
    return path.stem


def _slugify(name: str) -> str:
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.strip().lower().split("/")[-1]).strip("-._")
    return slug if _SLUG_RE.match(slug) else "hf-model"


def _unwrap(config: Mapping[str, object], where: str) -> tuple[Mapping[str, object], str]:
    """The language model's keys: a multimodal wrapper's ``text_config``, the top-level dtype and
    tying filling in what it leaves out."""
    text = config.get("text_config")
    if text is None:
        return config, where
    if not isinstance(text, Mapping):
        raise ParameterError(f"{where}: text_config must be an object of the language model's keys, got {text!r}")
    merged = {key: config[key] for key in ("torch_dtype", "dtype", "tie_word_embeddings") if key in config}
    merged.update(text)
    vision = config.get("vision_config")
    tower = vision.get("model_type") if isinstance(vision, Mapping) else None
    return merged, f"{where} (its text_config{f'; the {tower} vision tower is not counted' if tower else ''})"


def _dtype_bytes(config: Mapping[str, object], where: str) -> int:
    dtype = config.get("torch_dtype", config.get("dtype"))  # transformers >= 4.56 writes "dtype"
    if dtype is None:
        return 2  # vLLM reads a missing torch_dtype as float32 and serves it in 16 bits
    if not isinstance(dtype, str) or dtype.removeprefix("torch.") not in DTYPE_BYTES:
        raise ParameterError(
            f"{where}: torch_dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}; pass dtype_bytes= "
            "(bytes per weight as served) to model_from_hf_config"
        )
    return DTYPE_BYTES[dtype.removeprefix("torch.")]


def read_hf_config(
    path_or_dict: Mapping[str, object] | str | os.PathLike[str], *, dtype_bytes: int | None = None
) -> HFArchitecture:
    """Read the architecture keys of a Hugging Face ``config.json``, every default resolved.

    Parameters
    ----------
    path_or_dict : dict, str or os.PathLike
        The parsed config, or the path of a ``config.json`` or of the folder holding it. A
        multimodal wrapper's ``text_config`` (Gemma 3, Mistral 3, LLaVA) is read instead of the
        top level; its vision encoder is not part of the result.
    dtype_bytes : int, optional
        Bytes per weight as served [B]; default from ``torch_dtype`` (:data:`DTYPE_BYTES`).

    Returns
    -------
    HFArchitecture

    Raises
    ------
    ParameterError
        A file that is missing or not a JSON object; missing required keys (all named at once);
        a value of the wrong type; query heads not a multiple of KV heads; more experts per
        token than experts; or an architecture a :class:`ModelSpec` cannot describe.
    """
    config, where, _ = _load(path_or_dict)
    return _architecture(config, where, dtype_bytes)


def _architecture(config: Mapping[str, object], where: str, dtype_bytes: int | None) -> HFArchitecture:
    config, where = _unwrap(config, where)
    refuse_unsupported(config, where)

    def value(key: str) -> object:
        return config.get(key)

    def unset(raw: object) -> bool:  # absent, null or 0 (as some dense configs write it): no experts
        return raw is None or (is_int(raw) and raw == 0)

    experts_key = "num_experts" if unset(value("num_local_experts")) else "num_local_experts"
    if unset(value(experts_key)) and not unset(value("n_routed_experts")):
        experts_key = "n_routed_experts"  # DeepSeek V2/V3, Kimi K2
    num_experts_raw = 1 if unset(value(experts_key)) else value(experts_key)
    if num_experts_raw != 1:  # checked first: whether it is an MoE decides which keys are required
        int_at_least(f"{where}: {experts_key}", num_experts_raw, 1, what="an int >= 1", maximum=MAX_MODEL_DIMENSION)
    moe = is_int(num_experts_raw) and num_experts_raw > 1  # type: ignore[operator]
    width_key = "moe_intermediate_size" if moe and value("moe_intermediate_size") is not None else "intermediate_size"
    required = [*_REQUIRED, width_key] + (["num_experts_per_tok"] if moe else [])
    missing = [key for key in required if value(key) is None]
    if missing:
        hint = (
            " A multimodal text_config often leaves out keys equal to the transformers class defaults; "
            "add them to the dict."
            if "text_config" in where
            else ""
        )
        raise ParameterError(
            f"{where} lacks the key(s) {', '.join(repr(k) for k in missing)} a ModelSpec needs "
            f"(the architecture keys are {', '.join(required)}).{hint}"
        )

    def count(key: str, raw: object, minimum: int = 1) -> int:
        return int_at_least(f"{where}: {key}", raw, minimum, what=f"an int >= {minimum}", maximum=MAX_MODEL_DIMENSION)

    layers = count("num_hidden_layers", value("num_hidden_layers"))
    hidden = count("hidden_size", value("hidden_size"))
    heads = count("num_attention_heads", value("num_attention_heads"))
    kv_raw = value("num_key_value_heads")
    kv_heads = heads if kv_raw is None else count("num_key_value_heads", kv_raw)
    if heads % kv_heads:
        raise ParameterError(
            f"{where}: num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads}); "
            "grouped-query attention shares each KV head among a whole number of query heads"
        )
    head_dim_raw = value("head_dim")
    if head_dim_raw is None and value("kv_lora_rank"):  # MLA: q/k heads are nope + rope wide
        lacking = [repr(k) for k in ("qk_nope_head_dim", "qk_rope_head_dim") if value(k) is None]
        if lacking:
            raise ParameterError(f"{where} lacks {', '.join(lacking)}, which multi-head latent attention needs")
        head_dim_raw = count("qk_nope_head_dim", value("qk_nope_head_dim")) + count(
            "qk_rope_head_dim", value("qk_rope_head_dim")
        )
    if head_dim_raw is None:
        if hidden % heads:
            raise ParameterError(
                f"{where}: no head_dim, and hidden_size ({hidden}) is not a multiple of num_attention_heads "
                f"({heads}); add the model's head_dim"
            )
        head_dim = hidden // heads
    else:
        head_dim = count("head_dim", head_dim_raw)
    num_experts = count(experts_key, num_experts_raw)
    top_k = count("num_experts_per_tok", value("num_experts_per_tok")) if moe else 1
    if top_k > num_experts:
        raise ParameterError(f"{where}: num_experts_per_tok ({top_k}) exceeds the {num_experts} experts")

    model_type_raw = value("model_type")
    if model_type_raw is not None and not isinstance(model_type_raw, str):
        raise ParameterError(f"{where}: model_type must be a string (e.g. 'llama'), got {model_type_raw!r}")
    model_type = model_type_raw or ""
    tied_raw = value("tie_word_embeddings")
    tied = model_type in TIED_BY_DEFAULT if tied_raw is None else flag(f"{where}: tie_word_embeddings", tied_raw)
    attention_bias, mlp_bias = (
        flag(f"{where}: {key}", False if value(key) is None else value(key)) for key in ("attention_bias", "mlp_bias")
    )
    if dtype_bytes is None:
        dtype_bytes = _dtype_bytes(config, where)
    else:
        dtype_bytes = int_at_least(
            "dtype_bytes", dtype_bytes, 1, what="a whole number of bytes >= 1", maximum=MAX_DTYPE_BYTES
        )
    layout = attention_layout(config, where, num_layers=layers, dtype_bytes=dtype_bytes)
    return HFArchitecture(
        model_type=model_type,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=count(width_key, value(width_key)),
        vocab_size=count("vocab_size", value("vocab_size")),
        num_experts=num_experts,
        num_experts_per_token=top_k,
        tie_word_embeddings=tied,
        qkv_bias=attention_bias or model_type in _QKV_BIAS_TYPES,
        o_bias=attention_bias,
        mlp_bias=mlp_bias,
        qk_norm=model_type in _QK_NORM_TYPES,
        norms_per_layer=4 if model_type in _FOUR_NORM_TYPES else 2,
        dtype_bytes=dtype_bytes,
        attention=layout,
        layer_params=layer_params(config, where, num_layers=layers, layout=layout),
    )


# --------------------------------------------------------------------------------------------
# The ModelSpec
# --------------------------------------------------------------------------------------------


def _check_count(derived: int, expected: float, *, what: str, against: str, rtol: float, where: str) -> None:
    off = derived / expected - 1.0
    if abs(off) > rtol:
        raise ParameterError(
            f"{where}: the architecture gives {derived:,} {what} but {against} is {expected:,.0f} "
            f"({off:+.2%}, tolerance ±{rtol:.1%}). Check the config (a mistyped width, a missing "
            "head_dim, tied embeddings), or pass the published count of this very checkpoint as "
            "expected_params" + (" (or choose another slug)" if against.startswith("the catalog") else "")
        )


def model_from_hf_config(
    path_or_dict: Mapping[str, object] | str | os.PathLike[str],
    slug: str | None = None,
    *,
    name: str | None = None,
    expected_params: float | None = None,
    expected_active_params: float | None = None,
    params_rtol: float = DEFAULT_PARAMS_RTOL,
    dtype_bytes: int | None = None,
    source: str | None = None,
) -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json``, its parameter count derived.

    Offline: nothing is downloaded. The keys read, and their defaults, follow the transformers
    config classes (`LlamaConfig <https://huggingface.co/docs/transformers/model_doc/llama>`_,
    ``MistralConfig``, ``MixtralConfig``, ``Qwen2Config``, ``Qwen3Config``, ``Qwen3MoeConfig``,
    ``GemmaConfig``, ``Gemma2Config``): see :class:`HFArchitecture`; the count is the module
    docstring's.

    Parameters
    ----------
    path_or_dict : dict, str or os.PathLike
        The parsed ``config.json``, or its path, or the folder holding it (a Hugging Face cache
        snapshot folder works). For a multimodal wrapper only the language model
        (``text_config``) is counted; its vision encoder is not.
    slug : str, optional
        Catalog-style key, lower case (``"qwen3-8b"``). Default: from the repository name in the
        path or in ``_name_or_path``, else ``"hf-model"``. When the catalog has this slug, the
        derived count is checked against that row (unless ``expected_params`` is given).
    name : str, optional
        Human-readable name; default the catalog row's name, else the repository name, else the slug.
    expected_params : float, optional
        A published total parameter count [count] to check against (the model card's, or the
        Hugging Face page's safetensors total).
    expected_active_params : float, optional
        A published active count per token [count] for a mixture of experts.
    params_rtol : float
        Relative tolerance of those checks [-], in (0, 1); default 1 %.
    dtype_bytes : int, optional
        Bytes per weight as served [B]; default from ``torch_dtype`` (:data:`DTYPE_BYTES`).
    source : str, optional
        What the spec cites; default the file's path (or ``"Hugging Face config.json"``).

    Returns
    -------
    ModelSpec
        ``num_params`` and ``num_active_params`` are the exact derived counts [count].

    Raises
    ------
    ParameterError
        Any problem :func:`read_hf_config` finds; a bad slug or tolerance; a derived count
        further than ``params_rtol`` from ``expected_params`` / ``expected_active_params`` or
        from the catalog row of ``slug``.

    Notes
    -----
    ``ModelSpec.attention`` holds the layer kinds (sliding window, chunked, MLA, Gated DeltaNet;
    :mod:`budgetlab.hf_families`). The weight format is not part of the spec: pass
    :func:`hf_quantization` of the config to ``EngineConfig(quantization=...)``.

    Examples
    --------
    >>> cfg = {"num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32,
    ...        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
    ...        "vocab_size": 151936, "tie_word_embeddings": False, "model_type": "qwen3"}
    >>> int(model_from_hf_config(cfg, slug="my-qwen3-8b", expected_params=8.19e9).num_params)
    8190735360
    """
    config, where, repo = _load(path_or_dict)
    rtol = fraction_in("params_rtol", params_rtol)
    if slug is None:
        slug = _slugify(repo) if repo else "hf-model"
    elif not isinstance(slug, str) or not _SLUG_RE.match(slug.strip().lower()):
        raise ParameterError(
            f"slug must be lower-case letters, digits, '.', '-' and '_' (e.g. 'qwen3-8b'), got {slug!r}"
        )
    slug = slug.strip().lower()
    arch = _architecture(config, where, dtype_bytes)
    counts = arch.param_count()
    if counts.total > MAX_PARAMS.value:
        raise ParameterError(
            f"{where}: the architecture gives {counts.total:.3g} parameters, more than {MAX_PARAMS.value:g} "
            f"({MAX_PARAMS.why}); check its widths and layer count"
        )

    try:
        row: ModelSpec | None = catalog_model(slug)
    except UnknownNameError:
        row = None
    checks: list[tuple[int, float, str, str]] = []
    if expected_params is not None:
        expected = number_in("expected_params", expected_params, low=0.0, low_open=True, what="a count > 0")
        checks.append((counts.total, expected, "parameters", "expected_params"))
    elif row is not None:
        checks.append((counts.total, row.num_params, "parameters", f"the catalog row {slug!r}"))
        if row.is_moe:
            checks.append((counts.active, row.num_active_params, "active parameters", f"the catalog row {slug!r}"))
    if expected_active_params is not None:
        expected = number_in(
            "expected_active_params", expected_active_params, low=0.0, low_open=True, what="a count > 0"
        )
        checks.append((counts.active, expected, "active parameters", "expected_active_params"))
    for derived, expected, what, against in checks:
        _check_count(derived, expected, what=what, against=against, rtol=rtol, where=where)

    if name is None:
        name = row.name if row is not None else (repo.split("/")[-1] if repo else slug)
    return ModelSpec(
        slug=slug,
        name=name,
        num_params=float(counts.total),
        num_active_params=float(counts.active),
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_kv_heads=arch.num_kv_heads,
        head_dim=arch.head_dim,
        intermediate_size=arch.intermediate_size,
        vocab_size=arch.vocab_size,
        num_experts=arch.num_experts,
        num_experts_per_token=arch.num_experts_per_token,
        dtype_bytes=arch.dtype_bytes,
        tie_word_embeddings=arch.tie_word_embeddings,
        attention=arch.attention,
        source=source if source is not None else (where if where != "the config dict" else "Hugging Face config.json"),
    )
