"""Load sweeps, latency SLOs and capacity per replica: the second seed's method, simulated.

"Run a load sweep with your own prompt-length and output-length distributions … plot
first-token latency and per-token latency against offered load … the load at which your latency
SLO breaks is your capacity per replica." This module does exactly that with
:func:`budgetlab.simulate` instead of hours of live GPU runs.

Three layers, each usable on its own:

1. **Workloads for sweeping** -- :class:`SyntheticWorkload` and :class:`TraceWorkload` are
   small, picklable descriptions that regenerate their requests at any offered load with common
   random numbers: ``workload.requests(rate_per_s=..., seed=...)``. A synthetic workload draws
   its arrivals once at unit rate and divides every instant by the rate, so between two loads
   only the time axis stretches (the same requests, in the same order, with the same lengths).
   A trace is loaded once and replayed faster or slower by the same time scaling.
2. **Sweeps** -- :func:`sweep` runs the simulator over a grid (budget, ``max_num_seqs``,
   offered load, hardware, model, cost model, seeds) on any
   :class:`concurrent.futures.Executor` and returns one tidy table, in grid order.
3. **Capacity** -- :class:`SLO` states latency limits; :func:`capacity` finds the highest
   offered load at which they hold, by bisection on load with a stated relative tolerance.
   :func:`run_capacity_task` runs one such search and reports an SLO that no load (or every
   load) meets as an outcome; :func:`capacity_by_budget` runs one per budget, starting from a
   sweep's bracket when there is one, and the tuner (:mod:`budgetlab.tune`) one per candidate.

Running a sweep on a Dask cluster
---------------------------------
Any :class:`concurrent.futures.Executor` runs a sweep. A Dask ``distributed`` client provides
one (``pip install budgetlab[distributed]``)::

    from distributed import Client
    executor = Client("tcp://scheduler:8786").get_executor()

then ``sweep(..., executor=executor)``. The table is the same, row for row and bit for bit,
whichever executor computes it: every grid point is an independent, deterministic simulation,
and rows are placed by grid position, not by completion order. Workers need budgetlab
installed (the same version).

Offered load and the tables' columns
------------------------------------
``rate_per_s`` is the *offered* load: requests per second arriving at the replica. The
summary's ``requests_per_s`` is what the replica actually completed. Every table row holds the
grid knobs, every key of :meth:`SimResult.summary` (``num_kv_blocks`` and ``num_requests``
among them), the gate diagnostics of :func:`gate_stats` and the configuration
(``block_size``, ``policy``, ``workload``).
"""

from __future__ import annotations

import concurrent.futures as cf
import difflib
import itertools
import math
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from os import PathLike
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from budgetlab.catalog import hardware as _lookup_hardware
from budgetlab.catalog import model as _lookup_model
from budgetlab._checks import int_at_least, is_number, number_in
from budgetlab.errors import (  # the two capacity errors are importable from here too
    CapacityAboveBoundsError,
    ConfigError,
    ParameterError,
    SLOUnattainableError,
)
from budgetlab.memory import num_kv_blocks
from budgetlab.metrics import step_gates
from budgetlab.roofline import Batch, CostModel, IdealCost, shortest_step_s
from budgetlab.simulator import simulate
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request
from budgetlab.workload import (
    PRESETS,
    Fixed,
    LengthDistribution,
    load_trace,
    synthetic_workload,
    trace_stats,
)

__all__ = [
    "SweepWorkload",
    "SyntheticWorkload",
    "TraceWorkload",
    "SweepPoint",
    "run_point",
    "gate_stats",
    "GATE_STATS",
    "KNOB_COLUMNS",
    "make_cost",
    "SerialExecutor",
    "default_executor",
    "sweep",
    "SLO",
    "SLO_METRICS",
    "Violation",
    "CapacityResult",
    "capacity",
    "max_service_rate_per_s",
    "service_rate_per_s",
    "mean_sequence_tokens",
    "CAPACITY_STATUSES",
    "CapacityTask",
    "CapacityOutcome",
    "run_capacity_task",
    "slo_bracket_per_s",
    "capacity_by_budget",
    "best_capacity",
    "SLOUnattainableError",
    "CapacityAboveBoundsError",
    "PROGRESS_MIN_POINTS",
]

PROGRESS_MIN_POINTS = 16
"""With ``progress=None`` a sweep shows its bar only from this many grid points up."""

DEFAULT_NUM_REQUESTS = 2000
"""Requests per simulation in the presets: enough for stable p90/p99, fast enough to sweep."""


# --------------------------------------------------------------------------------------------
# Small checks
# --------------------------------------------------------------------------------------------


def _positive_rate(name: str, value: object) -> float:
    return number_in(name, value, low=0.0, low_open=True, what="a finite number of requests per second > 0")


def _seed(name: str, value: object) -> int:
    return int_at_least(name, value, 0)


def _fraction(name: str, value: object, *, low: float, high: float) -> float:
    what = f"a number in ({low:g}, {high:g})"
    return number_in(name, value, low=low, high=high, low_open=True, high_open=True, what=what)


def _engine_template(engine: object) -> EngineConfig:
    """The engine whose other knobs a sweep or the tuner keeps; ``None``: vLLM's defaults."""
    if engine is None:
        return EngineConfig(max_num_batched_tokens=8192, max_num_seqs=256)
    if not isinstance(engine, EngineConfig):
        raise ParameterError(f"engine must be an EngineConfig template or None, got {type(engine).__name__}")
    return engine


def _axis(name: str, values: object, check: Callable[[str, object], Any]) -> tuple[Any, ...]:
    """A non-empty grid axis without repeats; a scalar is an axis of one."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        values = (values,)
    items = tuple(check(f"{name}[{i}]", v) for i, v in enumerate(values))
    if not items:
        raise ParameterError(f"{name} is empty; give at least one value")
    repeated = sorted({v for v in items if items.count(v) > 1}, key=str)
    if repeated:
        raise ParameterError(
            f"{name} repeats {', '.join(map(str, repeated))}; each grid value once, please "
            "(a repeated point would only duplicate rows)"
        )
    return items


def _as_hardware(name: str, value: object) -> HardwareSpec:
    if isinstance(value, HardwareSpec):
        return value
    if isinstance(value, str):
        return _lookup_hardware(value)
    raise ParameterError(
        f"{name} must be a hardware slug such as 'h100-sxm' or a HardwareSpec, got {value!r}"
    )


def _as_model(name: str, value: object) -> ModelSpec:
    if isinstance(value, ModelSpec):
        return value
    if isinstance(value, str):
        return _lookup_model(value)
    raise ParameterError(
        f"{name} must be a model slug such as 'llama-3.1-8b' or a ModelSpec, got {value!r}"
    )


# --------------------------------------------------------------------------------------------
# Workloads that regenerate at any load
# --------------------------------------------------------------------------------------------


@runtime_checkable
class SweepWorkload(Protocol):
    """What :func:`sweep` and :func:`capacity` need from a workload.

    ``requests(rate_per_s=..., seed=...)`` returns the requests offered at that load [1/s];
    ``label`` names it in tables. It must be picklable (defined in an importable module, not a
    notebook cell) to run in worker processes, and deterministic: the same arguments give the
    same requests.
    """

    label: str

    def requests(self, *, rate_per_s: float, seed: int = 0) -> list[Request]:  # pragma: no cover
        ...


@dataclass(frozen=True, kw_only=True)
class SyntheticWorkload:
    """Random arrivals and lengths, regenerated at any offered load with common random numbers.

    Arrivals are drawn once at 1 request/s (Poisson or gamma gaps) and every instant is divided
    by the offered rate, so two loads differ only in time scale: the same requests, in the same
    order, with the same lengths (see :func:`budgetlab.workload.synthetic_workload` for how the
    seed splits into arrival and length streams).

    Parameters
    ----------
    prompt : LengthDistribution or int
        Prompt lengths [tokens]; an int means :class:`~budgetlab.workload.Fixed`.
    output : LengthDistribution or int
        Output lengths, first token included [tokens].
    num_requests : int
        Requests per simulation [count], >= 1. A few thousand give stable p90/p99 latencies
        and keep a sweep point well under a second.
    arrivals : {"poisson", "gamma"}
        Arrival process.
    cv : float
        Coefficient of variation of the gaps, for gamma arrivals [-].
    label : str
        Name in tables (the ``workload`` column).

    Examples
    --------
    >>> w = SyntheticWorkload.conversation_like(num_requests=100)
    >>> slow, fast = w.requests(rate_per_s=1.0), w.requests(rate_per_s=4.0)
    >>> slow[7].prompt_tokens == fast[7].prompt_tokens
    True
    """

    prompt: LengthDistribution | int
    output: LengthDistribution | int
    num_requests: int = DEFAULT_NUM_REQUESTS
    arrivals: Literal["poisson", "gamma"] = "poisson"
    cv: float = 1.0
    label: str = "synthetic"

    def __post_init__(self) -> None:
        int_at_least("num_requests", self.num_requests)
        # One draw validates the distributions, the arrival kind and cv with workload's messages.
        synthetic_workload(
            num_requests=1,
            rate_per_s=1.0,
            prompt=self.prompt,
            output=self.output,
            arrivals=self.arrivals,
            cv=self.cv,
            seed=0,
        )

    @classmethod
    def conversation_like(
        cls,
        *,
        num_requests: int = DEFAULT_NUM_REQUESTS,
        arrivals: Literal["poisson", "gamma"] = "poisson",
        cv: float = 1.0,
    ) -> SyntheticWorkload:
        """Chat traffic: Splitwise conversation-trace lengths (prompt median ≈ 1,020 tokens,
        output median ≈ 129), see :func:`budgetlab.workload.conversation_like`."""
        return cls._preset("conversation-like", num_requests=num_requests, arrivals=arrivals, cv=cv)

    @classmethod
    def code_like(
        cls,
        *,
        num_requests: int = DEFAULT_NUM_REQUESTS,
        arrivals: Literal["poisson", "gamma"] = "poisson",
        cv: float = 1.0,
    ) -> SyntheticWorkload:
        """Code completion: Splitwise code-trace lengths (long prompts, short answers), see
        :func:`budgetlab.workload.code_like`."""
        return cls._preset("code-like", num_requests=num_requests, arrivals=arrivals, cv=cv)

    @classmethod
    def _preset(cls, label: str, **options: Any) -> SyntheticWorkload:
        prompt, output = PRESETS[label]
        return cls(prompt=prompt, output=output, label=label, **options)

    def requests(self, *, rate_per_s: float, seed: int = 0) -> list[Request]:
        """The requests offered at ``rate_per_s`` [1/s]; ids 0, 1, ... in arrival order.

        Parameters
        ----------
        rate_per_s : float
            Offered load [1/s], > 0.
        seed : int
            Seed of the arrival and length draws [-], >= 0.
        """
        rate = _positive_rate("rate_per_s", rate_per_s)
        unit = synthetic_workload(
            num_requests=self.num_requests,
            rate_per_s=1.0,
            prompt=self.prompt,
            output=self.output,
            arrivals=self.arrivals,
            cv=self.cv,
            seed=_seed("seed", seed),
        )
        return [Request(r.request_id, r.arrival_at_s / rate, r.prompt_tokens, r.output_tokens) for r in unit]

    def mean_sequence_tokens(self, *, seed: int = 0) -> float:
        """Mean prompt + output length of the requests the seed draws [tokens]."""
        return _mean_total_tokens(self.requests(rate_per_s=1.0, seed=seed))

    def with_fixed_lengths(self, *, seed: int = 0) -> SyntheticWorkload:
        """This workload's fixed-length twin: the same arrivals, every prompt and every output at
        the mean length the seed draws (rounded to whole tokens, at least 1).

        "Uniform-length" traffic with the same mean load, to show what heterogeneous lengths
        change; labelled ``"fixed lengths (1,234 + 345 tokens)"``.

        Parameters
        ----------
        seed : int
            Seed of the draw whose mean lengths are used [-].
        """
        prompt_tokens, output_tokens = _mean_lengths(self.requests(rate_per_s=1.0, seed=seed))
        return replace(
            self,
            prompt=Fixed(prompt_tokens),
            output=Fixed(output_tokens),
            label=_fixed_lengths_label(prompt_tokens, output_tokens),
        )


@dataclass(frozen=True, eq=False)
class TraceWorkload:
    """A recorded trace, loaded once and replayed at any offered load by time scaling.

    Replaying at ``rate_per_s`` multiplies every gap by ``time_scale = native_rate_per_s /
    rate_per_s`` (the trace's shape, bursts included, is kept); the first request arrives at
    0 s. The seed is ignored: a trace is one fixed sample.

    Build one with :meth:`from_csv` (any format :func:`budgetlab.workload.load_trace` reads) or
    :meth:`from_requests`.

    Attributes
    ----------
    arrival_at_s : numpy.ndarray
        Arrival instants as recorded [s], non-decreasing.
    prompt_tokens, output_tokens : numpy.ndarray
        Lengths [tokens].
    label : str
        Name in tables.
    """

    arrival_at_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    label: str = "trace"

    def __post_init__(self) -> None:
        arrivals = np.array(self.arrival_at_s, dtype=float)
        prompts = np.array(self.prompt_tokens, dtype=float)
        outputs = np.array(self.output_tokens, dtype=float)
        if not (arrivals.ndim == prompts.ndim == outputs.ndim == 1) or not (
            arrivals.size == prompts.size == outputs.size
        ):
            raise ParameterError("arrival_at_s, prompt_tokens and output_tokens must be 1-D and equally long")
        if not np.isfinite(arrivals).all():
            raise ParameterError("trace arrival_at_s must hold finite numbers of seconds")
        if arrivals.size < 2 or not arrivals[-1] > arrivals[0]:
            raise ParameterError(
                "a trace to replay at other loads needs at least two requests arriving at different "
                f"instants (it has {arrivals.size}); its rate is undefined otherwise"
            )
        if np.any(np.diff(arrivals) < 0):
            raise ParameterError("trace arrival_at_s must be non-decreasing; sort the trace by arrival time")
        for tokens in (prompts, outputs):
            if not (np.isfinite(tokens) & (tokens == np.floor(tokens)) & (tokens >= 1)).all():
                raise ParameterError(
                    "trace prompt_tokens and output_tokens must all be whole numbers >= 1 (nothing "
                    "is rounded)"
                )
        arrays = {
            "arrival_at_s": arrivals,
            "prompt_tokens": prompts.astype(np.int64),
            "output_tokens": outputs.astype(np.int64),
        }
        for name, array in arrays.items():
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    def __repr__(self) -> str:
        return (
            f"TraceWorkload({self.label!r}, {self.num_requests} requests, "
            f"{self.native_rate_per_s:.3g} req/s native)"
        )

    @classmethod
    def from_csv(
        cls, path: str | PathLike[str], *, max_requests: int | None = None, label: str | None = None
    ) -> TraceWorkload:
        """Load a trace CSV (Splitwise/Vidur or Azure columns), validated by
        :func:`budgetlab.workload.load_trace`.

        Parameters
        ----------
        path : str or path-like
            The CSV file.
        max_requests : int or None
            Keep the first this many requests [count] (simulations grow with requests).
        label : str or None
            Name in tables; the file's stem by default.
        """
        reqs = load_trace(path, max_requests=max_requests)
        if label is None:
            label = os.path.splitext(os.path.basename(path))[0]
        return cls.from_requests(reqs, label=label)

    @classmethod
    def from_requests(cls, requests: Sequence[Request], *, label: str = "trace") -> TraceWorkload:
        """Wrap a list of requests (e.g. from :func:`budgetlab.workload.load_trace`)."""
        reqs = sorted(requests, key=lambda r: r.arrival_at_s)
        return cls(
            np.array([r.arrival_at_s for r in reqs], dtype=float),
            np.array([r.prompt_tokens for r in reqs], dtype=np.int64),
            np.array([r.output_tokens for r in reqs], dtype=np.int64),
            label=label,
        )

    @property
    def num_requests(self) -> int:
        """Requests in the trace [count]."""
        return int(self.arrival_at_s.size)

    @property
    def native_rate_per_s(self) -> float:
        """The trace's own rate, ``(n − 1) / (last − first arrival)`` [1/s]."""
        return (self.num_requests - 1) / float(self.arrival_at_s[-1] - self.arrival_at_s[0])

    def time_scale_for(self, rate_per_s: float) -> float:
        """Factor on every gap that replays the trace at ``rate_per_s`` [-] (2 = half the load)."""
        return self.native_rate_per_s / _positive_rate("rate_per_s", rate_per_s)

    def rate_for(self, time_scale: float) -> float:
        """Offered load of a replay with this time scale [1/s]."""
        scale = _positive_rate("time_scale", time_scale)
        return self.native_rate_per_s / scale

    def requests(self, *, rate_per_s: float, seed: int = 0) -> list[Request]:
        """The trace replayed at ``rate_per_s`` [1/s], first arrival at 0 s (``seed`` ignored)."""
        scale = self.time_scale_for(rate_per_s)
        _seed("seed", seed)
        times = (self.arrival_at_s - self.arrival_at_s[0]) * scale
        return [
            Request(i, t, p, o)
            for i, (t, p, o) in enumerate(
                zip(times.tolist(), self.prompt_tokens.tolist(), self.output_tokens.tolist())
            )
        ]

    def mean_sequence_tokens(self, *, seed: int = 0) -> float:
        """Mean prompt + output length [tokens]."""
        return float(np.mean(self.prompt_tokens + self.output_tokens))

    def with_fixed_lengths(self, *, seed: int = 0) -> TraceWorkload:
        """This trace's fixed-length twin: the same arrivals, every prompt and every output at
        the trace's mean length (rounded to whole tokens, at least 1); ``seed`` is ignored.

        See :meth:`SyntheticWorkload.with_fixed_lengths`.
        """
        prompt_tokens, output_tokens = _mean_lengths(self.requests(rate_per_s=1.0, seed=seed))
        return TraceWorkload(
            self.arrival_at_s,
            np.full(self.num_requests, prompt_tokens),
            np.full(self.num_requests, output_tokens),
            label=_fixed_lengths_label(prompt_tokens, output_tokens),
        )


def _check_workload(workload: object) -> SweepWorkload:
    if not isinstance(workload, SweepWorkload):
        raise ParameterError(
            "workload must regenerate its requests at any load: a SyntheticWorkload, a "
            "TraceWorkload, or an object with a label and requests(rate_per_s=..., seed=...); "
            f"got {type(workload).__name__}. A plain list of requests has one fixed load: wrap it "
            "with TraceWorkload.from_requests(requests)"
        )
    return workload


def mean_sequence_tokens(workload: SweepWorkload, *, seed: int = 0) -> float:
    """Mean prompt + output length of a workload's requests [tokens].

    Its own ``mean_sequence_tokens(seed=)`` where it has one (both workload classes here do),
    else the mean over ``requests(rate_per_s=1.0, seed=seed)`` (lengths do not depend on the
    load).
    """
    method = getattr(workload, "mean_sequence_tokens", None)
    if callable(method):
        return float(method(seed=seed))
    return _mean_total_tokens(workload.requests(rate_per_s=1.0, seed=seed))


def _mean_total_tokens(requests: Sequence[Request]) -> float:
    """Mean prompt + output length [tokens]."""
    return float(np.mean([r.prompt_tokens + r.output_tokens for r in requests]))


def _mean_lengths(requests: Sequence[Request]) -> tuple[int, int]:
    """Mean prompt and mean output length, rounded to whole tokens, at least 1 [tokens]."""
    stats = trace_stats(requests)
    return max(1, round(stats["prompt_mean_tokens"])), max(1, round(stats["output_mean_tokens"]))


def _fixed_lengths_label(prompt_tokens: int, output_tokens: int) -> str:
    return f"fixed lengths ({prompt_tokens:,} + {output_tokens:,} tokens)"


# --------------------------------------------------------------------------------------------
# Cost models by name or factory
# --------------------------------------------------------------------------------------------

COST_NAMES = ("ideal", "typical")

CostSpec = Any
"""``"ideal"``, ``"typical"``, a factory ``(hardware, model) -> cost model`` (a class such as
``IdealCost`` or a module-level function), or a cost-model instance for the grid's one
hardware and model."""


def make_cost(cost: CostSpec, hardware: HardwareSpec, model: ModelSpec) -> CostModel:
    """The cost model a sweep point simulates with.

    Parameters
    ----------
    cost : str, callable or cost model
        ``"ideal"`` (:class:`~budgetlab.roofline.IdealCost`, the seeds' roofline),
        ``"typical"`` (:meth:`budgetlab.calibrated.CalibratedCost.typical`), a factory called
        as ``cost(hardware, model)``, or an instance (used as is; if it carries ``hardware``
        and ``model`` they must be the point's).
    hardware, model : HardwareSpec, ModelSpec

    Raises
    ------
    ParameterError
        An unknown name, a factory that returns no cost model, or an instance built for other
        hardware or another model.
    """
    if isinstance(cost, str):
        key = cost.strip().lower()
        if key == "ideal":
            return IdealCost(hardware, model)
        if key == "typical":
            from budgetlab.calibrated import CalibratedCost

            return CalibratedCost.typical(hardware, model)
        raise _unknown_cost(cost)
    if not isinstance(cost, type) and isinstance(cost, CostModel):
        for name, wanted in (("hardware", hardware), ("model", model)):
            own = getattr(cost, name, None)
            if own is not None and wanted is not None and own != wanted:
                raise ParameterError(
                    f"the cost model {type(cost).__name__} was built for {own.slug!r}, but this "
                    f"point simulates {name} {wanted.slug!r}. Pass a factory instead (a class "
                    "such as IdealCost, CalibratedCost.typical, or 'ideal'/'typical') so each "
                    "point gets its own"
                )
        return cost
    if callable(cost):
        made = cost(hardware, model)
        if not isinstance(made, CostModel):
            raise ParameterError(
                f"cost factory {_cost_label(cost)} returned {type(made).__name__}, which has no "
                "batch_time_s/decode_run_time_s; it must return a cost model"
            )
        return made
    raise ParameterError(
        f"cost must be 'ideal', 'typical', a factory (hardware, model) -> cost model, or a cost "
        f"model, got {cost!r}"
    )


def _unknown_cost(cost: str) -> ParameterError:
    close = difflib.get_close_matches(cost.strip().lower(), COST_NAMES, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ParameterError(
        f"unknown cost model {cost!r}.{hint} Use 'ideal', 'typical', a factory "
        "(hardware, model) -> cost model, or a cost-model instance"
    )


def _cost_label(cost: CostSpec) -> str:
    if isinstance(cost, str):
        return cost.strip().lower()
    if isinstance(cost, type):
        return cost.__name__
    if callable(cost) and not isinstance(cost, CostModel):
        return getattr(cost, "__qualname__", None) or getattr(cost, "__name__", None) or type(cost).__name__
    return type(cost).__name__


def _check_cost(cost: CostSpec) -> CostSpec:
    if isinstance(cost, str):
        key = cost.strip().lower()
        if key not in COST_NAMES:
            raise _unknown_cost(cost)
        return key
    if isinstance(cost, CostModel) or callable(cost):
        return cost
    raise ParameterError(
        f"cost must be 'ideal', 'typical', a factory (hardware, model) -> cost model, or a cost "
        f"model, got {cost!r}"
    )


def max_service_rate_per_s(
    cost: CostModel, *, max_num_batched_tokens: int, mean_sequence_tokens: float
) -> float:
    """Offered load a replica cannot exceed for long: full-budget steps back to back [1/s].

    ``max_num_batched_tokens / step_time(one full-budget chunk) / mean_sequence_tokens``: every
    request needs about its prompt plus output tokens of step capacity. The simulator's
    latencies blow up above it; :func:`capacity` starts its search just above it.

    Parameters
    ----------
    cost : cost model
    max_num_batched_tokens : int
        Token budget [tokens].
    mean_sequence_tokens : float
        The workload's mean prompt + output [tokens].
    """
    budget = int_at_least("max_num_batched_tokens", max_num_batched_tokens)
    step_s = float(cost.batch_time_s(Batch(prefill_tokens=(budget,), prefill_context_tokens=(0,))))
    return budget / step_s / float(mean_sequence_tokens)


def service_rate_per_s(
    workload: SweepWorkload,
    *,
    budgets: Sequence[int],
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    cost: CostSpec = "ideal",
    seed: int = 0,
) -> float:
    """The highest offered load a replica sustains with any of ``budgets`` [1/s].

    :func:`max_service_rate_per_s` for each budget (full-budget steps back to back, divided by
    the workload's mean prompt + output length), the largest of them. Above it queues grow
    without bound, so a load sweep needs to reach just past it.

    Parameters
    ----------
    workload : SweepWorkload
        Its mean sequence length (:func:`mean_sequence_tokens`) sets the rate.
    budgets : sequence of int
        Token budgets [tokens].
    hardware : str or HardwareSpec
    model : str or ModelSpec
    cost : str, callable or cost model
        See :func:`make_cost`.
    seed : int
        Workload seed for the mean length [-].
    """
    step_cost = make_cost(_check_cost(cost), _as_hardware("hardware", hardware), _as_model("model", model))
    mean_tokens = mean_sequence_tokens(workload, seed=seed)
    return max(
        max_service_rate_per_s(step_cost, max_num_batched_tokens=int(b), mean_sequence_tokens=mean_tokens)
        for b in budgets
    )


# --------------------------------------------------------------------------------------------
# One grid point
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepPoint:
    """One simulation of a sweep: everything a worker needs, small and picklable.

    Attributes
    ----------
    workload : SweepWorkload
    rate_per_s : float
        Offered load [1/s].
    seed : int
    engine : EngineConfig
    hardware : HardwareSpec
    model : ModelSpec
    cost : str, callable or cost model
        See :func:`make_cost`.
    mode : str
        The simulator's mode (``"fast"`` or its reference stepping mode).
    """

    workload: Any
    rate_per_s: float
    seed: int
    engine: EngineConfig
    hardware: HardwareSpec
    model: ModelSpec
    cost: Any = "ideal"
    mode: str = "fast"


def run_point(point: SweepPoint) -> dict[str, Any]:
    """Simulate one grid point: the summary plus the gate diagnostics, as one dict.

    A module-level function so process pools and Dask can ship it to workers.
    """
    requests = point.workload.requests(rate_per_s=point.rate_per_s, seed=point.seed)
    cost = make_cost(point.cost, point.hardware, point.model)
    result = simulate(
        requests, engine=point.engine, cost=cost, hardware=point.hardware, model=point.model, mode=point.mode
    )
    row = {key: _plain(value) for key, value in result.summary().items()}
    row.update(gate_stats(result, engine=point.engine))
    return row


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


GATE_STATS = (
    "cap_bound_fraction",
    "budget_full_fraction",
    "kv_blocked_fraction",
    "budget_utilization_fraction",
)
"""Columns :func:`gate_stats` adds to every sweep row."""


def gate_stats(result: Any, *, engine: EngineConfig) -> dict[str, float]:
    """Which of the three gates held requests back, from a simulation's step table.

    Built on :func:`budgetlab.metrics.step_gates`, the one per-step classification every
    report uses.

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

        ``cap_bound_fraction``
            Running count pinned at ``max_num_seqs``: the sequence-slot gate.
        ``budget_full_fraction``
            Tokens filling the whole ``max_num_batched_tokens``: the token gate.
        ``kv_blocked_fraction``
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
        return {name: math.nan for name in GATE_STATS}
    budget = engine.max_num_batched_tokens
    gates = step_gates(steps, max_num_seqs=engine.max_num_seqs, max_num_batched_tokens=budget)
    return {
        "cap_bound_fraction": float(np.mean(gates["at_cap"].to_numpy())),
        "budget_full_fraction": float(np.mean(gates["budget_full"].to_numpy())),
        "kv_blocked_fraction": float(np.mean(gates["gate"].to_numpy() == "kv")),
        "budget_utilization_fraction": float(np.mean(gates["num_tokens"].to_numpy()) / budget),
    }


# --------------------------------------------------------------------------------------------
# Executors
# --------------------------------------------------------------------------------------------


class SerialExecutor(cf.Executor):
    """Runs each task in the calling process, at submission: no workers, no pickling.

    Handy for debugging, for tiny grids, and for workloads or cost factories defined in a
    notebook cell (which worker processes cannot import). Gives the same table as any other
    executor.
    """

    def __init__(self) -> None:
        self._shutdown = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to a SerialExecutor after shutdown")
        future: cf.Future = cf.Future()
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True


def _mp_context() -> multiprocessing.context.BaseContext:
    """``forkserver`` where available (clean, fast workers with budgetlab preloaded; fork
    from a process that may hold threads, such as a Dask client's, can deadlock), else
    ``spawn``."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["budgetlab.sweep", "budgetlab.simulator"])
        return ctx
    return multiprocessing.get_context("spawn")


def default_executor(num_tasks: int) -> cf.ProcessPoolExecutor:
    """A local process pool with ``min(os.cpu_count(), num_tasks)`` workers."""
    workers = max(1, min(os.cpu_count() or 1, num_tasks))
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=_mp_context())


def _show_progress(progress: bool | None, num_tasks: int) -> bool:
    if progress is None:
        interactive = "ipykernel" in sys.modules or bool(getattr(sys.stderr, "isatty", lambda: False)())
        return num_tasks >= PROGRESS_MIN_POINTS and interactive
    if not isinstance(progress, (bool, np.bool_)):
        raise ParameterError(f"progress must be True, False or None (automatic), got {progress!r}")
    return bool(progress)


def _check_executor(executor: object) -> None:
    if executor is not None and not isinstance(executor, cf.Executor):
        raise ParameterError(
            "executor must be a concurrent.futures.Executor (a ProcessPoolExecutor, "
            f"SerialExecutor, or a Dask client's get_executor()), got {type(executor).__name__}"
        )


def _run_all(
    fn: Callable[[Any], Any],
    tasks: Sequence[Any],
    *,
    executor: cf.Executor | None,
    progress: bool | None,
    describe: Callable[[int], str],
    unit: str = "point",
    desc: str = "budgetlab sweep",
) -> list[Any]:
    """Run ``fn`` over ``tasks`` on an executor; results in task order whatever the completion
    order. A failing task cancels the rest and re-raises, with a note naming the task."""
    _check_executor(executor)
    show = _show_progress(progress, len(tasks))
    own = executor is None
    if own:
        executor = SerialExecutor() if len(tasks) <= 1 else default_executor(len(tasks))
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), unit=unit, desc=desc, leave=False)
    results: list[Any] = [None] * len(tasks)
    futures: dict[cf.Future, int] = {}
    try:
        for i, task in enumerate(tasks):
            futures[executor.submit(fn, task)] = i
        for future in cf.as_completed(futures):
            i = futures[future]
            try:
                results[i] = future.result()
            except Exception as exc:
                exc.add_note(f"(while simulating {describe(i)})")
                raise
            if bar is not None:
                bar.update(1)
    finally:
        for future in futures:
            future.cancel()
        if bar is not None:
            bar.close()
        if own:
            executor.shutdown(wait=True, cancel_futures=True)
    return results


# --------------------------------------------------------------------------------------------
# Sweeps
# --------------------------------------------------------------------------------------------

KNOB_COLUMNS = ("hardware", "model", "cost", "max_num_batched_tokens", "max_num_seqs", "seed", "rate_per_s")


def sweep(
    workload: SweepWorkload,
    *,
    budgets: int | Sequence[int],
    max_num_seqs: int | Sequence[int],
    rates_per_s: float | Sequence[float] | None = None,
    time_scales: float | Sequence[float] | None = None,
    hardware: str | HardwareSpec | Sequence[str | HardwareSpec],
    model: str | ModelSpec | Sequence[str | ModelSpec],
    cost: CostSpec | Sequence[CostSpec] = "ideal",
    seeds: int | Sequence[int] = (0,),
    engine: EngineConfig | None = None,
    skip_invalid: bool = False,
    executor: cf.Executor | None = None,
    progress: bool | None = None,
    mode: str = "fast",
) -> pd.DataFrame:
    """Simulate every point of a grid of knobs and loads; one tidy row per point.

    The grid is the product of ``hardware × model × cost × budgets × max_num_seqs × seeds ×
    loads``, in the order given, the last varying fastest; rows come back in exactly that
    order whichever executor ran them and in whatever order they finished.

    Parameters
    ----------
    workload : SweepWorkload
        :class:`SyntheticWorkload` or :class:`TraceWorkload` (or anything with
        ``requests(rate_per_s=, seed=)`` and a ``label``), regenerated at each load.
    budgets : int or sequence of int
        ``max_num_batched_tokens`` values [tokens].
    max_num_seqs : int or sequence of int
        ``max_num_seqs`` values [count].
    rates_per_s : float or sequence of float
        Offered loads [1/s].
    time_scales : float or sequence of float
        Instead of ``rates_per_s``, for a :class:`TraceWorkload`: factors on the trace's gaps
        [-] (0.5 replays it twice as fast); converted to ``rate_per_s`` with
        :meth:`TraceWorkload.rate_for`.
    hardware : str, HardwareSpec or a sequence of them
        GPUs (catalog slugs or specs).
    model : str, ModelSpec or a sequence of them
    cost : str, callable, cost model, or a sequence of them
        ``"ideal"`` (default), ``"typical"``, a factory ``(hardware, model) -> cost model``, or
        an instance (see :func:`make_cost`). Factories must be importable (module level) to
        run in worker processes; a :class:`SerialExecutor` takes anything.
    seeds : int or sequence of int
        Workload seeds [-]; one row per seed (a trace ignores it).
    engine : EngineConfig or None
        Template for the other knobs (``block_size``, ``policy``, ``gpu_memory_utilization``,
        ``long_prefill_token_threshold``, ``num_kv_blocks``, …); its budget and cap are
        replaced by the grid's. ``None``: vLLM's defaults, KV derived from memory.
    skip_invalid : bool
        Leave out points with ``budget < max_num_seqs`` (vLLM refuses them) instead of raising.
    executor : concurrent.futures.Executor or None
        Runs the points. ``None``: a local :class:`~concurrent.futures.ProcessPoolExecutor`
        with one worker per CPU (``forkserver`` start, so scripts need the usual
        ``if __name__ == "__main__":`` guard), shut down at the end. On a Dask cluster::

            from distributed import Client
            executor = Client("tcp://scheduler:8786").get_executor()

        An executor you pass is left running.
    progress : bool or None
        A tqdm bar on stderr while points complete. ``None`` (default): shown for grids of
        at least :data:`PROGRESS_MIN_POINTS` points when stderr is a terminal or in Jupyter;
        ``True``: always; ``False``: never (use it in rendered reports).
    mode : str
        Simulator mode (``"fast"``).

    Returns
    -------
    pandas.DataFrame
        One row per point: ``hardware``, ``model`` (slugs), ``cost`` (its name),
        ``max_num_batched_tokens``, ``max_num_seqs``, ``seed``, ``rate_per_s`` (offered load
        [1/s]; with a trace also ``time_scale``), every summary key (``ttft_p90_s``,
        ``itl_p99_s``, ``requests_per_s`` achieved, ``kv_peak_fraction``, ``num_kv_blocks``,
        ``num_requests``, …), the gate diagnostics of :func:`gate_stats`, then
        ``block_size``, ``policy`` and ``workload`` (its label).

    Raises
    ------
    ConfigError
        A budget/cap pair vLLM refuses (unless ``skip_invalid``), or an engine template vLLM
        refuses.
    DoesNotFitError
        The model leaves no KV cache on a GPU of the grid (raised before anything runs).
    ParameterError
        An empty or repeated axis, a bad load, seed, cost or executor.

    Examples
    --------
    >>> w = SyntheticWorkload.conversation_like(num_requests=500)
    >>> table = sweep(w, budgets=[1024, 2048], max_num_seqs=[128], rates_per_s=[2, 4, 6],
    ...               hardware="h100-sxm", model="llama-3.1-8b")  # doctest: +SKIP
    """
    workload = _check_workload(workload)
    template = _engine_template(engine)
    budget_axis = _axis("budgets", budgets, int_at_least)
    cap_axis = _axis("max_num_seqs", max_num_seqs, int_at_least)
    rate_axis, scale_axis = _load_axis(workload, rates_per_s, time_scales)
    hw_axis = _axis("hardware", hardware, _as_hardware)
    model_axis = _axis("model", model, _as_model)
    cost_axis = _cost_axis(cost)
    seed_axis = _axis("seeds", seeds, _seed)

    invalid = [(b, c) for b in budget_axis for c in cap_axis if b < c]
    if invalid and not skip_invalid:
        pairs = ", ".join(f"{b}/{c}" for b, c in invalid)
        raise ConfigError(
            f"budget/max_num_seqs pair(s) {pairs} have max_num_batched_tokens < max_num_seqs, "
            "which vLLM refuses (every running sequence needs a token per step). Drop them from "
            "the grid, or pass skip_invalid=True to leave them out."
        )

    points: list[SweepPoint] = []
    knobs: list[dict[str, Any]] = []
    sized: set[tuple[str, str, int, int]] = set()  # KV pools checked to fit
    for hw, mdl, cst, budget, cap, seed in itertools.product(
        hw_axis, model_axis, cost_axis, budget_axis, cap_axis, seed_axis
    ):
        if budget < cap:
            continue
        eng = replace(template, max_num_batched_tokens=budget, max_num_seqs=cap)
        key = (hw.slug, mdl.slug, budget, cap)
        if key not in sized:
            num_kv_blocks(eng, hw, mdl)  # DoesNotFitError before anything runs
            sized.add(key)
        for rate, scale in zip(rate_axis, scale_axis):
            points.append(SweepPoint(workload, rate, seed, eng, hw, mdl, cst, mode))
            row = {
                "hardware": hw.slug,
                "model": mdl.slug,
                "cost": _cost_label(cst),
                "max_num_batched_tokens": budget,
                "max_num_seqs": cap,
                "seed": seed,
                "rate_per_s": rate,
            }
            if scale is not None:
                row["time_scale"] = scale
            knobs.append(row)

    def describe(i: int) -> str:
        k = knobs[i]
        return (
            f"grid point {i}: {k['hardware']} + {k['model']}, cost {k['cost']}, budget "
            f"{k['max_num_batched_tokens']}, max_num_seqs {k['max_num_seqs']}, seed {k['seed']}, "
            f"{k['rate_per_s']:g} req/s"
        )

    results = _run_all(run_point, points, executor=executor, progress=progress, describe=describe)
    rows = []
    for point, knob, result in zip(points, knobs, results):
        row = dict(knob)
        row.update(result)
        row.update(
            block_size=point.engine.block_size, policy=point.engine.policy, workload=str(workload.label)
        )
        rows.append(row)
    return pd.DataFrame.from_records(rows)


def _cost_axis(cost: Any) -> tuple[Any, ...]:
    if isinstance(cost, (list, tuple)):
        items = tuple(_check_cost(c) for c in cost)
    else:
        items = (_check_cost(cost),)
    if not items:
        raise ParameterError("cost is empty; give at least one cost model")
    labels = [_cost_label(c) for c in items]
    repeated = sorted({lab for lab in labels if labels.count(lab) > 1})
    if repeated:
        raise ParameterError(f"cost axis repeats {', '.join(repeated)}; each cost model once, please")
    return items


def _load_axis(
    workload: SweepWorkload, rates_per_s: object, time_scales: object
) -> tuple[tuple[float, ...], tuple[float | None, ...]]:
    if (rates_per_s is None) == (time_scales is None):
        raise ParameterError(
            "give the offered loads as rates_per_s (requests per second), or, for a trace, as "
            "time_scales; exactly one of the two"
        )
    if time_scales is not None:
        if not isinstance(workload, TraceWorkload):
            raise ParameterError(
                "time_scales replays a trace faster or slower; this workload is synthetic, so "
                "give rates_per_s instead"
            )
        scales = _axis("time_scales", time_scales, _positive_rate)
        return tuple(workload.rate_for(s) for s in scales), scales
    rates = _axis("rates_per_s", rates_per_s, _positive_rate)
    if isinstance(workload, TraceWorkload):
        return rates, tuple(workload.time_scale_for(r) for r in rates)
    return rates, (None,) * len(rates)


# --------------------------------------------------------------------------------------------
# SLOs
# --------------------------------------------------------------------------------------------

SLO_METRICS = (
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "itl_p50_s",
    "itl_p90_s",
    "itl_p99_s",
    "max_itl_s",
    "e2e_p50_s",
    "e2e_p99_s",
)
"""Summary keys an :class:`SLO` can limit (each a latency in seconds, "at most")."""

ITL_METRICS = ("itl_p50_s", "itl_p90_s", "itl_p99_s", "max_itl_s")

_IMPLAUSIBLE_S = 1000.0


@dataclass(frozen=True)
class Violation:
    """One SLO limit a simulation broke.

    Attributes
    ----------
    metric : str
        Summary key (``"itl_p99_s"``).
    value_s : float
        What the simulation measured [s].
    limit_s : float
        The SLO's limit [s].
    """

    metric: str
    value_s: float
    limit_s: float

    @property
    def ratio(self) -> float:
        """``value_s / limit_s`` [-]: how far over the limit (1.3 = 30 % over)."""
        return self.value_s / self.limit_s

    def __str__(self) -> str:
        return f"{self.metric} = {_fmt_s(self.value_s)} > {_fmt_s(self.limit_s)}"


def _fmt_s(seconds: float) -> str:
    if not math.isfinite(seconds):
        return str(seconds)
    if abs(seconds) < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


@dataclass(frozen=True, kw_only=True)
class SLO:
    """Latency limits a replica must meet: each set field is "this summary key at most".

    Parameters
    ----------
    ttft_p50_s, ttft_p90_s, ttft_p99_s : float or None
        Time-to-first-token percentiles [s].
    itl_p50_s, itl_p90_s, itl_p99_s : float or None
        Inter-token latency percentiles, per token as users see it [s].
    max_itl_s : float or None
        Longest gap between two tokens of any request [s].
    e2e_p50_s, e2e_p99_s : float or None
        End-to-end latency percentiles [s].

    A metric left ``None`` is not limited; at least one must be set. Limits are seconds
    (40 ms is ``0.040``). A summary value that is NaN (no inter-token gap exists when every
    request generates one token) meets its limit.

    Raises
    ------
    ParameterError
        No limit set, or a limit that is not a finite number of seconds > 0 (a value of
        1,000 or more is taken for milliseconds by mistake).

    Examples
    --------
    >>> slo = SLO(ttft_p90_s=0.8, itl_p99_s=0.040)
    >>> slo.holds({"ttft_p90_s": 0.5, "itl_p99_s": 0.045})
    False
    >>> [str(v) for v in slo.violations({"ttft_p90_s": 0.5, "itl_p99_s": 0.045})]
    ['itl_p99_s = 45 ms > 40 ms']
    """

    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p50_s: float | None = None
    itl_p90_s: float | None = None
    itl_p99_s: float | None = None
    max_itl_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None

    def __post_init__(self) -> None:
        for metric in SLO_METRICS:
            value = getattr(self, metric)
            if value is None:
                continue
            if not is_number(value):
                raise ParameterError(f"SLO {metric} must be a number of seconds, got {value!r}")
            number = float(value)
            if not (math.isfinite(number) and number > 0):
                raise ParameterError(f"SLO {metric} must be a finite number of seconds > 0, got {value!r}")
            if number >= _IMPLAUSIBLE_S:
                raise ParameterError(
                    f"SLO {metric} = {value!r} s is over {_IMPLAUSIBLE_S:g} s; limits are in "
                    f"seconds, so for {value!r} ms write {number / 1e3:g}"
                )
            object.__setattr__(self, metric, number)
        if not self.limits:
            raise ParameterError(
                "an SLO needs at least one limit, e.g. SLO(ttft_p90_s=0.8, itl_p99_s=0.040); "
                f"the metrics are {', '.join(SLO_METRICS)}"
            )

    @classmethod
    def from_dict(cls, limits: Mapping[str, Any]) -> SLO:
        """An SLO from a mapping such as a notebook's YAML parameters.

        Keys are :data:`SLO_METRICS`; a key spelled in milliseconds (``itl_p99_ms``) or
        misspelt is refused with the right name.

        Raises
        ------
        ParameterError
            An unknown key (with the closest metric), a non-mapping, or a bad value.
        """
        if not isinstance(limits, Mapping):
            raise ParameterError(
                f"SLO.from_dict needs a mapping of metric -> seconds, got {type(limits).__name__}"
            )
        for key in limits:
            if key in SLO_METRICS:
                continue
            if isinstance(key, str) and key.endswith("_ms") and key[:-3] + "_s" in SLO_METRICS:
                raise ParameterError(
                    f"SLO limits are in seconds: write {key[:-3] + '_s'!r}: "
                    f"{limits[key]!r} / 1000 instead of {key!r}"
                )
            close = difflib.get_close_matches(str(key), SLO_METRICS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ParameterError(
                f"unknown SLO metric {key!r}.{hint} The metrics are {', '.join(SLO_METRICS)}"
            )
        return cls(**dict(limits))

    @property
    def limits(self) -> dict[str, float]:
        """The limits that are set, metric -> seconds, in :data:`SLO_METRICS` order."""
        return {m: getattr(self, m) for m in SLO_METRICS if getattr(self, m) is not None}

    @property
    def itl_target_s(self) -> float | None:
        """The tightest inter-token limit (ITL percentiles and ``max_itl_s``) [s], if any:
        the step time the token budget must respect."""
        values = [getattr(self, m) for m in ITL_METRICS if getattr(self, m) is not None]
        return min(values) if values else None

    @property
    def itl_target_metric(self) -> str | None:
        """Which metric :attr:`itl_target_s` comes from."""
        target = self.itl_target_s
        if target is None:
            return None
        return next(m for m in ITL_METRICS if getattr(self, m) == target)

    def violations(self, summary: Mapping[str, Any]) -> list[Violation]:
        """The limits ``summary`` breaks, worst (largest value/limit) first.

        Raises
        ------
        KeyError
            When the summary lacks a limited metric.
        """
        found = []
        for metric, limit in self.limits.items():
            if metric not in summary:
                raise KeyError(
                    f"summary has no {metric!r} to check against the SLO (keys: {', '.join(summary)})"
                )
            value = float(summary[metric])
            if math.isnan(value):
                continue
            if value > limit:
                found.append(Violation(metric, value, limit))
        return sorted(found, key=lambda v: -v.ratio)

    def holds(self, summary: Mapping[str, Any]) -> bool:
        """Whether every limit is met by ``summary`` (a :meth:`SimResult.summary` dict or a
        sweep row)."""
        return not self.violations(summary)

    def __str__(self) -> str:
        return " and ".join(f"{m} ≤ {_fmt_s(v)}" for m, v in self.limits.items())


def _check_slo(slo: object) -> SLO:
    if not isinstance(slo, SLO):
        raise ParameterError(f"slo must be an SLO, e.g. SLO(ttft_p90_s=0.8, itl_p99_s=0.040), got {slo!r}")
    return slo


# --------------------------------------------------------------------------------------------
# Capacity
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CapacityResult:
    """The highest offered load at which an SLO holds, and what breaks just above it.

    Attributes
    ----------
    capacity_per_s : float
        Highest offered load simulated at which the SLO held [1/s]: capacity per replica.
    upper_per_s : float
        Lowest offered load simulated at which it failed [1/s]; the true boundary lies in
        ``(capacity_per_s, upper_per_s]``, at most ``tolerance_fraction`` above capacity.
    summary : dict
        The sweep row (summary and gate diagnostics) at ``capacity_per_s``.
    summary_above : dict
        The row at ``upper_per_s``.
    breaking : tuple of Violation
        The limits broken at ``upper_per_s``, worst first.
    num_simulations : int
        Simulations the search ran [count].
    tolerance_fraction : float
        Relative width the bisection stopped at [-].
    slo : SLO
    engine : EngineConfig
    hardware, model, cost : str
        Slugs and cost name.
    seed : int
    evaluations : pandas.DataFrame
        Every simulation in the order run: ``rate_per_s``, ``holds``, ``breaks_on`` and the
        sweep columns; handy to plot the search on a load sweep.
    """

    capacity_per_s: float
    upper_per_s: float
    summary: dict[str, Any]
    summary_above: dict[str, Any]
    breaking: tuple[Violation, ...]
    num_simulations: int
    tolerance_fraction: float
    slo: SLO
    engine: EngineConfig
    hardware: str
    model: str
    cost: str
    seed: int
    evaluations: pd.DataFrame = field(repr=False)

    @property
    def bracket_per_s(self) -> tuple[float, float]:
        """``(capacity_per_s, upper_per_s)`` [1/s]: SLO holds at the first, fails at the second."""
        return (self.capacity_per_s, self.upper_per_s)

    @property
    def binding_limit(self) -> str:
        """The metric that breaks worst just above capacity."""
        return self.breaking[0].metric

    def __str__(self) -> str:
        return (
            f"capacity {self.capacity_per_s:.3g} req/s per replica under {self.slo} "
            f"(budget {self.engine.max_num_batched_tokens}, max_num_seqs {self.engine.max_num_seqs}); "
            f"at {self.upper_per_s:.3g} req/s {', '.join(map(str, self.breaking))}"
        )


_AUTO_RANGE = 16.0  # first lower bound: the upper one divided by this
_MAX_DOUBLINGS = 8
_MAX_QUARTERINGS = 4


def capacity(
    workload: SweepWorkload,
    *,
    slo: SLO,
    engine: EngineConfig,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    cost: CostSpec = "ideal",
    seed: int = 0,
    tolerance_fraction: float = 0.02,
    rate_bounds_per_s: tuple[float, float] | None = None,
    mode: str = "fast",
) -> CapacityResult:
    """The highest offered load at which ``slo`` holds: capacity per replica, by bisection.

    Every simulation uses the same workload sample (common random numbers), so the answer is
    deterministic and moves only when the system does. The search keeps a bracket
    ``[lo, hi]`` with the SLO holding at ``lo`` and failing at ``hi`` and bisects it
    geometrically until ``hi / lo − 1 ≤ tolerance_fraction``; the capacity is ``lo``. A load
    that passes is never above a load that fails in the returned bracket, so a looser SLO never
    gets a lower capacity from the same search.

    Parameters
    ----------
    workload : SweepWorkload
    slo : SLO
    engine : EngineConfig
        The configuration (budget, cap, KV, policy).
    hardware : str or HardwareSpec
    model : str or ModelSpec
    cost : str, callable or cost model
        See :func:`make_cost`.
    seed : int
        Workload seed [-].
    tolerance_fraction : float
        Relative bracket width to stop at [-], in (0, 1): 0.02 finds capacity within 2 %.
    rate_bounds_per_s : (float, float) or None
        Loads to search between [1/s]: the SLO must hold at the first and fail at the second.
        ``None``: start at 1.25 × :func:`max_service_rate_per_s` (above which queues grow
        without bound), double while the SLO still holds (up to 8 times), and take 1/16 of it
        as the lower bound, quartering while the SLO fails (up to 4 times).
    mode : str
        Simulator mode.

    Returns
    -------
    CapacityResult

    Raises
    ------
    SLOUnattainableError
        The SLO fails at the lowest load: the message names the broken limits and what to
        change.
    CapacityAboveBoundsError
        The SLO still holds at the highest load.
    """
    workload = _check_workload(workload)
    _check_slo(slo)
    if not isinstance(engine, EngineConfig):
        raise ParameterError(f"engine must be an EngineConfig, got {type(engine).__name__}")
    hw = _as_hardware("hardware", hardware)
    mdl = _as_model("model", model)
    cost = _check_cost(cost)
    seed = _seed("seed", seed)
    tol = _fraction("tolerance_fraction", tolerance_fraction, low=0.0, high=1.0)
    num_kv_blocks(engine, hw, mdl)  # DoesNotFitError up front

    cost_model = make_cost(cost, hw, mdl)
    one_token_step_s = shortest_step_s(cost_model)
    evaluations: list[dict[str, Any]] = []
    cache: dict[float, dict[str, Any]] = {}

    def evaluate(rate: float) -> bool:
        if rate not in cache:
            row = run_point(SweepPoint(workload, rate, seed, engine, hw, mdl, cost, mode))
            violations = slo.violations(row)
            cache[rate] = row
            evaluations.append(
                {
                    "rate_per_s": rate,
                    "holds": not violations,
                    "breaks_on": ", ".join(v.metric for v in violations),
                    **row,
                }
            )
        return slo.holds(cache[rate])

    def fail_low(rate: float) -> SLOUnattainableError:
        violations = slo.violations(cache[rate])
        error = SLOUnattainableError(
            f"the SLO ({slo}) fails even at {rate:.3g} req/s, the lowest load searched, with "
            f"budget {engine.max_num_batched_tokens} and max_num_seqs {engine.max_num_seqs} on "
            f"{hw.name} + {mdl.name}: {'; '.join(map(str, violations))}. "
            f"{_advice(violations, one_token_step_s=one_token_step_s)}"
        )
        error.rate_per_s = rate
        error.violations = tuple(violations)
        return error

    def above(rate: float, message: str) -> CapacityAboveBoundsError:
        error = CapacityAboveBoundsError(message)
        error.rate_per_s = rate
        return error

    if rate_bounds_per_s is not None:
        lo, hi = _bounds(rate_bounds_per_s)
        if not evaluate(lo):
            raise fail_low(lo)
        if evaluate(hi):
            raise above(
                hi,
                f"the SLO ({slo}) still holds at {hi:.3g} req/s, the upper end of "
                f"rate_bounds_per_s; raise it (or pass rate_bounds_per_s=None to search "
                "automatically)",
            )
    else:
        mean_tokens = mean_sequence_tokens(workload, seed=seed)
        hi = 1.25 * max_service_rate_per_s(
            cost_model, max_num_batched_tokens=engine.max_num_batched_tokens, mean_sequence_tokens=mean_tokens
        )
        lo = None
        for _ in range(_MAX_DOUBLINGS):
            if not evaluate(hi):
                break
            lo, hi = hi, 2.0 * hi
        else:
            raise above(
                lo,
                f"the SLO ({slo}) still holds at {lo:.3g} req/s, far past the replica's "
                "service rate; with this few requests per simulation the queue never builds "
                "up. Raise the workload's num_requests or tighten the SLO",
            )
        if lo is None:
            lo = hi / _AUTO_RANGE
            for _ in range(_MAX_QUARTERINGS + 1):
                if evaluate(lo):
                    break
                hi, lo = lo, lo / 4.0
            else:
                raise fail_low(hi)

    while hi / lo - 1.0 > tol:
        mid = math.sqrt(lo * hi)
        if evaluate(mid):
            lo = mid
        else:
            hi = mid
    return CapacityResult(
        capacity_per_s=lo,
        upper_per_s=hi,
        summary=dict(cache[lo]),
        summary_above=dict(cache[hi]),
        breaking=tuple(slo.violations(cache[hi])),
        num_simulations=len(evaluations),
        tolerance_fraction=tol,
        slo=slo,
        engine=engine,
        hardware=hw.slug,
        model=mdl.slug,
        cost=_cost_label(cost),
        seed=seed,
        evaluations=pd.DataFrame.from_records(evaluations),
    )


def _bounds(bounds: object) -> tuple[float, float]:
    if isinstance(bounds, (str, bytes)) or not isinstance(bounds, Sequence) or len(bounds) != 2:
        raise ParameterError(f"rate_bounds_per_s must be a pair (low, high) of loads [1/s], got {bounds!r}")
    lo = _positive_rate("rate_bounds_per_s[0]", bounds[0])
    hi = _positive_rate("rate_bounds_per_s[1]", bounds[1])
    if not lo < hi:
        raise ParameterError(f"rate_bounds_per_s must be (low, high) with low < high, got {bounds!r}")
    return lo, hi


def _advice(violations: Sequence[Violation], *, one_token_step_s: float) -> str:
    """What to change when an SLO fails even at light load, per broken metric."""
    tips = []
    metrics = {v.metric for v in violations}
    below_floor = [v for v in violations if v.metric in ITL_METRICS and v.limit_s < one_token_step_s]
    if below_floor:
        tips.append(
            f"even a one-token step takes {_fmt_s(one_token_step_s)} (the weight read), over the "
            f"{below_floor[0].metric} limit, so no budget meets it: loosen it, or use faster "
            "memory or tensor parallelism"
        )
    elif metrics & set(ITL_METRICS):
        tips.append(
            "inter-token latency at light load is the step time of a step that mixes decodes "
            "with a full prompt chunk: lower max_num_batched_tokens to shorten it, or loosen the "
            "ITL limit"
        )
    if any(m.startswith("ttft") for m in metrics):
        tips.append(
            "time to first token at light load is the prompt's own prefill: raise "
            "max_num_batched_tokens so long prompts take fewer steps, use faster hardware, or "
            "loosen the TTFT limit"
        )
    if any(m.startswith("e2e") for m in metrics):
        tips.append(
            "end-to-end latency at light load is prefill plus output × step time: loosen it or "
            "use faster hardware"
        )
    return "Loosen the SLO or change the knobs: " + "; ".join(tips) + "."


# --------------------------------------------------------------------------------------------
# Capacity of several configurations: one search per configuration, failures as outcomes
# --------------------------------------------------------------------------------------------

CAPACITY_STATUSES = ("ok", "fails at every load", "holds at every load")
"""What a capacity search can end in: found, the SLO fails even at the lowest load, or it still
holds at the highest load searched."""


@dataclass(frozen=True, kw_only=True)
class CapacityTask:
    """One capacity search: everything a worker needs, small and picklable.

    The arguments of :func:`capacity`, ``workload`` included (see there).
    """

    workload: Any
    slo: SLO
    engine: EngineConfig
    hardware: str | HardwareSpec
    model: str | ModelSpec
    cost: Any = "ideal"
    seed: int = 0
    tolerance_fraction: float = 0.02
    rate_bounds_per_s: tuple[float, float] | None = None
    mode: str = "fast"


@dataclass(frozen=True)
class CapacityOutcome:
    """How one capacity search ended, an SLO that no load (or every load) meets included.

    Attributes
    ----------
    status : str
        One of :data:`CAPACITY_STATUSES`.
    result : CapacityResult or None
        The search's result when ``status`` is ``"ok"``.
    violations : tuple of Violation
        The limits broken just above capacity (``"ok"``) or at the lowest load searched
        (``"fails at every load"``); empty otherwise.
    rate_per_s : float
        The capacity (``"ok"``), else the load at which the search stopped [1/s]; NaN when
        unknown.
    message : str
        The error's message when the search did not find a capacity.
    """

    status: str
    result: CapacityResult | None
    violations: tuple[Violation, ...]
    rate_per_s: float
    message: str = ""

    def row(self, *summary_keys: str) -> dict[str, Any]:
        """The outcome as a table row.

        Parameters
        ----------
        *summary_keys : str
            Sweep columns to add from the simulation at capacity (NaN without a capacity).

        Returns
        -------
        dict
            ``capacity_per_s`` (NaN unless ``status`` is ``"ok"``), ``upper_per_s`` (the
            lowest load found to break the SLO, else where the search stopped), ``status``,
            ``breaks_on`` (the limit broken worst, ``""`` when none), ``breaks_detail``,
            ``num_simulations`` (NaN without a capacity), then ``summary_keys``.
        """
        result = self.result
        row: dict[str, Any] = {
            "capacity_per_s": result.capacity_per_s if result is not None else math.nan,
            "upper_per_s": result.upper_per_s if result is not None else self.rate_per_s,
            "status": self.status,
            "breaks_on": self.violations[0].metric if self.violations else "",
            "breaks_detail": "; ".join(map(str, self.violations)),
            "num_simulations": result.num_simulations if result is not None else math.nan,
        }
        for key in summary_keys:
            row[key] = result.summary.get(key, math.nan) if result is not None else math.nan
        return row


def run_capacity_task(task: CapacityTask) -> CapacityOutcome:
    """:func:`capacity` of one configuration, with an SLO that no load (or every load) meets
    as an outcome instead of an error.

    A module-level function so process pools and Dask can ship it to workers; :func:`tune` and
    :func:`capacity_by_budget` run one per candidate.
    """
    try:
        result = capacity(
            task.workload,
            slo=task.slo,
            engine=task.engine,
            hardware=task.hardware,
            model=task.model,
            cost=task.cost,
            seed=task.seed,
            tolerance_fraction=task.tolerance_fraction,
            rate_bounds_per_s=task.rate_bounds_per_s,
            mode=task.mode,
        )
    except SLOUnattainableError as exc:
        return CapacityOutcome(
            status="fails at every load",
            result=None,
            violations=tuple(getattr(exc, "violations", ())),
            rate_per_s=getattr(exc, "rate_per_s", math.nan),
            message=str(exc),
        )
    except CapacityAboveBoundsError as exc:
        return CapacityOutcome(
            status="holds at every load",
            result=None,
            violations=(),
            rate_per_s=getattr(exc, "rate_per_s", math.nan),
            message=str(exc),
        )
    return CapacityOutcome(
        status="ok", result=result, violations=result.breaking, rate_per_s=result.capacity_per_s
    )


def slo_bracket_per_s(table: pd.DataFrame, slo: SLO) -> tuple[float, float] | None:
    """Loads of a sweep between which ``slo`` breaks [1/s].

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`sweep` rows of one configuration (``rate_per_s`` and the limited metrics).
    slo : SLO

    Returns
    -------
    (float, float) or None
        The load just below the first load where the SLO fails (where it holds) and that first
        failing load: a ``rate_bounds_per_s`` for :func:`capacity`. ``None`` when it holds at
        every load or fails already at the lowest.
    """
    ordered = table.sort_values("rate_per_s")
    holds = [slo.holds(row) for row in ordered.to_dict("records")]
    if all(holds) or not holds[0]:
        return None
    first_fail = holds.index(False)
    rates = ordered.rate_per_s.to_numpy(dtype=float)
    return float(rates[first_fail - 1]), float(rates[first_fail])


_CAPACITY_PERCENTILES = tuple(f"{metric}_{pct}_s" for metric in ("ttft", "itl") for pct in ("p50", "p90", "p99"))


def capacity_by_budget(
    workload: SweepWorkload,
    *,
    slo: SLO,
    budgets: Sequence[int],
    max_num_seqs: int,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    cost: CostSpec = "ideal",
    seed: int = 0,
    tolerance_fraction: float = 0.05,
    sweep_table: pd.DataFrame | None = None,
    engine: EngineConfig | None = None,
    executor: cf.Executor | None = None,
    progress: bool | None = None,
    mode: str = "fast",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Capacity per replica under ``slo`` for each budget (:func:`capacity`, one search each).

    When ``sweep_table`` (a :func:`sweep` of the same workload, cap, hardware, model, cost and
    seed) shows where the SLO breaks for a budget (:func:`slo_bracket_per_s`), the bisection
    starts from that bracket of loads instead of searching from scratch: fewer simulations,
    same answer within the tolerance. A budget whose SLO fails at every load (or holds at
    every load searched) gets a row saying so instead of an error
    (:func:`run_capacity_task`).

    Parameters
    ----------
    workload : SweepWorkload
    slo : SLO
    budgets : sequence of int
        ``max_num_batched_tokens`` values [tokens], each >= ``max_num_seqs``.
    max_num_seqs : int
        The cap, the same for every budget [count].
    hardware : str or HardwareSpec
    model : str or ModelSpec
    cost : str, callable or cost model
        See :func:`make_cost`.
    seed : int
        Workload seed [-].
    tolerance_fraction : float
        Relative precision of each search [-].
    sweep_table : pandas.DataFrame, optional
        A load sweep to take brackets from.
    engine : EngineConfig, optional
        Template for the other knobs (as in :func:`sweep`).
    executor : concurrent.futures.Executor, optional
        Runs the searches, one task per budget. ``None``: a local process pool for the call
        (:func:`default_executor`) when there are several budgets, else this process.
        Everything passed must be picklable for a pool (package workloads and cost names are;
        objects defined in a notebook cell are not: pass a :class:`SerialExecutor` for those).
    progress : bool or None
        Progress bar over the searches (see :func:`sweep`).
    mode : str
        Simulator mode.

    Returns
    -------
    (pandas.DataFrame, pandas.DataFrame)
        *Capacities*, one row per budget: ``budget_tokens``, ``max_num_seqs``, ``workload``,
        ``capacity_per_s`` (NaN unless ``status`` is ``"ok"``), ``upper_per_s`` (lowest load
        found to break the SLO), ``status`` (:data:`CAPACITY_STATUSES`), ``breaks_on`` (the
        limit broken worst just above capacity), ``breaks_detail``, ``num_simulations``, and
        the TTFT/ITL p50/p90/p99 at capacity (``ttft_p90_s``, …).
        *Evaluations*, every simulation the searches ran: ``budget_tokens``, ``max_num_seqs``,
        ``workload``, ``rate_per_s``, ``holds`` and the summary columns.
    """
    workload = _check_workload(workload)
    _check_slo(slo)
    template = _engine_template(engine)
    label = str(getattr(workload, "label", "workload"))
    tasks = []
    for budget in budgets:
        bounds = None
        if sweep_table is not None:
            rows = sweep_table[
                (sweep_table.max_num_batched_tokens == budget) & (sweep_table.max_num_seqs == max_num_seqs)
            ]
            bounds = slo_bracket_per_s(rows, slo) if len(rows) else None
        tasks.append(
            CapacityTask(
                workload=workload,
                slo=slo,
                engine=replace(template, max_num_batched_tokens=int(budget), max_num_seqs=int(max_num_seqs)),
                hardware=hardware,
                model=model,
                cost=cost,
                seed=seed,
                tolerance_fraction=tolerance_fraction,
                rate_bounds_per_s=bounds,
                mode=mode,
            )
        )
    outcomes = _run_all(
        run_capacity_task,
        tasks,
        executor=executor,
        progress=progress,
        describe=lambda i: f"the capacity search for budget {tasks[i].engine.max_num_batched_tokens}",
        unit="budget",
        desc="budgetlab capacity",
    )
    rows, evaluations = [], []
    for budget, outcome in zip(budgets, outcomes):
        result = outcome.result
        rows.append(
            {
                "budget_tokens": int(budget),
                "max_num_seqs": int(max_num_seqs),
                "workload": label,
                **outcome.row(*_CAPACITY_PERCENTILES),
            }
        )
        if result is not None:
            evaluations.append(
                result.evaluations.assign(budget_tokens=int(budget), max_num_seqs=int(max_num_seqs), workload=label)
            )
    searched = pd.concat(evaluations, ignore_index=True) if evaluations else pd.DataFrame(
        columns=["budget_tokens", "max_num_seqs", "workload", "rate_per_s", "holds"]
    )
    return pd.DataFrame(rows), searched


def best_capacity(capacities: pd.DataFrame) -> pd.Series | None:
    """The row of :func:`capacity_by_budget` with the highest capacity (the smallest budget
    among ties), or ``None`` when no budget meets the SLO at any load searched."""
    found = capacities[capacities.status == "ok"]
    if found.empty:
        return None
    best = found.capacity_per_s.max()
    return found[found.capacity_per_s == best].sort_values("budget_tokens").iloc[0]
