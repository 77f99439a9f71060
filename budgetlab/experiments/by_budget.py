"""Capacity per replica for each token budget: one capacity search per budget, as one table.

:func:`capacity_by_budget` answers notebook 07's question (which budget carries the most load
under an SLO?) with :func:`~budgetlab.experiments.capacity.run_capacity_task` per budget, each
started from the bracket a load sweep already shows (:func:`slo_bracket_per_s`). It returns a
:class:`CapacityByBudget`: the capacities (budget column ``max_num_batched_tokens``, as in every
sweep table), every simulation the searches ran, the best budget (:func:`best_capacity`) and
the key numbers for a report.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from budgetlab.cost.named import CostSpec, check_cost, cost_label
from budgetlab.experiments.capacity import CAPACITY_PERCENTILES, CapacityTask, Numbers, run_capacity_task
from budgetlab.experiments.executors import run_tasks
from budgetlab.experiments.progress import ProgressSpec
from budgetlab.experiments.slo import SLO, check_slo
from budgetlab.experiments.sweep import engine_template
from budgetlab.simulator import SimMode
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec
from budgetlab.workload import SweepWorkload, check_workload

__all__ = ["capacity_by_budget", "CapacityByBudget", "best_capacity", "slo_bracket_per_s"]


def slo_bracket_per_s(table: pd.DataFrame, slo: SLO) -> tuple[float, float] | None:
    """Loads of a sweep between which ``slo`` breaks [1/s].

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`~budgetlab.experiments.sweep.sweep` rows of one configuration (``rate_per_s`` and the limited metrics).
    slo : SLO

    Returns
    -------
    (float, float) or None
        The load just below the first load where the SLO fails (where it holds) and that first
        failing load: a ``rate_bounds_per_s`` for :func:`~budgetlab.experiments.capacity.capacity`.
        ``None`` when it holds at every load or fails already at the lowest.
    """
    ordered = table.sort_values("rate_per_s")
    holds = [slo.holds(row) for row in ordered.to_dict("records")]
    if all(holds) or not holds[0]:
        return None
    first_fail = holds.index(False)
    rates = ordered.rate_per_s.to_numpy(dtype=float)
    return float(rates[first_fail - 1]), float(rates[first_fail])


@dataclass(frozen=True, eq=False)
class CapacityByBudget:
    """What :func:`capacity_by_budget` found: one capacity per budget, and every simulation run.

    Attributes
    ----------
    capacities : pandas.DataFrame
        One row per budget: ``max_num_batched_tokens``, ``max_num_seqs``, ``workload``,
        ``cost`` (the step-cost model's name, ``"typical"`` or ``"ideal"``),
        ``capacity_per_s`` (NaN unless ``status`` is ``"ok"``) [1/s], ``upper_per_s`` (lowest
        load found to break the SLO) [1/s], ``status`` (:data:`CAPACITY_STATUSES`),
        ``breaks_on`` (the limit broken worst just above capacity), ``breaks_detail``,
        ``num_simulations``, and the TTFT/ITL p50/p90/p99 at capacity (``ttft_p90_s``, …) [s].
    evaluations : pandas.DataFrame
        Every simulation the searches ran: ``max_num_batched_tokens``, ``max_num_seqs``,
        ``workload``, ``rate_per_s``, ``holds`` and the summary columns.
    """

    capacities: pd.DataFrame
    evaluations: pd.DataFrame = field(repr=False)

    @property
    def best(self) -> pd.Series | None:
        """:func:`best_capacity` of :attr:`capacities`: the row with the highest capacity (the
        smallest budget among ties), or ``None`` when no budget meets the SLO."""
        return best_capacity(self.capacities)

    def numbers(self) -> Numbers:
        """The key numbers, as a plain dict for a report's results.

        ``capacity_per_s``, ``capacity_breaks_on`` and ``capacity_status``, each a dict budget
        [tokens] -> value (capacity [1/s], NaN without one; the worst limit broken; the
        status), ``best_budget_tokens``, the budget of :attr:`best` (``None`` when no budget
        meets the SLO), and ``cost``, the step-cost model that produced them.
        """
        table = self.capacities
        budgets = [int(b) for b in table.max_num_batched_tokens]
        best = self.best
        return {
            "capacity_per_s": dict(zip(budgets, map(float, table.capacity_per_s))),
            "capacity_breaks_on": dict(zip(budgets, map(str, table.breaks_on))),
            "capacity_status": dict(zip(budgets, map(str, table.status))),
            "best_budget_tokens": None if best is None else int(best.max_num_batched_tokens),
            "cost": str(table["cost"].iloc[0]) if "cost" in table and len(table) else "",
        }


def capacity_by_budget(
    workload: SweepWorkload,
    *,
    slo: SLO,
    budgets: Sequence[int],
    max_num_seqs: int,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    cost: CostSpec = "typical",
    seed: int = 0,
    tolerance_fraction: float = 0.05,
    sweep_table: pd.DataFrame | None = None,
    engine: EngineConfig | None = None,
    executor: cf.Executor | None = None,
    progress: ProgressSpec = None,
    mode: SimMode = "fast",
) -> CapacityByBudget:
    """Capacity per replica under ``slo`` for each budget (:func:`capacity`, one search each).

    When ``sweep_table`` (a :func:`~budgetlab.experiments.sweep.sweep` of the same workload,
    cap, hardware, model, cost and seed) shows where the SLO breaks for a budget
    (:func:`slo_bracket_per_s`), the bisection starts from that bracket of loads instead of
    searching from scratch: fewer simulations, same answer within the tolerance. A budget whose
    SLO fails at every load (or holds at every load searched) gets a row saying so instead of an
    error (:func:`run_capacity_task`).

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
        See :func:`budgetlab.cost.named.make_cost`.
    seed : int
        Workload seed [-] (as in :func:`~budgetlab.experiments.sweep.sweep`).
    tolerance_fraction : float
        Relative precision of each search [-].
    sweep_table : pandas.DataFrame, optional
        A load sweep to take brackets from.
    engine : EngineConfig, optional
        Template for the other knobs (as in :func:`~budgetlab.experiments.sweep.sweep`).
    executor : concurrent.futures.Executor, optional
        Runs the searches, one task per budget. ``None``: a local process pool for the call
        (:func:`~budgetlab.experiments.executors.default_executor`) when there are several
        budgets, else this process. Everything passed must be picklable for a pool (package
        workloads and cost names are; objects defined in a notebook cell are not: pass a
        :class:`~budgetlab.experiments.executors.SerialExecutor` for those).
    progress : bool, None or callable
        A line counting the searches done (see :mod:`budgetlab.experiments.progress`).
    mode : str
        Simulator mode.

    Returns
    -------
    CapacityByBudget
        ``.capacities`` (one row per budget, the budget in ``max_num_batched_tokens``, as in a
        sweep table), ``.evaluations`` (every simulation), ``.best`` and ``.numbers()``.
    """
    workload = check_workload(workload)
    check_slo(slo)
    cost = check_cost(cost)
    template = engine_template(engine)
    label = str(workload.label)
    tasks = [
        CapacityTask(
            workload=workload,
            slo=slo,
            engine=replace(template, max_num_batched_tokens=int(budget), max_num_seqs=int(max_num_seqs)),
            hardware=hardware,
            model=model,
            cost=cost,
            seed=seed,
            tolerance_fraction=tolerance_fraction,
            rate_bounds_per_s=_sweep_bracket(sweep_table, slo, budget=int(budget), max_num_seqs=int(max_num_seqs)),
            mode=mode,
        )
        for budget in budgets
    ]
    outcomes = run_tasks(
        run_capacity_task,
        tasks,
        executor=executor,
        progress=progress,
        describe=lambda i: f"the capacity search for budget {tasks[i].engine.max_num_batched_tokens}",
        unit="budget",
        desc="budgetlab capacity",
    )
    rows, evaluations = [], []
    for task, outcome in zip(tasks, outcomes):
        knobs = {
            "max_num_batched_tokens": task.engine.max_num_batched_tokens,
            "max_num_seqs": task.engine.max_num_seqs,
            "workload": label,
            "cost": cost_label(cost),
        }
        rows.append({**knobs, **outcome.row(*CAPACITY_PERCENTILES)})
        if outcome.result is not None:
            evaluations.append(outcome.result.evaluations.assign(**knobs))
    searched = (
        pd.concat(evaluations, ignore_index=True)
        if evaluations
        else pd.DataFrame(columns=["max_num_batched_tokens", "max_num_seqs", "workload", "cost", "rate_per_s", "holds"])
    )
    return CapacityByBudget(capacities=pd.DataFrame(rows), evaluations=searched)


def _sweep_bracket(
    table: pd.DataFrame | None, slo: SLO, *, budget: int, max_num_seqs: int
) -> tuple[float, float] | None:
    """:func:`slo_bracket_per_s` of one budget's rows of a sweep, when there are any."""
    if table is None:
        return None
    rows = table[(table.max_num_batched_tokens == budget) & (table.max_num_seqs == max_num_seqs)]
    return slo_bracket_per_s(rows, slo) if len(rows) else None


def best_capacity(capacities: pd.DataFrame) -> pd.Series | None:
    """The row of a :attr:`CapacityByBudget.capacities` table with the highest capacity (the
    smallest budget among ties), or ``None`` when no budget meets the SLO at any load searched."""
    found = capacities[capacities.status == "ok"]
    if found.empty:
        return None
    best = found.capacity_per_s.max()
    return found[found.capacity_per_s == best].sort_values("max_num_batched_tokens").iloc[0]
