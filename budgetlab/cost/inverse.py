"""The inverse of a step-cost curve: the largest token budget whose step meets a time target.

:func:`budget_for_step_time` answers the seeds' rule of thumb ("a 40 ms step holds about 2,500
tokens") for any cost model: in closed form for :class:`~budgetlab.cost.IdealCost`, by doubling
and then bisection (:func:`bisect_largest`) for every other model. Both rely on the contract's
monotonicity (see :mod:`budgetlab.cost.protocol`): a step holding one fresh prompt chunk of
``n`` tokens does not get faster as ``n`` grows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from budgetlab._checks import number_array
from budgetlab.cost.protocol import CostModel, hardware_of, model_of
from budgetlab.cost.roofline import IdealCost
from budgetlab.errors import NoBudgetMeetsTargetError, ParameterError
from budgetlab.specs import Batch

__all__ = ["budget_for_step_time", "bisect_largest", "MAX_SEARCH_TOKENS"]

#: Where the doubling search of :func:`budget_for_step_time` stops [tokens]: a cost whose step
#: time stops growing (:class:`~budgetlab.cost.ConstantCost`) meets a target it meets at all at
#: every budget, and gets this one.
MAX_SEARCH_TOKENS = 1 << 24


def budget_for_step_time(cost: CostModel, target_s: ArrayLike) -> np.ndarray | int:
    """Largest token budget whose step stays within ``target_s`` (vectorized) [tokens].

    For :class:`IdealCost` this is the inverse of :meth:`IdealCost.step_time_s` on its rising
    branch, ``floor(target_s / per_token_s)``: the seeds' rule of thumb, 40 ms ÷ 16 µs ≈ 2,500
    tokens (2,464 on H100 SXM + Llama 3.1 8B). For any other cost model it is found by
    bisection on the time of a step holding one fresh prompt chunk of ``n`` tokens
    (``batch_time_s``), which must not shrink as ``n`` grows. A cost whose step time stops
    growing meets the target at every budget; the search then stops at
    :data:`MAX_SEARCH_TOKENS` (16,777,216 tokens) and returns that. No answer exceeds it, the
    idealized model's included (a target of 1e300 s gets 16,777,216 tokens, not an overflow).

    Parameters
    ----------
    cost : CostModel
        Any cost model (see :mod:`budgetlab.cost.protocol`).
    target_s : float or array_like of float
        Step-time target(s) [s], finite.

    Returns
    -------
    int or numpy.ndarray of int
        The budget for each target [tokens]: an int for a scalar target.

    Raises
    ------
    NoBudgetMeetsTargetError
        When a target is below a one-token step (the weight read, or a constant step): no
        budget meets it. The message gives the shortest step and how to shorten it.
    ParameterError
        When ``cost`` has no ``batch_time_s``, or a target is not a number (a bool, a string,
        ``None``), NaN or infinite.

    Examples
    --------
    >>> from budgetlab.cost import ConstantCost
    >>> budget_for_step_time(ConstantCost(0.05), 0.01)
    Traceback (most recent call last):
    ...
    budgetlab.errors.NoBudgetMeetsTargetError: a step-time target below a one-token step ...
    """
    if not callable(getattr(cost, "batch_time_s", None)):
        raise ParameterError(
            "cost must be a step-cost model with batch_time_s(batch) (IdealCost, ConstantCost, "
            f"CalibratedCost or your own), got {cost!r}"
        )
    target = number_array("target_s", target_s, what="finite step times in seconds")
    if np.any(~np.isfinite(target)):
        raise ParameterError(f"target_s must be finite step times in seconds, got {np.asarray(target_s).tolist()!r}")
    if isinstance(cost, IdealCost):
        one_token_s = cost.weight_read_s
    else:

        def time_s(num_tokens: int) -> float:
            return cost.batch_time_s(Batch(prefill_tokens=(num_tokens,), prefill_context_tokens=(0,)))

        one_token_s = time_s(1)
    if np.any(target < one_token_s):
        raise NoBudgetMeetsTargetError(_below_one_token(cost, one_token_s, target))
    if isinstance(cost, IdealCost):
        with np.errstate(over="ignore"):  # a target near 1e308 s divides to inf: capped just below
            tokens = np.minimum(np.floor(target / cost.per_token_s), MAX_SEARCH_TOKENS).astype(np.int64)
    else:
        tokens = np.array([_largest_within(time_s, float(t)) for t in target.ravel()], dtype=np.int64)
        tokens = tokens.reshape(target.shape)
    return int(tokens) if tokens.ndim == 0 else tokens


def _below_one_token(cost: CostModel, one_token_s: float, target: np.ndarray) -> str:
    """The message for a target no budget meets: what the floor is, on what, and the fix."""
    hardware, model = hardware_of(cost), model_of(cost)
    priced = f" on {hardware.name} + {model.name}" if hardware is not None and model is not None else ""
    got = f"got {np.round(target * 1e3, 3).tolist()} ms"
    if hardware is not None:
        fix = "Raise the target, or use faster memory or tensor parallelism to shorten the weight read."
        floor = f"the weight read and more: {one_token_s * 1e3:.2f} ms"
    else:
        fix = f"Raise the target to at least {one_token_s * 1e3:.3g} ms, or use a faster cost model."
        floor = f"{one_token_s * 1e3:.3g} ms"
    return (
        f"a step-time target below a one-token step ({floor}{priced} with {type(cost).__name__}) "
        f"cannot be met by any budget; {got}. {fix}"
    )


def _largest_within(time_s: Callable[[int], float], target_s: float, limit_tokens: int = MAX_SEARCH_TOKENS) -> int:
    """Largest ``n`` with ``time_s(n) <= target_s``, given ``time_s(1) <= target_s`` (doubling,
    then :func:`bisect_largest`); ``limit_tokens`` when even that meets the target."""
    low, high = 1, 2
    while time_s(high) <= target_s:
        low, high = high, high * 2
        if high > limit_tokens:
            return low
    return bisect_largest(time_s, target_s, low=low, high=high)


def bisect_largest(time_s: Callable[[int], float], target_s: float, *, low: int, high: int) -> int:
    """Largest whole ``n`` in ``[low, high)`` with ``time_s(n) <= target_s``, by bisection.

    ``time_s`` must not shrink as ``n`` grows, meet the target at ``low`` and miss it at
    ``high``: the inverse of a step-time curve [tokens].
    """
    while high - low > 1:
        middle = (low + high) // 2
        if time_s(middle) <= target_s:
            low = middle
        else:
            high = middle
    return low
