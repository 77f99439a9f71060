"""The search behind :func:`budgetlab.capacity`: the highest offered load at which an SLO holds.

Three small steps over a :class:`LoadProbe` (one configuration, simulated once per load):

1. **A bracket** ``[lo, hi]`` with the SLO holding at ``lo`` and failing at ``hi``: either the
   caller's (:func:`given_bracket`, which checks both ends), or found from the replica's service
   rate (:func:`auto_bracket`): :func:`search_up` doubles a load while the SLO still holds, then
   :func:`search_down` quarters one while it fails.
2. **A geometric bisection** of the bracket (:func:`bisect_bracket`) until ``hi / lo − 1`` is
   within the tolerance.
3. **What to say when there is no bracket**: :func:`unattainable` (the SLO fails at the lowest
   load, with advice per broken limit) and :class:`~budgetlab.errors.CapacityAboveBoundsError`
   (it still holds at the highest).

Every simulation uses the same workload sample (common random numbers), so the search is
deterministic, and a load that passes is never above a load that fails in the bracket it returns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from budgetlab._checks import MIN_TOLERANCE_FRACTION, fraction_in, positive_rate
from budgetlab.errors import CapacityAboveBoundsError, ParameterError, SLOUnattainableError
from budgetlab.experiments.slo import ITL_METRICS, SLO, Violation
from budgetlab.experiments.sweep import SweepValue
from budgetlab.text import fmt_latency

__all__ = [
    "LoadProbe",
    "given_bracket",
    "auto_bracket",
    "search_up",
    "search_down",
    "bisect_bracket",
    "unattainable",
    "check_bounds",
    "advice",
    "AUTO_RANGE",
    "MAX_DOUBLINGS",
    "MAX_QUARTERINGS",
    "MAX_BISECTIONS",
    "check_tolerance",
]

AUTO_RANGE = 16.0
"""The automatic search's first lower bound is its upper one divided by this [-]."""

MAX_DOUBLINGS = 8
"""How often the automatic search doubles a load at which the SLO still holds."""

MAX_QUARTERINGS = 4
"""How often the automatic search quarters a load at which the SLO still fails."""

MAX_BISECTIONS = 64
"""Most halvings :func:`bisect_bracket` makes, whatever its arguments. With a tolerance of at
least :data:`~budgetlab._checks.MIN_TOLERANCE_FRACTION` it needs at most 31 for any bracket of
positive floats (``log2(ln(1.8e308 / 4.9e-324) / ln(1 + 1e-6))``), so the cap never binds; it
is there so that no input can make the search loop forever."""

Row = dict[str, SweepValue]


def check_tolerance(tolerance_fraction: object) -> float:
    """``tolerance_fraction`` as a float in ``[MIN_TOLERANCE_FRACTION, 1)``; else
    :class:`~budgetlab.errors.ParameterError` naming it and the bound's reason [-].

    Below :data:`~budgetlab._checks.MIN_TOLERANCE_FRACTION` (1e-6) the bracket's two ends
    would approach the spacing of floats, where ``sqrt(lo * hi)`` stops moving and a bisection
    never reaches its tolerance.
    """
    tol = fraction_in("tolerance_fraction", tolerance_fraction, low=0.0, high=1.0)
    if tol < MIN_TOLERANCE_FRACTION:
        raise ParameterError(
            f"tolerance_fraction must be at least {MIN_TOLERANCE_FRACTION:g}, got {tolerance_fraction!r}: "
            "a narrower bracket nears the 2.2e-16 spacing of floats, where a bisection stops moving, "
            "and no capacity is known that well (a workload sample moves it by percents); "
            "the default is 0.02"
        )
    return tol


class LoadProbe:
    """One configuration under one SLO, simulated at any load once and remembered.

    Parameters
    ----------
    simulate_at : callable
        ``simulate_at(rate_per_s)`` returns the sweep row (summary and gate diagnostics) of
        the configuration at that offered load [1/s].
    slo : SLO

    Attributes
    ----------
    evaluations : list of dict
        Every simulation in the order run: ``rate_per_s``, ``holds``, ``breaks_on`` and the
        sweep row.
    """

    def __init__(self, simulate_at: Callable[[float], Row], slo: SLO) -> None:
        self._simulate_at = simulate_at
        self.slo = slo
        self._rows: dict[float, Row] = {}
        self.evaluations: list[Row] = []

    def row(self, rate_per_s: float) -> Row:
        """The sweep row at this load, simulated the first time it is asked for."""
        if rate_per_s not in self._rows:
            row = self._simulate_at(rate_per_s)
            violations = self.slo.violations(row)
            self._rows[rate_per_s] = row
            self.evaluations.append(
                {
                    "rate_per_s": rate_per_s,
                    "holds": not violations,
                    "breaks_on": ", ".join(v.metric for v in violations),
                    **row,
                }
            )
        return self._rows[rate_per_s]

    def holds(self, rate_per_s: float) -> bool:
        """Whether the SLO holds at this offered load [1/s]."""
        return self.slo.holds(self.row(rate_per_s))

    def violations(self, rate_per_s: float) -> list[Violation]:
        """The limits broken at this load, worst first."""
        return self.slo.violations(self.row(rate_per_s))


def check_bounds(bounds: object) -> tuple[float, float]:
    """``rate_bounds_per_s`` as ``(low, high)`` loads with ``0 < low < high`` [1/s]."""
    if isinstance(bounds, (str, bytes)) or not isinstance(bounds, Sequence) or len(bounds) != 2:
        raise ParameterError(f"rate_bounds_per_s must be a pair (low, high) of loads [1/s], got {bounds!r}")
    lo = positive_rate("rate_bounds_per_s[0]", bounds[0])
    hi = positive_rate("rate_bounds_per_s[1]", bounds[1])
    if not lo < hi:
        raise ParameterError(f"rate_bounds_per_s must be (low, high) with low < high, got {bounds!r}")
    return lo, hi


def given_bracket(
    probe: LoadProbe, bounds: tuple[float, float], *, fail_low: Callable[[float], SLOUnattainableError]
) -> tuple[float, float]:
    """The caller's bracket, once both ends are checked: the SLO holds at ``lo`` and fails at ``hi``.

    Raises
    ------
    SLOUnattainableError
        ``fail_low(lo)`` when it fails at ``lo``.
    CapacityAboveBoundsError
        When it still holds at ``hi``.
    """
    lo, hi = bounds
    if not probe.holds(lo):
        raise fail_low(lo)
    if probe.holds(hi):
        raise CapacityAboveBoundsError(
            f"the SLO ({probe.slo}) still holds at {hi:.3g} req/s, the upper end of "
            "rate_bounds_per_s; raise it (or pass rate_bounds_per_s=None to search automatically)",
            rate_per_s=hi,
        )
    return lo, hi


def search_up(probe: LoadProbe, start_per_s: float) -> tuple[float | None, float]:
    """Double the load from ``start_per_s`` while the SLO holds (at most :data:`MAX_DOUBLINGS` times).

    Returns
    -------
    (float or None, float)
        The last load at which it held (``None`` when it failed already at ``start_per_s``) and
        the first at which it failed [1/s].

    Raises
    ------
    CapacityAboveBoundsError
        When it still holds after every doubling: too few requests for a queue to build.
    """
    lo, hi = None, start_per_s
    for _ in range(MAX_DOUBLINGS):
        if not probe.holds(hi):
            return lo, hi
        lo, hi = hi, 2.0 * hi
    assert lo is not None  # MAX_DOUBLINGS >= 1
    raise CapacityAboveBoundsError(
        f"the SLO ({probe.slo}) still holds at {lo:.3g} req/s, far past the replica's "
        "service rate; with this few requests per simulation the queue never builds "
        "up. Raise the workload's num_requests or tighten the SLO",
        rate_per_s=lo,
    )


def search_down(
    probe: LoadProbe, hi: float, *, fail_low: Callable[[float], SLOUnattainableError]
) -> tuple[float, float]:
    """From a load ``hi`` at which the SLO fails, quarter a lower one until it holds.

    The first lower load is ``hi /`` :data:`AUTO_RANGE`; it is quartered at most
    :data:`MAX_QUARTERINGS` times.

    Returns
    -------
    (float, float)
        A load at which the SLO holds and the next one up at which it failed [1/s].

    Raises
    ------
    SLOUnattainableError
        ``fail_low(lowest load tried)`` when it fails at every one.
    """
    lo = hi / AUTO_RANGE
    for _ in range(MAX_QUARTERINGS + 1):
        if probe.holds(lo):
            return lo, hi
        hi, lo = lo, lo / 4.0
    raise fail_low(hi)


def auto_bracket(
    probe: LoadProbe, start_per_s: float, *, fail_low: Callable[[float], SLOUnattainableError]
) -> tuple[float, float]:
    """A bracket found from ``start_per_s`` (just above the service rate): up, then down if needed."""
    lo, hi = search_up(probe, start_per_s)
    if lo is None:
        return search_down(probe, hi, fail_low=fail_low)
    return lo, hi


def bisect_bracket(probe: LoadProbe, lo: float, hi: float, *, tolerance_fraction: float) -> tuple[float, float]:
    """Bisect ``[lo, hi]`` geometrically until ``hi / lo − 1 ≤ tolerance_fraction``.

    The SLO holds at ``lo`` and fails at ``hi`` on entry and on return [1/s]. The search stops
    after :data:`MAX_BISECTIONS` halvings, or when the midpoint no longer falls strictly
    inside the bracket (two adjacent floats), whatever the tolerance.
    """
    tolerance = check_tolerance(tolerance_fraction)
    for _ in range(MAX_BISECTIONS):
        if hi / lo - 1.0 <= tolerance:
            break
        mid = math.sqrt(lo) * math.sqrt(hi)  # sqrt(lo * hi) without overflow near 1e308
        if not lo < mid < hi:
            break
        if probe.holds(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def unattainable(probe: LoadProbe, rate_per_s: float, *, setting: str, one_token_step_s: float) -> SLOUnattainableError:
    """The error for an SLO that fails even at ``rate_per_s``, the lowest load searched.

    Parameters
    ----------
    probe : LoadProbe
        The search (the load must have been simulated).
    rate_per_s : float
        The lowest load searched [1/s].
    setting : str
        The configuration in words (``"budget 2048 and max_num_seqs 128 on H100 + Llama"``).
    one_token_step_s : float
        The shortest step the cost model prices [s], to tell an ITL limit no budget can meet.
    """
    violations = probe.violations(rate_per_s)
    return SLOUnattainableError(
        f"the SLO ({probe.slo}) fails even at {rate_per_s:.3g} req/s, the lowest load searched, with "
        f"{setting}: {'; '.join(map(str, violations))}. "
        f"{advice(violations, one_token_step_s=one_token_step_s)}",
        rate_per_s=rate_per_s,
        violations=tuple(violations),
    )


def advice(violations: Sequence[Violation], *, one_token_step_s: float) -> str:
    """What to change when an SLO fails even at light load, per broken metric."""
    tips = []
    metrics = {v.metric for v in violations}
    below_floor = [v for v in violations if v.metric in ITL_METRICS and v.limit_s < one_token_step_s]
    if below_floor:
        tips.append(
            f"even a one-token step takes {fmt_latency(one_token_step_s)} (the weight read), over the "
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
    if any(m.startswith("tpot") for m in metrics):
        tips.append(
            "time per output token at light load is the mean step time a stream sees: lower "
            "max_num_batched_tokens so prompt chunks stretch fewer steps, use faster hardware, or loosen the TPOT limit"
        )
    if any(m.startswith("e2e") for m in metrics):
        tips.append(
            "end-to-end latency at light load is prefill plus output × step time: loosen it or use faster hardware"
        )
    return "Loosen the SLO or change the knobs: " + "; ".join(tips) + "."
