"""A compiled engine core that learns of its requests as they are sent: a replica of a fleet
(its router sends them, :mod:`budgetlab.fleet`) or an engine under closed-loop clients (each
sends its next request when its last one finished, :mod:`.closed_loop`).

A :class:`StreamedCore` keeps its own clock, from its first request's arrival, exactly as
:func:`~budgetlab.simulator.simulate` would on the requests it was sent (``arrival − origin``,
:func:`~.state.arrival_order`), so its result is bit for bit the simulation of those requests
alone. Times given to it (arrivals, horizons) are in the workload's own clock; it converts
them. Its core (:meth:`~.compiled.CoreDriver.make_known`) runs only the steps that start
before the time it is advanced to, so the sender can decide what comes next from its state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from budgetlab.simulator import Deployment, SimResult
from budgetlab.simulator import core_state as cs
from budgetlab.simulator.blocks import BlockKeys
from budgetlab.simulator.compiled import CoreDriver, CoreInputs, core_record, new_core
from budgetlab.simulator.inputs import RequestTable

__all__ = ["StreamedCore", "ReplicaLoad"]

#: The core's per-request arrays a replica fills as requests are sent: (core field, source).
_SENT_ARRAYS = ("prompt", "output")
_SENT_KEYS = ("shared_tokens", "shared_stream", "tail_stream", "private")

#: The share of its workload a replica's per-request arrays are first sized for, over its
#: expected share: they grow by half when more come (a router's imbalance, session affinity).
FIRST_SIZE_SLACK = 1.05


class ReplicaLoad:
    """A replica's scheduler counts, as its engine would report them after its last step
    started before the time asked: requests waiting and running, the KV pool's used fraction,
    and the requests sent to it that have not finished (``in_flight``)."""

    __slots__ = ("kv_used_fraction", "num_in_flight", "num_running", "num_waiting")

    def __init__(self, num_waiting: int, num_running: int, kv_used_fraction: float, num_in_flight: int) -> None:
        self.num_waiting = num_waiting
        self.num_running = num_running
        self.kv_used_fraction = kv_used_fraction
        self.num_in_flight = num_in_flight


class StreamedCore:
    """A streamed core on ``deployment`` over the workload ``whole`` (its table and arrival
    order: :class:`~.compiled.CoreInputs`), sent requests by their arrival positions.
    ``stop_on_finish``: a step that finishes requests ends :meth:`advance_to` (closed loops:
    their finishes bring the next requests). ``share``: the part of the workload it expects to be
    sent, in (0, 1] (a fleet's replica: one over the replicas), which sizes its record; it then
    expects its requests so far over the workload's part sent so far. ``keys``: the blocks' keys
    of the workload by block size, shared by the replicas of a fleet (filled as needed)."""

    def __init__(
        self,
        deployment: Deployment,
        whole: CoreInputs,
        *,
        stop_on_finish: bool = False,
        share: float = 1.0,
        keys: dict[int, tuple[BlockKeys, tuple[np.ndarray, ...]]] | None = None,
    ) -> None:
        self.deployment = deployment
        self._stop_on_finish = stop_on_finish
        self._share = share
        engine, _, num_blocks, _ = deployment
        block_keys, self._key_arrays = None, None
        if engine.enable_prefix_caching:
            known = keys if keys is not None else {}
            if engine.block_size not in known:
                made = BlockKeys.of_table(whole.table, whole.order, engine.block_size)
                known[engine.block_size] = (made, made.arrays())
            block_keys, self._key_arrays = known[engine.block_size]
        self._whole = CoreInputs(
            whole.table, whole.order, whole.time_origin_s, whole.arrival_at_s, engine, num_blocks, block_keys
        )
        self._rows: list[int] = []  # the workload's arrival positions sent here, in order
        self._fills: dict[str, Any] = {}  # per-request array -> an unsent request's entry (made in _start)
        self._origin_s = math.nan  # this replica's clock: its first request's arrival
        self._driver: CoreDriver | None = None

    @property
    def num_sent(self) -> int:
        return len(self._rows)

    @property
    def num_finished(self) -> int:
        """Requests sent here that have finished so far."""
        return 0 if self._driver is None else int(self._driver.core.n[cs.N_DONE])

    @property
    def clock_s(self) -> float:
        """When the core's next step would start [s, the workload's clock]: no step has started
        at or after it (NaN before the first request)."""
        if self._driver is None:
            return math.nan
        now = float(self._driver.core.t[cs.T_NOW])
        return now + self._origin_s if self._origin_s != 0.0 else now

    def finished_at_s_of(self, indices: np.ndarray) -> np.ndarray:
        """When the requests of core indices ``indices`` finished [s, the workload's clock]
        (NaN: not yet)."""
        assert self._driver is not None
        finished = self._driver.core.finished_at[indices]
        return finished + self._origin_s if self._origin_s != 0.0 else finished.copy()

    def _start(self, first_arrival_s: float) -> CoreDriver:
        """The core, made when the first request comes (its clock starts then): its per-request
        arrays sized for its share of the workload (grown in :meth:`send` when more come),
        empty, filled as requests are sent."""
        count = len(self._whole.order)
        core = new_core(
            self._whole, self.deployment.cost, streamed=True, record_requests=math.ceil(count * self._share)
        )
        size = min(count, math.ceil(count * self._share * FIRST_SIZE_SLACK) + 8)
        sent = {"arrival", *_SENT_ARRAYS, "priority", *_SENT_KEYS}
        for name in cs.PER_REQUEST_FIELDS:
            values = getattr(core, name)
            if len(values):  # empty: not used by this engine (priority, the prefix cache's)
                assert len(values) == count, name
                self._fills[name] = values.dtype.type(0) if name in sent else values[0]
        self._origin_s = first_arrival_s
        core = _with_room(core, 0, size, self._fills)
        core.n[cs.N_STOP_ON_FINISH] = int(self._stop_on_finish)
        return CoreDriver(self._whole, self.deployment.cost, core)

    def _clock(self, time_s: float) -> float:
        """``time_s`` (the workload's absolute clock) on this replica's clock."""
        return time_s - self._origin_s if self._origin_s != 0.0 else time_s

    def send(self, position: int, absolute_arrival_s: float) -> int:
        """Send the workload's request at arrival position ``position``, arriving at
        ``absolute_arrival_s`` (the input's clock); returns its index in the core."""
        if self._driver is None:
            self._driver = self._start(absolute_arrival_s)
        core, whole = self._driver.core, self._whole
        k = len(self._rows)
        if k == len(core.arrival):  # more than the share it was sized for: half as much room again
            core = _with_room(core, k, min(len(whole.order), k + max(1, k // 2)), self._fills)
            self._driver.core = core
        core.arrival[k] = self._clock(absolute_arrival_s)
        core.prompt[k] = whole.table.prompt_tokens[whole.order[position]]
        core.output[k] = whole.table.output_tokens[whole.order[position]]
        if len(core.priority):
            core.priority[k] = whole.table.priority[whole.order[position]]
        if self._key_arrays is not None:
            shared_tokens, shared_stream, tail_stream = self._key_arrays
            core.shared_tokens[k] = shared_tokens[position]
            core.shared_stream[k] = shared_stream[position]
            core.tail_stream[k] = tail_stream[position]
            core.private[k] = shared_stream[position] < 0
        self._rows.append(position)
        # the requests this core can expect: its share of the workload so far, over all of it
        self._driver.expected_requests = max(k + 1, round((k + 1) * len(whole.order) / (position + 1)))
        return k

    def advance_to(self, time_s: float) -> None:
        """Run the steps that start before ``time_s`` [s, the workload's clock] with the
        requests sent so far (``math.inf``: to the end; no more will be sent)."""
        if self._driver is None:
            return
        core = self._driver.core
        horizon = math.inf if time_s == math.inf else self._clock(time_s)
        n = core.n
        idle = len(self._rows) == n[cs.N_KNOWN] and n[cs.N_DONE] >= n[cs.N_KNOWN] and n[cs.N_FINISHING] == 0
        if horizon != math.inf and (core.t[cs.T_NOW] >= horizon or idle):
            return  # the core would stop at once (core_loop.run_steps), its state unchanged
        self._driver.make_known(len(self._rows), horizon)
        self._driver.advance()

    def load(self, time_s: float) -> ReplicaLoad:
        """The counts a router sees at ``time_s`` (after :meth:`advance_to` it)."""
        if self._driver is None:
            return ReplicaLoad(0, 0, 0.0, 0)
        core = self._driver.core
        n = core.n.tolist()
        num_blocks = core.cfg_num_blocks
        # every step but the last ended before time_s; the last one's finishes come at its end
        finished = n[cs.N_DONE]
        events = n[cs.N_EVENT_ROWS]
        if events and core.t[cs.T_NOW] > self._clock(time_s):
            last = core.event_header[events - 1]
            if last[0] == n[cs.N_STEPS] - 1:
                finished -= int(last[3])
        return ReplicaLoad(
            num_waiting=n[cs.N_WAITING],
            num_running=n[cs.N_RUNNING],
            kv_used_fraction=(num_blocks - n[cs.N_FREE]) / num_blocks if num_blocks else 0.0,
            num_in_flight=len(self._rows) - finished,
        )

    def result(self, table: RequestTable) -> SimResult | None:
        """The run (the simulation of the requests sent alone), or ``None`` if none was sent.
        ``table``: the workload's request table (input order), with the arrivals they were sent at."""
        if self._driver is None:
            return None
        self._driver.core.n[cs.N_STOP_ON_FINISH] = 0  # nothing more will be sent: run to the end
        self.advance_to(math.inf)
        whole = self._whole
        sent = whole.order[np.asarray(self._rows, dtype=np.int64)]  # input positions, arrival order
        rows = np.sort(sent)  # the share in input order, as simulate() would be given it ...
        order = np.searchsorted(rows, sent)  # ... and its arrival order
        engine, _, num_blocks, _ = self.deployment
        core = _trimmed(self._driver.core, len(rows), self._fills)
        inputs = CoreInputs(table.subset(rows), order, self._origin_s, core.arrival, engine, num_blocks, None)
        record = core_record(inputs, core)
        return SimResult(
            engine=engine, num_kv_blocks=num_blocks, mode="fast", time_origin_s=record.time_origin_s, _record=record
        )


def _with_room(core: cs.CoreState, count: int, size: int, fills: dict[str, Any]) -> cs.CoreState:
    """``core`` with its per-request arrays (``fills``: each one's unsent value) holding
    ``size`` requests, the first ``count`` kept, and its waiting queue room for as many: the
    FCFS ring laid out again from its head, the priority heap kept as it is."""
    room: dict[str, Any] = {}
    for name, fill in fills.items():
        values = getattr(core, name)
        room[name] = np.full(size, fill, dtype=values.dtype)
        room[name][:count] = values[:count]
    waiting = np.zeros(size + 1, dtype=core.waiting.dtype)
    n = core.n
    if core.cfg_priority:  # a heap in waiting[:n[N_HEAP]]
        waiting[: n[cs.N_HEAP]] = core.waiting[: n[cs.N_HEAP]]
    else:  # a ring from n[N_WAIT_HEAD]
        queued = (n[cs.N_WAIT_HEAD] + np.arange(n[cs.N_WAITING])) % len(core.waiting)
        waiting[: n[cs.N_WAITING]] = core.waiting[queued]
        n[cs.N_WAIT_HEAD] = 0
    return core._replace(**room, waiting=waiting)


def _trimmed(core: cs.CoreState, count: int, names: Iterable[str]) -> cs.CoreState:
    """``core`` with its per-request arrays (``names``) cut to the replica's ``count`` requests."""
    return core._replace(**{name: getattr(core, name)[:count] for name in names})
