"""The KV block pool with prefix caching: content keys, reference counts, an LRU free queue.

With ``EngineConfig(enable_prefix_caching=True)`` the simulator keeps the identity of every
block the way vLLM V1's ``BlockPool`` and ``KVCacheManager`` do
(``shared/reference/vllm-v1-prefix-async-priority.md`` section 1, rules 1–21):

* **Keys.** Only full blocks are cached. Block ``i`` of a request is keyed by the token prefix
  up to ``(i + 1) × block_size`` (vLLM chains each block's hash to its parent's, which is the
  same thing). :class:`BlockKeys` turns ``Request.prefix_id`` / ``prefix_tokens`` into those
  keys: a block inside the request's shared stream is the stream's block ``i``; past it, two
  requests whose whole prompts are one stream of the same length generate the same tokens (as
  in vLLM's own tests) and share the block; anything else is the request's own.
* **Lookup** (:meth:`PrefixBlockPool.lookup`), for a request leaving the waiting queue: its
  leading blocks that are cached, at most ``(known − 1) // block_size`` of them (at least one
  token is always computed); of two cached copies of one key the earliest entered is used.
* **Allocation** (:meth:`PrefixBlockPool.take_hit`, :meth:`PrefixBlockPool.grow`) takes blocks
  from the head of the free queue; taking one that is cached evicts its key then. A hit takes
  the block out of the free queue if nobody held it and adds a reference.
* **Entering the cache** (:meth:`PrefixBlockPool.cache_full_blocks`) happens when a chunk is
  allocated, before its forward pass: every block that the chunk fills (up to the known
  tokens) becomes hittable at once.
* **Release** (:meth:`PrefixBlockPool.release`), on a finish or a preemption: the request's
  blocks are visited last first; those nobody references any more go back to the free queue,
  unkeyed ones to its head (reused first), keyed ones to its tail, so the deepest block of a
  chain is evicted first and a block that was hit again moves to the back (LRU).

The free queue's length is the simulator's free-block count (``KVPool.free_blocks``); the
steps keep that count themselves and ask the pool only for what sharing changes: the blocks a
request can hit, how many of them are held by running requests (those cost nothing at
admission), and how many blocks a release really frees.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict, defaultdict
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from budgetlab.simulator.inputs import RequestTable

__all__ = ["BlockKeys", "PrefixBlockPool", "Hit"]

#: A key is ``stream << _BLOCK_BITS | block index``: one stream per prefix group, per group
#: and prompt length (identical whole prompts), and per request (its own tokens).
_BLOCK_BITS = 32
#: ``_block_key`` of a block that is not in the key table.
_NO_KEY = -1


class BlockKeys:
    """Content keys of every request's blocks, from its prefix group and lengths.

    A key is an int naming a token prefix: the block index and the *stream* the block's tokens
    come from. Block ``i`` of a request (tokens ``[i·B, (i+1)·B)``) is in its group's shared
    stream when ``(i + 1)·B <= prefix_tokens``; past that it is in the stream of its group
    and prompt length when its whole prompt is the group's (``prefix_tokens ==
    prompt_tokens``: such requests generate the same tokens, as in vLLM's tests), else in its
    own.

    Parameters
    ----------
    prefix_id : sequence
        Each request's ``prefix_id`` (None: shares nothing), in the simulator's request order.
    prefix_tokens, prompt_tokens : sequence or numpy.ndarray of int
        Each request's shared tokens and prompt length [tokens].
    block_size : int
        Tokens per block [tokens].
    """

    __slots__ = ("_block_size", "_shared", "_shared_stream", "_tail_stream")

    def __init__(
        self,
        prefix_id: Sequence[Hashable | None],
        prefix_tokens: Sequence[int] | np.ndarray,
        prompt_tokens: Sequence[int] | np.ndarray,
        block_size: int,
    ) -> None:
        # Columnar (``array.array``: 8 bytes a request). Streams of groups and of whole-prompt
        # streams are numbered in order of appearance; a request's own stream is a number of
        # its own after those (only equality of keys matters).
        count = len(prefix_id)
        shared_tokens = np.asarray(prefix_tokens, dtype=np.int64)
        prompts = np.asarray(prompt_tokens, dtype=np.int64)
        streams: dict[Hashable, int] = {}
        grouped = [r for r, group in enumerate(prefix_id) if group is not None]
        shared_stream = np.full(count, -1, dtype=np.int64)
        tail_stream = np.full(count, -1, dtype=np.int64)
        for request in grouped:
            group, shared, prompt = prefix_id[request], int(shared_tokens[request]), int(prompts[request])
            shared_stream[request] = streams.setdefault(("group", group), len(streams))
            if shared == prompt:
                tail_stream[request] = streams.setdefault(("prompt", group, prompt), len(streams))
        own = tail_stream < 0
        tail_stream[own] = len(streams) + np.flatnonzero(own)
        self._shared = _int_buffer(shared_tokens)
        self._shared_stream = _int_buffer(shared_stream)
        self._tail_stream = _int_buffer(tail_stream)
        self._block_size = block_size

    @classmethod
    def of_table(cls, table: RequestTable, order: np.ndarray, block_size: int) -> BlockKeys:
        """The keys of ``table``'s requests, in the arrival ``order`` the simulator runs them in."""
        prefix_id = [table.prefix_id[i] for i in order.tolist()]
        return cls(prefix_id, table.prefix_tokens[order], table.prompt_tokens[order], block_size)

    def key(self, request: int, block: int) -> int:
        """The key of block ``block`` (0-based) of ``request``."""
        if (block + 1) * self._block_size <= self._shared[request]:
            return self._shared_stream[request] << _BLOCK_BITS | block
        return self._tail_stream[request] << _BLOCK_BITS | block

    def shares_nothing(self, request: int) -> bool:
        """Whether no other request can ever have a block key of ``request``'s."""
        return self._shared_stream[request] < 0

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each request's shared tokens, shared stream (-1: none) and tail stream, as int64 arrays
        (copies; the compiled core keys blocks from them the same way as :meth:`key`)."""
        return (
            np.frombuffer(self._shared, dtype=np.int64).copy(),
            np.frombuffer(self._shared_stream, dtype=np.int64).copy(),
            np.frombuffer(self._tail_stream, dtype=np.int64).copy(),
        )

    def private_mask(self) -> np.ndarray:
        """:meth:`shares_nothing` of every request, as one boolean array."""
        return np.frombuffer(self._shared_stream, dtype=np.int64) < 0


class Hit:
    """The result of a lookup: the cached blocks a request starts with.

    Attributes
    ----------
    blocks : list of int
        Block ids, in order from block 0.
    num_held : int
        How many of them running requests hold (taking them costs no free block).
    """

    __slots__ = ("blocks", "num_held")

    def __init__(self, blocks: list[int], num_held: int) -> None:
        self.blocks = blocks
        self.num_held = num_held

    def tokens(self, block_size: int) -> int:
        """The tokens the hit covers [tokens]."""
        return len(self.blocks) * block_size


class PrefixBlockPool:
    """Physical blocks ``1 .. num_blocks`` (block 0 is vLLM's null block), their keys and
    reference counts, the cache of keyed blocks and the free queue (see the module docstring).

    Parameters
    ----------
    num_blocks : int
        Usable blocks [blocks].
    keys : BlockKeys
    num_requests : int
    """

    __slots__ = (
        "_block_key",
        "_cached",
        "_later",
        "_num_entered",
        "_private",
        "_private_np",
        "_ref",
        "block_size",
        "blocks",
        "free_queue",
        "keys",
        "num_cached",
    )

    def __init__(self, num_blocks: int, keys: BlockKeys, num_requests: int, block_size: int) -> None:
        self.block_size = block_size
        self.keys = keys
        #: The free queue, head first (an ordered set of block ids).
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks + 1))
        self._ref = array("q", [0]) * (num_blocks + 1)
        self._block_key = [-1] * (num_blocks + 1)  # -1: not cached
        #: key -> its earliest entered cached block; later copies of one key (rule 20) in order
        self._cached: dict[int, int] = {}
        self._later: dict[int, list[int]] = {}
        #: each request's blocks, block 0 first (only requests holding some have an entry)
        self.blocks: defaultdict[int, list[int]] = defaultdict(list)
        #: how many of each request's leading blocks are in the cache (vLLM's num_cached_block)
        self.num_cached = array("q", [0]) * num_requests
        # A request that shares nothing can only ever hit its own blocks, after a preemption;
        # its blocks are entered in the key table then, not while it runs (the same table
        # whenever anyone looks). _num_entered: its leading blocks in the table.
        self._private_np = keys.private_mask()
        self._private = self._private_np.tolist()
        self._num_entered = array("q", [0]) * num_requests

    # ---------------------------------------------------------------------------------------
    # Reading

    @property
    def num_free(self) -> int:
        """Blocks in the free queue, cached ones nobody holds included [blocks]."""
        return len(self.free_queue)

    def lookup(self, request: int, known_tokens: int) -> Hit:
        """The leading cached blocks of ``request``: at most ``(known − 1) // block_size`` of
        them, stopping at the first block not cached (rules 7–8, 20)."""
        key = self.keys.key
        cached = self._cached
        ref = self._ref
        blocks: list[int] = []
        held = 0
        for i in range((known_tokens - 1) // self.block_size):
            block = cached.get(key(request, i))
            if block is None:
                break
            blocks.append(block)
            if ref[block]:
                held += 1
        return Hit(blocks, held)

    # ---------------------------------------------------------------------------------------
    # Changing

    def take_hit(self, request: int, hit: Hit) -> None:
        """Give ``request`` (holding nothing) the blocks of its hit: one more reference each,
        out of the free queue for those nobody held."""
        ref = self._ref
        free_queue = self.free_queue
        for block in hit.blocks:
            if not ref[block]:
                del free_queue[block]
            ref[block] += 1
        self.blocks[request] = list(hit.blocks)
        self.num_cached[request] = len(hit.blocks)
        self._num_entered[request] = len(hit.blocks)

    def grow(self, request: int, num_blocks: int) -> None:
        """Give ``request`` ``num_blocks`` new blocks from the head of the free queue, evicting
        the key of any cached one taken (rule 18)."""
        held = self.blocks[request]
        ref = self._ref
        block_key = self._block_key
        pop = self.free_queue.popitem
        for _ in range(num_blocks):
            block = pop(last=False)[0]
            if block_key[block] != _NO_KEY:
                self._evict(block)
            ref[block] = 1
            held.append(block)

    def _evict(self, block: int) -> None:
        key = self._block_key[block]
        self._block_key[block] = _NO_KEY
        later = self._later.get(key)
        if self._cached[key] == block:
            if later:
                self._cached[key] = later.pop(0)
            else:
                del self._cached[key]
        else:
            assert later is not None
            later.remove(block)
        if later is not None and not later:
            del self._later[key]

    def cache_full_blocks(self, request: int, num_tokens: int) -> None:
        """Enter in the cache every block of ``request`` that ``num_tokens`` tokens fill
        (rule 4); blocks already entered are left as they are."""
        first = self.num_cached[request]
        last = num_tokens // self.block_size
        if last <= first:
            return
        self.num_cached[request] = last
        if not self._private[request]:
            self._enter(request, first, last)

    def _enter(self, request: int, first: int, last: int) -> None:
        """Put blocks ``first .. last − 1`` of ``request`` in the key table, in order."""
        held = self.blocks[request]
        key = self.keys.key
        cached = self._cached
        block_key = self._block_key
        for i in range(first, last):
            block = held[i]
            k = key(request, i)
            block_key[block] = k
            if k in cached:
                self._later.setdefault(k, []).append(block)
            else:
                cached[k] = block
        self._num_entered[request] = last

    def release(self, request: int, *, finished: bool) -> int:
        """Drop ``request``'s references (a finish, or a preemption when ``finished`` is
        False); returns the blocks that became free [blocks] (rules 14, 16)."""
        held = self.blocks[request]
        ref = self._ref
        block_key = self._block_key
        free_queue = self.free_queue
        if self._private[request]:
            entered, cached = self._num_entered[request], self.num_cached[request]
            if finished:
                # Nobody can ever hit them: blocks 0 .. cached − 1 go to the tail as cached
                # ones (deepest first), the rest to the head, but only the blocks a lookup
                # could reach (entered in the table) carry a key. All were its alone.
                for block in held[:entered]:
                    ref[block] = 0
                for block in held[cached:]:  # the last block first at the very head
                    free_queue[block] = None
                    free_queue.move_to_end(block, last=False)
                free_queue.update(dict.fromkeys(held[cached - 1 :: -1] if cached else ()))
                del self.blocks[request]
                self.num_cached[request] = 0
                self._num_entered[request] = 0
                return len(held)
            self._enter(request, entered, cached)  # its recompute may hit them
        to_head: list[int] = []
        to_tail: list[int] = []
        for block in reversed(held):
            ref[block] -= 1
            if not ref[block]:
                (to_head if block_key[block] == _NO_KEY else to_tail).append(block)
        for block in reversed(to_head):  # the last block first at the very head
            free_queue[block] = None
            free_queue.move_to_end(block, last=False)
        for block in to_tail:
            free_queue[block] = None
        self.blocks.pop(request, None)
        self.num_cached[request] = 0
        self._num_entered[request] = 0
        return len(to_head) + len(to_tail)

    # ---------------------------------------------------------------------------------------
    # Reading single blocks (tests and checks)

    def reference_count(self, block: int) -> int:
        """Requests holding ``block`` now [count]."""
        return 0 if block in self.free_queue else int(self._ref[block])

    def key_of_block(self, block: int) -> int | None:
        """The cache key ``block`` carries, None when it is not cached."""
        key = self._block_key[block]
        return None if key == _NO_KEY else key


def _int_buffer(values: np.ndarray) -> array:
    """An ``array.array`` of int64 with ``values`` (fast scalar reads from Python)."""
    buffer = array("q")
    buffer.frombytes(np.ascontiguousarray(values, dtype=np.int64).tobytes())
    return buffer
