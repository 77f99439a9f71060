"""Step times the compiled core computes itself, with the cost models' own arithmetic.

A step's duration decides when the next one starts, so a cost model the core cannot price sends
every step back to Python (~50 µs each, 5-10x the scheduling). The core prices three kinds
(:data:`~.core_state.COST_CONSTANT`, :data:`~.core_state.COST_IDEAL`,
:data:`~.core_state.COST_CALIBRATED`; :func:`cost_kind` picks one, with its parameters in
``CoreState.cost``), each with the same floating-point operations in the same order as the
model's ``batch_time_s``, so a run gives the same bits either way (the simulator tests run every
workload both ways):

* ``ConstantCost``: ``duration_s``;
* ``IdealCost`` without a drafter: ``max(weight_read_s, tokens × per_token_s)``, 0 for an empty
  step;
* ``CalibratedCost`` (the real-engine default) for a dense model with full attention and no
  proposer: :meth:`~budgetlab.cost.CalibratedCost.batch_time_s` — the step's sums
  (:func:`budgetlab.cost.step_terms.batch_sums`), its CUDA-graph mode and padding
  (:func:`~budgetlab.cost.step_terms.dispatch_step`, rules D1-D4 of :mod:`budgetlab.cudagraph`)
  and the one formula :func:`budgetlab.cost.step_terms.step_time_s`, its all-reduce term from a
  table of the cost's own values per token count when it prices kernels
  (:class:`~budgetlab.cost.step_constants.AllReduceTable`).

A mixture of experts (the weights a step reads depend on its tokens), a layout of other
attention kinds, and a proposer's passes are priced by the model in Python.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from budgetlab.simulator._jit import core_jit
from budgetlab.simulator.core import P_BEFORE, P_KIND, P_TOKENS
from budgetlab.simulator.core_state import (
    COST_CALIBRATED,
    COST_CONSTANT,
    COST_IDEAL,
    COST_PYTHON,
    N_PLAN,
    N_RUNNING,
    T_DURATION,
)
from budgetlab.simulator.plan import DECODE

__all__ = ["cost_kind", "calibrated_params", "step_s", "run_s", "decode_run_s", "calibrated_step_s"]

# The parameters of a CalibratedCost in CoreState.cost (flags are 0.0 or 1.0), then its CUDA
# graph sizes, FULL sizes and all-reduce table (graph row, then eager row, C_AR_ROWS each).
(
    C_OVERHEAD,
    C_LAYERS_OVERHEAD,
    C_WEIGHT_READ,
    C_PER_TOKEN,
    C_KV_READS,
    C_KV_S,
    C_ATTENTION,
    C_ATTENTION_S,
    C_TILE,
    C_KNEE,
    C_ALL_REDUCE,
    C_AR_FIXED,
    C_AR_PER_TOKEN,
    C_AR_TABLE,
    C_AR_ROWS,
    C_GRAPH,
    C_GRAPH_PADDING,
    C_LAUNCH,
    C_LAUNCH_FULL,
    C_LAUNCH_PIECEWISE,
    C_LAUNCH_NONE,
    C_NUM_SIZES,
    C_NUM_FULL,
    C_HEADER,
) = range(24)

#: The longest all-reduce table the core keeps (every token count up to 128 Ki, 4 MiB); a
#: larger budget (chunked prefill off at a long ``max_model_len``) is priced by the model.
MAX_ALL_REDUCE_ROWS = 2**17 + 1

# CUDA-graph mode codes (budgetlab.cost.step_terms: FULL, PIECEWISE, NONE); -1: no graph information
_FULL, _PIECEWISE, _NONE, _NO_GRAPH = 0, 1, 2, -1


def cost_kind(cost: Any, max_tokens: int) -> tuple[int, np.ndarray]:
    """The kind of ``cost`` the core prices and its parameters, or ``(COST_PYTHON, ...)``.

    ``max_tokens``: the most tokens a step can hold (the engine's budget) [tokens], the length of
    a CalibratedCost's all-reduce table.
    """
    from budgetlab.cost.calibrated import CalibratedCost
    from budgetlab.cost.roofline import ConstantCost, IdealCost

    if type(cost) is ConstantCost:
        return COST_CONSTANT, np.array([float(cost.duration_s)])
    if type(cost) is IdealCost and cost.drafter is None:
        return COST_IDEAL, np.array([float(cost.weight_read_s), float(cost.per_token_s)])
    if type(cost) is CalibratedCost:
        params = calibrated_params(cost, max_tokens)
        if params is not None:
            return COST_CALIBRATED, params
    return COST_PYTHON, np.zeros(1)


def calibrated_params(cost: Any, max_tokens: int) -> np.ndarray | None:
    """A ``CalibratedCost``'s constants as the core reads them (layout ``C_*`` above); ``None``
    where the core does not price it (module docstring)."""
    from budgetlab.cost.step_terms import FULL, NONE, PIECEWISE

    assert (FULL, PIECEWISE, NONE) == (_FULL, _PIECEWISE, _NONE)
    c = cost._constants  # the cost's per-step constants (budgetlab.cost.step_constants)
    if c.moe or c.layout is not None or c.drafter is not None or c.decode_query_len != 1:
        return None
    if c.moe_padding is not None or c.expert_parallel is not None:
        return None
    sizes = c.graph.sizes if c.graph is not None else ()
    full = c.graph.full if c.graph is not None else ()
    table = c.all_reduce_table if c.all_reduce else None
    rows = 0  # the all-reduce table's: every step's tokens, and every graph's padded tokens
    if table is not None:
        rows = int(max((max_tokens, *sizes))) + 1
        if rows > MAX_ALL_REDUCE_ROWS:
            return None  # a budget beyond any chunk size: the model prices the steps that occur
    header = np.zeros(C_HEADER)
    header[C_OVERHEAD] = c.overhead_s
    header[C_LAYERS_OVERHEAD] = c.layers_overhead_s
    header[C_WEIGHT_READ] = cost.weight_read_s
    header[C_PER_TOKEN] = cost.per_token_s
    header[C_KV_READS] = c.kv_reads
    header[C_KV_S] = c.kv_s_per_token
    header[C_ATTENTION] = c.attention
    header[C_ATTENTION_S] = c.attention_s_per_pair
    header[C_TILE] = 0 if c.tile_tokens is None else c.tile_tokens
    header[C_KNEE] = c.knee_overlap_loss
    header[C_ALL_REDUCE] = c.all_reduce
    header[C_AR_FIXED] = c.all_reduce_fixed_s
    header[C_AR_PER_TOKEN] = c.all_reduce_per_token_s
    header[C_AR_TABLE] = table is not None
    header[C_AR_ROWS] = rows
    header[C_GRAPH] = c.graph is not None
    header[C_GRAPH_PADDING] = c.graph_padding
    header[C_LAUNCH] = c.launch_s is not None
    if c.launch_s is not None:
        header[C_LAUNCH_FULL : C_LAUNCH_NONE + 1] = c.launch_s
    header[C_NUM_SIZES] = len(sizes)
    header[C_NUM_FULL] = len(full)
    parts = [header, np.asarray(sizes, dtype=float), np.asarray(full, dtype=float)]
    if table is not None:
        parts.append(_all_reduce_rows(cost, rows))
    return np.concatenate(parts)


@lru_cache(maxsize=16)
def _all_reduce_rows(cost: Any, rows: int) -> np.ndarray:
    """A cost's all-reduce time for every token count below ``rows`` in a CUDA graph, then
    without one [s] (its :class:`~budgetlab.cost.step_constants.AllReduceTable` over arrays:
    the same values as its scalar path), kept for the next simulation of an equal cost (costs
    are frozen). Never written to: :func:`calibrated_params` copies it."""
    table = cost._constants.all_reduce_table
    tokens = np.arange(rows, dtype=float)
    return np.concatenate([np.asarray(table.time_s(tokens, eager), dtype=float) for eager in (False, True)])


@core_jit
def step_s(st: Any) -> float:
    """The planned step's duration [s] (``CoreState.plan``), as the cost model's ``batch_time_s``."""
    kind = st.cfg_cost_kind
    if kind == COST_CONSTANT:
        return st.cost[0]
    plan = st.plan
    if kind == COST_IDEAL:
        tokens = 0
        for j in range(st.n[N_PLAN]):
            tokens += plan[j, P_TOKENS]
        return 0.0 if tokens == 0 else max(st.cost[0], tokens * st.cost[1])
    # CalibratedCost: budgetlab.cost.step_terms.batch_sums, in the plan's order
    num_decodes = decode_context = 0
    prefill_tokens = prefill_pairs = prefill_context = 0.0
    uniform = True  # rule D2 with q = 1: every chunk a decode, or one token over a cached context
    for j in range(st.n[N_PLAN]):
        if plan[j, P_KIND] == DECODE:
            num_decodes += 1
            decode_context += plan[j, P_BEFORE]
        else:
            m, c = float(plan[j, P_TOKENS]), float(plan[j, P_BEFORE])
            prefill_tokens = prefill_tokens + m
            prefill_pairs = prefill_pairs + (m * c + m * (m + 1.0) / 2.0)
            prefill_context = prefill_context + c
            if not (plan[j, P_TOKENS] == 1 and plan[j, P_BEFORE] > 0):
                uniform = False
    decodes, context = float(num_decodes), float(decode_context)
    tokens_f = (decodes + 0.0) + prefill_tokens
    pairs = prefill_pairs + (context + decodes)
    return calibrated_step_s(st.cost, tokens_f, pairs, prefill_context + context, uniform)


@core_jit
def run_s(st: Any, count: int) -> bool:
    """Fill ``run_durations[:count]`` with the steps of the planned decode-only run [s]
    (:func:`decode_run_s` of the running requests); ``False`` (the duration in
    ``t[T_DURATION]``) at the first that is not finite and > 0."""
    out = st.run_durations
    n_running = st.n[N_RUNNING]
    first = 0
    for i in range(n_running):
        first += st.computed[st.running[i]]
    decode_run_s(st.cfg_cost_kind, st.cost, n_running, float(first), count, out)
    for k in range(count):
        if not 0.0 < out[k] < math.inf:
            st.t[T_DURATION] = out[k]
            return False
    return True


@core_jit
def decode_run_s(kind: int, p: Any, num_decodes: int, first_context: float, count: int, out: Any) -> None:
    """Fill ``out[:count]`` with the durations [s] of ``count`` decode-only steps of
    ``num_decodes`` decodes whose context is ``first_context`` tokens in the first step and
    grows by ``num_decodes`` a step, as the cost model's ``decode_run_time_s`` (cost ``kind``
    with parameters ``p``). The core prices a run with it, and the record (:mod:`.core_steps`)
    prices it again to expand the run's steps."""
    if kind != COST_CALIBRATED:
        out[:count] = p[0] if kind == COST_CONSTANT else max(p[0], num_decodes * p[1])
        return
    decodes = float(num_decodes)
    tokens = (decodes + 0.0) + 0.0
    for k in range(count):
        context = first_context + num_decodes * k
        out[k] = calibrated_step_s(p, tokens, 0.0 + (context + decodes), 0.0 + context, True)


@core_jit
def calibrated_step_s(p: Any, tokens: float, pairs: float, kv_tokens: float, uniform: bool) -> float:
    """:func:`budgetlab.cost.step_terms.step_time_s` of a step of ``tokens`` tokens, ``pairs``
    attention pairs and ``kv_tokens`` cached tokens read, dispatched to its CUDA graph as
    :func:`~budgetlab.cost.step_terms.dispatch_step` does (``p``: :func:`calibrated_params`)."""
    mode, graph_tokens = _NO_GRAPH, tokens
    num_sizes, num_full = int(p[C_NUM_SIZES]), int(p[C_NUM_FULL])
    if p[C_GRAPH] != 0.0 and tokens > 0:
        sizes = p[C_HEADER : C_HEADER + num_sizes]
        if num_sizes == 0 or tokens > sizes[num_sizes - 1]:
            mode = _NONE
        else:
            if uniform:
                full = p[C_HEADER + num_sizes : C_HEADER + num_sizes + num_full]
                at_full = np.searchsorted(full, tokens)
                if at_full < num_full:
                    mode, graph_tokens = _FULL, full[at_full]
            if mode != _FULL:
                mode, graph_tokens = _PIECEWISE, sizes[np.searchsorted(sizes, tokens)]
    padded = mode != _NO_GRAPH and p[C_GRAPH_PADDING] != 0.0
    memory_s = p[C_WEIGHT_READ]
    if p[C_KV_READS] != 0.0:
        memory_s = memory_s + kv_tokens * p[C_KV_S]
    linear_tokens = graph_tokens if padded else tokens
    tile = p[C_TILE]
    if tile > 0.0:
        linear_tokens = float(math.ceil(linear_tokens / tile)) * tile
    compute_s = linear_tokens * p[C_PER_TOKEN]
    if p[C_ATTENTION] != 0.0:
        compute_s = compute_s + pairs * p[C_ATTENTION_S]
    roof_s = memory_s if memory_s >= compute_s else compute_s
    knee = p[C_KNEE]
    if knee > 0:
        low_s = compute_s if compute_s < memory_s else memory_s
        roof_s = roof_s + knee * low_s * (low_s / roof_s)
    time_s = p[C_OVERHEAD] + roof_s
    all_reduce_s = 0.0
    if p[C_ALL_REDUCE] != 0.0:
        if p[C_AR_TABLE] != 0.0:
            rows = int(p[C_AR_ROWS])
            message_tokens = int(graph_tokens if padded else tokens)
            if message_tokens >= rows:
                return math.nan  # beyond the table: refused as a bad duration (cannot happen)
            row = 1 if mode == _NONE else 0  # a step without a graph pays each call's launch
            all_reduce_s = p[C_HEADER + num_sizes + num_full + row * rows + message_tokens]
        else:
            all_reduce_s = p[C_AR_FIXED] + tokens * p[C_AR_PER_TOKEN]
        time_s = time_s + all_reduce_s
    if mode != _NO_GRAPH and p[C_LAUNCH] != 0.0:  # host launch time beyond the GPU work it feeds
        excess_s = p[C_LAUNCH_FULL + mode] - (p[C_LAYERS_OVERHEAD] + roof_s + all_reduce_s)
        time_s = time_s + (excess_s if excess_s > 0.0 else 0.0)
    return time_s if tokens > 0 else 0.0
