"""Argument checks shared by the package: is this an int, a finite number in range, a flag?

One definition of each test, so every module agrees that ``True`` is not an int, that
``numpy.int64(3)`` is one, and that NaN and infinity are not numbers of seconds or tokens. Each
check raises the exception class its caller names (``ConfigError`` for engine settings,
``ParameterError`` for sweep and cost-model arguments, ``ValueError`` for plain inputs) with the
message ``"{name} must be {what}, got {value!r}{hint}"``. A caller that separates a value of the
wrong *type* from one out of range (the workload generators raise ``TypeError`` for the first and
``ValueError`` for the second) passes ``type_error=TypeError`` as well, or ``**PLAIN_ERRORS``.

The basic tests are :func:`is_int`, :func:`is_number` and :func:`is_flag`; the checks built on
them are :func:`int_at_least`, :func:`number_in` and :func:`flag`, and the shorthands the
experiments and workloads share: :func:`random_seed`, :func:`positive_rate`,
:func:`finite_number`, :func:`fraction_in`, :func:`positive_factors` and :func:`grid_axis`.
Vectorized arguments (a number or an array of them) are checked by :func:`number_array`,
:func:`finite_array` and :func:`whole_array`, which refuse bools, strings and ``None`` inside an array as the scalar
checks do. A hot path tests ``type(value) in FAST_INT_TYPES`` (and its range) first and calls
the general check only when that fails, so a valid call pays a few tens of nanoseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from numbers import Integral, Real
from typing import Final, NamedTuple, TypedDict, TypeVar

import numpy as np

from budgetlab.errors import ParameterError

__all__ = [
    "is_int",
    "is_number",
    "is_flag",
    "int_at_least",
    "number_in",
    "flag",
    "random_seed",
    "positive_rate",
    "finite_number",
    "fraction_in",
    "positive_factors",
    "grid_axis",
    "number_array",
    "finite_array",
    "whole_array",
    "FAST_INT_TYPES",
    "ErrorClasses",
    "PLAIN_ERRORS",
    "Bound",
    "at_most",
    "MAX_TOKENS",
    "MAX_PROMPT_STEPS",
    "MAX_KV_BLOCKS",
    "MAX_REQUESTS",
    "MAX_TIME_S",
    "MAX_INSTANT_S",
    "MAX_MEMORY_BYTES",
    "MAX_FLOPS_PER_S",
    "MAX_BANDWIDTH_BYTES_PER_S",
    "MAX_LATENCY_S",
    "MAX_PARAMS",
    "MAX_MODEL_DIMENSION",
    "MAX_DTYPE_BYTES",
    "MAX_RATE_PER_S",
    "MAX_CV",
    "MAX_LOG_SIGMA",
    "MAX_LOAD_FRACTION",
    "HARDWARE_BOUNDS",
    "MIN_TOLERANCE_FRACTION",
]

T = TypeVar("T")


class ErrorClasses(TypedDict):
    """The two exception classes a check raises: for a bad value and for a value of the wrong type."""

    error: type[Exception]
    type_error: type[Exception] | None


PLAIN_ERRORS: Final[ErrorClasses] = {"error": ValueError, "type_error": TypeError}
"""``TypeError`` for a value of the wrong type, ``ValueError`` for one out of range: the errors of
plain programming inputs (the workload generators), passed as ``check(name, value, **PLAIN_ERRORS)``."""


FAST_INT_TYPES: Final[frozenset[type]] = frozenset({int, np.int64, np.int32, np.intp, np.uint32, np.uint64})
"""The int types a hot path accepts at a glance (``type(value) in FAST_INT_TYPES``): each is one
:func:`is_int` accepts. Any other value goes through :func:`int_at_least`, which accepts or
refuses it (``bool`` is not in the set: its type is ``bool``, not ``int``)."""


class Bound(NamedTuple):
    """The largest value budgetlab accepts for one kind of number, and why.

    Every number a user can pass has a bound beyond which no deployment means it, checked up
    front by :func:`at_most` so a huge value is refused in microseconds with this reason rather
    than ending minutes later in a ``MemoryError``, an int64 overflow or a clock that no longer
    advances. Each bound is far above anything real (the reason says how far).

    Attributes
    ----------
    value : int or float
        The largest value accepted, in ``unit``.
    unit : str
        The unit of ``value`` (``"tokens"``, ``"B"``).
    why : str
        Why no larger value means anything, for the message.
    """

    value: int | float
    unit: str
    why: str


MAX_TOKENS: Final = Bound(
    2**27,
    "tokens",
    "13 times the longest context window of any released model, Llama 4 Scout's 10 M tokens; "
    "vLLM never serves a sequence longer than the model's max_model_len",
)
"""Tokens in one sequence, one prompt, one step's budget or one context (134,217,728)."""

MAX_PROMPT_STEPS: Final = Bound(
    2**20,
    "steps",
    "each step is priced one by one; a prompt that takes over a million steps is a budget that "
    "leaves a token or two per step for it, which no deployment runs: raise the budget or lower "
    "num_decodes",
)
"""Steps the scripted chunking scenario prices one by one (:func:`budgetlab.ttft_s`) (1,048,576)."""

MAX_KV_BLOCKS: Final = Bound(
    2**24,
    "blocks",
    "eight 288 GB GPUs hold about 12.5 M blocks of 16 tokens even for a 135 M-parameter model with "
    "an fp8 KV cache, and the simulator keeps every block in memory",
)
"""Usable KV-cache blocks of one replica (16,777,216)."""

MAX_REQUESTS: Final = Bound(
    10**7,
    "requests",
    "the simulator holds every request in memory, about 1 KB each with its bookkeeping, and a "
    "percentile is stable with a few thousand; capacity searches and sweeps use 2,000",
)
"""Requests in one synthetic workload or replayed benchmark."""

MAX_TIME_S: Final = Bound(
    2.0**32,
    "s",
    "136 years; beyond it a float's resolution is coarser than a microsecond, so a step of a few "
    "microseconds would no longer move the simulated clock",
)
"""A time span in a workload: the last arrival after the first, a duration [s]."""

MAX_INSTANT_S: Final = Bound(
    2.0**62,
    "s",
    "an instant on any clock, epoch seconds or finer; times are measured from the first arrival, "
    "and the span from it is bounded by MAX_TIME_S",
)
"""An arrival instant on the input's clock [s]."""

MAX_MEMORY_BYTES: Final = Bound(
    2.0**44,
    "B",
    "16 TiB, over 50 times the largest accelerator memory shipped, 288 GB of HBM3e on a B300",
)
"""Memory of one device [B]."""

MAX_FLOPS_PER_S: Final = Bound(
    1e18, "FLOP/s", "1 EFLOP/s, over 400 times the fastest GPU's dense BF16 rate, 2.25 PFLOP/s on a B200"
)
"""Compute rate of one device [FLOP/s]."""

MAX_BANDWIDTH_BYTES_PER_S: Final = Bound(
    1e15, "B/s", "1 PB/s, over 100 times the fastest memory or link, 8 TB/s of HBM3e on a B200"
)
"""Memory or interconnect bandwidth of one device [B/s]."""

MAX_LATENCY_S: Final = Bound(
    1.0, "s", "an all-reduce that takes a second is no GPU interconnect; NVLink's takes about 10 us"
)
"""Latency of one small collective [s]."""

HARDWARE_BOUNDS: Final[tuple[tuple[str, Bound, bool], ...]] = (
    ("dense_bf16_flops_per_s", MAX_FLOPS_PER_S, True),
    ("mem_bandwidth_bytes_per_s", MAX_BANDWIDTH_BYTES_PER_S, True),
    ("memory_bytes", MAX_MEMORY_BYTES, True),
    ("interconnect_bandwidth_bytes_per_s", MAX_BANDWIDTH_BYTES_PER_S, True),
    ("interconnect_latency_s", MAX_LATENCY_S, False),
)
"""Each :class:`~budgetlab.specs.HardwareSpec` number, its bound, and whether it must be > 0
(a latency may be 0)."""

MAX_PARAMS: Final = Bound(1e15, "parameters", "a thousand times the largest published model, about 1 T parameters")
"""Parameters of one model."""

MAX_MODEL_DIMENSION: Final = Bound(
    2**24,
    "",
    "no layer count, width, head count, expert count or vocabulary of a published transformer is "
    "within a factor 60 of it; the largest vocabulary is 262,144 tokens",
)
"""A whole-number dimension of a model (layers, widths, heads, experts, vocabulary) (16,777,216)."""

MAX_DTYPE_BYTES: Final = Bound(8, "B", "float64, the widest element any GPU kernel stores")
"""Bytes per weight or KV element."""

MAX_RATE_PER_S: Final = Bound(
    1e9, "requests/s", "a billion requests a second, about a million times what one replica serves"
)
"""A service rate or an offered load to sweep [1/s]."""

MAX_CV: Final = Bound(
    1e3,
    "",
    "a cv of 1,000 already sends nearly every request in one burst; beyond it the gamma shape 1/cv**2 only underflows",
)
"""Coefficient of variation of inter-arrival or think times [-]."""

MAX_LOG_SIGMA: Final = Bound(
    10.0, "", "a sigma of 10 already spreads lengths over 8 orders of magnitude each way of the median"
)
"""Standard deviation of a log-normal length distribution's log [-]."""

MAX_LOAD_FRACTION: Final = Bound(
    1e3, "", "a load a thousand times the service rate is far past where every queue grows without bound"
)
"""An offered load as a fraction of the service rate [-]."""

MIN_TOLERANCE_FRACTION: Final = 1e-6
"""Smallest relative tolerance of a bisection on load [-]: a million times the 2.2e-16 spacing
of floats near 1, so the bracket's ends stay distinct numbers and the search ends (in at most
about 31 halvings of any bracket of positive floats); a capacity is never known to 1e-6 anyway
(a workload sample of a few thousand requests moves it by percents)."""


def at_most(name: str, value: object, bound: Bound, *, error: type[Exception] = ParameterError) -> None:
    """``error`` unless ``value`` (already checked to be a number) is at most ``bound.value``.

    The message names the argument, the bound with its unit and why it is there:
    ``"prompt_tokens must be at most 134,217,728 tokens (13 times the longest ...), got 10**12"``.
    """
    if value > bound.value:  # type: ignore[operator]
        whole = isinstance(bound.value, int) or (bound.value.is_integer() and bound.value < 1e16)
        limit = f"{bound.value:,.0f}" if whole else f"{bound.value:g}"
        unit = f" {bound.unit}" if bound.unit else ""
        raise error(f"{name} must be at most {limit}{unit} ({bound.why}), got {value!r}")


def is_int(value: object) -> bool:
    """Whether ``value`` is an int (Python or NumPy); ``bool`` is not."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """Whether ``value`` is a real number (int, float or a NumPy scalar of either); ``bool`` is
    not. NaN and infinities count as numbers here; :func:`number_in` refuses them."""
    return isinstance(value, Real) and not isinstance(value, bool)


def is_flag(value: object) -> bool:
    """Whether ``value`` is ``True`` or ``False`` (NumPy's bools included)."""
    return isinstance(value, (bool, np.bool_))


def int_at_least(
    name: str,
    value: object,
    minimum: int = 1,
    *,
    what: str | None = None,
    error: type[Exception] = ParameterError,
    type_error: type[Exception] | None = None,
    maximum: Bound | None = None,
) -> int:
    """``value`` as an int, if it is one, at least ``minimum`` and at most ``maximum``; else ``error``.

    Parameters
    ----------
    name : str
        What the message calls the value (``"max_num_seqs"``, ``"request 7: prompt_tokens"``).
    value : object
        The value to check.
    minimum : int
        Smallest value allowed.
    what : str, optional
        The message's description; default ``"an int >= {minimum}"``.
    error : type
        Exception class raised.
    type_error : type, optional
        Exception class raised instead of ``error`` when ``value`` is not an int at all.
    maximum : Bound, optional
        The largest value allowed and why (:func:`at_most`); default none.
    """
    message = f"{name} must be {what or f'an int >= {minimum}'}, got {value!r}"
    if not is_int(value):
        raise (type_error or error)(message)
    if value < minimum:  # type: ignore[operator]
        raise error(message)
    if maximum is not None:
        at_most(name, value, maximum, error=error)
    return int(value)  # type: ignore[call-overload]


def number_in(
    name: str,
    value: object,
    *,
    what: str,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
    hint: str = "",
    error: type[Exception] = ParameterError,
    type_error: type[Exception] | None = None,
    maximum: Bound | None = None,
) -> float:
    """``value`` as a float, if it is a finite number within the bounds; else ``error``.

    Parameters
    ----------
    name : str
        What the message calls the value.
    value : object
        The value to check.
    what : str
        The message's description (``"a fraction in (0, 1]"``, ``"seconds >= 0"``).
    low, high : float
        Bounds, included unless ``low_open`` / ``high_open``.
    hint : str
        Appended to the message (``"; vLLM's default is 0.9"``).
    error : type
        Exception class raised.
    type_error : type, optional
        Exception class raised instead of ``error`` when ``value`` is not a number at all.
    maximum : Bound, optional
        The largest value allowed and why (:func:`at_most`), checked after the other bounds.
    """
    message = f"{name} must be {what}, got {value!r}{hint}"
    if not is_number(value):
        raise (type_error or error)(message)
    number = float(value)  # type: ignore[arg-type]
    above = low < number if low_open else low <= number
    below = number < high if high_open else number <= high
    if math.isfinite(number) and above and below:
        if maximum is not None:
            at_most(name, value, maximum, error=error)
        return number
    raise error(message)


def flag(name: str, value: object, *, error: type[Exception] = ParameterError) -> bool:
    """``value`` as a bool, if it is ``True`` or ``False`` (NumPy's included); else ``error``."""
    if not is_flag(value):
        raise error(f"{name} must be True or False, got {value!r}")
    return bool(value)


def random_seed(
    name: str, value: object, *, error: type[Exception] = ParameterError, type_error: type[Exception] | None = None
) -> int:
    """``value`` as a seed of a random stream: an int >= 0 [-]."""
    return int_at_least(name, value, 0, error=error, type_error=type_error)


def positive_rate(
    name: str, value: object, *, error: type[Exception] = ParameterError, type_error: type[Exception] | None = None
) -> float:
    """``value`` as an offered load or arrival rate: a finite number > 0 [1/s]."""
    what = "a finite number of requests per second > 0"
    return number_in(name, value, low=0.0, low_open=True, what=what, error=error, type_error=type_error)


def finite_number(
    name: str,
    value: object,
    *,
    positive: bool,
    unit: str = "",
    error: type[Exception] = ParameterError,
    type_error: type[Exception] | None = None,
    maximum: Bound | None = None,
) -> float:
    """``value`` as a finite float, > 0 when ``positive`` else >= 0 (and at most ``maximum``).

    ``name``, ``value``, ``error`` and ``type_error`` are as in :func:`number_in`; ``positive``
    says whether 0 is refused, and ``unit`` is the unit the message names (``"1/s"``,
    ``"tokens"``; ``""`` for none); ``maximum`` the largest value allowed and why
    (:func:`at_most`), default none.
    """
    units = f" [{unit}]" if unit else ""
    what = f"a finite number {'> 0' if positive else '>= 0'}{units}"
    number = number_in(name, value, low=0.0, low_open=positive, what=what, error=error, type_error=type_error)
    if maximum is not None:
        at_most(name, value, maximum, error=error)
    return number


def fraction_in(
    name: str, value: object, *, low: float = 0.0, high: float = 1.0, error: type[Exception] = ParameterError
) -> float:
    """``value`` as a float strictly between ``low`` and ``high`` (a relative tolerance, say) [-]."""
    what = f"a number in ({low:g}, {high:g})"
    return number_in(name, value, low=low, high=high, low_open=True, high_open=True, what=what, error=error)


def positive_factors(name: str, values: object, *, error: type[Exception] = ParameterError) -> tuple[float, ...]:
    """``values`` as a non-empty tuple of finite floats > 0 (multiples of a first guess, say) [-]."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise error(f"{name} must be a non-empty sequence of positive numbers, got {values!r}")
    return tuple(
        number_in(f"{name}[{i}]", v, low=0.0, low_open=True, what="a finite number > 0", error=error)
        for i, v in enumerate(values)
    )


def grid_axis(
    name: str,
    values: object,
    check: Callable[[str, object], T],
    *,
    error: type[Exception] = ParameterError,
) -> tuple[T, ...]:
    """A non-empty axis of a grid without repeats, each value passed through ``check``.

    A scalar (a string included) is an axis of one. ``check(f"{name}[{i}]", value)`` validates
    and converts each value.

    Raises
    ------
    error
        An empty axis, or a value given twice (a repeated grid point would only duplicate rows).
    """
    scalar = isinstance(values, (str, bytes)) or not isinstance(values, Iterable)
    items_in: Iterable[object] = (values,) if scalar else values  # type: ignore[assignment]
    items = tuple(check(f"{name}[{i}]", v) for i, v in enumerate(items_in))
    if not items:
        raise error(f"{name} is empty; give at least one value")
    repeated = sorted({str(v) for v in items if items.count(v) > 1})
    if repeated:
        raise error(
            f"{name} repeats {', '.join(repeated)}; each grid value once, please "
            "(a repeated point would only duplicate rows)"
        )
    return items


def number_array(
    name: str,
    values: object,
    *,
    what: str,
    error: type[Exception] = ParameterError,
    type_error: type[Exception] | None = None,
) -> np.ndarray:
    """``values`` (a number or an array_like of numbers) as a float array; else ``error``.

    Only the type is checked: each value must be an int or a float (NumPy's included), not a
    bool, a string or ``None``; NaN and infinities pass (the caller bounds the values).

    Parameters
    ----------
    name : str
        What the message calls the values.
    values : object
        A number, or a (nested) sequence or array of numbers.
    what : str
        The message's description (``"finite step times in seconds"``).
    error : type
        Exception class raised.
    type_error : type, optional
        Exception class raised instead of ``error`` (every refusal here is one of type).
    """
    return _numeric(name, values, what, error, type_error).astype(float)


def finite_array(
    name: str,
    values: object,
    *,
    what: str,
    low: float = -math.inf,
    error: type[Exception] = ParameterError,
    type_error: type[Exception] | None = None,
) -> np.ndarray:
    """``values`` as a float array, if every value is a finite number >= ``low``; else
    ``error`` (``type_error``, when given, for a value that is not a number at all).

    ``name``, ``what``, ``error`` and ``type_error`` are as in :func:`number_array`: a token
    count on a continuous curve (``step_time_s(295.3)``), say, with ``low=0``.
    """
    numbers = number_array(name, values, what=what, error=error, type_error=type_error or error)
    if not np.all(np.isfinite(numbers) & (numbers >= low)):
        raise error(f"{name} must be {what}, got {values!r}")
    return numbers


def _numeric(
    name: str, values: object, what: str, error: type[Exception], type_error: type[Exception] | None
) -> np.ndarray:
    """``values`` as an int or float array if every value is a number (not a bool); else
    ``type_error`` (or ``error``). A sequence is looked at value by value, since NumPy reads
    ``[True, 3]`` as the ints ``[1, 3]``; an array (or a Series) by its dtype."""
    message = f"{name} must be {what}, got {values!r}"
    if isinstance(values, (str, bytes)) or values is None:
        raise (type_error or error)(message)
    try:
        array = np.asarray(values)
        if not hasattr(values, "dtype") and array.dtype.kind != "O" and array.ndim > 0:
            array = np.asarray(values, dtype=object)  # see each value as given (a bool stays a bool)
    except (ValueError, TypeError):  # a ragged nesting
        raise (type_error or error)(message) from None
    if array.dtype.kind == "O":
        if not all(is_number(v) for v in array.ravel().tolist()):
            raise (type_error or error)(message)
        array = np.asarray(array.tolist())
        if array.dtype.kind not in "iuf":  # ints too large for int64 come back as objects
            array = array.astype(float)
    elif array.dtype.kind not in "iuf":  # bool, str, complex, datetime...
        raise (type_error or error)(message)
    return array


def whole_array(
    name: str,
    values: object,
    minimum: int,
    *,
    what: str,
    error: type[Exception] = ParameterError,
    type_error: type[Exception] | None = None,
    maximum: Bound | None = None,
) -> np.ndarray:
    """``values`` (an int or an array_like of them) as an int64 array, each a finite whole
    number >= ``minimum`` (integral floats such as ``2048.0`` accepted) and at most
    ``maximum`` (:func:`at_most`, when given); else ``error``.

    ``name``, ``what``, ``error`` and ``type_error`` are as in :func:`number_array` (the message
    is ``"{name} must be {what}, got {values!r}"``); ``type_error`` is raised for a value that is
    not a number at all (a bool, a string, ``None``), ``error`` for a fraction, NaN, an infinity
    or a value below ``minimum``.
    """
    message = f"{name} must be {what}, got {values!r}"
    array = _numeric(name, values, what, error, type_error or error)
    if array.dtype.kind == "u" and np.any(array > 2**62):  # 2**63 arrives as uint64: no int64 holds it
        raise error(message)
    if array.dtype.kind not in "iu":
        numbers = array.astype(float)
        if (
            not np.all(np.isfinite(numbers))
            or np.any(numbers != np.floor(numbers))
            or np.any(np.abs(numbers) > 2.0**62)
        ):
            raise error(message)
        array = numbers.astype(np.int64)
    if np.any(array < minimum):
        raise error(message)
    if maximum is not None and array.size:
        at_most(name, array.max().item(), maximum, error=error)
    return array.astype(np.int64, copy=False)
