"""Length distributions: how many prompt and output tokens a request has.

:class:`Fixed`, :class:`Uniform`, :class:`LogNormal` and :class:`Empirical` are small frozen
dataclasses with a ``sample(n, rng)`` method returning token counts; anything with such a method
is a :class:`LengthDistribution`. The presets :data:`CONVERSATION_PROMPT`,
:data:`CONVERSATION_OUTPUT`, :data:`CODE_PROMPT` and :data:`CODE_OUTPUT` (and :data:`PRESETS`, by
label) are log-normals fitted to the Splitwise traces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol, runtime_checkable

import numpy as np

from budgetlab._checks import MAX_LOG_SIGMA, MAX_TOKENS, PLAIN_ERRORS, at_most, finite_number, int_at_least, is_int

__all__ = [
    "LengthDistribution",
    "Fixed",
    "Uniform",
    "LogNormal",
    "Empirical",
    "CONVERSATION_PROMPT",
    "CONVERSATION_OUTPUT",
    "CODE_PROMPT",
    "CODE_OUTPUT",
    "PRESETS",
    "as_distribution",
    "whole_numbers",
]


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (e.g. numpy.random.default_rng(0)), got {rng!r}")
    return rng


@runtime_checkable
class LengthDistribution(Protocol):
    """Anything that draws token counts: ``sample(n, rng)`` returns ``n`` ints >= 1."""

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:  # pragma: no cover
        ...


@dataclass(frozen=True)
class Fixed:
    """Every request has the same length.

    Parameters
    ----------
    tokens : int
        The length [tokens], >= 1.
    """

    tokens: int

    def __post_init__(self) -> None:
        int_at_least("Fixed.tokens", self.tokens, 1, **PLAIN_ERRORS, maximum=MAX_TOKENS)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` copies of ``tokens`` [tokens] (``rng`` is not advanced)."""
        _check_rng(rng)
        return np.full(int_at_least("n", n, 0, **PLAIN_ERRORS), int(self.tokens), dtype=np.int64)


@dataclass(frozen=True)
class Uniform:
    """Lengths uniform over the whole numbers from ``low_tokens`` to ``high_tokens``, inclusive.

    Parameters
    ----------
    low_tokens : int
        Shortest length [tokens], >= 1.
    high_tokens : int
        Longest length [tokens], >= ``low_tokens``.
    """

    low_tokens: int
    high_tokens: int

    def __post_init__(self) -> None:
        low = int_at_least("Uniform.low_tokens", self.low_tokens, 1, **PLAIN_ERRORS, maximum=MAX_TOKENS)
        high = int_at_least("Uniform.high_tokens", self.high_tokens, 1, **PLAIN_ERRORS, maximum=MAX_TOKENS)
        if high < low:
            raise ValueError(
                f"Uniform.high_tokens ({high}) is below low_tokens ({low}); both bounds are "
                "inclusive, so swap them or make them equal"
            )

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths [tokens], each in ``[low_tokens, high_tokens]``."""
        _check_rng(rng)
        size = int_at_least("n", n, 0, **PLAIN_ERRORS)
        return rng.integers(int(self.low_tokens), int(self.high_tokens), size=size, endpoint=True, dtype=np.int64)


@dataclass(frozen=True)
class LogNormal:
    """Log-normal lengths, rounded to whole tokens and clipped to ``[min_tokens, max_tokens]``.

    A draw is ``round(median_tokens * exp(sigma * Z))`` with ``Z`` standard normal, then clipped:
    values below ``min_tokens`` become ``min_tokens`` and values above ``max_tokens`` become
    ``max_tokens`` (clipping piles the tail mass onto the bound, it never redraws, so the
    median is unchanged as long as it lies inside the bounds, which is required).

    Parameters
    ----------
    median_tokens : float
        Median length [tokens], within ``[min_tokens, max_tokens]``.
    sigma : float
        Standard deviation of ``ln(length)`` [-], >= 0 (0 gives ``median_tokens`` every time).
    min_tokens : int
        Smallest length after clipping [tokens], >= 1.
    max_tokens : int or None
        Largest length after clipping [tokens]; ``None`` leaves the upper tail unclipped.
    """

    median_tokens: float
    sigma: float
    min_tokens: int = 1
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        median = finite_number(
            "LogNormal.median_tokens",
            self.median_tokens,
            positive=True,
            unit="tokens",
            **PLAIN_ERRORS,
            maximum=MAX_TOKENS,
        )
        finite_number("LogNormal.sigma", self.sigma, positive=False, **PLAIN_ERRORS, maximum=MAX_LOG_SIGMA)
        low = int_at_least("LogNormal.min_tokens", self.min_tokens, 1, **PLAIN_ERRORS, maximum=MAX_TOKENS)
        high = None
        if self.max_tokens is not None:
            high = int_at_least("LogNormal.max_tokens", self.max_tokens, 1, **PLAIN_ERRORS, maximum=MAX_TOKENS)
            if high < low:
                raise ValueError(f"LogNormal.max_tokens ({high}) is below min_tokens ({low})")
        if median < low:
            raise ValueError(f"LogNormal.median_tokens ({self.median_tokens!r}) is below min_tokens ({low})")
        if high is not None and median > high:
            raise ValueError(f"LogNormal.median_tokens ({self.median_tokens!r}) is above max_tokens ({high})")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` clipped, rounded log-normal lengths [tokens]."""
        _check_rng(rng)
        size = int_at_least("n", n, 0, **PLAIN_ERRORS)
        raw = float(self.median_tokens) * np.exp(float(self.sigma) * rng.standard_normal(size))
        high = np.inf if self.max_tokens is None else float(self.max_tokens)
        # clip before the cast so a huge draw cannot overflow int64
        return np.clip(np.rint(raw), float(self.min_tokens), high).astype(np.int64)


@dataclass(frozen=True, eq=True)
class Empirical:
    """Lengths resampled, with replacement, from observed values (e.g. a trace's prompts).

    Parameters
    ----------
    values : sequence of int
        Observed lengths [tokens], each a whole number >= 1; at least one. Stored as a tuple.

    Examples
    --------
    >>> import numpy as np
    >>> lengths = Empirical([10, 20, 20]).sample(1000, np.random.default_rng(0))
    >>> sorted(set(lengths.tolist()))
    [10, 20]
    """

    values: tuple[int, ...]
    _array: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        array = whole_numbers("Empirical.values", self.values)
        array.setflags(write=False)
        object.__setattr__(self, "values", tuple(int(v) for v in array))
        object.__setattr__(self, "_array", array)

    def __repr__(self) -> str:
        a = self._array
        return f"Empirical(<{a.size} values, {int(a.min())}..{int(a.max())} tokens, median {float(np.median(a)):g}>)"

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths [tokens] drawn uniformly, with replacement, from ``values``."""
        _check_rng(rng)
        size = int_at_least("n", n, 0, **PLAIN_ERRORS)
        return self._array[rng.integers(0, self._array.size, size=size)].copy()


def whole_numbers(name: str, values: object) -> np.ndarray:
    """A 1-D int64 array of the values, each a whole number >= 1 (integral floats accepted; a
    bool is refused with ``TypeError``)."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of ints, got {values!r}")
    listed = values if isinstance(values, np.ndarray) else list(values)  # type: ignore[call-overload]
    if not isinstance(listed, np.ndarray):  # NumPy reads [True, 3] as the ints [1, 3]
        flags = [i for i, v in enumerate(listed) if isinstance(v, (bool, np.bool_))]
        if flags:
            raise TypeError(f"{name}[{flags[0]}] must be a whole number of tokens, got {listed[flags[0]]!r}")
    array = np.asarray(listed)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of ints, got shape {array.shape}")
    if array.dtype.kind in "iuf":  # before int64 could wrap a huge value
        large = array > MAX_TOKENS.value
        if large.any():
            i = int(np.argmax(large))
            at_most(f"{name}[{i}]", array[i].item(), MAX_TOKENS, error=ValueError)
    if array.dtype.kind == "f":
        bad = ~(np.isfinite(array) & (array == np.round(array)))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{name}[{i}] must be a whole number of tokens, got {array[i]!r}")
        array = array.astype(np.int64)
    elif array.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold ints, got dtype {array.dtype}")
    array = array.astype(np.int64)
    small = array < 1
    if small.any():
        i = int(np.argmax(small))
        raise ValueError(f"{name}[{i}] must be >= 1 token, got {int(array[i])}")
    return array


def as_distribution(name: str, value: object) -> LengthDistribution:
    """``value`` as a length distribution: an int means :class:`Fixed`; else ``TypeError``
    (``ValueError`` naming ``name`` for an int below 1)."""
    if is_int(value):
        return Fixed(
            int_at_least(
                name,
                value,
                1,
                what="an int >= 1 [tokens] (Fixed.tokens) or a length distribution",
                **PLAIN_ERRORS,
                maximum=MAX_TOKENS,
            )
        )
    if not isinstance(value, LengthDistribution):
        raise TypeError(
            f"{name} must be a length distribution (Fixed, Uniform, LogNormal, Empirical or "
            f"anything with sample(n, rng)) or an int number of tokens, got {value!r}"
        )
    return value


# Presets fitted to the Splitwise traces (Patel et al., ISCA 2024; processed Azure LLM inference
# traces as distributed in microsoft/vidur: splitwise_conv.csv, 19,366 requests, and
# splitwise_code.csv, 8,819 requests). Derived once during development, never read at run time:
#   median_tokens = the trace's median (numpy.quantile(..., 0.5));
#   sigma         = ln(p90 / p50) / z_0.9 with z_0.9 = 1.2815516 (the standard normal 90th
#                   percentile), so the model's median AND 90th percentile equal the trace's
#                   (the upper tail is what fills token budgets and KV memory); p90 with
#                   numpy's default linear interpolation;
#   max_tokens    = the largest value in the trace (no synthetic request is longer than any
#                   the service saw); min_tokens stays 1.
# Resulting fit versus trace (p10 / p50 / p90 / mean, 400k draws):
#   conv prompt  381/1019/2718/1366   vs 207/1020/2734.5/1155  (p90 2734.5 -> sigma 0.7695)
#   conv output   39/ 129/ 421/ 191   vs  54/ 129/ 424  / 211  (p90  424   -> sigma 0.9285)
#   code prompt  417/1467/5148/2142   vs 147/1469/5187.6/2048  (p90 5187.6 -> sigma 0.9845)
#   code output    3/  13/  55/  24   vs   7/  13/  55  /  28  (p90   55   -> sigma 1.1255)
# The real lengths are skewed in log space, so one sigma cannot match every quantile; a
# plain std(ln x) would overstate the conversation prompt tail (p99 10,000 vs 4,142).
CONVERSATION_PROMPT = LogNormal(median_tokens=1020, sigma=0.7695, max_tokens=14050)
CONVERSATION_OUTPUT = LogNormal(median_tokens=129, sigma=0.9285, max_tokens=1000)
CODE_PROMPT = LogNormal(median_tokens=1469, sigma=0.9845, max_tokens=7437)
CODE_OUTPUT = LogNormal(median_tokens=13, sigma=1.1255, max_tokens=1899)


PRESETS: Mapping[str, tuple[LengthDistribution, LengthDistribution]] = MappingProxyType(
    {
        "conversation-like": (CONVERSATION_PROMPT, CONVERSATION_OUTPUT),
        "code-like": (CODE_PROMPT, CODE_OUTPUT),
    }
)
"""The length presets by label: (prompt, output) distributions."""
