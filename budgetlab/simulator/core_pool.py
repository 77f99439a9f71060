"""The compiled core's queues and KV block pool: the same rules as :mod:`.queues` and
:mod:`.blocks`, over arrays, compiled with numba.

Each function takes the core's state record (:class:`~budgetlab.simulator.core_state.CoreState`,
arrays only) as ``st`` and changes it in place. The rules, as the readable modules state them:

* **Waiting queue** — FCFS: a ring buffer (``appendleft`` for a preempted request, ``append``
  for an arrival). Priority (``vllm-v1-prefix-async-priority.md`` rules 32–33): a binary heap
  on ``(priority, arrival index)``, a preempted request pushed at its own key.
* **Running list** — admission order; a removal keeps the order of the rest.
* **Prefix-cache pool** (``vllm-v1-prefix-async-priority.md`` rules 1–21, :mod:`.blocks`):
  block ``i`` of a request is keyed by its stream and ``i`` (:class:`~.blocks.BlockKeys`);
  lookups walk the leading cached blocks, at most ``(known − 1) // block_size``; allocation
  takes the free queue's head and evicts a cached block's key; a release visits a request's
  blocks last first and puts unkeyed ones at the head (the last block at the very head),
  keyed ones at the tail; of two copies of one key the earliest entered is the one hit. A
  request that shares nothing enters its blocks in the key table only when it is preempted.

The free queue is a doubly linked list over blocks ``1 .. num_blocks`` with node 0 as its
sentinel (block 0 is vLLM's null block); the copies of one key form a chain in entry order,
the earliest in ``st.cached``. A request's blocks are in a row of ``st.table`` (one row per
request holding blocks: at most ``max_num_seqs`` at once).
"""

from __future__ import annotations

from typing import Any

from budgetlab.simulator._jit import core_jit
from budgetlab.simulator.core_state import BLOCK_BITS, N_FREE_SLOTS, N_HEAP, N_RUNNING, N_WAIT_HEAD, N_WAITING

__all__ = [
    "waiting_push_back",
    "waiting_push_front",
    "waiting_head",
    "waiting_pop",
    "running_remove",
    "block_key",
    "lookup",
    "take_hit",
    "grow",
    "cache_full_blocks",
    "release",
]

_NO_KEY = -1


# --------------------------------------------------------------------------------------------
# The waiting queue: FCFS ring buffer, or the priority heap
# --------------------------------------------------------------------------------------------


@core_jit
def _heap_less(st: Any, a: int, b: int) -> bool:
    """Whether request ``a`` comes before ``b``: the smaller ``(priority, arrival index)``."""
    pa, pb = st.priority[a], st.priority[b]
    return pa < pb or (pa == pb and a < b)


@core_jit
def _heap_push(st: Any, request: int) -> None:
    heap = st.waiting
    i = st.n[N_HEAP]
    heap[i] = request
    st.n[N_HEAP] = i + 1
    while i > 0:  # sift up
        parent = (i - 1) >> 1
        if _heap_less(st, heap[i], heap[parent]):
            heap[i], heap[parent] = heap[parent], heap[i]
            i = parent
        else:
            break


@core_jit
def _heap_pop(st: Any) -> int:
    heap = st.waiting
    top = heap[0]
    size = st.n[N_HEAP] - 1
    st.n[N_HEAP] = size
    if size == 0:
        return top
    heap[0] = heap[size]
    i = 0
    while True:  # sift down
        left = 2 * i + 1
        if left >= size:
            break
        child = left
        if left + 1 < size and _heap_less(st, heap[left + 1], heap[left]):
            child = left + 1
        if _heap_less(st, heap[child], heap[i]):
            heap[i], heap[child] = heap[child], heap[i]
            i = child
        else:
            break
    return top


@core_jit
def waiting_push_back(st: Any, request: int, priority_policy: bool) -> None:
    """Queue an arrival: at the back (FCFS), at its key (priority)."""
    if priority_policy:
        _heap_push(st, request)
        st.n[N_WAITING] += 1
        return
    capacity = len(st.waiting)
    st.waiting[(st.n[N_WAIT_HEAD] + st.n[N_WAITING]) % capacity] = request
    st.n[N_WAITING] += 1


@core_jit
def waiting_push_front(st: Any, request: int, priority_policy: bool) -> None:
    """Queue a preempted request: at the front (FCFS), at its own key (priority, rule 33)."""
    if priority_policy:
        _heap_push(st, request)
        st.n[N_WAITING] += 1
        return
    capacity = len(st.waiting)
    head = (st.n[N_WAIT_HEAD] - 1) % capacity
    st.waiting[head] = request
    st.n[N_WAIT_HEAD] = head
    st.n[N_WAITING] += 1


@core_jit
def waiting_head(st: Any) -> int:
    """The head of the waiting queue (FCFS's front; the priority heap's smallest key)."""
    return st.waiting[st.n[N_WAIT_HEAD]]


@core_jit
def waiting_pop(st: Any, priority_policy: bool) -> int:
    """Take the head off the waiting queue."""
    st.n[N_WAITING] -= 1
    if priority_policy:
        return _heap_pop(st)
    head = st.n[N_WAIT_HEAD]
    st.n[N_WAIT_HEAD] = (head + 1) % len(st.waiting)
    return st.waiting[head]


@core_jit
def running_remove(st: Any, request: int) -> None:
    """Remove ``request`` from the running list, keeping the others' order."""
    running = st.running
    count = st.n[N_RUNNING]
    j = 0
    for i in range(count):
        r = running[i]
        if r != request:
            running[j] = r
            j += 1
    st.n[N_RUNNING] = j


# --------------------------------------------------------------------------------------------
# The prefix-cache block pool
# --------------------------------------------------------------------------------------------


@core_jit
def block_key(st: Any, request: int, block: int) -> int:
    """The content key of block ``block`` of ``request`` (:meth:`.blocks.BlockKeys.key`)."""
    if (block + 1) * st.cfg_block_size <= st.shared_tokens[request]:
        return (st.shared_stream[request] << BLOCK_BITS) | block
    return (st.tail_stream[request] << BLOCK_BITS) | block


@core_jit
def _queue_unlink(st: Any, block: int) -> None:
    nxt, prv = st.fq_next[block], st.fq_prev[block]
    st.fq_next[prv] = nxt
    st.fq_prev[nxt] = prv


@core_jit
def _queue_to_tail(st: Any, block: int) -> None:
    last = st.fq_prev[0]
    st.fq_next[last] = block
    st.fq_prev[block] = last
    st.fq_next[block] = 0
    st.fq_prev[0] = block


@core_jit
def _queue_to_head(st: Any, block: int) -> None:
    first = st.fq_next[0]
    st.fq_prev[first] = block
    st.fq_next[block] = first
    st.fq_prev[block] = 0
    st.fq_next[0] = block


@core_jit
def _row(st: Any, request: int) -> int:
    """The table row of ``request``'s blocks, taking a free one when it holds none."""
    row = st.row_of[request]
    if row < 0:
        free = st.n[N_FREE_SLOTS] - 1
        row = st.free_rows[free]
        st.n[N_FREE_SLOTS] = free
        st.row_of[request] = row
        st.row_len[row] = 0
    return row


@core_jit
def lookup(st: Any, request: int, known_tokens: int) -> tuple[int, int]:
    """``request``'s leading cached blocks (rules 7–8, 20) into ``st.hit``; returns how many and
    how many of them running requests hold."""
    count = 0
    held = 0
    for i in range((known_tokens - 1) // st.cfg_block_size):
        key = block_key(st, request, i)
        if key not in st.cached:
            break
        block = st.cached[key]
        st.hit[count] = block
        count += 1
        if st.ref[block]:
            held += 1
    return count, held


@core_jit
def take_hit(st: Any, request: int, num_hit: int) -> None:
    """Give ``request`` (holding nothing) the ``num_hit`` blocks of its hit in ``st.hit``."""
    row = _row(st, request)
    for i in range(num_hit):
        block = st.hit[i]
        if not st.ref[block]:
            _queue_unlink(st, block)
        st.ref[block] += 1
        st.table[row, i] = block
    st.row_len[row] = num_hit
    st.num_cached[request] = num_hit
    st.num_entered[request] = num_hit


@core_jit
def _evict(st: Any, block: int) -> None:
    """Drop ``block``'s key: the next copy of the key becomes the earliest (rule 18, 20)."""
    key = st.block_key_of[block]
    st.block_key_of[block] = _NO_KEY
    nxt, prv = st.copy_next[block], st.copy_prev[block]
    if prv < 0:  # the earliest copy
        if nxt >= 0:
            st.cached[key] = nxt
            st.copy_prev[nxt] = -1
        else:
            del st.cached[key]
    else:
        st.copy_next[prv] = nxt
        if nxt >= 0:
            st.copy_prev[nxt] = prv
    st.copy_next[block] = -1
    st.copy_prev[block] = -1


@core_jit
def grow(st: Any, request: int, num_blocks: int) -> None:
    """Give ``request`` ``num_blocks`` new blocks from the free queue's head (rule 18)."""
    if num_blocks <= 0:
        return
    row = _row(st, request)
    length = st.row_len[row]
    for _ in range(num_blocks):
        block = st.fq_next[0]
        _queue_unlink(st, block)
        if st.block_key_of[block] != _NO_KEY:
            _evict(st, block)
        st.ref[block] = 1
        st.table[row, length] = block
        length += 1
    st.row_len[row] = length


@core_jit
def _enter(st: Any, request: int, first: int, last: int) -> None:
    """Put blocks ``first .. last − 1`` of ``request`` in the key table, in order."""
    row = st.row_of[request]
    for i in range(first, last):
        block = st.table[row, i]
        key = block_key(st, request, i)
        st.block_key_of[block] = key
        if key not in st.cached:
            st.cached[key] = block
        else:  # a later copy: the end of the key's chain
            tail = st.cached[key]
            while st.copy_next[tail] >= 0:
                tail = st.copy_next[tail]
            st.copy_next[tail] = block
            st.copy_prev[block] = tail
    st.num_entered[request] = last


@core_jit
def cache_full_blocks(st: Any, request: int, num_tokens: int) -> None:
    """Enter every block of ``request`` that ``num_tokens`` tokens fill in the cache (rule 4)."""
    first = st.num_cached[request]
    last = num_tokens // st.cfg_block_size
    if last <= first:
        return
    st.num_cached[request] = last
    if not st.private[request]:
        _enter(st, request, first, last)


@core_jit
def release(st: Any, request: int, finished: bool) -> int:
    """Drop ``request``'s references (a finish, or a preemption); returns the blocks that became
    free (rules 14, 16)."""
    row = st.row_of[request]
    if row < 0:
        st.num_cached[request] = 0
        st.num_entered[request] = 0
        return 0
    length = st.row_len[row]
    freed = 0
    if st.private[request] and finished:
        # All its own and nobody can hit them: the blocks past its cached ones to the head (the
        # last at the very head), the cached ones to the tail, deepest first.
        cached = st.num_cached[request]
        for i in range(length):
            st.ref[st.table[row, i]] = 0
        for i in range(cached, length):
            _queue_to_head(st, st.table[row, i])
        for i in range(cached - 1, -1, -1):
            _queue_to_tail(st, st.table[row, i])
        freed = length
    else:
        if st.private[request]:
            _enter(st, request, st.num_entered[request], st.num_cached[request])  # its recompute may hit them
        # visited last first: unkeyed ones to the head (the last block at the very head),
        # keyed ones to the tail in the order visited
        num_head = 0
        for i in range(length - 1, -1, -1):
            block = st.table[row, i]
            st.ref[block] -= 1
            if not st.ref[block]:
                if st.block_key_of[block] == _NO_KEY:
                    st.hit[num_head] = block
                    num_head += 1
                else:
                    _queue_to_tail(st, block)
                freed += 1
        for j in range(num_head - 1, -1, -1):
            _queue_to_head(st, st.hit[j])
    st.row_of[request] = -1
    st.free_rows[st.n[N_FREE_SLOTS]] = row
    st.n[N_FREE_SLOTS] += 1
    st.num_cached[request] = 0
    st.num_entered[request] = 0
    return freed
