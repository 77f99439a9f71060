"""The step log: one dict per executed step, expanded from the columnar trace on demand.

:meth:`SimResult.step_log() <budgetlab.simulator.SimResult.step_log>` returns a
:class:`StepLog`, a read-only sequence over the :class:`~budgetlab.simulator.trace.Trace`:
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

from budgetlab.simulator.state import DECODE, EVENT_KINDS, STEP_KINDS
from budgetlab.simulator.trace import Trace

__all__ = ["STEP_LOG_KEYS", "StepLog"]

#: Keys of every step's dict, in order.
STEP_LOG_KEYS = ("start_at_s", "scheduled", "start", "preempted", "first_token", "finished")
#: Normal steps turned into dicts per batch (bounded by chunks too) [steps].
_BATCH_STEPS = 4096
_BATCH_CHUNKS = 65536
_FINISHED = EVENT_KINDS.index("finished")
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

    A read-only view of a simulation's trace: ``len(log)``, ``log[i]`` (negative ``i`` too),
    ``log[a:b]`` (a list of dicts), iteration, and ``==`` with another step log or a list of
    dicts. ``list(log)`` makes a plain list. The dicts are new on every access (changing one
    changes nothing in the log). :meth:`chunks` and :meth:`events` give the same content as
    tables, without any dict.
    """

    def __init__(self, trace: Trace, engine: Any = None) -> None:
        self._trace = trace
        self._engine = engine  # the simulated engine: its CUDA graphs dispatch the steps

    # ---------------------------------------------------------------------------------------
    # Index (global step number -> where the step is recorded)

    @cached_property
    def _index(self) -> tuple[np.ndarray, np.ndarray]:
        """``(normal_pos, run_pos)``: the global step number of every normally scheduled step
        and of every run step."""
        return self._trace.positions()

    @cached_property
    def _where(self) -> np.ndarray:
        """Per global step: ``j >= 0`` for normal step ``j``, ``-1 − s`` for flat run step ``s``."""
        normal_pos, run_pos = self._index
        where = np.empty(len(normal_pos) + len(run_pos), dtype=np.int64)
        where[normal_pos] = np.arange(len(normal_pos))
        where[run_pos] = -1 - np.arange(len(run_pos))
        return where

    @cached_property
    def _ids(self) -> list[Any]:
        """Request ids in arrival order, as Python values."""
        return self._trace.ids.tolist()

    @cached_property
    def _event_offsets(self) -> np.ndarray:
        """Where each eventful normal step's requests start in ``event_requests`` (and the end)."""
        counts = self._trace.event_header[:, 1:].sum(axis=1)
        return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)

    def __len__(self) -> int:
        return self._trace.num_steps

    # ---------------------------------------------------------------------------------------
    # Building dicts

    def _normal_steps(self, first: int, stop: int) -> Iterator[dict[str, Any]]:
        """The dicts of normal steps ``first .. stop − 1``, built in batches."""
        trace = self._trace
        ends = trace.step_end
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
        trace = self._trace
        ids = self._ids
        end = int(trace.step_end[stop - 1])
        requests = trace.chunk_request[begin:end].tolist()
        scheduled = list(
            zip(
                [ids[i] for i in requests],
                trace.chunk_tokens[begin:end].tolist(),
                _KIND_NAMES[trace.chunk_kind[begin:end]].tolist(),
            )
        )
        starts = trace.chunk_start[begin:end].tolist()
        events = self._events_of(first, stop)
        step_starts = trace.columns["start_at_s"][first:stop].tolist()
        ends = (trace.step_end[first:stop] - begin).tolist()
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
        trace = self._trace
        header = trace.event_header
        lo, hi = np.searchsorted(header[:, 0], [first, stop], side="left").tolist()
        if lo == hi:
            return {}
        ids = self._ids
        offsets = self._event_offsets
        who = [ids[i] for i in trace.event_requests[offsets[lo] : offsets[hi]].tolist()]
        out: dict[int, tuple[list[Any], list[Any], list[Any]]] = {}
        at = 0
        for step, num_preempted, num_first, num_finished in header[lo:hi].tolist():
            a, b, c = at + num_preempted, at + num_preempted + num_first, at + num_preempted + num_first + num_finished
            out[step] = (who[at:a], who[a:b], who[b:c])
            at = c
        return out

    def _run_steps(self, run: int, first: int, stop: int) -> Iterator[dict[str, Any]]:
        """The dicts of steps ``first .. stop − 1`` (0-based) of jumped run ``run``."""
        runs = self._trace.runs
        ids = self._ids
        m_lo, m_hi = int(runs.member_offsets[run]), int(runs.member_offsets[run + 1])
        scheduled = [(ids[i], 1, "decode") for i in runs.members[m_lo:m_hi].tolist()]
        before = runs.computed_before[m_lo:m_hi]
        k = int(runs.num_steps[run])
        starts = runs.step_times[int(runs.time_offsets[run]) :][:k].tolist()
        f_lo, f_hi = int(runs.finished_offsets[run]), int(runs.finished_offsets[run + 1])
        done = [ids[i] for i in runs.finished[f_lo:f_hi].tolist()]
        block = max(1, _BATCH_CHUNKS // max(1, m_hi - m_lo))
        for lo in range(first, stop, block):
            hi = min(stop, lo + block)
            with _collector_paused():
                positions = (before[None, :] + np.arange(lo, hi, dtype=np.int64)[:, None]).tolist()
                batch = [
                    {
                        "start_at_s": starts[s],
                        "scheduled": scheduled.copy(),
                        "start": start,
                        "preempted": [],
                        "first_token": [],
                        "finished": [],
                    }
                    for s, start in zip(range(lo, hi), positions)
                ]
                if hi == k:
                    batch[-1]["finished"] = done
            yield from batch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        runs = self._trace.runs
        normal = 0
        for run, (before, k) in enumerate(zip(runs.steps_before.tolist(), runs.num_steps.tolist())):
            yield from self._normal_steps(normal, before)
            normal = before
            yield from self._run_steps(run, 0, k)
        yield from self._normal_steps(normal, len(self._trace.step_end))

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
        where = int(self._where[i])
        if where >= 0:
            return self._normal_batch(where, where + 1, int(self._trace.step_end[where - 1]) if where else 0)[0]
        flat = -1 - where
        runs = self._trace.runs
        run = int(np.searchsorted(runs.step_offsets, flat, side="right")) - 1
        within = flat - int(runs.step_offsets[run])
        return next(self._run_steps(run, within, within + 1))

    # ---------------------------------------------------------------------------------------
    # Tables and comparison

    def _chunk_arrays(self) -> tuple[np.ndarray, ...]:
        """Every scheduled chunk in log order: (step, request index, tokens, kind, start)."""
        trace = self._trace
        runs = trace.runs
        normal_pos, run_pos = self._index
        normal_step = np.repeat(normal_pos, np.diff(trace.step_end, prepend=0))
        per_step = runs.num_decodes[np.repeat(np.arange(len(runs.num_steps)), runs.num_steps)]
        run_step = np.repeat(run_pos, per_step)
        # run chunks: for each run, its members repeated k times (step-major)
        sizes = runs.num_steps * runs.num_decodes
        run_of_chunk = np.repeat(np.arange(len(sizes)), sizes)
        run_begin = np.cumsum(sizes) - sizes
        chunk_in_run = np.arange(len(run_of_chunk), dtype=np.int64) - np.repeat(run_begin, sizes)
        n = runs.num_decodes[run_of_chunk]
        step_in_run, member = np.divmod(chunk_in_run, np.maximum(n, 1))
        member_index = runs.member_offsets[:-1][run_of_chunk] + member
        step = np.concatenate((normal_step, run_step))
        order = np.argsort(step, kind="stable")
        request = np.concatenate((trace.chunk_request, runs.members[member_index]))[order]
        tokens = np.concatenate((trace.chunk_tokens, np.ones(len(run_step), dtype=np.int64)))[order]
        kind = np.concatenate((trace.chunk_kind, np.full(len(run_step), DECODE, dtype=np.int8)))[order]
        start = np.concatenate((trace.chunk_start, runs.computed_before[member_index] + step_in_run))[order]
        return step[order], request, tokens, kind, start

    def _event_arrays(self) -> tuple[np.ndarray, ...]:
        """Every event in log order: (step, event kind, request index)."""
        trace = self._trace
        runs = trace.runs
        normal_pos, run_pos = self._index
        header = trace.event_header
        counts = header[:, 1:].reshape(-1)
        kinds = np.repeat(np.tile(np.arange(len(EVENT_KINDS)), len(header)), counts)
        steps = np.repeat(np.repeat(normal_pos[header[:, 0]], len(EVENT_KINDS)), counts)
        last_steps = run_pos[runs.step_offsets[1:] - 1] if len(run_pos) else np.empty(0, dtype=np.int64)
        run_steps = np.repeat(last_steps, runs.num_finished)
        step = np.concatenate((steps, run_steps))
        kind = np.concatenate((kinds, np.full(len(run_steps), _FINISHED, dtype=np.int64)))
        request = np.concatenate((trace.event_requests, runs.finished))
        order = np.lexsort((kind, step))  # stable: each list keeps its order
        return step[order], kind[order], request[order]

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
                "request_id": self._trace.ids[request],
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
                "request_id": self._trace.ids[request],
            }
        )

    def _step_compositions(self) -> tuple[np.ndarray, np.ndarray]:
        """Per step, in log order: tokens scheduled and whether it is a uniform decode (every
        chunk one token over a cached context, as vLLM tells a decode batch)."""
        trace = self._trace
        runs = trace.runs
        normal_pos, run_pos = self._index
        num_normal = len(trace.step_end)
        chunk_step = np.repeat(np.arange(num_normal), np.diff(trace.step_end, prepend=0))
        tokens = np.bincount(chunk_step, weights=trace.chunk_tokens, minlength=num_normal)
        other = (trace.chunk_tokens != 1) | (trace.chunk_start <= 0)
        uniform = (np.bincount(chunk_step, weights=other, minlength=num_normal) == 0) & (tokens > 0)
        step_tokens = np.empty(len(self), dtype=np.int64)
        step_uniform = np.empty(len(self), dtype=bool)
        step_tokens[normal_pos], step_uniform[normal_pos] = tokens.astype(np.int64), uniform
        run_tokens = np.repeat(runs.num_decodes, runs.num_steps)
        step_tokens[run_pos], step_uniform[run_pos] = run_tokens, run_tokens > 0
        return step_tokens, step_uniform

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
        if not np.array_equal(self._trace.step_starts(), other._trace.step_starts()):
            return False
        same_ids = np.array_equal(self._trace.ids, other._trace.ids)
        for mine, theirs, request_at in (
            (self._chunk_arrays(), other._chunk_arrays(), 1),
            (self._event_arrays(), other._event_arrays(), 2),
        ):
            for column, (a, b) in enumerate(zip(mine, theirs)):
                if column == request_at and not same_ids:
                    a, b = self._trace.ids[a], other._trace.ids[b]
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
