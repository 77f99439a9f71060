"""The run loop: queue the arrivals, then take the next step, until every request has finished.

:func:`run` runs a request table to the end and returns its record.
``mode="fast"`` (the default) runs it through the compiled core (:mod:`.compiled`: each rule
stated once, compiled, with runs of decode-only steps taken at once) whenever the core schedules
the engine — one full-attention KV group, no speculative decoding; otherwise, and with
``mode="reference"``, :func:`run_reference` steps it with the readable reference step
(:func:`~budgetlab.simulator.step.reference_step`): before each step the requests that arrived at
or before its start join the waiting queue (FIFO; equal arrivals keep their input order); an idle
engine (nothing running or waiting) waits for the next arrival.

:class:`RunOptions` holds the choices that change how, never what, is computed. The pipelined
(async-scheduling) engine runs through the same loop: its steps release the previous step's
finished requests only once they are planned (:attr:`~budgetlab.simulator.state.SimState.finishing`),
so the loop also plans the empty iteration after the last request's last token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from budgetlab._checks import flag
from budgetlab.attention import KVGroup
from budgetlab.cost import CostModel
from budgetlab.errors import ParameterError
from budgetlab.simulator.compiled import core_inputs, core_record, core_schedules, run_compiled
from budgetlab.simulator.inputs import RequestTable
from budgetlab.simulator.record import RunRecord, build_record
from budgetlab.simulator.stall import stall_error, stall_limit_steps
from budgetlab.simulator.state import SimState, new_state
from budgetlab.simulator.step import reference_step
from budgetlab.specs import EngineConfig
from budgetlab.workload.acceptance import AcceptanceModel

__all__ = [
    "SIM_MODES",
    "SimMode",
    "RunOptions",
    "run",
    "run_reference",
    "queue_arrivals",
    "stall_limit_steps",
    "stall_error",
]

SIM_MODES = ("fast", "reference")
SimMode = Literal["fast", "reference"]


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How to run a simulation (the results do not depend on it).

    Parameters
    ----------
    mode : {"fast", "reference"}
        ``"reference"`` schedules one step at a time in plain Python; ``"fast"`` runs the
        compiled core (the same rules, compiled; decode-only runs taken at once).
    price_in_python : bool
        Fast mode: price every step and decode-only run with the cost model's own Python methods
        even when the compiled core prices the model itself (:mod:`.core_cost`: ``ConstantCost``,
        ``IdealCost``, ``CalibratedCost`` of a dense model); the tests' third mode, which checks
        the two pricings agree.
    check_requests_fit : bool
        Reject, before the run, requests that could never fit the KV pool. Tests turn it off
        to reach the loop's own guard against a step that schedules nothing.
    """

    mode: SimMode = "fast"
    price_in_python: bool = False
    check_requests_fit: bool = True

    def __post_init__(self) -> None:
        if self.mode not in SIM_MODES:
            raise ParameterError(f"mode must be one of {', '.join(SIM_MODES)}, got {self.mode!r}")
        flag("price_in_python", self.price_in_python)
        flag("check_requests_fit", self.check_requests_fit)


def queue_arrivals(state: SimState) -> None:
    """Move the requests that arrived by ``state.now_s`` to the waiting queue; when the engine
    is idle, first move the clock to the next arrival."""
    arrival = state.arrival_list
    i = state.next_arrival
    if not state.running and not state.waiting and state.now_s < arrival[i]:
        state.now_s = arrival[i]  # idle: the next step starts at the next arrival
    now = state.now_s
    num_requests = len(arrival)
    if i < num_requests and arrival[i] <= now:
        waiting = state.waiting
        while i < num_requests and arrival[i] <= now:
            waiting.append(i)
            i += 1
        state.next_arrival = i


def raise_stall(state: SimState, limit: int) -> None:
    """Raise :class:`~budgetlab.errors.SchedulerStallError` for a run stuck in a preemption cycle."""
    raise stall_error(
        state.engine,
        limit,
        now_s=state.now_s,
        num_running=len(state.running),
        num_waiting=len(state.waiting),
        num_preemptions=state.num_preemptions,
        drafts=state.drafts,
    )


def run(
    table: RequestTable,
    engine: EngineConfig,
    cost: CostModel,
    num_blocks: int,
    kv_groups: tuple[KVGroup, ...],
    options: RunOptions,
    *,
    acceptance: AcceptanceModel | None = None,
    acceptance_seed: int = 0,
) -> RunRecord:
    """Simulate ``table`` on ``engine`` with a pool of ``num_blocks`` blocks until every request
    has finished; returns the run's record. ``mode="fast"`` runs the compiled core
    (:mod:`.compiled`) when it schedules this engine (one full-attention KV group, no speculative
    decoding), else the reference steps run a :class:`~.state.SimState`."""
    if options.mode == "fast" and core_schedules(engine, kv_groups):
        inputs = core_inputs(table, engine, num_blocks)
        return core_record(inputs, run_compiled(inputs, cost, price_in_python=options.price_in_python))
    state = new_state(
        table, engine, cost, num_blocks, kv_groups, acceptance=acceptance, acceptance_seed=acceptance_seed
    )
    run_reference(state)
    return build_record(state)


def run_reference(state: SimState) -> None:
    """Step ``state`` with the reference step until every request has finished."""
    arrival = state.arrival_list
    num_requests = len(arrival)
    stall_limit = stall_limit_steps(state.table)
    # Pipelined, the last request's last token is still in flight after its step: one more
    # (empty) iteration is planned before the engine sees it finish.
    while state.num_done < num_requests or state.finishing:
        i = state.next_arrival
        if i < num_requests and (arrival[i] <= state.now_s or not (state.running or state.waiting)):
            queue_arrivals(state)
        reference_step(state)
        if state.num_steps - state.last_sample_step > stall_limit:
            raise_stall(state, stall_limit)
