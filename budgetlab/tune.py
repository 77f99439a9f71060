"""From a latency SLO to ``max_num_batched_tokens`` and ``max_num_seqs``: the tuner.

:func:`tune` follows the second seed's method, "change one budget at a time", and explains
its answer:

1. **Analytic first guess.** The token budget is the largest step that meets the SLO's
   inter-token target (every running stream waits one step per token):
   :func:`~budgetlab.roofline.budget_for_step_time` (closed form for the idealized cost, a
   numeric inverse of the step time for any other cost model), rounded *down* to a tile-friendly value
   (:func:`tile_budget`). The sequence cap is the KV pool's tokens divided by the workload's
   mean sequence (prompt + output) length: as many sequences as memory holds on average,
   rounded down to a multiple of 16 and never above the budget.
2. **Simulated search, one knob at a time.** Capacity under the SLO (:func:`~budgetlab.sweep.
   capacity`, one :func:`~budgetlab.sweep.run_capacity_task` per candidate) for a few budgets
   around the guess with the cap fixed, then for a few caps around the guess with the best
   budget. Every candidate's capacity is in :attr:`TuneResult.candidates`.
3. **Why the winner wins.** Which gate binds at capacity (steps pinned at the cap, steps that
   fill the budget, requests held back by KV memory, preemptions) and which SLO limit breaks
   just above it, in :attr:`TuneResult.explanation`.

Ties: candidates whose capacity is within the search tolerance of the best one are equally
good as far as the search can tell; among them the tuner keeps the analytic value (or the
one nearest to it), so the recommendation does not jump around on noise.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from budgetlab._checks import int_at_least, is_number
from budgetlab.errors import ParameterError
from budgetlab.memory import kv_capacity
from budgetlab.roofline import budget_for_step_time
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec
from budgetlab.sweep import (
    SLO,
    CapacityAboveBoundsError,
    CapacityOutcome,
    CapacityResult,
    CapacityTask,
    SLOUnattainableError,
    SweepWorkload,
    _as_hardware,
    _as_model,
    _check_cost,
    _check_executor,
    _check_slo,
    _check_workload,
    _cost_label,
    _engine_template,
    _fmt_s,
    _fraction,
    _run_all,
    _seed,
    _show_progress,
    default_executor,
    make_cost,
    mean_sequence_tokens,
    run_capacity_task,
)

__all__ = [
    "tile_budget",
    "FirstGuess",
    "first_guess",
    "TuneResult",
    "tune",
    "BUDGET_FACTORS",
    "CAP_FACTORS",
    "BUDGET_WITHOUT_ITL_TOKENS",
]

BUDGET_FACTORS = (0.5, 0.75, 0.875, 1.0, 1.125)
"""Budgets the search tries, as multiples of the first guess, rounded down to tiles (a factor
above 1 gives at least the next tile up)."""

CAP_FACTORS = (0.25, 0.5, 1.0, 1.5)
"""Sequence caps the search tries, as multiples of the first guess (multiples of 16)."""

BUDGET_WITHOUT_ITL_TOKENS = 8192
"""First-guess budget when the SLO limits no inter-token latency: vLLM's API-server default on
H100-class GPUs (nothing then argues for shorter steps)."""

CAP_MULTIPLE = 16

_BINDING_THRESHOLD = 0.05  # a gate "binds" when it holds back at least this fraction of steps


# --------------------------------------------------------------------------------------------
# The analytic first guess
# --------------------------------------------------------------------------------------------


def tile_budget(tokens: int) -> int:
    """Round a token budget *down* to a tile-friendly value [tokens].

    GEMMs pad their token dimension to whole tiles (128 or 256 rows on Hopper-class kernels),
    so a budget just past a tile edge buys a whole tile of padding. The rule:

    * 1,024 tokens or more: a multiple of 256 (2,464 → 2,304);
    * 128 to 1,023: a multiple of 128 (1,000 → 896);
    * 16 to 127: a multiple of 16 (100 → 96);
    * below 16: unchanged.

    Rounding down keeps every step within the step-time target the budget came from.

    Parameters
    ----------
    tokens : int
        Budget [tokens], >= 1.

    Examples
    --------
    >>> tile_budget(2464), tile_budget(1000), tile_budget(100)
    (2304, 896, 96)
    """
    n = int_at_least("tokens", tokens, 1)
    tile = _tile_step(n)
    return n // tile * tile


def _tile_step(tokens: int) -> int:
    """The tile :func:`tile_budget` rounds ``tokens`` to [tokens]: 256, 128, 16 or 1."""
    for edge, multiple in ((1024, 256), (128, 128), (16, 16)):
        if tokens >= edge:
            return multiple
    return 1


def _budget_candidate(guess_tokens: int, factor: float) -> int:
    """``guess × factor`` rounded down to a tile; a factor above 1 gets at least the next tile
    up (so rounding never folds a larger candidate back onto the guess)."""
    candidate = tile_budget(max(1, int(guess_tokens * factor)))
    if factor > 1.0:
        candidate = max(candidate, guess_tokens + _tile_step(guess_tokens))
    return candidate


def _round_cap(seqs: int) -> int:
    """Round a sequence cap down to a multiple of 16 (kept as is below 16, at least 1)."""
    if seqs >= CAP_MULTIPLE:
        return seqs // CAP_MULTIPLE * CAP_MULTIPLE
    return max(1, int(seqs))


@dataclass(frozen=True)
class FirstGuess:
    """The tuner's analytic starting point, with its reasoning.

    Attributes
    ----------
    max_num_batched_tokens : int
        Budget [tokens]: ``step_budget_tokens`` rounded down by :func:`tile_budget`.
    max_num_seqs : int
        Cap [count]: ``kv_tokens / mean_sequence_tokens`` rounded down to a multiple of 16,
        at most the budget.
    step_budget_tokens : int or None
        Largest step meeting the ITL target, before rounding [tokens]; ``None`` without one.
    itl_target_s : float or None
        The SLO's tightest inter-token limit [s].
    itl_metric : str or None
        Which metric it is.
    kv_tokens : int
        Tokens the KV pool holds at the guessed budget [tokens].
    mean_sequence_tokens : float
        The workload's mean prompt + output [tokens].
    explanation : tuple of str
        The two sentences behind the numbers.
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    step_budget_tokens: int | None
    itl_target_s: float | None
    itl_metric: str | None
    kv_tokens: int
    mean_sequence_tokens: float
    explanation: tuple[str, ...]


def first_guess(
    workload: SweepWorkload,
    *,
    slo: SLO,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    cost: Any = "ideal",
    engine: EngineConfig | None = None,
    seed: int = 0,
) -> FirstGuess:
    """The analytic budget and cap :func:`tune` starts from (see the module docstring).

    Parameters
    ----------
    workload : SweepWorkload
        Its mean prompt + output length sizes the cap.
    slo : SLO
        Its tightest inter-token limit sizes the budget.
    hardware, model : str or spec
    cost : str, callable or cost model
        The step-time model the ITL target is inverted with (see
        :func:`budgetlab.sweep.make_cost`).
    engine : EngineConfig or None
        Template for the other knobs (``block_size``, ``gpu_memory_utilization``, a fixed
        ``num_kv_blocks``); ``None`` for vLLM's defaults.
    seed : int
        Workload seed used for the mean length.
    """
    workload = _check_workload(workload)
    _check_slo(slo)
    hw = _as_hardware("hardware", hardware)
    mdl = _as_model("model", model)
    step_cost = make_cost(_check_cost(cost), hw, mdl)
    template = _engine_template(engine)
    target = slo.itl_target_s
    sentences = []
    if target is None:
        raw = None
        budget = BUDGET_WITHOUT_ITL_TOKENS
        sentences.append(
            f"The SLO limits no inter-token latency, so nothing argues for short steps: the "
            f"first guess is vLLM's API-server default budget of {budget:,} tokens."
        )
    else:
        raw = budget_for_step_time(step_cost, target)
        budget = tile_budget(raw)
        sentences.append(
            f"Every running stream waits one step per token, so the {slo.itl_target_metric} ≤ "
            f"{_fmt_s(target)} target allows steps of up to {raw:,} tokens on {hw.name} + "
            f"{mdl.name} ({_cost_label(cost)} cost); rounded down to a tile-friendly "
            f"{budget:,} tokens."
        )
    mean_tokens = mean_sequence_tokens(workload, seed=_seed("seed", seed))
    kv_tokens = _kv_tokens(template, hw, mdl, budget, min(budget, 256))
    cap_raw = int(kv_tokens // mean_tokens)
    cap = min(_round_cap(cap_raw), budget)
    kv_tokens = _kv_tokens(template, hw, mdl, budget, cap)  # activations depend on the cap too
    cap_raw = int(kv_tokens // mean_tokens)
    cap = min(_round_cap(cap_raw), budget)
    clipped = " (clipped to the budget)" if cap == budget and _round_cap(cap_raw) > budget else ""
    sentences.append(
        f"The KV pool holds {kv_tokens:,} tokens; at the workload's mean of {mean_tokens:,.0f} "
        f"tokens per request (prompt + output) that is {cap_raw:,} sequences, so the first "
        f"guess for max_num_seqs is {cap:,}{clipped}."
    )
    return FirstGuess(
        max_num_batched_tokens=budget,
        max_num_seqs=cap,
        step_budget_tokens=raw,
        itl_target_s=target,
        itl_metric=slo.itl_target_metric,
        kv_tokens=int(kv_tokens),
        mean_sequence_tokens=mean_tokens,
        explanation=tuple(sentences),
    )


def _kv_tokens(template: EngineConfig, hw: HardwareSpec, mdl: ModelSpec, budget: int, cap: int) -> int:
    if template.num_kv_blocks is not None:
        return template.num_kv_blocks * template.block_size
    eng = replace(template, max_num_batched_tokens=budget, max_num_seqs=max(1, min(cap, budget)))
    return kv_capacity(hw, mdl, eng).num_tokens


# --------------------------------------------------------------------------------------------
# The simulated search
# --------------------------------------------------------------------------------------------


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
    phase: str, engine: EngineConfig, outcome: CapacityOutcome, guess: FirstGuess
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "phase": phase,
        "max_num_batched_tokens": engine.max_num_batched_tokens,
        "max_num_seqs": engine.max_num_seqs,
        **outcome.row(*_ROW_STATS),
    }
    if outcome.result is None:
        row["capacity_per_s"] = 0.0  # ranks below every capacity found
    row["is_first_guess"] = _key(engine) == (guess.max_num_batched_tokens, guess.max_num_seqs)
    return row


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
        ``"max_num_seqs"``), the two knobs, ``capacity_per_s`` (0 when the SLO fails at every
        load), ``upper_per_s``, ``status``, ``breaks_on`` / ``breaks_detail`` (the limits that
        break just above capacity, or at the lowest load), ``num_simulations``, the latencies
        and gate diagnostics at capacity, ``is_first_guess`` and ``chosen``.
    explanation : tuple of str
        Sentences: the first guess, each search step, the gate that binds and where the SLO
        breaks.
    first_guess : FirstGuess
    capacity : CapacityResult
        The winner's capacity search (its summary at capacity is the confirming simulation).
    slo : SLO
    binding_gate : str
        ``"token budget"``, ``"sequence cap"``, ``"KV memory"`` or ``"none"``.
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
    binding_gate: str
    engine: EngineConfig = field(repr=False)

    def __str__(self) -> str:
        return "\n".join(self.explanation)


def tune(
    workload: SweepWorkload,
    *,
    slo: SLO,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    cost: Any = "ideal",
    engine: EngineConfig | None = None,
    seed: int = 0,
    tolerance_fraction: float = 0.02,
    budget_factors: Sequence[float] = BUDGET_FACTORS,
    cap_factors: Sequence[float] = CAP_FACTORS,
    executor: cf.Executor | None = None,
    progress: bool | None = None,
    mode: str = "fast",
) -> TuneResult:
    """Recommend ``max_num_batched_tokens`` and ``max_num_seqs`` for an SLO and a workload.

    Parameters
    ----------
    workload : SweepWorkload
        :class:`~budgetlab.sweep.SyntheticWorkload` or :class:`~budgetlab.sweep.TraceWorkload`;
        its ``num_requests`` sets each simulation's size (a few thousand at most keeps the
        search to seconds).
    slo : SLO
        The latency limits.
    hardware, model : str or spec
    cost : str, callable or cost model
        ``"ideal"`` (default), ``"typical"``, a factory or an instance (see
        :func:`budgetlab.sweep.make_cost`); used for the first guess and every simulation.
    engine : EngineConfig or None
        Template for the knobs not tuned (``block_size``, ``policy``, …).
    seed : int
        Workload seed [-].
    tolerance_fraction : float
        Relative precision of every capacity search [-]; also the margin within which two
        candidates count as tied.
    budget_factors : sequence of float
        Budgets tried, as multiples of the first guess (rounded down by :func:`tile_budget`;
        a factor above 1 gives at least the next tile above the guess).
    cap_factors : sequence of float
        Caps tried, as multiples of the first guess (multiples of 16, at most the budget).
    executor : concurrent.futures.Executor or None
        Runs the candidates' capacity searches in parallel; ``None`` makes a local process
        pool for the call (see :func:`budgetlab.sweep.sweep` for Dask).
    progress : bool or None
        Progress bar per search phase (see :func:`budgetlab.sweep.sweep`).
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
    """
    workload = _check_workload(workload)
    _check_slo(slo)
    hw = _as_hardware("hardware", hardware)
    mdl = _as_model("model", model)
    cost = _check_cost(cost)
    seed = _seed("seed", seed)
    template = _engine_template(engine)
    _fraction("tolerance_fraction", tolerance_fraction, low=0.0, high=1.0)
    _check_executor(executor)
    _show_progress(progress, 0)  # validates it before any work
    b_factors = _factors("budget_factors", budget_factors)
    c_factors = _factors("cap_factors", cap_factors)
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
            tolerance_fraction=tolerance_fraction,
            mode=mode,
        )

    budget_guess = guess.max_num_batched_tokens
    budgets = sorted({_budget_candidate(budget_guess, f) for f in b_factors} | {budget_guess})
    own = executor is None
    pool = default_executor(max(len(budgets), len(c_factors) + 1)) if own else executor
    outcomes: dict[tuple[int, int], CapacityOutcome] = {}
    rows: list[dict[str, Any]] = []
    try:
        # Phase 1: the budget, with the cap fixed at its first guess (never above the budget).
        phase1 = [task(b, min(guess.max_num_seqs, b)) for b in budgets]
        _search(phase1, outcomes, pool, progress)
        for t in phase1:
            rows.append(_candidate_row("budget", t.engine, outcomes[_key(t.engine)], guess))
        _refuse_unbounded(rows, slo, hw, mdl)
        best_budget = _pick(rows, "max_num_batched_tokens", budget_guess, tolerance_fraction)
        if best_budget is None:
            raise _nothing_meets(slo, rows, hw, mdl)
        # Phase 2: the cap, with the best budget.
        caps = sorted(
            {min(_round_cap(max(1, int(guess.max_num_seqs * f))), best_budget) for f in c_factors}
            | {min(guess.max_num_seqs, best_budget)}
        )
        phase2 = [task(best_budget, c) for c in caps]
        _search(phase2, outcomes, pool, progress)
        for t in phase2:
            rows.append(_candidate_row("max_num_seqs", t.engine, outcomes[_key(t.engine)], guess))
        cap_guess = min(guess.max_num_seqs, best_budget)
        phase2_rows = [r for r in rows if r["phase"] == "max_num_seqs"]
        _refuse_unbounded(phase2_rows, slo, hw, mdl)
        # the phase-1 winner is among the phase-2 candidates, so some cap always succeeds
        best_cap = _pick(phase2_rows, "max_num_seqs", cap_guess, tolerance_fraction) or cap_guess
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)

    candidates = pd.DataFrame.from_records(rows)
    candidates["chosen"] = (
        (candidates["max_num_batched_tokens"] == best_budget) & (candidates["max_num_seqs"] == best_cap)
    )
    winner: CapacityResult = outcomes[(best_budget, best_cap)].result
    gate = _binding_gate(winner.summary)
    explanation = _explain(guess, candidates, winner, gate, best_budget, best_cap, tolerance_fraction)
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


def _factors(name: str, factors: object) -> tuple[float, ...]:
    if isinstance(factors, (str, bytes)) or not isinstance(factors, Sequence) or not factors:
        raise ParameterError(f"{name} must be a non-empty sequence of positive numbers, got {factors!r}")
    out = []
    for f in factors:
        if not is_number(f) or not (math.isfinite(float(f)) and float(f) > 0):
            raise ParameterError(f"{name} must hold finite numbers > 0, got {f!r}")
        out.append(float(f))
    return tuple(out)


def _key(engine: EngineConfig) -> tuple[int, int]:
    return (engine.max_num_batched_tokens, engine.max_num_seqs)


def _search(
    tasks: list[CapacityTask], outcomes: dict, executor: cf.Executor, progress: bool | None
) -> None:
    """Run the capacity searches not done yet (a candidate shared by both phases runs once)."""
    todo = [t for t in tasks if _key(t.engine) not in outcomes]
    todo = list({_key(t.engine): t for t in todo}.values())
    results = _run_all(
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


def _pick(rows: list[dict[str, Any]], knob: str, guess_value: int, tol: float) -> int | None:
    """Best capacity; among candidates within the tolerance of it, the guess or the nearest."""
    ok = [r for r in rows if r["status"] == "ok" and r["capacity_per_s"] > 0]
    if not ok:
        return None
    best = max(r["capacity_per_s"] for r in ok)
    near = [r for r in ok if r["capacity_per_s"] >= best / (1.0 + tol)]
    return min(near, key=lambda r: (abs(math.log(r[knob] / guess_value)), -r[knob]))[knob]


def _nothing_meets(
    slo: SLO, rows: list[dict[str, Any]], hw: HardwareSpec, mdl: ModelSpec
) -> SLOUnattainableError:
    tried = "; ".join(f"{r['max_num_batched_tokens']}: {r['breaks_detail'] or r['status']}" for r in rows)
    return SLOUnattainableError(
        f"no budget meets the SLO ({slo}) on {hw.name} + {mdl.name}, even at the lightest load "
        f"({tried}). Loosen the SLO, pick faster hardware, or check the workload's lengths."
    )


def _refuse_unbounded(rows: list[dict[str, Any]], slo: SLO, hw: HardwareSpec, mdl: ModelSpec) -> None:
    """Candidates cannot be ranked when the SLO held at every load one of them was tried at."""
    unbounded = [r for r in rows if r["status"] == "holds at every load"]
    if not unbounded:
        return
    row = unbounded[0]
    error = CapacityAboveBoundsError(
        f"the SLO ({slo}) holds at every load searched for budget {row['max_num_batched_tokens']}, "
        f"max_num_seqs {row['max_num_seqs']} on {hw.name} + {mdl.name} (still at "
        f"{row['upper_per_s']:.3g} req/s): the simulations are too short for queues to build, so "
        "capacities cannot be compared. Raise the workload's num_requests or tighten the SLO."
    )
    error.rate_per_s = row["upper_per_s"]
    raise error


def _binding_gate(summary: dict[str, Any]) -> str:
    scores = {
        "KV memory": max(
            float(summary.get("kv_blocked_fraction", 0.0)), 1.0 if summary.get("num_preemptions", 0) else 0.0
        ),
        "sequence cap": float(summary.get("cap_bound_fraction", 0.0)),
        "token budget": float(summary.get("budget_full_fraction", 0.0)),
    }
    scores = {k: (0.0 if math.isnan(v) else v) for k, v in scores.items()}
    gate, score = max(scores.items(), key=lambda kv: kv[1])
    return gate if score >= _BINDING_THRESHOLD else "none"


def _pct(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{100 * value:.0f} %"


def _explain(
    guess: FirstGuess,
    candidates: pd.DataFrame,
    winner: CapacityResult,
    gate: str,
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
        listing = ", ".join(f"{int(r[knob]):,} → {_outcome_text(r)}" for _, r in part.iterrows())
        best = budget if phase == "budget" else cap
        sentences.append(f"Search over {knob} with {fixed}: {listing}; best {best:,}.")
        sentences.extend(_neighbours(part, knob, best, tol))
    s = winner.summary
    sentences.append(
        f"Recommendation: max_num_batched_tokens = {budget:,}, max_num_seqs = {cap:,}: capacity "
        f"{winner.capacity_per_s:.3g} req/s per replica under {winner.slo} (within "
        f"{100 * tol:.0f} %), confirmed by its simulation at that load: "
        f"ttft_p90_s {_fmt_s(s['ttft_p90_s'])}, itl_p99_s {_fmt_s(s['itl_p99_s'])}."
    )
    gate_numbers = (
        f"steps filling the budget {_pct(s.get('budget_full_fraction'))}, pinned at the cap "
        f"{_pct(s.get('cap_bound_fraction'))}, requests held back by KV "
        f"{_pct(s.get('kv_blocked_fraction'))}, KV peak {_pct(s.get('kv_peak_fraction'))}, "
        f"{int(s.get('num_preemptions', 0))} preemptions, budget utilization "
        f"{_pct(s.get('budget_utilization_fraction'))}"
    )
    if gate == "none":
        sentences.append(
            f"At capacity no gate binds ({gate_numbers}): the latency comes from queueing as "
            "load rises, not from a knob."
        )
    else:
        sentences.append(f"At capacity the {gate} is the gate that binds ({gate_numbers}).")
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
        elif r["capacity_per_s"] < winner_cap / (1.0 + tol):
            out.append(
                f"The next {side} {knob}, {value:,}, reaches only {r['capacity_per_s']:.3g} req/s "
                f"(breaking on {r['breaks_on']})."
            )
        else:
            out.append(
                f"The next {side} {knob}, {value:,}, reaches {r['capacity_per_s']:.3g} req/s, "
                "within the search tolerance of the best: a tie, so the value nearest the analytic "
                "guess is kept."
            )
    return out
