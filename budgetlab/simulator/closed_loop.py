"""Closed-loop clients (:class:`~budgetlab.workload.closed_loop.ClosedLoopClients`) on one
engine or a fleet: each request sent when a client is free, so what is sent depends on what
has finished.

:func:`send_as_clients_free` is the one loop, for :func:`~budgetlab.simulator.simulate` (one
engine) and :func:`~budgetlab.fleet.simulate_fleet` (a router's :class:`Dispatch`). The engines
are streamed compiled cores (:class:`~.streamed.StreamedCore`) that stop after every step that
finishes a request. The rule that keeps them exact: **no engine starts a step at or after a time
a request may yet be sent at**. A request is sent at a free client's time (a finish plus the
think time), so before one is sent at ``s`` every busy engine (one with a request in flight) is
advanced to ``s``, in time order: the engine whose next step starts first runs up to the
earliest time any other busy engine could make a client free — a finish comes at the end of a
step, after that engine's next step starts, so no earlier than its clock plus the think time —
and stops at its own first finish. Each engine's run is then the simulation of the requests it
was sent at the times they were sent (``simulate`` of them, bit for bit).

With think time 0 and several engines the engines advance nearly step by step (each call into
the core may run only until another engine's next step); one engine runs from finish to finish.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from typing import Protocol

import numpy as np

from budgetlab.simulator import Deployment, SimResult
from budgetlab.simulator.compiled import CoreInputs
from budgetlab.simulator.inputs import RequestTable
from budgetlab.simulator.streamed import StreamedCore
from budgetlab.workload.closed_loop import ClosedLoopClients

__all__ = ["Dispatch", "send_as_clients_free", "clients_inputs", "simulate_clients"]


class Dispatch(Protocol):
    """Where each request goes, and the times the sender must stop at to look (a router's stats
    snapshots). The sender calls :meth:`tick` and :meth:`choose` with every busy engine
    advanced to ``time_s``; they may advance the others there (:meth:`StreamedCore.advance_to`)."""

    def next_tick_s(self) -> float:
        """The next time the dispatch must look at the engines [s] (``math.inf``: none)."""
        ...

    def tick(self, time_s: float) -> None:
        """Look at the engines at ``time_s`` (the one returned by :meth:`next_tick_s`)."""
        ...

    def choose(self, position: int, time_s: float) -> int:
        """The engine the request at send position ``position`` goes to, sent at ``time_s``."""
        ...


class OneEngine:
    """The dispatch of a single engine: every request to engine 0, nothing to look at."""

    def next_tick_s(self) -> float:
        return math.inf

    def tick(self, time_s: float) -> None:  # pragma: no cover - never called: no ticks
        raise AssertionError("one engine has no ticks")

    def choose(self, position: int, time_s: float) -> int:
        return 0


def clients_inputs(clients: ClosedLoopClients, table: RequestTable, deployment: Deployment) -> CoreInputs:
    """The workload of ``clients`` as the streamed cores take it: ``table`` in send order (input
    order; arrival order, stable, when ``paced``); arrivals known only when sent."""
    if clients.paced:
        order = np.argsort(table.arrival_at_s, kind="stable")
        origin = float(table.arrival_at_s[order[0]])
    else:
        order = np.arange(len(table.ids))
        origin = 0.0
    engine, _, num_blocks, _ = deployment
    return CoreInputs(table, order, origin, np.zeros(len(order)), engine, num_blocks, None)


def send_as_clients_free(
    clients: ClosedLoopClients, whole: CoreInputs, fleet: list[StreamedCore], dispatch: Dispatch
) -> tuple[np.ndarray, np.ndarray]:
    """Send every request of ``whole`` (in its order) as ``clients`` free up, to the engines of
    ``fleet`` (made with ``stop_on_finish=True``) that ``dispatch`` chooses. Returns, per send
    position, the time it was sent [s, the workload's clock] and its engine."""
    count = len(whole.order)
    think = float(clients.think_time_s)
    earliest = whole.table.arrival_at_s[whole.order] if clients.paced else None
    free = [-math.inf if clients.paced else 0.0] * min(clients.concurrency, count)  # a heap
    in_flight: list[list[int]] = [[] for _ in fleet]  # per engine: core indices not finished
    sent_at = np.empty(count)
    chosen = np.empty(count, dtype=np.int64)
    position = 0
    while position < count:
        send_s = free[0] if free else math.inf
        if earliest is not None:
            send_s = max(send_s, float(earliest[position]))
        tick_s = dispatch.next_tick_s()
        time_s = min(send_s, tick_s)
        if _freed_before(time_s, fleet, in_flight, think, free):
            continue  # a client came free: the next send may be earlier
        if tick_s <= send_s:
            dispatch.tick(tick_s)
            continue
        heapq.heappop(free)
        pick = dispatch.choose(position, send_s)
        in_flight[pick].append(fleet[pick].send(position, send_s))
        sent_at[position] = send_s
        chosen[position] = pick
        position += 1
    return sent_at, chosen


def _freed_before(
    time_s: float, fleet: list[StreamedCore], in_flight: list[list[int]], think_s: float, free: list[float]
) -> bool:
    """Advance the busy engines up to ``time_s`` (no step started at or after it) in time order;
    at the first step that finishes requests, push their clients' free times onto ``free`` and
    return True (the caller looks again). False: every busy engine is at ``time_s``."""
    while True:
        busy = [(engine.clock_s, index) for index, engine in enumerate(fleet) if in_flight[index]]
        if not busy:
            return False
        clock, first = min(busy)
        if clock >= time_s:
            return False
        horizon = time_s
        for other_clock, index in busy:
            if index != first:  # its next finish comes after its clock: a send no earlier than then
                horizon = min(horizon, math.nextafter(other_clock + think_s, math.inf))
        engine = fleet[first]
        done = engine.num_finished
        engine.advance_to(horizon)
        if engine.num_finished != done:
            indices = np.asarray(in_flight[first], dtype=np.int64)
            finished = engine.finished_at_s_of(indices)
            ended = ~np.isnan(finished)
            for finish_s in finished[ended].tolist():
                heapq.heappush(free, finish_s + think_s)
            in_flight[first] = indices[~ended].tolist()
            return True


def simulate_clients(clients: ClosedLoopClients, table: RequestTable, deployment: Deployment) -> SimResult:
    """``clients`` (their requests as ``table``) on one engine (:func:`~budgetlab.simulator.simulate`'s
    closed loop): the run of their requests at the times they were sent (its ``arrival_at_s``)."""
    whole = clients_inputs(clients, table, deployment)
    engine = StreamedCore(deployment, whole, stop_on_finish=True)
    sent_at, _ = send_as_clients_free(clients, whole, [engine], OneEngine())
    result = engine.result(realized_table(table, whole.order, sent_at))
    assert result is not None
    return result


def realized_table(table: RequestTable, order: np.ndarray, sent_at: np.ndarray) -> RequestTable:
    """``table`` with each request's arrival the time it was sent (``sent_at`` per send position,
    ``order`` the input row of each)."""
    arrival = np.empty(len(order))
    arrival[order] = sent_at
    return replace(table, arrival_at_s=arrival)
