"""The state record of one simulation, and the bookkeeping every kind of step shares.

:class:`SimState` holds everything a run changes: per-request buffers, the running list and
the waiting queue, the KV pool's counters, the clock, and the compressed record of what ran.
The reference step functions (:mod:`~budgetlab.simulator.step`, :mod:`~budgetlab.simulator.waiting`)
take it as their first argument and change it in place; :mod:`~budgetlab.simulator.record` reads it at
the end. The compiled core (:mod:`~budgetlab.simulator.compiled`) reads its inputs from it and keeps
its own arrays.

Shared here, because every kind of step does them the same way:

* the KV block arithmetic (:func:`new_blocks`, :func:`blocks_for_tokens_array`, both exactly
  :func:`budgetlab.memory.ceil_blocks`);
* pricing a step (:func:`step_duration_s`) and appending it to the record (:func:`record_step`).

Per-request values live in ``array.array`` buffers (:class:`RequestBuffers`: fast scalar
access from Python) with NumPy views on the same memory under the same names
(:class:`RequestArrays`) for the vectorized paths. Requests are indexed in arrival order.
Nothing per request is a Python object (ids, arrivals, the record of what ran are arrays).
Time runs from the trace's own origin, its first arrival (:attr:`SimState.time_origin_s`),
so epoch arrivals (1.7e15 s, where float64's spacing is 0.25 s) keep the steps' milliseconds.

The waiting queue is a deque under FCFS and a :class:`PriorityWaitingQueue` (a heap on
``(priority, arrival index)``, the same four operations) under the priority policy; victims are
chosen by the policy (:func:`budgetlab.simulator.step.pop_victim` for FCFS, the largest
``(priority, arrival index)`` in :func:`budgetlab.simulator.step.running_pass_priority`).

The KV pool is a record of counters (:class:`KVPool`); with prefix caching on, a
:class:`~budgetlab.simulator.blocks.PrefixBlockPool` also keeps every block's identity, and with
several KV-cache groups a :class:`~budgetlab.simulator.kv_groups.KVGroups` keeps every group's
tables: the blocks a chunk takes, those a finish or a preemption frees (:func:`release_blocks`),
the admission check. Pipelined (async) scheduling adds the requests whose last token is in
flight (:attr:`SimState.finishing`, released one step late) and, with caching, those whose
latest token is not yet known.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

from budgetlab.attention import KVGroup
from budgetlab.cost import CostModel
from budgetlab.memory import ceil_blocks
from budgetlab.simulator.blocks import PrefixBlockPool
from budgetlab.simulator.drafts import Drafts, new_drafts
from budgetlab.simulator.kv_groups import KVGroups, block_tables
from budgetlab.simulator.plan import DECODE, PREFILL, RECOMPUTE, STEP_KINDS, StepPlan
from budgetlab.simulator.queues import PriorityWaitingQueue
from budgetlab.specs import Batch, EngineConfig
from budgetlab.workload.acceptance import AcceptanceModel

if TYPE_CHECKING:  # the input module imports this one's block helper
    from budgetlab.simulator.inputs import RequestTable

__all__ = [
    "DECODE",
    "PREFILL",
    "RECOMPUTE",
    "STEP_KINDS",
    "new_blocks",
    "blocks_for_tokens_array",
    "RequestBuffers",
    "RequestArrays",
    "PriorityWaitingQueue",
    "KVPool",
    "EVENT_KINDS",
    "StepRecord",
    "GapRecord",
    "StepPlan",
    "SimState",
    "new_state",
    "arrival_order",
    "watermark_blocks",
    "cache_limit_tokens",
    "release_blocks",
    "allocate_chunk",
    "retire_finished",
    "release_finishing",
    "chunk_slot_tokens",
    "step_duration_s",
    "check_step_s",
    "checked_duration_s",
    "record_step",
    "record_events",
    "record_common_gaps",
]


# --------------------------------------------------------------------------------------------
# KV block arithmetic (one definition: memory.ceil_blocks)
# --------------------------------------------------------------------------------------------


def new_blocks(computed_tokens: int, num_tokens: int, block_size: int) -> int:
    """New KV blocks a request holding ``computed_tokens`` needs to add ``num_tokens`` [blocks].

    ``ceil((computed + n) / block_size) − ceil(computed / block_size)``, with
    :func:`budgetlab.memory.ceil_blocks` (``vllm-v1-scheduling.md``, step 3).
    """
    return ceil_blocks(computed_tokens + num_tokens, block_size) - ceil_blocks(computed_tokens, block_size)


def blocks_for_tokens_array(num_tokens: np.ndarray, block_size: int) -> np.ndarray:
    """:func:`budgetlab.memory.ceil_blocks` elementwise: ``ceil(n / block_size)`` [blocks].

    Written ``(n + block_size − 1) // block_size`` (one array operation fewer than ``−(−n //
    block_size)``; the same integers).
    """
    return (num_tokens + (block_size - 1)) // block_size


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


def _ints(count: int, values: np.ndarray | None = None) -> array:
    if values is None:
        return array("q", [0]) * count
    buffer = array("q")
    buffer.frombytes(np.ascontiguousarray(values, dtype=np.int64).tobytes())
    return buffer


def _floats(count: int, fill: float) -> array:
    return array("d", [fill]) * count


@dataclass(frozen=True, eq=False, slots=True)
class RequestBuffers:
    """Per-request values in arrival order, as ``array.array`` buffers.

    Attributes
    ----------
    prompt_tokens, output_tokens : array of int64
        The request's lengths [tokens].
    computed_tokens : array of int64
        Tokens in its KV cache [tokens] (0 while waiting, reset by a preemption).
    generated_tokens : array of int64
        Output tokens sampled so far [tokens].
    num_preemptions : array of int64
        Times it was preempted [count].
    recomputing : array of int8 (bool)
        1 from a preemption until its recompute reaches its known tokens again.
    last_token_at_s, max_gap_s : array of float64
        When it sampled its latest token [s]; its longest gap between two tokens so far [s].
    first_token_at_s, finished_at_s, first_scheduled_at_s : array of float64
        NaN until they happen [s].
    prefix_hit_tokens, recompute_hit_tokens : array of int64
        Prefix-cache hit at its first admission [tokens]; the sum of its hits at admissions
        after a preemption [tokens].
    """

    prompt_tokens: array
    output_tokens: array
    computed_tokens: array
    generated_tokens: array
    num_preemptions: array
    recomputing: array
    last_token_at_s: array
    max_gap_s: array
    first_token_at_s: array
    finished_at_s: array
    first_scheduled_at_s: array
    prefix_hit_tokens: array
    recompute_hit_tokens: array

    @classmethod
    def allocate(cls, prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> RequestBuffers:
        """Fresh buffers for requests of these lengths (nothing computed, nothing sampled)."""
        count = len(prompt_tokens)
        return cls(
            prompt_tokens=_ints(count, prompt_tokens),
            output_tokens=_ints(count, output_tokens),
            computed_tokens=_ints(count),
            generated_tokens=_ints(count),
            num_preemptions=_ints(count),
            recomputing=array("b", [0]) * count,
            last_token_at_s=_floats(count, 0.0),
            max_gap_s=_floats(count, 0.0),
            first_token_at_s=_floats(count, math.nan),
            finished_at_s=_floats(count, math.nan),
            first_scheduled_at_s=_floats(count, math.nan),
            prefix_hit_tokens=_ints(count),
            recompute_hit_tokens=_ints(count),
        )

    def arrays(self) -> RequestArrays:
        """NumPy views on the same memory, under the same names."""
        dtypes = {"q": np.int64, "d": np.float64, "b": np.bool_}
        buffers = {f.name: getattr(self, f.name) for f in fields(self)}
        return RequestArrays(**{name: np.frombuffer(b, dtype=dtypes[b.typecode]) for name, b in buffers.items()})


@dataclass(frozen=True, eq=False, slots=True)
class RequestArrays:
    """NumPy views of a :class:`RequestBuffers` (same fields, same memory)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    computed_tokens: np.ndarray
    generated_tokens: np.ndarray
    num_preemptions: np.ndarray
    recomputing: np.ndarray
    last_token_at_s: np.ndarray
    max_gap_s: np.ndarray
    first_token_at_s: np.ndarray
    finished_at_s: np.ndarray
    first_scheduled_at_s: np.ndarray
    prefix_hit_tokens: np.ndarray
    recompute_hit_tokens: np.ndarray


@dataclass(eq=False, slots=True)
class KVPool:
    """The KV pool's counters [blocks].

    Attributes
    ----------
    num_blocks : int
        Usable blocks (vLLM's ``num_gpu_blocks`` − 1 null block).
    free_blocks : int
        Free now (between steps: after the last step's completions freed theirs).
    peak_used_blocks : int
        Most blocks in use after scheduling any step so far.
    """

    num_blocks: int
    free_blocks: int
    peak_used_blocks: int = 0

    def note_usage(self, free_blocks: int) -> None:
        """Note the blocks in use after scheduling a step."""
        used = self.num_blocks - free_blocks
        if used > self.peak_used_blocks:
            self.peak_used_blocks = used


#: The events of the step log, in the order a step's events are recorded.
EVENT_KINDS = ("preempted", "first_token", "finished")


@dataclass(frozen=True, eq=False, slots=True)
class StepRecord:
    """The normally scheduled steps: one buffer per column of ``STEP_COLUMNS``, and the step
    log's scheduled chunks flat (``chunk_*``, every step's chunks in scheduling order, with
    ``chunk_start`` the request's computed tokens before the chunk; step ``i``'s end in them at
    ``step_end[i]``). The events (:data:`EVENT_KINDS`) of the steps with some, flat too:
    ``event_header`` holds four integers per such step (its index among these steps, then how
    many requests it preempted, gave their first token and finished), ``event_requests`` those
    requests, step after step and kind after kind (see :func:`record_events`)."""

    start_at_s: array = field(default_factory=lambda: array("d"))
    duration_s: array = field(default_factory=lambda: array("d"))
    num_decode_tokens: array = field(default_factory=lambda: array("q"))
    num_prefill_tokens: array = field(default_factory=lambda: array("q"))
    num_running: array = field(default_factory=lambda: array("q"))
    num_waiting: array = field(default_factory=lambda: array("q"))
    num_free_kv_blocks: array = field(default_factory=lambda: array("q"))
    num_preemptions: array = field(default_factory=lambda: array("q"))
    num_cached_tokens: array = field(default_factory=lambda: array("q"))
    chunk_request: array = field(default_factory=lambda: array("q"))
    chunk_tokens: array = field(default_factory=lambda: array("q"))
    chunk_kind: array = field(default_factory=lambda: array("b"))
    chunk_start: array = field(default_factory=lambda: array("q"))
    step_end: array = field(default_factory=lambda: array("q"))
    event_header: array = field(default_factory=lambda: array("q"))
    event_requests: array = field(default_factory=lambda: array("q"))


@dataclass(frozen=True, eq=False, slots=True)
class GapRecord:
    """Inter-token gaps [s], as a multiset: ``single`` ones (weight 1), and each step's common
    gap (``common_values``, with ``common_counts`` requests): the requests that also sampled in
    the step before share the gap ``end − start`` of the step, the same float as each one's
    ``end − last token``, so it is kept once with its count (:func:`record_common_gaps`)."""

    single: array = field(default_factory=lambda: array("d"))
    common_values: array = field(default_factory=lambda: array("d"))
    common_counts: array = field(default_factory=lambda: array("q"))


@dataclass(eq=False, slots=True)
class SimState:
    """Everything one simulation changes (see the module docstring).

    Attributes
    ----------
    table : RequestTable
        The input, in input order; ``order[i]`` is the input position of the ``i``-th arrival.
    num_requests : int
    time_origin_s : float
        The trace's origin, its first arrival, in the input's clock [s]; every other time
        here is relative to it.
    ids : numpy.ndarray
        Request ids in arrival order.
    arrival_at_s, arrival_list
        Arrival times since ``time_origin_s`` in arrival order [s] (a NumPy array, and an
        ``array.array`` for fast scalar reads).
    req, req_np : RequestBuffers, RequestArrays
        Per-request state (two views of the same memory).
    engine : EngineConfig
        The knobs; copied below into plain attributes for the hot loops.
    kv : KVPool
    batch_time_s, decode_run_time_s
        The cost model's methods (``decode_run_time_s`` is None for a model without it).
    priority_policy : bool
        ``engine.scheduling_policy == "priority"``.
    victim_keys : list of tuple
        ``(priority, arrival index)`` per request: the priority policy preempts the running
        request with the largest (empty under FCFS); the index breaks arrival ties by
        submission order, so of equal keys the later-submitted request is evicted first.
    pool : PrefixBlockPool or None
        The blocks' identities, with prefix caching on (None: the counters of ``kv`` suffice).
    groups : KVGroups or None
        The block tables of several KV-cache groups (sliding window, ...; None: one full group),
        or of one full group when the run speculates.
    drafts : Drafts or None
        Speculative decoding's per-request state (:mod:`.drafts`; None without it).
    pipelined : bool
        ``engine.async_scheduling``: step k is planned before step k−1's outputs are processed.
    reserve_full_isl, watermark_blocks
        vLLM's admission check for the whole known sequence, and its watermark
        ``floor(watermark × (num_blocks + 1))`` [blocks].
    running : list of int
        The running list, in admission order.
    waiting : deque of int, or PriorityWaitingQueue
        The waiting queue: FCFS, preempted requests at its front; or the priority heap.
    num_not_decoding : int
        Running requests that are prefilling or recomputing.
    next_arrival : int
        Index of the next request to join the queue.
    num_done, num_preemptions, num_steps : int
    finishing : list of int
        Pipelined only: requests that sampled their last token in the previous step; they keep
        their slot and blocks until the step now being planned is planned.
    in_flight : set of int
        Pipelined with prefix caching only: requests whose token sampled in the previous step
        is not yet known to the scheduler (blocks are entered in the cache up to known tokens).
    num_query_tokens, num_hit_tokens : int
        Known tokens looked up in the prefix cache at admissions, and the hits [tokens].
    last_sample_step : int
        ``num_steps`` after the last step that sampled a token (the loop's stall guard).
    now_s : float
        Start of the next step [s].
    steps, gaps : StepRecord, GapRecord
        What ran, compressed.
    """

    table: RequestTable
    order: np.ndarray
    num_requests: int
    time_origin_s: float
    ids: np.ndarray
    arrival_at_s: np.ndarray
    arrival_list: array
    req: RequestBuffers
    req_np: RequestArrays
    engine: EngineConfig
    budget_tokens: int
    max_num_seqs: int
    block_size: int
    threshold_tokens: int
    chunked_prefill: bool
    decode_first: bool
    priority_policy: bool
    victim_keys: list[tuple[int, int]]
    kv: KVPool
    pool: PrefixBlockPool | None
    groups: KVGroups | None
    drafts: Drafts | None
    pipelined: bool
    reserve_full_isl: bool
    watermark_blocks: int
    batch_time_s: Callable[[Batch], float]
    decode_run_time_s: Callable[..., np.ndarray] | None
    now_s: float
    running: list[int] = field(default_factory=list)
    waiting: deque[int] | PriorityWaitingQueue = field(default_factory=deque)
    num_not_decoding: int = 0
    next_arrival: int = 0
    num_done: int = 0
    num_preemptions: int = 0
    num_steps: int = 0
    finishing: list[int] = field(default_factory=list)
    in_flight: set[int] = field(default_factory=set)
    num_query_tokens: int = 0
    num_hit_tokens: int = 0
    last_sample_step: int = 0
    steps: StepRecord = field(default_factory=StepRecord)
    gaps: GapRecord = field(default_factory=GapRecord)


def arrival_order(table: RequestTable) -> tuple[np.ndarray, float, np.ndarray]:
    """The requests' arrival order (a stable sort: equal arrivals keep their input order), the
    trace's origin (its first arrival, in the input's clock) [s] and the arrivals since it, in
    arrival order [s]: ``arrival − origin`` is exact whenever the arrivals span less than the
    origin itself (epoch timestamps), and is the arrival itself for a trace that starts at 0."""
    order = np.argsort(table.arrival_at_s, kind="stable")
    absolute = table.arrival_at_s[order]
    origin = float(absolute[0])
    arrival = absolute - origin if origin != 0.0 else absolute
    return order, origin, np.ascontiguousarray(arrival, dtype=np.float64)


def watermark_blocks(engine: EngineConfig, num_blocks: int) -> int:
    """vLLM's admission watermark ``floor(watermark × (num_blocks + 1))`` [blocks]."""
    return math.floor(engine.watermark * (num_blocks + 1))


def new_state(
    table: RequestTable,
    engine: EngineConfig,
    cost: CostModel,
    num_blocks: int,
    kv_groups: tuple[KVGroup, ...] = ("full",),
    *,
    acceptance: AcceptanceModel | None = None,
    acceptance_seed: int = 0,
) -> SimState:
    """The state before the first step: every request still to arrive, the pool all free.

    Arrivals are taken relative to the first one, the trace's origin (its value in the input's
    clock is ``time_origin_s``): ``arrival − origin`` is exact whenever the arrivals span less
    than the origin itself (epoch timestamps), and is the arrival itself for a trace that
    starts at 0. ``acceptance`` and ``acceptance_seed``: how a speculating engine's drafts are
    accepted (:func:`budgetlab.simulator.drafts.new_drafts`).
    """
    order, origin, arrival = arrival_order(table)
    req = RequestBuffers.allocate(table.prompt_tokens[order], table.output_tokens[order])
    arrival_list = array("d")
    arrival_list.frombytes(np.ascontiguousarray(arrival, dtype=np.float64).tobytes())
    priority_policy = engine.scheduling_policy == "priority"
    waiting: deque[int] | PriorityWaitingQueue = deque()
    victim_keys: list[tuple[int, int]] = []
    if priority_policy:
        priority = table.priority[order].tolist()
        waiting = PriorityWaitingQueue(priority)
        victim_keys = list(zip(priority, range(len(order))))  # the index breaks arrival ties
    pool, groups = block_tables(table, order, engine, kv_groups, num_blocks)
    return SimState(
        table=table,
        order=order,
        num_requests=len(order),
        time_origin_s=origin,
        ids=table.ids[order],
        arrival_at_s=arrival,
        arrival_list=arrival_list,
        req=req,
        req_np=req.arrays(),
        engine=engine,
        budget_tokens=engine.max_num_batched_tokens,
        max_num_seqs=engine.max_num_seqs,
        block_size=engine.block_size,
        threshold_tokens=engine.long_prefill_token_threshold,
        chunked_prefill=engine.enable_chunked_prefill,
        decode_first=engine.policy == "decode-first",
        priority_policy=priority_policy,
        victim_keys=victim_keys,
        kv=KVPool(num_blocks=num_blocks, free_blocks=num_blocks),
        pool=pool,
        groups=groups,
        drafts=new_drafts(engine, table, order, kv_groups, acceptance=acceptance, acceptance_seed=acceptance_seed),
        pipelined=engine.async_scheduling,
        reserve_full_isl=engine.scheduler_reserve_full_isl,
        watermark_blocks=watermark_blocks(engine, num_blocks),
        batch_time_s=cost.batch_time_s,
        decode_run_time_s=cost.decode_run_time_s if isinstance(cost, CostModel) else None,
        now_s=float(arrival[0]),
        waiting=waiting,
    )


# --------------------------------------------------------------------------------------------
# Shared step bookkeeping
# --------------------------------------------------------------------------------------------


def cache_limit_tokens(state: SimState, request: int) -> int:
    """Tokens of ``request`` the scheduler knows, up to which its blocks may enter the cache:
    prompt + generated, less a token still in flight when pipelined (rules 4 and 6)."""
    known = state.req.prompt_tokens[request] + state.req.generated_tokens[request]
    if state.drafts is not None and state.pipelined:  # drafts.py S8: its in-flight step's tokens
        return known - state.drafts.in_flight_tokens[request]
    return known - 1 if request in state.in_flight else known


def chunk_slot_tokens(state: SimState, computed_tokens: int, num_tokens: int) -> int:
    """Tokens a chunk's KV allocation must hold [tokens]: where the chunk ends, and speculating, the
    drafter's lookahead slots past it, within ``max_model_len`` (:mod:`.drafts` S4)."""
    drafts = state.drafts
    if drafts is None:
        return computed_tokens + num_tokens
    return drafts.slot_tokens(computed_tokens, num_tokens)


def release_blocks(state: SimState, request: int, *, finished: bool) -> int:
    """Free ``request``'s blocks (a finish, or a preemption when ``finished`` is False);
    returns how many became free [blocks] (with prefix caching, blocks other requests still
    hold stay taken)."""
    if state.pool is not None:
        return state.pool.release(request, finished=finished)
    if state.groups is not None:
        return state.groups.release(request)
    return ceil_blocks(state.req.computed_tokens[request], state.block_size)


def allocate_chunk(state: SimState, request: int, *, computed_tokens: int, num_tokens: int, new_blocks: int) -> None:
    """With prefix caching, the pool's side of scheduling a chunk: ``request`` (holding
    ``computed_tokens``) takes its ``new_blocks`` blocks, and the blocks its ``num_tokens``
    tokens fill enter the cache, up to the tokens the scheduler knows (rule 4)."""
    pool = state.pool
    assert pool is not None
    if new_blocks:
        pool.grow(request, new_blocks)
    pool.cache_full_blocks(request, min(computed_tokens + num_tokens, cache_limit_tokens(state, request)))


def retire_finished(state: SimState, finished: list[int], free_blocks: int) -> int:
    """The requests that sampled their last token in the step just run: they free their
    blocks and slots for the next step, or, pipelined, once the next step is planned
    (:attr:`SimState.finishing`, rule 29). Returns the free blocks [blocks]."""
    state.num_done += len(finished)
    if state.pipelined:
        state.finishing = list(finished)
        return free_blocks
    return _release_all(state, finished, free_blocks)


def release_finishing(state: SimState, free_blocks: int, scheduled: Collection[int] = ()) -> int:
    """Pipelined, once this step (``scheduled``) is planned, the previous step's outputs are
    processed (vLLM's ``update_from_output`` runs after the next ``schedule``). With prefix
    caching, each request that sampled a token then and is not scheduled now (those that
    finished, decodes the budget left out) first enters its blocks in the cache up to its
    computed tokens (``update_from_output`` → ``cache_blocks(request, num_computed −
    num_in_flight)``, ``vllm/v1/core/sched/scheduler.py``): a finished request's last full block
    stays hittable. Then the finished ones leave the running list and free their blocks
    (rule 29). Returns the free blocks [blocks]."""
    if state.drafts is not None:
        apply_in_flight_drafts(state)
    in_flight = state.in_flight
    if in_flight and len(scheduled) < len(state.running):  # one that sampled may be unscheduled
        done = set(scheduled)
        computed = state.req.computed_tokens
        for r in state.running:
            if r in in_flight and r not in done:
                if state.pool is not None:
                    state.pool.cache_full_blocks(r, computed[r])
                elif state.groups is not None:
                    state.groups.cache(r, computed[r])
    finishing = state.finishing
    if not finishing:
        return free_blocks
    state.finishing = []
    return _release_all(state, finishing, free_blocks)


def apply_in_flight_drafts(state: SimState) -> None:
    """Speculative decoding, pipelined (:mod:`.drafts` S8, S10): the step before is processed now,
    after this one was planned: its rollbacks apply, and each request that sampled in it and still
    runs enters its blocks in the cache up to its computed tokens (a preempted one's output is
    stale: nothing is cached)."""
    drafts = state.drafts
    assert drafts is not None
    groups = state.groups
    caching = groups is not None and groups.caching
    running = set(state.running) if caching and drafts.in_flight else ()
    for r in drafts.in_flight:
        drafts.lag[r] = 0
        drafts.in_flight_tokens[r] = 0
        if caching and r in running:
            assert groups is not None
            groups.cache(r, state.req.computed_tokens[r])
    drafts.in_flight = []
    drafts.unsure.clear()


def _release_all(state: SimState, requests: list[int], free_blocks: int) -> int:
    free = free_blocks
    for r in requests:
        free += release_blocks(state, r, finished=True)
    done = set(requests)
    state.running = [r for r in state.running if r not in done]
    return free


def step_duration_s(state: SimState, batch: Batch) -> float:
    """The cost model's time for ``batch`` [s], checked (:func:`checked_duration_s`)."""
    return checked_duration_s(state.batch_time_s, batch)


def checked_duration_s(batch_time_s: Callable[[Batch], float], batch: Batch) -> float:
    """``batch_time_s(batch)`` [s], checked finite and > 0 (>= 0 for the empty batch of a
    pipelined iteration that schedules nothing: a roofline model has no GPU work then)."""
    return check_step_s(batch_time_s(batch), batch)


def check_step_s(duration: float, batch: Batch) -> float:
    """A step time ``duration`` [s] for ``batch``, checked as :func:`checked_duration_s` does."""
    if not 0.0 < duration < math.inf and not (duration == 0.0 and batch.num_tokens == 0):
        raise ValueError(
            f"the cost model returned {duration!r} s for a step of {batch}; step times must be finite and > 0"
        )
    return float(duration)


def record_step(
    state: SimState,
    *,
    duration_s: float,
    num_decode_tokens: int,
    num_prefill_tokens: int,
    free_blocks: int,
    num_preemptions: int,
    num_cached_tokens: int = 0,
) -> None:
    """Append the step starting now to the per-step columns (counts after scheduling it)."""
    state.kv.note_usage(free_blocks)
    steps = state.steps
    steps.start_at_s.append(state.now_s)
    steps.duration_s.append(duration_s)
    steps.num_decode_tokens.append(num_decode_tokens)
    steps.num_prefill_tokens.append(num_prefill_tokens)
    steps.num_running.append(len(state.running))
    steps.num_waiting.append(len(state.waiting))
    steps.num_free_kv_blocks.append(free_blocks)
    steps.num_preemptions.append(num_preemptions)
    steps.num_cached_tokens.append(num_cached_tokens)
    state.num_steps += 1


def record_events(
    state: SimState,
    preempted: list[int] | np.ndarray,
    first_token: list[int] | np.ndarray,
    finished: list[int] | np.ndarray,
) -> None:
    """Record the events (:data:`EVENT_KINDS`) of the normally scheduled step just recorded,
    when it has any: one header of four integers and the requests, kind after kind."""
    if not (len(preempted) or len(first_token) or len(finished)):
        return
    steps = state.steps
    steps.event_header.extend((len(steps.start_at_s) - 1, len(preempted), len(first_token), len(finished)))
    requests = steps.event_requests
    for who in (preempted, first_token, finished):
        if isinstance(who, np.ndarray):
            requests.frombytes(who.astype(np.int64, copy=False).tobytes())
        else:
            requests.extend(who)


def record_common_gaps(state: SimState, gap_s: float, count: int) -> None:
    """Record ``count`` inter-token gaps of ``gap_s`` [s] (a step's common gap)."""
    if count:
        gaps = state.gaps
        gaps.common_values.append(gap_s)
        gaps.common_counts.append(count)
