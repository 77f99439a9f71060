"""The KV pool of a model with sliding-window, chunked-local, MLA or Mamba layers, as vLLM sizes it.

:func:`~budgetlab.memory.kv_capacity` calls :func:`plan_kv_pool` for a model with an attention
layout (:attr:`~budgetlab.specs.ModelSpec.attention`); a model without one keeps the
full-attention formula of :mod:`budgetlab.memory.pool`. Each rule below names the vLLM version
it follows: the real start-up logs budgetlab is checked against are vLLM 0.19's, so where 0.33
logs differently the 0.19 rule is the one computed (the 0.33 value is given beside it).

One spec per layer (0.19 and 0.33)
----------------------------------
Every layer gets vLLM's ``KVCacheSpec``: full attention ``FullAttentionSpec``, a sliding-window
layer ``SlidingWindowSpec``, a chunked-local layer ``ChunkedLocalAttentionSpec``, an MLA layer
``MLAAttentionSpec`` (one latent "head" of ``kv_lora_rank + qk_rope_head_dim`` elements, the
same on every tensor-parallel GPU), a Mamba / linear-attention layer ``MambaSpec`` (its state,
split over the GPUs by tensor parallelism: :func:`~budgetlab.memory.mamba_state_bytes_per_gpu`).
A layer's *page* is the bytes one block of ``block_size`` tokens takes in that layer
(:func:`~budgetlab.memory.layer_kv_bytes_per_token` × ``block_size``; a Mamba layer's page is its
state).

When vLLM turns the hybrid manager off (0.19 and 0.33)
------------------------------------------------------
``--disable-hybrid-kv-cache-manager`` (``EngineConfig(kv_groups=("full",))``) and, by default in
vLLM 0.19 and 0.33, any model with chunked local attention (Llama 4: ``VllmConfig`` turns the
manager off unless ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1``, a latency
regression) make every sliding-window and chunked layer a full-attention spec: one group, every
layer keeping every token. Mamba layers cannot be converted; vLLM refuses that combination, and
so does :func:`plan_kv_pool`.

One group: every layer needs the same token slots (0.19 and 0.33)
-----------------------------------------------------------------
All layers full (MLA included) or all sliding with one window: one group of every layer
(``UniformTypeKVCacheSpecs``); a block spans one page of every layer, so ``num_gpu_blocks =
floor(kv_bytes / Σ pages)``. This is the full-attention formula for a full-attention layout.

Several groups (0.19; 0.33 packs differently when pages differ)
---------------------------------------------------------------
Otherwise the layers are grouped as :func:`budgetlab.attention.kv_cache_groups` describes
(``_get_kv_cache_groups_uniform_page_size``), after the pages are made equal:

* attention layers with a smaller page get a proportionally larger block (``block_size ×
  max_page / page``; ``unify_kv_cache_spec_page_size``), which must divide evenly;
* with Mamba layers, the attention block grows first so that an attention page holds a Mamba
  state: ``block_size = max(block_size, align × ceil(state / (align × attention bytes per
  token)))`` with ``align`` 16 (64 for MLA), and the Mamba page is padded up to the attention
  page (``HybridAttentionMambaModelConfig``, prefix caching off: ``mamba_cache_mode="none"``).
  :func:`kv_block_size` returns that block size: the scheduler must use it.

The pool then has ``num_gpu_blocks = floor(kv_bytes / page / layers_per_group)`` blocks of one
page per group layer (``get_kv_cache_config_from_groups``; padding layers count).

What vLLM logs
--------------
* "GPU KV cache size: N tokens": vLLM 0.19 logs ``num_gpu_blocks // num_groups ×
  min(block sizes)`` (``_report_kv_cache_config``; :attr:`KVPoolPlan.vllm_kv_cache_tokens`);
  vLLM 0.33 logs ``int(max_concurrency × max_model_len)`` instead
  (:attr:`KVPoolPlan.vllm033_kv_cache_tokens`). The two agree for one full-attention group.
* "Maximum concurrency for L tokens per request: X": ``num_gpu_blocks / blocks_per_request``
  (0.19 and 0.33), where a request of ``L = max_model_len`` tokens needs, per group,
  ``ceil(L / B)`` blocks (full, MLA), ``ceil(min(W − 1 + T, L) / B) + 1`` (sliding window W),
  ``ceil(min(C + T, L) / B)`` (chunked C), one block (Mamba; two with prefix caching, "align"
  mode), with ``T`` the in-flight tokens: ``max_num_batched_tokens`` in vLLM 0.19;
  ``max_concurrent_batches × max_num_batched_tokens`` in 0.33 (``in_flight_batches``).

Pipeline parallelism: the groups are formed over the whole model and projected on each stage's
layers (layer ``i`` of a kind's ``n`` groups is the kind's layers ``i::n``); each stage divides
its bytes by its own largest group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from budgetlab.attention import AttentionLayout, KVGroup, group_kind, kv_cache_groups, max_admission_blocks
from budgetlab.errors import ConfigError
from budgetlab.memory.sizes import check_tp, layer_kv_bytes_per_token, mamba_state_bytes_per_gpu
from budgetlab.specs import EngineConfig, ModelSpec

__all__ = ["KVPoolPlan", "plan_kv_pool", "kv_block_size", "hybrid_manager_enabled", "scheduler_kv_groups"]

_ATTENTION_KINDS = ("full", "sliding_window", "chunked_local", "mla")


@dataclass(frozen=True)
class KVPoolPlan:
    """How vLLM lays out the KV pool of one GPU for a model with an attention layout.

    Attributes
    ----------
    groups : tuple
        The KV-cache groups, one entry each as :attr:`EngineConfig.kv_groups
        <budgetlab.specs.EngineConfig.kv_groups>` takes them.
    layers_per_group : int
        Layers in the largest group on this GPU's stage, padding included [count].
    page_bytes : int or float
        Bytes one block takes in one layer of any group (pages unified) [B]; for one group of
        every layer (:attr:`hybrid` False) the bytes of one block across all its layers.
    block_sizes : tuple of int
        Tokens per block of each group [tokens] (a Mamba group: ``max_model_len``).
    blocks_per_request : int
        Blocks one request of ``max_model_len`` tokens can hold at most, all groups [count].
    num_gpu_blocks : int
        vLLM's ``num_gpu_blocks``, its null block included [count].
    max_model_len : int
        Tokens per request the concurrency is for [tokens].
    hybrid : bool
        Whether the groups differ (vLLM's hybrid KV cache manager at work).
    """

    groups: tuple[KVGroup, ...]
    layers_per_group: int
    page_bytes: int | float
    block_sizes: tuple[int, ...]
    blocks_per_request: int
    num_gpu_blocks: int
    max_model_len: int
    hybrid: bool

    @property
    def block_size(self) -> int:
        """Tokens per block the scheduler allocates for attention groups [tokens]."""
        return min(self.block_sizes)

    @property
    def vllm_kv_cache_tokens(self) -> int:
        """vLLM 0.19's "GPU KV cache size: N tokens": ``num_gpu_blocks // groups × block_size``."""
        return self.num_gpu_blocks // len(self.groups) * self.block_size

    @property
    def max_concurrency(self) -> float:
        """vLLM's "Maximum concurrency for max_model_len tokens per request" [requests]."""
        return self.num_gpu_blocks / self.blocks_per_request

    @property
    def vllm033_kv_cache_tokens(self) -> int:
        """vLLM 0.33's "GPU KV cache size": ``int(max_concurrency × max_model_len)`` [tokens]."""
        return int(self.max_concurrency * self.max_model_len)


def hybrid_manager_enabled(model: ModelSpec, engine: EngineConfig) -> bool:
    """Whether vLLM runs its hybrid KV cache manager for ``model`` under ``engine`` [-].

    Off when ``engine.kv_groups == ("full",)`` (``--disable-hybrid-kv-cache-manager``) and, as
    vLLM 0.19 and 0.33 do by default, for a model with chunked local attention (Llama 4).
    """
    if engine.kv_groups == ("full",):
        return False
    return model.attention is None or "chunked_local" not in model.attention.layer_kinds


def _unified_kinds(model: ModelSpec, engine: EngineConfig) -> tuple[str, ...]:
    """The layer kinds as vLLM's KV cache manager treats them (module docstring)."""
    assert model.attention is not None
    kinds = model.attention.layer_kinds
    if hybrid_manager_enabled(model, engine):
        return kinds
    if "mamba" in kinds:
        raise ConfigError(
            f"{model.name} has Mamba/linear-attention layers, which vLLM cannot serve with the hybrid "
            "KV cache manager off (kv_groups=('full',) or chunked local attention): leave kv_groups=None"
        )
    return tuple("full" if k in ("sliding_window", "chunked_local") else k for k in kinds)


def _mamba_block_size(model: ModelSpec, engine: EngineConfig, kinds: tuple[str, ...]) -> int:
    """The attention block size vLLM 0.19 sets so an attention page holds a Mamba state."""
    if "mamba" not in kinds:
        return engine.block_size
    tp = engine.tensor_parallel_size
    attention = next((k for k in kinds if k != "mamba"), None)
    if attention is None:
        return engine.block_size
    per_token = layer_kv_bytes_per_token(
        model, attention, tp=tp, dtype=engine.dtype, kv_cache_dtype=engine.kv_cache_dtype
    )
    align = 64 if attention == "mla" else 16
    state = mamba_state_bytes_per_gpu(model, tp=tp)
    return max(engine.block_size, align * math.ceil(state / (align * per_token)))


def kv_block_size(model: ModelSpec, engine: EngineConfig) -> int:
    """Tokens per KV block vLLM uses for ``model``'s attention layers under ``engine`` [tokens].

    ``engine.block_size``, except for a Mamba / linear-attention hybrid, where vLLM 0.19
    raises it until one attention page holds one layer's state (module docstring): the
    scheduler must allocate blocks of this size.
    """
    if model.attention is None:
        return engine.block_size
    return _mamba_block_size(model, engine, _unified_kinds(model, engine))


def scheduler_kv_groups(model: ModelSpec | None, engine: EngineConfig) -> tuple[tuple[KVGroup, ...], int]:
    """The KV-cache groups the scheduler allocates for, and their block size [tokens].

    ``engine.kv_groups`` when set (a what-if), with ``engine.block_size`` unless they keep the
    model's Mamba groups (then :func:`kv_block_size`, as vLLM sizes it); else the groups
    :func:`plan_kv_pool` forms for ``model`` (one ``"full"`` group for a model without a layout
    or with the hybrid manager off, all sliding layers of one window one sliding group) with
    :func:`kv_block_size`.

    Raises
    ------
    ConfigError
        Attention groups whose blocks differ in size (pages vLLM unifies by block size), which
        the scheduler does not model; a Mamba model with the hybrid manager off.
    """
    if engine.kv_groups is not None:
        mamba_groups = any(group_kind(g)[0] == "mamba" for g in engine.kv_groups)
        if (
            mamba_groups
            and model is not None
            and model.attention is not None
            and "mamba" in model.attention.layer_kinds
        ):
            return engine.kv_groups, kv_block_size(model, engine)  # the block vLLM sizes for the states
        return engine.kv_groups, engine.block_size
    if model is None or model.attention is None:
        return ("full",), engine.block_size
    kinds = _unified_kinds(model, engine)
    if len({_bucket(model.attention, k) for k in kinds}) == 1 or all(k in ("full", "mla") for k in kinds):
        return (_group_entry(model, kinds[0]),), engine.block_size
    block = _mamba_block_size(model, engine, kinds)
    tp = check_tp(model, engine.tensor_parallel_size)
    pages = {
        layer_kv_bytes_per_token(model, k, tp=tp, dtype=engine.dtype, kv_cache_dtype=engine.kv_cache_dtype)
        for k in kinds
        if k != "mamba"
    }
    if len(pages) > 1:
        raise ConfigError(
            f"{model.name}: its attention layers store different bytes per token, so vLLM gives their "
            "groups different block sizes, which budgetlab's scheduler does not model; set "
            "EngineConfig(kv_groups=...) to study it with one block size"
        )
    return tuple(entry for entry, _ in _group_layers(kinds, model)), block


def _group_layers(kinds: tuple[str, ...], model: ModelSpec) -> list[tuple[KVGroup, list[int]]]:
    """vLLM's groups and the layer indices of each (a kind's i-th group: its layers i::n)."""
    assert model.attention is not None
    layout = model.attention
    entries, _ = kv_cache_groups(AttentionLayout(kinds, **_sizes(layout, kinds)))
    buckets: dict[tuple[str, int], list[int]] = {}
    for index, kind in enumerate(kinds):
        buckets.setdefault(_bucket(layout, kind), []).append(index)
    out: list[tuple[KVGroup, list[int]]] = []
    position = 0
    for layers in buckets.values():
        n = 1
        while position + n < len(entries) and entries[position + n] == entries[position]:
            n += 1
        out.extend((entries[position], layers[i::n]) for i in range(n))
        position += n
    return out


def _bucket(layout: AttentionLayout, kind: str) -> tuple[str, int]:
    """A layer's spec identity: its kind and its size (window, chunk)."""
    size = {"sliding_window": "sliding_window", "chunked_local": "attention_chunk_size"}.get(kind)
    return (kind, getattr(layout, size) if size else 0)


def _sizes(layout: AttentionLayout, kinds: tuple[str, ...]) -> dict[str, Any]:
    """The layout's sizes that the kinds in ``kinds`` need (a unified layout drops the rest)."""
    present = set(kinds)
    wanted = {
        "sliding_window": "sliding_window",
        "attention_chunk_size": "chunked_local",
        "mamba_state_bytes": "mamba",
        "kv_lora_rank": "mla",
        "qk_rope_head_dim": "mla",
        "qk_nope_head_dim": "mla",
        "v_head_dim": "mla",
        "q_lora_rank": "mla",
    }
    return {name: getattr(layout, name) for name, kind in wanted.items() if kind in present}


def _blocks_for_request(entry: KVGroup, kind: str, block: int, length: int, in_flight: int, prefix: bool) -> int:
    """Blocks one request of ``length`` tokens may hold in one group (``max_memory_usage_bytes``):
    a window's :func:`budgetlab.attention.max_admission_blocks`, else its whole length; a Mamba
    group one block (two with prefix caching)."""
    if kind == "mamba":
        return 2 if prefix else 1
    cap = max_admission_blocks(entry, block_size=block, in_flight_tokens=in_flight, max_model_len=length)
    return math.ceil(length / block) if cap is None else cap


def plan_kv_pool(
    model: ModelSpec,
    engine: EngineConfig,
    kv_bytes: float,
    *,
    stage: int = 0,
    stage_layers: tuple[int, ...] | None = None,
    in_flight_batches: int = 1,
) -> KVPoolPlan:
    """The pool vLLM builds from ``kv_bytes`` for ``model`` (with a layout) on one GPU.

    Parameters
    ----------
    model : ModelSpec
        With :attr:`~budgetlab.specs.ModelSpec.attention` set.
    engine : EngineConfig
        ``block_size``, ``max_model_len`` (``None``: the concurrency is for ``max_num_batched_tokens``
        tokens), ``max_num_batched_tokens``, ``enable_prefix_caching``, ``kv_groups`` (only
        ``("full",)``, vLLM's ``--disable-hybrid-kv-cache-manager``, changes the pool), the
        deployment.
    kv_bytes : float
        Bytes left for the KV cache on this GPU [B].
    stage, stage_layers : int, tuple of int or None
        The pipeline stage and the layers on every stage (:func:`~budgetlab.memory.sizes.stage_layers`);
        ``None``: one stage.
    in_flight_batches : int
        Batches scheduled but not yet settled: 1 is vLLM 0.19 (the logs); vLLM 0.33's
        ``max_concurrent_batches`` is 2 with asynchronous scheduling [count].

    Raises
    ------
    ConfigError
        A model without a layout, or pages that cannot be unified (a page that does not divide
        the largest; vLLM raises ``NotImplementedError``).
    """
    if model.attention is None:
        raise ConfigError(f"{model.name} has no attention layout; its pool is the full-attention formula")
    tp = check_tp(model, engine.tensor_parallel_size)
    kinds = _unified_kinds(model, engine)
    counts = stage_layers or (len(kinds),)
    first = sum(counts[:stage])
    on_stage = set(range(first, first + counts[stage]))
    length = engine.max_model_len or engine.max_num_batched_tokens
    in_flight = in_flight_batches * engine.max_num_batched_tokens
    prefix = bool(engine.enable_prefix_caching)

    def per_token(kind: str) -> int | float:
        return layer_kv_bytes_per_token(model, kind, tp=tp, dtype=engine.dtype, kv_cache_dtype=engine.kv_cache_dtype)

    specs = {_bucket(model.attention, k) for k in kinds}
    if len(specs) == 1 or (all(k in ("full", "mla") for k in kinds)):
        # one group of every layer (UniformTypeKVCacheSpecs): a block spans all its layers
        page = sum(per_token(kinds[i]) * engine.block_size for i in on_stage)
        entry = _group_entry(model, kinds[0])
        blocks = math.floor(kv_bytes / page) if kv_bytes > 0 else 0
        request = _blocks_for_request(entry, kinds[0], engine.block_size, length, in_flight, prefix)
        return KVPoolPlan((entry,), len(on_stage), page, (engine.block_size,), request, blocks, length, False)

    block = _mamba_block_size(model, engine, kinds)
    pages = {k: per_token(k) * block for k in set(kinds) if k != "mamba"}
    largest = max(pages.values())
    group_blocks: dict[str, int] = {}
    for kind, page in pages.items():
        ratio = largest / page
        if not float(ratio).is_integer():
            raise ConfigError(
                f"{model.name}: a {kind} layer's page ({page:,} B) does not divide the largest "
                f"({largest:,} B); vLLM cannot unify the page sizes of this model"
            )
        group_blocks[kind] = block * int(ratio)
    if "mamba" in kinds:  # vLLM's mamba_block_size: max_model_len, or the block with prefix caching
        group_blocks["mamba"] = block if prefix else length
    groups = _group_layers(kinds, model)
    layers_per_group = max(len([i for i in layers if i in on_stage]) for _, layers in groups)
    blocks = math.floor(kv_bytes / largest / layers_per_group) if kv_bytes > 0 else 0
    kind_of = [kinds[layers[0]] for _, layers in groups]
    block_sizes = tuple(group_blocks[k] for k in kind_of)
    request = sum(
        _blocks_for_request(entry, kind, size, length, in_flight, prefix)
        for (entry, _), kind, size in zip(groups, kind_of, block_sizes, strict=True)
    )
    entries = tuple(entry for entry, _ in groups)
    return KVPoolPlan(entries, layers_per_group, largest, block_sizes, request, blocks, length, True)


def _group_entry(model: ModelSpec, kind: str) -> KVGroup:
    """The group entry of a layer of ``kind`` (MLA: ``"full"``)."""
    assert model.attention is not None
    entries, _ = kv_cache_groups(AttentionLayout((kind,), **_sizes(model.attention, (kind,))))
    return entries[0]
