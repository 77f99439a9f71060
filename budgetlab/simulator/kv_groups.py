"""KV-cache groups on one block pool: the scheduler's side of vLLM's hybrid KV cache manager.

A model whose layers are not all full attention (:mod:`budgetlab.attention`) gets one block
table per KV-cache group (:attr:`budgetlab.specs.EngineConfig.kv_groups`); every group takes its
``block_size``-token blocks from the same pool. :class:`KVGroups` keeps those tables the way
vLLM 0.33's ``KVCacheManager`` / ``HybridKVCacheCoordinator`` / ``SingleTypeKVCacheManager``
subclasses do (``vllm/v1/core/kv_cache_manager.py``, ``kv_cache_coordinator.py``,
``single_type_kv_cache_manager.py``). The rules, each with the vLLM function it restates:

G1. **One table length.** Every attention group (full, sliding window, chunked local) of a
    request holds a table of ``ceil(tokens / B)`` entries for the tokens allocated so far
    (``allocate_new_blocks``); a windowed group's leading entries may be *null* (freed). A
    Mamba group (prefix caching off, vLLM's ``mamba_cache_mode="none"``: its block is
    ``max_model_len`` tokens) holds one block per request from its first chunk on.
G2. **Out-of-window blocks are freed before each allocation** (``allocate_slots`` calls
    ``remove_skipped_blocks`` first, on the *processed* tokens: computed less those still in
    flight when pipelined). A group skips :func:`budgetlab.attention.skipped_tokens` tokens;
    its entries wholly inside them become null, the last one first
    (``_remove_blocks_in_range``). The freed blocks count for the check that follows, even
    when the request then cannot be allocated and is preempted.
G3. **A running request needs** ``ceil((computed + n) / B) − table`` new blocks in each
    attention group, plus one per Mamba group it does not hold yet (``get_num_blocks_to_allocate``).
G4. **A waiting request** first looks up its hit (G7), then needs, per group,
    ``max(ceil(tokens / B) − max(skipped blocks of the hit, hit blocks), 0)`` new blocks plus
    the hit blocks past the skipped ones that nobody holds (they leave the free queue);
    ``tokens`` is its hit plus first chunk, and with ``scheduler_reserve_full_isl`` also its
    whole known sequence, where a windowed group's count is capped at
    :func:`budgetlab.attention.max_admission_blocks` (``apply_admission_cap``). Admitting it
    pads a windowed table with nulls for the hit's skipped blocks (``add_local_computed_blocks``).
G5. **Release** (finish or preemption) frees every group, group by group in order, each
    table's blocks last first with its leading nulls trimmed (``KVCacheCoordinator.free``).
G6. **Caching** (prefix caching on): every full block of every attention group is entered in
    the cache under (its content, its group) when it is allocated, up to the tokens the
    scheduler knows (``cache_blocks``); null entries are skipped. Freed blocks go back to the
    free queue as :mod:`budgetlab.simulator.blocks` describes (keyed ones to its tail in order,
    unkeyed ones to its head), one group at a time (``BlockPool.free_blocks``).
G7. **A hit must be cached in every group** (``HybridKVCacheCoordinator.find_longest_cache_hit``):
    the full-attention groups first, the longest run of leading blocks cached in all of them
    (at most ``(known − 1) // B``); then each other kind within that length: a sliding window
    W takes the rightmost run of ``ceil((W − 1) / B)`` consecutive blocks cached in all its
    groups (its window; the blocks before it are null), or, without such a run, the run of
    cached blocks from block 0; a chunked-local group the blocks of the current chunk, cached
    from the chunk's start. The length shrinks to what every kind accepts, the loop repeating
    until no kind shrinks it (once for one full kind and one other); the full groups' blocks
    are cut to the final length.

Mamba groups with prefix caching on run vLLM's ``mamba_cache_mode="align"`` (a block per
``block_size`` tokens with checkpoints), which budgetlab does not model: it refuses that
combination (:func:`check_supported`).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from budgetlab.attention import KVGroup, group_kind, max_admission_blocks, max_in_flight_tokens, skipped_tokens
from budgetlab.errors import ConfigError
from budgetlab.simulator.blocks import BlockKeys, PrefixBlockPool
from budgetlab.specs import EngineConfig

if TYPE_CHECKING:
    from budgetlab.simulator.inputs import RequestTable

__all__ = [
    "GroupHit",
    "KVGroups",
    "check_supported",
    "block_tables",
    "peak_blocks",
    "empty_pool_admission_blocks",
    "NULL_BLOCK",
]

#: A table entry whose block was freed (vLLM's null block, block 0).
NULL_BLOCK = 0


def block_tables(
    table: RequestTable, order: np.ndarray, engine: EngineConfig, groups: tuple[KVGroup, ...], num_blocks: int
) -> tuple[PrefixBlockPool | None, KVGroups | None]:
    """The block bookkeeping a run needs: a :class:`~budgetlab.simulator.blocks.PrefixBlockPool`
    for one full-attention group with prefix caching, a :class:`KVGroups` for any other groups
    and for any speculating run (a request may hold more blocks than its computed tokens fill),
    neither for one full group without caching (counters suffice). ``order`` is the arrival
    order of ``table``'s rows."""
    keys = None
    if engine.enable_prefix_caching:
        keys = BlockKeys.of_table(table, order, engine.block_size)
    if groups == ("full",) and not engine.num_speculative_tokens:  # speculating: per-request tables (drafts.py S4)
        pool = PrefixBlockPool(num_blocks, keys, len(order), engine.block_size) if keys is not None else None
        return pool, None
    check_supported(groups, enable_prefix_caching=engine.enable_prefix_caching)
    in_flight = max_in_flight_tokens(
        max_num_batched_tokens=engine.max_num_batched_tokens,
        async_scheduling=engine.async_scheduling,
        pipeline_parallel_size=engine.pipeline_parallel_size,
    )
    kv = KVGroups(
        groups,
        block_size=engine.block_size,
        num_blocks=num_blocks,
        num_requests=len(order),
        keys=keys,
        in_flight_tokens=in_flight,
        max_model_len=engine.max_model_len,
    )
    return None, kv


def peak_blocks(groups: tuple[KVGroup, ...], num_tokens: int, block_size: int) -> int:
    """The fewest blocks a request writing ``num_tokens`` tokens' KV holds at its last step,
    every group together [blocks]: each attention table, less what its window has freed (G2),
    plus one block per Mamba group. The pool must hold this for the request to finish."""
    table = _ceil(num_tokens, block_size)
    computed = max(num_tokens - 1, 0)
    total = 0
    for entry in groups:
        if group_kind(entry)[0] == "mamba":
            total += 1
        else:
            total += table - min(skipped_tokens(entry, computed) // block_size, table)
    return total


def empty_pool_admission_blocks(
    groups: tuple[KVGroup, ...], num_tokens: int, *, block_size: int, in_flight_tokens: int, max_model_len: int | None
) -> int:
    """Blocks vLLM's whole-sequence check (``scheduler_reserve_full_isl``) asks of a request
    whose known sequence is ``num_tokens`` tokens, with no hit (G4 with the admission cap):
    ``ceil(num_tokens / B)`` per attention group, a windowed group's capped at
    :func:`budgetlab.attention.max_admission_blocks`, one per Mamba group [blocks]. A pool
    smaller than this never admits the request."""
    table = _ceil(num_tokens, block_size)
    total = 0
    for entry in groups:
        if group_kind(entry)[0] == "mamba":
            total += 1
            continue
        cap = max_admission_blocks(
            entry, block_size=block_size, in_flight_tokens=in_flight_tokens, max_model_len=max_model_len
        )
        total += table if cap is None else min(table, cap)
    return total


def check_supported(groups: tuple[KVGroup, ...], *, enable_prefix_caching: bool) -> None:
    """Refuse the group combinations budgetlab's scheduler does not model.

    Raises
    ------
    ConfigError
        Mamba groups with prefix caching on (vLLM's ``mamba_cache_mode="align"``).
    """
    if enable_prefix_caching and any(group_kind(g)[0] == "mamba" for g in groups):
        raise ConfigError(
            "prefix caching with Mamba / linear-attention groups runs vLLM's mamba_cache_mode='align' "
            "(a state block per block_size tokens, with checkpoints), which budgetlab does not model; "
            "set EngineConfig(enable_prefix_caching=False) (vLLM's mode 'none': one state block per request)"
        )


class GroupHit(NamedTuple):
    """A waiting request's prefix-cache hit over every group (G7).

    Attributes
    ----------
    tokens : int
        Hit length [tokens], a multiple of the block size.
    blocks : tuple of list of int
        Per group (Mamba groups: empty), the hit's table entries, :data:`NULL_BLOCK` where a
        windowed group does not need the block.
    """

    tokens: int
    blocks: tuple[list[int], ...]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class KVGroups:
    """The block tables of every request in every KV-cache group, on one pool (rules G1–G7).

    Parameters
    ----------
    groups : tuple
        The group entries (:func:`budgetlab.attention.normalize_kv_groups`).
    block_size : int
        Tokens per block, every group [tokens].
    num_blocks : int
        Usable blocks in the pool (vLLM's ``num_gpu_blocks`` less its null block) [blocks].
    num_requests : int
    keys : BlockKeys or None
        The blocks' contents with prefix caching on; None with it off (then only counts are
        kept: nothing is shared).
    in_flight_tokens : int
        :func:`budgetlab.attention.max_in_flight_tokens` of the engine [tokens] (G4's cap).
    max_model_len : int or None
    """

    def __init__(
        self,
        groups: tuple[KVGroup, ...],
        *,
        block_size: int,
        num_blocks: int,
        num_requests: int,
        keys: BlockKeys | None,
        in_flight_tokens: int,
        max_model_len: int | None,
    ) -> None:
        self.groups = groups
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.attention = [g for g, entry in enumerate(groups) if group_kind(entry)[0] != "mamba"]
        self.windowed = [g for g in self.attention if groups[g] != "full"]
        self.num_mamba = len(groups) - len(self.attention)
        self.admission_caps = [
            max_admission_blocks(
                entry, block_size=block_size, in_flight_tokens=in_flight_tokens, max_model_len=max_model_len
            )
            for entry in groups
        ]
        #: G1: the entries of every attention table of each request [blocks]
        self.table = array("q", [0]) * num_requests
        #: the leading null entries of each windowed group's table, per group [blocks]
        self.nulls = {g: array("q", [0]) * num_requests for g in self.windowed}
        #: whether each request holds its Mamba blocks
        self.has_state = array("b", [0]) * num_requests
        #: pipelined only: tokens each request had scheduled in the step before (not processed yet)
        self.in_flight: dict[int, int] = {}
        self.keys = keys
        self.caching = keys is not None
        if keys is not None:
            self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks + 1))
            self._ref = array("q", [0]) * (num_blocks + 1)
            self._block_key: list[tuple[int, int] | None] = [None] * (num_blocks + 1)
            #: (content key, group) -> its cached blocks, the earliest entered first
            self._cached: dict[tuple[int, int], list[int]] = {}
            #: each attention group's table of block ids per request
            self.blocks: list[dict[int, list[int]]] = [{} for _ in groups]
            #: how many leading blocks of each request are cached (every attention group alike)
            self.num_cached = array("q", [0]) * num_requests
        #: processed tokens from which a windowed group of each request frees its next block
        self._next_free = array("q", [0]) * num_requests
        self._windows = [(g, *group_kind(groups[g])) for g in self.windowed]
        # the kinds other than full, each with its groups, in the order of their first group (G7)
        others: dict[KVGroup, list[int]] = {}
        for g in self.windowed:
            others.setdefault(groups[g], []).append(g)
        self._full_groups = [g for g in self.attention if groups[g] == "full"]
        self._other_kinds = list(others.items())

    # ---------------------------------------------------------------------------------------
    # Counts

    def held_blocks(self, request: int) -> int:
        """Blocks ``request`` holds now, every group together [blocks] (shared ones included)."""
        table = self.table[request]
        held = table * len(self.attention) - sum(self.nulls[g][request] for g in self.windowed)
        return held + self.num_mamba * self.has_state[request]

    def num_new_blocks(self, request: int, num_tokens: int) -> int:
        """G3: new blocks a running ``request`` needs to hold ``num_tokens`` tokens [blocks]."""
        grow = _ceil(num_tokens, self.block_size) - self.table[request]
        need = len(self.attention) * grow if grow > 0 else 0
        return need if self.has_state[request] else need + self.num_mamba

    # ---------------------------------------------------------------------------------------
    # G2, G3: a running request's chunk

    def free_skipped(self, request: int, processed_tokens: int) -> int:
        """G2: free ``request``'s blocks that fell out of its windowed groups' reach; returns the
        blocks that became free [blocks]."""
        if processed_tokens < self._next_free[request] or not self._windows:
            return 0  # no block has left a window since the last call
        table = self.table[request]
        if not table:
            return 0
        freed = 0
        block_size = self.block_size
        following = -1
        for g, kind, size in self._windows:
            nulls = self.nulls[g]
            first = nulls[request]
            skip = min(skipped_tokens((kind, size), processed_tokens) // block_size, table)
            if skip > first:
                nulls[request] = skip
                if self.caching:
                    held = self.blocks[g][request]
                    dropped = held[first:skip][::-1]  # the last one first
                    held[first:skip] = [NULL_BLOCK] * (skip - first)
                    freed += self._free_blocks(dropped)
                else:
                    freed += skip - first
                first = skip
            # the processed tokens from which block `first` of this group leaves its window: the
            # least p with skipped_tokens(group, p) // block_size > first (skipped_tokens inverted)
            if kind == "sliding_window":
                at = (first + 1) * block_size + size - 1
            else:
                at = _ceil((first + 1) * block_size, size) * size
            following = at if following < 0 else min(following, at)
        self._next_free[request] = following
        return freed

    def allocate(self, request: int, num_tokens: int, *, cache_tokens: int) -> None:
        """Give ``request`` the blocks to hold ``num_tokens`` tokens in every group (G1, G3);
        with caching, enter its full blocks up to ``cache_tokens`` (G6)."""
        target = _ceil(num_tokens, self.block_size)
        grow = target - self.table[request]
        if grow > 0:
            self.table[request] = target
            if self.caching:
                for g in self.attention:
                    self.blocks[g].setdefault(request, []).extend(self._take(grow))
        self.has_state[request] = 1
        if self.caching:
            self.cache(request, cache_tokens)

    def cache(self, request: int, num_tokens: int) -> None:
        """G6: enter ``request``'s blocks that ``num_tokens`` tokens fill in the cache."""
        assert self.keys is not None
        full = num_tokens // self.block_size
        first = self.num_cached[request]
        if full <= first:
            return
        self.num_cached[request] = full
        key = self.keys.key
        block_key = self._block_key
        cached = self._cached
        tables = [(g, self.blocks[g][request]) for g in self.attention]
        for i in range(first, full):
            content = key(request, i)
            for g, held in tables:
                block = held[i]
                if block == NULL_BLOCK:
                    continue
                entry = (content, g)
                block_key[block] = entry
                copies = cached.get(entry)
                if copies is None:
                    cached[entry] = [block]
                else:
                    copies.append(block)

    # ---------------------------------------------------------------------------------------
    # G5: release

    def release(self, request: int) -> int:
        """G5: free every block ``request`` holds (a finish or a preemption); returns the blocks
        that became free [blocks] (with caching, blocks other requests hold stay taken)."""
        if self.caching:
            freed = 0
            for g in self.attention:
                held = self.blocks[g].pop(request, [])
                freed += self._free_blocks([b for b in reversed(held) if b != NULL_BLOCK])
            self.num_cached[request] = 0
        else:
            freed = self.held_blocks(request)
        self.table[request] = 0
        self._next_free[request] = 0
        for g in self.windowed:
            self.nulls[g][request] = 0
        self.has_state[request] = 0
        return freed

    # ---------------------------------------------------------------------------------------
    # G4, G7: a waiting request

    def lookup(self, request: int, known_tokens: int) -> GroupHit:
        """G7: ``request``'s prefix-cache hit, cached in every group (nothing without caching)."""
        empty: tuple[list[int], ...] = tuple([] for _ in self.groups)
        if not self.caching or known_tokens <= 1:
            return GroupHit(0, empty)
        block_size = self.block_size
        hit_length = known_tokens - 1
        found: dict[int, list[int]] = {}
        full_length: int | None = None
        simple = len(self._other_kinds) == 1 and bool(self._full_groups)
        while True:
            current = hit_length
            if self._full_groups:
                if full_length is None:
                    full_blocks = self._leading_run(request, self._full_groups, 0, current // block_size)
                    for g, blocks in zip(self._full_groups, full_blocks):
                        found[g] = blocks
                    full_length = len(full_blocks[0]) * block_size
                current = min(current, full_length)
            for entry, members in self._other_kinds:
                blocks_per_group = self._window_hit(request, entry, members, current)
                for g, blocks in zip(members, blocks_per_group):
                    found[g] = blocks
                current = len(blocks_per_group[0]) * block_size
            if current >= hit_length:
                break
            hit_length = current
            if simple:
                break
        num_blocks = hit_length // block_size
        per_group = tuple(found.get(g, [])[:num_blocks] if g in self.attention else [] for g in range(len(self.groups)))
        return GroupHit(hit_length, per_group)

    def _cached_block(self, request: int, index: int, group: int) -> int | None:
        assert self.keys is not None
        blocks = self._cached.get((self.keys.key(request, index), group))
        return blocks[0] if blocks else None

    def _leading_run(self, request: int, members: list[int], start: int, stop: int) -> list[list[int]]:
        """Blocks ``start .. stop − 1`` of ``request`` cached in every group of ``members``,
        up to the first one that is not (one list per group)."""
        out: list[list[int]] = [[] for _ in members]
        for i in range(start, stop):
            row = [self._cached_block(request, i, g) for g in members]
            if any(b is None for b in row):
                break
            for lst, b in zip(out, row):
                assert b is not None
                lst.append(b)
        return out

    def _window_hit(self, request: int, entry: KVGroup, members: list[int], max_tokens: int) -> list[list[int]]:
        """G7 for one windowed kind: its table entries of the hit within ``max_tokens``."""
        kind, size = group_kind(entry)
        block_size = self.block_size
        max_blocks = max_tokens // block_size
        if kind == "chunked_local":  # ChunkedLocalAttentionManager.find_longest_cache_hit
            start = (max_tokens // size * size) // block_size if max_tokens > 0 else 0
            leading = self._leading_run(request, members, start, max_blocks)
            return [[NULL_BLOCK] * start + lst for lst in leading]
        # SlidingWindowManager.find_longest_cache_hit: the rightmost run of `need` cached blocks
        need = _ceil(size - 1, block_size)
        table: list[list[int]] = [[NULL_BLOCK] * max_blocks for _ in members]
        run = 0
        for i in range(max_blocks - 1, -1, -1):
            row = [self._cached_block(request, i, g) for g in members]
            if any(b is None for b in row):
                run = 0
                continue
            for lst, b in zip(table, row):
                assert b is not None
                lst[i] = b
            run += 1
            if run >= need:
                return [lst[: i + run] for lst in table]
        return [lst[:run] for lst in table]

    def admission_blocks(self, hit: GroupHit, num_tokens: int, *, capped: bool) -> int:
        """G4: the free blocks admitting a request with ``hit`` to hold ``num_tokens`` tokens
        takes [blocks] (new blocks and the hit's blocks nobody holds); ``capped`` applies the
        windowed groups' admission cap (the whole-sequence check)."""
        block_size = self.block_size
        hit_blocks = hit.tokens // block_size
        required_all = _ceil(num_tokens, block_size)
        total = self.num_mamba
        for g in self.attention:
            required = required_all
            cap = self.admission_caps[g]
            if capped and cap is not None and cap < required:
                required = cap
            skip = skipped_tokens(self.groups[g], hit.tokens) // block_size
            new = required - max(skip, hit_blocks)
            total += new if new > 0 else 0
            if self.caching:
                ref = self._ref
                total += sum(1 for b in hit.blocks[g][skip:] if b != NULL_BLOCK and not ref[b])
        return total

    def take_hit(self, request: int, hit: GroupHit) -> None:
        """G4: give a waiting ``request`` its hit: the blocks past each group's skipped ones
        (out of the free queue for those nobody held, one more reference each), nulls before
        them (``add_local_computed_blocks``)."""
        block_size = self.block_size
        hit_blocks = hit.tokens // block_size
        self.table[request] = hit_blocks
        for g in self.attention:
            skip = min(skipped_tokens(self.groups[g], hit.tokens) // block_size, hit_blocks)
            if g in self.nulls:
                self.nulls[g][request] = skip
            if not self.caching:
                continue
            kept = hit.blocks[g][skip:]
            ref = self._ref
            for b in kept:
                if not ref[b]:
                    del self.free_queue[b]
                ref[b] += 1
            self.blocks[g][request] = [NULL_BLOCK] * skip + kept
        if self.caching:
            self.num_cached[request] = hit_blocks

    # ---------------------------------------------------------------------------------------
    # The free queue (caching on)

    def _take(self, count: int) -> list[int]:
        """``count`` blocks from the head of the free queue, evicting the key of cached ones."""
        taken = []
        pop = self.free_queue.popitem
        for _ in range(count):
            block = pop(last=False)[0]
            entry = self._block_key[block]
            if entry is not None:
                self._block_key[block] = None
                copies = self._cached[entry]
                copies.remove(block)
                if not copies:
                    del self._cached[entry]
            self._ref[block] = 1
            taken.append(block)
        return taken

    def _free_blocks(self, blocks: list[int]) -> int:
        """Drop one reference of each of ``blocks`` (in eviction order); those nobody holds any
        more go back to the free queue: unkeyed ones to its head (the first at the very head),
        keyed ones to its tail. Returns how many became free [blocks] (``BlockPool.free_blocks``)."""
        ref = self._ref
        to_head: list[int] = []
        to_tail: list[int] = []
        for block in blocks:
            ref[block] -= 1
            if not ref[block]:
                (to_tail if self._block_key[block] is not None else to_head).append(block)
        queue = self.free_queue
        for block in reversed(to_head):
            queue[block] = None
            queue.move_to_end(block, last=False)
        for block in to_tail:
            queue[block] = None
        return len(to_head) + len(to_tail)

    @property
    def num_free(self) -> int:
        """Blocks in the free queue (caching on) [blocks]."""
        return len(self.free_queue)
