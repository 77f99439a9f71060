"""The compiled core's run loop: arrivals, then the next step or run of steps, until the driver
is needed.

:func:`advance` is the loop of :mod:`.loop` compiled: before each step the requests that arrived
by its start join the waiting queue; when every running request decodes, a run of decode-only
steps is taken at once (:mod:`.core_runs`); otherwise one step is planned (:mod:`.core`), priced
(:mod:`.core_cost`) and sampled. It returns to the driver (:mod:`.compiled`) when the run is done, when a step or a
run needs durations only Python can give (a cost model the core does not price itself:
``NEED_PRICE``, ``NEED_RUN_PRICE``), or when a record array is full (``GROW``).
"""

from __future__ import annotations

import math
from typing import Any

from budgetlab.simulator._jit import core_jit
from budgetlab.simulator.core import finish_step, plan_step, plan_tokens, queue_arrivals
from budgetlab.simulator.core_cost import run_s, step_s
from budgetlab.simulator.core_runs import MAX_RUN_STEPS, plan_run, take_run
from budgetlab.simulator.core_state import (
    BAD_DURATION,
    COST_PYTHON,
    DONE,
    GROW,
    MAX_RECORDED,
    N_DONE,
    N_EVENT_REQUESTS,
    N_EVENT_ROWS,
    N_FINISHING,
    N_GAPS,
    N_KNOWN,
    N_LAST_SAMPLE,
    N_NEXT_ARRIVAL,
    N_NOT_DECODING,
    N_PHASE,
    N_RUN_MAX,
    N_RUN_ROWS,
    N_RUN_STEP_S,
    N_RUN_STOPS,
    N_RUNNING,
    N_SEQ,
    N_STEP_ROWS,
    N_STEPS,
    N_WAITING,
    NEED_ARRIVALS,
    NEED_PRICE,
    NEED_RUN_PRICE,
    NOTHING_SCHEDULED,
    PHASE_RUN,
    PHASE_STEP,
    STALL,
    T_DURATION,
    T_HORIZON,
    T_NOW,
    TOO_LONG,
    borrow,
)

__all__ = ["advance"]


@core_jit
def advance(st: Any) -> int:
    """Run steps until the run is done or the driver is needed; returns a status of
    :mod:`.core_state`. A planned step waiting for its duration (``N_PHASE == PHASE_STEP``, the
    duration in ``t[T_DURATION]``) or a run waiting for its durations (``PHASE_RUN``, in
    ``run_durations``) is taken first."""
    return run_steps(borrow(st))


@core_jit
def run_steps(st: Any) -> int:
    """:func:`advance` on the state it lends (:func:`~.core_state.borrow`)."""
    n, t = st.n, st.t
    while True:
        phase = n[N_PHASE]
        n[N_PHASE] = 0
        if phase == PHASE_STEP:
            finish_step(st, t[T_DURATION])
            if n[N_STEPS] - n[N_LAST_SAMPLE] > st.cfg_stall_limit:
                return STALL
        elif phase == PHASE_RUN:
            take_run(st, st.run_durations, n[N_RUN_MAX], n[N_RUN_STOPS] != 0)
        # Pipelined, the last request's last token is still in flight after its step: one more
        # (empty) iteration is planned before the engine sees it finish.
        # (with requests still to come, NEED_ARRIVALS: the driver makes them known)
        if n[N_DONE] >= n[N_KNOWN] and n[N_FINISHING] == 0:
            return DONE if t[T_HORIZON] == math.inf else NEED_ARRIVALS
        if not has_room(st):
            return GROW
        if n[N_STEPS] >= MAX_RECORDED or n[N_SEQ] >= MAX_RECORDED or n[N_RUN_ROWS] >= MAX_RECORDED:
            return TOO_LONG
        # a request not known yet may arrive by this step's start: stop before it (and before
        # queueing the arrivals it would see, so a stopped core's queue is its last step's)
        if t[T_NOW] >= t[T_HORIZON]:
            return NEED_ARRIVALS
        i = n[N_NEXT_ARRIVAL]
        if i < n[N_KNOWN] and (st.arrival[i] <= t[T_NOW] or (n[N_RUNNING] == 0 and n[N_WAITING] == 0)):
            queue_arrivals(st)
            if t[T_NOW] >= t[T_HORIZON]:  # an idle engine waited for an arrival at the horizon
                return NEED_ARRIVALS
        if n[N_NOT_DECODING] == 0 and n[N_RUNNING] > 0 and n[N_FINISHING] == 0:
            k_max, stops = plan_run(st)
            if k_max >= 2:
                n[N_RUN_MAX] = k_max
                n[N_RUN_STOPS] = 1 if stops else 0
                n[N_PHASE] = PHASE_RUN
                if st.cfg_cost_kind == COST_PYTHON:
                    return NEED_RUN_PRICE
                if not run_s(st, k_max):
                    return BAD_DURATION
                continue
        if not plan_step(st):
            return NOTHING_SCHEDULED
        n[N_PHASE] = PHASE_STEP
        if st.cfg_cost_kind == COST_PYTHON:
            return NEED_PRICE
        duration = step_s(st)
        t[T_DURATION] = duration
        if not (0.0 < duration < math.inf) and not (duration == 0.0 and plan_tokens(st) == 0):
            return BAD_DURATION


@core_jit
def has_room(st: Any) -> bool:
    """Whether the record arrays hold one more step of at most ``len(st.plan)`` chunks, or one
    more run of steps (:data:`~.core_runs.MAX_RUN_STEPS` durations kept when priced in Python)."""
    n = st.n
    cap = len(st.plan)
    return (
        n[N_STEP_ROWS] < len(st.step_int)
        and (st.cfg_cost_kind != COST_PYTHON or n[N_RUN_STEP_S] + MAX_RUN_STEPS <= len(st.run_step_s))
        and n[N_RUN_ROWS] + cap <= len(st.runs)
        and n[N_EVENT_ROWS] < len(st.event_header)
        and n[N_EVENT_REQUESTS] + 3 * cap <= len(st.event_requests)
        and n[N_GAPS] + cap <= len(st.gaps)
    )
