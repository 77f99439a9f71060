"""Arrival processes: when requests reach the server.

:func:`poisson_arrivals` and :func:`gamma_arrivals` return numpy arrays of arrival instants [s].
Every sequence starts at 0: the first request arrives at ``t = 0 s`` and request ``i`` arrives
after ``i`` inter-arrival gaps, like the Splitwise traces (whose first row is at 0.0 s); ``n``
requests therefore span ``n - 1`` gaps. The *rate* of a sequence of arrivals is the inverse of
its mean inter-arrival gap, ``(num_requests - 1) / (last - first arrival)`` [1/s]. Everything
random is driven by a seeded :class:`numpy.random.Generator`; the same seed gives the same
arrivals, bit for bit.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from budgetlab._checks import MAX_CV, MAX_REQUESTS, PLAIN_ERRORS, finite_number, int_at_least, random_seed

__all__ = ["ArrivalKind", "ARRIVAL_KINDS", "poisson_arrivals", "gamma_arrivals", "make_rng"]

ArrivalKind = Literal["poisson", "gamma"]
ARRIVAL_KINDS = ("poisson", "gamma")
"""The arrival processes :func:`budgetlab.workload.synthetic_workload` draws from."""


def make_rng(seed: object) -> np.random.Generator:
    """A Generator from an int seed >= 0, a SeedSequence, or an existing Generator (used as is)."""
    if isinstance(seed, (np.random.Generator, np.random.SeedSequence)):
        return np.random.default_rng(seed)
    return np.random.default_rng(random_seed("seed", seed, **PLAIN_ERRORS))


def _arrivals_from_gaps(gaps_s: np.ndarray) -> np.ndarray:
    """Arrival instants [s]: 0, then the running sum of the gaps."""
    arrivals = np.zeros(gaps_s.size + 1)
    np.cumsum(gaps_s, out=arrivals[1:])
    return arrivals


def poisson_arrivals(
    *,
    rate_per_s: float,
    num_requests: int,
    seed: int | np.random.SeedSequence | np.random.Generator = 0,
) -> np.ndarray:
    """Arrival instants of a Poisson process: exponential gaps with mean ``1 / rate_per_s``.

    Parameters
    ----------
    rate_per_s : float
        Mean arrival rate [1/s], > 0.
    num_requests : int
        How many arrivals [count], >= 1.
    seed : int, SeedSequence or Generator
        Seed (int >= 0) of the random stream; a Generator is used (and advanced) as is.

    Returns
    -------
    numpy.ndarray
        ``num_requests`` non-decreasing arrival instants [s]; the first is exactly 0 and the
        ``num_requests - 1`` gaps after it are drawn from the exponential distribution.

    Examples
    --------
    >>> t = poisson_arrivals(rate_per_s=5.0, num_requests=4, seed=1)
    >>> float(t[0]), t.size
    (0.0, 4)
    """
    rate = finite_number("rate_per_s", rate_per_s, positive=True, unit="1/s", **PLAIN_ERRORS)
    n = int_at_least("num_requests", num_requests, 1, **PLAIN_ERRORS, maximum=MAX_REQUESTS)
    rng = make_rng(seed)
    return _arrivals_from_gaps(rng.exponential(1.0 / rate, size=n - 1))


def gamma_arrivals(
    *,
    rate_per_s: float,
    cv: float,
    num_requests: int,
    seed: int | np.random.SeedSequence | np.random.Generator = 0,
) -> np.ndarray:
    """Arrival instants with gamma-distributed gaps: a renewal process of tunable burstiness.

    The gaps have mean ``1 / rate_per_s`` and coefficient of variation (standard deviation
    over mean) ``cv``: shape ``1 / cv**2``, scale ``cv**2 / rate_per_s``. ``cv = 1`` is the
    exponential distribution, i.e. a Poisson process; ``cv > 1`` is burstier (clumps of
    arrivals, then lulls); ``cv < 1`` more regular; ``cv = 0`` evenly spaced arrivals.

    Parameters
    ----------
    rate_per_s : float
        Mean arrival rate [1/s], > 0.
    cv : float
        Coefficient of variation of the inter-arrival gaps [-], >= 0.
    num_requests, seed
        As in :func:`poisson_arrivals`: how many arrivals [count] and the random stream.

    Returns
    -------
    numpy.ndarray
        ``num_requests`` non-decreasing arrival instants [s], the first exactly 0.
    """
    rate = finite_number("rate_per_s", rate_per_s, positive=True, unit="1/s", **PLAIN_ERRORS)
    cv_value = finite_number("cv", cv, positive=False, **PLAIN_ERRORS, maximum=MAX_CV)
    n = int_at_least("num_requests", num_requests, 1, **PLAIN_ERRORS, maximum=MAX_REQUESTS)
    rng = make_rng(seed)
    if cv_value == 0.0:
        return np.arange(n, dtype=float) / rate
    shape = 1.0 / cv_value**2
    return _arrivals_from_gaps(rng.gamma(shape, 1.0 / (shape * rate), size=n - 1))
