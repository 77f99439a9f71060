"""Latency metrics of a simulated run: percentiles, inter-token gaps, the summary dict.

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
from numpy.typing import ArrayLike

__all__ = ["quantile", "summarize", "SUMMARY_QUANTILES"]

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
