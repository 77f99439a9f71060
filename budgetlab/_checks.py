"""Argument checks shared by the package: is this an int, a finite number in range, a flag?

One definition of each test, so every module agrees that ``True`` is not an int, that
``numpy.int64(3)`` is one, and that NaN and infinity are not numbers of seconds or tokens. Each
check raises the exception class its caller names (``ConfigError`` for engine settings,
``ParameterError`` for sweep and cost-model arguments, ``ValueError`` for plain inputs) with the
message ``"{name} must be {what}, got {value!r}{hint}"``.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from budgetlab.errors import ParameterError

__all__ = ["is_int", "is_number", "is_flag", "int_at_least", "number_in", "flag"]


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
    """
    if not is_int(value) or value < minimum:  # type: ignore[operator]
        raise error(f"{name} must be {what or f'an int >= {minimum}'}, got {value!r}")
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
    """
    if is_number(value):
        number = float(value)  # type: ignore[arg-type]
        above = low < number if low_open else low <= number
        below = number < high if high_open else number <= high
        if math.isfinite(number) and above and below:
            return number
    raise error(f"{name} must be {what}, got {value!r}{hint}")


def flag(name: str, value: object, *, error: type[Exception] = ParameterError) -> bool:
    """``value`` as a bool, if it is ``True`` or ``False`` (NumPy's included); else ``error``."""
    if not is_flag(value):
        raise error(f"{name} must be True or False, got {value!r}")
    return bool(value)
