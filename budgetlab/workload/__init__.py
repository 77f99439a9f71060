"""Workloads for the simulator: synthetic arrivals and lengths, validated trace CSVs, and
workloads that regenerate at any offered load.

Reading guide, one concept per module:

* :mod:`~budgetlab.workload.arrivals` -- arrival processes, :func:`poisson_arrivals` and
  :func:`gamma_arrivals` (numpy arrays of instants [s]);
* :mod:`~budgetlab.workload.lengths` -- length distributions :class:`Fixed`, :class:`Uniform`,
  :class:`LogNormal`, :class:`Empirical` (``sample(n, rng)`` returns token counts) and the
  Splitwise presets (:data:`PRESETS`, ``CONVERSATION_*``, ``CODE_*``);
* :mod:`~budgetlab.workload.synthetic` -- :func:`synthetic_workload`, :func:`conversation_like`,
  :func:`code_like` (lists of :class:`~budgetlab.specs.Request`) and :class:`SyntheticWorkload`;
* :mod:`~budgetlab.workload.sharing` -- workloads that share tokens (``Request.prefix_id`` /
  ``prefix_tokens``): :func:`system_prompt_workload`, :func:`multi_turn_workload` and their
  sweepable :class:`SystemPromptWorkload` and :class:`MultiTurnWorkload`;
* :mod:`~budgetlab.workload.closed_loop` -- :class:`ClosedLoopClients`: a fixed number of
  clients, each sending the next request when its last one finished (``vllm bench serve
  --max-concurrency``);
* :mod:`~budgetlab.workload.traces` -- :func:`load_trace` (every cell checked, whole columns at
  once; optional :data:`PREFIX_COLUMNS`) and :class:`TraceWorkload`; the cell-by-cell reader
  that names the first bad cell is :mod:`~budgetlab.workload.trace_cells`;
* :mod:`~budgetlab.workload.acceptance` -- speculative decoding: acceptance models
  :class:`AcceptanceRates` and :class:`MeanAcceptanceLength`, :func:`with_accepted_drafts`
  (fills ``Request.accepted_drafts``), the closed forms :func:`expected_accepted_drafts` and
  :func:`expected_tokens_per_verification`, and :data:`PUBLISHED_ACCEPTANCE` with
  :func:`default_acceptance`;
* :mod:`~budgetlab.workload.frames` -- :class:`RequestColumns` (requests as arrays, what
  :func:`load_trace` returns), :func:`trace_stats` and the DataFrame round trips
  (:data:`REQUEST_COLUMNS`, optional :data:`PRIORITY_COLUMN`, :data:`PREFIX_ID_COLUMN`,
  :data:`PREFIX_TOKENS_COLUMN`).

This module adds what the experiments need of any workload: the :class:`SweepWorkload`
protocol, :func:`check_workload` and :func:`mean_sequence_tokens`.

Conventions
-----------
* Every synthetic arrival sequence starts at 0: the first request arrives at ``t = 0 s`` and
  request ``i`` arrives after ``i`` inter-arrival gaps, like the Splitwise traces (whose first
  row is at 0.0 s). ``n`` requests therefore span ``n - 1`` gaps.
* The *rate* of a sequence of arrivals is the inverse of its mean inter-arrival gap,
  ``(num_requests - 1) / (last - first arrival)`` [1/s]; :func:`trace_stats` and the
  ``rate_per_s`` option of :func:`load_trace` both use this definition.
* Everything random is driven by a seeded :class:`numpy.random.Generator`; the same seed
  gives the same list of requests, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast, runtime_checkable

from budgetlab.errors import ParameterError
from budgetlab.specs import Request
from budgetlab.workload.acceptance import (
    PUBLISHED_ACCEPTANCE,
    AcceptanceModel,
    AcceptanceRates,
    MeanAcceptanceLength,
    PublishedAcceptance,
    default_acceptance,
    expected_accepted_drafts,
    expected_tokens_per_verification,
    with_accepted_drafts,
)
from budgetlab.workload.arrivals import ARRIVAL_KINDS, ArrivalKind, gamma_arrivals, poisson_arrivals
from budgetlab.workload.closed_loop import ClosedLoopClients
from budgetlab.workload.frames import (
    PREFIX_ID_COLUMN,
    PREFIX_TOKENS_COLUMN,
    PRIORITY_COLUMN,
    REQUEST_COLUMNS,
    RequestColumns,
    mean_total_tokens,
    requests_from_frame,
    requests_to_frame,
    trace_stats,
)
from budgetlab.workload.lengths import (
    CODE_OUTPUT,
    CODE_PROMPT,
    CONVERSATION_OUTPUT,
    CONVERSATION_PROMPT,
    PRESETS,
    Empirical,
    Fixed,
    LengthDistribution,
    LogNormal,
    Uniform,
)
from budgetlab.workload.sharing import (
    DEFAULT_MAX_MODEL_LEN_TOKENS,
    DEFAULT_NUM_CONVERSATIONS,
    DEFAULT_THINK_TIME_S,
    MultiTurnWorkload,
    SystemPromptWorkload,
    multi_turn_workload,
    system_prompt_workload,
)
from budgetlab.workload.synthetic import (
    DEFAULT_NUM_REQUESTS,
    SyntheticWorkload,
    code_like,
    conversation_like,
    synthetic_workload,
)
from budgetlab.workload.traces import AZURE_COLUMNS, PREFIX_COLUMNS, SPLITWISE_COLUMNS, TraceWorkload, load_trace

__all__ = [
    # arrivals
    "poisson_arrivals",
    "gamma_arrivals",
    "ArrivalKind",
    "ARRIVAL_KINDS",
    # lengths, and the Splitwise presets
    "LengthDistribution",
    "Fixed",
    "Uniform",
    "LogNormal",
    "Empirical",
    "PRESETS",
    "CONVERSATION_PROMPT",
    "CONVERSATION_OUTPUT",
    "CODE_PROMPT",
    "CODE_OUTPUT",
    # synthetic workloads
    "synthetic_workload",
    "conversation_like",
    "code_like",
    "SyntheticWorkload",
    "DEFAULT_NUM_REQUESTS",
    # workloads that share tokens (prefix caching)
    "system_prompt_workload",
    "multi_turn_workload",
    "SystemPromptWorkload",
    "MultiTurnWorkload",
    "DEFAULT_THINK_TIME_S",
    "DEFAULT_MAX_MODEL_LEN_TOKENS",
    "DEFAULT_NUM_CONVERSATIONS",
    # closed-loop clients
    "ClosedLoopClients",
    # traces, and requests as tables
    "load_trace",
    "TraceWorkload",
    "SPLITWISE_COLUMNS",
    "AZURE_COLUMNS",
    "PREFIX_COLUMNS",
    "REQUEST_COLUMNS",
    "PRIORITY_COLUMN",
    "PREFIX_ID_COLUMN",
    "PREFIX_TOKENS_COLUMN",
    "trace_stats",
    "RequestColumns",
    "requests_to_frame",
    "requests_from_frame",
    # speculative decoding: how many drafts each verification accepts
    "AcceptanceModel",
    "AcceptanceRates",
    "MeanAcceptanceLength",
    "with_accepted_drafts",
    "expected_accepted_drafts",
    "expected_tokens_per_verification",
    "PublishedAcceptance",
    "PUBLISHED_ACCEPTANCE",
    "default_acceptance",
    # what the experiments need of any workload
    "SweepWorkload",
    "check_workload",
    "mean_sequence_tokens",
    "workload_requests",
]


@runtime_checkable
class SweepWorkload(Protocol):
    """What :func:`budgetlab.sweep` and :func:`budgetlab.capacity` need from a workload.

    ``requests(rate_per_s=..., seed=...)`` returns the requests offered at that load [1/s];
    ``label`` names it in tables. It must be picklable (defined in an importable module, not a
    notebook cell) to run in worker processes, and deterministic: the same arguments give the
    same requests. A workload may also have ``columns(rate_per_s=..., seed=...)`` returning the
    same requests as a :class:`RequestColumns` (arrays, no ``Request`` object each), which the
    sweeps, searches and the tuner then simulate (:func:`workload_requests`).
    :class:`SyntheticWorkload`, :class:`TraceWorkload`, :class:`SystemPromptWorkload` and
    :class:`MultiTurnWorkload` are four.
    """

    label: str

    def requests(self, *, rate_per_s: float, seed: int = 0) -> list[Request]:  # pragma: no cover
        ...


def check_workload(workload: object) -> SweepWorkload:
    """``workload`` if it regenerates its requests at any load (a :class:`SweepWorkload`).

    Raises
    ------
    ParameterError
        Anything else, a plain list of requests included (the message says how to wrap one).
    """
    if not isinstance(workload, SweepWorkload):
        raise ParameterError(
            "workload must regenerate its requests at any load: a SyntheticWorkload, a "
            "TraceWorkload, or an object with a label and requests(rate_per_s=..., seed=...); "
            f"got {type(workload).__name__}. A plain list of requests has one fixed load: wrap it "
            "with TraceWorkload.from_requests(requests)"
        )
    return workload


def workload_requests(workload: SweepWorkload, *, rate_per_s: float, seed: int = 0) -> Sequence[Request]:
    """The requests ``workload`` offers at ``rate_per_s`` [1/s]: its ``columns(...)`` where it
    has that method (arrays, nothing built per request), else its ``requests(...)``."""
    columns = getattr(workload, "columns", None)
    if callable(columns):
        return cast(Sequence[Request], columns(rate_per_s=rate_per_s, seed=seed))
    return workload.requests(rate_per_s=rate_per_s, seed=seed)


def mean_sequence_tokens(workload: SweepWorkload, *, seed: int = 0) -> float:
    """Mean prompt + output length of a workload's requests [tokens].

    Its own ``mean_sequence_tokens(seed=)`` where it has one (both workload classes here do),
    else the mean over ``requests(rate_per_s=1.0, seed=seed)`` (lengths do not depend on the
    load).
    """
    method = getattr(workload, "mean_sequence_tokens", None)
    if callable(method):
        return float(method(seed=seed))
    return mean_total_tokens(workload_requests(workload, rate_per_s=1.0, seed=seed))
