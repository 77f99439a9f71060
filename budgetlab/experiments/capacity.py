"""Capacity per replica: the highest offered load at which a latency SLO holds.

:func:`capacity` finds it for one configuration, by bisection on load with a stated relative
tolerance (the search itself is :mod:`budgetlab.experiments.search`), and returns a
:class:`CapacityResult`. For several configurations, :func:`run_capacity_task` runs one search
per :class:`CapacityTask` and reports an SLO that no load (or every load) meets as a
:class:`CapacityOutcome` instead of an error:
:func:`~budgetlab.experiments.by_budget.capacity_by_budget` runs one per budget and
:func:`budgetlab.tune` one per candidate.

"No capacity" is NaN everywhere: in :meth:`CapacityOutcome.row`, in ``capacity_by_budget``'s
table and in the tuner's candidates; :func:`why_no_capacity` says in words why a table of
searches found none.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import pandas as pd

from budgetlab._checks import random_seed
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost.named import CostSpec, check_cost, cost_label, make_cost
from budgetlab.cost.protocol import CostModel
from budgetlab.cost.roofline import shortest_step_s
from budgetlab.display import html_table, one_line
from budgetlab.errors import CapacityAboveBoundsError, ParameterError, SLOUnattainableError
from budgetlab.experiments.progress import ProgressReporter, ProgressSpec, progress_reporter
from budgetlab.experiments.search import (
    AUTO_RANGE,
    LoadProbe,
    auto_bracket,
    bisect_bracket,
    check_bounds,
    check_tolerance,
    given_bracket,
    unattainable,
)
from budgetlab.experiments.slo import SLO, Violation, check_slo
from budgetlab.experiments.sweep import SweepPoint, SweepValue, max_service_rate_per_s, run_point
from budgetlab.memory import num_kv_blocks
from budgetlab.simulator import SimMode
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec
from budgetlab.workload import AcceptanceModel, SweepWorkload, check_workload, mean_sequence_tokens

__all__ = [
    "capacity",
    "CapacityResult",
    "CAPACITY_STATUSES",
    "CapacityTask",
    "CapacityOutcome",
    "run_capacity_task",
    "CAPACITY_PERCENTILES",
    "why_no_capacity",
]

CAPACITY_PERCENTILES = tuple(f"{metric}_{pct}_s" for metric in ("ttft", "itl") for pct in ("p50", "p90", "p99"))
"""The latencies at capacity a capacity table and :meth:`CapacityResult.numbers` report."""

Numbers = dict[str, object]
"""A plain dict of key numbers (JSON-ready: floats, ints, strings, lists and dicts of them)."""


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
    summary: dict[str, SweepValue]
    summary_above: dict[str, SweepValue]
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

    def _display_rows(self) -> list[tuple[str, str]]:
        return [
            ("capacity per replica", f"{self.capacity_per_s:.3g} requests/s"),
            ("breaks at", f"{self.upper_per_s:.3g} requests/s on {'; '.join(map(str, self.breaking)) or '-'}"),
            ("SLO", str(self.slo)),
            ("engine", f"budget {self.engine.max_num_batched_tokens:,}, max_num_seqs {self.engine.max_num_seqs:,}"),
            ("setting", f"{self.hardware} + {self.model}, {self.cost} cost"),
            ("simulations", f"{self.num_simulations:,}"),
        ]

    def __repr__(self) -> str:
        return one_line(
            "CapacityResult", f"{self.capacity_per_s:.3g} req/s ({self.cost} cost)", self._display_rows()[1:4]
        )

    def _repr_html_(self) -> str:
        return html_table("CapacityResult", self._display_rows())

    @property
    def bracket_per_s(self) -> tuple[float, float]:
        """``(capacity_per_s, upper_per_s)`` [1/s]: SLO holds at the first, fails at the second."""
        return (self.capacity_per_s, self.upper_per_s)

    @property
    def binding_limit(self) -> str:
        """The metric that breaks worst just above capacity."""
        return self.breaking[0].metric

    def numbers(self) -> Numbers:
        """The key numbers of the search, as a plain dict for a report's results.

        ``capacity_per_s`` and ``upper_per_s`` [1/s], ``breaks_on`` (the worst limit broken
        just above capacity), ``breaks_detail``, ``num_simulations``, ``tolerance_fraction``,
        the configuration (``max_num_batched_tokens``, ``max_num_seqs``, ``hardware``,
        ``model``, ``cost``, ``seed``), ``slo`` (metric -> limit [s]) and ``at_capacity``, the
        TTFT/ITL p50/p90/p99 of the simulation at capacity [s].
        """
        return {
            "capacity_per_s": self.capacity_per_s,
            "upper_per_s": self.upper_per_s,
            "breaks_on": self.binding_limit,
            "breaks_detail": "; ".join(map(str, self.breaking)),
            "num_simulations": self.num_simulations,
            "tolerance_fraction": self.tolerance_fraction,
            "max_num_batched_tokens": self.engine.max_num_batched_tokens,
            "max_num_seqs": self.engine.max_num_seqs,
            "hardware": self.hardware,
            "model": self.model,
            "cost": self.cost,
            "seed": self.seed,
            "slo": self.slo.limits,
            "at_capacity": {key: self.summary.get(key, math.nan) for key in CAPACITY_PERCENTILES},
        }

    def __str__(self) -> str:
        return (
            f"capacity {self.capacity_per_s:.3g} req/s per replica under {self.slo} "
            f"(budget {self.engine.max_num_batched_tokens}, max_num_seqs {self.engine.max_num_seqs}, "
            f"{self.cost} cost); "
            f"at {self.upper_per_s:.3g} req/s {', '.join(map(str, self.breaking))}"
        )


def capacity(
    workload: SweepWorkload,
    *,
    slo: SLO,
    engine: EngineConfig,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    cost: CostSpec = "typical",
    seed: int = 0,
    tolerance_fraction: float = 0.02,
    rate_bounds_per_s: tuple[float, float] | None = None,
    mode: SimMode = "fast",
    progress: ProgressSpec = None,
    acceptance: AcceptanceModel | None = None,
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
        See :func:`budgetlab.cost.named.make_cost`.
    seed : int
        Workload seed [-].
    tolerance_fraction : float
        Relative bracket width to stop at [-], in [1e-6, 1): 0.02 finds capacity within 2 %.
    rate_bounds_per_s : (float, float) or None
        Loads to search between [1/s]: the SLO must hold at the first and fail at the second.
        ``None``: start at 1.25 × :func:`~budgetlab.experiments.sweep.max_service_rate_per_s`
        (above which queues grow without bound), double while the SLO still holds (up to 8
        times), and take 1/16 of it as the lower bound, quartering while the SLO fails (up to
        4 times).
    mode : str
        Simulator mode.
    progress : bool, None or callable
        A line counting the simulations run against an estimate of those left (the bracket,
        then the bisection steps); see :mod:`budgetlab.experiments.progress`. ``None``: in
        Jupyter or on a terminal; a callable gets ``(done, total, label)``.
    acceptance : AcceptanceModel or None
        A speculating ``engine``'s acceptance (:func:`budgetlab.simulate`'s ``acceptance``).

    Returns
    -------
    CapacityResult

    Raises
    ------
    SLOUnattainableError
        The SLO fails at the lowest load: the message names the broken limits and what to
        change; ``rate_per_s`` and ``violations`` say where and what.
    CapacityAboveBoundsError
        The SLO still holds at the highest load (its ``rate_per_s``).
    """
    workload = check_workload(workload)
    check_slo(slo)
    if not isinstance(engine, EngineConfig):
        raise ParameterError(f"engine must be an EngineConfig, got {type(engine).__name__}")
    hw, mdl = resolve_hardware(hardware), resolve_model(model)
    cost = check_cost(cost)
    seed = random_seed("seed", seed)
    tol = check_tolerance(tolerance_fraction)  # in [1e-6, 1): below, floats stop the bisection
    bounds = None if rate_bounds_per_s is None else check_bounds(rate_bounds_per_s)
    num_kv_blocks(engine, hw, mdl)  # DoesNotFitError up front

    cost_model = make_cost(cost, hw, mdl, engine=engine)
    with progress_reporter(progress, f"budgetlab capacity ({cost_label(cost)} cost): simulations") as reporter:
        point = partial(
            SweepPoint, workload, seed=seed, hardware=hw, model=mdl, cost=cost, mode=mode, acceptance=acceptance
        )
        return _search_capacity(point, workload, slo, engine, hw, mdl, cost, cost_model, seed, tol, bounds, reporter)


def _bisection_steps(lo: float, hi: float, tol: float) -> int:
    """Bisections from ``[lo, hi]`` down to a relative width ``tol`` [count]."""
    return max(0, math.ceil(math.log2(math.log(hi / lo) / math.log1p(tol)))) if hi / lo - 1.0 > tol else 0


def _search_capacity(
    point: Callable[..., SweepPoint],
    workload: SweepWorkload,
    slo: SLO,
    engine: EngineConfig,
    hw: HardwareSpec,
    mdl: ModelSpec,
    cost: CostSpec,
    cost_model: CostModel,
    seed: int,
    tol: float,
    bounds: tuple[float, float] | None,
    reporter: ProgressReporter,
) -> CapacityResult:
    """:func:`capacity` once its arguments are checked, reporting each simulation (``point(rate_per_s=,
    engine=)`` is the sweep point of one load)."""
    expected = 2 + _bisection_steps(1.0, AUTO_RANGE, tol)  # a bracket, then the bisection

    def simulate_at(rate: float) -> dict[str, SweepValue]:
        row = run_point(point(rate_per_s=rate, engine=engine))
        reporter.advance(total=max(expected, reporter.done + 1))
        return row

    probe = LoadProbe(simulate_at, slo)
    one_token_step_s = shortest_step_s(cost_model)
    setting = f"budget {engine.max_num_batched_tokens} and max_num_seqs {engine.max_num_seqs} on {hw.name} + {mdl.name}"

    def fail_low(rate: float) -> SLOUnattainableError:
        return unattainable(probe, rate, setting=setting, one_token_step_s=one_token_step_s)

    if bounds is not None:
        lo, hi = given_bracket(probe, bounds, fail_low=fail_low)
    else:
        service = max_service_rate_per_s(
            cost_model,
            max_num_batched_tokens=engine.max_num_batched_tokens,
            mean_sequence_tokens=mean_sequence_tokens(workload, seed=seed),
        )
        lo, hi = auto_bracket(probe, 1.25 * service, fail_low=fail_low)
    expected = len(probe.evaluations) + _bisection_steps(lo, hi, tol)
    lo, hi = bisect_bracket(probe, lo, hi, tolerance_fraction=tol)
    reporter.finish()
    return CapacityResult(
        capacity_per_s=lo,
        upper_per_s=hi,
        summary=dict(probe.row(lo)),
        summary_above=dict(probe.row(hi)),
        breaking=tuple(probe.violations(hi)),
        num_simulations=len(probe.evaluations),
        tolerance_fraction=tol,
        slo=slo,
        engine=engine,
        hardware=hw.slug,
        model=mdl.slug,
        cost=cost_label(cost),
        seed=seed,
        evaluations=pd.DataFrame.from_records(probe.evaluations),
    )


# --------------------------------------------------------------------------------------------
# Capacity of several configurations: one search per configuration, failures as outcomes
# --------------------------------------------------------------------------------------------

CAPACITY_STATUSES = ("ok", "fails at every load", "holds at every load")
"""What a capacity search can end in: found, the SLO fails even at the lowest load, or it still
holds at the highest load searched."""


def why_no_capacity(capacities: pd.DataFrame) -> str:
    """Why a table of capacity searches found no capacity, in one or two sentences.

    Parameters
    ----------
    capacities : pandas.DataFrame
        Rows with a ``status`` column (:data:`CAPACITY_STATUSES`): the ``capacities`` of
        :func:`~budgetlab.experiments.by_budget.capacity_by_budget`, the tuner's candidates,
        or several of them concatenated.

    Returns
    -------
    str
        ``""`` when any row found a capacity (status ``"ok"``). Otherwise, when some search
        still met the SLO at its highest load, that the simulations are too short for a queue
        to build (simulate more requests per load, or replay a longer trace); else that no
        row meets the SLO even at the lightest load (loosen it, or pick faster hardware).

    Examples
    --------
    Statuses ``["holds at every load", "fails at every load"]`` give the first advice;
    ``["fails at every load"]`` the second; ``["ok", "fails at every load"]`` give ``""``.
    """
    statuses = set(capacities["status"])
    if "ok" in statuses:
        return ""
    if "holds at every load" in statuses:
        return (
            "The SLO still held at the highest loads searched: with so few requests per simulation "
            "the queue never builds up. Simulate more requests per load, or replay a longer trace."
        )
    return (
        "No budget meets the SLO even at the lightest load searched: loosen the SLO, or pick faster "
        "hardware (the table above names the limit that breaks)."
    )


@dataclass(frozen=True, kw_only=True)
class CapacityTask:
    """One capacity search: everything a worker needs, small and picklable.

    The arguments of :func:`capacity`, ``workload`` included (see there).
    """

    workload: SweepWorkload
    slo: SLO
    engine: EngineConfig
    hardware: str | HardwareSpec
    model: str | ModelSpec
    cost: CostSpec = "typical"
    seed: int = 0
    tolerance_fraction: float = 0.02
    rate_bounds_per_s: tuple[float, float] | None = None
    mode: SimMode = "fast"
    acceptance: AcceptanceModel | None = None


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

    def row(self, *summary_keys: str) -> dict[str, SweepValue]:
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
        row: dict[str, SweepValue] = {
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

    A module-level function so process pools and Dask can ship it to workers;
    :func:`budgetlab.tune` and :func:`~budgetlab.experiments.by_budget.capacity_by_budget` run
    one per candidate.
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
            progress=False,  # the caller counts whole searches (a worker draws nothing)
            acceptance=task.acceptance,
        )
    except SLOUnattainableError as exc:
        return CapacityOutcome(
            status="fails at every load",
            result=None,
            violations=exc.violations,
            rate_per_s=exc.rate_per_s,
            message=str(exc),
        )
    except CapacityAboveBoundsError as exc:
        return CapacityOutcome(
            status="holds at every load", result=None, violations=(), rate_per_s=exc.rate_per_s, message=str(exc)
        )
    return CapacityOutcome(status="ok", result=result, violations=result.breaking, rate_per_s=result.capacity_per_s)
