"""The compressed, columnar record of a run, and the tables it expands into.

:func:`build_trace` turns a finished :class:`~budgetlab.simulator.state.SimState` into a
:class:`Trace`: per request, the run's NumPy buffers (arrival order, with the permutation to
the input order); the normally scheduled steps and their chunks and events as flat arrays;
and the jumped decode-only runs still compressed (:class:`Runs`). Nothing in it is one Python
object per request or per step. :meth:`Trace.requests_frame` (:data:`RESULT_COLUMNS`),
:meth:`Trace.steps_frame` (:data:`STEP_COLUMNS`) and :meth:`Trace.summary` are built from the
arrays on demand (the summary without the per-request frame); the step log is
:class:`~budgetlab.simulator.steplog.StepLog`, a lazy view. A jumped run's steps are rebuilt
from its step boundaries, its decoders and their computed tokens before it.

Times are relative to the trace's origin ``time_origin_s`` (its first arrival, see
:mod:`budgetlab.simulator.state`).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from budgetlab.metrics import summarize
from budgetlab.simulator.fast import block_demand
from budgetlab.simulator.state import RUN_HEADER_DTYPE, RUN_HEADER_FIELDS, RequestArrays, SimState

if TYPE_CHECKING:
    from budgetlab.simulator.inputs import RequestTable

__all__ = ["RESULT_COLUMNS", "STEP_COLUMNS", "Runs", "Trace", "build_trace"]

#: Columns of :attr:`SimResult.requests` (one row per request).
RESULT_COLUMNS = (
    "request_id",
    "arrival_at_s",
    "first_token_at_s",
    "finished_at_s",
    "ttft_s",
    "e2e_s",
    "mean_itl_s",
    "max_itl_s",
    "num_preemptions",
    "queue_s",
    "prompt_tokens",
    "output_tokens",
    "prefix_hit_tokens",
    "recompute_hit_tokens",
)
#: Columns of :attr:`SimResult.steps` (one row per executed step).
STEP_COLUMNS = (
    "start_at_s",
    "duration_s",
    "num_decode_tokens",
    "num_prefill_tokens",
    "num_running",
    "num_waiting",
    "num_free_kv_blocks",
    "num_preemptions",
    "num_cached_tokens",
    "forward_pass",
)
#: The step columns recorded step by step (``forward_pass`` is derived from the chunks).
RECORDED_STEP_COLUMNS = STEP_COLUMNS[:-1]


def _view(buffer: array, dtype: type) -> np.ndarray:
    """A NumPy array over an ``array.array`` (empty buffers included)."""
    if len(buffer) == 0:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(buffer, dtype=dtype)


def _offsets(counts: np.ndarray) -> np.ndarray:
    """Where each segment of the given lengths starts, plus the total at the end."""
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Runs:
    """Every jumped run of decode-only steps, as NumPy arrays (fields of
    :class:`~budgetlab.simulator.state.RunRecord`)."""

    steps_before: np.ndarray
    num_steps: np.ndarray
    num_decodes: np.ndarray
    free_blocks_before: np.ndarray
    num_waiting_before: np.ndarray
    next_arrival: np.ndarray
    num_finished: np.ndarray
    step_times: np.ndarray
    durations: np.ndarray
    members: np.ndarray
    computed_before: np.ndarray
    finished: np.ndarray

    @cached_property
    def time_offsets(self) -> np.ndarray:
        """Where each run's ``k + 1`` step boundaries start in ``step_times``."""
        return _offsets(self.num_steps + 1)[:-1]

    @cached_property
    def step_offsets(self) -> np.ndarray:
        """Where each run's ``k`` steps start in ``durations`` (and the total at the end)."""
        return _offsets(self.num_steps)

    @cached_property
    def member_offsets(self) -> np.ndarray:
        return _offsets(self.num_decodes)

    @cached_property
    def finished_offsets(self) -> np.ndarray:
        return _offsets(self.num_finished)

    def starts(self) -> np.ndarray:
        """Start of every run step, run after run [s]."""
        keep = np.ones(len(self.step_times), dtype=bool)
        keep[self.time_offsets + self.num_steps] = False
        return self.step_times[keep]

    def fold_later_gaps(self, max_gap_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gaps of steps 2..k of every run (values [s], multiplicities); updates ``max_gap_s``.

        Each is ``times[i] − times[i − 1]``, the same float the reference computes as
        ``end − last token``, shared by the run's ``n`` decoders. Each run's largest gap is
        folded into its decoders' longest gap (in place).
        """
        diffs = self.step_times[1:] - self.step_times[:-1]
        keep = np.ones(len(diffs), dtype=bool)
        keep[self.time_offsets] = False  # a run's first step: taken per request when it ran
        keep[self.time_offsets[1:] - 1] = False  # across two runs
        later = diffs[keep]
        weights = np.repeat(self.num_decodes, self.num_steps - 1)
        multi = self.num_steps > 1
        if multi.any():
            seg = np.concatenate(([0], np.cumsum(self.num_steps[multi] - 1)[:-1]))
            run_max = np.maximum.reduceat(later, seg)
            members = self.members[np.repeat(multi, self.num_decodes)]
            np.maximum.at(max_gap_s, members, np.repeat(run_max, self.num_decodes[multi]))
        return later, weights

    def free_blocks(self, block_size: int) -> np.ndarray:
        """Free KV blocks after scheduling every run step [blocks] (see
        :func:`~budgetlab.simulator.fast.block_demand`)."""
        num_runs = len(self.num_steps)
        total = int(self.step_offsets[-1])
        step_run = np.repeat(np.arange(num_runs), self.num_steps)
        s_minus_1 = np.arange(total, dtype=np.int64) - self.step_offsets[:-1][step_run]
        if num_runs * block_size <= 4_000_000:
            member_run = np.repeat(np.arange(num_runs), self.num_decodes)
            offsets = (-self.computed_before) % block_size
            counts = np.bincount(member_run * block_size + offsets, minlength=num_runs * block_size)
            count_le = np.cumsum(counts.reshape(num_runs, block_size), axis=1)
            q, j = np.divmod(s_minus_1, block_size)
            demand = self.num_decodes[step_run] * q + count_le[step_run, j]
        elif num_runs:  # huge blocks: one run at a time
            m_off = self.member_offsets
            demand = np.concatenate(
                [
                    block_demand(self.computed_before[m_off[i] : m_off[i + 1]], int(k), block_size)
                    for i, k in enumerate(self.num_steps.tolist())
                ]
            )
        else:
            demand = np.empty(0, dtype=np.int64)
        return self.free_blocks_before[step_run] - demand


@dataclass(frozen=True, eq=False)
class Trace:
    """Compressed, columnar record of a simulation; expands into the tables, the step log and
    the summary on demand.

    Per request (arrival order): ``ids``, ``arrival_at_s`` (since ``time_origin_s``) and ``req``
    (the run's buffers: token times, counts); ``order`` maps them to the input order of
    ``table``. Per normally scheduled step: ``columns`` (:data:`STEP_COLUMNS`), the chunks
    (``chunk_*`` flat, step ``i``'s ending at ``step_end[i]``) and the events (``event_header``
    rows of step, preempted, first-token and finished counts; ``event_requests``), see
    :class:`~budgetlab.simulator.state.StepRecord`. The jumped runs are :class:`Runs`. The
    inter-token gaps are a multiset (``gap_values_s`` with ``gap_weights``). Times [s] are
    relative to ``time_origin_s``.
    """

    table: RequestTable
    order: np.ndarray
    ids: np.ndarray
    time_origin_s: float
    arrival_at_s: np.ndarray
    req: RequestArrays
    block_size: int
    num_kv_blocks: int
    columns: dict[str, np.ndarray]
    chunk_request: np.ndarray
    chunk_tokens: np.ndarray
    chunk_kind: np.ndarray
    chunk_start: np.ndarray
    step_end: np.ndarray
    event_header: np.ndarray
    event_requests: np.ndarray
    runs: Runs
    num_steps: int
    gap_values_s: np.ndarray
    gap_weights: np.ndarray
    num_preemptions: int
    kv_peak_blocks: int
    num_query_tokens: int
    num_hit_tokens: int

    def positions(self) -> tuple[np.ndarray, np.ndarray]:
        """Global step number of every normal step and of every run step."""
        runs = self.runs
        num_normal = len(self.step_end)
        cum_k = runs.step_offsets
        runs_before = np.searchsorted(runs.steps_before, np.arange(num_normal), side="right")
        normal_pos = np.arange(num_normal, dtype=np.int64) + cum_k[runs_before]
        run_first = runs.steps_before + cum_k[:-1]
        total = int(cum_k[-1])
        within = np.arange(total, dtype=np.int64) - np.repeat(cum_k[:-1], runs.num_steps)
        run_pos = np.repeat(run_first, runs.num_steps) + within
        return normal_pos, run_pos

    def in_input_order(self, values: np.ndarray) -> np.ndarray:
        """A per-request array in arrival order, permuted to the input order."""
        out = np.empty_like(values)
        out[self.order] = values
        return out

    def requests_frame(self) -> pd.DataFrame:
        """The per-request table (:data:`RESULT_COLUMNS`), in input order."""
        req = self.req
        table = self.table
        arrival = self.in_input_order(self.arrival_at_s)
        first = self.in_input_order(req.first_token_at_s)
        finished = self.in_input_order(req.finished_at_s)
        output = table.output_tokens
        many = output > 1
        mean_itl = np.full(len(arrival), np.nan)
        np.divide(finished - first, output - 1, out=mean_itl, where=many)
        max_itl = np.where(many, self.in_input_order(req.max_gap_s), np.nan)
        return pd.DataFrame(
            {
                "request_id": table.ids,
                "arrival_at_s": arrival,
                "first_token_at_s": first,
                "finished_at_s": finished,
                "ttft_s": first - arrival,
                "e2e_s": finished - arrival,
                "mean_itl_s": mean_itl,
                "max_itl_s": max_itl,
                "num_preemptions": self.in_input_order(req.num_preemptions),
                "queue_s": self.in_input_order(req.first_scheduled_at_s) - arrival,
                "prompt_tokens": table.prompt_tokens,
                "output_tokens": output,
                "prefix_hit_tokens": self.in_input_order(req.prefix_hit_tokens),
                "recompute_hit_tokens": self.in_input_order(req.recompute_hit_tokens),
            },
            columns=list(RESULT_COLUMNS),
        )

    def step_starts(self) -> np.ndarray:
        """Start of every executed step, in order [s]."""
        normal_pos, run_pos = self.positions()
        starts = np.empty(len(normal_pos) + len(run_pos))
        starts[normal_pos] = self.columns["start_at_s"]
        starts[run_pos] = self.runs.starts()
        return starts

    def steps_frame(self) -> pd.DataFrame:
        """The per-step table (:data:`STEP_COLUMNS`), one row per executed step."""
        runs = self.runs
        normal_pos, run_pos = self.positions()
        total = len(normal_pos) + len(run_pos)
        data: dict[str, np.ndarray] = {}
        for name in RECORDED_STEP_COLUMNS:
            dtype = np.float64 if name in ("start_at_s", "duration_s") else np.int64
            column = np.empty(total, dtype=dtype)
            column[normal_pos] = self.columns[name]
            data[name] = column
        forward = np.ones(total, dtype=bool)
        forward[normal_pos] = np.diff(self.step_end, prepend=0) > 0
        data["forward_pass"] = forward
        if len(run_pos):
            starts = runs.starts()
            step_run = np.repeat(np.arange(len(runs.num_steps)), runs.num_steps)
            n = runs.num_decodes[step_run]
            data["start_at_s"][run_pos] = starts
            data["duration_s"][run_pos] = runs.durations
            data["num_decode_tokens"][run_pos] = n
            data["num_prefill_tokens"][run_pos] = 0
            data["num_running"][run_pos] = n
            data["num_waiting"][run_pos] = runs.num_waiting_before[step_run] + (
                np.searchsorted(self.arrival_at_s, starts, side="right") - runs.next_arrival[step_run]
            )
            data["num_free_kv_blocks"][run_pos] = runs.free_blocks(self.block_size)
            data["num_preemptions"][run_pos] = 0
            data["num_cached_tokens"][run_pos] = 0
        return pd.DataFrame(data, columns=list(STEP_COLUMNS))

    def summary(self) -> dict[str, float | int]:
        """Headline numbers (:func:`budgetlab.metrics.summarize`), from the per-request arrays
        (in input order, so every sum is taken in the order it always was)."""
        req = self.req
        table = self.table
        numbers = summarize(
            arrival_at_s=self.in_input_order(self.arrival_at_s),
            first_token_at_s=self.in_input_order(req.first_token_at_s),
            finished_at_s=self.in_input_order(req.finished_at_s),
            output_tokens=table.output_tokens,
            prompt_tokens=table.prompt_tokens,
            gap_values_s=self.gap_values_s,
            gap_weights=self.gap_weights,
            num_preemptions=self.num_preemptions,
            kv_peak_blocks=self.kv_peak_blocks,
            num_kv_blocks=self.num_kv_blocks,
            num_steps=self.num_steps,
        )
        numbers["num_forward_passes"] = self.num_steps - int(np.count_nonzero(np.diff(self.step_end, prepend=0) == 0))
        numbers["prefix_query_tokens"] = self.num_query_tokens
        numbers["prefix_hit_tokens"] = self.num_hit_tokens
        numbers["prefix_hit_rate"] = self.num_hit_tokens / self.num_query_tokens if self.num_query_tokens else math.nan
        return numbers


def _runs_of(state: SimState) -> Runs:
    record = state.runs
    if len(record.header):
        header = np.frombuffer(record.header, dtype=RUN_HEADER_DTYPE)
    else:
        header = np.empty(0, dtype=RUN_HEADER_DTYPE)
    runs = Runs(
        **{name: header[name] for name in RUN_HEADER_FIELDS},
        step_times=_view(record.step_times, np.float64),
        durations=_view(record.durations, np.float64),
        members=_view(record.members, np.int64),
        computed_before=_view(record.computed_before, np.int64),
        finished=_view(record.finished, np.int64),
    )
    durations = runs.durations
    if len(durations) and not (durations.min() > 0.0 and np.isfinite(durations).all()):
        bad = durations[~((durations > 0) & np.isfinite(durations))][0]
        raise ValueError(f"the cost model returned {bad!r} s for a decode-only step; step times must be finite and > 0")
    return runs


def _gaps_of(state: SimState, runs: Runs) -> tuple[np.ndarray, np.ndarray]:
    """Every inter-token gap as (values [s], multiplicities); folds the runs' later gaps into
    ``state``'s longest gaps."""
    gaps = state.gaps
    values = [_view(gaps.single, np.float64), _view(gaps.common_values, np.float64)]
    weights = [np.ones(len(gaps.single), dtype=np.int64), _view(gaps.common_counts, np.int64)]
    if len(runs.num_steps):
        later, later_weights = runs.fold_later_gaps(state.req_np.max_gap_s)
        values.append(later)
        weights.append(later_weights)
    return np.concatenate(values), np.concatenate(weights)


def build_trace(state: SimState) -> Trace:
    """The trace of a finished run (folds the runs' later gaps into ``state``'s longest gaps)."""
    runs = _runs_of(state)
    gap_values, gap_weights = _gaps_of(state, runs)
    steps = state.steps
    return Trace(
        table=state.table,
        order=state.order,
        ids=state.ids,
        time_origin_s=state.time_origin_s,
        arrival_at_s=state.arrival_at_s,
        req=state.req_np,
        block_size=state.block_size,
        num_kv_blocks=state.kv.num_blocks,
        columns={
            name: _view(getattr(steps, name), np.float64 if name.endswith("_s") else np.int64)
            for name in RECORDED_STEP_COLUMNS
        },
        chunk_request=_view(steps.chunk_request, np.int64),
        chunk_tokens=_view(steps.chunk_tokens, np.int64),
        chunk_kind=_view(steps.chunk_kind, np.int8),
        chunk_start=_view(steps.chunk_start, np.int64),
        step_end=_view(steps.step_end, np.int64),
        event_header=_view(steps.event_header, np.int64).reshape(-1, 4),
        event_requests=_view(steps.event_requests, np.int64),
        runs=runs,
        num_steps=state.num_steps,
        gap_values_s=gap_values,
        gap_weights=gap_weights,
        num_preemptions=state.num_preemptions,
        kv_peak_blocks=state.kv.peak_used_blocks,
        num_query_tokens=state.num_query_tokens,
        num_hit_tokens=state.num_hit_tokens,
    )
