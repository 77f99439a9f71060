"""Metrics of a simulated run: percentiles, inter-token gaps, the summary dict, and which gate
held waiting requests back at each step.

Definitions (the glossary every notebook uses)
----------------------------------------------
TTFT ``ttft_s``
    First output token's time minus the request's arrival [s]. The first token is sampled at
    the end of the step that finishes the prompt.
ITL ``itl_*_s``
    Inter-token latency, per token as a user sees it: the gap between two consecutive output
    tokens of one request [s]. A request with ``k`` output tokens has ``k − 1`` gaps; a
    preempted request's gap spans its recompute. The ITL percentiles are over *all gaps of all
    requests* (token-weighted: a long answer weighs more than a short one).
``mean_itl_s`` (per request)
    ``(finished − first token) / (k − 1)``, the mean of that request's gaps (NaN when k = 1).
E2E ``e2e_s``
    Finish (last token) minus arrival [s].
Throughput ``throughput_tokens_per_s``
    Output tokens of all requests divided by the makespan, ``last finish − first arrival`` [s].
Gates ``step_gates``
    After the scheduler filled a step, requests still waiting were held back by one of the three
    gates: ``slot`` (the running list holds ``max_num_seqs`` requests), ``budget`` (the step's
    tokens reached ``max_num_batched_tokens``) or ``kv`` (neither, so the head of the queue did
    not fit the free KV blocks; a step that preempted someone skips admission altogether and
    counts here too). ``none`` marks a step with nobody waiting. Every report that says which
    gate binds (the sweeps' gate diagnostics, notebook 05's gate shares) uses this one
    classification.

Percentiles
-----------
Every percentile is NumPy's default ``np.quantile(values, q, method="linear")`` (Hyndman &
Fan type 7). The inter-token gaps are stored compressed, as (value, multiplicity) pairs;
:func:`quantile` with ``weights`` returns exactly — to the last bit —
``np.quantile(np.repeat(values, weights), q)`` without expanding the array.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

__all__ = ["quantile", "summarize", "SUMMARY_QUANTILES", "GATES", "step_gates", "busy_stats"]

SUMMARY_QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


def quantile(values: ArrayLike, q: ArrayLike, *, weights: ArrayLike | None = None) -> np.ndarray | float:
    """Linear-interpolation quantile(s) of ``values``, optionally with integer multiplicities.

    Parameters
    ----------
    values : array_like of float
        Sample values (any order).
    q : float or array_like of float
        Quantiles in [0, 1].
    weights : array_like of int, optional
        Multiplicity of each value (>= 0): the result is that of the sample in which
        ``values[i]`` appears ``weights[i]`` times.

    Returns
    -------
    float or numpy.ndarray
        NaN (for each ``q``) when the sample is empty.

    Notes
    -----
    Equals ``np.quantile(np.repeat(values, weights), q, method="linear")`` bit for bit: the
    virtual index, the neighbours and the interpolation use NumPy's own expressions.
    """
    q_arr = np.asarray(q, dtype=float)
    if np.any((q_arr < 0) | (q_arr > 1)) or np.any(np.isnan(q_arr)):
        raise ValueError(f"quantiles must lie in [0, 1], got {q!r}")
    vals = np.asarray(values, dtype=float).ravel()
    if weights is None:
        if vals.size == 0:
            out = np.full(q_arr.shape, np.nan)
        else:
            out = np.asarray(np.quantile(vals, q_arr))
        return float(out) if out.ndim == 0 else out
    w = np.asarray(weights).ravel()
    if w.shape != vals.shape:
        raise ValueError(f"weights has shape {w.shape}, values {vals.shape}")
    if w.size and (not np.issubdtype(w.dtype, np.integer) or w.min() < 0):
        raise ValueError("weights must be integer multiplicities >= 0")
    order = np.argsort(vals, kind="stable")
    sorted_vals = vals[order]
    cum = np.cumsum(w[order].astype(np.int64))
    total = int(cum[-1]) if cum.size else 0
    if total == 0:
        out = np.full(q_arr.shape, np.nan)
        return float(out) if out.ndim == 0 else out
    # NumPy's virtual index for method="linear".
    virtual = (total - 1) * q_arr
    previous = np.floor(virtual)
    nxt = previous + 1
    above = virtual >= total - 1
    previous = np.where(above, total - 1, previous)
    nxt = np.where(above, total - 1, nxt)
    below = virtual < 0
    previous = np.where(below, 0, previous)
    nxt = np.where(below, 0, nxt)
    # gamma as NumPy computes it (its "above" index is -1, which the lerp makes irrelevant).
    gamma = virtual - np.where(above, -1, previous)
    # Value at expanded position p: the first sorted value whose cumulative count exceeds p.
    a = sorted_vals[np.searchsorted(cum, previous.astype(np.int64), side="right")]
    b = sorted_vals[np.searchsorted(cum, nxt.astype(np.int64), side="right")]
    diff_b_a = b - a
    out = np.asarray(a + diff_b_a * gamma)
    out = np.where(gamma >= 0.5, b - diff_b_a * (1 - gamma), out)
    return float(out) if out.ndim == 0 else out


def summarize(
    *,
    arrival_at_s: np.ndarray,
    first_token_at_s: np.ndarray,
    finished_at_s: np.ndarray,
    output_tokens: np.ndarray,
    prompt_tokens: np.ndarray,
    gap_values_s: np.ndarray,
    gap_weights: np.ndarray,
    num_preemptions: int,
    kv_peak_blocks: int,
    num_kv_blocks: int,
    num_steps: int,
    quantiles: dict[str, float] | None = None,
) -> dict[str, float | int]:
    """The summary dict of a run (see the module docstring for each definition).

    Parameters
    ----------
    arrival_at_s, first_token_at_s, finished_at_s : numpy.ndarray of float
        Per request [s].
    output_tokens, prompt_tokens : numpy.ndarray of int
        Per request [tokens].
    gap_values_s, gap_weights : numpy.ndarray
        Every inter-token gap of every request as (value [s], multiplicity) pairs.
    num_preemptions : int
        Preemption events in the run.
    kv_peak_blocks, num_kv_blocks : int
        Most KV blocks in use after scheduling any step, and the usable pool [blocks].
    num_steps : int
        Steps executed.
    quantiles : dict, optional
        Label → quantile for TTFT/ITL/E2E (default p50, p90, p99).
    """
    quantiles = SUMMARY_QUANTILES if quantiles is None else quantiles
    labels: Sequence[str] = list(quantiles)
    qs = np.array([quantiles[k] for k in labels], dtype=float)
    ttft = first_token_at_s - arrival_at_s
    e2e = finished_at_s - arrival_at_s
    ttft_q = quantile(ttft, qs)
    e2e_q = quantile(e2e, qs)
    itl_q = quantile(gap_values_s, qs, weights=gap_weights)
    num_gaps = int(np.sum(gap_weights)) if len(gap_weights) else 0
    makespan = float(np.max(finished_at_s) - np.min(arrival_at_s))
    num_output = int(np.sum(output_tokens))
    # Sum of all gaps = sum over requests of (last token − first token): exact telescoping.
    gap_total = float(np.sum(finished_at_s - first_token_at_s))
    summary: dict[str, float | int] = {}
    for label, value in zip(labels, ttft_q):
        summary[f"ttft_{label}_s"] = float(value)
    summary["ttft_mean_s"] = float(np.mean(ttft))
    for label, value in zip(labels, itl_q):
        summary[f"itl_{label}_s"] = float(value)
    summary["itl_mean_s"] = gap_total / num_gaps if num_gaps else float("nan")
    summary["max_itl_s"] = float(np.max(gap_values_s)) if num_gaps else float("nan")
    for label, value in zip(labels, e2e_q):
        summary[f"e2e_{label}_s"] = float(value)
    summary["e2e_mean_s"] = float(np.mean(e2e))
    summary["makespan_s"] = makespan
    summary["throughput_tokens_per_s"] = num_output / makespan if makespan > 0 else float("nan")
    summary["requests_per_s"] = len(arrival_at_s) / makespan if makespan > 0 else float("nan")
    summary["num_requests"] = int(len(arrival_at_s))
    summary["num_prompt_tokens"] = int(np.sum(prompt_tokens))
    summary["num_output_tokens"] = num_output
    summary["num_steps"] = int(num_steps)
    summary["num_preemptions"] = int(num_preemptions)
    summary["kv_peak_blocks"] = int(kv_peak_blocks)
    summary["num_kv_blocks"] = int(num_kv_blocks)
    summary["kv_peak_fraction"] = kv_peak_blocks / num_kv_blocks
    return summary


#: What held a step's waiting requests back (see "Gates" above), in the order reports list them.
GATES = ("slot", "budget", "kv", "none")


def step_gates(steps: pd.DataFrame, *, max_num_seqs: int, max_num_batched_tokens: int) -> pd.DataFrame:
    """Which gate held the waiting requests back at each step (see "Gates" above).

    Parameters
    ----------
    steps : pandas.DataFrame
        A :class:`~budgetlab.simulator.SimResult`'s ``steps`` (``num_decode_tokens``,
        ``num_prefill_tokens``, ``num_running``, ``num_waiting`` and ``num_preemptions`` are
        used; the last three are counted after scheduling the step).
    max_num_seqs : int
        The sequence cap the run used [count].
    max_num_batched_tokens : int
        The token budget the run used [tokens].

    Returns
    -------
    pandas.DataFrame
        One row per step, on ``steps``' index: ``num_tokens`` (tokens the step processed
        [tokens]), ``at_cap`` (the running count is pinned at ``max_num_seqs``, whether or not
        anyone waits), ``budget_full`` (the step's tokens fill the whole budget, likewise) and
        ``gate``, one of :data:`GATES`:

        * ``slot``: requests wait, the step preempted nobody, and ``at_cap``;
        * ``budget``: requests wait, the step preempted nobody, not ``slot``, and
          ``budget_full``;
        * ``kv``: requests wait and neither of the above (the head of the queue did not fit the
          free KV blocks), or the step preempted someone (a preempted request waits again);
        * ``none``: nobody waits.
    """
    tokens = steps["num_decode_tokens"].to_numpy() + steps["num_prefill_tokens"].to_numpy()
    waiting = steps["num_waiting"].to_numpy() > 0
    preempted = steps["num_preemptions"].to_numpy() > 0
    at_cap = steps["num_running"].to_numpy() >= max_num_seqs
    budget_full = tokens >= max_num_batched_tokens
    slot = waiting & ~preempted & at_cap
    budget = waiting & ~preempted & ~slot & budget_full
    kv = waiting & ~slot & ~budget
    gate = np.select([slot, budget, kv], ["slot", "budget", "kv"], default="none")
    return pd.DataFrame(
        {"num_tokens": tokens, "at_cap": at_cap, "budget_full": budget_full, "gate": gate.astype(object)},
        index=steps.index,
    )


def busy_stats(steps: pd.DataFrame, *, makespan_s: float) -> dict[str, float | int]:
    """How full a run's steps were, each step weighted by its duration.

    Parameters
    ----------
    steps : pandas.DataFrame
        A :class:`~budgetlab.simulator.SimResult`'s ``steps`` (at least one step).
    makespan_s : float
        The run's makespan, last finish − first arrival [s] (the summary's ``makespan_s``).

    Returns
    -------
    dict
        ``running_mean`` (duration-weighted mean of the running requests [count]),
        ``running_max`` [count], ``tokens_per_step_mean`` (duration-weighted [tokens]) and
        ``busy_fraction`` (the steps' total time over the makespan, at most 1 [-]; 1 when the
        makespan is 0).
    """
    weight = steps["duration_s"].to_numpy()
    tokens = steps["num_decode_tokens"].to_numpy() + steps["num_prefill_tokens"].to_numpy()
    busy = float(weight.sum())
    return {
        "running_mean": float(np.sum(steps["num_running"].to_numpy() * weight) / busy),
        "running_max": int(steps["num_running"].max()),
        "tokens_per_step_mean": float(np.sum(tokens * weight) / busy),
        "busy_fraction": min(busy / makespan_s, 1.0) if makespan_s > 0 else 1.0,
    }
