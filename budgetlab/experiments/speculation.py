"""Speculative decoding as a knob: how many drafts, and at what load drafting stops paying.

A verification step runs ``1 + k`` query tokens per decoding request and yields
``1 + accepted`` tokens, so speculation trades budget (and compute) for fewer steps per output
token. At low load the steps are memory-bound and nearly free to widen: drafting cuts the time
per output token. As load grows the drafts crowd prefills out of the budget (a 2,048-token budget
at 256 sequences with ``k = 5`` leaves 2,048 − 256 × 6 = 512 tokens for prompts) and the steps
become compute-bound, so each rejected draft costs real time; past some load ``k = 0`` is faster.

* :func:`speculation_by_load` — a sweep over ``k`` and loads, with each point's speed-up over
  ``k = 0`` at the same load (time per output token, ``tpot_mean_s``).
* :func:`stops_paying_per_s` — from that table, the lowest load at which each ``k`` is no longer
  faster than ``k = 0``.
* :func:`tune_speculation` — the capacity under an SLO for each ``k`` at a fixed budget and cap,
  and the recommended ``k`` (:func:`budgetlab.tune` runs it with ``speculative_tokens=``).

Every number is simulated with the cost model given (default ``"typical"``, the real-engine cost;
a cost built for a speculating engine includes the drafter's own work) and the acceptance given
(default: the method's published acceptance, :func:`budgetlab.workload.default_acceptance`).
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from budgetlab._checks import grid_axis, int_at_least
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost.named import CostSpec, cost_label
from budgetlab.display import html_table
from budgetlab.errors import ParameterError
from budgetlab.experiments.capacity import CapacityOutcome, CapacityTask, run_capacity_task
from budgetlab.experiments.executors import run_tasks
from budgetlab.experiments.progress import ProgressSpec
from budgetlab.experiments.search import check_tolerance
from budgetlab.experiments.slo import SLO, check_slo
from budgetlab.experiments.sweep import sweep
from budgetlab.simulator import SimMode
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec
from budgetlab.workload import AcceptanceModel, SweepWorkload, check_workload

__all__ = [
    "SPECULATIVE_TOKENS",
    "SPEEDUP_METRIC",
    "SpeculationResult",
    "speculation_by_load",
    "stops_paying_per_s",
    "tune_speculation",
]

#: The ``k`` values tried by default: none, and 1 to 7 drafts (published recipes use 1–7).
SPECULATIVE_TOKENS = (0, 1, 2, 3, 4, 5, 6, 7)
#: What "faster" means: the mean time per output token after the first (vLLM's TPOT).
SPEEDUP_METRIC = "tpot_mean_s"


def _tokens_axis(tokens: object) -> tuple[int, ...]:
    axis = grid_axis("tokens", tokens, lambda name, v: int_at_least(name, v, 0))
    if 0 not in axis:
        axis = (0, *axis)  # the baseline every speed-up is measured against
    return tuple(sorted(axis))


def _drafting(engine: EngineConfig, method: str | None) -> EngineConfig:
    method = method if method is not None else engine.speculative_method
    if method is None:
        raise ParameterError(
            "give the drafting method: speculative_method='eagle3' (or 'ngram', 'draft_model', 'eagle', "
            "'mtp'), or an engine with one"
        )
    return replace(engine, num_speculative_tokens=1, speculative_method=method)


def speculation_by_load(
    workload: SweepWorkload,
    *,
    engine: EngineConfig,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    rates_per_s: float | Sequence[float],
    tokens: int | Sequence[int] = SPECULATIVE_TOKENS,
    speculative_method: str | None = None,
    cost: CostSpec = "typical",
    acceptance: AcceptanceModel | None = None,
    seed: int = 0,
    executor: cf.Executor | None = None,
    progress: ProgressSpec = None,
    mode: SimMode = "fast",
) -> pd.DataFrame:
    """Each ``k`` of ``tokens`` (0 always included) at each load: the sweep's row plus
    ``speedup`` = ``tpot_mean_s`` at ``k = 0`` / ``tpot_mean_s`` at ``k`` (same load, same
    requests; > 1: drafting is faster).

    Parameters
    ----------
    workload : SweepWorkload
    engine : EngineConfig
        The budget, cap and other knobs; its ``speculative_method`` drafts unless
        ``speculative_method`` is given.
    hardware, model : str or spec
    rates_per_s : float or sequence of float
        Offered loads [1/s].
    tokens : int or sequence of int
        ``k`` values [tokens].
    speculative_method : str or None
    cost : str, callable or cost model
    acceptance : AcceptanceModel or None
        Default: the method's published acceptance.
    seed : int
    executor, progress, mode
        As in :func:`~budgetlab.experiments.sweep.sweep`.

    Returns
    -------
    pandas.DataFrame
        :func:`~budgetlab.experiments.sweep.sweep`'s rows, with ``speedup``.
    """
    template = _drafting(engine, speculative_method)
    table = sweep(
        workload,
        budgets=template.max_num_batched_tokens,
        max_num_seqs=template.max_num_seqs,
        num_speculative_tokens=_tokens_axis(tokens),
        rates_per_s=rates_per_s,
        hardware=hardware,
        model=model,
        cost=cost,
        seed=seed,
        engine=template,
        executor=executor,
        progress=progress,
        mode=mode,
        acceptance=acceptance,
    )
    baseline = table[table["num_speculative_tokens"] == 0].set_index("rate_per_s")[SPEEDUP_METRIC]
    table["speedup"] = table["rate_per_s"].map(baseline) / table[SPEEDUP_METRIC]
    return table


def stops_paying_per_s(table: pd.DataFrame) -> dict[int, float | None]:
    """For each ``k > 0`` of a :func:`speculation_by_load` table, the lowest load [1/s] at which it
    is no longer faster than ``k = 0`` (``speedup <= 1``), or None when it is faster at every
    load of the table."""
    out: dict[int, float | None] = {}
    for k, rows in table[table["num_speculative_tokens"] > 0].groupby("num_speculative_tokens"):
        losing = rows.loc[rows["speedup"] <= 1.0, "rate_per_s"]
        out[int(k)] = float(losing.min()) if len(losing) else None
    return out


@dataclass(frozen=True)
class SpeculationResult:
    """:func:`tune_speculation`'s answer.

    Attributes
    ----------
    num_speculative_tokens : int
        The recommended ``k`` (0: do not speculate).
    speculative_method : str
    capacity_per_s : float
        Its capacity under the SLO [1/s].
    table : pandas.DataFrame
        One row per ``k``: ``num_speculative_tokens``, ``status``, ``capacity_per_s`` (NaN when
        the SLO fails at every load), ``gain`` (capacity over ``k = 0``'s).
    explanation : tuple of str
    """

    num_speculative_tokens: int
    speculative_method: str
    capacity_per_s: float
    table: pd.DataFrame = field(repr=False)
    explanation: tuple[str, ...] = field(repr=False)

    def _repr_html_(self) -> str:
        rows = [
            (f"k = {int(r.num_speculative_tokens)}", f"{r.capacity_per_s:.3g} req/s ({r.status})")
            for r in self.table.itertuples()
        ]
        return html_table(f"Capacity by drafts ({self.speculative_method})", rows)


def tune_speculation(
    workload: SweepWorkload,
    *,
    slo: SLO,
    engine: EngineConfig,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    tokens: int | Sequence[int] = SPECULATIVE_TOKENS,
    speculative_method: str | None = None,
    cost: CostSpec = "typical",
    acceptance: AcceptanceModel | None = None,
    seed: int = 0,
    tolerance_fraction: float = 0.02,
    executor: cf.Executor | None = None,
    progress: ProgressSpec = None,
    mode: SimMode = "fast",
) -> SpeculationResult:
    """The capacity under ``slo`` of each ``k`` (0 always included) with ``engine``'s budget and
    cap, and the best ``k``: the highest capacity; within the search tolerance of it, the fewest
    drafts (each draft costs compute that a misjudged acceptance would waste).

    Returns
    -------
    SpeculationResult
    """
    workload = check_workload(workload)
    check_slo(slo)
    hw, mdl = resolve_hardware(hardware), resolve_model(model)
    tol = check_tolerance(tolerance_fraction)
    template = _drafting(engine, speculative_method)
    method = str(template.speculative_method)
    axis = _tokens_axis(tokens)
    tasks = [
        CapacityTask(
            workload=workload,
            slo=slo,
            engine=replace(template, num_speculative_tokens=k, speculative_method=method if k else None),
            hardware=hw,
            model=mdl,
            cost=cost,
            seed=seed,
            tolerance_fraction=tol,
            mode=mode,
            acceptance=acceptance,
        )
        for k in axis
    ]
    outcomes: list[CapacityOutcome] = run_tasks(
        run_capacity_task,
        tasks,
        executor=executor,
        progress=progress,
        describe=lambda i: f"k = {axis[i]}",
        unit="search",
        desc=f"budgetlab speculation ({cost_label(cost)} cost): capacity searches",
    )
    capacities = [o.result.capacity_per_s if o.result is not None else math.nan for o in outcomes]
    table = pd.DataFrame(
        {
            "num_speculative_tokens": axis,
            "status": [o.status for o in outcomes],
            "capacity_per_s": capacities,
        }
    )
    base = capacities[0]
    table["gain"] = table["capacity_per_s"] / base if base > 0 else math.nan
    valid = [(c, k) for k, c in zip(axis, capacities) if not math.isnan(c)]
    if not valid:
        raise ParameterError(
            f"the SLO ({slo}) fails at every load for every k in {list(axis)} with budget "
            f"{template.max_num_batched_tokens} and max_num_seqs {template.max_num_seqs}; tune the budget and cap "
            "first (budgetlab.tune)"
        )
    top = max(c for c, _ in valid)
    best_k = min(k for c, k in valid if c >= top / (1.0 + tol))
    best = capacities[axis.index(best_k)]
    listing = ", ".join(
        f"k = {k}: {c:.3g} req/s" if not math.isnan(c) else f"k = {k}: {o.status}"
        for k, c, o in zip(axis, capacities, outcomes)
    )
    sentences = [
        f"Capacity under {slo} with {method} drafting at budget {template.max_num_batched_tokens:,} and "
        f"max_num_seqs {template.max_num_seqs:,} ({cost_label(cost)} cost): {listing}.",
        (
            f"Recommendation: num_speculative_tokens = {best_k} ({best:.3g} req/s"
            + (f", {best / base:.2f}x the capacity without drafting)." if best_k and base > 0 else ").")
            if best_k
            else f"Recommendation: do not speculate; no k beats {base:.3g} req/s by more than the search tolerance."
        ),
    ]
    return SpeculationResult(
        num_speculative_tokens=best_k,
        speculative_method=method,
        capacity_per_s=best,
        table=table,
        explanation=tuple(sentences),
    )
