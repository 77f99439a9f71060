"""Fast mode: jump over runs of decode-only steps, and fill long running lists with NumPy.

Both give exactly what :func:`budgetlab.simulator.step.reference_step` would, bit for bit.

:func:`jump_decode_run`
    When every running request decodes and no waiting request can be admitted (the queue is
    empty, or its head is blocked by the sequence cap or by KV, which cannot clear before a
    completion since the pool only shrinks), the next steps are all alike: ``n`` decodes whose
    contexts grow by ``n`` tokens a step. The run is advanced in one go up to the next event:
    the step that starts at or after an arrival that could be admitted, the first completion
    (that step included), or the step whose new KV blocks would need a preemption (excluded:
    it runs normally). Under the priority policy a head blocked by KV alone does not hold
    arrivals back (a better-priority arrival may fit), so such a run also ends at the next
    arrival. Step ends are accumulated with ``cumsum`` (the same sequential
    additions as the reference's ``t += duration``) and durations come from the cost model's
    ``decode_run_time_s``. The run is stored compressed (:class:`~budgetlab.simulator.state.RunRecord`).
:func:`vectorized_step`
    One step's running pass with array operations, when it preempts nobody (else the
    reference step handles it).

Runs of at most :data:`RUN_WINDOW_STEPS` steps are jumped at once; the vectorized variants are
used from :data:`VECTOR_MIN_RUNNING` running requests on (the loop's option).
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from budgetlab.simulator.blocks import Hit
from budgetlab.simulator.state import (
    DECODE,
    PREFILL,
    RECOMPUTE,
    SimState,
    StepPlan,
    allocate_chunk,
    blocks_for_tokens_array,
    record_common_gaps,
    record_events,
    record_step,
    release_finishing,
    retire_finished,
    step_duration_s,
)
from budgetlab.simulator.waiting import admit_waiting, head_admission
from budgetlab.specs import Batch

__all__ = ["RUN_WINDOW_STEPS", "VECTOR_MIN_RUNNING", "block_demand", "jump_decode_run", "vectorized_step"]

#: Longest decode-only run advanced in one jump [steps]; longer runs take several jumps.
RUN_WINDOW_STEPS = 8192
#: From this many running requests on, fast mode uses NumPy (below it plain Python is quicker).
VECTOR_MIN_RUNNING = 48


def block_demand(computed_before: np.ndarray, num_steps: int, block_size: int) -> np.ndarray:
    """New KV blocks the decoders need in total by the end of each of ``num_steps`` steps.

    Decoder ``r`` allocates at step ``s`` (1-based) when its computed tokens before the step,
    ``computed_before[r] + s − 1``, are a multiple of the block size, i.e. at
    ``s = o_r + 1 + m × block_size`` with ``o_r = (−computed_before[r]) mod block_size``. With
    ``s − 1 = q × block_size + j``: demand(s) = n × q + #{r : o_r <= j}.
    """
    offsets = (-computed_before) % block_size
    count_le = np.cumsum(np.bincount(offsets, minlength=block_size))
    q, j = np.divmod(np.arange(num_steps, dtype=np.int64), block_size)
    return len(computed_before) * q + count_le[j]


# --------------------------------------------------------------------------------------------
# Decode-only runs
# --------------------------------------------------------------------------------------------


def jump_decode_run(state: SimState, *, vectorized: bool) -> bool:
    """Advance a run of decode-only steps at once; False (state untouched) when this step is
    not the start of one. Call it only when every running request decodes."""
    if state.finishing:
        return False  # pipelined: last tokens in flight, the next step is not like the others
    absorbs = _arrivals_just_queue(state)
    if absorbs is None:
        return False  # the head of the queue can be admitted this step
    decoders: _Decoders = _NumpyDecoders(state) if vectorized else _PythonDecoders(state)
    num_decodes = len(state.running)
    free = state.kv.free_blocks
    k_max = decoders.steps_to_finish if decoders.steps_to_finish < RUN_WINDOW_STEPS else RUN_WINDOW_STEPS
    if num_decodes * ((k_max - 1) // state.block_size + 1) > free:
        # KV may run short: stop before the first step whose blocks would not fit.
        k_max = _steps_before_kv_runs_short(decoders.computed_before, k_max, free, state.block_size)
        if k_max == 0:
            return False  # this step preempts: schedule it normally
    context = decoders.context_tokens
    contexts = np.arange(context, context + num_decodes * k_max, num_decodes, dtype=np.int64)
    durations = _run_durations(state, num_decodes, contexts)
    # Step ends, accumulated exactly as the reference's sequential ``t += duration``.
    times = np.empty(k_max + 1)
    times[0] = state.now_s
    times[1:] = durations
    times.cumsum(out=times)
    k = k_max
    if not absorbs and state.next_arrival < state.num_requests:
        arrival = state.arrival_list[state.next_arrival]
        if times.item(k_max - 1) >= arrival:
            # Steps that start at or after the next arrival are scheduled normally.
            k = int(times[:k_max].searchsorted(arrival, side="left"))
            durations = durations[:k]
            times = times[: k + 1]
    end = times.item(k)
    if not (state.now_s < end < math.inf):
        raise ValueError(
            f"the cost model returned step times that are not finite and > 0 for "
            f"decode-only steps of {num_decodes} decodes: {durations[:5].tolist()}..."
        )
    runs = state.runs
    runs.step_times.frombytes(times.tobytes())
    runs.durations.frombytes(durations.tobytes())
    # The gaps of steps 2..k, the same for every decoder, are read off ``times`` at the end.
    pool = state.pool
    if pool is not None:
        members = np.asarray(state.running, dtype=np.int64)
        in_flight = state.in_flight
        first_lag = np.array([r in in_flight for r in state.running], dtype=np.int64)
        pool.replay_decode_run(
            members,
            np.asarray(decoders.computed_before, dtype=np.int64),
            k,
            first_lag=first_lag,
            lag=1 if state.pipelined else 0,
        )
    finished, added = decoders.advance(state, k, first_end_s=times.item(1), end_s=end)
    # One record of RUN_HEADER_FIELDS, in that order.
    runs.header.extend(
        (len(state.steps.start_at_s), k, num_decodes, free, len(state.waiting), state.next_arrival, len(finished))
    )
    free -= added
    state.kv.note_usage(free)
    if pool is not None and state.pipelined:
        state.in_flight = set(state.running)
    if finished:
        runs.finished.extend(finished)
        finished_at = state.req.finished_at_s
        for r in finished:
            finished_at[r] = end
        free = retire_finished(state, finished, free)
    state.kv.free_blocks = free
    state.num_steps += k
    state.last_sample_step = state.num_steps
    state.now_s = end
    return True


def _arrivals_just_queue(state: SimState) -> bool | None:
    """Whether arrivals during a run would only queue (True), may end it (False), or None when
    the head of the queue can be admitted now (so no run starts).

    Under the priority policy an arrival may become the new head and fit where the old head
    did not, so a head blocked by KV alone does not make arrivals just queue (the run then
    stops at the next arrival and that step is scheduled normally); the sequence cap blocks
    any head alike."""
    num_running = len(state.running)
    if not state.waiting:
        return num_running >= state.max_num_seqs
    if num_running < state.max_num_seqs:
        head = state.waiting[0]
        admission = head_admission(
            state,
            head,
            budget_left_tokens=state.budget_tokens - num_running,
            free_blocks=state.kv.free_blocks,
            threshold_tokens=state.threshold_tokens,  # running + waiting >= 2
        )
        if admission.fits:
            return None
        pool = state.pool
        hit = admission.hit
        if pool is not None and isinstance(hit, Hit) and pool.could_gain_hits(head, hit, state.running):
            return None  # a decoder could enter the block its lookup stopped at
        if state.priority_policy:
            return False  # blocked by KV: a better-priority arrival may fit
    return True  # the head stays blocked (cap or KV) until a completion


def _steps_before_kv_runs_short(
    computed_before: list[int] | np.ndarray, k_max: int, free_blocks: int, block_size: int
) -> int:
    """Largest number of steps (at most ``k_max``) whose new blocks all fit ``free_blocks``."""
    demand = block_demand(np.asarray(computed_before, dtype=np.int64), k_max, block_size)
    return int(demand.searchsorted(free_blocks, side="right"))


def _run_durations(state: SimState, num_decodes: int, contexts: np.ndarray) -> np.ndarray:
    """Each run step's time [s]: ``decode_run_time_s``, or ``batch_time_s`` step by step."""
    if state.decode_run_time_s is None:
        batch_time = state.batch_time_s
        return np.array([float(batch_time(Batch(num_decodes, x))) for x in contexts.tolist()])
    priced = state.decode_run_time_s(num_decodes=num_decodes, decode_context_tokens=contexts)
    durations = np.asarray(priced, dtype=float)
    if durations.shape != contexts.shape:
        raise ValueError(
            f"decode_run_time_s returned shape {durations.shape} for {len(contexts)} steps; it must "
            "return one time per step"
        )
    return durations


class _Decoders(Protocol):
    """The decoders of a run: gathered before it is priced, advanced once its length is known."""

    @property
    def computed_before(self) -> list[int] | np.ndarray:
        """Their computed tokens before the run, in running order [tokens]."""
        ...

    @property
    def steps_to_finish(self) -> int:
        """Steps until the first of them samples its last token [steps]."""
        ...

    @property
    def context_tokens(self) -> int:
        """Sum of ``computed_before`` [tokens]."""
        ...

    def advance(self, state: SimState, k: int, *, first_end_s: float, end_s: float) -> tuple[list[int], int]:
        """Move each decoder ``k`` tokens on and record them in the run; returns the finished
        requests and the blocks added."""
        ...


class _PythonDecoders:
    """The decoders as Python lists (short running lists), gathered from ``state``."""

    __slots__ = ("computed_before", "context_tokens", "members", "steps_to_finish")

    def __init__(self, state: SimState) -> None:
        computed = state.req.computed_tokens
        generated = state.req.generated_tokens
        output = state.req.output_tokens
        self.members = list(state.running)
        self.computed_before = [computed[r] for r in self.members]
        self.steps_to_finish = min([output[r] - generated[r] for r in self.members])
        self.context_tokens = sum(self.computed_before)

    def advance(self, state: SimState, k: int, *, first_end_s: float, end_s: float) -> tuple[list[int], int]:
        req = state.req
        computed = req.computed_tokens
        generated = req.generated_tokens
        output = req.output_tokens
        last_token = req.last_token_at_s
        max_gap = req.max_gap_s
        add_gap = state.gaps.single.append
        now = state.now_s
        num_common = 0  # decoders that sampled in the step before the run: gap first_end − now
        block_size = state.block_size
        state.runs.members.extend(self.members)
        state.runs.computed_before.extend(self.computed_before)
        finished: list[int] = []
        added = 0
        for r, c in zip(self.members, self.computed_before):
            computed[r] = c + k
            g = generated[r] + k
            generated[r] = g
            last = last_token[r]
            gap = first_end_s - last
            if last == now:
                num_common += 1
            else:
                add_gap(gap)
            if gap > max_gap[r]:
                max_gap[r] = gap
            last_token[r] = end_s
            # new_blocks(c, k, block_size), inlined in this hot loop (same value: see the tests)
            added += (c + k + block_size - 1) // block_size - (c + block_size - 1) // block_size
            if g == output[r]:
                finished.append(r)
        record_common_gaps(state, first_end_s - now, num_common)
        return finished, added


class _NumpyDecoders:
    """The decoders as arrays (long running lists), gathered from ``state``."""

    __slots__ = ("computed_before", "context_tokens", "members", "steps_left", "steps_to_finish")

    def __init__(self, state: SimState) -> None:
        req = state.req_np
        self.members = np.array(state.running, dtype=np.int64)
        self.computed_before = req.computed_tokens[self.members]
        self.steps_left = req.output_tokens[self.members] - req.generated_tokens[self.members]
        self.steps_to_finish = int(self.steps_left.min())
        self.context_tokens = int(self.computed_before.sum())

    def advance(self, state: SimState, k: int, *, first_end_s: float, end_s: float) -> tuple[list[int], int]:
        req = state.req_np
        members = self.members
        before = self.computed_before
        state.runs.members.frombytes(members.tobytes())
        state.runs.computed_before.frombytes(before.tobytes())
        after = before + k
        req.computed_tokens[members] = after
        req.generated_tokens[members] = req.generated_tokens[members] + k
        last = req.last_token_at_s[members]
        first_gaps = first_end_s - last
        _record_gaps(state, first_gaps, last == state.now_s, first_end_s - state.now_s)
        req.max_gap_s[members] = np.maximum(req.max_gap_s[members], first_gaps)
        req.last_token_at_s[members] = end_s
        held = blocks_for_tokens_array(after, state.block_size)
        added = int((held - blocks_for_tokens_array(before, state.block_size)).sum())
        return members[self.steps_left == k].tolist(), added


# --------------------------------------------------------------------------------------------
# One step with NumPy
# --------------------------------------------------------------------------------------------


def vectorized_step(state: SimState) -> bool:
    """Fill one step with array operations; False (state untouched) if it must preempt."""
    running = state.running
    req = state.req_np
    block_size = state.block_size
    budget = state.budget_tokens
    threshold = state.threshold_tokens if len(running) + len(state.waiting) != 1 else 0
    finishing = state.finishing
    if finishing:  # pipelined: their last tokens are in flight, they get nothing
        walk = np.array([r for r in running if r not in finishing], dtype=np.intp)
    else:
        walk = np.array(running, dtype=np.intp)
    if state.decode_first and state.num_not_decoding:
        decoding = (req.generated_tokens[walk] > 0) & ~req.recomputing[walk]
        walk = np.concatenate((walk[decoding], walk[~decoding]))
    c0 = req.computed_tokens[walk]
    g0 = req.generated_tokens[walk]
    want = req.prompt_tokens[walk] + g0 - c0
    if threshold:
        want = np.minimum(want, threshold)
    before = np.cumsum(want) - want  # budget handed out before each request
    m = int(np.searchsorted(before, budget, side="left"))
    take = np.minimum(want[:m], budget - before[:m])
    cm = c0[:m]
    need = int((blocks_for_tokens_array(cm + take, block_size) - blocks_for_tokens_array(cm, block_size)).sum())
    if need > state.kv.free_blocks:
        return False  # a preemption is due: the reference step handles it exactly
    free = state.kv.free_blocks - need
    budget -= int(take.sum())
    scheduled = walk[:m]
    if state.pool is not None:
        _allocate_and_cache(state, scheduled, cm, take, g0[:m])
    kind = np.where(req.recomputing[scheduled], RECOMPUTE, np.where(g0[:m] == 0, PREFILL, DECODE))

    admitted = StepPlan()
    free = admit_waiting(state, admitted, budget_left_tokens=budget, free_blocks=free, threshold_tokens=threshold)
    if admitted.requests:
        scheduled = np.concatenate((scheduled, np.array(admitted.requests, dtype=np.intp)))
        take = np.concatenate((take, np.array(admitted.num_tokens, dtype=np.int64)))
        kind = np.concatenate((kind, np.array(admitted.kinds, dtype=kind.dtype)))
        cm = np.concatenate((cm, np.array(admitted.computed_before, dtype=np.int64)))

    is_decode = kind == DECODE
    is_chunk = ~is_decode
    prefill_tokens = tuple(take[is_chunk].tolist())
    batch = Batch(
        int(np.count_nonzero(is_decode)), int(cm[is_decode].sum()), prefill_tokens, tuple(cm[is_chunk].tolist())
    )
    duration = step_duration_s(state, batch)
    end = state.now_s + duration
    record_step(
        state,
        duration_s=duration,
        num_decode_tokens=batch.num_decodes,
        num_prefill_tokens=sum(prefill_tokens),
        free_blocks=free,
        num_preemptions=0,
        num_cached_tokens=admitted.num_cached_tokens,
    )
    if state.pipelined:
        free = release_finishing(state, free, scheduled.tolist())
    free = _sample_numpy(state, scheduled, take, kind, cm, end_s=end, free_blocks=free)
    state.kv.free_blocks = free
    steps = state.steps
    steps.chunk_request.frombytes(scheduled.astype(np.int64, copy=False).tobytes())
    steps.chunk_tokens.frombytes(take.astype(np.int64, copy=False).tobytes())
    steps.chunk_kind.frombytes(kind.astype(np.int8).tobytes())
    steps.chunk_start.frombytes(cm.astype(np.int64, copy=False).tobytes())
    steps.step_end.append(len(steps.chunk_request))
    state.now_s = end
    return True


def _allocate_and_cache(
    state: SimState, scheduled: np.ndarray, computed_before: np.ndarray, take: np.ndarray, generated: np.ndarray
) -> None:
    """The running pass's pool work, request by request in scheduling order: the new blocks of
    each chunk, then the blocks it fills entered in the cache (up to the tokens the scheduler
    knows); only the requests with something to do are visited."""
    pool = state.pool
    assert pool is not None
    block_size = state.block_size
    after = computed_before + take
    known = state.req_np.prompt_tokens[scheduled] + generated
    if state.in_flight:
        in_flight = state.in_flight
        known = known - np.fromiter((r in in_flight for r in scheduled.tolist()), dtype=np.int64, count=len(scheduled))
    limit = np.minimum(after, known)
    need = blocks_for_tokens_array(after, block_size) - blocks_for_tokens_array(computed_before, block_size)
    cached = np.frombuffer(pool.num_cached, dtype=np.int64)[scheduled]
    busy = np.flatnonzero((need > 0) | (limit // block_size > cached))
    for r, c, n, new in zip(
        scheduled[busy].tolist(), computed_before[busy].tolist(), take[busy].tolist(), need[busy].tolist()
    ):
        allocate_chunk(state, r, computed_tokens=c, num_tokens=n, new_blocks=new)


def _sample_numpy(
    state: SimState,
    scheduled: np.ndarray,
    take: np.ndarray,
    kind: np.ndarray,
    computed_before: np.ndarray,
    *,
    end_s: float,
    free_blocks: int,
) -> int:
    """:func:`budgetlab.simulator.step.sample_step` with arrays; returns the free blocks."""
    req = state.req_np
    free = free_blocks
    new_computed = computed_before + take
    req.computed_tokens[scheduled] = new_computed
    g_s = req.generated_tokens[scheduled]
    sampled = new_computed == req.prompt_tokens[scheduled] + g_s
    who = scheduled[sampled]
    if who.size:
        state.last_sample_step = state.num_steps
    g1 = g_s[sampled] + 1
    req.generated_tokens[who] = g1
    not_decode = kind[sampled] != DECODE
    if not_decode.any():
        state.num_not_decoding -= int(np.count_nonzero(not_decode))
        req.recomputing[who[not_decode]] = False
    is_first = g1 == 1
    first = who[is_first]
    if first.size:
        req.first_token_at_s[first] = end_s
    gapped = who[~is_first]
    if gapped.size:
        last = req.last_token_at_s[gapped]
        gaps = end_s - last
        req.max_gap_s[gapped] = np.maximum(req.max_gap_s[gapped], gaps)
        _record_gaps(state, gaps, last == state.now_s, end_s - state.now_s)
    req.last_token_at_s[who] = end_s
    is_finished = g1 == req.output_tokens[who]
    finished = who[is_finished]
    if state.pipelined and state.pool is not None:
        state.in_flight = set(who.tolist())
    if finished.size:
        req.finished_at_s[finished] = end_s
        free = retire_finished(state, finished.tolist(), free)
    record_events(state, [], first, finished)
    return free


def _record_gaps(state: SimState, gaps: np.ndarray, common: np.ndarray, common_gap_s: float) -> None:
    """Record ``gaps`` [s]: those flagged ``common`` (the request also sampled in the step
    before, so its gap is ``common_gap_s``) as one value and a count, the others one by one."""
    num_common = int(np.count_nonzero(common))
    record_common_gaps(state, common_gap_s, num_common)
    if num_common < len(gaps):
        state.gaps.single.frombytes(gaps[~common].tobytes())
