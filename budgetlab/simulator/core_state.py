"""The compiled core's state record: every array a run changes, in one named tuple.

:class:`CoreState` is what the compiled step (:mod:`.core`) and pool (:mod:`.core_pool`) take
as ``st``. Engine knobs are scalar fields (``cfg_*``); per-request values are arrays in arrival
order under the names :class:`~budgetlab.simulator.state.RequestBuffers` uses; the changing
counters are slots of one int64 array ``n`` (``N_*``) and one float64 array ``t`` (``T_*``);
the record of what ran grows in arrays the driver (:mod:`.compiled`) enlarges when the core
reports them full.

The record is compact, its size set by the run's events rather than its steps:

* a request's consecutive decode steps are one *chunk run* (its row of ``runs``: request, first
  step, number of steps, computed tokens before the first, tokens per step, kind, scheduling
  key), so the step log costs per request, not per step and request;
* a decode-only run of steps taken at once (:mod:`.core_runs`) is one row of the step record,
  like a single step (``num_steps`` > 1): what its steps share, and what regenerates the rest
  (the decodes' context before it; the step durations are priced again, or read from
  ``run_step_s`` for a cost priced in Python): :mod:`.core_steps` expands
  the rows into one row per step on demand;
* inter-token gaps shared by a step's decodes are a count per row (their value, the step's end
  minus its start, is recomputed on demand).
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import numpy as np
from numba.core import config as nb_config
from numba.core import types as nb_types
from numba.core.datamodel import models as nb_models
from numba.extending import intrinsic, register_model

__all__ = ["CoreState", "BLOCK_BITS", "RUN_FIELDS", "STEP_INT_FIELDS", "PER_REQUEST_FIELDS", "borrow"]

#: A block key is ``stream << BLOCK_BITS | block index`` (:class:`~.blocks.BlockKeys`).
BLOCK_BITS = 32

# Slots of CoreState.n (int64 counters)
N_RUNNING = 0  # length of the running list
N_WAIT_HEAD = 1  # FCFS ring buffer's head
N_WAITING = 2  # requests waiting
N_HEAP = 3  # priority heap's size
N_FINISHING = 4  # pipelined: requests whose last token is in flight
N_NEXT_ARRIVAL = 5
N_DONE = 6
N_PREEMPTIONS = 7
N_STEPS = 8
N_LAST_SAMPLE = 9  # N_STEPS after the last step that sampled a token
N_FREE = 10  # free KV blocks between steps
N_PEAK_USED = 11
N_NOT_DECODING = 12  # running requests prefilling or recomputing
N_QUERY = 13  # known tokens looked up in the prefix cache
N_HIT = 14  # their hits
N_SEQ = 15  # admissions so far (a chunk's scheduling key)
N_PHASE = 16  # 1: a step is planned and waits for its duration
N_STEP_ROWS = 17  # rows used in the step record
N_RUN_ROWS = 18  # rows used in the chunk-run record
N_EVENT_ROWS = 19
N_EVENT_REQUESTS = 20
N_GAPS = 21
N_PLAN = 22  # chunks in the planned step
N_PREEMPTED = 23  # requests it preempted
N_PLAN_CACHED = 24  # prefix-cache hits of its admissions [tokens]
N_PLAN_FREE = 25  # free blocks after planning it
N_IN_FLIGHT = 26  # pipelined with caching: requests whose sampled token is not yet known
N_FREE_SLOTS = 27  # free rows of the block table
N_FIRST = 28  # scratch: first-token requests of the step being sampled
N_FINISHED = 29
N_RUN_MAX = 30  # the planned run's most steps
N_RUN_STOPS = 31  # 1: the next arrival ends it
N_RUNS_TAKEN = 32  # decode-only runs taken at once
N_RUN_STEPS = 33  # the steps in them
N_RUN_STEP_S = 34  # durations used in run_step_s
N_KNOWN = 35  # requests the core knows of (the first N_KNOWN of the per-request arrays)
N_STOP_ON_FINISH = 36  # 1: a step that finishes requests moves the horizon to its end (closed loops)
N_SLOTS = 37

# Slots of CoreState.t (float64)
T_NOW = 0  # start of the next step [s]
T_DURATION = 1  # the planned step's duration [s]
T_HORIZON = 2  # the earliest an unknown request may arrive [s]: no step starts at or after it
T_SLOTS = 3

#: Columns of CoreState.runs (int32): one row per chunk run.
RUN_FIELDS = ("request", "first_step", "num_steps", "start", "tokens", "kind", "key")
R_REQUEST, R_FIRST_STEP, R_NUM_STEPS, R_START, R_TOKENS, R_KIND, R_KEY = range(7)

#: Columns of CoreState.step_int (int32): one row per step or decode-only run of steps. Counts
#: after scheduling its (first) step; ``num_common_gaps``: the (first) step's requests that also
#: sampled in the step before (their gap is the step's end − start; in a run's later steps every
#: decode's); ``num_chunks`` per step; ``num_steps`` (1: a single step). What else regenerates a
#: run's steps is known without a column: the arrivals queued before it began are those at or
#: before its start, and its durations, where the core cannot price them again (a cost priced
#: in Python), are the next ``num_steps`` of ``run_step_s`` (kept for runs alone, in row order).
STEP_INT_FIELDS = (
    "num_decode_tokens",
    "num_prefill_tokens",
    "num_running",
    "num_waiting",
    "num_free_kv_blocks",
    "num_preemptions",
    "num_common_gaps",
    "num_chunks",
    "num_steps",
)
(
    S_DECODE,
    S_PREFILL,
    S_RUNNING,
    S_WAITING,
    S_FREE,
    S_PREEMPTIONS,
    S_COMMON,
    S_CHUNKS,
    S_NUM_STEPS,
) = range(9)
#: Columns of CoreState.step_float: the (first) step's start and duration [s]; for a run, the
#: decodes' context before it [tokens]; the step's prefix-cache hits (``num_cached_tokens``:
#: a step may admit ``max_num_seqs`` requests each hitting a long shared prefix, past int32)
#: [tokens]. Token counts are exact in a float64 (below 2^53).
F_START, F_DURATION, F_CONTEXT, F_CACHED = 0, 1, 2, 3

#: Cost kinds the core prices itself (else it returns each planned step to the driver):
#: :mod:`.core_cost`.
COST_PYTHON, COST_CONSTANT, COST_IDEAL, COST_CALIBRATED = 0, 1, 2, 3

# Statuses the core returns to the driver
DONE, NEED_PRICE, GROW, STALL, BAD_DURATION, NOTHING_SCHEDULED, NEED_RUN_PRICE, TOO_LONG = 0, 1, 2, 3, 4, 5, 6, 7
#: Every known request is done, or the next step would start at or after ``t[T_HORIZON]``: the
#: driver makes the requests arriving by then known (``n[N_KNOWN]``) and moves the horizon on.
NEED_ARRIVALS = 8
#: Values of ``n[N_PHASE]``: a step planned and waiting for its duration, a run for its durations.
PHASE_STEP, PHASE_RUN = 1, 2

#: Bit of a chunk's scheduling key that puts non-decodes after decodes (decode-first order).
AFTER_DECODES = 1 << 30
#: The record's steps and admissions are int32: once either reaches this many (about a billion
#: steps: some 30 million requests of a conversation trace) the run stops (``TOO_LONG``) before
#: its next step; the step or run of steps taken last adds far fewer than the 2^30 more int32 holds.
MAX_RECORDED = AFTER_DECODES


#: The fields of :class:`CoreState` holding one entry per request (arrival order); ``priority``
#: is empty without the priority policy, the last seven without prefix caching. The waiting
#: queue (one more entry: the FCFS ring's spare slot) is not among them.
PER_REQUEST_FIELDS = (
    "arrival", "prompt", "output", "priority", "computed", "generated", "num_preemptions", "recomputing",
    "last_token_at", "max_gap", "first_token_at", "finished_at", "first_scheduled_at", "prefix_hit",
    "recompute_hit", "seq", "open_run", "flags",
    "row_of", "num_cached", "num_entered", "shared_tokens", "shared_stream", "tail_stream", "private",
)  # fmt: skip


class CoreState(NamedTuple):
    """Every array of a compiled run (see the module docstring)."""

    # engine knobs
    cfg_budget: int
    cfg_max_num_seqs: int
    cfg_block_size: int
    cfg_threshold: int
    cfg_chunked: bool
    cfg_decode_first: bool
    cfg_priority: bool
    cfg_pipelined: bool
    cfg_caching: bool
    cfg_full_isl: bool
    cfg_watermark: int
    cfg_num_blocks: int
    cfg_num_requests: int
    cfg_stall_limit: int
    cfg_cost_kind: int
    cost: np.ndarray  # the cost's parameters (float64)
    # requests, arrival order
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    priority: np.ndarray
    computed: np.ndarray
    generated: np.ndarray
    num_preemptions: np.ndarray
    recomputing: np.ndarray
    last_token_at: np.ndarray
    max_gap: np.ndarray
    first_token_at: np.ndarray
    finished_at: np.ndarray
    first_scheduled_at: np.ndarray
    prefix_hit: np.ndarray
    recompute_hit: np.ndarray
    seq: np.ndarray  # its admission number (scheduling key)
    open_run: np.ndarray  # its current decode run's row in ``runs`` (-1: none)
    flags: np.ndarray  # int8: 1 finishing (pipelined), 2 token in flight (pipelined, caching)
    # queues
    running: np.ndarray
    waiting: np.ndarray
    finishing: np.ndarray
    in_flight: np.ndarray
    # counters
    n: np.ndarray
    t: np.ndarray
    # the planned step
    plan: np.ndarray  # (capacity, 4): request, tokens, kind, computed before
    preempted: np.ndarray
    scratch: np.ndarray  # (2, capacity): first-token and finished requests of the step sampled
    # the prefix-cache pool (empty arrays when caching is off)
    ref: np.ndarray
    block_key_of: np.ndarray
    fq_next: np.ndarray
    fq_prev: np.ndarray
    copy_next: np.ndarray
    copy_prev: np.ndarray
    cached: object  # numba typed Dict: key -> earliest cached block
    table: np.ndarray
    row_len: np.ndarray
    row_of: np.ndarray
    free_rows: np.ndarray
    num_cached: np.ndarray
    num_entered: np.ndarray
    shared_tokens: np.ndarray
    shared_stream: np.ndarray
    tail_stream: np.ndarray
    private: np.ndarray
    hit: np.ndarray
    # the record (grown by the driver)
    step_float: np.ndarray
    step_int: np.ndarray
    runs: np.ndarray
    event_header: np.ndarray
    event_requests: np.ndarray
    gaps: np.ndarray
    run_step_s: np.ndarray  # durations of the runs priced in Python [s]
    run_durations: np.ndarray  # the planned run's step durations [s]


# Passing the state between compiled functions: numba counts references to each of its ~50
# arrays on every call (an increment and a decrement per array per call; the compiler does not
# prune them across calls), which cost the core 5-10x its run time. Inside one call of the
# core's loop the caller holds the state for the whole call, so the functions it calls may
# *borrow* it: ``borrow(st)`` is the same tuple, typed so that numba counts no references
# to it as a whole (reading a field still counts that one array, as it must).


class BorrowedCoreState(nb_types.NamedTuple):
    """numba's type of a :class:`CoreState` lent by its holder (see :func:`borrow`)."""

    def __init__(self, held: Any) -> None:
        super().__init__(held.types, held.instance_class)
        self.name = f"borrowed {self.name}"

    @property
    def key(self) -> Any:
        return (*super().key, "borrowed")


@register_model(BorrowedCoreState)
class _BorrowedModel(nb_models.TupleModel):
    """A tuple whose arrays numba's reference counting does not visit."""

    def traverse(self, builder: Any) -> list[Any]:
        return []


if cast(Any, nb_config).DISABLE_JIT:  # pragma: no cover - the pure-Python core (NUMBA_DISABLE_JIT=1)

    def borrow(st: Any) -> Any:
        """The state itself (nothing is counted in Python)."""
        return st

else:

    @intrinsic
    def borrow(typingctx: Any, st: Any) -> Any:
        """The state lent to the functions its holder calls: the same tuple, typed as
        :class:`BorrowedCoreState` so that passing it counts no references."""
        if not isinstance(st, nb_types.NamedTuple):
            return None
        signature = BorrowedCoreState(st)(st)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return args[0]

        return signature, codegen
