"""Continuous-batching step simulator that schedules exactly like vLLM V1.

:func:`simulate` replays a list of requests through an engine step by step. Every step is
filled by the rules in ``shared/reference/vllm-v1-scheduling.md`` (vLLM 0.33, synchronous,
FCFS, chunked prefill, no prefix caching):

1. Requests that arrived at or before the step's start join the waiting queue (FIFO; equal
   arrival times keep their input order).
2. *Running pass*: the running list in admission order; each request asks for
   ``min(remaining, long_prefill_token_threshold if > 0, budget left)`` tokens, where
   remaining is 1 for a decode and the rest of its prompt (or of prompt + generated tokens
   after a preemption) for a prefill; the threshold is ignored when running + waiting == 1.
   Its new KV blocks are ``ceil((computed + n) / block_size) − ceil(computed / block_size)``;
   while the free pool is short, the newest running request (the tail of the list, never one
   already scheduled in this step) is preempted: its blocks are freed, its computed tokens
   reset, and it goes to the *front* of the waiting queue (several victims keep their
   order). A request that has to preempt itself ends the pass. The pass stops when the
   budget is used up.
3. *Waiting pass*, skipped in a step that preempted: FCFS while budget is left and fewer than
   ``max_num_seqs`` requests run; the head is admitted only if the blocks of its whole known
   sequence fit the free pool as it stands (an exact fit is admitted), else admission stops
   (head-of-line blocking). Only the blocks of this step's chunk are allocated. With chunked
   prefill off, a head whose tokens exceed the budget left also stops admission (as vLLM
   does).
4. A chunk that reaches the end of the request's known tokens samples one token (the first
   one when it finishes the prompt; a recompute samples its next token directly). A request
   finishes at the end of the step that samples its last token; its blocks and slot are free
   for the next step. Steps run back to back; the engine idles until the next arrival when
   nothing is queued.

``policy="decode-first"`` (Sarathi-Serve's stall-free order) walks the running pass as all
decodes first, then partial prefills and recomputes, each group in admission order; the
waiting pass, KV accounting and gates are the same. Because that order is not the admission
order, a preemption victim is the newest running request *not yet scheduled in this step
other than the one being scheduled*, which preempts itself only when no such request is left
(in vLLM's order this is exactly "the tail"). A step therefore always schedules something
when every request fits the pool.

Step kinds in the log: ``prefill`` up to and including the chunk that samples the first
token, ``recompute`` for a preempted request's chunks up to and including the one that
reaches its known tokens again, ``decode`` otherwise. A step's :class:`~budgetlab.Batch`
holds the decodes (count and the sum of their computed tokens before the step) and one
prefill entry per prefill or recompute chunk (its length and its request's computed tokens
before it).

Two modes give identical results, bit for bit (tables, step log, summary):
``mode="reference"`` schedules one step at a time with plain Python (the rules above,
transliterated); ``mode="fast"`` jumps over runs of decode-only steps — every running request
decodes and no waiting request can be admitted (the queue is empty, or its head is blocked by
the sequence cap or by KV, which cannot clear before a completion since the pool only
shrinks) — up to the next event: the step that starts at or after an arrival that could be
admitted, the first completion, or the step whose new KV blocks would need a preemption. Step
ends are accumulated with ``cumsum`` (the same sequential additions as ``t += duration``) and
durations come from the cost model's ``decode_run_time_s``. Fast mode also fills long running
lists with NumPy. Runs stay compressed; :attr:`SimResult.steps` and
:meth:`SimResult.step_log` expand them on demand.

Glossary: a request's *known* tokens are its prompt plus the tokens it has generated; its
*computed* tokens are those in the KV cache. A decode schedules the one known token not yet
computed. Times are in seconds from the trace's time origin.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np
import pandas as pd

from budgetlab import memory
from budgetlab.errors import RequestTooLargeError
from budgetlab.metrics import summarize
from budgetlab.roofline import Batch
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request

__all__ = ["simulate", "SimResult", "SIM_MODES", "STEP_KINDS", "REQUEST_COLUMNS", "STEP_COLUMNS"]

SIM_MODES = ("fast", "reference")
STEP_KINDS = ("decode", "prefill", "recompute")
_DECODE, _PREFILL, _RECOMPUTE = 0, 1, 2

REQUEST_COLUMNS = (
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
)
STEP_COLUMNS = (
    "start_at_s",
    "duration_s",
    "num_decode_tokens",
    "num_prefill_tokens",
    "num_running",
    "num_waiting",
    "num_free_kv_blocks",
    "num_preemptions",
)

# Longest decode-only run advanced in one jump [steps]; longer runs take several jumps.
_RUN_WINDOW = 8192
# Fast mode fills the running pass with NumPy from this many running requests on; below it
# the plain Python pass is quicker. Tests set it to 1 to exercise the vectorized path.
_VECTOR_MIN_RUNNING = 48


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def simulate(
    requests: Iterable[Request] | pd.DataFrame,
    *,
    engine: EngineConfig,
    cost: Any,
    hardware: HardwareSpec | None = None,
    model: ModelSpec | None = None,
    mode: Literal["fast", "reference"] = "fast",
) -> SimResult:
    """Replay ``requests`` through a continuous-batching engine scheduled like vLLM V1.

    Parameters
    ----------
    requests : iterable of Request, or pandas.DataFrame
        The workload. A DataFrame needs the columns ``request_id``, ``arrival_at_s``,
        ``prompt_tokens`` and ``output_tokens``. Any order: requests are sorted stably by
        arrival (equal arrivals keep their input order). Ids must be unique.
    engine : EngineConfig
        Scheduling knobs (budget, ``max_num_seqs``, block size, KV pool, threshold, policy).
    cost : cost model
        Anything with ``batch_time_s(Batch) -> float`` and, ideally,
        ``decode_run_time_s(*, num_decodes, decode_context_tokens) -> ndarray`` (see
        :mod:`budgetlab.roofline`); e.g. :class:`~budgetlab.IdealCost` or
        :class:`~budgetlab.ConstantCost`.
    hardware, model : HardwareSpec, ModelSpec, optional
        Used to size the KV pool when ``engine.num_kv_blocks`` is None; default to
        ``cost.hardware`` / ``cost.model`` when the cost model carries them.
    mode : {"fast", "reference"}
        ``"reference"`` schedules one step at a time; ``"fast"`` jumps over runs of
        decode-only steps. Both give identical results.

    Returns
    -------
    SimResult
        Per-request and per-step tables, the step log and a summary.

    Raises
    ------
    RequestTooLargeError
        A request longer than ``max_model_len``, or whose peak KV blocks
        ``ceil((prompt + output − 1) / block_size)`` exceed the usable pool (it could never
        finish).
    ValueError
        Duplicate ids, malformed requests, no requests, an unknown mode, or a KV pool that
        cannot be derived.
    """
    if mode not in SIM_MODES:
        raise ValueError(f"mode must be one of {', '.join(SIM_MODES)}, got {mode!r}")
    if not isinstance(engine, EngineConfig):
        raise TypeError(f"engine must be an EngineConfig, got {type(engine).__name__}")
    if not callable(getattr(cost, "batch_time_s", None)):
        raise TypeError(
            f"cost must be a step-cost model with batch_time_s(batch) (IdealCost, ConstantCost, "
            f"...), got {type(cost).__name__}"
        )
    table = _request_table(requests)
    num_blocks = _kv_pool(engine, cost, hardware, model)
    _check_requests_fit(table, engine, num_blocks)
    sim = _Simulator(table, engine, cost, num_blocks)
    sim.run(fast=mode == "fast")
    return sim.result(mode)


@dataclass(frozen=True, eq=False)
class SimResult:
    """Outcome of :func:`simulate`.

    Attributes
    ----------
    requests : pandas.DataFrame
        One row per request, in input order: ``request_id``, ``arrival_at_s``,
        ``first_token_at_s``, ``finished_at_s``, ``ttft_s``, ``e2e_s``, ``mean_itl_s``
        (mean gap between its output tokens; NaN for one output token), ``max_itl_s``
        (its longest gap, a recompute included; NaN for one output token),
        ``num_preemptions``, ``queue_s`` (arrival to the start of the step that first
        schedules it), ``prompt_tokens``, ``output_tokens``. Times in [s].
    engine : EngineConfig
        The configuration simulated.
    num_kv_blocks : int
        Usable KV blocks of the pool [blocks].
    mode : str
        ``"fast"`` or ``"reference"`` (the results do not depend on it).
    steps : pandas.DataFrame
        One row per executed step (built on first access): ``start_at_s``, ``duration_s``,
        ``num_decode_tokens``, ``num_prefill_tokens`` (prefill and recompute chunks),
        ``num_running``, ``num_waiting``, ``num_free_kv_blocks`` (the last three measured
        after scheduling the step), ``num_preemptions``.
    """

    requests: pd.DataFrame
    engine: EngineConfig
    num_kv_blocks: int
    mode: str
    _trace: _Trace = field(repr=False)

    @cached_property
    def steps(self) -> pd.DataFrame:
        """Per-step table (see the class docstring)."""
        return self._trace.steps_frame()

    def summary(self) -> dict[str, float | int]:
        """Headline numbers of the run (definitions in :mod:`budgetlab.metrics`).

        Keys: ``ttft_{p50,p90,p99,mean}_s``, ``itl_{p50,p90,p99,mean}_s`` (over every gap
        between consecutive output tokens of every request), ``max_itl_s``,
        ``e2e_{p50,p90,p99,mean}_s``, ``makespan_s`` (last finish − first arrival),
        ``throughput_tokens_per_s`` (output tokens / makespan), ``requests_per_s``,
        ``num_requests``, ``num_prompt_tokens``, ``num_output_tokens``, ``num_steps``,
        ``num_preemptions``, ``kv_peak_blocks``, ``num_kv_blocks`` and ``kv_peak_fraction``
        (most blocks in use after scheduling any step / usable blocks).
        """
        return dict(self._summary)

    @cached_property
    def _summary(self) -> dict[str, float | int]:
        return self._trace.summary()

    def step_log(self) -> list[dict[str, Any]]:
        """One dict per executed step, in order.

        Keys: ``start_at_s`` [s]; ``scheduled``, a list of ``(request_id, num_tokens, kind)``
        in scheduling order with kind ``"prefill"`` (up to and including the chunk that
        samples the first token), ``"recompute"`` (a preempted request's chunks up to and
        including the one that reaches its known tokens again) or ``"decode"``;
        ``preempted`` (evicted while scheduling the step; none of them runs in it),
        ``first_token`` and ``finished`` (request ids).
        """
        return self._trace.step_log()


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RequestTable:
    ids: list[Any]  # input order
    arrival: np.ndarray  # float64, input order
    prompt: np.ndarray  # int64, input order
    output: np.ndarray  # int64, input order


def _request_table(requests: Iterable[Request] | pd.DataFrame) -> _RequestTable:
    if isinstance(requests, pd.DataFrame):
        return _table_from_frame(requests)
    ids: list[Any] = []
    arrival: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    for item in requests:
        if not isinstance(item, Request):
            try:
                item = Request(item.request_id, item.arrival_at_s, item.prompt_tokens, item.output_tokens)
            except AttributeError:
                raise TypeError(
                    f"requests must be budgetlab.Request objects or a DataFrame, got {type(item).__name__}"
                ) from None
        ids.append(item.request_id)
        arrival.append(float(item.arrival_at_s))
        prompt.append(int(item.prompt_tokens))
        output.append(int(item.output_tokens))
    table = _RequestTable(
        ids,
        np.asarray(arrival, dtype=float),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
    )
    _check_ids(table.ids)
    return table


_FRAME_COLUMNS = ("request_id", "arrival_at_s", "prompt_tokens", "output_tokens")


def _table_from_frame(frame: pd.DataFrame) -> _RequestTable:
    missing = [c for c in _FRAME_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(
            f"the requests DataFrame lacks column(s) {', '.join(missing)}; it needs "
            f"{', '.join(_FRAME_COLUMNS)}"
        )
    ids = frame["request_id"].tolist()
    try:
        arrival = frame["arrival_at_s"].to_numpy(dtype=float)
    except (TypeError, ValueError):
        raise ValueError("arrival_at_s must be numeric seconds") from None
    bad = ~(np.isfinite(arrival) & (arrival >= 0))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"request {ids[i]!r}: arrival_at_s must be a finite number of seconds >= 0, got {arrival[i]!r}"
        )
    columns = {}
    for name in ("prompt_tokens", "output_tokens"):
        raw = frame[name].to_numpy()
        if raw.dtype == bool or not (np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)):
            raise ValueError(f"{name} must hold integer token counts, got dtype {raw.dtype}")
        values = raw.astype(float)
        bad = ~(np.isfinite(values) & (values == np.floor(values)) & (values >= 1))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"request {ids[i]!r}: {name} must be an int >= 1, got {raw[i]!r}")
        columns[name] = raw.astype(np.int64)
    table = _RequestTable(ids, arrival, columns["prompt_tokens"], columns["output_tokens"])
    _check_ids(table.ids)
    return table


def _check_ids(ids: list[Any]) -> None:
    if not ids:
        raise ValueError("no requests to simulate")
    try:
        unique = len(set(ids)) == len(ids)
    except TypeError:
        raise ValueError("request ids must be hashable (int or str)") from None
    if not unique:
        seen: set[Any] = set()
        dup = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate request_id {dup!r}: ids must be unique")


def _kv_pool(engine: EngineConfig, cost: Any, hardware: HardwareSpec | None, model: ModelSpec | None) -> int:
    if engine.num_kv_blocks is not None:
        return int(engine.num_kv_blocks)
    hardware = hardware if hardware is not None else getattr(cost, "hardware", None)
    model = model if model is not None else getattr(cost, "model", None)
    if hardware is None or model is None:
        raise ValueError(
            "EngineConfig.num_kv_blocks is None, so the KV pool is derived from GPU memory, but "
            f"no hardware and model are known: pass hardware= and model= to simulate(), use a "
            f"cost model that carries them (IdealCost does; {type(cost).__name__} does not), "
            "or set EngineConfig(num_kv_blocks=...)"
        )
    return int(memory.num_kv_blocks(engine, hardware, model))


def _check_requests_fit(table: _RequestTable, engine: EngineConfig, num_blocks: int) -> None:
    total = table.prompt + table.output
    if engine.max_model_len is not None:
        too_long = np.flatnonzero(total > engine.max_model_len)
        if too_long.size:
            i = int(too_long[0])
            raise RequestTooLargeError(
                f"request {table.ids[i]!r} has {int(table.prompt[i])} prompt + "
                f"{int(table.output[i])} output = {int(total[i])} tokens, more than max_model_len "
                f"({engine.max_model_len}); vLLM rejects it ({too_long.size} request(s) in all). "
                "Raise max_model_len or shorten the request."
            )
    bs = engine.block_size
    peak = (total - 1 + bs - 1) // bs
    too_big = np.flatnonzero(peak > num_blocks)
    if too_big.size:
        i = int(too_big[0])
        raise RequestTooLargeError(
            f"request {table.ids[i]!r} needs {int(peak[i])} KV blocks at its peak "
            f"(ceil(({int(table.prompt[i])} prompt + {int(table.output[i])} output − 1) / {bs})) "
            f"but the pool holds only {num_blocks} usable blocks: it could never finish (vLLM "
            f"would preempt it over and over; {too_big.size} request(s) in all). Give the KV "
            "cache more memory (a higher gpu_memory_utilization, a bigger GPU, tensor "
            "parallelism), lower max_num_batched_tokens (smaller activations leave more KV), "
            "or set a shorter max_model_len so vLLM rejects such requests."
        )


# --------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------


def _block_demand(computed0: np.ndarray, num_steps: int, block_size: int) -> np.ndarray:
    """New KV blocks the decoders need in total by the end of each of ``num_steps`` steps.

    Decoder ``r`` allocates at step ``s`` (1-based) when its computed tokens before the step,
    ``computed0[r] + s − 1``, are a multiple of the block size, i.e. at
    ``s = o_r + 1 + m × block_size`` with ``o_r = (−computed0[r]) mod block_size``. With
    ``s − 1 = q × block_size + j``: demand(s) = n × q + #{r : o_r <= j}.
    """
    offsets = (-computed0) % block_size
    count_le = np.cumsum(np.bincount(offsets, minlength=block_size))
    q, j = np.divmod(np.arange(num_steps, dtype=np.int64), block_size)
    return len(computed0) * q + count_le[j]


class _Simulator:
    """All mutable state of one simulation; requests are indexed in arrival order.

    Per-request state lives in ``array.array`` buffers (fast scalar access from Python) with
    NumPy views on the same memory (``*_v``) for the vectorized paths.
    """

    def __init__(self, table: _RequestTable, engine: EngineConfig, cost: Any, num_blocks: int) -> None:
        order = np.argsort(table.arrival, kind="stable")
        self.table = table
        self.order = order
        self.ids = [table.ids[i] for i in order.tolist()]
        self.arrival = table.arrival[order]
        self.arrival_list = self.arrival.tolist()
        n = len(order)
        self.N = n

        def ints(values: Iterable[int] | None = None) -> tuple[array, np.ndarray]:
            buf = array("q", [0]) * n if values is None else array("q", values)
            return buf, np.frombuffer(buf, dtype=np.int64)

        def floats(fill: float) -> tuple[array, np.ndarray]:
            buf = array("d", [fill]) * n
            return buf, np.frombuffer(buf, dtype=np.float64)

        self.prompt_a, self.prompt_v = ints(table.prompt[order].tolist())
        self.out_a, self.out_v = ints(table.output[order].tolist())
        self.comp_a, self.comp_v = ints()
        self.gen_a, self.gen_v = ints()
        self.npre_a, self.npre_v = ints()
        self.recomp_a = array("b", [0]) * n
        self.recomp_v = np.frombuffer(self.recomp_a, dtype=np.bool_)
        self.last_a, self.last_v = floats(0.0)
        self.maxgap_a, self.maxgap_v = floats(0.0)
        self.first_a, self.first_v = floats(math.nan)
        self.fin_a, self.fin_v = floats(math.nan)
        self.admit_a, self.admit_v = floats(math.nan)

        self.engine = engine
        self.budget = engine.max_num_batched_tokens
        self.max_seqs = engine.max_num_seqs
        self.bs = engine.block_size
        self.thr = engine.long_prefill_token_threshold
        self.chunked = engine.enable_chunked_prefill
        self.decode_first = engine.policy == "decode-first"
        self.pool = num_blocks
        self.free = num_blocks
        self.peak_used = 0

        self.batch_time = cost.batch_time_s
        self.decode_run = getattr(cost, "decode_run_time_s", None)

        self.running: list[int] = []
        self.waiting: deque[int] = deque()
        self.n_nondec = 0  # running requests that are not decoding (prefill or recompute)
        self.next_arrival = 0
        self.num_done = 0
        self.num_preemptions = 0
        self.t = self.arrival_list[0]

        # Records. Normal steps: one buffer per column; the step log's scheduled entries flat.
        self.s_start = array("d")
        self.s_dur = array("d")
        self.s_ndec = array("q")
        self.s_npref = array("q")
        self.s_nrun = array("q")
        self.s_nwait = array("q")
        self.s_free = array("q")
        self.s_npre = array("q")
        self.f_idx = array("q")
        self.f_n = array("q")
        self.f_kind = array("b")
        self.s_end = array("q")  # end offset of each normal step in the flat buffers
        self.events: dict[int, tuple[list[int], list[int], list[int]]] = {}  # step -> (pre, first, fin)
        # Jumped runs, one entry per run: normal steps before it, steps k, decoders n, free
        # blocks and waiting requests before it, index of the next arrival, completions;
        # flat: step boundaries (k + 1 per run), durations (k), decoders in order and their
        # computed tokens before the run (n each), completions.
        self.r_meta = array("q")  # (at, k, n, free0, wait0, next arrival) per run
        self.r_nfin = array("q")
        self.r_times = array("d")
        self.r_dur = array("d")
        self.r_order = array("q")
        self.r_c0 = array("q")
        self.r_fin = array("q")
        self.num_steps = 0
        # Inter-token gaps: scalars (weight 1), and arrays with a multiplicity.
        self.gaps = array("d")
        self.gap_arrays: list[tuple[np.ndarray, int]] = []

    # -- main loop --------------------------------------------------------------------------

    def run(self, *, fast: bool) -> None:
        arrival = self.arrival_list
        n = self.N
        waiting = self.waiting
        while self.num_done < n:
            if not self.running and not waiting:
                # Idle: the next step starts at the next arrival.
                if self.t < arrival[self.next_arrival]:
                    self.t = arrival[self.next_arrival]
            t = self.t
            i = self.next_arrival
            if i < n and arrival[i] <= t:
                while i < n and arrival[i] <= t:
                    waiting.append(i)
                    i += 1
                self.next_arrival = i
            if fast:
                if self.n_nondec == 0 and self.running and self._jump():
                    continue
                if len(self.running) >= _VECTOR_MIN_RUNNING and self._step_vectorized():
                    continue
            self._step()

    # -- one step, plain Python (the reference) ---------------------------------------------

    def _step(self) -> None:
        t = self.t
        running = self.running
        waiting = self.waiting
        comp = self.comp_a
        gen = self.gen_a
        prompt = self.prompt_a
        recomp = self.recomp_a
        bs = self.bs
        budget = self.budget
        thr = self.thr if len(running) + len(waiting) != 1 else 0
        free = self.free

        s_idx: list[int] = []
        s_n: list[int] = []
        s_kind: list[int] = []
        s_cb: list[int] = []
        preempted: list[int] = []

        # Running pass.
        if self.decode_first and self.n_nondec:
            order = [r for r in running if gen[r] and not recomp[r]]
            order += [r for r in running if not gen[r] or recomp[r]]
            scheduled: set[int] | None = set()
        else:
            order = running  # walked live: victims are popped off its tail
            scheduled = None
        for r in order:  # (the live list's iterator stops early when its tail is popped)
            if budget == 0:
                break
            if preempted and r in preempted:
                continue
            c = comp[r]
            g = gen[r]
            n = prompt[r] + g - c
            if n > budget:
                n = budget
            if thr and n > thr:
                n = thr
            need = (c + n + bs - 1) // bs - (c + bs - 1) // bs
            if need > free:
                stop = False
                while need > free:
                    if scheduled is None:
                        victim = running.pop()  # the tail: never scheduled yet this step
                    else:
                        # Newest running request not scheduled yet, itself as a last resort.
                        j = len(running) - 1
                        while j >= 0 and (running[j] == r or running[j] in scheduled):
                            j -= 1
                        if j >= 0:
                            victim = running.pop(j)
                        else:
                            running.remove(r)
                            victim = r
                    free += (comp[victim] + bs - 1) // bs
                    comp[victim] = 0
                    if not gen[victim] or recomp[victim]:
                        self.n_nondec -= 1
                    recomp[victim] = 1
                    self.npre_a[victim] += 1
                    waiting.appendleft(victim)
                    preempted.append(victim)
                    if victim == r:
                        stop = True
                        break
                if stop:
                    break
            free -= need
            budget -= n
            s_idx.append(r)
            s_n.append(n)
            s_kind.append(_RECOMPUTE if recomp[r] else (_DECODE if g else _PREFILL))
            s_cb.append(c)
            if scheduled is not None:
                scheduled.add(r)

        # Waiting pass.
        if not preempted:
            free = self._admit(budget, free, thr, s_idx, s_n, s_kind, s_cb)

        if not s_idx:
            raise RuntimeError(
                f"internal error: the step at t={t!r} s scheduled nothing with "
                f"{len(running)} running and {len(waiting)} waiting requests"
            )

        num_dec = 0
        dec_ctx = 0
        pre_tokens: list[int] = []
        pre_ctx: list[int] = []
        for n, kind, cb in zip(s_n, s_kind, s_cb):
            if kind == _DECODE:
                num_dec += 1
                dec_ctx += cb
            else:
                pre_tokens.append(n)
                pre_ctx.append(cb)
        batch = Batch(num_dec, dec_ctx, tuple(pre_tokens), tuple(pre_ctx))
        duration = self.batch_time(batch)
        if not 0.0 < duration < math.inf:
            self._duration(batch)  # raises with the details
        duration = float(duration)
        end = t + duration

        self._record_step(t, duration, num_dec, sum(pre_tokens), len(running), len(waiting), free, len(preempted))

        # End of step: sample.
        first: list[int] = []
        finished: list[int] = []
        out = self.out_a
        last = self.last_a
        max_gap = self.maxgap_a
        gaps = self.gaps
        for r, n, kind, cb in zip(s_idx, s_n, s_kind, s_cb):
            c = cb + n
            comp[r] = c
            if kind == _DECODE:
                g = gen[r] + 1  # a decode always reaches the end of its known tokens
            else:
                g = gen[r]
                if c != prompt[r] + g:
                    continue  # a partial chunk samples nothing
                g += 1
                self.n_nondec -= 1
                recomp[r] = 0
            gen[r] = g
            if g == 1:
                self.first_a[r] = end
                first.append(r)
            else:
                gap = end - last[r]
                gaps.append(gap)
                if gap > max_gap[r]:
                    max_gap[r] = gap
            last[r] = end
            if g == out[r]:
                self.fin_a[r] = end
                free += (c + bs - 1) // bs
                finished.append(r)
        if finished:
            done = set(finished)
            self.running = [r for r in running if r not in done]
            self.num_done += len(finished)
        self.free = free
        self.f_idx.extend(s_idx)
        self.f_n.extend(s_n)
        self.f_kind.extend(s_kind)
        self.s_end.append(len(self.f_idx))
        if preempted or first or finished:
            self.events[len(self.s_start) - 1] = (preempted, first, finished)
            self.num_preemptions += len(preempted)
        self.t = end

    def _admit(
        self, budget: int, free: int, thr: int, s_idx: list[int], s_n: list[int], s_kind: list[int], s_cb: list[int]
    ) -> int:
        """The waiting pass (FCFS, head-of-line blocking); returns the free blocks left."""
        running = self.running
        waiting = self.waiting
        gen = self.gen_a
        prompt = self.prompt_a
        recomp = self.recomp_a
        admit = self.admit_a
        bs = self.bs
        max_seqs = self.max_seqs
        while budget > 0 and waiting:
            if len(running) >= max_seqs:
                break
            h = waiting[0]
            g = gen[h]
            known = prompt[h] + g
            if (known + bs - 1) // bs > free:
                break  # head-of-line blocking: nobody behind it is tried
            n = known
            if thr and n > thr:
                n = thr
            if n > budget:
                if not self.chunked:
                    break
                n = budget
            waiting.popleft()
            running.append(h)
            self.n_nondec += 1
            free -= (n + bs - 1) // bs
            budget -= n
            if admit[h] != admit[h]:  # NaN: its first admission
                admit[h] = self.t
            s_idx.append(h)
            s_n.append(n)
            s_kind.append(_RECOMPUTE if recomp[h] else (_DECODE if g else _PREFILL))
            s_cb.append(0)
        return free

    def _duration(self, batch: Batch) -> float:
        duration = float(self.batch_time(batch))
        if not (0.0 < duration < math.inf):
            raise ValueError(
                f"the cost model returned {duration!r} s for a step of {batch}; step times must "
                "be finite and > 0"
            )
        return duration

    def _track_peak(self, free: int) -> None:
        """Note the KV blocks in use after scheduling a step (or a jumped run)."""
        used = self.pool - free
        if used > self.peak_used:
            self.peak_used = used

    def _record_step(
        self, t: float, duration: float, ndec: int, npref: int, nrun: int, nwait: int, free: int, npre: int
    ) -> None:
        """Append one scheduled step to the per-step columns (``free`` after scheduling it)."""
        self._track_peak(free)
        self.s_start.append(t)
        self.s_dur.append(duration)
        self.s_ndec.append(ndec)
        self.s_npref.append(npref)
        self.s_nrun.append(nrun)
        self.s_nwait.append(nwait)
        self.s_free.append(free)
        self.s_npre.append(npre)
        self.num_steps += 1

    # -- fast mode: a run of decode-only steps in one jump ----------------------------------

    def _jump(self) -> bool:
        """Advance a run of decode-only steps at once; False when this step is not one.

        Called when every running request decodes. The run lasts while no waiting request can
        be admitted: the queue is empty (then the run ends before the first step that starts
        at or after the next arrival) or its head is blocked by the sequence cap or by KV
        (neither can clear before a completion, the free pool only shrinks, so arrivals just
        queue). It also ends at the first completion (that step included) and before the
        first step whose new KV blocks would not fit (it preempts, so it runs normally).
        """
        running = self.running
        waiting = self.waiting
        n = len(running)
        bs = self.bs
        free = self.free
        if waiting:
            if n < self.max_seqs:
                h = waiting[0]
                if (self.prompt_a[h] + self.gen_a[h] + bs - 1) // bs <= free:
                    return False  # the head can be admitted this step
            absorb = True  # arrivals queue behind a head that stays blocked
        else:
            absorb = n >= self.max_seqs
        vector = n >= _VECTOR_MIN_RUNNING
        if vector:
            idx = np.array(running, dtype=np.int64)
            c0: Any = self.comp_v[idx]
            left = self.out_v[idx] - self.gen_v[idx]
            k_done = int(left.min())
            ctx0 = int(c0.sum())
        else:
            comp = self.comp_a
            gen = self.gen_a
            out = self.out_a
            c0 = [comp[r] for r in running]
            k_done = min([out[r] - gen[r] for r in running])
            ctx0 = sum(c0)
        k_max = k_done if k_done < _RUN_WINDOW else _RUN_WINDOW
        if n * ((k_max - 1) // bs + 1) > free:
            # KV may run short: stop before the first step whose blocks would not fit.
            demand = _block_demand(np.asarray(c0, dtype=np.int64), k_max, bs)
            k_max = int(demand.searchsorted(free, side="right"))
            if k_max == 0:
                return False  # this step preempts: schedule it normally
        contexts = np.arange(ctx0, ctx0 + n * k_max, n, dtype=np.int64)
        if self.decode_run is not None:
            durations = np.asarray(self.decode_run(num_decodes=n, decode_context_tokens=contexts), dtype=float)
        else:
            batch_time = self.batch_time
            durations = np.array([float(batch_time(Batch(n, x))) for x in contexts.tolist()])
        if durations.shape != (k_max,):
            raise ValueError(
                f"{type(self.decode_run).__name__}.decode_run_time_s returned shape {durations.shape} "
                f"for {k_max} steps"
            )
        # Step ends, accumulated exactly as the reference's sequential ``t += duration``.
        t = self.t
        times = np.empty(k_max + 1)
        times[0] = t
        times[1:] = durations
        times.cumsum(out=times)
        k = k_max
        nxt = self.next_arrival
        if not absorb and nxt < self.N:
            arrival = self.arrival_list[nxt]
            if times.item(k_max - 1) >= arrival:
                # Steps that start at or after the next arrival are scheduled normally.
                k = int(times[:k_max].searchsorted(arrival, side="left"))
                durations = durations[:k]
                times = times[: k + 1]
        end = times.item(k)
        if not (t < end < math.inf):
            raise ValueError(
                f"the cost model returned step times that are not finite and > 0 for "
                f"decode-only steps of {n} decodes: {durations[:5].tolist()}..."
            )
        first_end = times.item(1)
        # Record the run compressed (the gaps of its steps 2..k, the same for every decoder,
        # are read off ``times`` when the results are built).
        self.r_meta.extend((len(self.s_start), k, n, free, len(waiting), nxt))
        self.r_times.frombytes(times.tobytes())
        self.r_dur.frombytes(durations.tobytes())

        if vector:
            self.r_order.frombytes(idx.tobytes())
            self.r_c0.frombytes(c0.tobytes())
            self.comp_v[idx] = c0 + k
            self.gen_v[idx] = self.gen_v[idx] + k
            first_gaps = first_end - self.last_v[idx]
            self.gap_arrays.append((first_gaps, 1))
            self.maxgap_v[idx] = np.maximum(self.maxgap_v[idx], first_gaps)
            self.last_v[idx] = end
            held = (c0 + k + bs - 1) // bs
            free -= int((held - (c0 + bs - 1) // bs).sum())
            if k == k_done:
                done = left == k
                finished = idx[done].tolist()
                free_later = int(held[done].sum())
            else:
                finished = []
        else:
            self.r_order.extend(running)
            self.r_c0.extend(c0)
            last = self.last_a
            max_gap = self.maxgap_a
            gaps = self.gaps
            finished = []
            new_blocks = 0
            for r, c in zip(running, c0):
                ck = c + k
                comp[r] = ck
                g = gen[r] + k
                gen[r] = g
                gap = first_end - last[r]
                gaps.append(gap)
                if gap > max_gap[r]:
                    max_gap[r] = gap
                last[r] = end
                new_blocks += (ck + bs - 1) // bs - (c + bs - 1) // bs
                if g == out[r]:
                    finished.append(r)
            free -= new_blocks
            if finished:
                free_later = sum([(comp[r] + bs - 1) // bs for r in finished])
        self._track_peak(free)
        self.r_nfin.append(len(finished))
        if finished:
            self.r_fin.extend(finished)
            fin_at = self.fin_a
            for r in finished:
                fin_at[r] = end
            free += free_later
            done_set = set(finished)
            self.running = [r for r in running if r not in done_set]
            self.num_done += len(finished)
        self.free = free
        self.num_steps += k
        self.t = end
        return True

    # -- fast mode: the running pass with NumPy ---------------------------------------------

    def _step_vectorized(self) -> bool:
        """Fill one step with array operations; False (state untouched) if it must preempt."""
        running = self.running
        waiting = self.waiting
        comp = self.comp_v
        gen = self.gen_v
        prompt = self.prompt_v
        recomp = self.recomp_v
        bs = self.bs
        budget = self.budget
        thr = self.thr if len(running) + len(waiting) != 1 else 0
        idx = np.array(running, dtype=np.intp)
        if self.decode_first and self.n_nondec:
            decoding = (gen[idx] > 0) & ~recomp[idx]
            idx = np.concatenate((idx[decoding], idx[~decoding]))
        c0 = comp[idx]
        g0 = gen[idx]
        want = prompt[idx] + g0 - c0
        if thr:
            want = np.minimum(want, thr)
        before = np.cumsum(want) - want  # budget handed out before each request
        m = int(np.searchsorted(before, budget, side="left"))
        take = np.minimum(want[:m], budget - before[:m])
        cm = c0[:m]
        need = int(((cm + take + bs - 1) // bs - (cm + bs - 1) // bs).sum())
        if need > self.free:
            return False  # a preemption is due: the plain pass handles it exactly
        free = self.free - need
        budget -= int(take.sum())
        sched = idx[:m]
        kind = np.where(recomp[sched], _RECOMPUTE, np.where(g0[:m] == 0, _PREFILL, _DECODE))

        a_idx: list[int] = []
        a_n: list[int] = []
        a_kind: list[int] = []
        a_cb: list[int] = []
        free = self._admit(budget, free, thr, a_idx, a_n, a_kind, a_cb)
        if a_idx:
            sched = np.concatenate((sched, np.array(a_idx, dtype=np.intp)))
            take = np.concatenate((take, np.array(a_n, dtype=np.int64)))
            kind = np.concatenate((kind, np.array(a_kind, dtype=kind.dtype)))
            cm = np.concatenate((cm, np.zeros(len(a_idx), dtype=np.int64)))

        t = self.t
        dec = kind == _DECODE
        num_dec = int(np.count_nonzero(dec))
        dec_ctx = int(cm[dec].sum())
        pre = ~dec
        pre_tokens = tuple(take[pre].tolist())
        duration = self._duration(Batch(num_dec, dec_ctx, pre_tokens, tuple(cm[pre].tolist())))
        end = t + duration
        self._record_step(t, duration, num_dec, sum(pre_tokens), len(running), len(waiting), free, 0)

        new_comp = cm + take
        comp[sched] = new_comp
        g_s = gen[sched]
        sampled = new_comp == prompt[sched] + g_s
        who = sched[sampled]
        g1 = g_s[sampled] + 1
        gen[who] = g1
        not_dec = kind[sampled] != _DECODE
        if not_dec.any():
            self.n_nondec -= int(np.count_nonzero(not_dec))
            recomp[who[not_dec]] = False
        is_first = g1 == 1
        first = who[is_first]
        if first.size:
            self.first_v[first] = end
        gapped = who[~is_first]
        if gapped.size:
            gaps = end - self.last_v[gapped]
            self.maxgap_v[gapped] = np.maximum(self.maxgap_v[gapped], gaps)
            self.gap_arrays.append((gaps, 1))
        self.last_v[who] = end
        is_fin = g1 == self.out_v[who]
        fin = who[is_fin]
        if fin.size:
            self.fin_v[fin] = end
            free += int(((new_comp[sampled][is_fin] + bs - 1) // bs).sum())
            done = set(fin.tolist())
            self.running = [r for r in running if r not in done]
            self.num_done += len(done)
        self.free = free
        self.f_idx.frombytes(sched.astype(np.int64, copy=False).tobytes())
        self.f_n.frombytes(take.astype(np.int64, copy=False).tobytes())
        self.f_kind.frombytes(kind.astype(np.int8).tobytes())
        self.s_end.append(len(self.f_idx))
        if first.size or fin.size:
            self.events[len(self.s_start) - 1] = ([], first.tolist(), fin.tolist())
        self.t = end
        return True

    # -- results ----------------------------------------------------------------------------

    def result(self, mode: str) -> SimResult:
        meta = _view(self.r_meta, np.int64).reshape(-1, 6).T
        runs = _Runs(
            at=meta[0],
            k=meta[1],
            n=meta[2],
            free0=meta[3],
            wait0=meta[4],
            next_arrival=meta[5],
            num_finished=_view(self.r_nfin, np.int64),
            times=_view(self.r_times, np.float64),
            durations=_view(self.r_dur, np.float64),
            order=_view(self.r_order, np.int64),
            computed0=_view(self.r_c0, np.int64),
            finished=_view(self.r_fin, np.int64),
        )
        if len(runs.durations) and not (runs.durations.min() > 0.0 and np.isfinite(runs.durations).all()):
            bad = runs.durations[~((runs.durations > 0) & np.isfinite(runs.durations))][0]
            raise ValueError(
                f"the cost model returned {bad!r} s for a decode-only step; step times must be "
                "finite and > 0"
            )
        values = [_view(self.gaps, np.float64)] + [a for a, _ in self.gap_arrays]
        weights = [np.ones(len(self.gaps), dtype=np.int64)] + [
            np.full(len(a), w, dtype=np.int64) for a, w in self.gap_arrays
        ]
        if len(runs.k):
            later, later_weights = runs.fold_later_gaps(self.maxgap_v)
            values.append(later)
            weights.append(later_weights)

        order = self.order

        def to_input(values: np.ndarray) -> np.ndarray:
            out = np.empty_like(values)
            out[order] = values
            return out

        arrival = self.table.arrival
        first = to_input(self.first_v)
        finished = to_input(self.fin_v)
        out_tokens = self.table.output
        many = out_tokens > 1
        mean_itl = np.full(len(arrival), np.nan)
        np.divide(finished - first, out_tokens - 1, out=mean_itl, where=many)
        max_itl = np.where(many, to_input(self.maxgap_v), np.nan)
        frame = pd.DataFrame(
            {
                "request_id": self.table.ids,
                "arrival_at_s": arrival,
                "first_token_at_s": first,
                "finished_at_s": finished,
                "ttft_s": first - arrival,
                "e2e_s": finished - arrival,
                "mean_itl_s": mean_itl,
                "max_itl_s": max_itl,
                "num_preemptions": to_input(self.npre_v),
                "queue_s": to_input(self.admit_v) - arrival,
                "prompt_tokens": self.table.prompt,
                "output_tokens": out_tokens,
            },
            columns=list(REQUEST_COLUMNS),
        )
        trace = _Trace(
            ids=self.ids,
            arrival=self.arrival,
            block_size=self.bs,
            num_kv_blocks=self.pool,
            columns={
                "start_at_s": _view(self.s_start, np.float64),
                "duration_s": _view(self.s_dur, np.float64),
                "num_decode_tokens": _view(self.s_ndec, np.int64),
                "num_prefill_tokens": _view(self.s_npref, np.int64),
                "num_running": _view(self.s_nrun, np.int64),
                "num_waiting": _view(self.s_nwait, np.int64),
                "num_free_kv_blocks": _view(self.s_free, np.int64),
                "num_preemptions": _view(self.s_npre, np.int64),
            },
            flat_idx=self.f_idx,
            flat_n=self.f_n,
            flat_kind=self.f_kind,
            step_end=self.s_end,
            events=self.events,
            runs=runs,
            num_steps=self.num_steps,
            requests=frame,
            gap_values=np.concatenate(values),
            gap_weights=np.concatenate(weights),
            num_preemptions=self.num_preemptions,
            kv_peak_blocks=self.peak_used,
        )
        return SimResult(requests=frame, engine=self.engine, num_kv_blocks=self.pool, mode=mode, _trace=trace)


def _view(buffer: array, dtype: type) -> np.ndarray:
    """A NumPy array over an ``array.array`` (empty buffers included)."""
    if len(buffer) == 0:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(buffer, dtype=dtype)


@dataclass(frozen=True, eq=False)
class _Runs:
    """Every jumped run of decode-only steps, as flat arrays (see ``_Simulator.__init__``)."""

    at: np.ndarray
    k: np.ndarray
    n: np.ndarray
    free0: np.ndarray
    wait0: np.ndarray
    next_arrival: np.ndarray
    num_finished: np.ndarray
    times: np.ndarray
    durations: np.ndarray
    order: np.ndarray
    computed0: np.ndarray
    finished: np.ndarray

    @cached_property
    def time_offsets(self) -> np.ndarray:
        """Where each run's ``k + 1`` step boundaries start in ``times``."""
        return np.concatenate(([0], np.cumsum(self.k + 1)[:-1])).astype(np.int64)

    @cached_property
    def step_offsets(self) -> np.ndarray:
        """Where each run's ``k`` steps start in ``durations`` (and cumulative steps)."""
        return np.concatenate(([0], np.cumsum(self.k))).astype(np.int64)

    @cached_property
    def member_offsets(self) -> np.ndarray:
        return np.concatenate(([0], np.cumsum(self.n))).astype(np.int64)

    @cached_property
    def finished_offsets(self) -> np.ndarray:
        return np.concatenate(([0], np.cumsum(self.num_finished))).astype(np.int64)

    def starts(self) -> np.ndarray:
        """Start of every run step, run after run [s]."""
        keep = np.ones(len(self.times), dtype=bool)
        keep[self.time_offsets + self.k] = False
        return self.times[keep]

    def fold_later_gaps(self, max_gap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gaps of steps 2..k of every run (values, multiplicities); updates ``max_gap``.

        Each is ``times[i] − times[i − 1]``, the same float the reference computes as
        ``end − last token``, shared by the run's ``n`` decoders. Each run's largest gap is
        folded into its decoders' longest gap (in place).
        """
        diffs = self.times[1:] - self.times[:-1]
        keep = np.ones(len(diffs), dtype=bool)
        keep[self.time_offsets] = False  # a run's first step: taken per request when it ran
        keep[self.time_offsets[1:] - 1] = False  # across two runs
        later = diffs[keep]
        weights = np.repeat(self.n, self.k - 1)
        multi = self.k > 1
        if multi.any():
            seg = np.concatenate(([0], np.cumsum(self.k[multi] - 1)[:-1]))
            run_max = np.maximum.reduceat(later, seg)
            members = self.order[np.repeat(multi, self.n)]
            np.maximum.at(max_gap, members, np.repeat(run_max, self.n[multi]))
        return later, weights

    def free_blocks(self, block_size: int) -> np.ndarray:
        """Free KV blocks after scheduling every run step [blocks] (see :func:`_block_demand`)."""
        num_runs = len(self.k)
        total = int(self.step_offsets[-1])
        step_run = np.repeat(np.arange(num_runs), self.k)
        s_minus_1 = np.arange(total, dtype=np.int64) - self.step_offsets[:-1][step_run]
        if num_runs * block_size <= 4_000_000:
            member_run = np.repeat(np.arange(num_runs), self.n)
            offsets = (-self.computed0) % block_size
            counts = np.bincount(member_run * block_size + offsets, minlength=num_runs * block_size)
            count_le = np.cumsum(counts.reshape(num_runs, block_size), axis=1)
            q, j = np.divmod(s_minus_1, block_size)
            demand = self.n[step_run] * q + count_le[step_run, j]
        else:  # huge blocks: one run at a time
            demand = np.concatenate(
                [
                    _block_demand(self.computed0[self.member_offsets[i] : self.member_offsets[i + 1]], int(k), block_size)
                    for i, k in enumerate(self.k.tolist())
                ]
            ) if num_runs else np.empty(0, dtype=np.int64)
        return self.free0[step_run] - demand


@dataclass(eq=False)
class _Trace:
    """Compressed record of a simulation; expands into the steps table and step log on demand."""

    ids: list[Any]
    arrival: np.ndarray
    block_size: int
    num_kv_blocks: int
    columns: dict[str, np.ndarray]
    flat_idx: array
    flat_n: array
    flat_kind: array
    step_end: array
    events: dict[int, tuple[list[int], list[int], list[int]]]
    runs: _Runs
    num_steps: int
    requests: pd.DataFrame
    gap_values: np.ndarray
    gap_weights: np.ndarray
    num_preemptions: int
    kv_peak_blocks: int

    def _positions(self) -> tuple[np.ndarray, np.ndarray]:
        """Global step number of every normal step and of every run step."""
        runs = self.runs
        num_normal = len(self.step_end)
        cum_k = runs.step_offsets
        runs_before = np.searchsorted(runs.at, np.arange(num_normal), side="right")
        normal_pos = np.arange(num_normal, dtype=np.int64) + cum_k[runs_before]
        run_first = runs.at + cum_k[:-1]
        total = int(cum_k[-1])
        within = np.arange(total, dtype=np.int64) - np.repeat(cum_k[:-1], runs.k)
        run_pos = np.repeat(run_first, runs.k) + within
        return normal_pos, run_pos

    def steps_frame(self) -> pd.DataFrame:
        runs = self.runs
        normal_pos, run_pos = self._positions()
        total = len(normal_pos) + len(run_pos)
        data: dict[str, np.ndarray] = {}
        for name in STEP_COLUMNS:
            dtype = np.float64 if name in ("start_at_s", "duration_s") else np.int64
            column = np.empty(total, dtype=dtype)
            column[normal_pos] = self.columns[name]
            data[name] = column
        if len(run_pos):
            starts = runs.starts()
            step_run = np.repeat(np.arange(len(runs.k)), runs.k)
            n = runs.n[step_run]
            data["start_at_s"][run_pos] = starts
            data["duration_s"][run_pos] = runs.durations
            data["num_decode_tokens"][run_pos] = n
            data["num_prefill_tokens"][run_pos] = 0
            data["num_running"][run_pos] = n
            data["num_waiting"][run_pos] = runs.wait0[step_run] + (
                np.searchsorted(self.arrival, starts, side="right") - runs.next_arrival[step_run]
            )
            data["num_free_kv_blocks"][run_pos] = runs.free_blocks(self.block_size)
            data["num_preemptions"][run_pos] = 0
        return pd.DataFrame(data, columns=list(STEP_COLUMNS))

    def step_log(self) -> list[dict[str, Any]]:
        ids = self.ids
        runs = self.runs
        normal_pos, run_pos = self._positions()
        log: list[dict[str, Any] | None] = [None] * (len(normal_pos) + len(run_pos))
        starts = self.columns["start_at_s"].tolist()
        flat_idx, flat_n, flat_kind = self.flat_idx, self.flat_n, self.flat_kind
        begin = 0
        for step, (pos, end) in enumerate(zip(normal_pos.tolist(), self.step_end)):
            scheduled = [
                (ids[i], n, STEP_KINDS[kind])
                for i, n, kind in zip(flat_idx[begin:end], flat_n[begin:end], flat_kind[begin:end])
            ]
            pre, first, fin = self.events.get(step, ((), (), ()))
            log[pos] = {
                "start_at_s": starts[step],
                "scheduled": scheduled,
                "preempted": [ids[i] for i in pre],
                "first_token": [ids[i] for i in first],
                "finished": [ids[i] for i in fin],
            }
            begin = end
        if len(run_pos):
            run_starts = runs.starts().tolist()
            order = runs.order.tolist()
            finished = runs.finished.tolist()
            m_off = runs.member_offsets.tolist()
            f_off = runs.finished_offsets.tolist()
            s_off = runs.step_offsets.tolist()
            positions = run_pos.tolist()
            for r, k in enumerate(runs.k.tolist()):
                names = [ids[i] for i in order[m_off[r] : m_off[r + 1]]]
                done = [ids[i] for i in finished[f_off[r] : f_off[r + 1]]]
                for s in range(s_off[r], s_off[r] + k):
                    log[positions[s]] = {
                        "start_at_s": run_starts[s],
                        "scheduled": [(rid, 1, "decode") for rid in names],
                        "preempted": [],
                        "first_token": [],
                        "finished": list(done) if s == s_off[r] + k - 1 else [],
                    }
        return log  # type: ignore[return-value]

    def summary(self) -> dict[str, float | int]:
        req = self.requests
        return summarize(
            arrival_at_s=req["arrival_at_s"].to_numpy(),
            first_token_at_s=req["first_token_at_s"].to_numpy(),
            finished_at_s=req["finished_at_s"].to_numpy(),
            output_tokens=req["output_tokens"].to_numpy(),
            prompt_tokens=req["prompt_tokens"].to_numpy(),
            gap_values_s=self.gap_values,
            gap_weights=self.gap_weights,
            num_preemptions=self.num_preemptions,
            kv_peak_blocks=self.kv_peak_blocks,
            num_kv_blocks=self.num_kv_blocks,
            num_steps=self.num_steps,
        )
