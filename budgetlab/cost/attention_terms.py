"""The step cost of layers that are not full attention: sliding window, chunked local, MLA, Mamba.

:class:`~budgetlab.cost.CalibratedCost` prices a model whose
:attr:`~budgetlab.specs.ModelSpec.attention` layout mixes layer kinds
(:mod:`budgetlab.attention`) with the one step formula of :mod:`budgetlab.cost.step_terms`.
The full-attention layers keep the terms of a model without a layout (``kv_read`` and
``attention_math`` over their own layer count); the other kinds add the terms below, computed
by :func:`layout_step`. A model without a layout has no such term, and its step is bit for
bit what it was.

Which tokens a layer attends to
-------------------------------
A query at position ``p`` (0-based) attends to keys at positions ``[lo(p), p]``: ``lo = 0``
for full attention and MLA, ``p − W + 1`` for a sliding window of ``W`` tokens (vLLM passes
``(W − 1, 0)`` as FlashAttention's window, ``v1/attention/backends/flash_attn.py``), and
``⌊p / C⌋ × C`` for chunked local attention of ``C``-token chunks (Llama 4;
``make_local_attention_virtual_batches``). A prefill chunk of ``m`` tokens after ``c`` cached
ones (a decode is ``m = 1``) therefore

* attends to ``pairs = Σ_{p=c}^{c+m−1} (p − lo(p) + 1)`` (query, key) pairs
  (:func:`attended_pairs`): ``m c + m (m + 1) / 2`` for full attention, the same sum with
  every term capped at ``W`` for a sliding window, and ``S(c + m) − S(c)`` with
  ``S(p) = ⌊p / C⌋ C (C + 1) / 2 + r (r + 1) / 2``, ``r = p mod C``, for chunked local;
* reads ``c − lo(c)`` cached tokens of KV (:func:`cached_tokens_read`): ``c``, ``min(c, W − 1)``,
  ``c mod C``; its own new keys and values stay on chip.

**Decodes.** A :class:`~budgetlab.specs.Batch` records the decodes' count ``n`` and the sum
``Σc`` of their contexts, not each context. A sliding-window layer prices them as ``n``
decodes of equal context: it reads ``min(Σc, n (W − 1))`` tokens and attends to ``min(Σc + n,
n W)`` pairs, exact whenever no decode's context is below ``W − 1`` while another's is above
(and always for one decode); a chunked-local layer reads ``n × ((Σc / n) mod C)``, exact when
the contexts are equal.

The terms [s]
-------------
Per kind with ``L_k`` layers, on ``tp`` GPUs, bandwidth ``B × bandwidth_efficiency`` and
FLOP rate ``F × flop_efficiency × tp``:

``kv_read`` (memory roof, with ``kv_reads``)
    Sliding-window and chunked-local layers: tokens read ×
    ``L_k × 2 × KV heads × head_dim × element / min(tp, KV heads)``
    (:func:`~budgetlab.memory.layer_kv_bytes_per_token`). MLA layers: tokens read (every
    cached token) × ``L_mla × (kv_lora_rank + qk_rope_head_dim) × element``: the latent,
    which tensor parallelism does not split, so every GPU reads all of it.
``state_read`` (memory roof, with ``kv_reads``)
    Mamba / linear-attention layers read their state and write it back once per request per
    step: ``L_mamba × state_per_gpu × (reads + writes)``, ``state_per_gpu``
    (:func:`~budgetlab.memory.mamba_state_bytes_per_gpu`) the layout's ``mamba_state_bytes``
    / ``tp``; every decode reads and writes, every prefill chunk writes and reads only when
    it continues a request (``c > 0``; vLLM starts a first chunk from a zero state,
    ``has_initial_states``).
``attention_math`` (compute roof, with ``attention``)
    Sliding-window and chunked-local layers: ``4 × L_k × heads × head_dim × pairs`` (``QKᵀ``
    and ``AV``, 2 FLOPs per multiply-add each), as full attention. MLA layers run one of
    vLLM's two paths (``model_executor/layers/attention/mla_attention.py``, vLLM 0.33): a
    request with at most :func:`mla_decode_max_query_len` query tokens runs the absorbed,
    "data-movement friendly" MQA path -- ``2 × heads × (kv_lora_rank + qk_rope_head_dim)``
    FLOPs per pair for ``QKᵀ`` over the latent and ``2 × heads × kv_lora_rank`` for ``AV`` --
    and a longer prefill chunk the "compute friendly" MHA path -- ``2 × heads ×
    (qk_nope_head_dim + qk_rope_head_dim) + 2 × heads × v_head_dim`` per pair.
``mla_projection`` (compute roof, with ``attention``)
    The absorbed projections of the MQA path (per query token and head ``q_nope · W_UK``,
    ``2 × qk_nope_head_dim × kv_lora_rank`` FLOPs, and ``o · W_UV``, ``2 × kv_lora_rank ×
    v_head_dim``; their weights, ``kv_b_proj``, are read once per step with the other
    weights) cost per token what the MHA path's up-projection of the new tokens' latents
    costs: ``2 × heads × kv_lora_rank × (qk_nope_head_dim + v_head_dim)`` FLOPs per layer,
    twice ``kv_b_proj``'s parameters. The linear math (``2 × params`` per token) already
    counts them. What it does not count is the MHA path's up-projection of the *cached*
    context (``cache_kv_c_chunk @ W_UK``, ``@ W_UV``): ``c × 2 × heads × kv_lora_rank ×
    (qk_nope_head_dim + v_head_dim) × L_mla`` FLOPs per chunk. That is this term.
``recurrent_math`` (compute roof, with ``attention``)
    The recurrent update of Mamba / linear-attention layers (their in- and out-projections
    are linear layers, counted in ``2 × params``): :data:`RECURRENT_FLOPS_PER_STATE_ELEMENT`
    FLOPs per state element per token, ``state elements = mamba_state_bytes /
    dtype bytes`` over the TP group.

Verifying decodes (speculative decoding)
----------------------------------------
A decode that verifies ``d`` drafts over a context of ``c`` tokens runs ``q = 1 + d`` queries:
query ``i`` (1 to ``q``) attends to ``c + i`` keys, while the decode reads its ``c`` cached tokens
once (the drafts' own keys and values are computed in the step, as a chunk's are). The
:class:`~budgetlab.specs.Batch` gives the decodes' count ``n``, the sum ``Σc`` of their contexts
and the sum ``D`` of their drafts; the drafts are taken as shared equally, ``q̄ = 1 + D / n``
(exact for a uniform decode, where every decode verifies ``k``). The drafts' queries then add
(:func:`draft_pairs`) ``Σ_r Σ_{i=2}^{q_r} (c_r + i) = D × (Σc / n + (q̄ + 2) / 2)`` pairs per
full-attention layer over the decodes' ``Σc + n``: the term ``draft_attention``. Per layer kind:
MLA layers run them on the absorbed decode path (vLLM raises an MLA backend's
``reorder_batch_threshold`` to ``1 + k`` when it supports speculative decoding,
``AttentionMetadataBuilder._init_reorder_batch_threshold``, ``v1/attention/backend.py``), the same
pairs; a sliding window caps them at ``D × W``; a chunked-local layer counts ``D × ((Σc / n) mod C +
(q̄ + 2) / 2)``, capped at ``D × C``; a Mamba layer adds the drafts' recurrent updates
(``recurrent_math``), its state read and written once per request as before.

Sources: vLLM 0.33's attention backends and MLA module cited above; DeepSeek-V2 (arXiv
2405.04434, §2.1) for MLA's absorbed projections; Mamba-2 (Dao & Gu 2024, §3) and Gated
DeltaNet (Yang et al. 2024) for the recurrent state update.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from budgetlab.memory import (
    activation_dtype_bytes,
    kv_bytes_per_token,
    layer_kv_bytes_per_token,
    mamba_state_bytes_per_gpu,
)
from budgetlab.specs import HardwareSpec, ModelSpec

__all__ = [
    "RECURRENT_FLOPS_PER_STATE_ELEMENT",
    "HOPPER_MLA_DECODE_MAX_QUERY_LEN",
    "LayoutCost",
    "LayoutStep",
    "attended_pairs",
    "cached_tokens_read",
    "draft_pairs",
    "full_attention_layers",
    "full_kv_bytes_per_token",
    "layout_cost",
    "layout_step",
    "mla_decode_max_query_len",
]

RECURRENT_FLOPS_PER_STATE_ELEMENT = 6.0
"""FLOPs one token's recurrent update costs per state element of a Mamba / linear-attention
layer [FLOP]: the state update (decay times state plus an outer product, about two
multiply-adds per element in Mamba-2's ``h ← exp(Δ A) h + Δ B xᵀ`` and Gated DeltaNet's
delta rule) and the read-out ``y = C h`` (one multiply-add), 2 FLOPs each."""

HOPPER_MLA_DECODE_MAX_QUERY_LEN = 512
"""Longest request (query tokens in the step) vLLM runs on MLA's absorbed decode path on a
Hopper GPU [tokens]: FlashAttention MLA, the first MLA backend on compute capability 9.x, has
``reorder_batch_threshold = 512`` ("process small prefills with decode pathway",
``v1/attention/backends/mla/flashattn_mla.py``); FlashInfer MLA (Blackwell) and Triton MLA keep
the default 1 (decodes only)."""

# H100, H200, H800, H20, GH200 as a word (compute capability 9.0)
_HOPPER = re.compile(r"(?<![a-z0-9])g?h(100|200|800|20)(?![0-9])")


def mla_decode_max_query_len(hardware: HardwareSpec) -> int:
    """Query tokens up to which vLLM runs a request on MLA's absorbed path on ``hardware``
    [tokens]: :data:`HOPPER_MLA_DECODE_MAX_QUERY_LEN` on a Hopper GPU (read from the catalog
    slug and name), else 1."""
    hopper = _HOPPER.search(f"{hardware.slug} {hardware.name}".lower())
    return HOPPER_MLA_DECODE_MAX_QUERY_LEN if hopper else 1


def full_attention_layers(model: ModelSpec) -> int:
    """Full-attention (grouped-query) layers of ``model`` [count]: every layer without a layout."""
    return model.num_layers if model.attention is None else model.attention.count("full")


def full_kv_bytes_per_token(
    model: ModelSpec, *, tp: int = 1, dtype: str = "auto", kv_cache_dtype: str = "auto"
) -> int | float:
    """KV bytes per token the full-attention layers store on one GPU [B]:
    :func:`~budgetlab.memory.kv_bytes_per_token` without a layout, else the full layers'
    count × :func:`~budgetlab.memory.layer_kv_bytes_per_token` ``(model, "full")``."""
    if model.attention is None:
        return kv_bytes_per_token(model, tp=tp, dtype=dtype, kv_cache_dtype=kv_cache_dtype)
    one = layer_kv_bytes_per_token(model, "full", tp=tp, dtype=dtype, kv_cache_dtype=kv_cache_dtype)
    return full_attention_layers(model) * one


def _minimum(a: Any, b: Any) -> Any:
    return min(a, b) if isinstance(a, float) and isinstance(b, float) else np.minimum(a, b)


def _maximum(a: Any, b: Any) -> Any:
    return max(a, b) if isinstance(a, float) and isinstance(b, float) else np.maximum(a, b)


def _floor(a: Any) -> Any:
    return float(math.floor(a)) if isinstance(a, float) else np.floor(a)


def _chunk_prefix(p: Any, size: float) -> Any:
    """``S(p)``: pairs of positions ``0 .. p − 1`` under chunked local attention of ``size``."""
    whole = _floor(p / size)
    r = p - whole * size
    return whole * (size * (size + 1.0) / 2.0) + r * (r + 1.0) / 2.0


def attended_pairs(kind: str, m: Any, c: Any, size: float | None = None) -> Any:
    """(query, key) pairs a chunk of ``m`` new tokens after ``c`` cached ones attends to in one
    layer of ``kind`` [count] (floats or arrays of float).

    ``"full"`` and ``"mla"``: ``m c + m (m + 1) / 2`` (the operations of a model without a
    layout). ``"sliding_window"`` (``size`` = W): the keys of position ``p`` capped at ``W``:
    ``k (2 (c + 1) + k − 1) / 2 + W (m − k)`` with ``k = max(0, min(c + m, W) − c)`` positions
    under the cap. ``"chunked_local"`` (``size`` = C): ``S(c + m) − S(c)`` (module docstring).
    """
    if kind in ("full", "mla") or size is None:
        return m * c + m * (m + 1.0) / 2.0
    if kind == "sliding_window":
        under = _minimum(m, _maximum(0.0, _minimum(c + m, size) - c))
        return under * (2.0 * (c + 1.0) + under - 1.0) / 2.0 + size * (m - under)
    return _chunk_prefix(c + m, size) - _chunk_prefix(c, size)


def draft_pairs(num_decodes: Any, decode_context: Any, drafts: Any) -> Any:
    """(query, key) pairs the drafts of ``num_decodes`` verifying decodes add in one full-attention
    layer [count]: ``D × (Σc / n + (q̄ + 2) / 2)`` with ``q̄ = 1 + D / n`` (module docstring);
    0 without drafts. Floats or arrays."""
    decodes = _maximum(num_decodes, 1.0)
    return drafts * (decode_context / decodes + (1.0 + drafts / decodes + 2.0) / 2.0)


def cached_tokens_read(kind: str, c: Any, size: float | None = None) -> Any:
    """Cached tokens whose KV a chunk after ``c`` cached tokens reads in one layer of ``kind``
    [tokens]: ``c`` (full, MLA), ``min(c, W − 1)`` (sliding window), ``c mod C`` (chunked)."""
    if kind in ("full", "mla") or size is None:
        return c
    if kind == "sliding_window":
        return _minimum(c, size - 1.0)
    return c - _floor(c / size) * size


@dataclass(frozen=True, slots=True)
class LayoutCost:
    """A cost's constants for the layers that are not full attention (module docstring).

    Every ``*_s_per_*`` is over all layers of its kind, at the cost's bandwidth or FLOP rate.

    Attributes
    ----------
    local : tuple of (str, float, float, float)
        One entry per sliding-window or chunked-local kind present: ``(kind, size [tokens],
        KV read [s per token], attention math [s per pair])``.
    mla_kv_s_per_token : float
        Latent read of all MLA layers [s per token]; 0 without MLA layers.
    mla_absorbed_s_per_pair, mla_mha_s_per_pair : float, float
        Attention math of all MLA layers on the absorbed (MQA) and the MHA path [s per pair].
    mla_projection_s_per_token : float
        Up-projection of one cached latent through ``W_UK`` and ``W_UV`` in all MLA layers on
        the MHA path [s per cached token].
    mla_decode_max_query_len : int
        Longest chunk run on the absorbed path [tokens] (:func:`mla_decode_max_query_len`).
    state_s_per_access : float
        One read or one write of every Mamba layer's state for one request, on one GPU [s].
    recurrent_s_per_token : float
        Recurrent update of every Mamba layer for one token [s].
    """

    local: tuple[tuple[str, float, float, float], ...]
    mla_kv_s_per_token: float
    mla_absorbed_s_per_pair: float
    mla_mha_s_per_pair: float
    mla_projection_s_per_token: float
    mla_decode_max_query_len: int
    state_s_per_access: float
    recurrent_s_per_token: float


class LayoutStep(NamedTuple):
    """A step's terms from :class:`LayoutCost` [s] (floats, or arrays for vectorized steps)."""

    kv_s: Any
    state_s: Any
    attention_s: Any
    projection_s: Any
    recurrent_s: Any
    draft_attention_s: Any = 0.0  # the drafts' queries' attention (verifying decodes); 0.0 without drafts

    @property
    def memory_s(self) -> Any:
        """Seconds on the memory roof: KV and state traffic."""
        return self.kv_s + self.state_s

    @property
    def compute_s(self) -> Any:
        """Seconds on the compute roof: attention (the drafts' included), projection and recurrent
        math (``+ 0.0`` without drafts: the same bits)."""
        return self.attention_s + self.projection_s + self.recurrent_s + self.draft_attention_s


def layout_cost(cost: Any, bandwidth: float, flop_rate: float) -> LayoutCost | None:
    """The :class:`LayoutCost` of a :class:`~budgetlab.cost.CalibratedCost` (``None`` for a model
    without a layout, or whose layers are all full attention): ``bandwidth`` [B/s] and
    ``flop_rate`` [FLOP/s over the TP group] as achieved."""
    m: ModelSpec = cost.model
    layout = m.attention
    if layout is None or layout.count("full") == layout.num_layers:
        return None
    deployment = {"tp": cost.tp, "dtype": cost.dtype, "kv_cache_dtype": cost.kv_cache_dtype}
    pair_flops = 4.0 * m.num_attention_heads * m.head_dim
    local = []
    for kind, size in (("sliding_window", layout.sliding_window), ("chunked_local", layout.attention_chunk_size)):
        n = layout.count(kind)
        if n and size is not None:
            kv_bytes = n * layer_kv_bytes_per_token(m, kind, **deployment)
            local.append((kind, float(size), kv_bytes / bandwidth, n * pair_flops / flop_rate))
    n_mla, heads = layout.count("mla"), m.num_attention_heads
    rank, rope = layout.kv_lora_rank or 0, layout.qk_rope_head_dim or 0
    nope = layout.qk_nope_head_dim or m.head_dim
    value = layout.v_head_dim or m.head_dim
    mla_kv = n_mla * layer_kv_bytes_per_token(m, "mla", **deployment) if n_mla else 0.0
    n_mamba = layout.count("mamba")
    state_elements = (layout.mamba_state_bytes or 0) / activation_dtype_bytes(m, cost.dtype)
    return LayoutCost(
        local=tuple(local),
        mla_kv_s_per_token=mla_kv / bandwidth,
        mla_absorbed_s_per_pair=n_mla * (2.0 * heads * (rank + rope) + 2.0 * heads * rank) / flop_rate,
        mla_mha_s_per_pair=n_mla * (2.0 * heads * (nope + rope) + 2.0 * heads * value) / flop_rate,
        mla_projection_s_per_token=n_mla * 2.0 * heads * rank * (nope + value) / flop_rate,
        mla_decode_max_query_len=mla_decode_max_query_len(cost.hardware),
        state_s_per_access=n_mamba * mamba_state_bytes_per_gpu(m, tp=cost.tp) / bandwidth,
        recurrent_s_per_token=n_mamba * RECURRENT_FLOPS_PER_STATE_ELEMENT * state_elements / flop_rate,
    )


def _decode_terms(lc: LayoutCost, n: Any, context: Any) -> list[Any]:
    """``[kv_s, state_s, attention_s, projection_s, recurrent_s]`` of ``n`` decodes whose
    contexts sum to ``context`` (floats or arrays; the same operations either way)."""
    kv_s = context * lc.mla_kv_s_per_token
    attention_s = (context + n) * lc.mla_absorbed_s_per_pair
    for kind, size, kv_per_token, per_pair in lc.local:
        if kind == "sliding_window":
            read, pairs = _minimum(context, n * (size - 1.0)), _minimum(context + n, n * size)
        else:
            mean = context / _maximum(n, 1.0)
            read = n * (mean - _floor(mean / size) * size)
            pairs = read + n
        kv_s = kv_s + read * kv_per_token
        attention_s = attention_s + pairs * per_pair
    state_s = (n + n) * lc.state_s_per_access
    return [kv_s, state_s, attention_s, 0.0 * n, n * lc.recurrent_s_per_token]


def _draft_terms(lc: LayoutCost, n: float, context: float, drafts: float) -> tuple[float, float]:
    """``(draft attention [s], recurrent math [s])`` the drafts of ``n`` verifying decodes add in the
    layers other than full attention (module docstring)."""
    full_pairs = float(draft_pairs(n, context, drafts))
    attention_s = full_pairs * lc.mla_absorbed_s_per_pair
    mean_query = 1.0 + drafts / max(n, 1.0)
    for kind, size, _kv_per_token, per_pair in lc.local:
        if kind == "sliding_window":
            pairs = min(full_pairs, drafts * size)
        else:
            mean = context / max(n, 1.0)
            pairs = min(drafts * (mean - math.floor(mean / size) * size + (mean_query + 2.0) / 2.0), drafts * size)
        attention_s = attention_s + pairs * per_pair
    return attention_s, drafts * lc.recurrent_s_per_token


def _chunk_terms(lc: LayoutCost, m: Any, c: Any) -> list[Any]:
    """The terms of one prefill chunk of ``m`` tokens after ``c`` cached ones (floats, or
    arrays of one chunk per step)."""
    scalar = isinstance(m, float)
    absorbed = m <= lc.mla_decode_max_query_len  # vLLM runs a short chunk as a decode
    absorbed_s, mha_s = lc.mla_absorbed_s_per_pair, lc.mla_mha_s_per_pair
    per_pair = (absorbed_s if absorbed else mha_s) if scalar else np.where(absorbed, absorbed_s, mha_s)
    cached_projection_s = c * lc.mla_projection_s_per_token
    projection_s = (
        (0.0 if absorbed else cached_projection_s) if scalar else np.where(absorbed, 0.0, cached_projection_s)
    )
    kv_s = c * lc.mla_kv_s_per_token
    attention_s = attended_pairs("mla", m, c) * per_pair
    for kind, size, kv_per_token, local_per_pair in lc.local:
        kv_s = kv_s + cached_tokens_read(kind, c, size) * kv_per_token
        attention_s = attention_s + attended_pairs(kind, m, c, size) * local_per_pair
    accesses = (2.0 if c > 0 else 1.0) if scalar else np.where(c > 0, 2.0, 1.0)  # write; read if continued
    return [kv_s, accesses * lc.state_s_per_access, attention_s, projection_s, m * lc.recurrent_s_per_token]


def layout_step(
    lc: LayoutCost,
    num_decodes: Any,
    decode_context: Any,
    chunks: tuple[Any, ...] = (),
    contexts: tuple[Any, ...] = (),
    drafts: float = 0.0,
) -> LayoutStep:
    """The terms of a step of ``num_decodes`` decodes (contexts summing to ``decode_context``)
    verifying ``drafts`` drafts in all, and prefill ``chunks`` after ``contexts`` cached tokens
    each [s] (module docstring).

    ``num_decodes`` and ``decode_context`` may be floats or arrays (a decode run, then without
    drafts); a chunk may be an array of one chunk per step (:meth:`CalibratedCost.step_time_s
    <budgetlab.cost.CalibratedCost.step_time_s>`), then with no decodes.
    """
    terms = _decode_terms(lc, num_decodes, decode_context)
    for chunk, context in zip(chunks, contexts, strict=True):
        array = isinstance(chunk, np.ndarray)
        m, c = (chunk, context) if array else (float(chunk), float(context))
        for i, term in enumerate(_chunk_terms(lc, m, c)):
            terms[i] = terms[i] + term
    if not drafts:
        return LayoutStep(*terms)
    draft_attention_s, recurrent_s = _draft_terms(lc, float(num_decodes), float(decode_context), float(drafts))
    terms[4] = terms[4] + recurrent_s
    return LayoutStep(terms[0], terms[1], terms[2], terms[3], terms[4], draft_attention_s)
