"""Workloads for the simulator: synthetic arrivals and lengths, and validated trace CSVs.

Three layers, each usable on its own:

1. **Arrival processes** -- :func:`poisson_arrivals` and :func:`gamma_arrivals` return numpy
   arrays of arrival instants [s].
2. **Length distributions** -- :class:`Fixed`, :class:`Uniform`, :class:`LogNormal` and
   :class:`Empirical`, small frozen dataclasses with a ``sample(n, rng)`` method returning
   token counts.
3. **Workloads** -- :func:`synthetic_workload` (and its presets :func:`conversation_like` and
   :func:`code_like`) and :func:`load_trace` return lists of :class:`~budgetlab.specs.Request`.

Conventions
-----------
* Every synthetic arrival sequence starts at 0: the first request arrives at ``t = 0 s`` and
  request ``i`` arrives after ``i`` inter-arrival gaps, like the Splitwise traces (whose first
  row is at 0.0 s). ``n`` requests therefore span ``n - 1`` gaps.
* The *rate* of a sequence of arrivals is the inverse of its mean inter-arrival gap,
  ``(num_requests - 1) / (last - first arrival)`` [1/s]; :func:`trace_stats` and the
  ``rate_per_s`` option of :func:`load_trace` both use this definition.
* Everything random is driven by a seeded :class:`numpy.random.Generator`; the same seed
  gives the same list of requests, bit for bit.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from types import MappingProxyType
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from budgetlab._checks import is_int, is_number
from budgetlab.errors import TraceFormatError
from budgetlab.specs import Request

__all__ = [
    "LengthDistribution",
    "Fixed",
    "Uniform",
    "LogNormal",
    "Empirical",
    "poisson_arrivals",
    "gamma_arrivals",
    "synthetic_workload",
    "conversation_like",
    "code_like",
    "CONVERSATION_PROMPT",
    "CONVERSATION_OUTPUT",
    "CODE_PROMPT",
    "CODE_OUTPUT",
    "PRESETS",
    "SPLITWISE_COLUMNS",
    "AZURE_COLUMNS",
    "REQUEST_COLUMNS",
    "load_trace",
    "trace_stats",
    "requests_to_frame",
    "requests_from_frame",
]

ArrivalKind = Literal["poisson", "gamma"]
ARRIVAL_KINDS = ("poisson", "gamma")


# --------------------------------------------------------------------------------------------
# Parameter checks (plain ValueError/TypeError: these are programming inputs, not files)
# --------------------------------------------------------------------------------------------


def _int_at_least(name: str, value: object, minimum: int) -> int:
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum:  # type: ignore[operator]
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)  # type: ignore[call-overload]


def _finite(name: str, value: object, *, positive: bool, unit: str | None = None) -> float:
    """A finite number, > 0 when ``positive`` else >= 0 (``unit`` is named in the messages)."""
    units = f" [{unit}]" if unit else ""
    if not is_number(value):
        raise TypeError(f"{name} must be a number{units}, got {value!r}")
    number = float(value)  # type: ignore[arg-type]
    if not (math.isfinite(number) and (number > 0 if positive else number >= 0)):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {bound}{units}, got {value!r}")
    return number


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (e.g. numpy.random.default_rng(0)), got {rng!r}"
        )
    return rng


def _make_rng(seed: object) -> np.random.Generator:
    """A Generator from an int seed >= 0, a SeedSequence, or an existing Generator (used as is)."""
    if isinstance(seed, (np.random.Generator, np.random.SeedSequence)):
        return np.random.default_rng(seed)
    return np.random.default_rng(_int_at_least("seed", seed, 0))


# --------------------------------------------------------------------------------------------
# Arrival processes
# --------------------------------------------------------------------------------------------


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
    rate = _finite("rate_per_s", rate_per_s, positive=True, unit="1/s")
    n = _int_at_least("num_requests", num_requests, 1)
    rng = _make_rng(seed)
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
    num_requests : int
        How many arrivals [count], >= 1.
    seed : int, SeedSequence or Generator
        Seed (int >= 0) of the random stream; a Generator is used (and advanced) as is.

    Returns
    -------
    numpy.ndarray
        ``num_requests`` non-decreasing arrival instants [s], the first exactly 0.
    """
    rate = _finite("rate_per_s", rate_per_s, positive=True, unit="1/s")
    cv_value = _finite("cv", cv, positive=False)
    n = _int_at_least("num_requests", num_requests, 1)
    rng = _make_rng(seed)
    if cv_value == 0.0:
        return np.arange(n, dtype=float) / rate
    shape = 1.0 / cv_value**2
    return _arrivals_from_gaps(rng.gamma(shape, 1.0 / (shape * rate), size=n - 1))


# --------------------------------------------------------------------------------------------
# Length distributions
# --------------------------------------------------------------------------------------------


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
        _int_at_least("Fixed.tokens", self.tokens, 1)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` copies of ``tokens`` [tokens] (``rng`` is not advanced)."""
        _check_rng(rng)
        return np.full(_int_at_least("n", n, 0), int(self.tokens), dtype=np.int64)


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
        low = _int_at_least("Uniform.low_tokens", self.low_tokens, 1)
        high = _int_at_least("Uniform.high_tokens", self.high_tokens, 1)
        if high < low:
            raise ValueError(
                f"Uniform.high_tokens ({high}) is below low_tokens ({low}); both bounds are "
                "inclusive, so swap them or make them equal"
            )

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths [tokens], each in ``[low_tokens, high_tokens]``."""
        _check_rng(rng)
        size = _int_at_least("n", n, 0)
        return rng.integers(
            int(self.low_tokens), int(self.high_tokens), size=size, endpoint=True, dtype=np.int64
        )


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
        median = _finite("LogNormal.median_tokens", self.median_tokens, positive=True, unit="tokens")
        _finite("LogNormal.sigma", self.sigma, positive=False)
        low = _int_at_least("LogNormal.min_tokens", self.min_tokens, 1)
        high = None
        if self.max_tokens is not None:
            high = _int_at_least("LogNormal.max_tokens", self.max_tokens, 1)
            if high < low:
                raise ValueError(f"LogNormal.max_tokens ({high}) is below min_tokens ({low})")
        if median < low:
            raise ValueError(
                f"LogNormal.median_tokens ({self.median_tokens!r}) is below min_tokens ({low})"
            )
        if high is not None:
            if median > high:
                raise ValueError(
                    f"LogNormal.median_tokens ({self.median_tokens!r}) is above max_tokens ({high})"
                )

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` clipped, rounded log-normal lengths [tokens]."""
        _check_rng(rng)
        size = _int_at_least("n", n, 0)
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
        array = _whole_numbers("Empirical.values", self.values)
        array.setflags(write=False)
        object.__setattr__(self, "values", tuple(int(v) for v in array))
        object.__setattr__(self, "_array", array)

    def __repr__(self) -> str:
        a = self._array
        return (
            f"Empirical(<{a.size} values, {int(a.min())}..{int(a.max())} tokens, "
            f"median {float(np.median(a)):g}>)"
        )

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths [tokens] drawn uniformly, with replacement, from ``values``."""
        _check_rng(rng)
        size = _int_at_least("n", n, 0)
        return self._array[rng.integers(0, self._array.size, size=size)].copy()


def _whole_numbers(name: str, values: object) -> np.ndarray:
    """A 1-D int64 array of the values, each a whole number >= 1 (integral floats accepted)."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of ints, got {values!r}")
    array = np.asarray(list(values) if not isinstance(values, np.ndarray) else values)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(
            f"{name} must be a non-empty 1-D sequence of ints, got shape {array.shape}"
        )
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


def _as_distribution(name: str, value: object) -> LengthDistribution:
    if is_int(value):
        return Fixed(int(value))
    if not isinstance(value, LengthDistribution):
        raise TypeError(
            f"{name} must be a length distribution (Fixed, Uniform, LogNormal, Empirical or "
            f"anything with sample(n, rng)) or an int number of tokens, got {value!r}"
        )
    return value


# --------------------------------------------------------------------------------------------
# Synthetic workloads
# --------------------------------------------------------------------------------------------


def synthetic_workload(
    *,
    num_requests: int,
    rate_per_s: float,
    prompt: LengthDistribution | int,
    output: LengthDistribution | int,
    arrivals: ArrivalKind = "poisson",
    cv: float = 1.0,
    seed: int = 0,
) -> list[Request]:
    """A seeded random workload: arrivals from a process, lengths from two distributions.

    The seed is split (:meth:`numpy.random.SeedSequence.spawn`) into three independent child
    streams -- arrivals, prompt lengths, output lengths -- so changing one of the three leaves
    the other two draws exactly as they were (e.g. a longer prompt distribution keeps the same
    arrival instants and output lengths).

    Parameters
    ----------
    num_requests : int
        How many requests [count], >= 1.
    rate_per_s : float
        Mean arrival rate [1/s], > 0.
    prompt : LengthDistribution or int
        Prompt lengths [tokens]; an int means :class:`Fixed`.
    output : LengthDistribution or int
        Output lengths, the first token included [tokens]; an int means :class:`Fixed`.
    arrivals : {"poisson", "gamma"}
        Arrival process (:func:`poisson_arrivals` or :func:`gamma_arrivals`).
    cv : float
        Coefficient of variation of the gaps [-], for ``arrivals="gamma"`` only (a value other
        than 1 with ``"poisson"`` is an error rather than silently ignored).
    seed : int
        Seed [-], >= 0.

    Returns
    -------
    list of Request
        ``request_id`` 0, 1, ... in arrival order; the first arrives at 0 s.

    Examples
    --------
    >>> reqs = synthetic_workload(num_requests=3, rate_per_s=2.0, prompt=Uniform(100, 200),
    ...                           output=Fixed(50), seed=7)
    >>> [r.output_tokens for r in reqs]
    [50, 50, 50]
    """
    n = _int_at_least("num_requests", num_requests, 1)
    rate = _finite("rate_per_s", rate_per_s, positive=True, unit="1/s")
    prompt_dist = _as_distribution("prompt", prompt)
    output_dist = _as_distribution("output", output)
    seed_value = _int_at_least("seed", seed, 0)
    if arrivals not in ARRIVAL_KINDS:
        raise ValueError(f"arrivals must be one of {', '.join(ARRIVAL_KINDS)}, got {arrivals!r}")
    cv_value = _finite("cv", cv, positive=False)
    if arrivals == "poisson" and cv_value != 1.0:
        raise ValueError(
            f"cv={cv!r} only applies to gamma arrivals (Poisson gaps always have cv = 1); "
            "pass arrivals='gamma'"
        )
    arrival_seq, prompt_seq, output_seq = np.random.SeedSequence(seed_value).spawn(3)
    if arrivals == "poisson":
        times = poisson_arrivals(rate_per_s=rate, num_requests=n, seed=arrival_seq)
    else:
        times = gamma_arrivals(rate_per_s=rate, cv=cv_value, num_requests=n, seed=arrival_seq)
    prompts = _checked_sample("prompt", prompt_dist, n, np.random.default_rng(prompt_seq))
    outputs = _checked_sample("output", output_dist, n, np.random.default_rng(output_seq))
    return [
        Request(i, t, p, o)
        for i, (t, p, o) in enumerate(zip(times.tolist(), prompts.tolist(), outputs.tolist()))
    ]


def _checked_sample(
    name: str, dist: LengthDistribution, n: int, rng: np.random.Generator
) -> np.ndarray:
    """Draw from a (possibly user-written) distribution and check the result's shape and values."""
    values = np.asarray(dist.sample(n, rng))
    if values.shape != (n,):
        raise ValueError(
            f"{name}: {dist!r}.sample({n}, rng) returned shape {values.shape}, not ({n},)"
        )
    return _whole_numbers(f"{name} sample from {dist!r}", values)


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


def conversation_like(
    *,
    num_requests: int,
    rate_per_s: float,
    seed: int = 0,
    arrivals: ArrivalKind = "poisson",
    cv: float = 1.0,
) -> list[Request]:
    """A chat-service workload: Splitwise conversation-trace prompt and output lengths.

    Prompts follow :data:`CONVERSATION_PROMPT` (median 1,020 tokens) and outputs
    :data:`CONVERSATION_OUTPUT` (median 129 tokens), log-normals fitted to the trace's median
    and 90th percentile. (The trace itself arrives at ≈ 5.5 req/s with gap cv ≈ 1.09.)

    Parameters
    ----------
    num_requests, rate_per_s, seed, arrivals, cv
        As in :func:`synthetic_workload`: count, mean rate [1/s], seed, arrival process and
        the gaps' coefficient of variation for gamma arrivals [-].

    Returns
    -------
    list of Request
    """
    return _preset(
        "conversation-like", num_requests=num_requests, rate_per_s=rate_per_s, seed=seed, arrivals=arrivals, cv=cv
    )


def code_like(
    *,
    num_requests: int,
    rate_per_s: float,
    seed: int = 0,
    arrivals: ArrivalKind = "poisson",
    cv: float = 1.0,
) -> list[Request]:
    """A code-completion workload: Splitwise code-trace prompt and output lengths.

    Prompts follow :data:`CODE_PROMPT` (median 1,469 tokens) and outputs :data:`CODE_OUTPUT`
    (median 13 tokens): long prompts, short answers. The real trace (≈ 2.6 req/s) is very
    bursty, gap cv ≈ 13; pass ``arrivals="gamma", cv=...`` to imitate that.

    Parameters
    ----------
    num_requests, rate_per_s, seed, arrivals, cv
        As in :func:`conversation_like`.

    Returns
    -------
    list of Request
    """
    return _preset(
        "code-like", num_requests=num_requests, rate_per_s=rate_per_s, seed=seed, arrivals=arrivals, cv=cv
    )


def _preset(label: str, **options: object) -> list[Request]:
    prompt, output = PRESETS[label]
    return synthetic_workload(prompt=prompt, output=output, **options)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Trace CSV loading
# --------------------------------------------------------------------------------------------

SPLITWISE_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
"""Splitwise/Vidur trace columns: arrival [s], prompt [tokens], output [tokens]."""

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
"""Azure LLM inference trace columns: datetime string, prompt [tokens], output [tokens]."""

REQUEST_COLUMNS = ("request_id", "arrival_at_s", "prompt_tokens", "output_tokens")
"""Columns of :func:`requests_to_frame`."""

_FORMATS = {"Splitwise/Vidur": SPLITWISE_COLUMNS, "Azure": AZURE_COLUMNS}
_PARSER_LINE_RE = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


class _Lines:
    """Exact 1-based file line numbers (header = line 1) of a trace's data rows, for messages."""

    def __init__(self, path: Path, frame: pd.DataFrame) -> None:
        self.path = path
        self.frame = frame

    def line(self, position: int) -> int:
        """Line where data row ``position`` (0-based, blank lines included) starts.

        That is ``position + 2`` unless an earlier cell holds a quoted line break; those are
        counted only here, when a message needs the number.
        """
        before = self.frame.iloc[:position]
        breaks = sum(int(before[col].str.count("\n").sum()) for col in before.columns)
        return position + 2 + breaks

    def error(self, position: int, column: str, problem: str) -> TraceFormatError:
        return TraceFormatError(
            f"{self.path}, line {self.line(position)}, column {column!r}: {problem}"
        )


def _first(mask: np.ndarray) -> int | None:
    """Index of the first True, or None."""
    if mask.size and mask.any():
        return int(np.argmax(mask))
    return None


_MAX_TOKENS = 2**53  # whole numbers above this are not exact as floats


def _parse_tokens(raw: np.ndarray, what: str) -> tuple[np.ndarray, int | None, str]:
    """Token counts of one column of stripped strings, the first bad row (or None), its problem."""
    numbers = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(dtype=float)
    finite = np.isfinite(numbers)
    whole = finite & (numbers == np.round(numbers))
    good = whole & (numbers >= 1) & (numbers <= _MAX_TOKENS)
    bad = _first(~good)
    if bad is None:
        return numbers.astype(np.int64), None, ""
    text = raw[bad]
    if text == "":
        problem = f"is empty; every row needs its {what} length in tokens"
    elif not finite[bad]:
        problem = f"expected a whole number of tokens, got {text!r}"
    elif not whole[bad]:
        problem = f"expected a whole number of tokens, got the fraction {text!r}"
    elif what == "output" and numbers[bad] == 0:
        problem = (
            f"got {text!r}: every request generates at least its first token, so the output "
            "length must be >= 1; remove or fix such rows before loading (nothing is dropped "
            "silently)"
        )
    elif numbers[bad] > _MAX_TOKENS:
        problem = f"{text!r} tokens is implausibly large (more than 2**53)"
    else:
        problem = f"expected a whole number of tokens >= 1, got {text!r}"
    return numbers, bad, problem


def _parse_seconds(raw: np.ndarray) -> tuple[np.ndarray, int | None, str]:
    """Splitwise ``arrived_at``: finite numbers of seconds >= 0."""
    numbers = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(dtype=float)
    good = np.isfinite(numbers) & (numbers >= 0)
    bad = _first(~good)
    if bad is None:
        return numbers, None, ""
    text = raw[bad]
    if text == "":
        problem = "is empty; every row needs its arrival time in seconds"
    elif not np.isfinite(numbers[bad]):
        problem = f"expected a finite number of seconds, got {text!r}"
    else:
        problem = f"expected a number of seconds >= 0, got {text!r}"
    return numbers, bad, problem


def _parse_timestamps(raw: np.ndarray) -> tuple[np.ndarray, int | None, str]:
    """Azure ``TIMESTAMP``: ISO-8601 datetime strings -> seconds since the first data row."""
    stamps = pd.to_datetime(
        pd.Series(raw, dtype=object), format="ISO8601", utc=True, errors="coerce"
    )
    # seconds since the first row; NaN where a cell did not parse (so earlier rows can still
    # be checked for order before the unparseable one is reported)
    seconds = ((stamps - stamps.iloc[0]) / pd.Timedelta(seconds=1)).to_numpy(dtype=float)
    bad = _first(stamps.isna().to_numpy())
    if bad is None:
        return seconds, None, ""
    text = raw[bad]
    if text == "":
        problem = "is empty; every row needs its arrival timestamp"
    else:
        problem = (
            f"cannot parse {text!r} as a date and time; expected ISO 8601 like "
            "'2023-11-16 18:15:46.6805900'"
        )
    return seconds, bad, problem


def _read_cells(path: Path) -> tuple[pd.DataFrame, list[str]]:
    """The CSV as stripped strings (object dtype) and its header.

    Blank lines are kept, as rows of empty strings, so row ``i`` sits on line ``i + 2``.
    """
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            header = next(csv.reader(handle), None)
    except FileNotFoundError:
        raise TraceFormatError(f"trace file {path} does not exist") from None
    except IsADirectoryError:
        raise TraceFormatError(f"trace file {path} is a directory, not a CSV file") from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path}, line 1: not a readable UTF-8 CSV header ({exc})") from None
    except (OSError, csv.Error) as exc:
        raise TraceFormatError(f"trace file {path} cannot be read: {exc}") from None
    if header is None or not any(name.strip() for name in header):
        raise TraceFormatError(
            f"{path} is empty; line 1 must be a header naming the columns "
            f"{_expected_columns_text()}"
        )
    header = [name.strip() for name in header]
    duplicated = sorted({name for name in header if name and header.count(name) > 1})
    if duplicated:
        raise TraceFormatError(f"{path}, line 1: column(s) {', '.join(duplicated)} appear twice")
    try:
        frame = pd.read_csv(
            path,
            dtype=str,
            keep_default_na=False,
            na_filter=False,
            skip_blank_lines=False,
            index_col=False,
            encoding="utf-8-sig",
        )
    except pd.errors.ParserError as exc:
        match = _PARSER_LINE_RE.search(str(exc))
        if match:
            expected, line, saw = match.groups()
            raise TraceFormatError(
                f"{path}, line {line}: {saw} cells but the header has {expected} columns"
            ) from None
        raise TraceFormatError(f"{path}: not a readable CSV ({exc})") from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path}: not a readable UTF-8 CSV ({exc})") from None
    frame.columns = [str(name).strip() for name in frame.columns]
    frame = frame.astype(object).apply(lambda col: col.str.strip())
    return frame, header


def _expected_columns_text() -> str:
    return " or ".join(f"{', '.join(cols)} ({name})" for name, cols in _FORMATS.items())


def _detect_format(path: Path, header: list[str]) -> tuple[str, tuple[str, str, str]]:
    present = {name: all(c in header for c in cols) for name, cols in _FORMATS.items()}
    if all(present.values()):
        raise TraceFormatError(
            f"{path}, line 1: the header holds both the Splitwise/Vidur columns "
            f"({', '.join(SPLITWISE_COLUMNS)}) and the Azure ones ({', '.join(AZURE_COLUMNS)}); "
            "keep one set so it is clear which to read"
        )
    for name, ok in present.items():
        if ok:
            return name, _FORMATS[name]
    # name the missing columns of the format the header is closest to
    closest = max(_FORMATS, key=lambda name: sum(c in header for c in _FORMATS[name]))
    missing = [c for c in _FORMATS[closest] if c not in header]
    raise TraceFormatError(
        f"{path}, line 1: missing column(s) {', '.join(repr(c) for c in missing)}; a trace "
        f"needs the columns {_expected_columns_text()}; the header has {', '.join(header)}"
    )


def load_trace(
    path: str | PathLike[str],
    *,
    time_scale: float = 1.0,
    rate_per_s: float | None = None,
    max_requests: int | None = None,
) -> list[Request]:
    """Read a workload trace CSV, validating every cell, into requests.

    Two formats are recognised by their header (extra columns are allowed and ignored):

    * Splitwise/Vidur: ``arrived_at`` [s, number >= 0], ``num_prefill_tokens``,
      ``num_decode_tokens``; arrival instants are taken as they are.
    * Azure LLM inference trace: ``TIMESTAMP`` (ISO 8601 date and time such as
      ``2023-11-16 18:15:46.6805900``; an offset such as ``+01:00`` is honoured, a
      timestamp without one is read as UTC),
      ``ContextTokens``, ``GeneratedTokens``; arrivals become seconds since the first row.

    Token counts must be whole numbers >= 1 (``12`` or ``12.0``). An output of 0 tokens is an
    error, not a skipped row: the simulator's requests always generate their first token, and
    nothing in a trace is dropped silently. Arrival times must be non-decreasing (ties are
    fine). Blank lines are ignored; they hold no request.

    Parameters
    ----------
    path : str or path-like
        The CSV file.
    time_scale : float
        Multiplies every arrival instant, hence every inter-arrival gap [-], > 0: 0.5 replays
        the trace twice as fast (twice the load, half the duration), 2.0 at half the load.
    rate_per_s : float or None
        Instead of ``time_scale``: rescale time so the mean rate,
        ``(num_requests - 1) / (last - first arrival)``, equals this [1/s]. Not both.
    max_requests : int or None
        Keep only the first this many requests [count], >= 1 (the whole file is still
        validated); the rate rescaling then applies to the kept ones.

    Returns
    -------
    list of Request
        In file order; ``request_id`` is the 0-based index of the data row (blank lines not
        counted), ``arrival_at_s`` in seconds, ``prompt_tokens`` and ``output_tokens``.

    Raises
    ------
    TraceFormatError
        A missing or unreadable file, an empty file or one with only a header, a missing or
        duplicated column (the message lists both formats' columns), a ragged row, or a bad
        cell: empty, non-numeric, NaN/inf or negative time, unparseable timestamp, time going
        backwards, fractional, zero or negative token count. The message names the file, the
        line (header = line 1) and the column.
        ``rate_per_s`` on requests that all arrive at one instant (no rate to rescale) is
        also refused with this error.
    ValueError, TypeError
        Invalid ``time_scale``, ``rate_per_s`` or ``max_requests``, or both scaling options.
    """
    scale = _finite("time_scale", time_scale, positive=True, unit="-")
    target_rate = (
        None if rate_per_s is None else _finite("rate_per_s", rate_per_s, positive=True, unit="1/s")
    )
    if target_rate is not None and scale != 1.0:
        raise ValueError(
            "pass either time_scale or rate_per_s, not both: each one alone sets the replay speed"
        )
    limit = None if max_requests is None else _int_at_least("max_requests", max_requests, 1)

    path = Path(path)
    frame, header = _read_cells(path)
    kind, (time_col, prompt_col, output_col) = _detect_format(path, header)

    blank = (frame == "").all(axis=1).to_numpy()
    keep = np.flatnonzero(~blank)
    if keep.size == 0:
        raise TraceFormatError(
            f"{path}, line 2: the file ends after its header ({', '.join(header)}); a trace "
            "needs at least one data row, one request per line"
        )
    rows = frame.iloc[keep]
    raw_times = rows[time_col].to_numpy(dtype=object)
    if kind == "Azure":
        times, t_bad, t_problem = _parse_timestamps(raw_times)
    else:
        times, t_bad, t_problem = _parse_seconds(raw_times)
    prompts, p_bad, p_problem = _parse_tokens(rows[prompt_col].to_numpy(dtype=object), "prompt")
    outputs, o_bad, o_problem = _parse_tokens(rows[output_col].to_numpy(dtype=object), "output")

    # report the first problem in file order: lowest row, then the format's column order
    checks = [
        (t_bad, time_col, t_problem),
        (p_bad, prompt_col, p_problem),
        (o_bad, output_col, o_problem),
    ]
    found = [
        (row, order, column, problem)
        for order, (row, column, problem) in enumerate(checks)
        if row is not None
    ]
    first_bad = min(row for row, *_ in found) if found else len(keep)
    back = _first(np.diff(times[:first_bad]) < 0)  # rows before first_bad all parsed
    if back is not None:
        found.append(
            (
                back + 1,
                0,
                time_col,
                f"time goes backwards: {raw_times[back + 1]!r} comes after "
                f"{raw_times[back]!r} on the previous data row; sort the trace by arrival time",
            )
        )
    if found:
        row, _, column, problem = min(found)
        raise _Lines(path, frame).error(int(keep[row]), column, problem)

    if limit is not None:
        times, prompts, outputs = times[:limit], prompts[:limit], outputs[:limit]
    if target_rate is not None:
        span = float(times[-1] - times[0])
        if times.size < 2 or span <= 0:
            raise TraceFormatError(
                f"{path}: cannot rescale to rate_per_s={target_rate:g}: the "
                f"{times.size} request(s) kept all arrive at the same instant, so the trace has "
                "no rate; use time_scale or keep more requests"
            )
        scale = (times.size - 1) / (target_rate * span)
    if scale != 1.0:
        times = times * scale
    return [
        Request(i, t, p, o)
        for i, (t, p, o) in enumerate(zip(times.tolist(), prompts.tolist(), outputs.tolist()))
    ]


# --------------------------------------------------------------------------------------------
# Summaries and DataFrame round trips
# --------------------------------------------------------------------------------------------


def trace_stats(requests: Sequence[Request]) -> dict[str, float | int]:
    """Headline numbers of a workload, for notebooks and sanity checks.

    Parameters
    ----------
    requests : sequence of Request
        At least one.

    Returns
    -------
    dict
        ``num_requests`` [count]; ``duration_s`` (last minus first arrival) [s];
        ``rate_per_s`` = ``(num_requests - 1) / duration_s`` [1/s] (NaN when the duration is
        0); ``interarrival_cv`` [-] (std over mean of the gaps, NaN with fewer than two gaps or
        a zero mean); ``prompt_p50_tokens``, ``prompt_p90_tokens``, ``prompt_mean_tokens``,
        ``output_p50_tokens``, ``output_p90_tokens``, ``output_mean_tokens`` [tokens]
        (percentiles with numpy's linear interpolation).
    """
    if len(requests) == 0:
        raise ValueError("trace_stats needs at least one request")
    arrivals = np.sort(np.array([r.arrival_at_s for r in requests], dtype=float))
    prompts = np.array([r.prompt_tokens for r in requests], dtype=float)
    outputs = np.array([r.output_tokens for r in requests], dtype=float)
    duration = float(arrivals[-1] - arrivals[0])
    gaps = np.diff(arrivals)
    rate = (len(requests) - 1) / duration if duration > 0 else math.nan
    mean_gap = float(gaps.mean()) if gaps.size else 0.0
    cv = float(gaps.std() / mean_gap) if gaps.size >= 2 and mean_gap > 0 else math.nan
    stats: dict[str, float | int] = {
        "num_requests": len(requests),
        "duration_s": duration,
        "rate_per_s": rate,
        "interarrival_cv": cv,
    }
    for name, values in (("prompt", prompts), ("output", outputs)):
        p50, p90 = np.quantile(values, [0.5, 0.9])
        stats[f"{name}_p50_tokens"] = float(p50)
        stats[f"{name}_p90_tokens"] = float(p90)
        stats[f"{name}_mean_tokens"] = float(values.mean())
    return stats


def requests_to_frame(requests: Iterable[Request]) -> pd.DataFrame:
    """One row per request: ``request_id``, ``arrival_at_s`` [s], ``prompt_tokens``,
    ``output_tokens`` [tokens], in the given order."""
    rows = [(r.request_id, r.arrival_at_s, r.prompt_tokens, r.output_tokens) for r in requests]
    frame = pd.DataFrame(rows, columns=list(REQUEST_COLUMNS))
    return frame.astype(
        {"arrival_at_s": float, "prompt_tokens": np.int64, "output_tokens": np.int64}
    )


def requests_from_frame(frame: pd.DataFrame) -> list[Request]:
    """Requests from a DataFrame with the columns of :func:`requests_to_frame`.

    ``request_id`` is optional (0, 1, ... when absent); extra columns are ignored. Token
    columns may hold ints or whole-valued floats.

    Raises
    ------
    ValueError
        A missing column, or a row :class:`~budgetlab.specs.Request` refuses (the message
        names the row).
    """
    missing = [c for c in REQUEST_COLUMNS[1:] if c not in frame.columns]
    if missing:
        raise ValueError(
            f"frame lacks column(s) {', '.join(missing)}; requests need "
            f"{', '.join(REQUEST_COLUMNS)} (request_id optional)"
        )
    ids = frame["request_id"].tolist() if "request_id" in frame.columns else list(range(len(frame)))
    requests = []
    columns = (frame[c].tolist() for c in REQUEST_COLUMNS[1:])
    for position, (rid, t, p, o) in enumerate(zip(ids, *columns)):
        try:
            requests.append(Request(_plain_id(rid), _plain_time(t), _plain_int(p), _plain_int(o)))
        except ValueError as exc:
            raise ValueError(f"frame row {position}: {exc}") from None
    return requests


def _plain_id(value: object) -> int | str:
    if is_int(value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value  # type: ignore[return-value]  # Request accepts str ids; others pass through


def _plain_time(value: object) -> object:
    if is_int(value):
        return float(value)
    return value


def _plain_int(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
