"""Which attention each decoder layer runs, and the KV-cache groups vLLM forms from the layers.

Most models deployed in 2026 are not "every layer full attention with grouped-query heads":

* **sliding window** (Gemma 2/3, GPT-OSS, Mistral 7B v0.1): a layer attends to the last
  ``sliding_window`` tokens only, so its KV blocks older than the window can be freed;
* **chunked local attention** (Llama 4): a layer attends within its ``attention_chunk_size``
  chunk of the sequence only;
* **multi-head latent attention, MLA** (DeepSeek V2/V3, Kimi K2): one latent vector of
  ``kv_lora_rank + qk_rope_head_dim`` elements per token and layer, the same on every
  tensor-parallel GPU (not split by TP);
* **Mamba / linear attention** (Qwen3-Next's Gated DeltaNet, Jamba, Granite-4.0-H,
  Nemotron-H): a fixed state per request and layer, whatever the sequence length.

:class:`AttentionLayout` records the kind of every decoder layer of a model
(:attr:`budgetlab.specs.ModelSpec.attention`; ``None`` there means every layer is full attention).

**KV-cache groups.** vLLM's hybrid KV cache manager gives the layers of each kind their own block
tables and splits each kind into groups of equally many layers, so that every group's block
spans the same bytes and all groups draw blocks from one pool
(``_get_kv_cache_groups_uniform_page_size`` in ``vllm/v1/core/kv_cache_planning.py``, vLLM 0.33):
the kinds are taken in the order their first layer appears; the group size is the smallest
kind's layer count (or the largest's when it is under 1.5 times the smallest); each kind with
``n`` layers becomes ``ceil(n / group_size)`` groups. :func:`kv_cache_groups` does the same.
The scheduler sees a group as one entry of :attr:`budgetlab.specs.EngineConfig.kv_groups`:

* ``"full"``: full attention or MLA (vLLM's ``FullAttentionSpec`` / ``MLAAttentionSpec``; both
  keep every token's block until the request ends);
* ``("sliding_window", W)``: ``SlidingWindowSpec``, W tokens;
* ``("chunked_local", C)``: ``ChunkedLocalAttentionSpec``, chunks of C tokens;
* ``("mamba", state_bytes)``: ``MambaSpec`` (Mamba and linear-attention layers): one block per
  request holds the state (``state_bytes`` per layer and request, before tensor parallelism).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from budgetlab._checks import MAX_MEMORY_BYTES, MAX_MODEL_DIMENSION, MAX_TOKENS, int_at_least
from budgetlab.errors import ConfigError

__all__ = [
    "LAYER_KINDS",
    "GROUP_KINDS",
    "AttentionLayout",
    "KVGroup",
    "normalize_kv_groups",
    "kv_cache_groups",
    "describe_kv_groups",
    "max_in_flight_tokens",
    "max_admission_blocks",
    "skipped_tokens",
    "group_kind",
]

#: Values of :attr:`AttentionLayout.layer_kinds`, one per decoder layer.
LAYER_KINDS = ("full", "sliding_window", "chunked_local", "mla", "mamba")
#: Kinds of a KV-cache group entry (:attr:`budgetlab.specs.EngineConfig.kv_groups`); all but
#: ``"full"`` carry one int: the window, the chunk size [tokens], or the state [B].
GROUP_KINDS = ("full", "sliding_window", "chunked_local", "mamba")

KVGroup = str | tuple[str, int]
"""One KV-cache group as the scheduler sees it: ``"full"`` or ``(kind, value)``."""

_PARAMETER = {"sliding_window": "window [tokens]", "chunked_local": "chunk size [tokens]", "mamba": "state [B]"}
_MAX = {"sliding_window": MAX_TOKENS, "chunked_local": MAX_TOKENS, "mamba": MAX_MEMORY_BYTES}


@dataclass(frozen=True)
class AttentionLayout:
    """The attention kind of every decoder layer of one model, and the sizes those kinds need.

    Attributes
    ----------
    layer_kinds : tuple of str
        One of :data:`LAYER_KINDS` per decoder layer, layer 0 first (``config.json``'s
        ``layer_types`` where the model has it).
    sliding_window : int or None
        Window of the ``"sliding_window"`` layers [tokens] (``config.json``'s ``sliding_window``).
    attention_chunk_size : int or None
        Chunk of the ``"chunked_local"`` layers [tokens] (Llama 4's ``attention_chunk_size``).
    kv_lora_rank, qk_rope_head_dim : int or None
        MLA's latent width and its rotary part [elements]: an ``"mla"`` layer caches
        ``kv_lora_rank + qk_rope_head_dim`` elements per token, one "head", on every GPU.
    qk_nope_head_dim, v_head_dim : int or None
        MLA's per-head query/key width without rotary part and value width [elements] (the
        absorbed projections of an MLA decode).
    q_lora_rank : int or None
        MLA's query compression rank [elements]; None when queries are not compressed
        (DeepSeek-V2-Lite).
    mamba_state_bytes : int or None
        State of one ``"mamba"`` layer for one request, convolution and recurrent state
        together, on one GPU at tensor parallelism 1 [B] (vLLM's ``MambaSpec`` shapes times
        their dtypes; split over the GPUs by tensor parallelism).
    source : str
        Where the layout was read (a ``config.json``).

    Raises
    ------
    ConfigError
        An unknown kind, no layers, a size missing for a kind that needs it, or one given for
        a kind the layout does not have.
    """

    layer_kinds: tuple[str, ...]
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    q_lora_rank: int | None = None
    mamba_state_bytes: int | None = None
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        kinds = self.layer_kinds
        if isinstance(kinds, list):
            object.__setattr__(self, "layer_kinds", tuple(kinds))
            kinds = self.layer_kinds
        if not isinstance(kinds, tuple) or not kinds:
            raise ConfigError(f"layer_kinds must be a non-empty tuple of {', '.join(LAYER_KINDS)}, got {kinds!r}")
        unknown = sorted({str(k) for k in kinds if k not in LAYER_KINDS})
        if unknown:
            raise ConfigError(f"unknown layer kind(s) {', '.join(unknown)}; use {', '.join(LAYER_KINDS)}")
        present = set(kinds)
        needs = {
            "sliding_window": ("sliding_window",),
            "attention_chunk_size": ("chunked_local",),
            "kv_lora_rank": ("mla",),
            "qk_rope_head_dim": ("mla",),
            "mamba_state_bytes": ("mamba",),
        }
        for name, owners in needs.items():
            value = getattr(self, name)
            wanted = any(kind in present for kind in owners)
            if wanted and value is None:
                raise ConfigError(f"a layout with {owners[0]!r} layers needs {name}")
            if value is not None:
                if not wanted:
                    raise ConfigError(f"{name} is given but the layout has no {owners[0]!r} layers")
                bound = MAX_MEMORY_BYTES if name == "mamba_state_bytes" else MAX_TOKENS
                int_at_least(name, value, 1, what="an int >= 1", error=ConfigError, maximum=bound)
        for name in ("qk_nope_head_dim", "v_head_dim", "q_lora_rank"):
            value = getattr(self, name)
            if value is not None:
                if "mla" not in present:
                    raise ConfigError(f"{name} is given but the layout has no 'mla' layers")
                int_at_least(name, value, 1, what="an int >= 1", error=ConfigError, maximum=MAX_MODEL_DIMENSION)

    @classmethod
    def from_pattern(cls, pattern: Sequence[str], num_layers: int, **sizes: object) -> AttentionLayout:
        """A layout that repeats ``pattern`` (kinds, layer 0 first) over ``num_layers`` layers.

        ``AttentionLayout.from_pattern(["sliding_window"] * 5 + ["full"], 62, sliding_window=1024)``
        is Gemma 3 27B: five sliding-window layers, then one full, over and over.
        """
        int_at_least("num_layers", num_layers, 1, what="an int >= 1", error=ConfigError, maximum=MAX_MODEL_DIMENSION)
        if not pattern:
            raise ConfigError("pattern must name at least one layer kind")
        kinds = tuple(pattern[i % len(pattern)] for i in range(num_layers))
        return cls(kinds, **sizes)  # type: ignore[arg-type]

    @classmethod
    def parse(cls, text: str, num_layers: int) -> AttentionLayout:
        """The layout written as :meth:`to_text` writes it, over ``num_layers`` layers.

        ``"sliding_window*5 full; sliding_window=1024"``: a pattern of kinds (``kind*n`` for
        ``n`` layers in a row) repeated from layer 0, then ``;`` and the sizes as
        ``name=int`` (the catalog's ``attention`` column).

        Raises
        ------
        ConfigError
            A malformed text, an unknown kind or size name, or a layout that does not hold.
        """
        pattern_text, _, sizes_text = text.partition(";")
        pattern: list[str] = []
        for word in pattern_text.split():
            kind, star, repeat = word.partition("*")
            if star and not (repeat.isascii() and repeat.isdigit() and int(repeat) >= 1):
                raise ConfigError(f"attention pattern {word!r}: write kind*n with n a whole number >= 1")
            pattern.extend([kind] * (int(repeat) if star else 1))
        if len(pattern) > num_layers:
            raise ConfigError(
                f"attention pattern {pattern_text.strip()!r} names {len(pattern)} layers but the model has {num_layers}"
            )
        sizes: dict[str, object] = {}
        allowed = {f for f in cls.__dataclass_fields__ if f not in ("layer_kinds", "source")}
        for item in sizes_text.replace(",", " ").split():
            name, eq, value = item.partition("=")
            if not eq or name not in allowed or not (value.isascii() and value.isdigit()):
                raise ConfigError(
                    f"attention size {item!r}: write name=int with name one of {', '.join(sorted(allowed))}"
                )
            if name in sizes:
                raise ConfigError(f"attention size {name!r} is given twice in {text!r}")
            sizes[name] = int(value)
        return cls.from_pattern(pattern, num_layers, **sizes)

    def to_text(self) -> str:
        """The shortest repeating pattern of kinds and the sizes, as :meth:`parse` reads them."""
        kinds = self.layer_kinds
        period = next(p for p in range(1, len(kinds) + 1) if all(kinds[i] == kinds[i % p] for i in range(len(kinds))))
        words: list[str] = []
        for kind in kinds[:period]:
            if words and words[-1].split("*")[0] == kind:
                name, _, n = words[-1].partition("*")
                words[-1] = f"{name}*{int(n or 1) + 1}"
            else:
                words.append(kind)
        sizes = [
            f"{name}={getattr(self, name)}"
            for name in self.__dataclass_fields__
            if name not in ("layer_kinds", "source") and getattr(self, name) is not None
        ]
        return " ".join(words) + ("; " + " ".join(sizes) if sizes else "")

    @property
    def num_layers(self) -> int:
        """Decoder layers [count]."""
        return len(self.layer_kinds)

    def count(self, kind: str) -> int:
        """Layers of ``kind`` [count]."""
        return self.layer_kinds.count(kind)

    @property
    def mla_latent_dim(self) -> int:
        """Elements one MLA layer caches per token (``kv_lora_rank + qk_rope_head_dim``); 0
        without MLA layers."""
        if self.kv_lora_rank is None or self.qk_rope_head_dim is None:
            return 0
        return self.kv_lora_rank + self.qk_rope_head_dim

    def describe(self) -> str:
        """One line: the layer count of each kind, with its size."""
        parts = []
        for kind in LAYER_KINDS:
            n = self.count(kind)
            if not n:
                continue
            label = kind.replace("_", "-")
            if kind == "sliding_window":
                label += f" ({self.sliding_window:,} tokens)"
            elif kind == "chunked_local":
                label += f" ({self.attention_chunk_size:,}-token chunks)"
            elif kind == "mla":
                label = f"MLA (latent {self.mla_latent_dim})"
            elif kind == "mamba":
                label = f"Mamba/linear ({self.mamba_state_bytes:,} B state)"
            parts.append(f"{n} {label}")
        return " + ".join(parts)


def _group_of_kind(layout: AttentionLayout, kind: str) -> KVGroup:
    if kind in ("full", "mla"):
        return "full"
    if kind == "sliding_window":
        assert layout.sliding_window is not None
        return ("sliding_window", layout.sliding_window)
    if kind == "chunked_local":
        assert layout.attention_chunk_size is not None
        return ("chunked_local", layout.attention_chunk_size)
    assert layout.mamba_state_bytes is not None
    return ("mamba", layout.mamba_state_bytes)


def kv_cache_groups(layout: AttentionLayout | None) -> tuple[tuple[KVGroup, ...], int]:
    """The KV-cache groups vLLM 0.33 forms from ``layout``, and the layers in each group.

    Kinds are bucketed in the order their first layer appears; the group size is the smallest
    bucket's layer count, or the largest's when that is under 1.5 times the smallest (vLLM pads
    the last group of a kind with empty layers); a bucket of ``n`` layers becomes
    ``ceil(n / group_size)`` groups (``_get_kv_cache_groups_uniform_page_size``,
    ``vllm/v1/core/kv_cache_planning.py``). MLA layers are full-attention groups to the
    scheduler.

    Returns
    -------
    tuple
        The group entries (as :attr:`budgetlab.specs.EngineConfig.kv_groups` takes them) and
        the layers per group (padding included) [count]. ``None`` (every layer full attention)
        gives ``(("full",), 0)``: one group, its size the model's layer count.
    """
    if layout is None:
        return ("full",), 0
    buckets: dict[KVGroup, int] = {}
    for kind in layout.layer_kinds:
        entry = _group_of_kind(layout, kind)
        buckets[entry] = buckets.get(entry, 0) + 1
    if len(buckets) == 1:
        ((entry, n),) = buckets.items()
        return (entry,), n
    smallest, largest = min(buckets.values()), max(buckets.values())
    group_size = largest if largest < smallest * 1.5 else smallest
    groups: list[KVGroup] = []
    for entry, n in buckets.items():
        groups.extend([entry] * math.ceil(n / group_size))
    return tuple(groups), group_size


def group_kind(group: KVGroup) -> tuple[str, int]:
    """``(kind, size)`` of a group entry: ``("full", 0)``, ``("sliding_window", W)``, ..."""
    if isinstance(group, str):
        return group, 0
    return group[0], group[1]


def normalize_kv_groups(value: object) -> tuple[KVGroup, ...]:
    """``value`` as a tuple of KV-cache group entries, checked.

    Each entry is ``"full"`` or a pair ``(kind, int >= 1)`` with ``kind`` one of
    ``"sliding_window"``, ``"chunked_local"``, ``"mamba"`` (lists are taken as tuples).

    Raises
    ------
    ConfigError
        An empty or non-sequence value, or an entry that is not one of those forms.
    """
    if isinstance(value, str) or not isinstance(value, tuple | list) or not value:
        raise ConfigError(
            "kv_groups must be a non-empty tuple with one entry per KV-cache group, each "
            "'full' or a pair such as ('sliding_window', 4096), ('chunked_local', 8192) or "
            f"('mamba', state_bytes); got {value!r}"
        )
    groups: list[KVGroup] = []
    for i, entry in enumerate(value):
        if entry == "full" or entry == ("full",) or entry == ["full"]:
            groups.append("full")
            continue
        if isinstance(entry, tuple | list) and len(entry) == 2 and isinstance(entry[0], str) and entry[0] in _PARAMETER:
            kind, size = entry
            int_at_least(
                f"kv_groups[{i}] {_PARAMETER[kind]}", size, 1, what="an int >= 1", error=ConfigError, maximum=_MAX[kind]
            )
            groups.append((kind, int(size)))
            continue
        raise ConfigError(
            f"kv_groups[{i}] must be 'full', ('sliding_window', W), ('chunked_local', C) or "
            f"('mamba', state_bytes), got {entry!r}"
        )
    return tuple(groups)


def describe_kv_groups(groups: Sequence[KVGroup]) -> str:
    """One line for a tuple of group entries: ``"5 × sliding window 1,024 tokens + 1 × full"``."""
    counts: dict[KVGroup, int] = {}
    for entry in groups:
        counts[entry] = counts.get(entry, 0) + 1
    parts = []
    for entry, n in counts.items():
        kind, size = group_kind(entry)
        unit = "B state" if kind == "mamba" else "tokens"
        label = kind if kind == "full" else f"{kind.replace('_', ' ')} {size:,} {unit}"
        parts.append(f"{n} × {label}")
    return " + ".join(parts)


def max_in_flight_tokens(
    *, max_num_batched_tokens: int, async_scheduling: bool, pipeline_parallel_size: int = 1
) -> int:
    """Tokens scheduled but not yet processed, at most [tokens]: one budget per batch in flight.

    vLLM 0.33's ``VllmConfig.max_in_flight_tokens`` (``vllm/config/vllm.py``):
    ``max_concurrent_batches × max_num_batched_tokens``, where a pipelined (async) engine keeps
    ``pipeline_parallel_size + 1`` batches in flight (Model Runner V2, the default) and a
    synchronous one ``pipeline_parallel_size``. Sliding-window and chunked-local groups hold
    the blocks of these tokens on top of their window (:func:`max_admission_blocks`).
    """
    batches = pipeline_parallel_size + 1 if async_scheduling else pipeline_parallel_size
    return batches * max_num_batched_tokens


def max_admission_blocks(
    group: KVGroup, *, block_size: int, in_flight_tokens: int, max_model_len: int | None
) -> int | None:
    """The most blocks one request can hold in ``group`` at once, or None (no bound below the
    whole sequence) [blocks].

    vLLM 0.33's ``max_admission_blocks_per_request`` (``vllm/v1/kv_cache_interface.py``), the one
    figure behind both the pool's sizing at start-up and the whole-sequence admission check:
    a sliding window W holds at most ``ceil(min(W − 1 + in_flight, max_model_len) / B) + 1``
    blocks (the window may start inside a block); a chunked-local group
    ``ceil(min(C + in_flight, max_model_len) / B)``. Full and Mamba groups: None.
    """
    kind, size = group_kind(group)
    if kind == "sliding_window":
        tokens = size - 1 + in_flight_tokens
        if max_model_len is not None:
            tokens = min(tokens, max_model_len)
        return -(-tokens // block_size) + 1
    if kind == "chunked_local":
        tokens = size + in_flight_tokens
        if max_model_len is not None:
            tokens = min(tokens, max_model_len)
        return -(-tokens // block_size)
    return None


def skipped_tokens(group: KVGroup, num_computed_tokens: int) -> int:
    """Leading tokens of a request that ``group``'s layers no longer attend to [tokens].

    ``get_num_skipped_tokens`` of vLLM 0.33's managers (``single_type_kv_cache_manager.py``):
    ``max(0, computed − W + 1)`` for a sliding window W (the next token sees the last W);
    ``computed // C × C`` for chunked-local attention (the current chunk only); 0 for full
    attention. (A Mamba group keeps only its state; with one block per request nothing is
    skipped.) The blocks wholly inside the skipped tokens can be freed.
    """
    kind, size = group_kind(group)
    if kind == "sliding_window":
        return max(0, num_computed_tokens - size + 1)
    if kind == "chunked_local":
        return num_computed_tokens // size * size
    return 0
