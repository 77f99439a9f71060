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
:func:`require_str`, :func:`require_bool`, :func:`require_existing_file_or_empty`,
:func:`require_hardware`, :func:`require_model`) are public so notebooks with parameters of their
own can register rules: ``validate_parameters(rules={...}, ...)``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from budgetlab._checks import is_flag, is_int, is_number
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
    "require_bool",
    "require_existing_file_or_empty",
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
    # 01: GEMM tiles, tensor parallelism, mixture of experts
    "tile_tokens": 128,
    "tile_zoom_tokens": 1024,
    "tp_model": "llama-3.1-70b",
    "tp_degrees": [1, 2, 4, 8],
    "moe_model": "mixtral-8x7b",
    "moe_tp": 2,
    "moe_token_marks": [1, 2, 8, 64, 512, 4096],
    # 03, 04: the calibrated curve
    "decode_context_tokens": 1000,
    # 05: max_num_seqs and KV memory on a simulated workload
    "max_num_seqs": 256,
    "low_max_num_seqs": 4,
    "small_kv_tokens": 16000,
    "long_prefill_token_threshold": 512,
    "num_requests": 300,
    "rate_per_s": 4.0,
    "seed": 0,
    "gpu_memory_utilization": 0.9,
    # 06: calibration
    "measurements_path": "",
    "measured_hardware": "h100-sxm",
    "measured_model": "llama-2-7b",
    "measured_attention": False,
    "holdout_fraction": 0.25,
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


def _out_of_bounds(number: float, minimum: float | None, above: float | None) -> bool:
    """Below the inclusive ``minimum`` or at or below the exclusive ``above``."""
    return (minimum is not None and number < minimum) or (above is not None and number <= above)


def _as_int(value: Any) -> int | None:
    """The value as an int when it is a whole number (2048, 2048.0, numpy ints), else None."""
    if is_int(value):
        return int(value)
    if is_number(value) and math.isfinite(float(value)) and float(value).is_integer():
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
    if _out_of_bounds(number, minimum, above):
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
    if not is_number(value) or not math.isfinite(float(value)):
        raise _fail(name, value, expected, _example(name, example))
    number = float(value)
    if _out_of_bounds(number, minimum, above):
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
        if number is None or _out_of_bounds(number, minimum, above):
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


def require_bool(name: str, value: Any, *, example: Any = None) -> bool:
    """``True`` or ``False`` (numpy bools too); strings such as ``"false"`` and numbers are refused."""
    if is_flag(value):
        return bool(value)
    fix = _example(name, example)
    if isinstance(value, str):
        fix += " (unquoted; `-r` passes text)"
    raise _fail(name, value, "True or False", fix)


def require_existing_file_or_empty(name: str, value: Any) -> str:
    """A string naming an existing file (relative paths start in ``notebooks/``), or ``""``."""
    from pathlib import Path

    text = require_str(name, value)
    if text and not Path(text).expanduser().is_file():
        raise ParameterError(
            f"parameter `{name}` must name an existing file or be empty, but got {_describe(value)}, "
            f"which is not a file (relative paths start in the notebook's folder, {Path.cwd()}). "
            f'Fix: pass an absolute path, e.g. papermill -p {name} /path/to/steps.csv, or "" for '
            "the bundled example."
        )
    return text


def _min_small_kv_tokens() -> int:
    """The longest request a conversation-like workload can draw [tokens]: a KV pool must hold it."""
    from budgetlab.workload import CONVERSATION_OUTPUT, CONVERSATION_PROMPT

    return int(CONVERSATION_PROMPT.max_tokens + CONVERSATION_OUTPUT.max_tokens)


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
    "tile_tokens": lambda n, v: require_int(n, v, minimum=1, unit="tokens"),
    "tile_zoom_tokens": lambda n, v: require_int(n, v, minimum=2, unit="tokens"),
    "tp_model": lambda n, v: require_model(n, v).slug,
    "tp_degrees": lambda n, v: require_int_list(n, v, minimum=1, unit="GPUs", max_length=8),
    "moe_model": lambda n, v: require_model(n, v).slug,
    "moe_tp": lambda n, v: require_int(n, v, minimum=1, unit="GPUs"),
    "moe_token_marks": lambda n, v: require_int_list(n, v, minimum=1, unit="tokens", max_length=16),
    "decode_context_tokens": lambda n, v: require_int(n, v, minimum=0, unit="tokens"),
    "max_num_seqs": lambda n, v: require_int(n, v, minimum=1, unit="requests"),
    "low_max_num_seqs": lambda n, v: require_int(n, v, minimum=1, unit="requests"),
    "small_kv_tokens": lambda n, v: require_int(n, v, minimum=_min_small_kv_tokens(), unit="tokens"),
    "long_prefill_token_threshold": lambda n, v: require_int(n, v, minimum=0, unit="tokens"),
    "num_requests": lambda n, v: require_int(n, v, minimum=1, unit="requests"),
    "rate_per_s": lambda n, v: require_number(n, v, above=0, unit="requests per second"),
    "seed": lambda n, v: require_int(n, v, minimum=0),
    "gpu_memory_utilization": lambda n, v: _require_fraction(n, v),
    "measurements_path": require_existing_file_or_empty,
    "measured_hardware": lambda n, v: require_hardware(n, v).slug,
    "measured_model": lambda n, v: require_model(n, v).slug,
    "measured_attention": require_bool,
    "holdout_fraction": lambda n, v: _require_fraction(n, v, allow_zero=True, allow_one=False),
    "results_path": require_str,
}


def _require_fraction(name: str, value: Any, *, allow_zero: bool = False, allow_one: bool = True) -> float:
    """A number in (0, 1] by default; ``allow_zero``/``allow_one`` move the ends."""
    number = require_number(name, value, minimum=0.0)
    if (number == 0.0 and not allow_zero) or number > 1.0 or (number == 1.0 and not allow_one):
        low, high = ("[0" if allow_zero else "(0"), ("1]" if allow_one else "1)")
        raise _fail(name, value, f"a fraction in {low}, {high}", _example(name))
    return number


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
            if name == "results_path":  # where the renderer saves numbers, not a model input
                continue
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
    _check_engine_combinations(values)
    _check_model_combinations(values)
    _check_sweep_combinations(values, hardware, model)


def _check_engine_combinations(values: Mapping[str, Any]) -> None:
    """vLLM's rule max_num_batched_tokens >= max_num_seqs, a low cap below the baseline, a
    tile smaller than the tile chart, and the example table's own hardware and model."""
    tile, zoom = values.get("tile_tokens"), values.get("tile_zoom_tokens")
    if tile is not None and zoom is not None and zoom <= tile:
        raise ParameterError(
            f"parameter `tile_zoom_tokens` must be larger than tile_tokens ({tile}) so the chart "
            f"shows at least one tile boundary, but got {_describe(zoom)}. Fix: pass e.g. "
            f"-p tile_zoom_tokens {max(8 * tile, SEED_DEFAULTS['tile_zoom_tokens'])}."
        )
    if values.get("measurements_path") == "":
        for name in ("measured_hardware", "measured_model", "measured_attention"):
            if name in values and values[name] != SEED_DEFAULTS[name]:
                raise ParameterError(
                    f"parameter `{name}` must be {_yaml_literal(SEED_DEFAULTS[name])} while "
                    f"measurements_path is empty: the bundled example table was measured on an "
                    f"H100 SXM with Llama 2 7B, linear layers only, but got {_describe(values[name])}. "
                    f"Fix: point measurements_path at your own table (-p measurements_path "
                    f"/path/to/steps.csv) or leave {name} at its default."
                )
    budget = values.get("budget_tokens")
    for name in ("max_num_seqs", "low_max_num_seqs"):
        seqs = values.get(name)
        if budget is not None and seqs is not None and seqs > budget:
            raise ParameterError(
                f"parameter `{name}` must not exceed budget_tokens ({budget}): every running "
                f"request takes one token of each step, so vLLM refuses max_num_batched_tokens < "
                f"max_num_seqs, but got {_describe(seqs)}. Fix: lower {name} (e.g. -p {name} "
                f"{SEED_DEFAULTS[name]}) or raise budget_tokens."
            )
    budgets, high = values.get("budgets"), values.get("max_num_seqs")
    if budgets is not None and high is not None and max(budgets) < high:
        raise ParameterError(
            f"parameter `budgets` must hold at least one budget >= max_num_seqs ({high}), since "
            f"vLLM refuses smaller ones, but got {_describe(budgets)}. Fix: e.g. papermill -y "
            f"\"budgets: {_yaml_literal(SEED_DEFAULTS['budgets'])}\"."
        )
    high, low = values.get("max_num_seqs"), values.get("low_max_num_seqs")
    if high is not None and low is not None and low >= high:
        raise ParameterError(
            f"parameter `low_max_num_seqs` must be below max_num_seqs ({high}): it is the cap "
            f"set too low, compared against the baseline, but got {_describe(low)}. Fix: pass "
            f"e.g. -p low_max_num_seqs {SEED_DEFAULTS['low_max_num_seqs']}."
        )


def _check_model_combinations(values: Mapping[str, Any]) -> None:
    """Tensor-parallel degrees divide the heads; the MoE model is a mixture of experts."""
    from budgetlab import catalog

    checks = [("tp_model", "tp_degrees"), ("moe_model", "moe_tp")]
    for model_name, tp_name in checks:
        if model_name not in values or tp_name not in values:
            continue
        spec = catalog.model(values[model_name])
        degrees = values[tp_name] if isinstance(values[tp_name], list) else [values[tp_name]]
        bad = [tp for tp in degrees if spec.num_attention_heads % tp]
        if bad:
            good = [d for d in (1, 2, 4, 8, 16) if spec.num_attention_heads % d == 0]
            raise ParameterError(
                f"parameter `{tp_name}` must divide the {spec.num_attention_heads} attention heads "
                f"of {spec.name} ({model_name}), as vLLM requires, but got {_describe(values[tp_name])} "
                f"with {bad} not dividing them. Fix: use degrees from {good}."
            )
    if "moe_model" in values:
        spec = catalog.model(values["moe_model"])
        if not spec.is_moe:
            moe = [slug for slug in catalog.list_models() if catalog.model(slug).is_moe]
            raise ParameterError(
                f"parameter `moe_model` must be a mixture-of-experts model, but got "
                f"{_describe(values['moe_model'])} ({spec.name} is dense). Fix: pass e.g. "
                f"-p moe_model {moe[0] if moe else SEED_DEFAULTS['moe_model']}."
            )


# --------------------------------------------------------------------------------------------
# Load sweeps and the tuner (notebooks 07 and 08): rules, and the objects the parameters describe
# --------------------------------------------------------------------------------------------

__all__ += ["require_choice", "require_trace_path", "slo_from_parameters", "workload_from_parameters"]

#: Step-cost models a notebook can simulate with (see :func:`budgetlab.sweep.make_cost`).
COST_MODELS = ("ideal", "typical")

#: Synthetic workloads: the Splitwise conversation and code fits, or the medians and sigmas given.
WORKLOADS = ("conversation-like", "code-like", "custom")

#: Longest custom prompt and output a synthetic workload draws [tokens] (log-normal tails are
#: clipped there, like the presets' at their traces' longest requests).
CUSTOM_MAX_PROMPT_TOKENS = 32_768
CUSTOM_MAX_OUTPUT_TOKENS = 8_192

SEED_DEFAULTS.update(
    {
        # 07, 08: load sweeps, capacity and the tuner
        "cost_model": "ideal",
        "trace_path": "",
        "workload": "conversation-like",
        "prompt_median_tokens": 1020.0,
        "prompt_sigma": 0.7695,
        "output_median_tokens": 129.0,
        "output_sigma": 0.9285,
        "num_requests_per_load": 600,
        "sweep_budgets": [512, 2048, 8192],
        "num_loads": 5,
        "max_load_fraction": 1.1,
        "ttft_p90_ms": 800.0,
        "itl_p99_ms": 40.0,
        "capacity_tolerance_fraction": 0.05,
        "frontier_rate_per_s": 0.0,
        "budget_factors": [0.5, 0.75, 1.0, 1.125],
        "cap_factors": [0.25, 1.0, 1.5],
    }
)

_CUSTOM_SHAPE = ("prompt_median_tokens", "prompt_sigma", "output_median_tokens", "output_sigma")


def require_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """One of ``choices`` (case and surrounding blanks ignored); returns it in lower case."""
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    close = difflib.get_close_matches(str(value).strip().lower(), choices, n=1) if isinstance(value, str) else []
    guess = f"did you mean {close[0]}? " if close else ""
    raise _fail(
        name, value, f"one of {', '.join(choices)}", f"{guess}{_example(name, close[0] if close else None)}"
    )


def require_trace_path(name: str, value: Any) -> str:
    """``""`` (use the synthetic workload) or a readable trace CSV (:func:`budgetlab.workload.load_trace`
    formats) with at least two requests arriving at different instants."""
    from pathlib import Path

    from budgetlab.errors import TraceFormatError
    from budgetlab.sweep import TraceWorkload
    from budgetlab.workload import load_trace

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
        raise ParameterError(
            f"parameter `{name}` must name an existing trace CSV or be empty, but got {_describe(value)}, "
            f"which is not a file (relative paths start in the notebook's folder, {Path.cwd()}). Fix: {fix}."
        )
    try:
        TraceWorkload.from_requests(load_trace(path))
    except (TraceFormatError, ParameterError) as exc:
        raise ParameterError(
            f"parameter `{name}` must name a trace budgetlab can replay, but {text!r} is not one: {exc}. "
            f"Fix: {fix}."
        ) from None
    return text


def _require_number_at_most(name: str, value: Any, *, maximum: float, **bounds: Any) -> float:
    number = require_number(name, value, **bounds)
    return _at_most(name, value, number, noun="a finite number", maximum=maximum, shown=f"{maximum:g}", bounds=bounds)


def _require_int_at_most(name: str, value: Any, *, maximum: int, **bounds: Any) -> int:
    number = require_int(name, value, **bounds)
    return _at_most(name, value, number, noun="a whole number", maximum=maximum, shown=f"{maximum:,}", bounds=bounds)


def _at_most(
    name: str, value: Any, number: Any, *, noun: str, maximum: float, shown: str, bounds: Mapping[str, Any]
) -> Any:
    """``number`` if it is at most ``maximum``; else the error naming the lower bounds too."""
    if number > maximum:
        expected = _kind(noun, bounds.get("unit", ""), bounds.get("minimum"), bounds.get("above"))
        raise _fail(name, value, f"{expected} and <= {shown}", _example(name))
    return number


def _require_factor_list(name: str, value: Any) -> list[float]:
    """A non-empty list of at most 8 numbers in (0, 4], returned sorted without repeats."""
    expected = "a non-empty list of at most 8 numbers > 0 and <= 4 (multiples of the first guess)"
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence) or not 0 < len(value) <= 8:
        raise _fail(name, value, expected, _example(name))
    factors = []
    for item in value:
        if not is_number(item) or not (math.isfinite(float(item)) and 0 < item <= 4):
            raise ParameterError(
                f"parameter `{name}` must be {expected}, but its entry {_describe(item)} is not "
                f"(got {_describe(value)}). Fix: {_example(name)}."
            )
        factors.append(float(item))
    return sorted(set(factors))


RULES.update(
    {
        "cost_model": lambda n, v: require_choice(n, v, COST_MODELS),
        "trace_path": require_trace_path,
        "workload": lambda n, v: require_choice(n, v, WORKLOADS),
        "prompt_median_tokens": lambda n, v: _require_number_at_most(
            n, v, minimum=1, maximum=CUSTOM_MAX_PROMPT_TOKENS, unit="tokens"
        ),
        "prompt_sigma": lambda n, v: _require_number_at_most(n, v, minimum=0, maximum=3),
        "output_median_tokens": lambda n, v: _require_number_at_most(
            n, v, minimum=1, maximum=CUSTOM_MAX_OUTPUT_TOKENS, unit="tokens"
        ),
        "output_sigma": lambda n, v: _require_number_at_most(n, v, minimum=0, maximum=3),
        "num_requests_per_load": lambda n, v: _require_int_at_most(
            n, v, minimum=20, maximum=20_000, unit="requests"
        ),
        "sweep_budgets": lambda n, v: require_int_list(n, v, minimum=1, unit="tokens", max_length=8),
        "num_loads": lambda n, v: _require_int_at_most(n, v, minimum=2, maximum=16, unit="loads"),
        "max_load_fraction": lambda n, v: _require_number_at_most(n, v, above=0, maximum=3),
        "ttft_p90_ms": lambda n, v: require_number(n, v, above=0, unit="ms"),
        "itl_p99_ms": lambda n, v: require_number(n, v, above=0, unit="ms"),
        "capacity_tolerance_fraction": lambda n, v: _require_number_at_most(n, v, above=0, maximum=0.5),
        "frontier_rate_per_s": lambda n, v: require_number(n, v, minimum=0, unit="requests per second"),
        "budget_factors": _require_factor_list,
        "cap_factors": _require_factor_list,
    }
)


def _check_sweep_combinations(
    values: Mapping[str, Any], hardware: HardwareSpec | None, model: ModelSpec | None
) -> None:
    """A custom shape only with ``workload: custom``; every swept budget at least the cap; an ITL
    limit above the shortest possible step."""
    if "workload" in values and values["workload"] != "custom":
        changed = [n for n in _CUSTOM_SHAPE if n in values and values[n] != SEED_DEFAULTS[n]]
        if changed:
            raise ParameterError(
                f"parameter `workload` must be custom to use your own lengths, but got "
                f"{_describe(values['workload'])} while {', '.join(changed)} "
                f"{'differs' if len(changed) == 1 else 'differ'} from the defaults (which describe "
                f"the conversation-like preset). Fix: pass -p workload custom, or leave "
                f"{', '.join(changed)} at {'its default' if len(changed) == 1 else 'their defaults'}."
            )
    budgets, cap = values.get("sweep_budgets"), values.get("max_num_seqs")
    if budgets is not None and cap is not None and min(budgets) < cap:
        raise ParameterError(
            f"parameter `sweep_budgets` must hold only budgets >= max_num_seqs ({cap}): each running "
            f"sequence takes a token of every step, so vLLM refuses smaller ones, but got "
            f"{_describe(budgets)}. Fix: drop {[b for b in budgets if b < cap]} or lower max_num_seqs."
        )
    itl_ms = values.get("itl_p99_ms")
    if itl_ms is not None and hardware is not None and model is not None:
        from budgetlab.roofline import shortest_step_s
        from budgetlab.sweep import make_cost

        cost_name = values.get("cost_model", SEED_DEFAULTS["cost_model"])
        floor_ms = shortest_step_s(make_cost(cost_name, hardware, model)) * 1e3
        if itl_ms <= floor_ms:
            raise ParameterError(
                f"parameter `itl_p99_ms` must exceed the shortest possible step of {model.name} on "
                f"{hardware.name} with the {cost_name} cost model ({floor_ms:.2f} ms, one decode "
                f"token): every token waits at least one step, so no budget meets a tighter limit, "
                f"but got {_describe(itl_ms)}. Fix: raise it, e.g. -p itl_p99_ms "
                f"{math.ceil(floor_ms * 4)}, or pick faster hardware."
            )


def slo_from_parameters(params: Parameters) -> Any:
    """The :class:`~budgetlab.sweep.SLO` a notebook's limits describe.

    Every validated parameter named after an SLO metric in milliseconds (``ttft_p90_ms``,
    ``itl_p99_ms``, ...; see :data:`budgetlab.sweep.SLO_METRICS`) becomes that limit in seconds.

    Raises
    ------
    ParameterError
        When the notebook validated no such parameter.
    """
    from budgetlab.sweep import SLO, SLO_METRICS

    limits = {}
    for metric in SLO_METRICS:
        name = metric.removesuffix("_s") + "_ms"
        if name in params.values:
            limits[metric] = params.values[name] / 1e3
    if not limits:
        raise ParameterError(
            "no SLO limit among the validated parameters; validate e.g. ttft_p90_ms and itl_p99_ms"
        )
    return SLO(**limits)


def workload_from_parameters(params: Parameters) -> Any:
    """The sweep workload a notebook's parameters describe (see :mod:`budgetlab.sweep`).

    * ``trace_path`` set: that trace (:meth:`~budgetlab.sweep.TraceWorkload.from_csv`), its first
      ``num_requests_per_load`` requests, replayed at any load by time scaling.
    * Otherwise ``workload``: ``conversation-like`` or ``code-like``
      (:meth:`~budgetlab.sweep.SyntheticWorkload.conversation_like`, ``code_like``), or
      ``custom``: log-normal prompt and output lengths with the given medians and sigmas,
      clipped at :data:`CUSTOM_MAX_PROMPT_TOKENS` and :data:`CUSTOM_MAX_OUTPUT_TOKENS`; Poisson
      arrivals, ``num_requests_per_load`` requests per simulation.

    Its fixed-length twin (the same arrivals, every length at the mean) is
    ``workload.with_fixed_lengths(seed=params.seed)``; see
    :meth:`~budgetlab.sweep.SyntheticWorkload.with_fixed_lengths`.

    Parameters
    ----------
    params : Parameters
        Validated; reads ``trace_path``, ``workload``, the four shape parameters and
        ``num_requests_per_load`` where present.
    """
    from budgetlab.sweep import SyntheticWorkload, TraceWorkload
    from budgetlab.workload import LogNormal

    values = params.values
    num = values.get("num_requests_per_load", SEED_DEFAULTS["num_requests_per_load"])
    path = values.get("trace_path", "")
    kind = values.get("workload", SEED_DEFAULTS["workload"])
    if path:
        workload: Any = TraceWorkload.from_csv(path, max_requests=num)
    elif kind == "code-like":
        workload = SyntheticWorkload.code_like(num_requests=num)
    elif kind == "custom":
        shape = {name: values.get(name, SEED_DEFAULTS[name]) for name in _CUSTOM_SHAPE}
        prompt = LogNormal(
            median_tokens=shape["prompt_median_tokens"], sigma=shape["prompt_sigma"],
            max_tokens=CUSTOM_MAX_PROMPT_TOKENS,
        )
        output = LogNormal(
            median_tokens=shape["output_median_tokens"], sigma=shape["output_sigma"],
            max_tokens=CUSTOM_MAX_OUTPUT_TOKENS,
        )
        label = f"custom (prompt median {prompt.median_tokens:,.0f}, output median {output.median_tokens:,.0f})"
        workload = SyntheticWorkload(prompt=prompt, output=output, num_requests=num, label=label)
    else:
        workload = SyntheticWorkload.conversation_like(num_requests=num)
    return workload
