"""Validate a notebook's parameters, so a bad ``-p`` stops it early with one clear message.

Papermill injects parameters without looking at their types: ``-p budgets true`` arrives as the
bool ``True``, ``-p prompt_tokens -5`` as ``-5``, ``-r budget_tokens 2048`` as the string
``"2048"``. Every budgetlab notebook therefore calls :func:`validate_parameters` right after
its ``parameters`` cell::

    params = validate_parameters(hardware=hardware, model=model, budget_tokens=budget_tokens,
                                 num_decodes=num_decodes, prompt_tokens=prompt_tokens,
                                 results_path=results_path)

Each parameter is checked by the rule registered for its name in :data:`RULES` (the same name
means the same check in every notebook), then the combinations are checked (a budget must
leave room for the decodes, a step-time target must not be below the weight read). The first
problem raises :class:`~budgetlab.errors.ParameterError` whose one-paragraph message names the
parameter, the value received, what is expected and how to fix it; in Jupyter and in a
papermill report it shows as that message alone, not as a traceback.

The per-field checkers (:func:`require_int`, :func:`require_number`, :func:`require_int_list`,
:func:`require_str`, :func:`require_hardware`, :func:`require_model`) are public so notebooks
with parameters of their own can register rules: ``validate_parameters(rules={...}, ...)``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

from budgetlab.errors import ParameterError, UnknownNameError
from budgetlab.specs import HardwareSpec, ModelSpec

__all__ = [
    "SEED_DEFAULTS",
    "RULES",
    "Parameters",
    "validate_parameters",
    "require_int",
    "require_number",
    "require_int_list",
    "require_str",
    "require_hardware",
    "require_model",
]

#: The seeds' scenario: the default value of every shared notebook parameter. Error messages
#: quote these as examples of a valid value.
SEED_DEFAULTS: dict[str, Any] = {
    "hardware": "h100-sxm",
    "model": "llama-3.1-8b",
    "budget_tokens": 2048,
    "budgets": [256, 512, 1024, 2048, 4096, 8192],
    "num_decodes": 100,
    "prompt_tokens": 5000,
    "target_step_ms": 40.0,
    "token_marks": [512, 2048, 8192],
    "max_tokens": 10_000,
    "zoom_tokens": 1000,
    "flat_within_fraction": 0.1,
    "decoder_counts": [60, 400],
    "small_budget_tokens": 512,
    "big_budget_tokens": 8192,
    "results_path": "",
}

_MAX_LIST_LENGTH = 64


# --------------------------------------------------------------------------------------------
# How to describe a value and how to say the fix
# --------------------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    """``-5 (int)``, ``True (bool)``, ``'2048' (str)``: the value and the type received."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _yaml_literal(value: Any) -> str:
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_literal(v) for v in value) + "]"
    return repr(value)


def _example(name: str, example: Any = None) -> str:
    """How to pass a good value with papermill: ``-p name value`` or, for a list, ``-y``."""
    if example is None:
        example = SEED_DEFAULTS.get(name)
    if example is None:
        return f"set `{name}` in the parameters cell"
    if isinstance(example, (list, tuple)):
        return f'pass a list, e.g. papermill -y "{name}: {_yaml_literal(example)}"'
    return f"pass e.g. papermill -p {name} {_yaml_literal(example)}"


def _fail(name: str, value: Any, expected: str, fix: str) -> ParameterError:
    return ParameterError(
        f"parameter `{name}` must be {expected}, but got {_describe(value)}. Fix: {fix}."
    )


def _bound_text(minimum: float | None, above: float | None) -> str:
    if above is not None:
        return f" > {above:g}"
    if minimum is not None:
        return f" >= {minimum:g}"
    return ""


def _kind(noun: str, unit: str, minimum: float | None, above: float | None) -> str:
    """``a whole number of tokens >= 1``; ``a finite number of ms > 0``."""
    of_unit = f" of {unit}" if unit else ""
    return f"{noun}{of_unit}{_bound_text(minimum, above)}"


# --------------------------------------------------------------------------------------------
# Per-field checkers
# --------------------------------------------------------------------------------------------


def _as_int(value: Any) -> int | None:
    """The value as an int when it is a whole number (2048, 2048.0, numpy ints), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real) and math.isfinite(float(value)) and float(value).is_integer():
        return int(value)
    return None


def require_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    above: int | None = None,
    unit: str = "",
    example: Any = None,
) -> int:
    """A whole number (``2048.0`` is accepted as ``2048``; bools and strings are not).

    Parameters
    ----------
    name : str
        Parameter name, quoted in the message.
    value : object
        What the notebook received.
    minimum, above : int, optional
        Inclusive lower bound, exclusive lower bound.
    unit : str
        Unit named in the message (``"tokens"``).
    example : object, optional
        A valid value for the fix; defaults to :data:`SEED_DEFAULTS`.

    Returns
    -------
    int

    Raises
    ------
    ParameterError
    """
    number = _as_int(value)
    expected = _kind("a whole number", unit, minimum, above)
    if number is None:
        if isinstance(value, str):
            fix = f"{_example(name, example)} (unquoted; `-r` passes text)"
        else:
            fix = _example(name, example)
        raise _fail(name, value, expected, fix)
    if (minimum is not None and number < minimum) or (above is not None and number <= above):
        raise _fail(name, value, expected, _example(name, example))
    return number


def require_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    above: float | None = None,
    unit: str = "",
    example: Any = None,
) -> float:
    """A finite real number (ints accepted; bools, strings and NaN are not).

    Parameters and errors as in :func:`require_int`; returns a float.
    """
    expected = _kind("a finite number", unit, minimum, above)
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise _fail(name, value, expected, _example(name, example))
    number = float(value)
    if (minimum is not None and number < minimum) or (above is not None and number <= above):
        raise _fail(name, value, expected, _example(name, example))
    return number


def require_int_list(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    above: int | None = None,
    unit: str = "",
    example: Any = None,
    max_length: int = _MAX_LIST_LENGTH,
) -> list[int]:
    """A non-empty list of whole numbers, returned sorted with duplicates dropped.

    Each entry is checked as by :func:`require_int`; a string (``-p budgets "[512, 2048]"``
    passes text) is refused with a hint to use papermill's ``-y``.

    Returns
    -------
    list of int
        Sorted, unique.
    """
    bound = _bound_text(minimum, above)
    expected = f"a non-empty list of whole numbers{f' of {unit}' if unit else ''}" + (
        f", each{bound}" if bound else ""
    )
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence) or not value:
        raise _fail(name, value, expected, _example(name, example))
    if len(value) > max_length:
        raise _fail(
            name, value, f"{expected} with at most {max_length} entries", _example(name, example)
        )
    numbers = []
    for item in value:
        number = _as_int(item)
        if number is None or (minimum is not None and number < minimum) or (
            above is not None and number <= above
        ):
            raise ParameterError(
                f"parameter `{name}` must be {expected}, but its entry {_describe(item)} is "
                f"not (got {_describe(value)}). Fix: {_example(name, example)}."
            )
        numbers.append(number)
    return sorted(set(numbers))


def require_str(name: str, value: Any, *, allow_empty: bool = True, example: Any = None) -> str:
    """A string (a bool or number is refused)."""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        expected = "a string" if allow_empty else "a non-empty string"
        raise _fail(name, value, expected, _example(name, example))
    return value


def require_hardware(name: str, value: Any) -> HardwareSpec:
    """A hardware slug in the catalog; returns its :class:`~budgetlab.specs.HardwareSpec`."""
    from budgetlab import catalog

    return _lookup(name, value, catalog.hardware, catalog.list_hardware, "list_hardware")


def require_model(name: str, value: Any) -> ModelSpec:
    """A model slug in the catalog; returns its :class:`~budgetlab.specs.ModelSpec`."""
    from budgetlab import catalog

    return _lookup(name, value, catalog.model, catalog.list_models, "list_models")


def _lookup(name: str, value: Any, find: Callable, lister: Callable, lister_name: str) -> Any:
    known = lister()
    expected = f"a {name} slug from budgetlab's catalog"
    listing = f"budgetlab.catalog.{lister_name}() lists them all: {', '.join(known)}"
    if not isinstance(value, str) or not value.strip():
        raise _fail(name, value, expected, f"{_example(name)}; {listing}")
    try:
        return find(value)
    except UnknownNameError:
        key = value.strip().lower()
        close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)  # most similar first
        close += [slug for slug in known if key in slug and slug not in close]
        guess = f"; did you mean {' or '.join(close[:3])}?" if close else "."
        raise ParameterError(
            f"parameter `{name}` must be {expected}, but got {_describe(value)}{guess} "
            f"Fix: {_example(name, close[0] if close else None)}; {listing}."
        ) from None


# --------------------------------------------------------------------------------------------
# The rules, by parameter name
# --------------------------------------------------------------------------------------------

Rule = Callable[[str, Any], Any]

#: The check for each parameter name shared by budgetlab notebooks; a checker takes
#: ``(name, value)`` and returns the cleaned value or raises ParameterError.
RULES: dict[str, Rule] = {
    "hardware": require_hardware,
    "model": require_model,
    "budget_tokens": lambda n, v: require_int(n, v, minimum=1, unit="tokens"),
    "budgets": lambda n, v: require_int_list(n, v, minimum=1, unit="tokens"),
    "small_budget_tokens": lambda n, v: require_int(n, v, minimum=1, unit="tokens"),
    "big_budget_tokens": lambda n, v: require_int(n, v, minimum=1, unit="tokens"),
    "num_decodes": lambda n, v: require_int(n, v, minimum=0, unit="requests"),
    "decoder_counts": lambda n, v: require_int_list(n, v, minimum=0, unit="requests"),
    "prompt_tokens": lambda n, v: require_int(n, v, minimum=1, unit="tokens"),
    "token_marks": lambda n, v: require_int_list(n, v, minimum=1, unit="tokens"),
    "max_tokens": lambda n, v: require_int(n, v, minimum=2, unit="tokens"),
    "zoom_tokens": lambda n, v: require_int(n, v, minimum=2, unit="tokens"),
    "flat_within_fraction": lambda n, v: require_number(n, v, above=0),
    "target_step_ms": lambda n, v: require_number(n, v, above=0, unit="ms"),
    "results_path": require_str,
}


@dataclass(frozen=True)
class Parameters:
    """A notebook's validated parameters.

    Read a cleaned value as an attribute (``params.budget_tokens`` is an ``int`` even when
    ``2048.0`` was passed; lists come back sorted). ``hardware`` and ``model`` stay slugs;
    their catalog rows are :attr:`hardware_spec` and :attr:`model_spec`.
    """

    values: Mapping[str, Any]
    hardware_spec: HardwareSpec | None = None
    model_spec: ModelSpec | None = None

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "values")
        try:
            return values[name]
        except KeyError:
            raise AttributeError(
                f"no parameter {name!r} was validated; validated: {', '.join(values)}"
            ) from None

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    @property
    def target_step_s(self) -> float:
        """``target_step_ms`` in seconds [s]."""
        return self.values["target_step_ms"] / 1e3

    def _repr_markdown_(self) -> str:
        lines = ["| parameter | value |", "|---|---|"]
        for name, value in self.values.items():
            shown = _yaml_literal(value)
            if name == "hardware" and self.hardware_spec is not None:
                shown += f" ({self.hardware_spec.name})"
            if name == "model" and self.model_spec is not None:
                shown += f" ({self.model_spec.name})"
            lines.append(f"| `{name}` | {shown} |")
        return "\n".join(lines)


def validate_parameters(*, rules: Mapping[str, Rule] | None = None, **params: Any) -> Parameters:
    """Check every parameter, then their combinations; return the cleaned values.

    Parameters
    ----------
    rules : mapping, optional
        Extra or overriding checkers by name (``{"max_num_seqs": lambda n, v:
        require_int(n, v, minimum=1)}``), for parameters :data:`RULES` does not know.
    **params
        The notebook's parameters by name, exactly as the parameters cell (and papermill)
        left them.

    Returns
    -------
    Parameters
        Cleaned values by name, plus the catalog specs of ``hardware`` and ``model``.

    Raises
    ------
    ParameterError
        At the first bad value or combination, naming the parameter, the value, what is
        expected and the fix.
    TypeError
        For a parameter name that has no rule (a notebook bug, not a user error).
    """
    table = {**RULES, **(rules or {})}
    unknown = [name for name in params if name not in table]
    if unknown:
        raise TypeError(
            f"no validation rule for parameter(s) {', '.join(unknown)}; pass rules={{...}} "
            "or add them to budgetlab.parameters.RULES"
        )
    values: dict[str, Any] = {}
    specs: dict[str, Any] = {}
    for name, value in params.items():
        cleaned = table[name](name, value)
        if name in ("hardware", "model"):
            specs[name] = cleaned
            cleaned = cleaned.slug
        values[name] = cleaned
    _check_combinations(values, specs.get("hardware"), specs.get("model"))
    return Parameters(values, specs.get("hardware"), specs.get("model"))


# --------------------------------------------------------------------------------------------
# Combinations
# --------------------------------------------------------------------------------------------


def _check_combinations(
    values: Mapping[str, Any], hardware: HardwareSpec | None, model: ModelSpec | None
) -> None:
    num_decodes = values.get("num_decodes")
    if num_decodes is not None:
        for name in ("budget_tokens", "small_budget_tokens", "big_budget_tokens"):
            if name in values and values[name] <= num_decodes:
                raise ParameterError(
                    f"parameter `{name}` must be larger than num_decodes ({num_decodes}): each "
                    f"of the {num_decodes} decoding requests takes one token of every step, so a "
                    f"budget of {values[name]} tokens leaves nothing for the prompt (vLLM also "
                    f"requires max_num_batched_tokens >= max_num_seqs), but got "
                    f"{_describe(values[name])}. Fix: raise {name} above {num_decodes} "
                    f"(e.g. -p {name} {max(SEED_DEFAULTS.get(name, 0), 2 * num_decodes)}) "
                    f"or lower num_decodes."
                )
        if "budgets" in values and min(values["budgets"]) <= num_decodes:
            too_small = [b for b in values["budgets"] if b <= num_decodes]
            raise ParameterError(
                f"parameter `budgets` must hold only budgets larger than num_decodes "
                f"({num_decodes}), since each decoding request takes one token of every step, "
                f"but got {_describe(values['budgets'])} with {too_small} too small. Fix: drop "
                f"them or lower num_decodes, e.g. papermill -y \"budgets: "
                f"{_yaml_literal([b for b in values['budgets'] if b > num_decodes] or [2 * num_decodes + 1])}\"."
            )
    small, big = values.get("small_budget_tokens"), values.get("big_budget_tokens")
    if small is not None and big is not None and small >= big:
        raise ParameterError(
            f"parameter `small_budget_tokens` must be below big_budget_tokens ({big}), but got "
            f"{_describe(small)}. Fix: swap them or pick e.g. -p small_budget_tokens 512 "
            "-p big_budget_tokens 8192."
        )
    budget = values.get("budget_tokens")
    if budget is not None and "decoder_counts" in values and max(values["decoder_counts"]) >= budget:
        raise ParameterError(
            f"parameter `decoder_counts` must hold counts below budget_tokens ({budget}): "
            f"with that many decoders the decodes alone fill the budget, but got "
            f"{_describe(values['decoder_counts'])}. Fix: use counts below {budget}, e.g. "
            f"papermill -y \"decoder_counts: {_yaml_literal(SEED_DEFAULTS['decoder_counts'])}\"."
        )
    if "target_step_ms" in values and hardware is not None and model is not None:
        from budgetlab.roofline import IdealCost

        weight_read_ms = IdealCost(hardware, model).weight_read_s * 1e3
        if values["target_step_ms"] <= weight_read_ms:
            raise ParameterError(
                f"parameter `target_step_ms` must exceed the weight read of {model.name} on "
                f"{hardware.name} ({weight_read_ms:.2f} ms): every step reads all weights "
                f"once, so no budget meets a shorter target, but got "
                f"{_describe(values['target_step_ms'])}. Fix: raise it, e.g. -p "
                f"target_step_ms {math.ceil(weight_read_ms * 2)}, or pick faster hardware."
            )
