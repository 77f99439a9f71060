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
TPOT ``tpot_*_s``
    Time per output token, per request as ``vllm bench serve`` reports it: the request's
    ``mean_itl_s``; the TPOT percentiles and mean are over the requests with at least two
    output tokens (request-weighted, unlike ITL's token weighting) [s].
E2E ``e2e_s``
    Finish (last token) minus arrival [s].
Throughput ``throughput_tokens_per_s``
    Output tokens of all requests divided by the makespan, ``last finish − first arrival`` [s].
Times
    A simulation's times (``*_at_s``) count from the trace's origin, its first arrival
    (:attr:`SimResult.time_origin_s <budgetlab.simulator.SimResult>`); every latency above is a
    difference of two of them and does not depend on it.
Gates ``step_gates``
    After the scheduler filled a step, requests still waiting were held back by one of the three
    gates of :class:`budgetlab.admission.Gate`, the package's one gate vocabulary: ``slot``
    (the running list holds ``max_num_seqs`` requests), ``budget`` (the step's tokens reached
    ``max_num_batched_tokens``) or ``kv`` (neither, so the head of the queue did not fit the free
    KV blocks; a step that preempted someone skips admission altogether and counts here too).
    ``none`` marks a step with nobody waiting. The strings are the members' keys
    (``Gate.KV.key == "kv"``) and ``Gate(key).label`` is the gate in words. Every report that
    says which gate binds (:func:`gate_stats` in every sweep row, the tuner's binding gate,
    notebook 05's gate shares) uses this one classification.

Numbers of whole runs
---------------------
:func:`timeline` bins a run's steps in time (what notebook 05's timelines draw),
:func:`gate_shares` weighs each gate by the busy time it held requests back, and
:func:`run_numbers` gathers a run's configuration, summary and :func:`busy_stats` in one dict.

Percentiles
-----------
Every percentile is NumPy's default ``np.quantile(values, q, method="linear")`` (Hyndman &
Fan type 7). The inter-token gaps are stored compressed, as (value, multiplicity) pairs;
:func:`quantile` with ``weights`` returns exactly — to the last bit —
``np.quantile(np.repeat(values, weights), q)`` without expanding the array. A run's gaps reach
:func:`summarize` as a :class:`GapSample`: :class:`WeightedGaps` holds such pairs, and a
compiled run too long to gather its gaps selects the values at the ranks needed
(:func:`quantile_of_ranked` interpolates between them as NumPy does).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from budgetlab.admission import Gate
from budgetlab.specs import EngineConfig

if TYPE_CHECKING:  # the simulator imports this module
    from budgetlab.simulator import SimResult

__all__ = [
    "quantile",
    "quantile_of_ranked",
    "GapSample",
    "WeightedGaps",
    "summarize",
    "SUMMARY_QUANTILES",
    "GATES",
    "step_gates",
    "busy_stats",
    "gate_stats",
    "GATE_STATS",
    "GATE_FRACTION_COLUMNS",
    "run_end_s",
    "timeline",
    "gate_shares",
    "run_numbers",
]

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
        out = np.full(q_arr.shape, np.nan) if vals.size == 0 else np.asarray(np.quantile(vals, q_arr))
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
    # Value at expanded position p: the first sorted value whose cumulative count exceeds p.
    return quantile_of_ranked(q_arr, total, lambda ranks: sorted_vals[np.searchsorted(cum, ranks, side="right")])


def quantile_of_ranked(q: ArrayLike, total: int, value_at: Callable[[np.ndarray], np.ndarray]) -> np.ndarray | float:
    """Linear-interpolation quantile(s) of a sample of ``total`` values known by rank.

    The interpolation of :func:`quantile` (NumPy's virtual index, neighbours and lerp, bit for
    bit) over a sample that need not be in memory: ``value_at(ranks)`` returns the values at
    the given 0-based positions of the sorted sample (an int64 array in, a float array out).

    Parameters
    ----------
    q : float or array_like of float
        Quantiles in [0, 1] (checked by the caller).
    total : int
        Size of the sample (0: NaN for each ``q``).
    value_at : callable
        Sorted-sample lookup, called once with every position needed.

    Returns
    -------
    float or numpy.ndarray
    """
    q_arr = np.asarray(q, dtype=float)
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
    ranks = np.asarray(value_at(np.concatenate((previous.ravel(), nxt.ravel())).astype(np.int64)), dtype=float)
    a = ranks[: previous.size].reshape(previous.shape)
    b = ranks[previous.size :].reshape(nxt.shape)
    diff_b_a = b - a
    out = np.asarray(a + diff_b_a * gamma)
    out = np.where(gamma >= 0.5, b - diff_b_a * (1 - gamma), out)
    return float(out) if out.ndim == 0 else out


class GapSample(Protocol):
    """A run's inter-token gaps as :func:`summarize` reads them: their number, largest value
    [s] and quantiles (:func:`quantile`'s), however they are stored."""

    @property
    def num_gaps(self) -> int: ...

    def max_s(self) -> float: ...

    def quantile(self, q: np.ndarray) -> np.ndarray: ...

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every gap as (value [s], multiplicity) pairs, in memory."""
        ...


class WeightedGaps:
    """Gaps as (value [s], multiplicity) pairs in memory (a :class:`GapSample`)."""

    def __init__(self, values_s: np.ndarray, weights: np.ndarray) -> None:
        self.values_s = np.asarray(values_s, dtype=float)
        self.weights = np.asarray(weights)

    @property
    def num_gaps(self) -> int:
        return int(np.sum(self.weights)) if len(self.weights) else 0

    def max_s(self) -> float:
        return float(np.max(self.values_s[self.weights > 0])) if self.num_gaps else math.nan

    def quantile(self, q: np.ndarray) -> np.ndarray:
        return np.asarray(quantile(self.values_s, q, weights=self.weights))

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        return self.values_s, self.weights


def summarize(
    *,
    arrival_at_s: np.ndarray,
    first_token_at_s: np.ndarray,
    finished_at_s: np.ndarray,
    output_tokens: np.ndarray,
    prompt_tokens: np.ndarray,
    gap_values_s: np.ndarray | None = None,
    gap_weights: np.ndarray | None = None,
    gaps: GapSample | None = None,
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
    gap_values_s, gap_weights : numpy.ndarray, optional
        Every inter-token gap of every request as (value [s], multiplicity) pairs ...
    gaps : GapSample, optional
        ... or as a :class:`GapSample` (one of the two).
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
    ttft_q = np.asarray(quantile(ttft, qs))  # an array: qs is one
    e2e_q = np.asarray(quantile(e2e, qs))
    if (gaps is None) == (gap_values_s is None or gap_weights is None):
        raise TypeError("summarize takes the gaps as gap_values_s with gap_weights, or as gaps")
    if gaps is None:
        gaps = WeightedGaps(cast(np.ndarray, gap_values_s), cast(np.ndarray, gap_weights))
    itl_q = gaps.quantile(qs)
    num_gaps = gaps.num_gaps
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
    summary["max_itl_s"] = gaps.max_s() if num_gaps else float("nan")
    several = output_tokens > 1  # requests with at least one gap: vLLM's TPOT is theirs
    tpot = (finished_at_s[several] - first_token_at_s[several]) / (output_tokens[several] - 1)
    tpot_q = np.asarray(quantile(tpot, qs)) if tpot.size else np.full(len(labels), np.nan)
    for label, value in zip(labels, tpot_q):
        summary[f"tpot_{label}_s"] = float(value)
    summary["tpot_mean_s"] = float(np.mean(tpot)) if tpot.size else float("nan")
    for label, value in zip(labels, e2e_q):
        summary[f"e2e_{label}_s"] = float(value)
    summary["e2e_mean_s"] = float(np.mean(e2e))
    summary["makespan_s"] = makespan
    summary["throughput_tokens_per_s"] = num_output / makespan if makespan > 0 else float("nan")
    summary["requests_per_s"] = len(arrival_at_s) / makespan if makespan > 0 else float("nan")
    summary["num_requests"] = len(arrival_at_s)
    summary["num_prompt_tokens"] = int(np.sum(prompt_tokens))
    summary["num_output_tokens"] = num_output
    summary["num_steps"] = int(num_steps)
    summary["num_preemptions"] = int(num_preemptions)
    summary["kv_peak_blocks"] = int(kv_peak_blocks)
    summary["num_kv_blocks"] = int(num_kv_blocks)
    summary["kv_peak_fraction"] = kv_peak_blocks / num_kv_blocks
    return summary


#: What held a step's waiting requests back (see "Gates" above), in the order reports list them:
#: the keys of :class:`budgetlab.admission.Gate` (``"slot"``, ``"budget"``, ``"kv"``, ``"none"``).
GATES = tuple(gate.key for gate in Gate)


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

        (the keys of :class:`budgetlab.admission.Gate`; ``Gate(key).label`` in words).
    """
    tokens = steps["num_decode_tokens"].to_numpy() + steps["num_prefill_tokens"].to_numpy()
    waiting = steps["num_waiting"].to_numpy() > 0
    preempted = steps["num_preemptions"].to_numpy() > 0
    at_cap = steps["num_running"].to_numpy() >= max_num_seqs
    budget_full = tokens >= max_num_batched_tokens
    slot = waiting & ~preempted & at_cap
    budget = waiting & ~preempted & ~slot & budget_full
    kv = waiting & ~slot & ~budget
    gate = np.select([slot, budget, kv], [Gate.SLOT.key, Gate.BUDGET.key, Gate.KV.key], default=Gate.NONE.key)
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


GATE_FRACTION_COLUMNS: Mapping[Gate, str] = MappingProxyType(
    {
        Gate.SLOT: "cap_bound_fraction",
        Gate.BUDGET: "budget_full_fraction",
        Gate.KV: "kv_blocked_fraction",
    }
)
"""The :func:`gate_stats` column that measures each gate (the sweep tables' column names)."""

GATE_STATS = (*GATE_FRACTION_COLUMNS.values(), "budget_utilization_fraction")
"""Columns :func:`gate_stats` adds to every sweep row."""


def gate_stats(result: SimResult, *, engine: EngineConfig) -> dict[str, float]:
    """Which of the three gates held requests back, from a simulation's step table.

    Built on :func:`step_gates`, the one per-step classification every report uses; the
    columns per gate are :data:`GATE_FRACTION_COLUMNS`.

    Parameters
    ----------
    result : SimResult
        What :func:`budgetlab.simulate` returned.
    engine : EngineConfig
        The configuration it ran with.

    Returns
    -------
    dict
        Fractions of the executed steps [-] (NaN when no step ran):

        ``cap_bound_fraction`` (:attr:`Gate.SLOT <budgetlab.admission.Gate.SLOT>`)
            Running count pinned at ``max_num_seqs``: the sequence-slot gate.
        ``budget_full_fraction`` (:attr:`Gate.BUDGET <budgetlab.admission.Gate.BUDGET>`)
            Tokens filling the whole ``max_num_batched_tokens``: the token gate.
        ``kv_blocked_fraction`` (:attr:`Gate.KV <budgetlab.admission.Gate.KV>`)
            A request waited although a slot and budget were left: the head of the queue did
            not fit the free KV blocks, or the step preempted (the KV gate; steps whose
            ``step_gates`` gate is ``"kv"``).
        ``budget_utilization_fraction``
            Mean tokens per step over the budget.

        With the summary's ``kv_peak_fraction`` and ``num_preemptions`` these tell which gate
        binds.
    """
    steps = result.steps
    if len(steps) == 0:
        return dict.fromkeys(GATE_STATS, math.nan)
    budget = engine.max_num_batched_tokens
    gates = step_gates(steps, max_num_seqs=engine.max_num_seqs, max_num_batched_tokens=budget)
    return {
        GATE_FRACTION_COLUMNS[Gate.SLOT]: float(np.mean(gates["at_cap"].to_numpy())),
        GATE_FRACTION_COLUMNS[Gate.BUDGET]: float(np.mean(gates["budget_full"].to_numpy())),
        GATE_FRACTION_COLUMNS[Gate.KV]: float(np.mean(gates["gate"].to_numpy() == Gate.KV.key)),
        "budget_utilization_fraction": float(np.mean(gates["num_tokens"].to_numpy()) / budget),
    }


def _time_weighted(values: np.ndarray, weights: np.ndarray, bins: np.ndarray, num_bins: int) -> np.ndarray:
    """Per-bin mean of ``values`` weighted by ``weights`` (0 in a bin with no weight)."""
    total = np.bincount(bins, weights=weights, minlength=num_bins)
    summed = np.bincount(bins, weights=values * weights, minlength=num_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, summed / total, 0.0)


def run_end_s(result: SimResult) -> float:
    """When a run's last step ends [s]: the latest ``start_at_s + duration_s`` of its steps
    (since the trace's origin, :attr:`SimResult.time_origin_s <budgetlab.simulator.SimResult>`)."""
    steps = result.steps
    return float((steps["start_at_s"] + steps["duration_s"]).max())


def timeline(result: SimResult, *, num_bins: int = 120, end_s: float | None = None) -> pd.DataFrame:
    """A run's steps aggregated into ``num_bins`` equal time bins from 0 to ``end_s``.

    Times are the result's, from the trace's origin (its first arrival, so a trace in epoch
    seconds is binned from its start too).

    Each step counts in the bin where it starts (a step starting at or after ``end_s`` counts
    in the last bin) and weighs its duration. Pass the same ``end_s`` to several runs to put
    them on one time axis.

    Parameters
    ----------
    result : SimResult
        What :func:`budgetlab.simulate` returned (at least one step).
    num_bins : int
        Time bins [count], at least 1.
    end_s : float, optional
        Where the last bin ends [s]; default :func:`run_end_s` of ``result``.

    Returns
    -------
    pandas.DataFrame
        One row per bin with steps in it: ``bin`` (its index), ``running_mean``,
        ``waiting_mean`` (duration-weighted means of the running and waiting requests after
        scheduling [count]), ``kv_used_fraction_mean`` (duration-weighted share of the KV
        blocks in use [-]), ``tokens_per_step_mean`` (duration-weighted [tokens]),
        ``num_preemptions`` (sum [count]), ``busy_fraction`` (the bin's step time over its
        width, at most 1 [-]), ``running_max`` [count], ``kv_used_fraction_max`` [-],
        ``time_s`` (bin start [s]) and ``max_num_seqs`` (the run's cap [count]).

    Raises
    ------
    ValueError
        ``num_bins`` below 1.

    Examples
    --------
    Steps of 1 s at 0 s, 2 s at 1 s and 1 s at 3 s, in two bins (``end_s`` 4 s, bins of 2 s):
    the first bin holds the first two steps, so its ``busy_fraction`` is min(3 / 2, 1) = 1 and
    its ``running_mean`` weighs their running counts 1 : 2; the second holds the last step and
    is busy half the time (0.5).
    """
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    end = run_end_s(result) if end_s is None else float(end_s)
    width = end / num_bins
    steps = result.steps
    tokens = steps["num_decode_tokens"].to_numpy() + steps["num_prefill_tokens"].to_numpy()
    kv_used = 1.0 - steps["num_free_kv_blocks"].to_numpy() / result.num_kv_blocks
    bins = np.minimum((steps["start_at_s"].to_numpy() / width).astype(np.int64), num_bins - 1)
    weight = steps["duration_s"].to_numpy()
    frame = pd.DataFrame(
        {
            "bin": np.arange(num_bins),
            "running_mean": _time_weighted(steps["num_running"].to_numpy(float), weight, bins, num_bins),
            "waiting_mean": _time_weighted(steps["num_waiting"].to_numpy(float), weight, bins, num_bins),
            "kv_used_fraction_mean": _time_weighted(kv_used, weight, bins, num_bins),
            "tokens_per_step_mean": _time_weighted(tokens.astype(float), weight, bins, num_bins),
            "num_preemptions": np.bincount(bins, weights=steps["num_preemptions"].to_numpy(float), minlength=num_bins),
            "busy_fraction": np.minimum(np.bincount(bins, weights=weight, minlength=num_bins) / width, 1.0),
        }
    )
    grouped = pd.DataFrame({"bin": bins, "num_running": steps["num_running"].to_numpy(), "kv_used": kv_used}).groupby(
        "bin"
    )
    frame = frame.merge(
        pd.DataFrame({"running_max": grouped["num_running"].max(), "kv_used_fraction_max": grouped["kv_used"].max()}),
        left_on="bin",
        right_index=True,
        how="inner",
    )
    frame["time_s"] = frame["bin"] * width
    frame["max_num_seqs"] = result.engine.max_num_seqs
    return frame.reset_index(drop=True)


def gate_shares(result: SimResult) -> pd.DataFrame:
    """Which gate held a run's waiting requests back, as a share of its busy time.

    Each step is classified by :func:`step_gates` and weighs its duration, so the four
    fractions add up to 1 (0 each when no step ran).

    Parameters
    ----------
    result : SimResult
        What :func:`budgetlab.simulate` returned.

    Returns
    -------
    pandas.DataFrame
        Indexed by the :class:`~budgetlab.admission.Gate` keys in :data:`GATES` order
        (``"slot"``, ``"budget"``, ``"kv"``, ``"none"``; ``Gate(key).label`` in words):
        ``time_s`` (the steps' time with that gate holding requests back [s]) and
        ``fraction`` (that time over all steps' time [-]).

    Examples
    --------
    Steps of 1 s (nobody waiting), 2 s (at the cap, someone waiting) and 1 s (someone waiting,
    a preemption): ``none`` 0.25, ``slot`` 0.5, ``budget`` 0, ``kv`` 0.25.
    """
    engine = result.engine
    steps = result.steps
    gates = step_gates(steps, max_num_seqs=engine.max_num_seqs, max_num_batched_tokens=engine.max_num_batched_tokens)[
        "gate"
    ].to_numpy()
    duration = steps["duration_s"].to_numpy()
    busy = float(duration.sum())
    times = [float(duration[gates == gate].sum()) for gate in GATES]
    return pd.DataFrame(
        {"time_s": times, "fraction": [t / busy if busy > 0 else 0.0 for t in times]},
        index=pd.Index(list(GATES), name="gate"),
    )


def run_numbers(result: SimResult) -> dict[str, float | int | str]:
    """A run's configuration and headline numbers in one flat dict (SI units).

    Parameters
    ----------
    result : SimResult
        What :func:`budgetlab.simulate` returned (at least one step).

    Returns
    -------
    dict
        ``policy`` (the step order), ``scheduling_policy`` (the waiting queue's),
        ``enable_prefix_caching``, ``async_scheduling``, ``max_num_seqs`` [count], ``max_num_batched_tokens`` [tokens],
        ``long_prefill_token_threshold`` [tokens], ``num_kv_blocks`` [blocks], ``kv_tokens``
        (the pool in tokens, blocks × ``block_size``), every key of
        :meth:`SimResult.summary <budgetlab.simulator.SimResult.summary>`, and
        :func:`busy_stats`' ``running_mean``, ``running_max``, ``tokens_per_step_mean`` and
        ``busy_fraction``.
    """
    engine = result.engine
    summary = result.summary()
    return {
        "policy": engine.policy,
        "scheduling_policy": engine.scheduling_policy,
        "enable_prefix_caching": engine.enable_prefix_caching,
        "async_scheduling": engine.async_scheduling,
        "max_num_seqs": engine.max_num_seqs,
        "max_num_batched_tokens": engine.max_num_batched_tokens,
        "long_prefill_token_threshold": engine.long_prefill_token_threshold,
        "num_kv_blocks": result.num_kv_blocks,
        "kv_tokens": result.num_kv_blocks * engine.block_size,
        **summary,
        **busy_stats(result.steps, makespan_s=float(summary["makespan_s"])),
    }
