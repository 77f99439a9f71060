"""The per-field checkers of notebook parameters, and how their messages are worded.

Papermill injects parameters without looking at their types: ``-p budgets true`` arrives as the
bool ``True``, ``-p prompt_tokens -5`` as ``-5``, ``-r budget_tokens 2048`` as the string
``"2048"``. Each checker here takes ``(name, value, ...)``, returns the cleaned value, or raises
:class:`~budgetlab.errors.ParameterError` with a one-paragraph message that names the parameter,
the value received, what is expected and how to pass a good value with papermill::

    parameter `budget_tokens` must be a whole number of tokens >= 1, but got -5 (int).
    Fix: pass e.g. papermill -p budget_tokens 2048.

They are the papermill-facing layer on top of :mod:`budgetlab._checks` (which decides what
counts as an int, a number, a flag). :data:`budgetlab.notebook.parameters.RULES` maps every
shared parameter name to one of them; a notebook with parameters of its own registers rules
built from them: ``validate_parameters(rules={...}, ...)``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, TypeVar, Unpack

from budgetlab import catalog
from budgetlab._checks import is_flag, is_int, is_number
from budgetlab.errors import ParameterError, TraceFormatError, UnknownNameError
from budgetlab.notebook.scenario import SCENARIO_DEFAULTS
from budgetlab.specs import HardwareSpec, ModelSpec
from budgetlab.workload.traces import TraceWorkload, load_trace

__all__ = [
    "Bounds",
    "describe",
    "yaml_literal",
    "how_to_pass",
    "parameter_error",
    "require_int",
    "require_number",
    "require_fraction",
    "require_int_list",
    "require_number_list",
    "require_factor_list",
    "require_str",
    "require_bool",
    "require_choice",
    "require_choice_list",
    "require_existing_file_or_empty",
    "require_trace_path",
    "require_hardware",
    "require_model",
    "require_model_list",
]

#: Longest list a list parameter may hold unless its rule says otherwise [entries].
MAX_LIST_LENGTH = 64

Spec = TypeVar("Spec", HardwareSpec, ModelSpec)


class Bounds(TypedDict, total=False):
    """The keyword arguments every number checker takes (each optional).

    Attributes
    ----------
    minimum : float or None
        Inclusive lower bound.
    above : float or None
        Exclusive lower bound.
    maximum : float or None
        Inclusive upper bound.
    unit : str
        Unit named in the message (``"tokens"``, ``"ms"``).
    example : object
        A valid value quoted in the fix; defaults to :data:`SCENARIO_DEFAULTS`.
    """

    minimum: float | None
    above: float | None
    maximum: float | None
    unit: str
    example: Any


# --------------------------------------------------------------------------------------------
# How to describe a value and how to say the fix
# --------------------------------------------------------------------------------------------


def describe(value: Any) -> str:
    """``-5 (int)``, ``True (bool)``, ``'2048' (str)``: the value and the type received."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def yaml_literal(value: Any) -> str:
    """``value`` as papermill's ``-p``/``-y`` would take it: ``[512, 2048]``, ``""``, ``0.9``."""
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_literal(v) for v in value) + "]"
    return repr(value)


def how_to_pass(name: str, example: Any = None) -> str:
    """How to pass a good value with papermill: ``-p name value`` or, for a list, ``-y``.

    ``example`` defaults to the parameter's value in :data:`SCENARIO_DEFAULTS`.
    """
    if example is None:
        example = SCENARIO_DEFAULTS.get(name)
    if example is None:
        return f"set `{name}` in the parameters cell"
    if isinstance(example, (list, tuple)):
        return f'pass a list, e.g. papermill -y "{name}: {yaml_literal(example)}"'
    return f"pass e.g. papermill -p {name} {yaml_literal(example)}"


def parameter_error(name: str, value: Any, expected: str, fix: str) -> ParameterError:
    """The standard message: ``parameter `name` must be EXPECTED, but got VALUE. Fix: FIX.``"""
    return ParameterError(f"parameter `{name}` must be {expected}, but got {describe(value)}. Fix: {fix}.")


def _bound_text(bounds: Bounds, *, whole: bool) -> str:
    """`` >= 1``, `` > 0``, `` >= 20 and <= 20,000``: the bounds as the message states them."""
    minimum, above, maximum = bounds.get("minimum"), bounds.get("above"), bounds.get("maximum")
    text = ""
    if above is not None:
        text = f" > {above:g}"
    elif minimum is not None:
        text = f" >= {minimum:g}"
    if maximum is not None:
        shown = f"{int(maximum):,}" if whole else f"{maximum:g}"
        text += f" and <= {shown}" if text else f" <= {shown}"
    return text


def _kind(noun: str, bounds: Bounds, *, whole: bool) -> str:
    """``a whole number of tokens >= 1``; ``a finite number of ms > 0``."""
    unit = bounds.get("unit", "")
    of_unit = f" of {unit}" if unit else ""
    return f"{noun}{of_unit}{_bound_text(bounds, whole=whole)}"


def _out_of_bounds(number: float, bounds: Bounds) -> bool:
    """Below ``minimum``, at or below ``above``, or above ``maximum``."""
    minimum, above, maximum = bounds.get("minimum"), bounds.get("above"), bounds.get("maximum")
    return (
        (minimum is not None and number < minimum)
        or (above is not None and number <= above)
        or (maximum is not None and number > maximum)
    )


def _text_hint(value: Any) -> str:
    """What to add to the fix when a number or flag arrived as text."""
    return " (unquoted; `-r` passes text)" if isinstance(value, str) else ""


# --------------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------------


def _as_int(value: Any) -> int | None:
    """The value as an int when it is a whole number (2048, 2048.0, numpy ints), else None."""
    if is_int(value):
        return int(value)
    if is_number(value) and math.isfinite(float(value)) and float(value).is_integer():
        return int(value)
    return None


def _as_float(value: Any) -> float | None:
    """The value as a float when it is a finite real number, else None."""
    if is_number(value) and math.isfinite(float(value)):
        return float(value)
    return None


def require_int(name: str, value: Any, **bounds: Unpack[Bounds]) -> int:
    """A whole number (``2048.0`` is accepted as ``2048``; bools and strings are not).

    Parameters
    ----------
    name : str
        Parameter name, quoted in the message.
    value : object
        What the notebook received.
    **bounds
        ``minimum``, ``above``, ``maximum``, ``unit``, ``example`` (see :class:`Bounds`).

    Returns
    -------
    int

    Raises
    ------
    ParameterError
    """
    number = _as_int(value)
    if number is not None and not _out_of_bounds(number, bounds):
        return number
    fix = how_to_pass(name, bounds.get("example"))
    if number is None:
        fix += _text_hint(value)
    raise parameter_error(name, value, _kind("a whole number", bounds, whole=True), fix)


def require_number(name: str, value: Any, **bounds: Unpack[Bounds]) -> float:
    """A finite real number (ints accepted; bools, strings and NaN are not).

    Parameters and errors as in :func:`require_int`; returns a float.
    """
    number = _as_float(value)
    if number is None or _out_of_bounds(number, bounds):
        fix = how_to_pass(name, bounds.get("example"))
        raise parameter_error(name, value, _kind("a finite number", bounds, whole=False), fix)
    return number


def require_fraction(name: str, value: Any, *, allow_zero: bool = False, allow_one: bool = True) -> float:
    """A number in (0, 1] by default; ``allow_zero``/``allow_one`` move the ends."""
    number = require_number(name, value, minimum=0.0)
    if (number == 0.0 and not allow_zero) or number > 1.0 or (number == 1.0 and not allow_one):
        low, high = ("[0" if allow_zero else "(0"), ("1]" if allow_one else "1)")
        raise parameter_error(name, value, f"a fraction in {low}, {high}", how_to_pass(name))
    return number


# --------------------------------------------------------------------------------------------
# Lists
# --------------------------------------------------------------------------------------------


def _is_list(value: Any) -> bool:
    """A list or tuple of values; a string, bytes or a mapping is not one."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, Mapping))


def _bad_entry(name: str, value: Any, item: Any, expected: str, example: Any = None) -> ParameterError:
    return ParameterError(
        f"parameter `{name}` must be {expected}, but its entry {describe(item)} is "
        f"not (got {describe(value)}). Fix: {how_to_pass(name, example)}."
    )


def require_int_list(
    name: str, value: Any, *, max_length: int = MAX_LIST_LENGTH, **bounds: Unpack[Bounds]
) -> list[int]:
    """A non-empty list of whole numbers, returned sorted with duplicates dropped.

    Each entry is checked as by :func:`require_int` against ``bounds``; a string
    (``-p budgets "[512, 2048]"`` passes text) is refused with a hint to use papermill's ``-y``.

    Returns
    -------
    list of int
        Sorted, unique.
    """
    unit, bound = bounds.get("unit", ""), _bound_text(bounds, whole=True)
    expected = f"a non-empty list of whole numbers{f' of {unit}' if unit else ''}" + (f", each{bound}" if bound else "")
    example = bounds.get("example")
    if not _is_list(value) or not value:
        raise parameter_error(name, value, expected, how_to_pass(name, example))
    if len(value) > max_length:
        raise parameter_error(name, value, f"{expected} with at most {max_length} entries", how_to_pass(name, example))
    numbers = []
    for item in value:
        number = _as_int(item)
        if number is None or _out_of_bounds(number, bounds):
            raise _bad_entry(name, value, item, expected, example)
        numbers.append(number)
    return sorted(set(numbers))


def require_number_list(
    name: str, value: Any, *, max_length: int = MAX_LIST_LENGTH, **bounds: Unpack[Bounds]
) -> list[float]:
    """A non-empty list of finite numbers, returned sorted with duplicates dropped.

    Each entry is checked as by :func:`require_number` against ``bounds`` (loads in requests per
    second, for instance); a string is refused as by :func:`require_int_list`.

    Returns
    -------
    list of float
        Sorted, unique.
    """
    unit, bound = bounds.get("unit", ""), _bound_text(bounds, whole=False)
    expected = f"a non-empty list of numbers{f' of {unit}' if unit else ''}" + (f", each{bound}" if bound else "")
    example = bounds.get("example")
    if not _is_list(value) or not value or len(value) > max_length:
        limit = f" with at most {max_length} entries" if _is_list(value) and value else ""
        raise parameter_error(name, value, expected + limit, how_to_pass(name, example))
    numbers = []
    for item in value:
        number = _as_float(item)
        if number is None or _out_of_bounds(number, bounds):
            raise _bad_entry(name, value, item, expected, example)
        numbers.append(number)
    return sorted(set(numbers))


def require_factor_list(name: str, value: Any) -> list[float]:
    """A non-empty list of at most 8 numbers in (0, 4], returned sorted without repeats."""
    expected = "a non-empty list of at most 8 numbers > 0 and <= 4 (multiples of the first guess)"
    if not _is_list(value) or not 0 < len(value) <= 8:
        raise parameter_error(name, value, expected, how_to_pass(name))
    factors = []
    for item in value:
        factor = _as_float(item)
        if factor is None or not 0 < factor <= 4:
            raise _bad_entry(name, value, item, expected)
        factors.append(factor)
    return sorted(set(factors))


# --------------------------------------------------------------------------------------------
# Text, flags and choices
# --------------------------------------------------------------------------------------------


def require_str(name: str, value: Any, *, allow_empty: bool = True, example: Any = None) -> str:
    """A string (a bool or number is refused)."""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        expected = "a string" if allow_empty else "a non-empty string"
        raise parameter_error(name, value, expected, how_to_pass(name, example))
    return value


def require_bool(name: str, value: Any, *, example: Any = None) -> bool:
    """``True`` or ``False`` (numpy bools too); strings such as ``"false"`` and numbers are refused."""
    if is_flag(value):
        return bool(value)
    raise parameter_error(name, value, "True or False", how_to_pass(name, example) + _text_hint(value))


def require_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """One of ``choices`` (case and surrounding blanks ignored); returns it in lower case."""
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    close = difflib.get_close_matches(value.strip().lower(), choices, n=1) if isinstance(value, str) else []
    guess = f"did you mean {close[0]}? " if close else ""
    fix = f"{guess}{how_to_pass(name, close[0] if close else None)}"
    raise parameter_error(name, value, f"one of {', '.join(choices)}", fix)


def require_choice_list(
    name: str, value: Any, choices: Sequence[str], *, max_length: int = MAX_LIST_LENGTH
) -> list[str]:
    """A non-empty list of distinct entries of ``choices`` (each as :func:`require_choice` takes
    it), in the order given."""
    expected = f"a non-empty list of distinct names from {', '.join(choices)}"
    if not _is_list(value) or not value or len(value) > max_length:
        limit = f" with at most {max_length} entries" if _is_list(value) and value else ""
        raise parameter_error(name, value, expected + limit, how_to_pass(name, list(choices[:2])))
    names = [require_choice(name, item, choices) for item in value]
    if len(set(names)) != len(names):
        raise parameter_error(name, value, expected, how_to_pass(name, list(dict.fromkeys(names))))
    return names


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def _not_a_file(name: str, value: Any, what: str, fix: str) -> ParameterError:
    return ParameterError(
        f"parameter `{name}` must name {what} or be empty, but got {describe(value)}, "
        f"which is not a file (relative paths start in the notebook's folder, {Path.cwd()}). "
        f"Fix: {fix}."
    )


def require_existing_file_or_empty(name: str, value: Any) -> str:
    """A string naming an existing file (relative paths start in ``notebooks/``), or ``""``."""
    text = require_str(name, value)
    if text and not Path(text).expanduser().is_file():
        fix = f'pass an absolute path, e.g. papermill -p {name} /path/to/steps.csv, or "" for the bundled example'
        raise _not_a_file(name, value, "an existing file", fix)
    return text


def require_trace_path(name: str, value: Any) -> str:
    """``""`` (use the synthetic workload) or a readable trace CSV (:func:`budgetlab.workload.load_trace`
    formats) with at least two requests arriving at different instants."""
    text = require_str(name, value)
    if not text.strip():
        return ""
    fix = (
        f"pass an absolute path, e.g. papermill -p {name} /data/splitwise_conv.csv (columns "
        "arrived_at, num_prefill_tokens, num_decode_tokens, or Azure's TIMESTAMP, ContextTokens, "
        'GeneratedTokens), or "" for the synthetic workload'
    )
    path = Path(text).expanduser()
    if not path.is_file():
        raise _not_a_file(name, value, "an existing trace CSV", fix)
    try:
        TraceWorkload.from_requests(load_trace(path))
    except (TraceFormatError, ParameterError) as exc:
        raise ParameterError(
            f"parameter `{name}` must name a trace budgetlab can replay, but {text!r} is not one: {exc}. Fix: {fix}."
        ) from None
    return text


# --------------------------------------------------------------------------------------------
# Catalog slugs
# --------------------------------------------------------------------------------------------


def require_hardware(name: str, value: Any) -> HardwareSpec:
    """A hardware slug in the catalog; returns its :class:`~budgetlab.specs.HardwareSpec`."""
    return _lookup(name, value, catalog.resolve_hardware, catalog.list_hardware(), "list_hardware")


def require_model(name: str, value: Any) -> ModelSpec:
    """A model slug in the catalog; returns its :class:`~budgetlab.specs.ModelSpec`."""
    return _lookup(name, value, catalog.resolve_model, catalog.list_models(), "list_models")


def require_model_list(name: str, value: Any, *, max_length: int = 8) -> list[str]:
    """A non-empty list of catalog model slugs, each once, in the order given; returns the slugs."""
    if not _is_list(value) or not 0 < len(value) <= max_length:
        expected = f"a non-empty list of at most {max_length} model slugs from budgetlab's catalog"
        raise parameter_error(name, value, expected, how_to_pass(name, ["qwen3-32b", "gpt-oss-20b"]))
    slugs = [require_model(f"{name}[{i}]", item).slug for i, item in enumerate(value)]
    if len(set(slugs)) != len(slugs):
        raise parameter_error(name, value, "a list of distinct model slugs", "list each model once")
    return slugs


def _lookup(name: str, value: Any, resolve: Callable[..., Spec], known: list[str], lister_name: str) -> Spec:
    """``resolve(value, name=name)`` for a slug, or the error listing the catalog's slugs."""
    expected = f"a {name} slug from budgetlab's catalog"
    listing = f"budgetlab.catalog.{lister_name}() lists them all: {', '.join(known)}"
    if not isinstance(value, str) or not value.strip():
        raise parameter_error(name, value, expected, f"{how_to_pass(name)}; {listing}")
    try:
        return resolve(value, name=name)
    except UnknownNameError:
        key = value.strip().lower()
        close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)  # most similar first
        close += [slug for slug in known if key in slug and slug not in close]
        guess = f"; did you mean {' or '.join(close[:3])}?" if close else "."
        raise ParameterError(
            f"parameter `{name}` must be {expected}, but got {describe(value)}{guess} "
            f"Fix: {how_to_pass(name, close[0] if close else None)}; {listing}."
        ) from None
