"""The tuner's margin: the recommendation's neighbours one step away, and the load they all hold.

A configuration whose next larger budget collapses (an ITL limit met by a hair) is a fragile
recommendation: a real engine a few percent slower than the cost model, or a deployment a
little off the recommended knobs, falls off the cliff. :func:`neighbours_of` lists the
recommendation's neighbours (its budget and its cap times :data:`NEIGHBOUR_FACTORS`, rounded and
clamped into the values worth simulating), and :func:`margin_of` finds the highest load at which
the recommendation *and* every neighbour hold the SLO: the recommended load, with the latencies
there as fractions of their limits (the latency headroom), in a :class:`TuneMargin`.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from budgetlab.experiments.capacity import CapacityOutcome, CapacityResult, Numbers
from budgetlab.experiments.executors import run_tasks
from budgetlab.experiments.guess import KnobRange, budget_candidate, round_cap
from budgetlab.experiments.progress import ProgressReporter
from budgetlab.experiments.sweep import SweepPoint, SweepValue, run_point
from budgetlab.specs import EngineConfig
from budgetlab.text import fmt_percent

__all__ = [
    "NEIGHBOUR_FACTORS",
    "MARGIN_STEP_FRACTION",
    "MARGIN_MAX_STEPS",
    "MARGIN_TOLERANCE_FRACTION",
    "TuneMargin",
    "neighbours_of",
    "margin_of",
    "tied_capacity",
    "robust_capacities",
    "pick_with_margin",
    "NEAR_RATIO",
    "CLIFF_FRACTION",
    "outcome_text",
    "neighbour_sentences",
]

Row = dict[str, SweepValue]

NEIGHBOUR_FACTORS = (0.875, 1.125)
"""The recommendation's neighbours for its margin: its budget times these, rounded to tiles (a
factor above 1 gives at least the next tile), and its cap times these, rounded to multiples of
16, each clamped into the values worth simulating [-]."""

NEAR_RATIO = 1.5
"""Two searched values of a knob are neighbours when the larger is at most this many times the
smaller [-]: the tuner's default factors space them 11-50 % apart, while an extreme factor (a
value clamped to the range's end) lies too far away to say anything about a margin."""

CLIFF_FRACTION = 0.8
"""A neighbour below this fraction of the winner's capacity makes a candidate a cliff edge in
the explanation's words [-]."""

MARGIN_STEP_FRACTION = 0.9
"""While a neighbour breaks the SLO, the margin search lowers the load by this factor [-] ..."""

MARGIN_MAX_STEPS = 12
"""... at most this many times (down to about a quarter of the capacity) [count]."""

MARGIN_TOLERANCE_FRACTION = 0.05
"""The recommended load is found within this relative precision (or the search's, if coarser)
[-]: a margin needs no finer answer, and each step simulates every neighbour."""


@dataclass(frozen=True, eq=False)
class TuneMargin:
    """How much room the recommendation has: its neighbours one step away, at one load.

    Attributes
    ----------
    rate_per_s : float
        The recommended load [1/s]: the highest found (within the search tolerance) at which
        the recommendation and every neighbour hold the SLO; NaN when some neighbour fails even
        at :data:`MARGIN_MAX_STEPS` steps below capacity (no margin).
    capacity_per_s : float
        The recommendation's own capacity [1/s].
    members : pandas.DataFrame
        One row per configuration at ``rate_per_s`` (at capacity when there is no margin):
        ``role`` (``"recommended"``, ``"budget −1 step"``, ``"budget +1 step"``,
        ``"max_num_seqs −1 step"``, ``"max_num_seqs +1 step"``), ``max_num_batched_tokens``,
        ``max_num_seqs``, ``holds``, each limited metric [s] and its ``<metric>_used_fraction``
        (value over limit [-]).
    limited_by : str
        The role of the neighbour that breaks the SLO just above ``rate_per_s`` (``""`` when the
        recommendation itself does, at its capacity).
    """

    rate_per_s: float
    capacity_per_s: float
    members: pd.DataFrame = field(repr=False)
    limited_by: str

    @property
    def holds(self) -> bool:
        """Whether a load was found at which every neighbour holds the SLO."""
        return not math.isnan(self.rate_per_s)

    @property
    def derated_fraction(self) -> float:
        """How far the recommended load lies below capacity, ``1 − rate / capacity`` [-] (NaN
        without a margin)."""
        return 1.0 - self.rate_per_s / self.capacity_per_s

    def used_fraction(self, role: str = "recommended") -> float:
        """The largest latency over its limit for ``role`` at the recommended load [-] (1 − this
        is the latency headroom); ``"neighbours"``: the largest over every neighbour."""
        rows = self.members[self.members.role != "recommended"] if role == "neighbours" else self.members
        if role not in ("neighbours",):
            rows = rows[rows.role == role]
        columns = [c for c in rows.columns if c.endswith("_used_fraction")]
        values = rows[columns].to_numpy(dtype=float) if columns and len(rows) else None
        return float(pd.Series(values.ravel()).max()) if values is not None else math.nan

    def numbers(self) -> Numbers:
        """``rate_per_s``, ``capacity_per_s``, ``derated_fraction``, ``limited_by``,
        ``used_fraction`` (the recommendation's largest latency over its limit) and
        ``neighbours_used_fraction``, and ``members`` (one dict per row of :attr:`members`)."""
        return {
            "rate_per_s": self.rate_per_s,
            "capacity_per_s": self.capacity_per_s,
            "derated_fraction": self.derated_fraction,
            "limited_by": self.limited_by,
            "used_fraction": self.used_fraction(),
            "neighbours_used_fraction": self.used_fraction("neighbours"),
            "members": self.members.to_dict(orient="records"),
        }

    def __str__(self) -> str:
        neighbours = self.members[self.members.role != "recommended"]
        what = ", ".join(
            f"{r.role} ({int(r.max_num_batched_tokens):,} / {int(r.max_num_seqs):,})" for r in neighbours.itertuples()
        )
        if not self.holds:
            return (
                f"No margin: a neighbour ({self.limited_by}) breaks the SLO even far below the "
                f"capacity of {self.capacity_per_s:.3g} req/s; the recommendation sits on a cliff edge."
            )
        limit = (
            f"{self.limited_by} breaks just above it" if self.limited_by else "the recommendation breaks just above it"
        )
        return (
            f"Margin: at {self.rate_per_s:.3g} req/s ({fmt_percent(self.derated_fraction, decimals=0)} below "
            f"its capacity of {self.capacity_per_s:.3g} req/s; {limit}) the SLO holds for the recommendation and "
            f"its neighbours one step away ({what or 'none in range'}); the recommendation's latencies use at most "
            f"{fmt_percent(self.used_fraction(), decimals=0)} of their limits, the neighbours' "
            f"{fmt_percent(self.used_fraction('neighbours'), decimals=0)}."
        )


def neighbours_of(
    budget: int, cap: int, bounds: KnobRange, cap_bounds: KnobRange, template: EngineConfig
) -> list[tuple[str, EngineConfig]]:
    """The recommendation's neighbours one step away (:data:`NEIGHBOUR_FACTORS`), valid and
    distinct: ``(role, engine)`` pairs."""
    out: list[tuple[str, EngineConfig]] = []
    seen = {(budget, cap)}
    for factor in NEIGHBOUR_FACTORS:
        sign = "+" if factor > 1 else "−"
        value = bounds.clamp(budget_candidate(budget, factor))[0]
        pair = (value, min(cap, value))
        if pair not in seen:
            seen.add(pair)
            out.append(
                (f"budget {sign}1 step", replace(template, max_num_batched_tokens=pair[0], max_num_seqs=pair[1]))
            )
    for factor in NEIGHBOUR_FACTORS:
        sign = "+" if factor > 1 else "−"
        value = cap_bounds.clamp(round_cap(max(1, int(cap * factor))) if factor < 1 else cap * factor)[0]
        pair = (budget, value)
        if pair not in seen:
            seen.add(pair)
            out.append(
                (f"max_num_seqs {sign}1 step", replace(template, max_num_batched_tokens=budget, max_num_seqs=value))
            )
    return out


def margin_of(
    winner: CapacityResult,
    neighbours: list[tuple[str, EngineConfig]],
    outcomes: Mapping[tuple[int, int], CapacityOutcome],
    *,
    point: Callable[[EngineConfig, float], SweepPoint],
    pool: cf.Executor,
    reporter: ProgressReporter,
    tol: float,
) -> TuneMargin:
    """The highest load at which the winner and its neighbours all hold the SLO (module docstring).

    Starts at the winner's capacity, or at the lowest capacity a neighbour's own search found;
    lowers the load by :data:`MARGIN_STEP_FRACTION` while some member breaks, then bisects
    down to :data:`MARGIN_TOLERANCE_FRACTION` (or ``tol``, if coarser). Rows already simulated
    (the searches' evaluations) are reused, and while searching, a member that held at a load
    is taken to hold below it (its capacity search found so); the load found is then checked
    with every member simulated there, and lowered again should one break after all.
    """
    slo = winner.slo
    members = [("recommended", winner.engine), *neighbours]
    rows: dict[tuple[tuple[int, int], float], Row] = {}
    for engine_key, outcome in outcomes.items():
        if outcome.result is not None:
            for record in outcome.result.evaluations.to_dict("records"):
                rows[(engine_key, float(record["rate_per_s"]))] = record

    def simulate_all(rate: float) -> list[Row]:
        return simulate_some([eng for _, eng in members], rate)

    held_at = {_key(winner.engine): winner.capacity_per_s}  # the highest load each member held at
    for _, eng in neighbours:
        known = outcomes.get(_key(eng))
        if known is not None and known.result is not None:
            held_at[_key(eng)] = known.result.capacity_per_s

    def simulate_some(todo: list[EngineConfig], rate: float) -> list[Row]:
        missing = [eng for eng in todo if (_key(eng), rate) not in rows]
        results = run_tasks(
            run_point,
            [point(eng, rate) for eng in missing],
            executor=pool,
            progress=reporter,
            describe=lambda i: "the margin check of budget {}, max_num_seqs {}".format(*_key(missing[i])),
        )
        for eng, row in zip(missing, results):
            rows[(_key(eng), rate)] = row
        return [rows[(_key(eng), rate)] for eng in todo]

    def broken(rate: float) -> list[str]:
        """The members that break at ``rate``, simulating only those not seen holding above it."""
        todo = [(role, eng) for role, eng in members if held_at.get(_key(eng), 0.0) < rate]
        failing = []
        for (role, eng), row in zip(todo, simulate_some([eng for _, eng in todo], rate)):
            if slo.holds(row):
                held_at[_key(eng)] = max(held_at.get(_key(eng), 0.0), rate)
            else:
                failing.append(role)
        return failing

    start, limited_by = winner.capacity_per_s, ""
    hi = winner.upper_per_s
    for role, eng in neighbours:
        known = outcomes.get(_key(eng))
        if known is None:
            continue
        if known.status == "fails at every load":
            start = math.nan
            limited_by = role
            break
        if known.result is not None and known.result.capacity_per_s < start:
            start, hi, limited_by = known.result.capacity_per_s, known.result.upper_per_s, role
    rate = start
    if not math.isnan(rate):
        failing = broken(rate)
        steps = 0
        while failing and steps < MARGIN_MAX_STEPS:
            hi, limited_by = rate, failing[0]
            rate *= MARGIN_STEP_FRACTION
            failing = broken(rate)
            steps += 1
        if failing:
            limited_by, rate = failing[0], math.nan
        else:
            while hi / rate - 1.0 > max(tol, MARGIN_TOLERANCE_FRACTION):
                mid = math.sqrt(rate * hi)
                failing = broken(mid)
                if failing:
                    hi, limited_by = mid, failing[0]
                else:
                    rate = mid
    for _ in range(MARGIN_MAX_STEPS if not math.isnan(rate) else 0):  # every member simulated there
        failing = [role for (role, _), row in zip(members, simulate_all(rate)) if not slo.holds(row)]
        if not failing:
            break
        limited_by, rate = failing[0], rate * MARGIN_STEP_FRACTION
    else:
        if not math.isnan(rate):
            rate = math.nan
    at = winner.capacity_per_s if math.isnan(rate) else rate
    table = []
    for (role, eng), row in zip(members, simulate_all(at)):
        entry: dict[str, SweepValue] = {
            "role": role,
            "max_num_batched_tokens": eng.max_num_batched_tokens,
            "max_num_seqs": eng.max_num_seqs,
            "holds": slo.holds(row),
        }
        for metric, limit in slo.limits.items():
            value = float(row[metric])
            entry[metric] = value
            entry[f"{metric}_used_fraction"] = value / limit
        table.append(entry)
    return TuneMargin(
        rate_per_s=rate,
        capacity_per_s=winner.capacity_per_s,
        members=pd.DataFrame.from_records(table),
        limited_by="" if limited_by == "recommended" else limited_by,
    )


def _key(engine: EngineConfig) -> tuple[int, int]:
    return (engine.max_num_batched_tokens, engine.max_num_seqs)


def tied_capacity(row: Mapping[str, SweepValue], best_per_s: float, tol: float) -> bool:
    """Whether a candidate ties with a capacity of ``best_per_s`` [1/s]: at least it, or within
    the tolerance below it and not seen failing there (its ``upper_per_s`` above it; a row
    without one counts as not seen failing)."""
    capacity = float(row["capacity_per_s"])
    upper = float(row.get("upper_per_s", math.inf))
    return capacity >= best_per_s or (capacity >= best_per_s / (1.0 + tol) and upper > best_per_s)


def robust_capacities(rows: Sequence[Mapping[str, SweepValue]], knob: str) -> dict[int, tuple[float, float]]:
    """Each row's robust capacity and upper load: the lowest ``capacity_per_s`` and
    ``upper_per_s`` among it and its neighbours in ``knob`` order (the next smaller and larger
    value searched, if within :data:`NEAR_RATIO` of it); a row without a capacity counts 0 [1/s]."""
    ordered = sorted(rows, key=lambda r: float(r[knob]))
    values = [float(r[knob]) for r in ordered]
    caps = [float(r["capacity_per_s"]) if r["status"] == "ok" else 0.0 for r in ordered]
    uppers = [float(r.get("upper_per_s", math.inf)) if r["status"] == "ok" else 0.0 for r in ordered]
    out = {}
    for i, row in enumerate(ordered):
        near = [j for j in (i - 1, i, i + 1) if 0 <= j < len(ordered)]
        near = [j for j in near if max(values[i], values[j]) <= NEAR_RATIO * min(values[i], values[j]) + 1e-9]
        out[int(row[knob])] = (min(caps[j] for j in near), min(uppers[j] for j in near))
    return out


def pick_with_margin(rows: Sequence[Mapping[str, SweepValue]], knob: str, guess_value: int, tol: float) -> int | None:
    """The best candidate with a margin (module docstring): the best robust capacity
    (:func:`robust_capacities`); among those tied with it (:func:`tied_capacity`), the best capacity of their own;
    among those tied with that, the guess or the nearest."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return None
    robust = robust_capacities(rows, knob)
    as_rows = {
        int(r[knob]): {"capacity_per_s": robust[int(r[knob])][0], "upper_per_s": robust[int(r[knob])][1]} for r in ok
    }
    best_robust = max(row["capacity_per_s"] for row in as_rows.values())
    steady = [r for r in ok if tied_capacity(as_rows[int(r[knob])], best_robust, tol)]
    best = max(float(r["capacity_per_s"]) for r in steady)
    near = [r for r in steady if tied_capacity(r, best, tol)]
    chosen = min(near, key=lambda r: (abs(math.log(float(r[knob]) / guess_value)), -float(r[knob])))
    return int(chosen[knob])


def outcome_text(row: pd.Series) -> str:
    """A candidate's outcome in words: ``"38.7 req/s"``, or its status and the limit that breaks."""
    if row["status"] == "ok":
        return f"{row['capacity_per_s']:.3g} req/s"
    return f"{row['status']} ({row['breaks_on'] or '-'})"


def neighbour_sentences(part: pd.DataFrame, knob: str, best: int, tol: float) -> list[str]:
    """Why the values on either side of the winner lose."""
    out = []
    higher = part[part[knob] > best].sort_values(knob)
    lower = part[part[knob] < best].sort_values(knob, ascending=False)
    winner_cap = float(part.loc[part[knob] == best, "capacity_per_s"].iloc[0])
    records = part.to_dict("records")
    robust = robust_capacities(records, knob)
    for side, rows in (("larger", higher), ("smaller", lower)):
        if rows.empty:
            continue
        r = rows.iloc[0]
        value = int(r[knob])
        edge = robust[value][0] < robust[best][0] / (1.0 + tol)
        if r["status"] == "ok" and edge and float(r["capacity_per_s"]) * (1.0 + tol) >= winner_cap:
            ordered = sorted(records, key=lambda row: int(row[knob]))
            at = [int(row[knob]) for row in ordered].index(value)
            beside = [ordered[j] for j in (at - 1, at + 1) if 0 <= j < len(ordered) and int(ordered[j][knob]) != best]
            weakest = min(
                beside or [r.to_dict()],
                key=lambda row: float(row["capacity_per_s"]) if row["status"] == "ok" else 0.0,
            )
            weak_per_s = float(weakest["capacity_per_s"]) if weakest["status"] == "ok" else 0.0
            cliff = weak_per_s < CLIFF_FRACTION * winner_cap
            out.append(
                f"The next {side} {knob}, {value:,}, reaches {r['capacity_per_s']:.3g} req/s, but "
                + (
                    f"it sits on a cliff edge: its neighbour {int(weakest[knob]):,} reaches only "
                    f"{outcome_text(pd.Series(weakest))}, so a value a little off it (or a real engine a little "
                    f"slower than the model) loses most of the capacity; {best:,}, whose neighbours hold, is kept."
                    if cliff
                    else f"its neighbour {int(weakest[knob]):,} reaches only {outcome_text(pd.Series(weakest))}: "
                    f"less margin than {best:,}, whose neighbours come closer to its capacity."
                )
            )
        elif r["status"] != "ok":
            out.append(f"The next {side} {knob}, {value:,}, {r['status']}: {r['breaks_detail']}.")
        elif not tied_capacity(r, winner_cap, tol):
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
