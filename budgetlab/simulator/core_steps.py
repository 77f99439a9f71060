"""The compiled core's step record, expanded on demand: one row per step, and the inter-token gaps.

The core records a single step as one row and a decode-only run of ``k`` steps as one row too
(:mod:`.core_state`, :func:`~.core_runs.take_run`). A run's steps are regenerated from its row
exactly as :func:`~.core_runs.take_run` computed them:

* durations: the core's cost prices the run again (:func:`~.core_cost.decode_run_s`: ``k``
  decodes whose context grows by their number a step, from the row's context), or, for a cost
  priced in Python, they are read back from ``run_step_s``;
* starts: the first step's, then each the previous one's start plus its duration (the same
  floating-point sums);
* waiting requests: the row's count plus the arrivals queued since the run began (an arrival
  joins the queue before the first step that starts at or after it);
* free KV blocks: the row's count (after the first step) less the blocks the run's decodes take
  in the later steps (a decode takes one when its request's computed tokens are a multiple of
  the block size: read from the decodes' chunk runs);
* every decode's inter-token gap after the first step is the step's end minus its start; in the
  first step, the row's ``num_common_gaps`` requests' (the others' are kept one by one).

:func:`expand_steps` makes the per-step columns (:meth:`RunRecord.steps_frame`, the step log);
:func:`gap_arrays` the gaps as (value, weight) pairs, and :func:`gap_digits` a histogram of one
16-bit digit of their bit patterns, for an exact selection of quantiles that never holds every
gap of a long run in memory (:class:`~.compiled.CoreGaps`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from budgetlab.simulator._jit import core_jit
from budgetlab.simulator.core_cost import decode_run_s
from budgetlab.simulator.core_state import (
    COST_PYTHON,
    F_CACHED,
    F_CONTEXT,
    F_DURATION,
    F_START,
    R_FIRST_STEP,
    R_KIND,
    R_NUM_STEPS,
    R_START,
    S_CHUNKS,
    S_COMMON,
    S_DECODE,
    S_FREE,
    S_NUM_STEPS,
    S_WAITING,
)
from budgetlab.simulator.plan import DECODE

__all__ = ["expand_steps", "gap_arrays", "gap_counts", "gap_digits", "row_durations", "NUM_STEP_COLUMNS"]

#: Columns of :func:`expand_steps`'s integer output: the core's recorded step counts
#: (``STEP_INT_FIELDS`` up to ``num_chunks``).
NUM_STEP_COLUMNS = S_CHUNKS + 1


@core_jit
def row_durations(sf: Any, si: Any, row: int, kind: int, cost: Any, run_step_s: Any, at: int, out: Any) -> int:
    """The durations [s] of row ``row``'s steps into ``out``; returns how many (``num_steps``).
    ``at``: where the row's durations start in ``run_step_s`` (read for a run of a cost priced in
    Python: the runs' durations are kept there in row order)."""
    k = si[row, S_NUM_STEPS]
    if k == 1:
        out[0] = sf[row, F_DURATION]
    elif kind == COST_PYTHON:
        out[:k] = run_step_s[at : at + k]
    else:
        decode_run_s(kind, cost, si[row, S_DECODE], sf[row, F_CONTEXT], k, out)
    return k


@core_jit
def _blocks_taken(runs: Any, num_steps: int, block_size: int) -> Any:
    """Per step, the decodes that took a new KV block in it (computed tokens before it a
    multiple of the block size), from the decode chunk runs (one token a step)."""
    taken = np.zeros(num_steps, np.int32)
    for i in range(len(runs)):
        if runs[i, R_KIND] != DECODE:
            continue
        first = runs[i, R_FIRST_STEP]
        j = (-runs[i, R_START]) % block_size
        while j < runs[i, R_NUM_STEPS]:
            taken[first + j] += 1
            j += block_size
    return taken


@core_jit
def expand_steps(
    sf: Any,
    si: Any,
    num_steps: int,
    arrival: Any,
    runs: Any,
    block_size: int,
    kind: int,
    cost: Any,
    run_step_s: Any,
    buffer: Any,
) -> tuple[Any, Any]:
    """One row per step: its start and duration [s] and prefix-cache hits [tokens] (``float64``,
    3 columns) and its counts (``int64``, :data:`NUM_STEP_COLUMNS` columns of ``STEP_INT_FIELDS``)."""
    floats = np.empty((num_steps, 3))
    ints = np.empty((num_steps, NUM_STEP_COLUMNS), np.int64)
    taken = _blocks_taken(runs, num_steps, block_size)
    step = at = 0
    for row in range(len(si)):
        k = row_durations(sf, si, row, kind, cost, run_step_s, at, buffer)
        if k > 1:
            at += k
        start = sf[row, F_START]
        free = si[row, S_FREE]
        # the arrivals queued before a step are those at or before its start
        base = si[row, S_WAITING] - np.searchsorted(arrival, start, side="right")
        for s in range(k):
            floats[step, 0] = start
            floats[step, 1] = buffer[s]
            floats[step, 2] = sf[row, F_CACHED]
            for c in range(NUM_STEP_COLUMNS):
                ints[step, c] = si[row, c]
            if s > 0:  # a run's later steps
                free -= taken[step]
                ints[step, S_FREE] = free
                ints[step, S_WAITING] = base + np.searchsorted(arrival, start, side="right")
                ints[step, S_COMMON] = si[row, S_DECODE]
            start = start + buffer[s]
            step += 1
    return floats, ints


@core_jit
def _row_gaps(
    sf: Any, si: Any, row: int, kind: int, cost: Any, run_step_s: Any, at: int, buffer: Any, weights: Any
) -> int:
    """Row ``row``'s shared inter-token gaps: their values [s] into ``buffer`` (over the
    durations) and multiplicities into ``weights``; returns how many steps (``at``: as for
    :func:`row_durations`)."""
    k = row_durations(sf, si, row, kind, cost, run_step_s, at, buffer)
    start = sf[row, F_START]
    for s in range(k):
        duration = buffer[s]
        buffer[s] = (start + duration) - start
        weights[s] = si[row, S_COMMON] if s == 0 else si[row, S_DECODE]
        start = start + duration
    return k


@core_jit
def gap_counts(si: Any, num_singles: int) -> tuple[Any, Any]:
    """The entries :func:`gap_arrays` visits (a step each, and the single gaps) and the gaps
    they count (multiplicities included)."""
    entries = gaps = np.int64(num_singles)
    for row in range(len(si)):
        k = np.int64(si[row, S_NUM_STEPS])
        entries += k
        gaps += np.int64(si[row, S_COMMON]) + (k - 1) * np.int64(si[row, S_DECODE])
    return entries, gaps


@core_jit
def _digit_counts(bits: Any, weight: int, level: int, prefixes: Any, hist: Any) -> None:
    """Count a gap (its float's ``bits``) in the histogram of every slot whose prefix (its
    ``level`` leading 16-bit digits) it has."""
    digit = (bits >> (48 - 16 * level)) & 0xFFFF
    for slot in range(len(prefixes)):
        if level == 0 or (bits >> (64 - 16 * level)) == prefixes[slot]:
            hist[slot, digit] += weight


@core_jit
def _gap_pass(
    sf: Any,
    si: Any,
    singles: Any,
    kind: int,
    cost: Any,
    run_step_s: Any,
    buffer: Any,
    weights: Any,
    values: Any,
    counts: Any,
    level: int,
    prefixes: Any,
    hist: Any,
) -> int:
    """Visit every gap of multiplicity > 0: ``singles`` (one each), then each step's shared gaps.
    With ``hist`` empty, write them into ``values`` and ``counts`` and return how many; else
    count them in ``hist`` (:func:`_digit_counts`) and return 0."""
    collect = hist.shape[0] == 0
    filled = 0
    single_bits = singles.view(np.int64)
    for i in range(len(singles)):
        if collect:
            values[filled] = singles[i]
            counts[filled] = 1
            filled += 1
        else:
            _digit_counts(single_bits[i], 1, level, prefixes, hist)
    bits = buffer.view(np.int64)
    at = 0
    for row in range(len(si)):
        k = _row_gaps(sf, si, row, kind, cost, run_step_s, at, buffer, weights)
        if k > 1:
            at += k
        for s in range(k):
            if weights[s] == 0:
                continue
            if collect:
                values[filled] = buffer[s]
                counts[filled] = weights[s]
                filled += 1
            else:
                _digit_counts(bits[s], weights[s], level, prefixes, hist)
    return filled


@core_jit
def gap_arrays(
    sf: Any, si: Any, singles: Any, kind: int, cost: Any, run_step_s: Any, buffer: Any, weights: Any
) -> tuple[Any, Any]:
    """Every inter-token gap as (value [s], multiplicity) pairs: ``singles`` (one each), then
    each step's shared gaps (those of multiplicity 0 left out)."""
    size = len(singles)
    for row in range(len(si)):
        size += si[row, S_NUM_STEPS]
    values = np.empty(size)
    counts = np.empty(size, np.int64)
    none = np.zeros((0, 65536), np.int64)
    filled = _gap_pass(
        sf, si, singles, kind, cost, run_step_s, buffer, weights, values, counts, 0, np.zeros(0, np.int64), none
    )
    return values[:filled], counts[:filled]


@core_jit
def gap_digits(
    sf: Any,
    si: Any,
    singles: Any,
    kind: int,
    cost: Any,
    run_step_s: Any,
    buffer: Any,
    weights: Any,
    level: int,
    prefixes: Any,
) -> Any:
    """For each slot of ``prefixes`` (the leading ``level`` 16-bit digits of a gap's float64 bit
    pattern, ``level`` 0 to 3), the gaps' multiplicities by their next digit: one pass of a
    radix selection (a non-negative float's bits order as it does). Returns ``(slots, 65536)``."""
    hist = np.zeros((len(prefixes), 65536), np.int64)
    _gap_pass(
        sf,
        si,
        singles,
        kind,
        cost,
        run_step_s,
        buffer,
        weights,
        np.zeros(0),
        np.zeros(0, np.int64),
        level,
        prefixes,
        hist,
    )
    return hist
