"""The run loop: queue the arrivals, then take the next step the fastest exact way.

:func:`run` steps a :class:`~budgetlab.simulator.state.SimState` until every request has
finished. Before each step the requests that arrived at or before its start join the waiting
queue (FIFO; equal arrivals keep their input order); an idle engine (nothing running or
waiting) waits for the next arrival. Then, in fast mode, it tries a decode-only jump
(:func:`~budgetlab.simulator.fast.jump_decode_run`) and the vectorized running pass
(:func:`~budgetlab.simulator.fast.vectorized_step`); each declines a step it cannot do exactly,
which the reference step (:func:`~budgetlab.simulator.step.reference_step`) then schedules.

:class:`RunOptions` holds the choices that change how, never what, is computed: the mode, and
(for tests that force a path) from how many running requests on NumPy is used. The pipelined
(async-scheduling) engine runs through the same loop: its steps release the previous step's
finished requests only once they are planned (:attr:`~budgetlab.simulator.state.SimState.finishing`),
so the loop also plans the empty iteration after the last request's last token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from budgetlab._checks import flag, int_at_least
from budgetlab.errors import ParameterError, SchedulerStallError
from budgetlab.simulator.fast import VECTOR_MIN_RUNNING, jump_decode_run, vectorized_step
from budgetlab.simulator.state import SimState
from budgetlab.simulator.step import reference_step

__all__ = ["SIM_MODES", "SimMode", "RunOptions", "run", "queue_arrivals", "stall_limit_steps"]

SIM_MODES = ("fast", "reference")
SimMode = Literal["fast", "reference"]


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How to run a simulation (the results do not depend on it).

    Parameters
    ----------
    mode : {"fast", "reference"}
        ``"reference"`` schedules one step at a time in plain Python; ``"fast"`` also jumps
        over runs of decode-only steps and fills long running lists with NumPy.
    vector_min_running : int
        Fast mode uses its NumPy paths from this many running requests on [count]; 1 forces
        them whenever they apply (the tests' third mode).
    check_requests_fit : bool
        Reject, before the run, requests that could never fit the KV pool. Tests turn it off
        to reach the loop's own guard against a step that schedules nothing.
    """

    mode: SimMode = "fast"
    vector_min_running: int = VECTOR_MIN_RUNNING
    check_requests_fit: bool = True

    def __post_init__(self) -> None:
        if self.mode not in SIM_MODES:
            raise ParameterError(f"mode must be one of {', '.join(SIM_MODES)}, got {self.mode!r}")
        int_at_least("vector_min_running", self.vector_min_running)
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


def stall_limit_steps(state: SimState) -> int:
    """Steps without a sampled token after which the run is a livelock [steps]: twice every
    request's prompt and output, plus 1,000 (a run that makes progress samples a token at
    least every time the pending prompts' tokens are computed once)."""
    table = state.table
    return 2 * int(table.prompt_tokens.sum() + table.output_tokens.sum()) + 1000


def raise_stall(state: SimState, limit: int) -> None:
    """Raise :class:`~budgetlab.errors.SchedulerStallError` for a run stuck in a preemption cycle."""
    engine = state.engine
    hint = (
        "With scheduler_reserve_full_isl=False admission lets in requests the pool cannot hold "
        "together: set it to True (vLLM's default)"
        if not engine.scheduler_reserve_full_isl
        else "Give the KV cache more blocks"
    )
    drafts = state.drafts
    if drafts is not None:  # speculating: a request's chunk may need more blocks than its tokens fill
        hint += (
            f" (speculating, a request also holds blocks for up to {drafts.k} drafts and "
            f"{drafts.lookahead} lookahead slots past its tokens: a pool that holds its prompt and output "
            "alone can be too small; lower num_speculative_tokens)"
        )
    raise SchedulerStallError(
        f"no request sampled a token in the last {limit:,} steps (t = {state.now_s:.6g} s, "
        f"{len(state.running)} running, {len(state.waiting)} waiting, {state.num_preemptions:,} "
        f"preemptions so far): the requests preempt each other in a cycle, as vLLM's scheduler "
        f"would. {hint}, or a larger KV pool (num_kv_blocks, gpu_memory_utilization)."
    )


def run(state: SimState, options: RunOptions) -> None:
    """Step ``state`` until every request has finished."""
    arrival = state.arrival_list
    num_requests = len(arrival)
    fast = options.mode == "fast" and state.groups is None  # several KV-cache groups: step by step
    vector_min = options.vector_min_running
    stall_limit = stall_limit_steps(state)
    # Pipelined, the last request's last token is still in flight after its step: one more
    # (empty) iteration is planned before the engine sees it finish.
    while state.num_done < num_requests or state.finishing:
        i = state.next_arrival
        if i < num_requests and (arrival[i] <= state.now_s or not (state.running or state.waiting)):
            queue_arrivals(state)
        if fast:
            vectorized = len(state.running) >= vector_min
            if state.num_not_decoding == 0 and state.running and jump_decode_run(state, vectorized=vectorized):
                continue
            if vectorized and vectorized_step(state):
                continue
        reference_step(state)
        if state.num_steps - state.last_sample_step > stall_limit:
            raise_stall(state, stall_limit)
