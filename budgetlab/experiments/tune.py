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

Ties: candidates whose capacity is within the search tolerance of the best one, and whose own
search never failed at a load where the best one held, are equally good as far as the search
can tell; among them the tuner keeps the analytic value (or the one nearest to it), so the
recommendation does not jump around on noise. A candidate that failed where the best held is
measurably worse and never kept for being near the guess.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from budgetlab._checks import fraction_in, positive_factors, random_seed
from budgetlab.admission import Gate
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost.named import CostSpec, check_cost
from budgetlab.display import html_table, one_line
from budgetlab.errors import CapacityAboveBoundsError, SLOUnattainableError
from budgetlab.experiments.capacity import CapacityOutcome, CapacityResult, CapacityTask, Numbers, run_capacity_task
from budgetlab.experiments.executors import check_executor, executor_for, run_tasks, show_progress
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
from budgetlab.experiments.slo import SLO, check_slo
from budgetlab.experiments.sweep import SweepValue, engine_template
from budgetlab.metrics import GATE_FRACTION_COLUMNS
from budgetlab.simulator import SimMode
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec
from budgetlab.text import fmt_latency, fmt_percent
from budgetlab.workload import SweepWorkload, check_workload

__all__ = [
    "tile_budget",
    "FirstGuess",
    "first_guess",
    "TuneResult",
    "tune",
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

    def numbers(self) -> Numbers:
        """The key numbers of the recommendation, as a plain dict for a report's results.

        ``max_num_batched_tokens`` [tokens], ``max_num_seqs`` [count], ``capacity_per_s`` and
        ``upper_per_s`` [1/s], ``binding_gate`` (the :class:`~budgetlab.admission.Gate` key,
        ``"budget"``, ...) and ``binding_gate_label`` (its words), ``slo`` (metric -> limit
        [s]), ``first_guess`` (its budget, cap, ``step_budget_tokens``, ``kv_tokens`` and
        ``mean_sequence_tokens``), ``candidates`` (``phase``, the two knobs, ``capacity_per_s``,
        ``status``, ``breaks_on``, ``note`` and ``chosen`` per candidate) and ``explanation``
        (the sentences).
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
        }

    @property
    def memory_tight(self) -> bool:
        """Whether the KV pool is tight (:attr:`FirstGuess.memory_tight`): then the explanation
        says so, and ``first_guess.memory_levers`` prices sharding, fp8 and a smaller budget."""
        return self.first_guess.memory_tight

    def __str__(self) -> str:
        return "\n".join(self.explanation)

    def _display_rows(self) -> list[tuple[str, str]]:
        rows = [
            ("max_num_batched_tokens", f"{self.max_num_batched_tokens:,}"),
            ("max_num_seqs", f"{self.max_num_seqs:,}"),
            ("capacity per replica", f"{self.capacity_per_s:.3g} requests/s"),
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

    def __repr__(self) -> str:
        return one_line("TuneResult", f"{self.capacity_per_s:.3g} req/s", self._display_rows()[:4])

    def _repr_html_(self) -> str:
        return html_table("TuneResult (str() gives the reasons)", self._display_rows())


def tune(
    workload: SweepWorkload,
    *,
    slo: SLO,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    cost: CostSpec = "ideal",
    engine: EngineConfig | None = None,
    seed: int = 0,
    tolerance_fraction: float = 0.02,
    budget_factors: Sequence[float] = BUDGET_FACTORS,
    cap_factors: Sequence[float] = CAP_FACTORS,
    executor: cf.Executor | None = None,
    progress: bool | None = None,
    mode: SimMode = "fast",
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
        ``"ideal"`` (default), ``"typical"``, a factory or an instance (see
        :func:`budgetlab.cost.named.make_cost`); used for the first guess and every simulation.
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
    progress : bool or None
        Progress bar per search phase (see :func:`budgetlab.sweep`).
    mode : str
        Simulator mode.

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
    tol = fraction_in("tolerance_fraction", tolerance_fraction, low=0.0, high=1.0)
    check_executor(executor)
    show_progress(progress, 0)  # validates it before any work
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
        )

    budget_guess = guess.max_num_batched_tokens
    bounds = guess.budget_range or budget_range(
        workload, hardware=hw, model=mdl, max_num_seqs=guess.max_num_seqs, engine=template, seed=seed
    )
    budgets = budget_candidates(budget_guess, b_factors, bounds)
    outcomes: dict[tuple[int, int], CapacityOutcome] = {}
    rows: list[Row] = []
    # one pool for both phases (made here, and shut down at the end, unless one is passed)
    with executor_for(executor, max(len(budgets), len(c_factors) + 1)) as pool:
        # Phase 1: the budget, with the cap fixed at its first guess (never above the budget).
        phase1 = [(task(b.value, min(guess.max_num_seqs, b.value)), b) for b in budgets]
        _search([t for t, _ in phase1], outcomes, pool, progress)
        for t, b in phase1:
            rows.append(_candidate_row("budget", t.engine, outcomes[_key(t.engine)], guess, b.note))
        _refuse_unbounded(rows, slo, hw, mdl)
        best_budget = _pick(rows, "max_num_batched_tokens", budget_guess, tol)
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
        phase2 = [(task(best_budget, c.value), c) for c in caps]
        _search([t for t, _ in phase2], outcomes, pool, progress)
        for t, c in phase2:
            rows.append(_candidate_row("max_num_seqs", t.engine, outcomes[_key(t.engine)], guess, c.note))
        phase2_rows = [r for r in rows if r["phase"] == "max_num_seqs"]
        _refuse_unbounded(phase2_rows, slo, hw, mdl)
        # the phase-1 winner is among the phase-2 candidates, so some cap always succeeds
        best_cap = _pick(phase2_rows, "max_num_seqs", cap_guess, tol) or cap_guess

    candidates = pd.DataFrame.from_records(rows)
    candidates["chosen"] = (candidates["max_num_batched_tokens"] == best_budget) & (
        candidates["max_num_seqs"] == best_cap
    )
    winner = outcomes[(best_budget, best_cap)].result
    assert winner is not None  # _pick chose it among the "ok" outcomes
    gate = binding_gate(winner.summary)
    explanation = _explain(guess, candidates, winner, gate, best_budget, best_cap, tol)
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
        engine=winner.engine,
    )


def _key(engine: EngineConfig) -> tuple[int, int]:
    return (engine.max_num_batched_tokens, engine.max_num_seqs)


def _search(
    tasks: list[CapacityTask],
    outcomes: dict[tuple[int, int], CapacityOutcome],
    executor: cf.Executor,
    progress: bool | None,
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


def _tied(row: Mapping[str, SweepValue], best_per_s: float, tol: float) -> bool:
    """Whether a candidate ties with a capacity of ``best_per_s`` [1/s]: at least it, or within
    the tolerance below it and not seen failing there (its ``upper_per_s`` above it; a row
    without one counts as not seen failing)."""
    capacity = float(row["capacity_per_s"])
    upper = float(row.get("upper_per_s", math.inf))
    return capacity >= best_per_s or (capacity >= best_per_s / (1.0 + tol) and upper > best_per_s)


def _pick(rows: Sequence[Mapping[str, SweepValue]], knob: str, guess_value: int, tol: float) -> int | None:
    """Best capacity; among the candidates tied with it (:func:`_tied`), the guess or the nearest."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return None
    best = max(float(r["capacity_per_s"]) for r in ok)
    near = [r for r in ok if _tied(r, best, tol)]
    chosen = min(near, key=lambda r: (abs(math.log(float(r[knob]) / guess_value)), -float(r[knob])))
    return int(chosen[knob])


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
            f"{int(r[knob]):,}{' (clamped)' if r.get('note') else ''} → {_outcome_text(r)}" for _, r in part.iterrows()
        )
        best = budget if phase == "budget" else cap
        sentences.append(f"Search over {knob} with {fixed}: {listing}; best {best:,}.")
        if notes:
            sentences.append(f"Clamped into the values of {knob} worth simulating: {'; '.join(notes)}.")
        sentences.extend(_neighbours(part, knob, best, tol))
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


def _outcome_text(row: pd.Series) -> str:
    if row["status"] == "ok":
        return f"{row['capacity_per_s']:.3g} req/s"
    return f"{row['status']} ({row['breaks_on'] or '-'})"


def _neighbours(part: pd.DataFrame, knob: str, best: int, tol: float) -> list[str]:
    """Why the values on either side of the winner lose."""
    out = []
    higher = part[part[knob] > best].sort_values(knob)
    lower = part[part[knob] < best].sort_values(knob, ascending=False)
    winner_cap = float(part.loc[part[knob] == best, "capacity_per_s"].iloc[0])
    for side, rows in (("larger", higher), ("smaller", lower)):
        if rows.empty:
            continue
        r = rows.iloc[0]
        value = int(r[knob])
        if r["status"] != "ok":
            out.append(f"The next {side} {knob}, {value:,}, {r['status']}: {r['breaks_detail']}.")
        elif not _tied(r, winner_cap, tol):
            out.append(
                f"The next {side} {knob}, {value:,}, reaches only {r['capacity_per_s']:.3g} req/s "
                f"(breaking on {r['breaks_on']} at {r['upper_per_s']:.3g} req/s)."
            )
        else:
            out.append(
                f"The next {side} {knob}, {value:,}, reaches {r['capacity_per_s']:.3g} req/s, "
                "within the search tolerance of the best: a tie, so the value nearest the analytic "
                "guess is kept."
            )
    return out


def budget_frontier(
    table: pd.DataFrame,
    *,
    slo: SLO,
    ttft_metric: str | None = None,
    itl_metric: str | None = None,
) -> pd.DataFrame:
    """The TTFT-versus-ITL trade-off across budgets at one load: one row per budget.

    Smaller budgets give shorter steps (lower ITL) but spread each prompt over more steps
    (higher TTFT); the SLO picks the budgets that meet both.

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`~budgetlab.experiments.sweep.sweep` over budgets at a single offered load (one
        row per budget).
    slo : SLO
        ``meets`` says whether each budget meets all of it (:meth:`SLO.holds`).
    ttft_metric, itl_metric : str, optional
        Summary keys reported as ``ttft_s`` and ``itl_s``; default the SLO's first TTFT limit
        (else ``"ttft_p90_s"``) and its tightest ITL limit (:attr:`SLO.itl_target_metric`,
        else ``"itl_p99_s"``).

    Returns
    -------
    pandas.DataFrame
        Budgets increasing: ``max_num_batched_tokens`` [tokens], ``rate_per_s`` [1/s],
        ``max_num_seqs`` [count], ``ttft_s`` and ``itl_s`` (the two metrics [s]),
        ``ttft_metric`` and ``itl_metric`` (their summary keys) and ``meets``.

    Examples
    --------
    With ``SLO(ttft_p90_s=0.8, itl_p99_s=0.040)``, budgets 2,048 (TTFT p90 0.3 s, ITL p99
    33 ms) and 512 (1.2 s, 9 ms) give two rows, 512 first: it breaks the TTFT limit
    (``meets`` False), 2,048 meets both.
    """
    check_slo(slo)
    if ttft_metric is None:
        ttft_metric = next((m for m in slo.limits if m.startswith("ttft_")), "ttft_p90_s")
    if itl_metric is None:
        itl_metric = slo.itl_target_metric if slo.itl_target_metric is not None else "itl_p99_s"
    ordered = table.sort_values("max_num_batched_tokens", kind="stable")
    return pd.DataFrame(
        {
            "max_num_batched_tokens": ordered["max_num_batched_tokens"].astype(int).to_numpy(),
            "rate_per_s": ordered["rate_per_s"].to_numpy(dtype=float),
            "max_num_seqs": ordered["max_num_seqs"].astype(int).to_numpy(),
            "ttft_s": ordered[ttft_metric].to_numpy(dtype=float),
            "itl_s": ordered[itl_metric].to_numpy(dtype=float),
            "ttft_metric": ttft_metric,
            "itl_metric": itl_metric,
            "meets": [slo.holds(row) for row in ordered.to_dict("records")],
        }
    )
