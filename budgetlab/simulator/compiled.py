"""The driver of the compiled core: its arrays from a run's inputs, its loop, its record.

:func:`core_inputs` turns a run's request table and engine into the core's inputs and
:func:`new_core` into its state (:class:`~.core_state.CoreState`); a :class:`CoreDriver` calls
:func:`~.core_loop.advance` until the run is done — pricing a step or a run of steps in Python
when the cost model is not one the core prices itself, and enlarging a record array the core
reports full — and :func:`core_record` reads the finished state as a
:class:`~.record.RunRecord`. :func:`run_compiled` runs a table known from the start; a replica
of a fleet or an engine under closed-loop clients (:mod:`.streamed`) feeds its core requests as
they are sent (:meth:`CoreDriver.make_known`: the requests known so far, and a horizon no step may start at or
after). :func:`core_schedules` says which engines the core runs (the others go through the
reference steps).

The compiled code is cached on disk (:mod:`._jit`: the user's cache folder, or
``BUDGETLAB_CACHE_DIR``), so only the first run on a machine compiles (the README gives what
that costs).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast

import numba
import numpy as np
from numba import types as nb_types
from numba.typed import Dict

from budgetlab.attention import KVGroup
from budgetlab.metrics import quantile, quantile_of_ranked
from budgetlab.simulator import core_state as cs
from budgetlab.simulator.blocks import BlockKeys
from budgetlab.simulator.core_cost import cost_kind
from budgetlab.simulator.core_loop import advance
from budgetlab.simulator.core_runs import MAX_RUN_STEPS
from budgetlab.simulator.core_state import CoreState
from budgetlab.simulator.core_steps import expand_steps, gap_arrays, gap_counts, gap_digits
from budgetlab.simulator.inputs import RequestTable
from budgetlab.simulator.plan import step_batch
from budgetlab.simulator.record import RECORDED_STEP_COLUMNS, ChunkLog, RunRecord, StepColumns
from budgetlab.simulator.stall import stall_error, stall_limit_steps
from budgetlab.simulator.state import (
    RequestArrays,
    arrival_order,
    check_step_s,
    checked_duration_s,
    watermark_blocks,
)
from budgetlab.specs import Batch, EngineConfig

__all__ = ["core_schedules", "CoreInputs", "core_inputs", "run_compiled", "core_record", "expand_runs"]


def core_schedules(engine: EngineConfig, kv_groups: tuple[KVGroup, ...]) -> bool:
    """Whether the compiled core schedules this engine: one full-attention KV group, no
    speculative decoding (the reference steps schedule the others)."""
    return tuple(kv_groups) == ("full",) and not engine.num_speculative_tokens


@dataclass(frozen=True, eq=False)
class CoreInputs:
    """What the compiled core needs of a run's inputs: the request table and its arrival order
    (:func:`~.state.arrival_order`), the engine, the pool's size and, with prefix caching, the
    blocks' content keys."""

    table: RequestTable
    order: np.ndarray
    time_origin_s: float
    arrival_at_s: np.ndarray
    engine: EngineConfig
    num_blocks: int
    keys: BlockKeys | None

    @property
    def ids(self) -> np.ndarray:
        return self.table.ids[self.order]


def core_inputs(table: RequestTable, engine: EngineConfig, num_blocks: int) -> CoreInputs:
    """The compiled core's inputs for ``table`` on ``engine`` with ``num_blocks`` usable blocks."""
    order, origin, arrival = arrival_order(table)
    keys = None
    if engine.enable_prefix_caching:
        keys = BlockKeys.of_table(table, order, engine.block_size)
    return CoreInputs(table, order, origin, arrival, engine, num_blocks, keys)


def new_core(
    inputs: CoreInputs,
    cost: Any,
    *,
    price_in_python: bool = False,
    streamed: bool = False,
    record_requests: int | None = None,
) -> CoreState:
    """The core's arrays before the first step: every request still to arrive, the pool all free.
    ``streamed``: no request known yet (:meth:`CoreDriver.make_known` reveals them), else all.
    ``record_requests``: the requests the record's first sizes are for (default all of them; a
    replica of a fleet expects its share)."""
    table, order, engine = inputs.table, inputs.order, inputs.engine
    count = len(order)
    plan_capacity = engine.max_num_seqs + 1
    caching = inputs.keys is not None
    kind, params = (cs.COST_PYTHON, np.zeros(1)) if price_in_python else cost_kind(cost, engine.max_num_batched_tokens)
    i64, i32 = np.int64, np.int32  # per-request counts and indices are int32 (MAX_RECORDED)
    arrived_in_order = bool(np.all(order[1:] > order[:-1]))  # then the table's own arrays serve

    def in_arrival_order(values: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(values if arrived_in_order else values[order], dtype=i64)

    prompt = in_arrival_order(table.prompt_tokens)
    output = in_arrival_order(table.output_tokens)
    priority_policy = engine.scheduling_policy == "priority"  # else no priority is read
    priority = in_arrival_order(table.priority) if priority_policy else np.zeros(0, dtype=i64)
    num_blocks = inputs.num_blocks
    if inputs.keys is not None:
        pool = _pool_arrays(inputs.keys, engine.block_size, prompt, output, plan_capacity, num_blocks)
    else:
        empty = np.zeros(0, dtype=i64)
        pool = {
            "ref": empty,
            "block_key_of": empty,
            "fq_next": empty,
            "fq_prev": empty,
            "copy_next": empty,
            "copy_prev": empty,
            "cached": Dict.empty(key_type=nb_types.int64, value_type=nb_types.int64),
            "table": np.zeros((0, 0), dtype=i64),
            "row_len": empty,
            "row_of": np.zeros(0, dtype=i32),
            "free_rows": empty,
            "num_cached": np.zeros(0, dtype=i32),
            "num_entered": np.zeros(0, dtype=i32),
            "shared_tokens": empty,
            "shared_stream": empty,
            "tail_stream": empty,
            "private": np.zeros(0, dtype=np.bool_),
            "hit": empty,
        }
    n = np.zeros(cs.N_SLOTS, dtype=i64)
    n[cs.N_FREE] = num_blocks
    if caching:
        n[cs.N_FREE_SLOTS] = plan_capacity + 1
    n[cs.N_KNOWN] = 0 if streamed else count
    t = np.zeros(cs.T_SLOTS)
    t[cs.T_NOW] = float(inputs.arrival_at_s[0])
    t[cs.T_HORIZON] = -math.inf if streamed else math.inf
    sized = count if record_requests is None else max(1, min(count, record_requests))
    rows = sized + 1024  # the record's first sizes: grown in place (see _grown)
    return CoreState(
        cfg_budget=engine.max_num_batched_tokens,
        cfg_max_num_seqs=engine.max_num_seqs,
        cfg_block_size=engine.block_size,
        cfg_threshold=engine.long_prefill_token_threshold,
        cfg_chunked=bool(engine.enable_chunked_prefill),
        cfg_decode_first=engine.policy == "decode-first",
        cfg_priority=priority_policy,
        cfg_pipelined=bool(engine.async_scheduling),
        cfg_caching=caching,
        cfg_full_isl=bool(engine.scheduler_reserve_full_isl),
        cfg_watermark=watermark_blocks(engine, num_blocks),
        cfg_num_blocks=num_blocks,
        cfg_num_requests=count,
        cfg_stall_limit=stall_limit_steps(table),
        cfg_cost_kind=kind,
        cost=params,
        arrival=inputs.arrival_at_s,
        prompt=prompt,
        output=output,
        priority=priority,
        computed=np.zeros(count, dtype=i32),
        generated=np.zeros(count, dtype=i32),
        num_preemptions=np.zeros(count, dtype=i32),
        recomputing=np.zeros(count, dtype=i32),
        last_token_at=np.zeros(count),
        max_gap=np.zeros(count),
        first_token_at=np.full(count, math.nan),
        finished_at=np.full(count, math.nan),
        first_scheduled_at=np.full(count, math.nan),
        prefix_hit=np.zeros(count, dtype=i32),
        recompute_hit=np.zeros(count, dtype=i64),  # summed over re-admissions
        seq=np.zeros(count, dtype=i32),
        open_run=np.full(count, -1, dtype=i32),
        flags=np.zeros(count, dtype=np.int8),
        running=np.zeros(plan_capacity, dtype=i64),
        waiting=np.zeros(count + 1, dtype=i32),
        finishing=np.zeros(plan_capacity, dtype=i64),
        in_flight=np.zeros(plan_capacity, dtype=i64),
        n=n,
        t=t,
        plan=np.zeros((plan_capacity, 4), dtype=i64),
        preempted=np.zeros(plan_capacity, dtype=i64),
        scratch=np.zeros((2, plan_capacity), dtype=i64),
        **pool,
        step_float=np.zeros((rows, 4)),
        step_int=np.zeros((rows, len(cs.STEP_INT_FIELDS)), dtype=np.int32),
        runs=np.zeros((4 * plan_capacity + rows, len(cs.RUN_FIELDS)), dtype=np.int32),
        event_header=np.zeros((rows, 4), dtype=np.int32),
        event_requests=np.zeros(3 * plan_capacity + 2 * sized, dtype=np.int32),
        gaps=np.zeros(plan_capacity + 256),
        run_step_s=np.zeros(4 * MAX_RUN_STEPS if kind == cs.COST_PYTHON else 0),
        run_durations=np.zeros(MAX_RUN_STEPS),
    )


def _pool_arrays(
    keys: BlockKeys, block_size: int, prompt: np.ndarray, output: np.ndarray, rows: int, num_blocks: int
) -> dict[str, Any]:
    """The prefix-cache pool's arrays: every block free, in order, none cached."""
    i64 = np.int64
    size = num_blocks + 1
    fq_next = np.zeros(size, dtype=i64)
    fq_prev = np.zeros(size, dtype=i64)
    if num_blocks:
        fq_next[:-1] = np.arange(1, size)  # 0 (the sentinel) -> 1 -> ... -> num_blocks -> 0
        fq_next[-1] = 0
        fq_prev[1:] = np.arange(0, num_blocks)
        fq_prev[0] = num_blocks
    max_blocks = int(((prompt + output + block_size - 1) // block_size).max()) + 1 if len(prompt) else 1
    shared_tokens, shared_stream, tail_stream = keys.arrays()
    return {
        "ref": np.zeros(size, dtype=i64),
        "block_key_of": np.full(size, -1, dtype=i64),
        "fq_next": fq_next,
        "fq_prev": fq_prev,
        "copy_next": np.full(size, -1, dtype=i64),
        "copy_prev": np.full(size, -1, dtype=i64),
        "cached": Dict.empty(key_type=nb_types.int64, value_type=nb_types.int64),
        "table": np.zeros((rows + 1, max_blocks), dtype=i64),
        "row_len": np.zeros(rows + 1, dtype=i64),
        "row_of": np.full(len(prompt), -1, dtype=np.int32),
        "free_rows": np.arange(rows + 1, dtype=i64)[::-1].copy(),
        "num_cached": np.zeros(len(prompt), dtype=np.int32),
        "num_entered": np.zeros(len(prompt), dtype=np.int32),
        "shared_tokens": shared_tokens,
        "shared_stream": shared_stream,
        "tail_stream": tail_stream,
        "private": shared_stream < 0,
        "hit": np.zeros(max_blocks, dtype=i64),
    }


#: The slack a record array is grown with beyond the size its run so far foretells (:func:`_grown`).
GROWTH_SLACK = 1.05


def _refs_of_field(holder: tuple[Any, ...], index: int) -> int:
    """``sys.getrefcount`` of ``holder[index]`` read into a local, as :func:`_grown` reads a field."""
    array_ = holder[index]
    return sys.getrefcount(array_)


#: ``sys.getrefcount`` of an array held by one tuple field alone, read as :func:`_grown` reads it
#: (3 on CPython 3.11-3.13: the field, the local, the call's argument), measured rather than assumed.
_HELD_BY_FIELD_ALONE = _refs_of_field((np.zeros(1),), 0)


def _grown(core: CoreState, expected_requests: int | None = None) -> CoreState:
    """``core`` with its full record arrays enlarged: to the size the run so far foretells (its
    rows per arrival so far times the requests it expects, every request unless
    ``expected_requests`` says fewer, :data:`GROWTH_SLACK` more), at least by a
    quarter and at most doubled; in place where NumPy can (its allocator then extends the
    memory, usually without copying it, so a long run's record never needs twice its size),
    else copied."""
    n = core.n
    cap = len(core.plan)
    changes: dict[str, Any] = {}
    expected = core.cfg_num_requests if expected_requests is None else expected_requests
    per_arrival = expected / max(int(n[cs.N_NEXT_ARRIVAL]), 1)

    def bigger(name: str, used: int, room: int) -> None:
        array_ = getattr(core, name)
        length = len(array_)
        if used + room > length:
            foretold = int(used * per_arrival * GROWTH_SLACK)
            shape = (max(min(2 * length, max(length + length // 4, foretold)), used + room), *array_.shape[1:])
            # held by the state alone (and here: this name, getrefcount's argument), no view of it
            if array_.flags.owndata and sys.getrefcount(array_) == _HELD_BY_FIELD_ALONE:
                array_.resize(shape, refcheck=False)  # rows stay where they are; new ones are zeros
            else:
                grown = np.zeros(shape, dtype=array_.dtype)
                grown[:used] = array_[:used]
                changes[name] = grown

    bigger("step_float", int(n[cs.N_STEP_ROWS]), 1)
    bigger("step_int", int(n[cs.N_STEP_ROWS]), 1)
    bigger("runs", int(n[cs.N_RUN_ROWS]), cap)
    bigger("event_header", int(n[cs.N_EVENT_ROWS]), 1)
    bigger("event_requests", int(n[cs.N_EVENT_REQUESTS]), 3 * cap)
    bigger("gaps", int(n[cs.N_GAPS]), cap)
    if core.cfg_cost_kind == cs.COST_PYTHON:
        bigger("run_step_s", int(n[cs.N_RUN_STEP_S]), MAX_RUN_STEPS)
    return core._replace(**changes)


def _planned_batch(core: CoreState) -> Batch:
    """The planned step's composition (its plan rows: request, tokens, kind, computed before)."""
    return step_batch(core.plan[: core.n[cs.N_PLAN]].tolist())


def run_compiled(inputs: CoreInputs, cost: Any, *, price_in_python: bool = False) -> CoreState:
    """Run ``inputs`` through the compiled core to the end; returns the core's final arrays.
    ``price_in_python``: price with the cost model's methods even where the core could."""
    driver = CoreDriver(inputs, cost, new_core(inputs, cost, price_in_python=price_in_python))
    if driver.advance() != cs.DONE:
        raise RuntimeError("internal error: the core asked for requests it was given from the start")
    return driver.core


class CoreDriver:
    """Advances one compiled core (``core``, its arrays; ``inputs``, what they were made from),
    doing what it returns to Python for: pricing steps and runs with ``cost``, growing its record,
    raising its errors."""

    def __init__(self, inputs: CoreInputs, cost: Any, core: CoreState) -> None:
        self.inputs = inputs
        self.cost = cost
        self.core = core
        #: the requests the run is expected to have (its record grows for them); None: all of
        #: the core's (a streamed core sent a share of them updates it as they come)
        self.expected_requests: int | None = None
        self._call: Any = None

    def make_known(self, known: int, horizon_s: float) -> None:
        """Let the core see its first ``known`` requests (their arrays filled in, arriving by
        ``horizon_s``) and run the steps that start before ``horizon_s`` [s, the core's clock],
        the earliest a request still unknown may arrive (``math.inf``: none will). A request
        arriving at the horizon itself may be known or not: the core queues the known ones and
        stops before the step, so the others join the queue behind them, as in one run."""
        n, t = self.core.n, self.core.t
        if known < n[cs.N_KNOWN] or horizon_s < t[cs.T_HORIZON]:
            raise ValueError("requests are made known in arrival order, the horizon only moves on")
        if known and not self.core.arrival[known - 1] <= horizon_s:
            raise ValueError(f"request {known - 1} arrives after the horizon {horizon_s!r} s")
        n[cs.N_KNOWN] = known
        t[cs.T_HORIZON] = horizon_s

    def advance(self) -> int:
        """Run steps until every request is done (:data:`~.core_state.DONE`) or requests not
        known yet are needed (:data:`~.core_state.NEED_ARRIVALS`); returns which."""
        while True:
            # numba's dispatcher types its argument on every call (~1 ms for this tuple): after
            # the first call, the compiled entry point is called directly
            if self._call is None:
                status = advance(self.core)
                self._call = cast(Any, advance).overloads[(numba.typeof(self.core),)].entry_point
            else:
                status = self._call(self.core)
            if status in (cs.DONE, cs.NEED_ARRIVALS):
                return status
            self._serve(status)

    def _serve(self, status: int) -> None:
        """Do what the core returned ``status`` for, or raise its error."""
        core, cost, inputs = self.core, self.cost, self.inputs
        if status == cs.NEED_PRICE:
            core.t[cs.T_DURATION] = checked_duration_s(cost.batch_time_s, _planned_batch(core))
        elif status == cs.NEED_RUN_PRICE:
            _price_run(core, cost)
        elif status == cs.GROW:
            self.core = _grown(core, self.expected_requests)
        elif status == cs.TOO_LONG:
            raise ValueError(
                f"this run passed {cs.MAX_RECORDED:,} steps or admissions, the most one simulation records "
                f"(at t={core.t[cs.T_NOW]:.6g} s, {int(core.n[cs.N_DONE]):,} of {core.cfg_num_requests:,} requests "
                "finished): simulate the workload in parts"
            )
        elif status == cs.STALL:
            n = core.n
            raise stall_error(
                inputs.engine,
                core.cfg_stall_limit,
                now_s=float(core.t[cs.T_NOW]),
                num_running=int(n[cs.N_RUNNING]),
                num_waiting=int(n[cs.N_WAITING]),
                num_preemptions=int(n[cs.N_PREEMPTIONS]),
            )
        elif status == cs.BAD_DURATION:
            check_step_s(float(core.t[cs.T_DURATION]), _planned_batch(core))  # raises the reference's ValueError
            raise RuntimeError(f"internal error: the core refused a step time of {core.t[cs.T_DURATION]!r} s")
        else:
            raise RuntimeError(
                f"internal error: the step at t={core.t[cs.T_NOW]!r} s scheduled nothing with "
                f"{core.n[cs.N_RUNNING]} running and {core.n[cs.N_WAITING]} waiting requests"
            )


def _price_run(core: CoreState, cost: Any) -> None:
    """The durations of a planned decode-only run [s], from the cost model: its
    ``decode_run_time_s`` over the run's decode contexts (bit for bit its ``batch_time_s``), or
    ``batch_time_s`` step by step for a model without it."""
    k = int(core.n[cs.N_RUN_MAX])
    count = int(core.n[cs.N_RUNNING])
    first = int(core.computed[core.running[:count]].sum())  # the decodes' context in the run's first step
    context = first + count * np.arange(k, dtype=np.int64)
    run_time_s = getattr(cost, "decode_run_time_s", None)
    if callable(run_time_s):
        durations = np.asarray(run_time_s(num_decodes=count, decode_context_tokens=context), dtype=np.float64)
        if not (len(durations) == k and np.all(durations > 0.0) and np.all(np.isfinite(durations))):
            bad = durations[~((durations > 0) & np.isfinite(durations))]
            raise ValueError(
                f"the cost model returned {bad[0] if len(bad) else durations!r} s for a decode-only step; "
                "step times must be finite and > 0"
            )
    else:
        durations = np.array(
            [
                checked_duration_s(cost.batch_time_s, Batch(num_decodes=count, decode_context_tokens=int(c)))
                for c in context
            ]
        )
    core.run_durations[:k] = durations


def core_record(inputs: CoreInputs, core: CoreState) -> RunRecord:
    """The record of a finished compiled run: views on the core's arrays, its step rows and
    chunk runs expanded into steps and chunks only when they are read (:mod:`.core_steps`)."""
    n = core.n
    rows = int(n[cs.N_STEP_ROWS])
    sf = core.step_float[:rows]
    si = core.step_int[:rows]
    runs = core.runs[: n[cs.N_RUN_ROWS]]
    num_steps = int(n[cs.N_STEPS])
    pricing = (core.cfg_cost_kind, core.cost, core.run_step_s[: n[cs.N_RUN_STEP_S]])

    def expand() -> tuple[dict[str, np.ndarray], np.ndarray]:
        floats, ints = expand_steps(
            sf, si, num_steps, core.arrival, runs, core.cfg_block_size, *pricing, np.empty(MAX_RUN_STEPS)
        )
        columns = {"start_at_s": floats[:, 0], "duration_s": floats[:, 1]}
        for name in RECORDED_STEP_COLUMNS[2:]:
            if name != "num_cached_tokens":
                columns[name] = ints[:, cs.STEP_INT_FIELDS.index(name)]
        columns["num_cached_tokens"] = floats[:, 2].astype(np.int64)
        return columns, np.cumsum(ints[:, cs.S_CHUNKS])

    req = RequestArrays(
        prompt_tokens=core.prompt,
        output_tokens=core.output,
        computed_tokens=core.computed,
        generated_tokens=core.generated,
        num_preemptions=core.num_preemptions,
        recomputing=core.recomputing != 0,
        last_token_at_s=core.last_token_at,
        max_gap_s=core.max_gap,
        first_token_at_s=core.first_token_at,
        finished_at_s=core.finished_at,
        first_scheduled_at_s=core.first_scheduled_at,
        prefix_hit_tokens=core.prefix_hit,
        recompute_hit_tokens=core.recompute_hit,
    )
    return RunRecord(
        table=inputs.table,
        order=inputs.order,
        ids=inputs.ids,
        time_origin_s=inputs.time_origin_s,
        arrival_at_s=inputs.arrival_at_s,
        req=req,
        block_size=inputs.engine.block_size,
        num_kv_blocks=inputs.num_blocks,
        steps=StepColumns(int(np.count_nonzero(si[:, cs.S_CHUNKS] == 0)), expand=expand),
        chunks=ChunkLog(expand=lambda: expand_runs(runs)[1:], num_records=len(runs)),
        event_header=core.event_header[: n[cs.N_EVENT_ROWS]],
        event_requests=core.event_requests[: n[cs.N_EVENT_REQUESTS]],
        num_steps=num_steps,
        gaps=CoreGaps(sf, si, core.gaps[: n[cs.N_GAPS]], *pricing),
        num_preemptions=int(n[cs.N_PREEMPTIONS]),
        kv_peak_blocks=int(n[cs.N_PEAK_USED]),
        num_query_tokens=int(n[cs.N_QUERY]),
        num_hit_tokens=int(n[cs.N_HIT]),
    )


#: The most gaps :class:`CoreGaps` gathers in memory (values and weights, 16 bytes each) before
#: selecting its quantiles in passes over the record instead.
MAX_GAPS_IN_MEMORY = 1 << 20


class CoreGaps:
    """The inter-token gaps of a compiled run (a :class:`~budgetlab.metrics.GapSample`), read
    from its step rows (:mod:`.core_steps`): the gaps kept one by one (``singles``), and each
    row's steps' shared gaps (the step's end − start, ``num_common_gaps`` of them in a run's
    first step and every decode's in the others).

    The quantiles are :func:`~budgetlab.metrics.quantile`'s, bit for bit. Up to
    :data:`MAX_GAPS_IN_MEMORY` entries they are gathered as (value, weight) pairs;
    beyond, the values at the ranks needed are selected exactly, 16 bits of their float64 bit
    patterns a pass (four passes, each pricing the runs again), so the gaps of a long run are
    never all in memory.
    """

    def __init__(
        self, sf: np.ndarray, si: np.ndarray, singles: np.ndarray, kind: int, cost: np.ndarray, run_step_s: np.ndarray
    ) -> None:
        self._args = (sf, si, singles, kind, cost, run_step_s)
        #: entries before leaving out those of weight 0 (one per step, one per single gap), gaps
        self.num_entries, self.num_gaps = gap_counts(si, len(singles))

    def _buffers(self) -> tuple[np.ndarray, np.ndarray]:
        return np.empty(MAX_RUN_STEPS), np.empty(MAX_RUN_STEPS, dtype=np.int64)

    @cached_property
    def _pairs(self) -> tuple[np.ndarray, np.ndarray]:
        return cast(tuple[np.ndarray, np.ndarray], gap_arrays(*self._args, *self._buffers()))

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap as (value [s], multiplicity) pairs (gathered, whatever their number)."""
        return self._pairs

    def max_s(self) -> float:
        if not self.num_gaps:
            return math.nan
        if self.num_entries <= MAX_GAPS_IN_MEMORY:
            return float(self._pairs[0].max())
        return float(self._select(np.array([self.num_gaps - 1]))[0])

    def quantile(self, q: np.ndarray) -> np.ndarray:
        if self.num_entries <= MAX_GAPS_IN_MEMORY:
            return np.asarray(quantile(self._pairs[0], q, weights=self._pairs[1]))
        return np.asarray(quantile_of_ranked(q, self.num_gaps, self._select))

    def _select(self, ranks: np.ndarray) -> np.ndarray:
        """The gaps at 0-based ``ranks`` of the sorted sample, by radix selection over the bits."""
        buffers = self._buffers()
        prefixes = np.zeros(len(ranks), dtype=np.int64)
        left = np.asarray(ranks, dtype=np.int64).copy()  # rank among the gaps with the prefix
        for level in range(4):
            hist = gap_digits(*self._args, *buffers, level, prefixes)
            cum = np.cumsum(hist, axis=1)
            for slot in range(len(ranks)):
                digit = int(np.searchsorted(cum[slot], left[slot], side="right"))
                left[slot] -= int(cum[slot, digit - 1]) if digit else 0
                prefixes[slot] = (int(prefixes[slot]) << 16) | digit
        return prefixes.view(np.float64)


def expand_runs(runs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every chunk of the chunk-run record, in log order (step, then scheduling key): its step,
    request, tokens, kind and start (computed tokens before it)."""
    counts = runs[:, cs.R_NUM_STEPS]
    total = int(counts.sum())
    row = np.repeat(np.arange(len(runs)), counts)
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    step = runs[row, cs.R_FIRST_STEP] + within
    order = np.lexsort((runs[row, cs.R_KEY], step))
    row, within, step = row[order], within[order], step[order]
    tokens = runs[row, cs.R_TOKENS].astype(np.int64)
    return (
        step,
        runs[row, cs.R_REQUEST].astype(np.int64),
        tokens,
        runs[row, cs.R_KIND].astype(np.int8),
        runs[row, cs.R_START] + within * tokens,
    )
