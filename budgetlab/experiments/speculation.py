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
  faster than ``k = 0``; :func:`best_k_by_load` — the fastest ``k`` at each load.
* :func:`tune_speculation` — the capacity under an SLO for each ``k`` at a fixed budget and cap,
  and the recommended ``k`` (:func:`budgetlab.tune` runs it with ``num_speculative_tokens=``).
* :func:`prefill_room_tokens` and :func:`prefill_room_by_k` — the budget arithmetic: the prompt
  tokens a step still schedules beside requests that decode and verify their drafts.

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
from budgetlab.errors import CapacityAboveBoundsError, ParameterError, SLOUnattainableError
from budgetlab.experiments.capacity import CapacityOutcome, CapacityTask, run_capacity_task
from budgetlab.experiments.executors import run_tasks
from budgetlab.experiments.progress import ProgressSpec
from budgetlab.experiments.search import check_tolerance
from budgetlab.experiments.slo import SLO, check_slo
from budgetlab.experiments.sweep import sweep
from budgetlab.simulator import SimMode
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec
from budgetlab.speculative import draft_rules
from budgetlab.workload import AcceptanceModel, SweepWorkload, check_workload

__all__ = [
    "SPECULATIVE_TOKENS",
    "SPEEDUP_METRIC",
    "SpeculationResult",
    "check_speculation_knob",
    "prefill_room_tokens",
    "prefill_room_by_k",
    "speculation_by_load",
    "stops_paying_per_s",
    "best_k_by_load",
    "tune_speculation",
]

#: The ``k`` values tried by default: none, and 1 to 7 drafts (published recipes use 1–7).
SPECULATIVE_TOKENS = (0, 1, 2, 3, 4, 5, 6, 7)
#: What "faster" means: the mean time per output token after the first (vLLM's TPOT).
SPEEDUP_METRIC = "tpot_mean_s"


def _tokens_axis(tokens: object) -> tuple[int, ...]:
    axis = grid_axis("num_speculative_tokens", tokens, lambda name, v: int_at_least(name, v, 0))
    if 0 not in axis:
        axis = (0, *axis)  # the baseline every speed-up is measured against
    return tuple(sorted(axis))


def _num_decoding(engine: EngineConfig, num_decoding: object) -> int:
    if num_decoding is None:
        return engine.max_num_seqs
    n = int_at_least("num_decoding", num_decoding, 0, what="an int >= 0 [requests]")
    if n > engine.max_num_seqs:
        raise ParameterError(
            f"num_decoding ({n}) cannot exceed max_num_seqs ({engine.max_num_seqs}): only that many requests run at "
            "once. Lower num_decoding or raise max_num_seqs"
        )
    return n


def prefill_room_tokens(engine: EngineConfig, *, num_decoding: int | None = None) -> int:
    """Prompt tokens one step can still schedule beside ``num_decoding`` requests that decode and
    verify all their drafts [tokens].

    Each decoding request asks for ``1 + k`` tokens of the token budget ``B =
    max_num_batched_tokens`` and takes those plus its method's ``s`` input slots
    (:attr:`DraftRules.new_slots_for_drafting <budgetlab.speculative.DraftRules>`: 1 for a draft
    model, else 0) from the input budget of ``B`` (rules S2 and S3 of
    :mod:`budgetlab.simulator.drafts`); a prompt chunk is capped by the token budget left and by
    the input budget left less its own ``s`` (S3, S5). With ``n`` decoding requests::

        room = max(0, min(B - n (1 + k),  B - n (1 + k + s) - s))

    which is ``B - n (1 + k)`` for every method but a draft model. Without drafts (``k = 0``) it
    is the budget less one token per decode (notebook 02). 0: the decodes alone fill the budget;
    then their drafts are cut (S3) and no prompt advances in the step.

    Parameters
    ----------
    engine : EngineConfig
        Its budget, ``num_speculative_tokens`` and ``speculative_method``.
    num_decoding : int, optional
        Requests decoding in the step [requests]; default ``engine.max_num_seqs`` (every slot
        taken by a decoding request, the engine at its cap).

    Returns
    -------
    int

    Raises
    ------
    ParameterError
        ``num_decoding`` negative or above ``max_num_seqs``.

    Examples
    --------
    >>> engine = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=256, num_speculative_tokens=5,
    ...                       speculative_method="eagle3")
    >>> prefill_room_tokens(engine)  # 2048 - 256 x 6
    512
    """
    n = _num_decoding(engine, num_decoding)
    budget, k = engine.max_num_batched_tokens, engine.num_speculative_tokens
    s = draft_rules(engine.speculative_method, k).new_slots_for_drafting if engine.speculative_method else 0
    return max(0, min(budget - n * (1 + k), budget - n * (1 + k + s) - s))


def prefill_room_by_k(
    engine: EngineConfig,
    *,
    num_speculative_tokens: int | Sequence[int] = SPECULATIVE_TOKENS,
    speculative_method: str | None = None,
    num_decoding: int | None = None,
) -> pd.DataFrame:
    """:func:`prefill_room_tokens` for each ``k`` of ``num_speculative_tokens`` (0 always included) with
    ``engine``'s budget and cap.

    Parameters
    ----------
    engine : EngineConfig
    num_speculative_tokens : int or sequence of int
        ``k`` values [tokens].
    speculative_method : str, optional
        The drafter; default ``engine.speculative_method``.
    num_decoding : int, optional
        As in :func:`prefill_room_tokens`.

    Returns
    -------
    pandas.DataFrame
        One row per ``k``: ``num_speculative_tokens``, ``speculative_method`` (None at 0),
        ``max_num_batched_tokens``, ``num_decoding``, ``decode_tokens`` (``n (1 + k)``, what the
        decodes ask), ``drafting_slots`` (``n s``, the input slots they reserve),
        ``prefill_room_tokens`` and ``prefill_room_fraction`` (of the budget).
    """
    template = _drafting(engine, speculative_method)
    method = str(template.speculative_method)
    n = _num_decoding(engine, num_decoding)
    rows = []
    for k in _tokens_axis(num_speculative_tokens):
        variant = replace(template, num_speculative_tokens=k, speculative_method=method if k else None)
        slots = draft_rules(method, k).new_slots_for_drafting if k else 0
        room = prefill_room_tokens(variant, num_decoding=n)
        rows.append(
            {
                "num_speculative_tokens": k,
                "speculative_method": method if k else None,
                "max_num_batched_tokens": variant.max_num_batched_tokens,
                "num_decoding": n,
                "decode_tokens": n * (1 + k),
                "drafting_slots": n * slots,
                "prefill_room_tokens": room,
                "prefill_room_fraction": room / variant.max_num_batched_tokens,
            }
        )
    return pd.DataFrame(rows)


def _drafting(engine: EngineConfig, method: str | None) -> EngineConfig:
    method = method if method is not None else engine.speculative_method
    if method is None:
        raise ParameterError(
            "give the drafting method: speculative_method='eagle3' (or 'ngram', 'draft_model', 'eagle', "
            "'mtp'), or an engine with one"
        )
    return replace(engine, num_speculative_tokens=1, speculative_method=method)


def check_speculation_knob(
    engine: EngineConfig, num_speculative_tokens: object, speculative_method: str | None
) -> None:
    """Refuse a ``k`` axis or a drafter that cannot run, before any simulation (:func:`budgetlab.tune`
    checks its ``num_speculative_tokens`` with this).

    Raises
    ------
    ParameterError, ConfigError
    """
    template = _drafting(engine, speculative_method)
    for k in _tokens_axis(num_speculative_tokens):
        if k:
            replace(template, num_speculative_tokens=k)  # EngineConfig's checks: vLLM's refusals


def speculation_by_load(
    workload: SweepWorkload,
    *,
    engine: EngineConfig,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    rates_per_s: float | Sequence[float],
    num_speculative_tokens: int | Sequence[int] = SPECULATIVE_TOKENS,
    speculative_method: str | None = None,
    cost: CostSpec = "typical",
    acceptance: AcceptanceModel | None = None,
    seed: int = 0,
    executor: cf.Executor | None = None,
    progress: ProgressSpec = None,
    mode: SimMode = "fast",
) -> pd.DataFrame:
    """Each ``k`` of ``num_speculative_tokens`` (0 always included) at each load: the sweep's row plus
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
    num_speculative_tokens : int or sequence of int
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
        num_speculative_tokens=_tokens_axis(num_speculative_tokens),
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


def best_k_by_load(table: pd.DataFrame) -> pd.DataFrame:
    """For each load of a :func:`speculation_by_load` table, the ``k`` with the largest speed-up
    (the fewest drafts among equals; 0 when no ``k`` is faster than not drafting).

    Returns
    -------
    pandas.DataFrame
        One row per load: ``rate_per_s`` [1/s], ``best_k``, ``speedup`` (its speed-up over
        ``k = 0``) and ``tpot_mean_s`` (its time per output token [s]).
    """
    missing = [c for c in ("rate_per_s", "num_speculative_tokens", "speedup", SPEEDUP_METRIC) if c not in table]
    if missing:
        raise ParameterError(f"the table lacks {', '.join(missing)}; pass the table speculation_by_load returned")
    rows = []
    for rate, group in table.sort_values("num_speculative_tokens").groupby("rate_per_s", sort=True):
        best = group.loc[group["speedup"].idxmax()]  # the first maximum: the fewest drafts
        rows.append(
            {
                "rate_per_s": float(rate),
                "best_k": int(best["num_speculative_tokens"]),
                "speedup": float(best["speedup"]),
                "tpot_mean_s": float(best[SPEEDUP_METRIC]),
            }
        )
    return pd.DataFrame(rows)


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
    cost : str
        The step-cost model every capacity was simulated with.
    """

    num_speculative_tokens: int
    speculative_method: str
    capacity_per_s: float
    table: pd.DataFrame = field(repr=False)
    explanation: tuple[str, ...] = field(repr=False)
    cost: str = "typical"

    def _repr_html_(self) -> str:
        rows = [
            (f"k = {int(r.num_speculative_tokens)}", f"{r.capacity_per_s:.3g} req/s ({r.status})")
            for r in self.table.itertuples()
        ]
        return html_table(f"Capacity by drafts ({self.speculative_method}, {self.cost} cost)", rows)


def tune_speculation(
    workload: SweepWorkload,
    *,
    slo: SLO,
    engine: EngineConfig,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    num_speculative_tokens: int | Sequence[int] = SPECULATIVE_TOKENS,
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

    Raises
    ------
    SLOUnattainableError
        No ``k`` meets the SLO at any load.
    CapacityAboveBoundsError
        Some ``k`` meets it at every load searched (too few requests for queues to build).
    """
    workload = check_workload(workload)
    check_slo(slo)
    hw, mdl = resolve_hardware(hardware), resolve_model(model)
    tol = check_tolerance(tolerance_fraction)
    template = _drafting(engine, speculative_method)
    method = str(template.speculative_method)
    axis = _tokens_axis(num_speculative_tokens)
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
    setting = f"budget {template.max_num_batched_tokens:,} and max_num_seqs {template.max_num_seqs:,}"
    unbounded = [(k, o) for k, o in zip(axis, outcomes) if o.status == "holds at every load"]
    if unbounded:  # as tune: capacities cannot be compared when one is only known to be higher
        k, outcome = unbounded[0]
        raise CapacityAboveBoundsError(
            f"the SLO ({slo}) holds at every load searched for k = {k} with {setting} (still at "
            f"{outcome.rate_per_s:.3g} req/s): the simulations are too short for queues to build, so the k "
            "cannot be compared. Raise the workload's num_requests or tighten the SLO.",
            rate_per_s=outcome.rate_per_s,
        )
    valid = [(c, k) for k, c in zip(axis, capacities) if not math.isnan(c)]
    if not valid:
        raise SLOUnattainableError(
            f"the SLO ({slo}) fails at every load for every k in {list(axis)} with {setting}: tune the budget "
            "and cap first (budgetlab.tune), or loosen the SLO",
            rate_per_s=min(o.rate_per_s for o in outcomes),
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
        cost=cost_label(cost),
    )
