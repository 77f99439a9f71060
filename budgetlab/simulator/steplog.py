"""The step log: one dict per executed step, expanded from the columnar record on demand.

:meth:`SimResult.step_log() <budgetlab.simulator.SimResult.step_log>` returns a
:class:`StepLog`, a read-only sequence over the :class:`~budgetlab.simulator.record.RunRecord`:
taking it costs nothing, ``log[i]`` builds step ``i``'s dict, iterating builds them batch by
batch (a few thousand steps at a time, with NumPy conversions and shared tuples, about twice
as fast as building them one by one), and ``len``, ``==`` and :meth:`StepLog.chunks` /
:meth:`StepLog.events` work on the arrays without building any dict. A step log of millions of
chunks therefore costs no memory until it is read, and only what is read.

Each dict has the keys of :data:`STEP_LOG_KEYS` (see :meth:`SimResult.step_log`). Two step
logs are equal when their steps are, as lists of those dicts would be; a step log also equals a
list holding the same dicts.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from typing import Any, overload

import numpy as np
import pandas as pd

from budgetlab.simulator.record import RunRecord
from budgetlab.simulator.state import EVENT_KINDS, STEP_KINDS

__all__ = ["STEP_LOG_KEYS", "StepLog"]

#: Keys of every step's dict, in order.
STEP_LOG_KEYS = ("start_at_s", "scheduled", "start", "preempted", "first_token", "finished")
#: Normal steps turned into dicts per batch (bounded by chunks too) [steps].
_BATCH_STEPS = 4096
_BATCH_CHUNKS = 65536
_KIND_NAMES = np.array(STEP_KINDS, dtype=object)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while one batch of dicts is built (its passes over
    the growing heap would otherwise take more time than the building itself)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class StepLog(Sequence[dict[str, Any]]):
    """One dict per executed step, in order (see :meth:`SimResult.step_log`), built on demand.

    A read-only view of a simulation's record: ``len(log)``, ``log[i]`` (negative ``i`` too),
    ``log[a:b]`` (a list of dicts), iteration, and ``==`` with another step log or a list of
    dicts. ``list(log)`` makes a plain list. The dicts are new on every access (changing one
    changes nothing in the log). :meth:`chunks` and :meth:`events` give the same content as
    tables, without any dict.
    """

    def __init__(self, record: RunRecord, engine: Any = None) -> None:
        self._record = record
        self._engine = engine  # the simulated engine: its CUDA graphs dispatch the steps

    # ---------------------------------------------------------------------------------------
    # Index (global step number -> where the step is recorded)

    @cached_property
    def _ids(self) -> list[Any]:
        """Request ids in arrival order, as Python values."""
        return self._record.ids.tolist()

    @cached_property
    def _event_offsets(self) -> np.ndarray:
        """Where each eventful normal step's requests start in ``event_requests`` (and the end)."""
        counts = self._record.event_header[:, 1:].sum(axis=1)
        return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)

    def __len__(self) -> int:
        return self._record.num_steps

    # ---------------------------------------------------------------------------------------
    # Building dicts

    def _normal_steps(self, first: int, stop: int) -> Iterator[dict[str, Any]]:
        """The dicts of normal steps ``first .. stop − 1``, built in batches."""
        record = self._record
        ends = record.step_end
        while first < stop:
            begin = int(ends[first - 1]) if first else 0
            last = min(stop, first + _BATCH_STEPS, int(np.searchsorted(ends, begin + _BATCH_CHUNKS, side="left")) + 1)
            yield from self._normal_batch(first, max(last, first + 1), begin)
            first = max(last, first + 1)

    def _normal_batch(self, first: int, stop: int, begin: int) -> list[dict[str, Any]]:
        """The dicts of normal steps ``first .. stop − 1``, whose chunks start at ``begin``."""
        with _collector_paused():
            return self._build_normal(first, stop, begin)

    def _build_normal(self, first: int, stop: int, begin: int) -> list[dict[str, Any]]:
        record = self._record
        ids = self._ids
        end = int(record.step_end[stop - 1])
        requests = record.chunk_request[begin:end].tolist()
        scheduled = list(
            zip(
                [ids[i] for i in requests],
                record.chunk_tokens[begin:end].tolist(),
                _KIND_NAMES[record.chunk_kind[begin:end]].tolist(),
            )
        )
        starts = record.chunk_start[begin:end].tolist()
        events = self._events_of(first, stop)
        step_starts = record.columns["start_at_s"][first:stop].tolist()
        ends = (record.step_end[first:stop] - begin).tolist()
        out = []
        lo = 0
        for j, (start_at, hi) in enumerate(zip(step_starts, ends), start=first):
            preempted, first_token, finished = events.get(j, ((), (), ()))
            out.append(
                {
                    "start_at_s": start_at,
                    "scheduled": scheduled[lo:hi],
                    "start": starts[lo:hi],
                    "preempted": list(preempted),
                    "first_token": list(first_token),
                    "finished": list(finished),
                }
            )
            lo = hi
        return out

    def _events_of(self, first: int, stop: int) -> dict[int, tuple[list[Any], list[Any], list[Any]]]:
        """The events of normal steps ``first .. stop − 1`` that have some, by step."""
        record = self._record
        header = record.event_header
        lo, hi = np.searchsorted(header[:, 0], [first, stop], side="left").tolist()
        if lo == hi:
            return {}
        ids = self._ids
        offsets = self._event_offsets
        who = [ids[i] for i in record.event_requests[offsets[lo] : offsets[hi]].tolist()]
        out: dict[int, tuple[list[Any], list[Any], list[Any]]] = {}
        at = 0
        for step, num_preempted, num_first, num_finished in header[lo:hi].tolist():
            a, b, c = at + num_preempted, at + num_preempted + num_first, at + num_preempted + num_first + num_finished
            out[step] = (who[at:a], who[a:b], who[b:c])
            at = c
        return out

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self._normal_steps(0, self._record.num_steps)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        size = len(self)
        i = int(index)
        if i < 0:
            i += size
        if not 0 <= i < size:
            raise IndexError(f"step {index} out of range: the log has {size:,} steps")
        return self._normal_batch(i, i + 1, int(self._record.step_end[i - 1]) if i else 0)[0]

    # ---------------------------------------------------------------------------------------
    # Tables and comparison

    def _chunk_arrays(self) -> tuple[np.ndarray, ...]:
        """Every scheduled chunk in log order: (step, request index, tokens, kind, start)."""
        record = self._record
        step = np.repeat(np.arange(record.num_steps, dtype=np.int64), np.diff(record.step_end, prepend=0))
        return step, record.chunk_request, record.chunk_tokens, record.chunk_kind, record.chunk_start

    def _event_arrays(self) -> tuple[np.ndarray, ...]:
        """Every event in log order: (step, event kind, request index)."""
        record = self._record
        header = record.event_header
        counts = header[:, 1:].reshape(-1)
        kinds = np.repeat(np.tile(np.arange(len(EVENT_KINDS)), len(header)), counts)
        steps = np.repeat(np.repeat(header[:, 0].astype(np.int64), len(EVENT_KINDS)), counts)
        return steps, kinds, record.event_requests.astype(np.int64)

    def chunks(self, cost: Any = None) -> pd.DataFrame:
        """Every scheduled chunk, in log order, as a table (no dict built).

        Parameters
        ----------
        cost : CalibratedCost, optional
            With a cost that has an engine's graphs recorded, two more columns: its step's
            CUDA-graph ``mode`` and ``padded_tokens`` (:meth:`cudagraph_modes`).

        Returns
        -------
        pandas.DataFrame
            ``step`` (its step's index in the log), ``request_id``, ``num_tokens`` [tokens],
            ``kind`` (``"prefill"``, ``"recompute"`` or ``"decode"``) and ``start`` (the
            request's computed tokens before the chunk [tokens]): the log's ``scheduled`` and
            ``start``, flat.
        """
        step, request, tokens, kind, start = self._chunk_arrays()
        table = pd.DataFrame(
            {
                "step": step,
                "request_id": self._record.ids[request],
                "num_tokens": tokens,
                "kind": pd.Categorical.from_codes(kind, categories=list(STEP_KINDS)),
                "start": start,
            }
        )
        if cost is None:
            return table
        modes = self.cudagraph_modes(cost)
        return table.assign(mode=modes["mode"].array.take(step), padded_tokens=modes["padded_tokens"].to_numpy()[step])

    def events(self) -> pd.DataFrame:
        """Every event (the log's ``preempted``, ``first_token`` and ``finished``), in log order.

        Returns
        -------
        pandas.DataFrame
            ``step`` (its step's index in the log), ``event`` (one of ``"preempted"``,
            ``"first_token"``, ``"finished"``) and ``request_id``.
        """
        step, kind, request = self._event_arrays()
        return pd.DataFrame(
            {
                "step": step,
                "event": pd.Categorical.from_codes(kind, categories=list(EVENT_KINDS)),
                "request_id": self._record.ids[request],
            }
        )

    def _step_compositions(self) -> tuple[np.ndarray, np.ndarray]:
        """Per step, in log order: tokens scheduled and whether it is a uniform decode (every
        chunk one token over a cached context, as vLLM tells a decode batch)."""
        record = self._record
        num_normal = record.num_steps
        chunk_step = np.repeat(np.arange(num_normal), np.diff(record.step_end, prepend=0))
        tokens = np.bincount(chunk_step, weights=record.chunk_tokens, minlength=num_normal)
        other = (record.chunk_tokens != 1) | (record.chunk_start <= 0)
        uniform = (np.bincount(chunk_step, weights=other, minlength=num_normal) == 0) & (tokens > 0)
        return tokens.astype(np.int64), uniform

    def cudagraph_modes(self, cost: Any) -> pd.DataFrame:
        """Every step's CUDA-graph mode, as vLLM 0.33 dispatches it, as a table (no dict built).

        Computed on demand from the steps' compositions, so a simulation pays nothing for it.

        Parameters
        ----------
        cost : CalibratedCost
            A cost with an engine's graphs recorded (``CalibratedCost.typical(hw, model,
            engine=engine)`` or ``cost.for_engine(engine)``), normally the one simulated: its
            ``cudagraph_modes`` dispatches the steps, with the simulated engine's graphs
            (``cost.graphs_for(engine)``, as :func:`budgetlab.simulate` ran them).

        Returns
        -------
        pandas.DataFrame
            One row per step in log order: ``step``, ``num_tokens`` [tokens], ``uniform_decode``,
            ``mode`` (``"FULL"``, ``"PIECEWISE"`` or ``"NONE"``; missing for a pipelined
            iteration that schedules nothing) and ``padded_tokens`` (the captured size it runs
            on, ``num_tokens`` under NONE, 0 for an empty iteration) [tokens].
        """
        graphs_for = getattr(cost, "graphs_for", None)
        if self._engine is not None and callable(graphs_for):  # the ladder of the engine simulated
            cost = graphs_for(self._engine)
        tokens, uniform = self._step_compositions()
        ran = tokens > 0
        modes = np.full(len(tokens), None, dtype=object)
        padded = np.zeros(len(tokens), dtype=np.int64)
        modes[ran], padded[ran] = cost.cudagraph_modes(tokens[ran], uniform[ran])
        return pd.DataFrame(
            {
                "step": np.arange(len(tokens), dtype=np.int64),
                "num_tokens": tokens,
                "uniform_decode": uniform,
                "mode": pd.Categorical(modes, categories=["FULL", "PIECEWISE", "NONE"]),
                "padded_tokens": padded,
            }
        )

    def _same_as(self, other: StepLog) -> bool:
        if len(self) != len(other):
            return False
        if not np.array_equal(self._record.columns["start_at_s"], other._record.columns["start_at_s"]):
            return False
        same_ids = np.array_equal(self._record.ids, other._record.ids)
        for mine, theirs, request_at in (
            (self._chunk_arrays(), other._chunk_arrays(), 1),
            (self._event_arrays(), other._event_arrays(), 2),
        ):
            for column, (a, b) in enumerate(zip(mine, theirs)):
                if column == request_at and not same_ids:
                    a, b = self._record.ids[a], other._record.ids[b]
                if not np.array_equal(a, b):
                    return False
        return True

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepLog):
            return self._same_as(other)
        if isinstance(other, list):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StepLog({len(self):,} steps; log[i] or list(log) for the dicts, log.chunks() for a table)"
