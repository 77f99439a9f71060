"""Workloads as tables and numbers: DataFrame round trips and headline statistics.

:data:`REQUEST_COLUMNS` are the four required columns of an *input* request table
(:func:`requests_to_frame`, :func:`requests_from_frame`), and :data:`PRIORITY_COLUMN`,
:data:`PREFIX_ID_COLUMN` and :data:`PREFIX_TOKENS_COLUMN` the optional ones
(``Request.priority``, ``prefix_id`` and ``prefix_tokens``; 0, None and 0 when absent); the
simulator's per-request *results*
have their own columns (``budgetlab.simulator.RESULT_COLUMNS``). :func:`trace_stats` gives the
headline numbers of a list of requests, :func:`workload_stats` those of a sweepable workload
(what notebooks 07 and 08 tabulate), and :func:`mean_total_tokens` /
:func:`mean_lengths_tokens` the mean lengths the sweepable workloads and the tuner use.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from budgetlab._checks import is_int
from budgetlab.specs import Request

if TYPE_CHECKING:  # the package imports this module
    from budgetlab.workload import SweepWorkload

__all__ = [
    "REQUEST_COLUMNS",
    "PRIORITY_COLUMN",
    "PREFIX_ID_COLUMN",
    "PREFIX_TOKENS_COLUMN",
    "trace_stats",
    "workload_stats",
    "WORKLOAD_STATS",
    "requests_to_frame",
    "requests_from_frame",
    "mean_total_tokens",
    "mean_lengths_tokens",
    "fixed_lengths_label",
]

REQUEST_COLUMNS = ("request_id", "arrival_at_s", "prompt_tokens", "output_tokens")
"""Columns of :func:`requests_to_frame` (the required columns of an input table)."""

PRIORITY_COLUMN = "priority"
"""The optional column of an input table holding ``Request.priority`` (0 when absent)."""

PREFIX_ID_COLUMN = "prefix_id"
"""The optional column of an input table holding ``Request.prefix_id`` (an int, a str, or
None / NaN for a request that shares nothing; None when the column is absent)."""

PREFIX_TOKENS_COLUMN = "prefix_tokens"
"""The optional column of an input table holding ``Request.prefix_tokens`` [tokens] (0 when
absent, and where the row's prefix id is None and the cell NaN)."""


def trace_stats(requests: Sequence[Request]) -> dict[str, float | int]:
    """Headline numbers of a workload, for notebooks and sanity checks.

    Parameters
    ----------
    requests : sequence of Request
        At least one.

    Returns
    -------
    dict
        ``num_requests`` [count]; ``duration_s`` (last minus first arrival) [s];
        ``rate_per_s`` = ``(num_requests - 1) / duration_s`` [1/s] (NaN when the duration is
        0); ``interarrival_cv`` [-] (std over mean of the gaps, NaN with fewer than two gaps or
        a zero mean); ``prompt_p50_tokens``, ``prompt_p90_tokens``, ``prompt_mean_tokens``,
        ``output_p50_tokens``, ``output_p90_tokens``, ``output_mean_tokens`` [tokens]
        (percentiles with numpy's linear interpolation); ``shared_prefix_fraction`` [-], the
        share of all prompt tokens that an earlier request (by arrival, ties in input order)
        already declared as part of the same ``prefix_id`` stream, i.e.
        ``min(prompt_tokens, prefix_tokens, the largest earlier prefix_tokens of that id)``
        summed over requests: the prefix-cache hit rate of an unbounded cache, before block
        rounding (0 when no request declares a prefix).

    Examples
    --------
    Three requests of ``prefix_id="sys0"``, each with a 100-token system prompt and a 20-token
    message (prompt 120, ``prefix_tokens`` 100): the first shares with nobody earlier, the
    next two reuse 100 tokens each, so ``shared_prefix_fraction = 200 / 360 = 5/9``.
    """
    if len(requests) == 0:
        raise ValueError("trace_stats needs at least one request")
    arrivals = np.sort(np.array([r.arrival_at_s for r in requests], dtype=float))
    prompts = np.array([r.prompt_tokens for r in requests], dtype=float)
    outputs = np.array([r.output_tokens for r in requests], dtype=float)
    duration = float(arrivals[-1] - arrivals[0])
    gaps = np.diff(arrivals)
    rate = (len(requests) - 1) / duration if duration > 0 else math.nan
    mean_gap = float(gaps.mean()) if gaps.size else 0.0
    cv = float(gaps.std() / mean_gap) if gaps.size >= 2 and mean_gap > 0 else math.nan
    stats: dict[str, float | int] = {
        "num_requests": len(requests),
        "duration_s": duration,
        "rate_per_s": rate,
        "interarrival_cv": cv,
    }
    for name, values in (("prompt", prompts), ("output", outputs)):
        p50, p90 = np.quantile(values, [0.5, 0.9])
        stats[f"{name}_p50_tokens"] = float(p50)
        stats[f"{name}_p90_tokens"] = float(p90)
        stats[f"{name}_mean_tokens"] = float(values.mean())
    stats["shared_prefix_fraction"] = _declared_shared_tokens(requests) / float(prompts.sum())
    return stats


def _declared_shared_tokens(requests: Sequence[Request]) -> int:
    """Prompt tokens whose stream an earlier request of the same prefix id declared [tokens]."""
    order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_at_s)  # stable
    longest: dict[int | str, int] = {}  # per prefix id, the longest stream declared so far
    shared = 0
    for i in order:
        request = requests[i]
        if request.prefix_id is None:
            continue
        before = longest.get(request.prefix_id, 0)
        shared += min(request.prompt_tokens, request.prefix_tokens, before)
        longest[request.prefix_id] = max(before, request.prefix_tokens)
    return shared


WORKLOAD_STATS = (
    "prompt_p50_tokens",
    "prompt_p90_tokens",
    "prompt_mean_tokens",
    "output_p50_tokens",
    "output_p90_tokens",
    "output_mean_tokens",
    "sequence_mean_tokens",
    "num_requests",
)
"""The keys of :func:`workload_stats`, in the order tables list them."""


def workload_stats(workload: SweepWorkload, *, seed: int = 0) -> dict[str, float | int]:
    """Prompt and output lengths of a sweepable workload, and how many requests it simulates.

    The requests are drawn at 1 req/s: the lengths do not depend on the load.

    Parameters
    ----------
    workload : SweepWorkload
        A :class:`~budgetlab.workload.SyntheticWorkload`, a
        :class:`~budgetlab.workload.TraceWorkload` or any object with ``label`` and
        ``requests(rate_per_s=..., seed=...)``.
    seed : int
        Workload seed [-].

    Returns
    -------
    dict
        :data:`WORKLOAD_STATS`: the median, 90th percentile and mean of the prompt and of the
        output (as :func:`trace_stats`) [tokens], ``sequence_mean_tokens``, the mean prompt +
        output (:func:`~budgetlab.workload.mean_sequence_tokens`) [tokens], and
        ``num_requests``, the requests in one simulation [count].

    Examples
    --------
    Requests of 100 + 10 and 300 + 30 tokens: prompt median and mean 200, 90th percentile 280
    (linear interpolation), output 20 / 28 / 20, ``sequence_mean_tokens`` 220,
    ``num_requests`` 2.
    """
    from budgetlab.workload import mean_sequence_tokens  # the package imports this module

    requests = workload.requests(rate_per_s=1.0, seed=seed)
    stats = trace_stats(requests)
    numbers: dict[str, float | int] = {key: stats[key] for key in WORKLOAD_STATS[:6]}
    numbers["sequence_mean_tokens"] = mean_sequence_tokens(workload, seed=seed)
    numbers["num_requests"] = len(requests)
    return numbers


def requests_to_frame(requests: Iterable[Request]) -> pd.DataFrame:
    """One row per request: ``request_id``, ``arrival_at_s`` [s], ``prompt_tokens``,
    ``output_tokens`` [tokens], in the given order, and ``priority`` (int64) when some request
    has a priority other than 0 (so a default-priority workload keeps the four columns), and
    ``prefix_id`` (object: int, str or None) and ``prefix_tokens`` (int64) [tokens] when some
    request has a ``prefix_id``."""
    requests = list(requests)
    rows = [(r.request_id, r.arrival_at_s, r.prompt_tokens, r.output_tokens) for r in requests]
    frame = pd.DataFrame(rows, columns=list(REQUEST_COLUMNS))
    frame = frame.astype({"arrival_at_s": float, "prompt_tokens": np.int64, "output_tokens": np.int64})
    if any(r.priority != 0 for r in requests):
        frame[PRIORITY_COLUMN] = np.array([r.priority for r in requests], dtype=np.int64)
    if any(r.prefix_id is not None for r in requests):
        frame[PREFIX_ID_COLUMN] = pd.Series([r.prefix_id for r in requests], dtype=object)
        frame[PREFIX_TOKENS_COLUMN] = np.array([r.prefix_tokens for r in requests], dtype=np.int64)
    return frame


def requests_from_frame(frame: pd.DataFrame) -> list[Request]:
    """Requests from a DataFrame with the columns of :func:`requests_to_frame`.

    ``request_id`` is optional (0, 1, ... when absent), and so are ``priority`` (0 when
    absent), ``prefix_id`` (None when absent; a None or NaN cell is None, a whole-valued float
    an int) and ``prefix_tokens`` (0 when absent, and a NaN cell of a row without a prefix id);
    extra columns are ignored. Token and priority columns may hold ints or whole-valued floats.

    Raises
    ------
    ValueError
        A missing column, or a row :class:`~budgetlab.specs.Request` refuses (the message
        names the row).
    """
    missing = [c for c in REQUEST_COLUMNS[1:] if c not in frame.columns]
    if missing:
        raise ValueError(
            f"frame lacks column(s) {', '.join(missing)}; requests need "
            f"{', '.join(REQUEST_COLUMNS)} (request_id optional)"
        )
    ids = frame["request_id"].tolist() if "request_id" in frame.columns else list(range(len(frame)))
    priorities = frame[PRIORITY_COLUMN].tolist() if PRIORITY_COLUMN in frame.columns else [0] * len(frame)
    prefix_ids = frame[PREFIX_ID_COLUMN].tolist() if PREFIX_ID_COLUMN in frame.columns else [None] * len(frame)
    shared = frame[PREFIX_TOKENS_COLUMN].tolist() if PREFIX_TOKENS_COLUMN in frame.columns else [0] * len(frame)
    requests = []
    columns = (frame[c].tolist() for c in REQUEST_COLUMNS[1:])
    for position, (rid, t, p, o, q, pid, pt) in enumerate(zip(ids, *columns, priorities, prefix_ids, shared)):
        prefix_id = _plain_prefix_id(pid)
        if prefix_id is None and _is_missing(pt):
            pt = 0
        try:
            requests.append(
                Request(
                    _plain_id(rid),
                    _plain_time(t),  # type: ignore[arg-type]
                    _plain_int(p),  # type: ignore[arg-type]
                    _plain_int(o),  # type: ignore[arg-type]
                    _plain_int(q),  # type: ignore[arg-type]
                    prefix_id,  # type: ignore[arg-type]  # Request names a bad one
                    _plain_int(pt),  # type: ignore[arg-type]
                )
            )
        except ValueError as exc:
            raise ValueError(f"frame row {position}: {exc}") from None
    return requests


def _plain_id(value: object) -> int | str:
    if is_int(value):
        return int(value)  # type: ignore[call-overload]  # is_int: an Integral
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value  # type: ignore[return-value]  # Request accepts str ids; others pass through


def _is_missing(value: object) -> bool:
    """None, NaN or pandas' NA / NaT: an empty cell."""
    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value))


def _plain_prefix_id(value: object) -> object:
    """A prefix id cell as Request takes it: None for an empty cell, ints for whole numbers."""
    if _is_missing(value):
        return None
    return _plain_id(value)


def _plain_time(value: object) -> object:
    if is_int(value):
        return float(value)  # type: ignore[arg-type]  # is_int: an Integral
    return value


def _plain_int(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def mean_total_tokens(requests: Sequence[Request]) -> float:
    """Mean prompt + output length [tokens]."""
    return float(np.mean([r.prompt_tokens + r.output_tokens for r in requests]))


def mean_lengths_tokens(requests: Sequence[Request]) -> tuple[int, int]:
    """Mean prompt and mean output length, rounded to whole tokens, at least 1 [tokens]."""
    stats = trace_stats(requests)
    return max(1, round(stats["prompt_mean_tokens"])), max(1, round(stats["output_mean_tokens"]))


def fixed_lengths_label(prompt_tokens: int, output_tokens: int) -> str:
    """Table label of a fixed-length twin: ``"fixed lengths (1,234 + 345 tokens)"``."""
    return f"fixed lengths ({prompt_tokens:,} + {output_tokens:,} tokens)"
