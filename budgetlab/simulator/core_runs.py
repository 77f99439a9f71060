"""Runs of decode-only steps, advanced at once by the compiled core.

When every running request decodes and nobody can leave the waiting queue before an event,
the next steps are all alike: each running request schedules one token, in the same order, and
nothing else happens until the first of

* a completion (the step where a request samples its last token ends the run, inclusive);
* a shortage of KV blocks (the run ends before the step whose new blocks would not fit: each
  decoder takes a block when its computed tokens are a multiple of the block size, so the
  demand of the first ``s`` steps is known in advance);
* an arrival that could be admitted (the run ends before the step that starts at or after it),
  which cannot happen while every sequence slot or the whole budget is taken, nor under FCFS
  while the head of the queue is refused for blocks (head-of-line blocking; the pool only
  shrinks during the run), and which under the priority policy ends the run while the head is
  refused for blocks (a better-priority arrival might fit);

:func:`plan_run` finds the longest such run that its bounds allow, and :func:`take_run` takes its
steps with their durations, one record row for the run (:mod:`.core_steps` expands it into its
steps on demand), and each request's state, gaps, chunk run and blocks once per run: the same
numbers as taking the steps one at a time with :func:`~.core.advance`'s step (the tests compare
the two bit for bit). With prefix caching, the
blocks taken and the blocks entered in the cache are visited in the order the steps would visit
them (step by step, each in running order); a run is not taken while a refused head of the queue
could gain prefix hits from the decoders.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from budgetlab.simulator._jit import core_jit
from budgetlab.simulator.core import (
    FINISHING,
    IN_FLIGHT,
    head_admission,
    record_chunk,
    release_blocks,
    stop_after_finishes,
)
from budgetlab.simulator.core_pool import cache_full_blocks, grow, running_remove, waiting_head, waiting_push_back
from budgetlab.simulator.core_state import (
    COST_PYTHON,
    F_CACHED,
    F_CONTEXT,
    F_DURATION,
    F_START,
    N_DONE,
    N_EVENT_REQUESTS,
    N_EVENT_ROWS,
    N_FINISHING,
    N_FREE,
    N_GAPS,
    N_IN_FLIGHT,
    N_KNOWN,
    N_LAST_SAMPLE,
    N_NEXT_ARRIVAL,
    N_PEAK_USED,
    N_RUN_STEP_S,
    N_RUN_STEPS,
    N_RUNNING,
    N_RUNS_TAKEN,
    N_STEP_ROWS,
    N_STEPS,
    N_WAITING,
    R_NUM_STEPS,
    S_CHUNKS,
    S_COMMON,
    S_DECODE,
    S_FREE,
    S_NUM_STEPS,
    S_PREEMPTIONS,
    S_PREFILL,
    S_RUNNING,
    S_WAITING,
    T_HORIZON,
    T_NOW,
)
from budgetlab.simulator.plan import DECODE

__all__ = ["plan_run", "take_run", "MAX_RUN_STEPS"]

#: The most steps one run takes (the driver's duration buffer for a cost priced in Python).
MAX_RUN_STEPS = 4096


@core_jit
def plan_run(st: Any) -> tuple[int, bool]:
    """The most steps a decode-only run starting now may take (0: the next step is not the start
    of one), and whether an arrival ends it (the run then stops before the first step that
    starts at or after the next arrival). Call it only when every running request decodes and
    none is finishing."""
    n = st.n
    count = n[N_RUNNING]
    if count == 0 or n[N_FINISHING] or count > st.cfg_budget:
        return 0, False
    seats_full = count >= st.cfg_max_num_seqs or count == st.cfg_budget
    stops_at_arrival = False
    if n[N_WAITING] > 0 and not seats_full:
        fits = head_admission(st, waiting_head(st), st.cfg_budget - count, n[N_FREE], st.cfg_threshold)[0]
        if fits or st.cfg_caching:
            return 0, False  # the head starts now, or a decoder's blocks might make it fit later
        stops_at_arrival = st.cfg_priority
    elif n[N_WAITING] == 0 and not seats_full:
        stops_at_arrival = True
    if stops_at_arrival and n[N_NEXT_ARRIVAL] >= n[N_KNOWN]:
        stops_at_arrival = False  # (a request not known yet arrives at the horizon, which ends the run)
    # the first completion, inclusive
    k = MAX_RUN_STEPS
    for i in range(count):
        r = st.running[i]
        left = st.output[r] - st.generated[r]
        if left < k:
            k = left
    # the last step whose new blocks fit the free pool: decoder j takes a block in step s
    # (0-based) when s = o_j mod B, o_j = (−computed_j) mod B, so every B steps take `count`
    # blocks; after m = free // count whole cycles, the first step of the next cycle whose
    # cumulative demand passes the rest ends the run
    block_size = st.cfg_block_size
    offsets = np.zeros(block_size, np.int64)
    for i in range(count):
        offsets[(-st.computed[st.running[i]]) % block_size] += 1
    free = n[N_FREE]
    cycles = free // count
    rest = free - cycles * count
    demand = 0
    for j in range(block_size):
        demand += offsets[j]
        if demand > rest:
            break
    fit = cycles * block_size + j
    if fit < k:
        k = fit
    return k, stops_at_arrival


@core_jit
def take_run(st: Any, durations: Any, k_max: int, stops_at_arrival: bool) -> int:
    """Take up to ``k_max`` decode-only steps of ``durations`` [s] (see the module docstring);
    returns how many were taken (at least 1)."""
    n, t = st.n, st.t
    count = n[N_RUNNING]
    block_size = st.cfg_block_size
    now = t[T_NOW]
    first_common = 0
    context = 0
    for i in range(count):
        r = st.running[i]
        context += st.computed[r]
        if st.last_token_at[r] == now:
            first_common += 1
    # the run's one record row: what its steps share and what regenerates the rest (core_steps)
    row = n[N_STEP_ROWS]
    si = st.step_int
    si[row, S_DECODE] = count
    si[row, S_PREFILL] = 0
    si[row, S_RUNNING] = count
    si[row, S_WAITING] = n[N_WAITING]
    si[row, S_PREEMPTIONS] = 0
    si[row, S_COMMON] = first_common
    si[row, S_CHUNKS] = count
    st.step_float[row, F_START] = now
    st.step_float[row, F_DURATION] = durations[0]
    st.step_float[row, F_CONTEXT] = float(context)
    st.step_float[row, F_CACHED] = 0.0
    n[N_STEP_ROWS] = row + 1
    # the steps: their starts, the arrivals queued before each, the blocks they take
    k = 0
    start = now
    first_end = now + durations[0]
    later_max = -1.0  # the largest gap of steps 2..k, the same for every decoder
    offsets_free = n[N_FREE]
    offsets = np.zeros(block_size, np.int64)  # decoders by the step (mod B) at which they take a block
    for i in range(count):
        offsets[(-st.computed[st.running[i]]) % block_size] += 1
    si[row, S_FREE] = offsets_free - offsets[0]  # after its first step, as a single step's
    while k < k_max:
        if k > 0:
            if start >= t[T_HORIZON]:  # a request not known yet may arrive by this step's start
                break
            i = n[N_NEXT_ARRIVAL]
            if i < n[N_KNOWN] and st.arrival[i] <= start:
                if stops_at_arrival:
                    break
                while i < n[N_KNOWN] and st.arrival[i] <= start:
                    waiting_push_back(st, i, st.cfg_priority)
                    i += 1
                n[N_NEXT_ARRIVAL] = i
        duration = durations[k]
        offsets_free -= offsets[k % block_size]  # this step's new blocks
        used = st.cfg_num_blocks - offsets_free
        if used > n[N_PEAK_USED]:
            n[N_PEAK_USED] = used
        if k > 0:
            gap = (start + duration) - start
            if gap > later_max:
                later_max = gap
        start = start + duration
        k += 1
    si[row, S_NUM_STEPS] = k
    if st.cfg_cost_kind == COST_PYTHON and k > 1:  # the durations cannot be priced again: kept
        at = n[N_RUN_STEP_S]
        st.run_step_s[at : at + k] = durations[:k]
        n[N_RUN_STEP_S] = at + k
    first_step = n[N_STEPS]
    n[N_STEPS] += k
    n[N_RUNS_TAKEN] += 1
    n[N_RUN_STEPS] += k
    n[N_LAST_SAMPLE] = n[N_STEPS]
    end = start
    if st.cfg_caching:
        _pool_events(st, k)
    num_finished = 0
    for i in range(count):
        r = st.running[i]
        c = st.computed[r]
        record_chunk(st, first_step, r, 1, DECODE, c)
        if k > 1:
            st.runs[st.open_run[r], R_NUM_STEPS] += k - 1  # the run's other steps extend its chunk run
        last = st.last_token_at[r]
        gap = first_end - last
        if last != now:  # it did not sample in the step before the run
            st.gaps[n[N_GAPS]] = gap
            n[N_GAPS] += 1
        if gap > st.max_gap[r]:
            st.max_gap[r] = gap
        if later_max > st.max_gap[r]:
            st.max_gap[r] = later_max
        st.computed[r] = c + k
        st.generated[r] += k
        st.last_token_at[r] = end
        if st.generated[r] == st.output[r]:
            st.finished_at[r] = end
            st.scratch[1, num_finished] = r
            num_finished += 1
    n[N_FREE] = offsets_free
    if st.cfg_pipelined and st.cfg_caching:
        for i in range(count):
            r = st.running[i]
            st.in_flight[i] = r
            st.flags[r] |= IN_FLIGHT
        n[N_IN_FLIGHT] = count
    t[T_NOW] = end
    if num_finished:
        _finish(st, first_step + k - 1, num_finished)
    return k


@core_jit
def _finish(st: Any, step: int, num_finished: int) -> None:
    """The completions at the run's last step (as :func:`~.core.sample_step` retires them)."""
    n = st.n
    n[N_DONE] += num_finished
    stop_after_finishes(st, st.t[T_NOW])
    free = n[N_FREE]
    for i in range(num_finished):
        r = st.scratch[1, i]
        if st.cfg_pipelined:
            st.finishing[i] = r
            st.flags[r] |= FINISHING
        else:
            free += release_blocks(st, r, True)
            running_remove(st, r)
    if st.cfg_pipelined:
        n[N_FINISHING] = num_finished
    n[N_FREE] = free
    e = n[N_EVENT_ROWS]
    st.event_header[e, 0] = step
    st.event_header[e, 1] = 0
    st.event_header[e, 2] = 0
    st.event_header[e, 3] = num_finished
    n[N_EVENT_ROWS] = e + 1
    j = n[N_EVENT_REQUESTS]
    for i in range(num_finished):
        st.event_requests[j] = st.scratch[1, i]
        j += 1
    n[N_EVENT_REQUESTS] = j


@core_jit
def _pool_events(st: Any, k: int) -> None:
    """The pool's side of ``k`` decode-only steps, in step order then running order: each
    decoder's new blocks, then the blocks it fills entering the cache (up to the tokens the
    scheduler knows: one less while its latest token is in flight, when pipelined).

    Decoder ``j`` (computed tokens ``c`` before the run) takes a block in step ``s`` (0-based)
    when ``c + s`` is a multiple of the block size ``B``, and enters one in the cache when its
    limit ``c + s + 1 − lag`` is (``lag``: 1 pipelined, 0 synchronous; in step 0 whether its
    token is in flight). So the decoders are sorted once into ``B`` classes by the step (mod B)
    of their events, in running order, and only the events are visited."""
    count = st.n[N_RUNNING]
    block_size = st.cfg_block_size
    lag = 1 if st.cfg_pipelined else 0
    members = st.running[:count].copy()
    grow_class = np.empty(count, np.int64)
    cache_class = np.empty(count, np.int64)
    for i in range(count):
        c = st.computed[members[i]]
        grow_class[i] = (-c) % block_size
        cache_class[i] = (-(c + 1 - lag)) % block_size
    grow_order, grow_start = _classes(grow_class, block_size)
    for s in range(k):
        b = s % block_size
        for j in range(grow_start[b], grow_start[b + 1]):
            grow(st, members[grow_order[j]], 1)
    for i in range(count):  # step 0: each decoder's limit, its token in flight or not
        r = members[i]
        cache_full_blocks(st, r, st.computed[r] + 1 - (1 if st.flags[r] & IN_FLIGHT else 0))
    if k < 2:
        return
    for i in range(count):  # those that share nothing only count their cached blocks
        r = members[i]
        if st.private[r]:
            cache_full_blocks(st, r, st.computed[r] + k - lag)
            cache_class[i] = -1
    cache_order, cache_start = _classes(cache_class, block_size)
    for s in range(1, k):
        b = s % block_size
        for j in range(cache_start[b], cache_start[b + 1]):
            r = members[cache_order[j]]
            cache_full_blocks(st, r, st.computed[r] + s + 1 - lag)


@core_jit
def _classes(classes: Any, num_classes: int) -> tuple[Any, Any]:
    """A stable counting sort: the positions of ``classes`` grouped by class (``-1``: none), and
    where each class starts in them (``num_classes + 1`` offsets)."""
    start = np.zeros(num_classes + 1, np.int64)
    for c in classes:
        if c >= 0:
            start[c + 1] += 1
    for b in range(num_classes):
        start[b + 1] += start[b]
    order = np.empty(start[num_classes], np.int64)
    fill = start[:num_classes].copy()
    for i in range(len(classes)):
        c = classes[i]
        if c >= 0:
            order[fill[c]] = i
            fill[c] += 1
    return order, start
