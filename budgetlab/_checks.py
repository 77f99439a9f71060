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
from typing import Final, TypedDict, TypeVar

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
) -> int:
    """``value`` as an int, if it is one and at least ``minimum``; else ``error``.

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
    """
    message = f"{name} must be {what or f'an int >= {minimum}'}, got {value!r}"
    if not is_int(value):
        raise (type_error or error)(message)
    if value < minimum:  # type: ignore[operator]
        raise error(message)
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
    """
    message = f"{name} must be {what}, got {value!r}{hint}"
    if not is_number(value):
        raise (type_error or error)(message)
    number = float(value)  # type: ignore[arg-type]
    above = low < number if low_open else low <= number
    below = number < high if high_open else number <= high
    if math.isfinite(number) and above and below:
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
) -> float:
    """``value`` as a finite float, > 0 when ``positive`` else >= 0.

    ``name``, ``value``, ``error`` and ``type_error`` are as in :func:`number_in`; ``positive``
    says whether 0 is refused, and ``unit`` is the unit the message names (``"1/s"``,
    ``"tokens"``; ``""`` for none).
    """
    units = f" [{unit}]" if unit else ""
    what = f"a finite number {'> 0' if positive else '>= 0'}{units}"
    return number_in(name, value, low=0.0, low_open=positive, what=what, error=error, type_error=type_error)


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
) -> np.ndarray:
    """``values`` (an int or an array_like of them) as an int64 array, each a finite whole
    number >= ``minimum`` (integral floats such as ``2048.0`` accepted); else ``error``.

    ``name``, ``what``, ``error`` and ``type_error`` are as in :func:`number_array` (the message
    is ``"{name} must be {what}, got {values!r}"``); ``type_error`` is raised for a value that is
    not a number at all (a bool, a string, ``None``), ``error`` for a fraction, NaN, an infinity
    or a value below ``minimum``.
    """
    message = f"{name} must be {what}, got {values!r}"
    array = _numeric(name, values, what, error, type_error or error)
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
    return array.astype(np.int64, copy=False)
