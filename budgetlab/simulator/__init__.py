"""Continuous-batching step simulator that schedules exactly like vLLM V1.

:func:`simulate` replays a list of requests through an engine step by step. Every step is
filled by the rules in ``shared/reference/vllm-v1-scheduling.md`` (vLLM 0.33's synchronous
scheduler, FCFS, chunked prefill) and, for prefix caching, async scheduling and the priority
policy, ``shared/reference/vllm-v1-prefix-async-priority.md``. The defaults are vLLM 0.33's
(``EngineConfig``: prefix caching on, async scheduling on); rules 1–4 below are the
synchronous engine without a cache, and rules 8–10 say what the two options change:

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

``scheduling_policy="priority"`` (vLLM's ``--scheduling-policy priority``,
``shared/reference/vllm-v1-prefix-async-priority.md`` rules 32–37) changes the queue's order
and the choice of victim, nothing else:

5. The waiting queue is a heap on ``(Request.priority, arrival, input order)``, the smallest
   first (negative priorities allowed); a preempted request re-enters it at its own key, not
   at the front. Head-of-line blocking applies to its head, the best-priority request.
6. When a running request cannot get its blocks, the victim is the running request with the
   largest ``(priority, arrival, input order)`` wherever it stands in the list. A victim
   already scheduled in this step has its chunk withdrawn: its tokens go back to the budget,
   its blocks to the pool. A victim not reached yet leaves the list. When the request being
   scheduled is its own victim it is dropped and the pass *continues* with the next running
   request (FCFS ends the pass there; the reference states this and its ``prio_self``
   scenario shows it). The waiting pass is still skipped in a step that preempted.
7. Everything else is as FCFS: the running list stays in admission order and the running pass
   walks it in that order (a low-priority prefill admitted earlier keeps its place), and
   arrivals never preempt — a better-priority request waits for a slot or for blocks.

*Ties break by submission order*, wherever arrival times are compared (rules 1, 5 and 6, in
both modes): of two requests with the same priority and the same ``arrival_at_s``, the one
later in the input is the newer — it queues behind the other and is the preemption victim
first, whatever their places in the running list. vLLM 0.33 has no true ties: its
``Request.arrival_time`` is a wall-clock stamp taken at submission (``vllm/v1/request.py``),
``PriorityRequestQueue`` (``vllm/v1/core/sched/request_queue.py``) pops the smallest
``(priority, arrival_time, request_id)``, and ``Scheduler.schedule``
(``vllm/v1/core/sched/scheduler.py``) evicts ``max(self.running, key=lambda r: (r.priority,
r.arrival_time))``. Python's ``max`` would return the first of truly equal keys, but stamps
differ, so the later-submitted request wins; a trace's equal times stand for submissions a
moment apart, in input order.

``enable_prefix_caching=True`` (section 1 of the companion reference; the pool is
:mod:`.blocks`):

8. Full blocks are cached by content: block ``i`` of a request is its token prefix up to
   ``(i + 1) × block_size``, read from ``Request.prefix_id`` / ``prefix_tokens`` (the first
   ``prefix_tokens`` tokens are the group's shared stream; two requests with the same whole
   prompt also generate the same tokens, as in vLLM's tests). A request leaving the waiting
   queue (new or preempted) first takes its leading cached blocks, at most ``(known − 1) //
   block_size`` (at least one token is computed), and its first chunk starts there. Blocks a
   chunk fills are cached when it is scheduled, so a later admission in the same step hits
   them. Admission needs the blocks of the whole known sequence less the hit blocks running
   requests hold (hits on cached blocks nobody holds cost as much as new ones), plus vLLM's
   watermark while anything runs; with ``scheduler_reserve_full_isl=False`` only the first
   chunk's. A block is shared once however many requests hold it; a finished or preempted
   request frees only the blocks nobody else holds, partial ones to the free queue's head,
   cached ones to its tail, deepest first; reuse evicts from the head (LRU), and a preempted
   request's recompute hits whichever of its own blocks survived.

``async_scheduling=True`` (section 2):

9. The engine plans step k before it has processed step k−1's outputs. Tokens are sampled
   in the same steps as synchronously, but a request that samples its last token in step k
   keeps its slot and blocks, gets nothing, and counts as running through step k+1 (its
   blocks and slot are free from k+2; it may be the FCFS victim there, which frees them then
   and is reported as a preemption). An iteration that can schedule nothing while last
   tokens are in flight is still a step (no forward pass, the cost model's empty-batch time;
   ``steps["forward_pass"]`` is False), so step numbers line up with vLLM's, including the
   one after the last request's last token.
10. Pipelined with prefix caching, a block a decode fills is cached one step later (its
    last token is not yet known to the scheduler when the decode is planned).

Several KV-cache groups (``EngineConfig.kv_groups``, derived from the model's attention layout
as vLLM's hybrid KV cache manager forms them: sliding-window, chunked-local and Mamba layers
beside full attention; :mod:`.kv_groups` states rules G1–G7 with the vLLM 0.33 function each
comes from) change only the KV accounting:

11. Every group holds its own table of ``ceil(tokens / block_size)`` blocks from the one pool,
    so a chunk needs that many new blocks *per group*; a Mamba group holds one block per
    request. Before each allocation a sliding-window (chunked-local) group frees the blocks
    wholly before its window (chunk) of the processed tokens — computed, less those still in
    flight when pipelined — and the freed blocks count for the check that follows.
12. The whole-sequence admission check counts each windowed group at most at its admission cap,
    ``ceil(min(W − 1 + in-flight tokens, max_model_len) / block_size) + 1`` for a window W.
13. With prefix caching a block is cached per group, and a hit must be cached in every group:
    the full groups' leading run, then within it the rightmost run of
    ``ceil((W − 1) / block_size)`` blocks each sliding group needs (its window); a finish or a
    preemption frees the groups in order, each last block first.

A run with several groups is scheduled by the reference steps in both modes (the compiled core
schedules one full-attention group).

Speculative decoding (``EngineConfig(num_speculative_tokens=k, speculative_method=...)``; rules
S1–S10 in :mod:`.drafts`, each with the vLLM 0.33 function it comes from) changes what a decode
asks for and what it yields:

14. After a step, each request whose chunk reached its known tokens has ``k`` drafts; a decode
    then asks for ``1 + k`` tokens, cut by the budget (and a draft model's input slot per request)
    and by ``max_model_len``, and its KV slots reach ``k`` past them for drafters with their own
    forward pass. A verification of ``d`` drafts yields ``min(a_i, d) + 1`` tokens (replayed or
    drawn acceptance); the rejected drafts are rolled back. Pipelined, the scheduler plans past the
    drafts still in flight and learns the rejections one step later. A speculating run is
    scheduled step by step in both modes, with per-request block tables.

``policy="decode-first"`` (Sarathi-Serve's stall-free order) walks the running pass as all
decodes first, then partial prefills and recomputes, each group in admission order; the
waiting pass, KV accounting and gates are the same. Because that order is not the admission
order, a preemption victim is the newest running request *not yet scheduled in this step
other than the one being scheduled*, which preempts itself only when no such request is left
(in vLLM's order this is exactly "the tail"). A step therefore always schedules something
when every request fits the pool. It combines with ``scheduling_policy="priority"``:
``policy`` orders the running pass (all decodes first), ``scheduling_policy`` orders the waiting
queue and picks the victim (rule 6, whose choice does not depend on the walk's order). The two
are separate questions — the order a step is filled in, and who waits or is evicted — so
neither refuses the other.

Step kinds in the log: ``prefill`` up to and including the chunk that samples the first
token, ``recompute`` for a preempted request's chunks up to and including the one that
reaches its known tokens again, ``decode`` otherwise. A step's :class:`~budgetlab.Batch`
holds the decodes (count and the sum of their computed tokens before the step) and one
prefill entry per prefill or recompute chunk (its length and its request's computed tokens
before it).

Two modes give identical results, bit for bit (tables, step log, summary):
``mode="fast"`` (the default) runs the compiled engine core (:mod:`.core`, :mod:`.core_pool`,
:mod:`.core_runs`, :mod:`.core_loop`: each rule above stated once, compiled with numba and
cached on disk, :mod:`._jit`), which also takes a run of decode-only steps at once — every
running request decodes and nobody can leave the waiting queue before the first completion, the
first step whose new KV blocks would not fit, or an arrival that could be admitted (under the
priority policy any arrival while the head is refused for blocks) — with one record row for the whole run
and each request's state, gaps, blocks and chunk run once per run. ``mode="reference"`` schedules
one step at a time with plain Python (the rules transliterated, :mod:`.step`, :mod:`.waiting`,
:mod:`.blocks`), the specification the tests compare the core against. Several KV-cache groups
and speculative decoding are scheduled by the reference steps in both modes. The compiled core
prices ``ConstantCost``, ``IdealCost`` and ``CalibratedCost`` (the real-engine default; dense
full-attention models without a proposer) itself, with each model's own arithmetic
(:mod:`.core_cost`); any other cost model prices each step it plans (``batch_time_s``) and each
decode-only run (``decode_run_time_s``, all its steps in one call) in Python.

Glossary: a request's *known* tokens are its prompt plus the tokens it has generated; its
*computed* tokens are those in the KV cache. A decode schedules the one known token not yet
computed.

Time: every time the simulator reports (each ``*_at_s`` column of :attr:`SimResult.requests`
and :attr:`SimResult.steps`, the step log's ``start_at_s``) is in seconds from the trace's own
origin, its first arrival, kept as :attr:`SimResult.time_origin_s` in the input's clock: add it
for absolute times. The run is simulated in that relative time, so arrivals in epoch seconds
give exactly the latencies of the same workload shifted to start at 0 (a trace that starts at
0 is unchanged: its origin is 0). Durations (``ttft_s``, ``e2e_s``, ``queue_s``, the ITLs,
``duration_s``) do not depend on the origin.

Scale: the run's record is columnar (NumPy arrays, nothing per request or per step as a Python
object): per step its counts, start and duration (the compiled core keeps a decode-only run of
steps as one row, and regenerates its steps, durations priced again, when they are read:
:mod:`.core_steps`); per request its times and counts; the chunks as *chunk runs* (a request's
consecutive decode steps are one row: request, first step, count, position), expanded into the
step log's chunks only when it is read; the inter-token gaps a step's decodes share as a count
per step (their value is the step's end minus its start; the summary's quantiles are selected
from the rows without gathering the gaps of a long run). The tables, the summary and the step
log (:class:`~budgetlab.simulator.steplog.StepLog`, a lazy view) are built from it on demand: a
million requests of the conversation trace with vLLM's defaults take about 570 MB.

Reading guide (the rules, then the two ways of running them): :mod:`.inputs` (the request table
and its checks), :mod:`.plan` (one step's chunks, their kinds and the batch the cost prices);
the reference steps — :mod:`.state` (their state record, the KV block arithmetic, the shared
step bookkeeping), :mod:`.step` (the running pass, preemption, pricing, sampling, async
release), :mod:`.waiting` (the waiting pass and its KV gate), :mod:`.blocks` and
:mod:`.kv_groups` (the block pools), :mod:`.queues` (the priority queue), :mod:`.drafts`
(speculative decoding), :mod:`.loop` (the run loop, and which way a run goes); the compiled core
— :mod:`.core_state` (its arrays), :mod:`.core_pool` (queues and the prefix-cache pool),
:mod:`.core` (the step: running pass, victims, waiting pass, sampling), :mod:`.core_runs`
(decode-only runs), :mod:`.core_cost` (step times), :mod:`.core_loop` (its loop),
:mod:`.core_steps` (its record expanded into steps and gaps), :mod:`.compiled` (its driver and
pricing in Python); then :mod:`.stall` (the livelock guard),
:mod:`.record` (the record → tables, summary) and :mod:`.steplog` (the step log, built on
demand).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple, cast

import pandas as pd

from budgetlab.attention import KVGroup
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost import CostModel, hardware_of, model_of
from budgetlab.cost.named import check_cost, make_cost
from budgetlab.display import html_table, one_line
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.simulator.inputs import (
    check_cost_matches_engine,
    check_requests_fit,
    engine_kv_groups,
    kv_pool_blocks,
    request_table,
)
from budgetlab.simulator.loop import SIM_MODES, RunOptions, SimMode, run
from budgetlab.simulator.record import RESULT_COLUMNS, STEP_COLUMNS, RunRecord
from budgetlab.simulator.state import STEP_KINDS
from budgetlab.simulator.steplog import StepLog
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request
from budgetlab.text import fmt_duration, fmt_int, fmt_latency, fmt_percent
from budgetlab.workload.acceptance import AcceptanceModel
from budgetlab.workload.closed_loop import ClosedLoopClients

__all__ = [
    "simulate",
    "SimResult",
    "SIM_MODES",
    "STEP_KINDS",
    "RESULT_COLUMNS",
    "REQUEST_COLUMNS",
    "STEP_COLUMNS",
    "RunOptions",
    "StepLog",
    "simulate_with",
    "Deployment",
    "resolve_deployment",
]

#: The old name of :data:`RESULT_COLUMNS` (the input table's columns are
#: :data:`budgetlab.workload.REQUEST_COLUMNS`).
REQUEST_COLUMNS = RESULT_COLUMNS


def simulate(
    requests: Iterable[Request] | pd.DataFrame | ClosedLoopClients,
    *,
    engine: EngineConfig,
    cost: CostModel | str,
    hardware: HardwareSpec | str | None = None,
    model: ModelSpec | str | None = None,
    mode: SimMode = "fast",
    acceptance: AcceptanceModel | None = None,
    acceptance_seed: int = 0,
) -> SimResult:
    """Replay ``requests`` through a continuous-batching engine scheduled like vLLM V1.

    Parameters
    ----------
    requests : iterable of Request, pandas.DataFrame, or ClosedLoopClients
        The workload. A DataFrame needs the columns ``request_id``, ``arrival_at_s``,
        ``prompt_tokens`` and ``output_tokens``, and may have ``priority`` (integers, 0 when
        absent; read by ``scheduling_policy="priority"`` only). Any order: requests are sorted stably by
        arrival (equal arrivals keep their input order). Ids must be unique.
        :class:`~budgetlab.ClosedLoopClients` sends its requests as its clients free up
        (``vllm bench serve --max-concurrency``); the result's ``arrival_at_s`` is when each
        was sent (compiled core only: ``mode="fast"``, one KV-cache group, no speculation).
    engine : EngineConfig
        Scheduling knobs (budget, ``max_num_seqs``, block size, KV pool, threshold, step order
        ``policy``, ``scheduling_policy``).
    cost : CostModel or str
        The step-cost model (:class:`budgetlab.cost.CostModel`: ``batch_time_s(Batch)`` and
        ``decode_run_time_s``); e.g. :class:`~budgetlab.IdealCost` or
        :class:`~budgetlab.ConstantCost`. A model with ``batch_time_s`` only also works (each
        step of a decode-only run is then priced on its own, more slowly). Or a name:
        ``"typical"`` (:meth:`CalibratedCost.typical <budgetlab.cost.CalibratedCost.typical>`
        for ``engine``'s deployment, the real-engine cost) or ``"ideal"`` (the seeds'
        roofline), built with :func:`budgetlab.cost.named.make_cost` for ``hardware`` and
        ``model``, which a name needs.
    hardware, model : HardwareSpec, ModelSpec or catalog slug, optional
        Used to size the KV pool when ``engine.num_kv_blocks`` is None, and to build a named
        cost; default to the cost model's (:func:`budgetlab.cost.hardware_of`,
        :func:`budgetlab.cost.model_of`).
    mode : {"fast", "reference"}
        ``"fast"`` runs the compiled engine core (the first run on a machine compiles it, about
        two minutes; later processes load it from the disk cache); ``"reference"`` schedules one
        step at a time in plain Python. Both give identical results.
    acceptance : AcceptanceModel, optional
        Speculative decoding (``engine.num_speculative_tokens > 0``): how many drafts each
        verification accepts, e.g. :class:`~budgetlab.workload.AcceptanceRates` or
        :class:`~budgetlab.workload.MeanAcceptanceLength`, drawn per request (seeded by
        ``(acceptance_seed, its position in requests)``). ``None``: the requests'
        ``accepted_drafts`` are replayed when any has them (the others accept nothing), else the
        method's published acceptance (:func:`~budgetlab.workload.default_acceptance`) is drawn
        (none is published for ``"draft_model"``: a ParameterError asks for a model). Ignored
        when the engine does not speculate.
    acceptance_seed : int
        Seed of those draws [-], >= 0.

    Returns
    -------
    SimResult
        Per-request and per-step tables, the step log and a summary; times from the trace's
        origin, its first arrival (``SimResult.time_origin_s``).

    Raises
    ------
    RequestTooLargeError
        A request longer than ``max_model_len``, or whose peak KV blocks
        ``ceil((prompt + output − 1) / block_size)`` exceed the usable pool (it could never
        finish).
    SchedulerStallError
        No request sampled a token for a very long time: the requests preempt each other in a
        cycle (vLLM's rules allow it with ``scheduler_reserve_full_isl=False``); or, speculating,
        nothing runs and the head of the queue can never be admitted (vLLM waits forever there).
    ConfigError
        A speculative configuration budgetlab does not simulate yet (the message names the
        change), or a threshold below ``1 + k`` cutting a padded admission (where vLLM 0.33
        stops on its own assertion).
    ValueError
        Duplicate ids, malformed requests, no requests, an unknown mode, or a KV pool that
        cannot be derived (:class:`~budgetlab.errors.ParameterError`); step times from the
        cost model that are not finite and > 0.
    TypeError
        ``engine`` is not an :class:`EngineConfig`, or ``cost`` has no ``batch_time_s``.
    ParameterError
        A cost name without ``hardware`` and ``model``, an unknown name, or an unknown slug.

    Examples
    --------
    >>> simulate(requests, engine=engine, cost="typical", hardware="h100-sxm", model="llama-3.1-8b")  # doctest: +SKIP
    """
    options = RunOptions(mode=mode)
    return simulate_with(
        requests,
        engine=engine,
        cost=cost,
        hardware=hardware,
        model=model,
        options=options,
        acceptance=acceptance,
        acceptance_seed=acceptance_seed,
    )


def simulate_with(
    requests: Iterable[Request] | pd.DataFrame | ClosedLoopClients,
    *,
    engine: EngineConfig,
    cost: CostModel | str,
    hardware: HardwareSpec | str | None = None,
    model: ModelSpec | str | None = None,
    options: RunOptions,
    acceptance: AcceptanceModel | None = None,
    acceptance_seed: int = 0,
) -> SimResult:
    """:func:`simulate` with every run option explicit (:class:`RunOptions`; for tests and
    benchmarks that force a code path)."""
    deployment = resolve_deployment(engine, cost, hardware, model)
    clients = requests if isinstance(requests, ClosedLoopClients) else None
    table = request_table(clients.requests if clients is not None else requests)
    engine, cost, num_blocks, groups = deployment
    if options.check_requests_fit:
        check_requests_fit(table, engine, num_blocks, groups)
    if clients is not None:
        from budgetlab.simulator.closed_loop import simulate_clients

        _check_closed_loop(deployment, options, acceptance)
        return simulate_clients(clients, table, deployment)
    record = run(
        table, engine, cost, num_blocks, groups, options, acceptance=acceptance, acceptance_seed=acceptance_seed
    )
    return SimResult(
        engine=engine, num_kv_blocks=num_blocks, mode=options.mode, time_origin_s=record.time_origin_s, _record=record
    )


def _check_closed_loop(deployment: Deployment, options: RunOptions, acceptance: AcceptanceModel | None) -> None:
    """Closed-loop clients run on the compiled core (fed each request as it is sent)."""
    from budgetlab.simulator.compiled import core_schedules

    if options.mode != "fast" or acceptance is not None or not core_schedules(deployment.engine, deployment.kv_groups):
        raise ConfigError(
            "closed-loop clients run on the compiled engine core (mode='fast'), which does not schedule "
            "several KV-cache groups (sliding-window, chunked-local or Mamba layers) or speculative decoding "
            "yet: simulate their requests with arrival times instead"
        )


class Deployment(NamedTuple):
    """What :func:`simulate` runs on: the engine (its KV-cache groups filled in), the cost model
    (a named one built, a CalibratedCost dispatching this engine's CUDA graphs), the KV pool
    [blocks] and the KV-cache groups."""

    engine: EngineConfig
    cost: CostModel
    num_blocks: int
    kv_groups: tuple[KVGroup, ...]


def resolve_deployment(
    engine: EngineConfig,
    cost: CostModel | str,
    hardware: HardwareSpec | str | None = None,
    model: ModelSpec | str | None = None,
) -> Deployment:
    """The engine, cost, pool and KV-cache groups :func:`simulate` runs ``engine`` with (its
    arguments of the same names, checked as it checks them)."""
    if not isinstance(engine, EngineConfig):
        raise TypeError(f"engine must be an EngineConfig, got {type(engine).__name__}")
    hardware = resolve_hardware(hardware) if isinstance(hardware, str) else hardware
    model = resolve_model(model) if isinstance(model, str) else model
    if isinstance(cost, str):
        cost = _named_cost(cost, engine, hardware, model)
    if not callable(getattr(cost, "batch_time_s", None)):
        raise TypeError(
            f"cost must be a step-cost model with batch_time_s(batch) (IdealCost, ConstantCost, "
            f"...), got {type(cost).__name__}"
        )
    check_cost_matches_engine(cost, engine)
    graphs_for = getattr(cost, "graphs_for", None)
    if callable(graphs_for):  # CalibratedCost: dispatch the steps with this engine's graphs
        cost = cast(CostModel, graphs_for(engine))
    model = model if model is not None else model_of(cost)
    num_blocks = kv_pool_blocks(
        engine,
        hardware=hardware if hardware is not None else hardware_of(cost),
        model=model,
        cost_name=type(cost).__name__,
    )
    engine, groups = engine_kv_groups(engine, model)
    return Deployment(engine, cost, num_blocks, tuple(groups))


def _named_cost(name: str, engine: EngineConfig, hardware: HardwareSpec | None, model: ModelSpec | None) -> CostModel:
    """The cost model a name stands for on ``engine``'s deployment of ``model`` on ``hardware``."""
    spec = check_cost(name)
    if hardware is None or model is None:
        missing = " and ".join(n for n, v in (("hardware", hardware), ("model", model)) if v is None)
        raise ParameterError(
            f"cost={name!r} names a step-cost model, which needs the GPU and the model it prices: "
            f"pass {missing} too, e.g. simulate(requests, engine=engine, cost={name!r}, "
            'hardware="h100-sxm", model="llama-3.1-8b"), or pass a cost model instance such as '
            "bl.CalibratedCost.typical(hw, model, engine=engine)"
        )
    return make_cost(spec, hardware, model, engine=engine)


@dataclass(frozen=True, eq=False)
class SimResult:
    """Outcome of :func:`simulate`.

    Attributes
    ----------
    requests : pandas.DataFrame
        One row per request, in input order (built on first access, :data:`RESULT_COLUMNS`):
        ``request_id``,
        ``arrival_at_s``, ``first_token_at_s``, ``finished_at_s``, ``ttft_s``, ``e2e_s``,
        ``mean_itl_s`` (mean gap between its output tokens; NaN for one output token),
        ``max_itl_s`` (its longest gap, a recompute included; NaN for one output token),
        ``num_preemptions``, ``queue_s`` (arrival to the start of the step that first
        schedules it), ``prompt_tokens``, ``output_tokens``, ``prefix_hit_tokens`` (its
        prefix-cache hit when first admitted, vLLM's ``num_cached_tokens``: prefill tokens
        it did not compute) and ``recompute_hit_tokens`` (its hits when re-admitted after
        preemptions). Times in [s], tokens in [tokens]; ``arrival_at_s``,
        ``first_token_at_s`` and ``finished_at_s`` are relative to ``time_origin_s``.
    engine : EngineConfig
        The configuration simulated.
    num_kv_blocks : int
        Usable KV blocks of the pool [blocks].
    mode : str
        ``"fast"`` (the compiled core) or ``"reference"`` (the results do not depend on it).
    time_origin_s : float
        The trace's origin in the input's clock: its first arrival [s]. Every ``*_at_s`` time
        of the result is relative to it (``time_origin_s + requests["arrival_at_s"]`` is the
        input's arrival); 0 for a trace that starts at 0.
    steps : pandas.DataFrame
        One row per executed step (built on first access, :data:`STEP_COLUMNS`):
        ``start_at_s``, ``duration_s``, ``num_decode_tokens`` (speculating: the drafts they
        verify and padded admissions included), ``num_prefill_tokens`` (prefill and recompute
        chunks), ``num_running``, ``num_waiting``,
        ``num_free_kv_blocks`` (the last three measured after scheduling the step; free
        blocks include cached blocks nobody holds), ``num_preemptions``,
        ``num_cached_tokens`` (prefix-cache hits of the requests it admitted [tokens]) and
        ``forward_pass`` (False for an iteration that schedules nothing: pipelined, or
        speculating and only preempting).
        ``start_at_s`` is relative to ``time_origin_s``.
    """

    engine: EngineConfig
    num_kv_blocks: int
    mode: str
    time_origin_s: float
    _record: RunRecord = field(repr=False)

    @cached_property
    def requests(self) -> pd.DataFrame:
        """Per-request table (see the class docstring)."""
        return self._record.requests_frame()

    @cached_property
    def steps(self) -> pd.DataFrame:
        """Per-step table (see the class docstring)."""
        return self._record.steps_frame()

    def _display_rows(self) -> list[tuple[str, str]]:
        s = self.summary()
        return [
            ("requests", f"{fmt_int(s['num_requests'])} in {fmt_duration(float(s['makespan_s']))}"),
            ("steps", fmt_int(s["num_steps"])),
            ("TTFT p50 / p90", f"{fmt_latency(float(s['ttft_p50_s']))} / {fmt_latency(float(s['ttft_p90_s']))}"),
            ("ITL p50 / p99", f"{fmt_latency(float(s['itl_p50_s']))} / {fmt_latency(float(s['itl_p99_s']))}"),
            ("output throughput", f"{fmt_int(s['throughput_tokens_per_s'])} tokens/s"),
            ("preemptions", fmt_int(s["num_preemptions"])),
            ("prefix hit rate", fmt_percent(float(s["prefix_hit_rate"]))),
            ("KV pool", f"{fmt_int(self.num_kv_blocks)} blocks, peak {fmt_percent(float(s['kv_peak_fraction']))}"),
        ]

    def __repr__(self) -> str:
        return one_line("SimResult", f"mode {self.mode!r}", self._display_rows()[:5])

    def _repr_html_(self) -> str:
        title = (
            f"SimResult: budget {fmt_int(self.engine.max_num_batched_tokens)}, "
            f"max_num_seqs {fmt_int(self.engine.max_num_seqs)}"
        )
        return html_table(title, self._display_rows())

    def summary(self) -> dict[str, float | int]:
        """Headline numbers of the run (definitions in :mod:`budgetlab.metrics`).

        Keys: ``ttft_{p50,p90,p99,mean}_s``, ``itl_{p50,p90,p99,mean}_s`` (over every gap
        between consecutive output tokens of every request), ``max_itl_s``,
        ``tpot_{p50,p90,p99,mean}_s`` (each request's mean gap, vLLM's TPOT, over the
        requests with two or more output tokens), ``e2e_{p50,p90,p99,mean}_s``,
        ``makespan_s`` (last finish − first arrival),
        ``throughput_tokens_per_s`` (output tokens / makespan), ``requests_per_s``,
        ``num_requests``, ``num_prompt_tokens``, ``num_output_tokens``, ``num_steps``,
        ``num_preemptions``, ``kv_peak_blocks``, ``num_kv_blocks`` and ``kv_peak_fraction``
        (most blocks in use after scheduling any step / usable blocks), ``num_forward_passes``
        (``num_steps`` less the empty pipelined iterations), ``prefix_query_tokens`` (known
        tokens of the requests looked up in the prefix cache at their admissions),
        ``prefix_hit_tokens`` (the tokens found there: prefill tokens saved) and
        ``prefix_hit_rate`` (their ratio, vLLM's prefix-cache hit rate; NaN with caching off).
        """
        return dict(self._summary)

    @cached_property
    def _summary(self) -> dict[str, float | int]:
        return self._record.summary()

    @property
    def num_records(self) -> int:
        """Rows of the run's chunk record [count]: with ``mode="fast"`` a request's consecutive
        decode steps are one row (the compiled core's chunk runs), with ``mode="reference"`` every
        chunk is one; the step log expands either into the same chunks."""
        return self._record.chunks.num_records

    def step_log(self) -> StepLog:
        """One dict per executed step, in order, as a lazy sequence (:class:`StepLog`: taking it
        costs nothing; ``log[i]``, ``log[a:b]``, iteration and ``list(log)`` build the dicts,
        ``log.chunks()`` and ``log.events()`` give the same content as tables).

        Keys: ``start_at_s`` [s, relative to ``time_origin_s``]; ``scheduled``, a list of
        ``(request_id, num_tokens, kind)`` in scheduling order, with kind ``"prefill"`` (up to
        and including the chunk that samples the first token), ``"recompute"`` (a preempted request's chunks up to and
        including the one that reaches its known tokens again) or ``"decode"``; ``start``,
        each chunk's position (its request's computed tokens before it: the prefix-cache hit
        for an admission) [tokens], aligned with ``scheduled`` (empty, like ``scheduled``, for
        a pipelined iteration that schedules nothing); ``preempted`` (evicted while
        scheduling the step; none of them runs in it), ``first_token`` and ``finished``
        (request ids).
        """
        return StepLog(self._record, self.engine)
