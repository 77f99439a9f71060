"""The compiled engine core's step: vLLM V1's scheduling rules, each stated once, compiled with numba.

The rules are those of the package docstring (:mod:`budgetlab.simulator`, rules 1–10 and the
priority and ``decode-first`` rules), read against ``shared/reference/vllm-v1-scheduling.md``
and ``vllm-v1-prefix-async-priority.md``; the readable reference mode (:mod:`.step`,
:mod:`.waiting`, :mod:`.blocks`) states them in plain Python, and the tests keep the two equal
bit for bit. Where to find each rule here:

* arrivals (rule 1) — :func:`queue_arrivals`;
* the running pass (rule 2; the priority policy's victims, rule 6; ``decode-first``'s order)
  — :func:`running_pass`, with :func:`take_victim` and :func:`preempt`;
* the waiting pass and its three gates (rule 3; the gates are :mod:`budgetlab.admission`'s,
  compiled as they are) — :func:`admit_waiting` and :func:`head_admission`;
* the prefix cache (rule 8) — :func:`allocate_chunk`, :func:`cache_limit` and :mod:`.core_pool`;
* sampling, finishing and the record (rule 4) — :func:`finish_step`, :func:`sample_step`,
  :func:`record_chunk`;
* async scheduling (rules 9–10) — :func:`release_finishing` and the ``FINISHING`` and
  ``IN_FLIGHT`` flags.

The loop around a step (arrivals, decode-only runs, the stall guard) is :mod:`.core_loop`, a run
of decode-only steps :mod:`.core_runs`, a step's duration :mod:`.core_cost`. Several KV-cache
groups and speculative decoding are scheduled by the reference step (the driver sends such runs
there).
"""

from __future__ import annotations

import math
from typing import Any

from budgetlab.admission import blocks_open, budget_open, slot_open
from budgetlab.simulator._jit import core_jit
from budgetlab.simulator.core_pool import (
    cache_full_blocks,
    grow,
    lookup,
    release,
    running_remove,
    take_hit,
    waiting_head,
    waiting_pop,
    waiting_push_back,
    waiting_push_front,
)
from budgetlab.simulator.core_state import (
    AFTER_DECODES,
    F_CACHED,
    F_DURATION,
    F_START,
    N_DONE,
    N_EVENT_REQUESTS,
    N_EVENT_ROWS,
    N_FINISHING,
    N_FREE,
    N_GAPS,
    N_HIT,
    N_IN_FLIGHT,
    N_KNOWN,
    N_LAST_SAMPLE,
    N_NEXT_ARRIVAL,
    N_NOT_DECODING,
    N_PEAK_USED,
    N_PLAN,
    N_PLAN_CACHED,
    N_PLAN_FREE,
    N_PREEMPTED,
    N_PREEMPTIONS,
    N_QUERY,
    N_RUN_ROWS,
    N_RUNNING,
    N_SEQ,
    N_STEP_ROWS,
    N_STEPS,
    N_STOP_ON_FINISH,
    N_WAITING,
    R_FIRST_STEP,
    R_KEY,
    R_KIND,
    R_NUM_STEPS,
    R_REQUEST,
    R_START,
    R_TOKENS,
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
from budgetlab.simulator.plan import DECODE, PREFILL, RECOMPUTE

__all__ = ["plan_step", "finish_step", "sample_step", "head_admission", "record_chunk"]

# The gates of budgetlab.admission, compiled as they are written there.
_slot_open = core_jit(slot_open)
_budget_open = core_jit(budget_open)
_blocks_open = core_jit(blocks_open)

# Bits of CoreState.flags
FINISHING = 1  # pipelined: its last token is in flight (rule 9)
IN_FLIGHT = 2  # pipelined with caching: its latest token is not yet known (rule 10)
SCHEDULED = 4  # it has a chunk in the step being planned
PREEMPTED = 8  # preempted in the step being planned

# Columns of CoreState.plan
P_REQUEST, P_TOKENS, P_KIND, P_BEFORE = 0, 1, 2, 3


@core_jit
def queue_arrivals(st: Any) -> None:
    """Rule 1: the requests that arrived by the step's start join the waiting queue (FIFO, equal
    arrivals in input order); an idle engine first waits for the next arrival."""
    n, t = st.n, st.t
    i = n[N_NEXT_ARRIVAL]
    if n[N_RUNNING] == 0 and n[N_WAITING] == 0 and t[T_NOW] < st.arrival[i]:
        t[T_NOW] = st.arrival[i]
    now = t[T_NOW]
    while i < n[N_KNOWN] and st.arrival[i] <= now:
        waiting_push_back(st, i, st.cfg_priority)
        i += 1
    n[N_NEXT_ARRIVAL] = i


@core_jit
def plan_step(st: Any) -> bool:
    """Form the step: the running pass, then (unless it preempted) the waiting pass. False when
    it schedules nothing with nothing in flight and nobody preempted (an internal error)."""
    n = st.n
    # The threshold is ignored when the scheduler holds exactly one request.
    threshold = st.cfg_threshold if n[N_RUNNING] + n[N_WAITING] != 1 else 0
    n[N_PLAN] = 0
    n[N_PREEMPTED] = 0
    n[N_PLAN_CACHED] = 0
    budget, free = running_pass(st, threshold)
    if n[N_PREEMPTED] == 0:
        free = admit_waiting(st, budget, free, threshold)
    n[N_PLAN_FREE] = free
    return n[N_PLAN] > 0 or n[N_FINISHING] > 0 or n[N_PREEMPTED] > 0


@core_jit
def new_blocks(computed_tokens: int, num_tokens: int, block_size: int) -> int:
    """``ceil((computed + n) / B) − ceil(computed / B)`` (:func:`.state.new_blocks`)."""
    return (computed_tokens + num_tokens + block_size - 1) // block_size - (
        computed_tokens + block_size - 1
    ) // block_size


@core_jit
def add_chunk(st: Any, request: int, num_tokens: int, kind: int, computed_before: int) -> None:
    """Append a chunk to the planned step."""
    j = st.n[N_PLAN]
    st.plan[j, P_REQUEST] = request
    st.plan[j, P_TOKENS] = num_tokens
    st.plan[j, P_KIND] = kind
    st.plan[j, P_BEFORE] = computed_before
    st.n[N_PLAN] = j + 1
    st.flags[request] |= SCHEDULED


@core_jit
def running_pass(st: Any, threshold: int) -> tuple[int, int]:
    """Rule 2: each running request's chunk, ``min(remaining, budget left, threshold if > 0)``,
    preempting while the pool is short; returns the budget and free blocks left.

    The walk is the running list in admission order, or with ``decode-first`` (when something
    prefills) every decode first, then the prefills and recomputes. FCFS preempts the newest
    running request (in ``decode-first`` order the newest not scheduled yet, other than the
    current one) and a request that preempts itself ends the pass; the priority policy preempts
    the largest ``(priority, arrival)`` anywhere (rule 6), withdrawing its chunk if it has one,
    and a request that is its own victim is dropped while the pass goes on.
    """
    n = st.n
    running = st.running
    block_size = st.cfg_block_size
    budget = st.cfg_budget
    free = n[N_FREE]
    reordered = st.cfg_decode_first and n[N_NOT_DECODING] > 0
    count = n[N_RUNNING]
    walk = st.scratch[0, :count].copy()  # victims leave the running list, not the walk
    if reordered:
        k = 0
        for decodes in (True, False):
            for i in range(count):
                r = running[i]
                is_decode = st.generated[r] > 0 and st.recomputing[r] == 0
                if is_decode == decodes:
                    walk[k] = r
                    k += 1
    else:
        walk[:] = running[:count]
    for i in range(count):
        r = walk[i]
        if budget == 0:
            break
        if st.flags[r] & (PREEMPTED | FINISHING):
            continue  # evicted earlier in this step, or (pipelined) its last token is in flight
        c = st.computed[r]
        g = st.generated[r]
        num = st.prompt[r] + g - c
        if num > budget:
            num = budget
        if threshold and num > threshold:
            num = threshold
        need = new_blocks(c, num, block_size)
        if need > free:
            free, budget, runs_on, ends_pass = make_room(st, r, need, free, budget, reordered)
            if ends_pass:
                break
            if not runs_on:
                continue
        free -= need
        budget -= num
        if st.cfg_caching:
            allocate_chunk(st, r, c, num, need)
        kind = RECOMPUTE if st.recomputing[r] else (DECODE if g else PREFILL)
        add_chunk(st, r, num, kind, c)
    return budget, free


@core_jit
def make_room(st: Any, current: int, need: int, free: int, budget: int, reordered: bool) -> tuple[int, int, bool, bool]:
    """Preempt until ``current``'s ``need`` new blocks fit; returns the free blocks and budget
    after, whether ``current`` still runs, and whether the pass ends (FCFS self-preemption)."""
    while need > free:
        victim = take_victim(st, current, reordered)
        j = plan_index(st, victim)
        if j >= 0:  # priority: a victim scheduled earlier in this step has its chunk withdrawn
            before = st.plan[j, P_BEFORE]
            withdrawn = st.plan[j, P_TOKENS]
            for k in range(j, st.n[N_PLAN] - 1):
                st.plan[k, :] = st.plan[k + 1, :]
            st.n[N_PLAN] -= 1
            st.flags[victim] &= ~SCHEDULED
            budget += withdrawn
            if not st.cfg_caching:  # a pool's release below frees this step's blocks too
                free += new_blocks(before, withdrawn, st.cfg_block_size)
        free += preempt(st, victim)
        st.preempted[st.n[N_PREEMPTED]] = victim
        st.n[N_PREEMPTED] += 1
        if victim == current:
            return free, budget, False, not st.cfg_priority
    return free, budget, True, False


@core_jit
def plan_index(st: Any, request: int) -> int:
    """Where ``request``'s chunk is in the planned step (-1: it has none)."""
    if not st.flags[request] & SCHEDULED:
        return -1
    for j in range(st.n[N_PLAN]):
        if st.plan[j, P_REQUEST] == request:
            return j
    return -1


@core_jit
def take_victim(st: Any, current: int, reordered: bool) -> int:
    """The preemption victim, out of the running list (rules 2 and 6).

    Priority: the largest ``(priority, arrival index)`` (vLLM's ``max(self.running, key=lambda
    r: (r.priority, r.arrival_time))``; the index stands for the wall-clock stamp, so of equal
    arrivals the later-submitted is evicted). FCFS in admission order: the tail. FCFS in
    ``decode-first`` order: the newest request not scheduled in this step other than ``current``,
    else ``current``."""
    running = st.running
    count = st.n[N_RUNNING]
    if st.cfg_priority:
        victim = running[0]
        for i in range(1, count):
            r = running[i]
            if st.priority[r] > st.priority[victim] or (st.priority[r] == st.priority[victim] and r > victim):
                victim = r
        running_remove(st, victim)
        return victim
    if not reordered:
        st.n[N_RUNNING] = count - 1
        return running[count - 1]
    j = count - 1
    while j >= 0 and (running[j] == current or st.flags[running[j]] & SCHEDULED):
        j -= 1
    victim = current if j < 0 else running[j]
    running_remove(st, victim)
    return victim


@core_jit
def preempt(st: Any, victim: int) -> int:
    """Evict ``victim`` (out of the running list) to the waiting queue's front (FCFS) or its own
    key (priority): its computed tokens reset and it recomputes (rules 2, 5); pipelined, one
    whose last token is in flight has finished and only frees its blocks. Returns the blocks
    freed."""
    st.num_preemptions[victim] += 1
    st.flags[victim] |= PREEMPTED
    if st.flags[victim] & FINISHING:
        st.flags[victim] &= ~FINISHING
        k = 0
        for i in range(st.n[N_FINISHING]):
            if st.finishing[i] != victim:
                st.finishing[k] = st.finishing[i]
                k += 1
        st.n[N_FINISHING] = k
        return release_blocks(st, victim, True)
    freed = release_blocks(st, victim, False)
    st.computed[victim] = 0
    if not st.generated[victim] or st.recomputing[victim]:
        st.n[N_NOT_DECODING] -= 1
    st.recomputing[victim] = 1
    waiting_push_front(st, victim, st.cfg_priority)
    return freed


@core_jit
def release_blocks(st: Any, request: int, finished: bool) -> int:
    """Free ``request``'s blocks; returns how many became free (with prefix caching, blocks
    others hold stay taken)."""
    if st.cfg_caching:
        return release(st, request, finished)
    return (st.computed[request] + st.cfg_block_size - 1) // st.cfg_block_size


@core_jit
def cache_limit(st: Any, request: int) -> int:
    """Tokens of ``request`` the scheduler knows: prompt + generated, less a token still in
    flight when pipelined (rules 4, 10)."""
    known = st.prompt[request] + st.generated[request]
    return known - 1 if st.flags[request] & IN_FLIGHT else known


@core_jit
def allocate_chunk(st: Any, request: int, computed_tokens: int, num_tokens: int, need: int) -> None:
    """Rule 8: a running request's chunk takes its new blocks and caches the blocks it fills."""
    grow(st, request, need)
    end = computed_tokens + num_tokens
    limit = cache_limit(st, request)
    cache_full_blocks(st, request, end if end < limit else limit)


@core_jit
def head_admission(st: Any, head: int, budget: int, free: int, threshold: int) -> tuple[bool, int, int, int, int]:
    """The KV gate (and, with chunked prefill off, the budget) for the head of the queue: its
    prefix-cache hit (rules 7–9), vLLM's whole-sequence check and watermark (rule 10), its first
    chunk. Returns ``(fits, hit blocks, hit tokens, chunk tokens, free blocks it takes)``."""
    block_size = st.cfg_block_size
    known = st.prompt[head] + st.generated[head]
    num_hit = held = 0
    if st.cfg_caching:
        num_hit, held = lookup(st, head, known)
    hit_tokens = num_hit * block_size
    reserve = st.cfg_watermark if st.n[N_RUNNING] else 0
    if st.cfg_full_isl and not _blocks_open(known, free, block_size, held, reserve):
        return False, num_hit, hit_tokens, 0, 0
    num = known - hit_tokens
    if threshold and num > threshold:
        num = threshold
    if num > budget:
        if not st.cfg_chunked:
            return False, num_hit, hit_tokens, 0, 0
        num = budget
    cost = (hit_tokens + num + block_size - 1) // block_size - held
    if cost + reserve > free:
        return False, num_hit, hit_tokens, 0, 0
    return True, num_hit, hit_tokens, num, cost


@core_jit
def admit_waiting(st: Any, budget: int, free: int, threshold: int) -> int:
    """Rule 3: admit from the head of the queue through the gates (budget, sequence slot, KV
    blocks); the first refusal ends the pass. Returns the free blocks left."""
    n = st.n
    while n[N_WAITING] > 0:
        if not _budget_open(budget):
            break
        if not _slot_open(n[N_RUNNING], st.cfg_max_num_seqs):
            break
        head = waiting_head(st)
        fits, num_hit, hit_tokens, num, cost = head_admission(st, head, budget, free, threshold)
        if not fits:
            break  # head-of-line blocking
        waiting_pop(st, st.cfg_priority)
        st.running[n[N_RUNNING]] = head
        n[N_RUNNING] += 1
        n[N_NOT_DECODING] += 1
        free -= cost
        budget -= num
        if st.cfg_caching:
            known = st.prompt[head] + st.generated[head]
            take_hit(st, head, num_hit)
            grow(st, head, (hit_tokens + num + st.cfg_block_size - 1) // st.cfg_block_size - num_hit)
            end = hit_tokens + num
            cache_full_blocks(st, head, end if end < known else known)
            n[N_QUERY] += known
            n[N_HIT] += hit_tokens
            n[N_PLAN_CACHED] += hit_tokens
            if st.recomputing[head]:
                st.recompute_hit[head] += hit_tokens
            else:
                st.prefix_hit[head] = hit_tokens
        if math.isnan(st.first_scheduled_at[head]):
            st.first_scheduled_at[head] = st.t[T_NOW]
        st.seq[head] = n[N_SEQ]
        n[N_SEQ] += 1
        add_chunk(st, head, num, RECOMPUTE if st.recomputing[head] else PREFILL, hit_tokens)
    return free


@core_jit
def plan_tokens(st: Any) -> int:
    """Tokens the planned step schedules."""
    total = 0
    for j in range(st.n[N_PLAN]):
        total += st.plan[j, P_TOKENS]
    return total


@core_jit
def finish_step(st: Any, duration: float) -> None:
    """Record the planned step (counts after scheduling it), release the previous step's
    finished requests when pipelined, and sample."""
    n = st.n
    row = n[N_STEP_ROWS]
    free = n[N_PLAN_FREE]
    num_decode = num_prefill = 0
    for j in range(n[N_PLAN]):
        if st.plan[j, P_KIND] == DECODE:
            num_decode += 1
        else:
            num_prefill += st.plan[j, P_TOKENS]
    st.step_float[row, F_START] = st.t[T_NOW]
    st.step_float[row, F_DURATION] = duration
    st.step_float[row, F_CACHED] = n[N_PLAN_CACHED]
    si = st.step_int
    si[row, S_DECODE] = num_decode
    si[row, S_PREFILL] = num_prefill
    si[row, S_RUNNING] = n[N_RUNNING]
    si[row, S_WAITING] = n[N_WAITING]
    si[row, S_FREE] = free
    si[row, S_PREEMPTIONS] = n[N_PREEMPTED]
    si[row, S_COMMON] = 0
    si[row, S_CHUNKS] = n[N_PLAN]
    si[row, S_NUM_STEPS] = 1
    used = st.cfg_num_blocks - free
    if used > n[N_PEAK_USED]:
        n[N_PEAK_USED] = used
    n[N_STEP_ROWS] = row + 1
    n[N_STEPS] += 1
    if st.cfg_pipelined:
        free = release_finishing(st, free)
    sample_step(st, st.t[T_NOW] + duration, free)


@core_jit
def release_finishing(st: Any, free: int) -> int:
    """Rule 9: pipelined, once this step is planned the previous step's outputs are processed.
    With caching, a request that sampled then and is not scheduled now enters its blocks in the
    cache up to its computed tokens (rule 10); then the finished ones leave the running list and
    free their blocks. Returns the free blocks."""
    n = st.n
    if n[N_IN_FLIGHT] > 0 and n[N_PLAN] < n[N_RUNNING]:
        for i in range(n[N_RUNNING]):
            r = st.running[i]
            if st.flags[r] & IN_FLIGHT and not st.flags[r] & SCHEDULED:
                cache_full_blocks(st, r, st.computed[r])
    if n[N_FINISHING] == 0:
        return free
    for i in range(n[N_FINISHING]):
        r = st.finishing[i]
        free += release_blocks(st, r, True)
        st.flags[r] &= ~FINISHING
        running_remove(st, r)
    n[N_FINISHING] = 0
    return free


@core_jit
def record_chunk(st: Any, step: int, request: int, num_tokens: int, kind: int, computed_before: int) -> None:
    """Add a chunk to the record: a decode right after the request's previous decode (same
    admission) extends its run, anything else opens a row. A chunk's key orders a step's chunks
    as they were scheduled: its request's admission number, non-decodes after decodes in
    ``decode-first`` order."""
    key = st.seq[request]
    if st.cfg_decode_first and kind != DECODE:
        key += AFTER_DECODES
    runs = st.runs
    o = st.open_run[request]
    if (
        kind == DECODE
        and o >= 0
        and runs[o, R_FIRST_STEP] + runs[o, R_NUM_STEPS] == step
        and runs[o, R_KEY] == key
        and runs[o, R_TOKENS] == num_tokens
    ):
        runs[o, R_NUM_STEPS] += 1
        return
    row = st.n[N_RUN_ROWS]
    runs[row, R_REQUEST] = request
    runs[row, R_FIRST_STEP] = step
    runs[row, R_NUM_STEPS] = 1
    runs[row, R_START] = computed_before
    runs[row, R_TOKENS] = num_tokens
    runs[row, R_KIND] = kind
    runs[row, R_KEY] = key
    st.n[N_RUN_ROWS] = row + 1
    st.open_run[request] = row if kind == DECODE else -1


@core_jit
def stop_after_finishes(st: Any, end_s: float) -> None:
    """A step ending at ``end_s`` finished requests: where their finishes bring new requests
    (``n[N_STOP_ON_FINISH]``: closed-loop clients), no step may start before the driver has
    made those known."""
    if st.n[N_STOP_ON_FINISH] and end_s < st.t[T_HORIZON]:
        st.t[T_HORIZON] = end_s


@core_jit
def sample_step(st: Any, end_s: float, free: int) -> None:
    """Rule 4, end of step: a chunk that reaches its request's known tokens samples one token; a
    request that samples its last token finishes (pipelined, it keeps its slot and blocks through
    the next step's planning). Records the chunks, gaps and events; moves the clock to ``end_s``."""
    n = st.n
    now = st.t[T_NOW]
    step = n[N_STEPS] - 1
    track = st.cfg_pipelined and st.cfg_caching
    if track:
        for i in range(n[N_IN_FLIGHT]):
            st.flags[st.in_flight[i]] &= ~IN_FLIGHT
        n[N_IN_FLIGHT] = 0
    num_common = num_first = num_finished = 0
    sampled_any = False
    for j in range(n[N_PLAN]):
        r = st.plan[j, P_REQUEST]
        num = st.plan[j, P_TOKENS]
        kind = st.plan[j, P_KIND]
        before = st.plan[j, P_BEFORE]
        st.flags[r] &= ~SCHEDULED
        record_chunk(st, step, r, num, kind, before)
        c = before + num
        st.computed[r] = c
        g = st.generated[r]
        if kind != DECODE:  # a decode always reaches the end of its known tokens
            if c < st.prompt[r] + g:
                continue  # a partial chunk samples nothing
            n[N_NOT_DECODING] -= 1
            st.recomputing[r] = 0
        g += 1
        st.generated[r] = g
        sampled_any = True
        if track:
            st.in_flight[n[N_IN_FLIGHT]] = r
            n[N_IN_FLIGHT] += 1
            st.flags[r] |= IN_FLIGHT
        if g == 1:
            st.first_token_at[r] = end_s
            st.scratch[0, num_first] = r
            num_first += 1
        else:
            last = st.last_token_at[r]
            gap = end_s - last
            if last == now:
                num_common += 1
            else:
                st.gaps[n[N_GAPS]] = gap
                n[N_GAPS] += 1
            if gap > st.max_gap[r]:
                st.max_gap[r] = gap
        st.last_token_at[r] = end_s
        if g == st.output[r]:
            st.finished_at[r] = end_s
            st.scratch[1, num_finished] = r
            num_finished += 1
    st.step_int[n[N_STEP_ROWS] - 1, S_COMMON] = num_common
    if sampled_any:
        n[N_LAST_SAMPLE] = n[N_STEPS]
    if num_finished:
        n[N_DONE] += num_finished
        stop_after_finishes(st, end_s)
        for i in range(num_finished):
            r = st.scratch[1, i]
            if st.cfg_pipelined:  # rule 9: released once the next step is planned
                st.finishing[i] = r
                st.flags[r] |= FINISHING
            else:
                free += release_blocks(st, r, True)
                running_remove(st, r)
        if st.cfg_pipelined:
            n[N_FINISHING] = num_finished
    n[N_FREE] = free
    num_preempted = n[N_PREEMPTED]
    if num_preempted or num_first or num_finished:
        e = n[N_EVENT_ROWS]
        st.event_header[e, 0] = step
        st.event_header[e, 1] = num_preempted
        st.event_header[e, 2] = num_first
        st.event_header[e, 3] = num_finished
        n[N_EVENT_ROWS] = e + 1
        k = n[N_EVENT_REQUESTS]
        for i in range(num_preempted):
            st.event_requests[k] = st.preempted[i]
            k += 1
        for i in range(num_first):
            st.event_requests[k] = st.scratch[0, i]
            k += 1
        for i in range(num_finished):
            st.event_requests[k] = st.scratch[1, i]
            k += 1
        n[N_EVENT_REQUESTS] = k
    for i in range(num_preempted):
        st.flags[st.preempted[i]] &= ~PREEMPTED
    n[N_PREEMPTIONS] += num_preempted
    st.t[T_NOW] = end_s
