"""The columnar record of a run, and the tables it expands into.

A :class:`RunRecord` is what a run leaves, whichever way it ran: per request, its arrays (arrival
order, with the permutation to the input order); per step, its counts, start and duration
(:class:`StepColumns`: flat, or the compiled core's rows, one per step or decode-only run of
steps, expanded on first read); the chunks (:class:`ChunkLog`: flat, as the reference steps
record them, or the compiled core's chunk runs, expanded on first read); the events; the
inter-token gaps as a multiset. Nothing in it is one Python object per request or per step.
:meth:`RunRecord.requests_frame` (:data:`RESULT_COLUMNS`), :meth:`RunRecord.steps_frame`
(:data:`STEP_COLUMNS`) and :meth:`RunRecord.summary` are built from the arrays on demand (the
summary without the per-request frame or the per-step columns); the step log is
:class:`~budgetlab.simulator.steplog.StepLog`, a lazy view. :func:`build_record` makes one from
the reference steps' :class:`~budgetlab.simulator.state.SimState`,
:func:`budgetlab.simulator.compiled.core_record` from the compiled core's arrays.

Times are relative to the trace's origin ``time_origin_s`` (its first arrival, see
:func:`budgetlab.simulator.state.arrival_order`).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from budgetlab.metrics import GapSample, WeightedGaps, summarize
from budgetlab.simulator.state import RequestArrays, SimState

if TYPE_CHECKING:
    from budgetlab.simulator.inputs import RequestTable

__all__ = ["RESULT_COLUMNS", "STEP_COLUMNS", "StepColumns", "ChunkLog", "RunRecord", "build_record"]

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


class StepColumns:
    """Every step's recorded counts (:data:`RECORDED_STEP_COLUMNS`) and where its chunks end in
    the chunk log (``step_end``): given (the reference steps record them step by step), or
    expanded on first access (``expand``, a callable returning both: the compiled core records
    a run of decode-only steps as one row, :mod:`.core_steps`). ``num_empty_steps``: the steps
    that scheduled nothing (pipelined iterations), known without expanding."""

    def __init__(
        self,
        num_empty_steps: int,
        *,
        columns: dict[str, np.ndarray] | None = None,
        step_end: np.ndarray | None = None,
        expand: Callable[[], tuple[dict[str, np.ndarray], np.ndarray]] | None = None,
    ) -> None:
        self.num_empty_steps = num_empty_steps
        self._given = (columns, step_end) if columns is not None and step_end is not None else None
        self._expand = expand

    @cached_property
    def _arrays(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        if self._given is not None:
            return self._given
        assert self._expand is not None
        return self._expand()

    @property
    def columns(self) -> dict[str, np.ndarray]:
        return self._arrays[0]

    @property
    def step_end(self) -> np.ndarray:
        return self._arrays[1]


class ChunkLog:
    """Every scheduled chunk, flat in log order (step after step, each in scheduling order):
    ``request`` (arrival index), ``tokens``, ``kind`` (int8 codes of :data:`~.plan.STEP_KINDS`),
    ``start`` (its request's computed tokens before it); step ``i``'s end in them is
    :attr:`StepColumns.step_end` ``[i]``. Given flat (the reference steps record them so), or as
    the compiled core's chunk runs, expanded on first access (:func:`expand`, a callable
    returning the four arrays): a run whose step log is never read never pays for it."""

    def __init__(
        self,
        *,
        flat: tuple[np.ndarray, ...] | None = None,
        expand: Callable[[], tuple[np.ndarray, ...]] | None = None,
        num_records: int | None = None,
    ) -> None:
        self._flat = flat
        self._expand = expand
        #: rows of the record the chunks come from (every chunk one row when given flat)
        self.num_records = len(flat[0]) if flat is not None else int(num_records or 0)

    @cached_property
    def _arrays(self) -> tuple[np.ndarray, ...]:
        if self._flat is not None:
            return self._flat
        assert self._expand is not None
        return self._expand()

    @property
    def request(self) -> np.ndarray:
        return self._arrays[0]

    @property
    def tokens(self) -> np.ndarray:
        return self._arrays[1]

    @property
    def kind(self) -> np.ndarray:
        return self._arrays[2]

    @property
    def start(self) -> np.ndarray:
        return self._arrays[3]


@dataclass(frozen=True, eq=False)
class RunRecord:
    """Compressed, columnar record of a simulation; expands into the tables, the step log and
    the summary on demand.

    Per request (arrival order): ``ids``, ``arrival_at_s`` (since ``time_origin_s``) and ``req``
    (the run's arrays: token times, counts); ``order`` maps them to the input order of
    ``table``. Per step: ``steps`` (a :class:`StepColumns`: :data:`RECORDED_STEP_COLUMNS` and
    ``step_end``), the chunks (``chunks``, a :class:`ChunkLog`) and the events
    (``event_header`` rows of step, preempted, first-token and finished counts;
    ``event_requests``). The inter-token gaps are a multiset (``gaps``, a
    :class:`~budgetlab.metrics.GapSample`). Times [s] are relative to ``time_origin_s``.
    """

    table: RequestTable
    order: np.ndarray
    ids: np.ndarray
    time_origin_s: float
    arrival_at_s: np.ndarray
    req: RequestArrays
    block_size: int
    num_kv_blocks: int
    steps: StepColumns
    chunks: ChunkLog
    event_header: np.ndarray
    event_requests: np.ndarray
    num_steps: int
    gaps: GapSample
    num_preemptions: int
    kv_peak_blocks: int
    num_query_tokens: int
    num_hit_tokens: int

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """Every step's recorded counts (:data:`RECORDED_STEP_COLUMNS`)."""
        return self.steps.columns

    @property
    def step_end(self) -> np.ndarray:
        return self.steps.step_end

    @property
    def chunk_request(self) -> np.ndarray:
        return self.chunks.request

    @property
    def chunk_tokens(self) -> np.ndarray:
        return self.chunks.tokens

    @property
    def chunk_kind(self) -> np.ndarray:
        return self.chunks.kind

    @property
    def chunk_start(self) -> np.ndarray:
        return self.chunks.start

    @cached_property
    def _input_in_arrival_order(self) -> bool:
        return bool(np.all(self.order[1:] > self.order[:-1]))

    def in_input_order(self, values: np.ndarray, *, copy: bool = True) -> np.ndarray:
        """A per-request array in arrival order, permuted to the input order (``values``
        itself, of its own dtype, when that is the same order and ``copy`` is false: the caller
        only reads it); else a new array, integers as int64 (the compiled core keeps its
        per-request counts as int32)."""
        if not copy and self._input_in_arrival_order:
            return values
        out = np.empty(values.shape, dtype=np.int64 if values.dtype.kind in "iu" else values.dtype)  # counts: int64
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

    def steps_frame(self) -> pd.DataFrame:
        """The per-step table (:data:`STEP_COLUMNS`), one row per executed step."""
        data: dict[str, np.ndarray] = {}
        for name in RECORDED_STEP_COLUMNS:
            dtype = np.float64 if name in ("start_at_s", "duration_s") else np.int64
            data[name] = np.asarray(self.columns[name], dtype=dtype)
        data["forward_pass"] = np.diff(self.step_end, prepend=0) > 0
        return pd.DataFrame(data, columns=list(STEP_COLUMNS))

    def summary(self) -> dict[str, float | int]:
        """Headline numbers (:func:`budgetlab.metrics.summarize`), from the per-request arrays
        (in input order, so every sum is taken in the order it always was)."""
        req = self.req
        table = self.table
        numbers = summarize(
            arrival_at_s=self.in_input_order(self.arrival_at_s, copy=False),
            first_token_at_s=self.in_input_order(req.first_token_at_s, copy=False),
            finished_at_s=self.in_input_order(req.finished_at_s, copy=False),
            output_tokens=table.output_tokens,
            prompt_tokens=table.prompt_tokens,
            gaps=self.gaps,
            num_preemptions=self.num_preemptions,
            kv_peak_blocks=self.kv_peak_blocks,
            num_kv_blocks=self.num_kv_blocks,
            num_steps=self.num_steps,
        )
        numbers["num_forward_passes"] = self.num_steps - self.steps.num_empty_steps
        numbers["prefix_query_tokens"] = self.num_query_tokens
        numbers["prefix_hit_tokens"] = self.num_hit_tokens
        numbers["prefix_hit_rate"] = self.num_hit_tokens / self.num_query_tokens if self.num_query_tokens else math.nan
        return numbers


def build_record(state: SimState) -> RunRecord:
    """The record of a run the reference steps recorded (:class:`~.state.StepRecord`)."""
    steps = state.steps
    gaps = state.gaps
    gap_values = np.concatenate((_view(gaps.single, np.float64), _view(gaps.common_values, np.float64)))
    gap_weights = np.concatenate((np.ones(len(gaps.single), dtype=np.int64), _view(gaps.common_counts, np.int64)))
    step_end = _view(steps.step_end, np.int64)
    flat = (
        _view(steps.chunk_request, np.int64),
        _view(steps.chunk_tokens, np.int64),
        _view(steps.chunk_kind, np.int8),
        _view(steps.chunk_start, np.int64),
    )
    return RunRecord(
        table=state.table,
        order=state.order,
        ids=state.ids,
        time_origin_s=state.time_origin_s,
        arrival_at_s=state.arrival_at_s,
        req=state.req_np,
        block_size=state.block_size,
        num_kv_blocks=state.kv.num_blocks,
        steps=StepColumns(
            int(np.count_nonzero(np.diff(step_end, prepend=0) == 0)),
            columns={
                name: _view(getattr(steps, name), np.float64 if name.endswith("_s") else np.int64)
                for name in RECORDED_STEP_COLUMNS
            },
            step_end=step_end,
        ),
        chunks=ChunkLog(flat=flat),
        event_header=_view(steps.event_header, np.int64).reshape(-1, 4),
        event_requests=_view(steps.event_requests, np.int64),
        num_steps=state.num_steps,
        gaps=WeightedGaps(gap_values, gap_weights),
        num_preemptions=state.num_preemptions,
        kv_peak_blocks=state.kv.peak_used_blocks,
        num_query_tokens=state.num_query_tokens,
        num_hit_tokens=state.num_hit_tokens,
    )
