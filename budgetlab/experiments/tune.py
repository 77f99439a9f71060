"""From a latency SLO to ``max_num_batched_tokens`` and ``max_num_seqs``: the tuner.

:func:`tune` follows the second seed's method, "change one budget at a time", and explains
its answer:

1. **Analytic first guess** (:mod:`budgetlab.experiments.guess`). The token budget is the
   largest step that meets the SLO's inter-token target (every running stream waits one step
   per token): :func:`~budgetlab.cost.budget_for_step_time` (closed form for the idealized
   cost, a numeric inverse of the step time for any other cost model), rounded *down* to a
   tile-friendly value (:func:`tile_budget`), and never above vLLM's default when the limit
   allows more (a looser limit never starts worse than no limit). The sequence cap is the KV
   pool's tokens divided by the workload's mean sequence (prompt + output) length: as many
   sequences as memory holds on average, rounded down to a multiple of 16 and never above the
   budget.
2. **Simulated search, one knob at a time.** Capacity under the SLO
   (:func:`~budgetlab.experiments.capacity.capacity`, one
   :func:`~budgetlab.experiments.capacity.run_capacity_task` per candidate) for a few budgets
   around the guess with the cap fixed, then for a few caps around the guess with the best
   budget. Every candidate is valid: a factor that asks for a budget vLLM refuses, one whose
   activations leave no KV pool for the workload's longest request, or one no step can fill
   (:func:`~budgetlab.experiments.guess.budget_range`), or for a cap above the budget or past
   what memory holds (:func:`~budgetlab.experiments.guess.cap_range`), is clamped into range
   and deduplicated, and the reason is in the candidate's ``note`` and in the explanation.
   Every candidate's capacity is in :attr:`TuneResult.candidates`.
3. **Why the winner wins.** Which gate binds at capacity (a :class:`~budgetlab.admission.Gate`:
   steps pinned at the cap, steps that fill the budget, requests held back by KV memory,
   preemptions) and which SLO limit breaks just above it, in :attr:`TuneResult.explanation`.

:func:`budget_frontier` reads the trade-off the recommendation sits on: a sweep over budgets
at one load, each budget's TTFT and ITL percentiles and whether it meets the SLO.

Cost model: every step is priced with ``cost`` (default ``"typical"``, the real-engine
:meth:`CalibratedCost.typical <budgetlab.cost.CalibratedCost.typical>`; ``"ideal"`` is the
seeds' roofline, which recommends budgets a real engine cannot sustain), and the result names
it (:attr:`TuneResult.cost`).

No cliff edges: each knob's candidates are ranked by their *robust* capacity, the lowest
capacity among the candidate and its neighbours in the search (the next smaller and larger
value; a candidate that fails at every load counts 0), so a budget whose next larger one
collapses is not recommended for its own slightly higher capacity. Ties: candidates whose
robust capacity is within the search tolerance of the best one (and not seen failing where the
best held) are equally good; among them the highest capacity of their own, then the analytic
value (or the one nearest to it), so the recommendation does not jump around on noise. A
candidate that failed where the best held is measurably worse and never kept for being near
the guess.

The margin (:class:`TuneMargin`): the winner's neighbours one step away (:data:`NEIGHBOUR_FACTORS`
of its budget and of its cap) are simulated too, and the recommended load
(:attr:`TuneResult.rate_per_s`) is the highest at which the winner *and* those neighbours all
hold the SLO: capacity derated until a configuration a little off the recommendation (a cost
model a little off the real engine) still meets it. The latencies there, as fractions of
their limits, are the latency headroom.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from budgetlab._checks import positive_factors, random_seed
from budgetlab.admission import Gate
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost.named import CostSpec, check_cost, cost_label
from budgetlab.display import html_table, one_line
from budgetlab.errors import CapacityAboveBoundsError, SLOUnattainableError
from budgetlab.experiments.capacity import CapacityOutcome, CapacityResult, CapacityTask, Numbers, run_capacity_task
from budgetlab.experiments.executors import check_executor, executor_for, run_tasks
from budgetlab.experiments.frontier import budget_frontier
from budgetlab.experiments.guess import (
    BUDGET_WITHOUT_ITL_TOKENS,
    CAP_MULTIPLE,
    FirstGuess,
    budget_candidates,
    budget_range,
    cap_candidates,
    cap_range,
    first_guess,
    tile_budget,
)
from budgetlab.experiments.margin import (
    NEIGHBOUR_FACTORS,
    TuneMargin,
    margin_of,
    neighbour_sentences,
    neighbours_of,
    outcome_text,
    pick_with_margin,
)
from budgetlab.experiments.progress import ProgressReporter, ProgressSpec, check_progress, progress_reporter
from budgetlab.experiments.search import check_tolerance
from budgetlab.experiments.slo import SLO, check_slo
from budgetlab.experiments.speculation import SpeculationResult, check_speculation_knob, tune_speculation
from budgetlab.experiments.sweep import SweepPoint, SweepValue, engine_template
from budgetlab.metrics import GATE_FRACTION_COLUMNS
from budgetlab.simulator import SimMode
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec
from budgetlab.text import fmt_latency, fmt_percent
from budgetlab.workload import AcceptanceModel, SweepWorkload, check_workload

__all__ = [
    "tile_budget",
    "FirstGuess",
    "first_guess",
    "TuneResult",
    "TuneMargin",
    "tune",
    "NEIGHBOUR_FACTORS",
    "binding_gate",
    "BUDGET_FACTORS",
    "CAP_FACTORS",
    "BUDGET_WITHOUT_ITL_TOKENS",
    "BINDING_THRESHOLD_FRACTION",
    "budget_frontier",
]

BUDGET_FACTORS = (0.5, 0.75, 0.875, 1.0, 1.125)
"""Budgets the search tries, as multiples of the first guess, rounded down to tiles (a factor
above 1 gives at least the next tile up), clamped into
:func:`~budgetlab.experiments.guess.budget_range`."""

CAP_FACTORS = (0.25, 0.5, 1.0, 1.5)
"""Sequence caps the search tries, as multiples of the first guess (multiples of 16), clamped
into :func:`~budgetlab.experiments.guess.cap_range`."""

BINDING_THRESHOLD_FRACTION = 0.05
"""A gate "binds" when it holds back at least this fraction of steps [-]."""

Row = dict[str, SweepValue]


_ROW_STATS = (
    "ttft_p90_s",
    "itl_p99_s",
    "cap_bound_fraction",
    "budget_full_fraction",
    "kv_blocked_fraction",
    "budget_utilization_fraction",
    "kv_peak_fraction",
    "num_preemptions",
)


def _candidate_row(
    phase: str, engine: EngineConfig, outcome: CapacityOutcome, guess: FirstGuess, note: str = ""
) -> Row:
    """One row of :attr:`TuneResult.candidates` (``capacity_per_s`` NaN without a capacity)."""
    return {
        "phase": phase,
        "max_num_batched_tokens": engine.max_num_batched_tokens,
        "max_num_seqs": engine.max_num_seqs,
        **outcome.row(*_ROW_STATS),
        "is_first_guess": _key(engine) == (guess.max_num_batched_tokens, guess.max_num_seqs),
        "note": note,
    }


@dataclass(frozen=True, eq=False)
class TuneResult:
    """The tuner's recommendation, every candidate it simulated, and why the winner wins.

    Attributes
    ----------
    max_num_batched_tokens : int
        Recommended budget [tokens].
    max_num_seqs : int
        Recommended cap [count].
    capacity_per_s : float
        Capacity per replica under the SLO with them [1/s].
    candidates : pandas.DataFrame
        One row per candidate in the order searched: ``phase`` (``"budget"`` or
        ``"max_num_seqs"``), the two knobs, ``capacity_per_s`` (NaN when the SLO fails at every
        load, as in every capacity table), ``upper_per_s``, ``status``, ``breaks_on`` /
        ``breaks_detail`` (the limits that break just above capacity, or at the lowest load),
        ``num_simulations``, the latencies and gate diagnostics at capacity, ``is_first_guess``,
        ``note`` (why a factor's value was clamped into the range worth simulating, ``""``
        when it was not) and ``chosen``.
    explanation : tuple of str
        Sentences: the first guess, each search step, the gate that binds and where the SLO
        breaks.
    first_guess : FirstGuess
    capacity : CapacityResult
        The winner's capacity search (its summary at capacity is the confirming simulation).
    slo : SLO
    binding_gate : Gate
        The gate that binds at capacity (:func:`binding_gate`): ``Gate.BUDGET``,
        ``Gate.SLOT``, ``Gate.KV``, or ``Gate.NONE`` when none holds back
        :data:`BINDING_THRESHOLD_FRACTION` of the steps; ``.label`` says it in words.
    engine : EngineConfig
        The recommended configuration.
    cost : str
        The step-cost model every number was simulated with (``"typical"``, ``"ideal"``, a
        factory's or class's name).
    speculation : SpeculationResult or None
        With ``num_speculative_tokens``: each ``k``'s capacity at the chosen budget and cap, and the
        recommended ``k`` (in :attr:`engine`; ``capacity_per_s`` stays the budget search's).
    margin : TuneMargin
        The recommended load and the latency headroom against the neighbours.
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    capacity_per_s: float
    candidates: pd.DataFrame = field(repr=False)
    explanation: tuple[str, ...] = field(repr=False)
    first_guess: FirstGuess = field(repr=False)
    capacity: CapacityResult = field(repr=False)
    slo: SLO = field(repr=False)
    binding_gate: Gate
    engine: EngineConfig = field(repr=False)
    cost: str = "typical"
    margin: TuneMargin | None = field(default=None, repr=False)
    speculation: SpeculationResult | None = field(default=None, repr=False)

    @property
    def rate_per_s(self) -> float:
        """The recommended load per replica [1/s]: :attr:`TuneMargin.rate_per_s` (capacity
        derated until the neighbours hold the SLO too), NaN without a margin."""
        return self.margin.rate_per_s if self.margin is not None else self.capacity_per_s

    def numbers(self) -> Numbers:
        """The key numbers of the recommendation, as a plain dict for a report's results.

        ``max_num_batched_tokens`` [tokens], ``max_num_seqs`` [count], ``capacity_per_s`` and
        ``upper_per_s`` [1/s], ``binding_gate`` (the :class:`~budgetlab.admission.Gate` key,
        ``"budget"``, ...) and ``binding_gate_label`` (its words), ``slo`` (metric -> limit
        [s]), ``first_guess`` (its budget, cap, ``step_budget_tokens``, ``kv_tokens`` and
        ``mean_sequence_tokens``), ``candidates`` (``phase``, the two knobs, ``capacity_per_s``,
        ``status``, ``breaks_on``, ``note`` and ``chosen`` per candidate), ``explanation``
        (the sentences), ``cost`` (the step-cost model), ``rate_per_s`` (the recommended load
        [1/s]) and ``margin`` (:meth:`TuneMargin.numbers`).
        """
        guess = self.first_guess
        columns = [
            "phase",
            "max_num_batched_tokens",
            "max_num_seqs",
            "capacity_per_s",
            "status",
            "breaks_on",
            "note",
            "chosen",
        ]
        return {
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "capacity_per_s": self.capacity_per_s,
            "upper_per_s": self.capacity.upper_per_s,
            "binding_gate": self.binding_gate.key,
            "binding_gate_label": self.binding_gate.label,
            "slo": self.slo.limits,
            "first_guess": {
                "max_num_batched_tokens": guess.max_num_batched_tokens,
                "max_num_seqs": guess.max_num_seqs,
                "step_budget_tokens": guess.step_budget_tokens,
                "kv_tokens": guess.kv_tokens,
                "mean_sequence_tokens": guess.mean_sequence_tokens,
            },
            "candidates": self.candidates[columns].to_dict(orient="records"),
            "explanation": list(self.explanation),
            "memory_tight": self.memory_tight,
            "cost": self.cost,
            "rate_per_s": self.rate_per_s,
            "margin": self.margin.numbers() if self.margin is not None else None,
        }

    @property
    def memory_tight(self) -> bool:
        """Whether the KV pool is tight (:attr:`FirstGuess.memory_tight`): then the explanation
        says so, and ``first_guess.memory_levers`` prices sharding, fp8 and a smaller budget."""
        return self.first_guess.memory_tight

    def __str__(self) -> str:
        return "\n".join(self.explanation)

    def _display_rows(self) -> list[tuple[str, str]]:
        margin = self.margin
        rows = [
            ("max_num_batched_tokens", f"{self.max_num_batched_tokens:,}"),
            ("max_num_seqs", f"{self.max_num_seqs:,}"),
            ("recommended load", self._rate_text()),
            ("cost model", self.cost),
            ("capacity per replica", f"{self.capacity_per_s:.3g} requests/s (this configuration alone)"),
        ]
        if margin is not None and margin.holds:
            rows.append(
                (
                    "latency headroom",
                    f"latencies at most {fmt_percent(margin.used_fraction(), decimals=0)} of their limits "
                    f"(neighbours {fmt_percent(margin.used_fraction('neighbours'), decimals=0)})",
                )
            )
        rows += [
            ("binding gate", self.binding_gate.label),
            ("SLO", str(self.slo)),
            ("candidates simulated", f"{len(self.candidates):,}"),
        ]
        clamped = int((self.candidates.get("note", pd.Series(dtype=str)) != "").sum())
        if clamped:
            rows.append(("clamped", f"{clamped:,} candidates moved into the range worth simulating (see note)"))
        if self.memory_tight:
            rows.append(("memory", "tight: the answer is memory, sharding or replicas, not a knob"))
        return rows

    def _rate_text(self) -> str:
        margin = self.margin
        if margin is None:
            return f"{self.capacity_per_s:.3g} requests/s"
        if not margin.holds:
            return f"none with margin: a neighbour ({margin.limited_by}) fails the SLO far below capacity"
        return (
            f"{margin.rate_per_s:.3g} requests/s ({fmt_percent(margin.derated_fraction, decimals=0)} below capacity: "
            "the neighbours one step away hold the SLO there too)"
        )

    def __repr__(self) -> str:
        margin = self.margin
        rows = [
            ("max_num_batched_tokens", f"{self.max_num_batched_tokens:,}"),
            ("max_num_seqs", f"{self.max_num_seqs:,}"),
            ("capacity", f"{self.capacity_per_s:.3g} req/s"),
        ]
        if margin is not None and margin.holds:
            rows.append(
                (
                    "margin",
                    f"load {fmt_percent(margin.derated_fraction, decimals=0)} below capacity, latencies ≤ "
                    f"{fmt_percent(margin.used_fraction(), decimals=0)} of their limits",
                )
            )
        elif margin is not None:
            rows.append(("margin", "none"))
        return one_line("TuneResult", f"{self.rate_per_s:.3g} req/s, {self.cost} cost", rows)

    def _repr_html_(self) -> str:
        return html_table("TuneResult (str() gives the reasons)", self._display_rows())


def tune(
    workload: SweepWorkload,
    *,
    slo: SLO,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    cost: CostSpec = "typical",
    engine: EngineConfig | None = None,
    seed: int = 0,
    tolerance_fraction: float = 0.02,
    budget_factors: Sequence[float] = BUDGET_FACTORS,
    cap_factors: Sequence[float] = CAP_FACTORS,
    executor: cf.Executor | None = None,
    progress: ProgressSpec = None,
    mode: SimMode = "fast",
    num_speculative_tokens: int | Sequence[int] | None = None,
    speculative_method: str | None = None,
    acceptance: AcceptanceModel | None = None,
) -> TuneResult:
    """Recommend ``max_num_batched_tokens`` and ``max_num_seqs`` for an SLO and a workload.

    Parameters
    ----------
    workload : SweepWorkload
        :class:`~budgetlab.workload.SyntheticWorkload` or :class:`~budgetlab.workload.TraceWorkload`;
        its ``num_requests`` sets each simulation's size (a few thousand at most keeps the
        search to seconds).
    slo : SLO
        The latency limits.
    hardware, model : str or spec
    cost : str, callable or cost model
        ``"typical"`` (default: :meth:`CalibratedCost.typical
        <budgetlab.cost.CalibratedCost.typical>` for each candidate's deployment, the
        real-engine step cost), ``"ideal"`` (the seeds' roofline), a factory or an instance
        (see :func:`budgetlab.cost.named.make_cost`); used for the first guess and every
        simulation, and named in the result (:attr:`TuneResult.cost`).
    engine : EngineConfig or None
        Template for the knobs not tuned (``block_size``, ``policy``, …).
    seed : int
        Workload seed [-].
    tolerance_fraction : float
        Relative precision of every capacity search [-]; also the margin within which two
        candidates count as tied.
    budget_factors : sequence of float
        Budgets tried, as multiples of the first guess (rounded down by :func:`tile_budget`;
        a factor above 1 gives at least the next tile above the guess), each finite and > 0.
        One outside the budgets worth simulating
        (:func:`~budgetlab.experiments.guess.budget_range`) is clamped into it, with the reason
        in its ``note``; values that land on one budget are simulated once.
    cap_factors : sequence of float
        Caps tried, as multiples of the first guess (multiples of 16), clamped the same way into
        :func:`~budgetlab.experiments.guess.cap_range` (at most the budget).
    executor : concurrent.futures.Executor or None
        Runs the candidates' capacity searches in parallel; ``None`` makes a local process
        pool for the call (see :mod:`budgetlab.experiments.executors` for Dask).
    progress : bool, None or callable
        A line counting the capacity searches and margin simulations done, per phase
        (:mod:`budgetlab.experiments.progress`). ``None`` (default): updating in place in
        Jupyter (blanked at the end) or on stderr when it is a terminal; ``False``: nothing;
        a callable gets ``(done, total, label)`` after each.
    mode : str
        Simulator mode.
    num_speculative_tokens, speculative_method, acceptance
        A third knob: with the budget and cap chosen (at ``engine``'s ``k``), each ``k`` here (0 too)
        drafting with ``speculative_method`` (default ``engine``'s) gets a capacity search
        (:func:`~budgetlab.experiments.speculation.tune_speculation`, :attr:`TuneResult.speculation`)
        and the recommended engine drafts the best. ``acceptance``: as :func:`budgetlab.simulate`'s.

    Returns
    -------
    TuneResult

    Raises
    ------
    SLOUnattainableError
        When no candidate budget meets the SLO even at the lightest load.
    CapacityAboveBoundsError
        When the SLO holds at every load searched for some candidate (too few requests per
        simulation for queues to build), so candidates cannot be ranked.
    NoBudgetMeetsTargetError
        When the ITL target is below even a one-token step.
    DoesNotFitError
        When no candidate fits: the model leaves no KV cache even at the smallest budget.
    ParameterError
        A factor that is not a finite number > 0 (NaN, infinite, negative, a string, a bool).
    """
    workload = check_workload(workload)
    check_slo(slo)
    hw, mdl = resolve_hardware(hardware), resolve_model(model)
    cost = check_cost(cost)
    seed = random_seed("seed", seed)
    template = engine_template(engine)
    if num_speculative_tokens is not None:  # checked before minutes of simulations
        check_speculation_knob(template, num_speculative_tokens, speculative_method)
    tol = check_tolerance(tolerance_fraction)  # in [1e-6, 1): below, floats stop the bisection
    check_executor(executor)
    check_progress(progress)  # before any work
    b_factors = positive_factors("budget_factors", budget_factors)
    c_factors = positive_factors("cap_factors", cap_factors)
    guess = first_guess(workload, slo=slo, hardware=hw, model=mdl, cost=cost, engine=template, seed=seed)

    def task(budget: int, cap: int) -> CapacityTask:
        eng = replace(template, max_num_batched_tokens=budget, max_num_seqs=cap)
        return CapacityTask(
            workload=workload,
            slo=slo,
            engine=eng,
            hardware=hw,
            model=mdl,
            cost=cost,
            seed=seed,
            tolerance_fraction=tol,
            mode=mode,
            acceptance=acceptance,
        )

    budget_guess = guess.max_num_batched_tokens
    bounds = guess.budget_range or budget_range(
        workload, hardware=hw, model=mdl, max_num_seqs=guess.max_num_seqs, engine=template, seed=seed
    )
    budgets = budget_candidates(budget_guess, b_factors, bounds)
    outcomes: dict[tuple[int, int], CapacityOutcome] = {}
    rows: list[Row] = []
    label = f"budgetlab tune ({cost_label(cost)} cost)"
    expected = len(budgets) + len(c_factors) + 2 * len(NEIGHBOUR_FACTORS)  # searches and margin runs
    # one pool for both phases (made here, and shut down at the end, unless one is passed)
    with (
        executor_for(executor, max(len(budgets), len(c_factors) + 1)) as pool,
        progress_reporter(progress, label) as reporter,
    ):
        reporter.update(0, expected, f"{label}: budget search")
        # Phase 1: the budget, with the cap fixed at its first guess (never above the budget).
        phase1 = [(task(b.value, min(guess.max_num_seqs, b.value)), b) for b in budgets]
        _search([t for t, _ in phase1], outcomes, pool, reporter)
        for t, b in phase1:
            rows.append(_candidate_row("budget", t.engine, outcomes[_key(t.engine)], guess, b.note))
        _refuse_unbounded(rows, slo, hw, mdl)
        best_budget = pick_with_margin(rows, "max_num_batched_tokens", budget_guess, tol)
        if best_budget is None:
            raise _nothing_meets(slo, rows, hw, mdl)
        # Phase 2: the cap, with the best budget (the phase-1 winner's cap is among them).
        cap_guess = min(guess.max_num_seqs, best_budget)
        cap_bounds = cap_range(
            workload,
            hardware=hw,
            model=mdl,
            max_num_batched_tokens=best_budget,
            smallest_seqs=min(CAP_MULTIPLE, cap_guess),
            engine=template,
            seed=seed,
        )
        caps = cap_candidates(guess.max_num_seqs, c_factors, cap_bounds)
        reporter.update(
            reporter.done, reporter.done + len(caps) + 2 * len(NEIGHBOUR_FACTORS), f"{label}: max_num_seqs search"
        )
        phase2 = [(task(best_budget, c.value), c) for c in caps]
        _search([t for t, _ in phase2], outcomes, pool, reporter)
        for t, c in phase2:
            rows.append(_candidate_row("max_num_seqs", t.engine, outcomes[_key(t.engine)], guess, c.note))
        phase2_rows = [r for r in rows if r["phase"] == "max_num_seqs"]
        _refuse_unbounded(phase2_rows, slo, hw, mdl)
        # the phase-1 winner is among the phase-2 candidates, so some cap always succeeds
        best_cap = pick_with_margin(phase2_rows, "max_num_seqs", cap_guess, tol) or cap_guess
        winner = outcomes[(best_budget, best_cap)].result
        assert winner is not None  # _pick chose it among the "ok" outcomes
        neighbours = neighbours_of(best_budget, best_cap, bounds, cap_bounds, template)
        reporter.update(reporter.done, reporter.done + len(neighbours), f"{label}: margin")
        margin = margin_of(
            winner,
            neighbours,
            outcomes,
            point=lambda eng, rate: SweepPoint(workload, rate, seed, eng, hw, mdl, cost, mode),
            pool=pool,
            reporter=reporter,
            tol=tol,
        )
        reporter.finish(f"{label}: done")

    candidates = pd.DataFrame.from_records(rows)
    candidates["chosen"] = (candidates["max_num_batched_tokens"] == best_budget) & (
        candidates["max_num_seqs"] == best_cap
    )
    gate = binding_gate(winner.summary)
    explanation = (*_explain(guess, candidates, winner, gate, best_budget, best_cap, tol), str(margin))
    speculation = None
    recommended = winner.engine
    if num_speculative_tokens is not None:  # the third knob, with the budget and cap chosen
        speculation = tune_speculation(
            workload,
            slo=slo,
            engine=winner.engine,
            hardware=hw,
            model=mdl,
            num_speculative_tokens=num_speculative_tokens,
            speculative_method=speculative_method,
            cost=cost,
            acceptance=acceptance,
            seed=seed,
            tolerance_fraction=tol,
            executor=executor,
            progress=progress,
            mode=mode,
        )
        k = speculation.num_speculative_tokens
        recommended = replace(
            winner.engine, num_speculative_tokens=k, speculative_method=speculation.speculative_method if k else None
        )
        explanation = (*explanation, *speculation.explanation)
    return TuneResult(
        max_num_batched_tokens=best_budget,
        max_num_seqs=best_cap,
        capacity_per_s=winner.capacity_per_s,
        candidates=candidates,
        explanation=explanation,
        first_guess=guess,
        capacity=winner,
        slo=slo,
        binding_gate=gate,
        engine=recommended,
        cost=cost_label(cost),
        margin=margin,
        speculation=speculation,
    )


_pick = pick_with_margin  # the name the tests know


def _key(engine: EngineConfig) -> tuple[int, int]:
    return (engine.max_num_batched_tokens, engine.max_num_seqs)


def _search(
    tasks: list[CapacityTask],
    outcomes: dict[tuple[int, int], CapacityOutcome],
    executor: cf.Executor,
    progress: ProgressReporter,
) -> None:
    """Run the capacity searches not done yet (a candidate shared by both phases runs once)."""
    todo = [t for t in tasks if _key(t.engine) not in outcomes]
    todo = list({_key(t.engine): t for t in todo}.values())
    results = run_tasks(
        run_capacity_task,
        todo,
        executor=executor,
        progress=progress,
        describe=lambda i: "the capacity search for budget {}, max_num_seqs {}".format(*_key(todo[i].engine)),
        unit="candidate",
        desc="budgetlab tune",
    )
    for t, outcome in zip(todo, results):
        outcomes[_key(t.engine)] = outcome


def _nothing_meets(slo: SLO, rows: list[Row], hw: HardwareSpec, mdl: ModelSpec) -> SLOUnattainableError:
    tried = "; ".join(f"{r['max_num_batched_tokens']}: {r['breaks_detail'] or r['status']}" for r in rows)
    return SLOUnattainableError(
        f"no budget meets the SLO ({slo}) on {hw.name} + {mdl.name}, even at the lightest load "
        f"({tried}). Loosen the SLO, pick faster hardware, or check the workload's lengths."
    )


def _refuse_unbounded(rows: list[Row], slo: SLO, hw: HardwareSpec, mdl: ModelSpec) -> None:
    """Candidates cannot be ranked when the SLO held at every load one of them was tried at."""
    unbounded = [r for r in rows if r["status"] == "holds at every load"]
    if not unbounded:
        return
    row = unbounded[0]
    raise CapacityAboveBoundsError(
        f"the SLO ({slo}) holds at every load searched for budget {row['max_num_batched_tokens']}, "
        f"max_num_seqs {row['max_num_seqs']} on {hw.name} + {mdl.name} (still at "
        f"{row['upper_per_s']:.3g} req/s): the simulations are too short for queues to build, so "
        "capacities cannot be compared. Raise the workload's num_requests or tighten the SLO.",
        rate_per_s=float(row["upper_per_s"]),
    )


def binding_gate(summary: Mapping[str, SweepValue]) -> Gate:
    """The gate that binds in a sweep row: the one holding back the largest fraction of steps.

    Each gate is scored by its :func:`budgetlab.metrics.gate_stats` column
    (:data:`budgetlab.metrics.GATE_FRACTION_COLUMNS`); the KV gate scores 1 when the run
    preempted anyone. The highest score wins (ties: KV, then the slot, then the budget) if it
    reaches :data:`BINDING_THRESHOLD_FRACTION`; else ``Gate.NONE``.

    Parameters
    ----------
    summary : mapping
        A sweep row or :attr:`CapacityResult.summary` (missing or NaN columns score 0).
    """

    def score(gate: Gate) -> float:
        value = float(summary.get(GATE_FRACTION_COLUMNS[gate], 0.0))
        return 0.0 if math.isnan(value) else value

    scores = {
        Gate.KV: max(score(Gate.KV), 1.0 if summary.get("num_preemptions", 0) else 0.0),
        Gate.SLOT: score(Gate.SLOT),
        Gate.BUDGET: score(Gate.BUDGET),
    }
    gate, best = max(scores.items(), key=lambda item: item[1])
    return gate if best >= BINDING_THRESHOLD_FRACTION else Gate.NONE


def _percent(summary: Mapping[str, SweepValue], key: str) -> str:
    """A fraction of a sweep row as a whole percentage (``"n/a"`` when missing or NaN)."""
    return fmt_percent(float(summary.get(key, math.nan)), decimals=0)


def _explain(
    guess: FirstGuess,
    candidates: pd.DataFrame,
    winner: CapacityResult,
    gate: Gate,
    budget: int,
    cap: int,
    tol: float,
) -> tuple[str, ...]:
    sentences = list(guess.explanation)
    for phase, knob, fixed in (
        ("budget", "max_num_batched_tokens", f"max_num_seqs fixed at {min(guess.max_num_seqs, budget)}"),
        ("max_num_seqs", "max_num_seqs", f"the budget fixed at {budget:,}"),
    ):
        part = candidates[candidates["phase"] == phase]
        notes = [str(n) for n in part.get("note", pd.Series(dtype=str)) if n]
        listing = ", ".join(
            f"{int(r[knob]):,}{' (clamped)' if r.get('note') else ''} → {outcome_text(r)}" for _, r in part.iterrows()
        )
        best = budget if phase == "budget" else cap
        sentences.append(f"Search over {knob} with {fixed}: {listing}; best {best:,}.")
        if notes:
            sentences.append(f"Clamped into the values of {knob} worth simulating: {'; '.join(notes)}.")
        sentences.extend(neighbour_sentences(part, knob, best, tol))
    s = winner.summary
    sentences.append(
        f"Recommendation: max_num_batched_tokens = {budget:,}, max_num_seqs = {cap:,}: capacity "
        f"{winner.capacity_per_s:.3g} req/s per replica under {winner.slo} (within "
        f"{100 * tol:.0f} %), confirmed by its simulation at that load: "
        f"ttft_p90_s {fmt_latency(float(s['ttft_p90_s']))}, itl_p99_s {fmt_latency(float(s['itl_p99_s']))}."
    )
    gate_numbers = (
        f"steps filling the budget {_percent(s, GATE_FRACTION_COLUMNS[Gate.BUDGET])}, pinned at the cap "
        f"{_percent(s, GATE_FRACTION_COLUMNS[Gate.SLOT])}, requests held back by KV "
        f"{_percent(s, GATE_FRACTION_COLUMNS[Gate.KV])}, KV peak {_percent(s, 'kv_peak_fraction')}, "
        f"{int(s.get('num_preemptions', 0))} preemptions, budget utilization "
        f"{_percent(s, 'budget_utilization_fraction')}"
    )
    if gate is Gate.NONE:
        sentences.append(
            f"At capacity no gate binds ({gate_numbers}): the latency comes from queueing as "
            "load rises, not from a knob."
        )
    else:
        sentences.append(f"At capacity the {gate.label} is the gate that binds ({gate_numbers}).")
    sentences.append(
        f"Just above capacity, at {winner.upper_per_s:.3g} req/s, the SLO breaks on "
        f"{'; '.join(map(str, winner.breaking))}."
    )
    return tuple(sentences)
