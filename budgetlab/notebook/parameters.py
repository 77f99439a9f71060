"""Validate a notebook's parameters, so a bad ``-p`` stops it early with one clear message.

Every budgetlab notebook calls :func:`validate_parameters` right after its ``parameters`` cell::

    params = validate_parameters(hardware=hardware, model=model, budget_tokens=budget_tokens,
                                 num_decodes=num_decodes, prompt_tokens=prompt_tokens,
                                 results_path=results_path)

Each parameter is checked by the rule registered for its name in :data:`RULES` (the same name
means the same check in every notebook; the checkers are in :mod:`budgetlab.notebook.checkers`),
then the combinations are checked (a budget must leave room for the decodes, a step-time target
must not be below the weight read). The first problem raises
:class:`~budgetlab.errors.ParameterError` whose one-paragraph message names the parameter, the
value received, what is expected and how to fix it; in Jupyter and in a papermill report it
shows as that message alone, not as a traceback.

This module only validates: the objects the parameters describe (an SLO, a sweep workload) are
built by :mod:`budgetlab.notebook.scenario`.
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from budgetlab import _checks as limits
from budgetlab import catalog
from budgetlab.cost.named import make_cost
from budgetlab.cost.roofline import IdealCost, shortest_step_s
from budgetlab.errors import ParameterError
from budgetlab.notebook.checkers import (
    describe,
    require_bool,
    require_choice,
    require_existing_file_or_empty,
    require_factor_list,
    require_fraction,
    require_hardware,
    require_int,
    require_int_list,
    require_model,
    require_number,
    require_str,
    require_trace_path,
    yaml_literal,
)
from budgetlab.notebook.scenario import (
    COST_MODELS,
    CUSTOM_MAX_OUTPUT_TOKENS,
    CUSTOM_MAX_PROMPT_TOKENS,
    CUSTOM_SHAPE,
    MESSAGE_MAX_TOKENS,
    SCENARIO_DEFAULTS,
    WORKLOADS,
)
from budgetlab.specs import HardwareSpec, ModelSpec
from budgetlab.text import md_cell
from budgetlab.workload import CONVERSATION_OUTPUT, CONVERSATION_PROMPT, DEFAULT_MAX_MODEL_LEN_TOKENS

__all__ = ["RULES", "Rule", "Parameters", "undeclared_injected_names", "validate_parameters"]

Rule = Callable[[str, Any], Any]


def _longest_conversation_tokens() -> int:
    """The longest request a conversation-like workload can draw [tokens]: a KV pool must hold it
    (the presets are clipped at their trace's longest prompt and output)."""
    prompt, output = CONVERSATION_PROMPT.max_tokens, CONVERSATION_OUTPUT.max_tokens
    if prompt is None or output is None:
        raise AssertionError("the conversation-like preset lengths have no longest value")
    return int(prompt + output)


_MIN_SMALL_KV_TOKENS = _longest_conversation_tokens()

#: The check for each parameter name shared by budgetlab notebooks, grouped by the notebooks
#: that use it; a checker takes ``(name, value)`` and returns the cleaned value or raises
#: ParameterError. Every name in :data:`~budgetlab.notebook.scenario.SCENARIO_DEFAULTS` has one.
RULES: Mapping[str, Rule] = MappingProxyType(
    {
        # 01-04: the one-step scenario
        "hardware": require_hardware,
        "model": require_model,
        "budget_tokens": lambda n, v: require_int(n, v, minimum=1, unit="tokens"),
        "budgets": lambda n, v: require_int_list(n, v, minimum=1, unit="tokens"),
        "small_budget_tokens": lambda n, v: require_int(n, v, minimum=1, unit="tokens"),
        "big_budget_tokens": lambda n, v: require_int(n, v, minimum=1, unit="tokens"),
        "num_decodes": lambda n, v: require_int(n, v, minimum=0, unit="requests"),
        "decoder_counts": lambda n, v: require_int_list(n, v, minimum=0, unit="requests"),
        "prompt_tokens": lambda n, v: require_int(n, v, minimum=1, maximum=limits.MAX_TOKENS.value, unit="tokens"),
        "token_marks": lambda n, v: require_int_list(n, v, minimum=1, unit="tokens"),
        "max_tokens": lambda n, v: require_int(n, v, minimum=2, unit="tokens"),
        "zoom_tokens": lambda n, v: require_int(n, v, minimum=2, unit="tokens"),
        "flat_within_fraction": lambda n, v: require_number(n, v, above=0),
        "target_step_ms": lambda n, v: require_number(n, v, above=0, unit="ms"),
        # 01: GEMM tiles, tensor parallelism, mixture of experts
        "tile_tokens": lambda n, v: require_int(n, v, minimum=1, unit="tokens"),
        "tile_zoom_tokens": lambda n, v: require_int(n, v, minimum=2, unit="tokens"),
        "tp_model": lambda n, v: require_model(n, v).slug,
        "tp_degrees": lambda n, v: require_int_list(n, v, minimum=1, unit="GPUs", max_length=8),
        "moe_model": lambda n, v: require_model(n, v).slug,
        "moe_tp": lambda n, v: require_int(n, v, minimum=1, unit="GPUs"),
        "moe_token_marks": lambda n, v: require_int_list(n, v, minimum=1, unit="tokens", max_length=16),
        # 03, 04: the calibrated curve
        "decode_context_tokens": lambda n, v: require_int(n, v, minimum=0, unit="tokens"),
        # 05: max_num_seqs and KV memory on a simulated workload
        "max_num_seqs": lambda n, v: require_int(n, v, minimum=1, unit="requests"),
        "low_max_num_seqs": lambda n, v: require_int(n, v, minimum=1, unit="requests"),
        "small_kv_tokens": lambda n, v: require_int(n, v, minimum=_MIN_SMALL_KV_TOKENS, unit="tokens"),
        "long_prefill_token_threshold": lambda n, v: require_int(n, v, minimum=0, unit="tokens"),
        "num_requests": lambda n, v: require_int(n, v, minimum=1, maximum=limits.MAX_REQUESTS.value, unit="requests"),
        "rate_per_s": lambda n, v: require_number(n, v, above=0, unit="requests per second"),
        "seed": lambda n, v: require_int(n, v, minimum=0),
        "gpu_memory_utilization": lambda n, v: require_fraction(n, v),
        # 06: calibration
        "measurements_path": require_existing_file_or_empty,
        "measured_hardware": lambda n, v: require_hardware(n, v).slug,
        "measured_model": lambda n, v: require_model(n, v).slug,
        "measured_attention": require_bool,
        "holdout_fraction": lambda n, v: require_fraction(n, v, allow_zero=True, allow_one=False),
        # 07, 08: load sweeps, capacity and the tuner
        "cost_model": lambda n, v: require_choice(n, v, COST_MODELS),
        "trace_path": require_trace_path,
        "workload": lambda n, v: require_choice(n, v, WORKLOADS),
        "prompt_median_tokens": lambda n, v: require_number(
            n, v, minimum=1, maximum=CUSTOM_MAX_PROMPT_TOKENS, unit="tokens"
        ),
        "prompt_sigma": lambda n, v: require_number(n, v, minimum=0, maximum=3),
        "output_median_tokens": lambda n, v: require_number(
            n, v, minimum=1, maximum=CUSTOM_MAX_OUTPUT_TOKENS, unit="tokens"
        ),
        "output_sigma": lambda n, v: require_number(n, v, minimum=0, maximum=3),
        "num_requests_per_load": lambda n, v: require_int(n, v, minimum=20, maximum=20_000, unit="requests"),
        "sweep_budgets": lambda n, v: require_int_list(n, v, minimum=1, unit="tokens", max_length=8),
        "num_loads": lambda n, v: require_int(n, v, minimum=2, maximum=16, unit="loads"),
        "max_load_fraction": lambda n, v: require_number(n, v, above=0, maximum=3),
        "ttft_p90_ms": lambda n, v: require_number(n, v, above=0, unit="ms"),
        "itl_p99_ms": lambda n, v: require_number(n, v, above=0, unit="ms"),
        "capacity_tolerance_fraction": lambda n, v: require_number(
            n, v, minimum=limits.MIN_TOLERANCE_FRACTION, maximum=0.5
        ),
        "frontier_rate_per_s": lambda n, v: require_number(n, v, minimum=0, unit="requests per second"),
        "budget_factors": require_factor_list,
        "cap_factors": require_factor_list,
        # 09: prefix caching and async scheduling on multi-turn conversations
        "num_conversations": lambda n, v: require_int(n, v, minimum=1, maximum=5000, unit="conversations"),
        "caching_budgets": lambda n, v: require_int_list(n, v, minimum=1, unit="tokens", max_length=8),
        "conversation_rate_per_s": lambda n, v: require_number(n, v, above=0, unit="conversations per second"),
        "max_turns": lambda n, v: require_int(n, v, minimum=1, maximum=64, unit="turns"),
        "message_median_tokens": lambda n, v: require_number(
            n, v, minimum=1, maximum=MESSAGE_MAX_TOKENS, unit="tokens"
        ),
        "think_time_s": lambda n, v: require_number(n, v, above=0, unit="s"),
        "slot_bound_max_num_seqs": lambda n, v: require_int(n, v, minimum=1, unit="requests"),
        "pressure_kv_tokens": lambda n, v: require_int_list(
            n, v, minimum=DEFAULT_MAX_MODEL_LEN_TOKENS, unit="tokens", max_length=8
        ),
        # every notebook
        "results_path": require_str,
    }
)


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
            raise AttributeError(f"no parameter {name!r} was validated; validated: {', '.join(values)}") from None

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    @property
    def target_step_s(self) -> float:
        """``target_step_ms`` in seconds [s]."""
        return float(self.values["target_step_ms"]) / 1e3

    def _repr_markdown_(self) -> str:
        """The parameters table every notebook shows; each name and value is text, never HTML
        or a link (:func:`~budgetlab.text.md_cell`), whatever a path parameter holds."""
        lines = ["| parameter | value |", "|---|---|"]
        for name, value in self.values.items():
            if name == "results_path":  # where the renderer saves numbers, not a model input
                continue
            shown = yaml_literal(value)
            if name == "hardware" and self.hardware_spec is not None:
                shown += f" ({self.hardware_spec.name})"
            if name == "model" and self.model_spec is not None:
                shown += f" ({self.model_spec.name})"
            label = f"`{name}`" if name.isidentifier() else md_cell(name)  # an identifier is inert
            lines.append(f"| {label} | {md_cell(shown)} |")
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

    Notes
    -----
    Under plain papermill a typo (``papermill ... -p budget_token 5``) only adds a line to the
    cell papermill injects after the parameters cell, and the notebook would run with the
    default. So, in IPython, the latest cell papermill injected (it starts with
    ``# Parameters``) is read back from the input history: a name it sets that is neither
    passed here nor set by the cell run before it (the parameters cell) raises ParameterError
    naming the closest parameter (:func:`undeclared_injected_names`).
    """
    _check_injected_names(set(params))
    table = {**RULES, **(rules or {})}
    unknown = [name for name in params if name not in table]
    if unknown:
        raise TypeError(
            f"no validation rule for parameter(s) {', '.join(unknown)}; pass rules={{...}} "
            "or add them to budgetlab.notebook.parameters.RULES"
        )
    values: dict[str, Any] = {}
    specs: dict[str, Any] = {}
    for name, value in params.items():
        cleaned = table[name](name, value)
        if name in ("hardware", "model"):
            specs[name] = cleaned
            cleaned = cleaned.slug
        values[name] = cleaned
    hardware, model = specs.get("hardware"), specs.get("model")
    for check in _COMBINATION_CHECKS:
        check(values, hardware, model)
    return Parameters(values, hardware, model)


# --------------------------------------------------------------------------------------------
# Names papermill injected that the notebook does not declare (a typo under plain papermill)
# --------------------------------------------------------------------------------------------

#: The first line of the cell papermill injects after the parameters cell (Python kernels).
PAPERMILL_INJECTED_HEADER = "# Parameters"


def _assigned_names(source: str) -> set[str]:
    """Names a cell's top-level statements assign (``x = 1``, ``x: int = 1``); none if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def undeclared_injected_names(history: Sequence[str], declared: Iterable[str]) -> dict[str, str | None]:
    """Names the latest papermill-injected cell in ``history`` sets that the notebook does not declare.

    Parameters
    ----------
    history : sequence of str
        The kernel's cell inputs, oldest first (IPython's ``In``), ending with the running cell.
    declared : iterable of str
        The parameters the notebook validates; the names set by the cell run just before the
        injected one (the parameters cell) count as declared too.

    Returns
    -------
    dict
        Each undeclared name → the closest declared name (:func:`difflib.get_close_matches`),
        or ``None`` when none is close; empty when nothing was injected or all is declared.
    """
    cells = list(history)
    for i in range(len(cells) - 2, -1, -1):  # the last entry is the running cell
        source = cells[i] or ""
        if source.lstrip().startswith(PAPERMILL_INJECTED_HEADER):
            known = set(declared) | (_assigned_names(cells[i - 1]) if i > 0 else set())
            stray = sorted(_assigned_names(source) - known)
            return {name: next(iter(difflib.get_close_matches(name, sorted(known), n=1)), None) for name in stray}
    return {}


def _check_injected_names(declared: set[str]) -> None:
    """Raise when papermill injected a parameter this notebook does not declare (see :func:`validate_parameters`)."""
    try:
        from IPython import get_ipython
    except ImportError:  # not in IPython: nothing was injected
        return
    shell = get_ipython()
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    if not history:
        return
    # a scenario file (papermill -f) holds every notebook's parameters: a name another budgetlab
    # notebook takes is no typo here, only one that no notebook takes is
    stray = {
        name: close
        for name, close in undeclared_injected_names(history, declared).items()
        if name not in RULES and name not in SCENARIO_DEFAULTS
    }
    if not stray:
        return
    name, close = next(iter(stray.items()))
    others = f" (and {', '.join(list(stray)[1:])})" if len(stray) > 1 else ""
    guess = f"did you mean `{close}`? " if close else ""
    listed = ", ".join(sorted(declared - {"results_path"})) or "none"
    fix = (
        f"rename it `{close}` (papermill -p {close} VALUE)"
        if close
        else "drop it, or pass one of the parameters listed (papermill -p NAME VALUE)"
    )
    raise ParameterError(
        f"parameter `{name}`{others} was passed to this notebook, which has no such parameter, so the "
        f"value would be ignored; {guess}its parameters are: {listed}. Fix: {fix}."
    )


# --------------------------------------------------------------------------------------------
# Combinations: each check reads the parameters it needs and skips when one is absent
# --------------------------------------------------------------------------------------------

Combination = Callable[[Mapping[str, Any], HardwareSpec | None, ModelSpec | None], None]


def _must(name: str, requirement: str, value: Any, fix: str, *, detail: str = "") -> ParameterError:
    """``parameter `name` must REQUIREMENT, but got VALUE[DETAIL]. Fix: FIX.``"""
    return ParameterError(f"parameter `{name}` must {requirement}, but got {describe(value)}{detail}. Fix: {fix}.")


def _check_budgets_leave_room(
    values: Mapping[str, Any], hardware: HardwareSpec | None, model: ModelSpec | None
) -> None:
    """Every budget exceeds the decoders' tokens; the small budget is below the big one."""
    num_decodes = values.get("num_decodes")
    if num_decodes is not None:
        for name in ("budget_tokens", "small_budget_tokens", "big_budget_tokens"):
            if name in values and values[name] <= num_decodes:
                raise _must(
                    name,
                    f"be larger than num_decodes ({num_decodes}): each of the {num_decodes} decoding "
                    f"requests takes one token of every step, so a budget of {values[name]} tokens "
                    "leaves nothing for the prompt (vLLM also requires max_num_batched_tokens >= "
                    "max_num_seqs)",
                    values[name],
                    f"raise {name} above {num_decodes} (e.g. -p {name} "
                    f"{max(SCENARIO_DEFAULTS.get(name, 0), 2 * num_decodes)}) or lower num_decodes",
                )
        if "budgets" in values and min(values["budgets"]) <= num_decodes:
            too_small = [b for b in values["budgets"] if b <= num_decodes]
            kept = [b for b in values["budgets"] if b > num_decodes] or [2 * num_decodes + 1]
            raise _must(
                "budgets",
                f"hold only budgets larger than num_decodes ({num_decodes}), since each decoding "
                "request takes one token of every step",
                values["budgets"],
                f'drop them or lower num_decodes, e.g. papermill -y "budgets: {yaml_literal(kept)}"',
                detail=f" with {too_small} too small",
            )
    small, big = values.get("small_budget_tokens"), values.get("big_budget_tokens")
    if small is not None and big is not None and small >= big:
        raise _must(
            "small_budget_tokens",
            f"be below big_budget_tokens ({big})",
            small,
            "swap them or pick e.g. -p small_budget_tokens 512 -p big_budget_tokens 8192",
        )
    budget = values.get("budget_tokens")
    if budget is not None and "decoder_counts" in values and max(values["decoder_counts"]) >= budget:
        raise _must(
            "decoder_counts",
            f"hold counts below budget_tokens ({budget}): with that many decoders the decodes alone fill the budget",
            values["decoder_counts"],
            f"use counts below {budget}, e.g. papermill -y "
            f'"decoder_counts: {yaml_literal(SCENARIO_DEFAULTS["decoder_counts"])}"',
        )


def _check_step_target_above_weight_read(
    values: Mapping[str, Any], hardware: HardwareSpec | None, model: ModelSpec | None
) -> None:
    """``target_step_ms`` exceeds the time to read the weights once (no step is shorter)."""
    if "target_step_ms" not in values or hardware is None or model is None:
        return
    weight_read_ms = IdealCost(hardware, model).weight_read_s * 1e3
    if values["target_step_ms"] <= weight_read_ms:
        raise _must(
            "target_step_ms",
            f"exceed the weight read of {model.name} on {hardware.name} ({weight_read_ms:.2f} ms): "
            "every step reads all weights once, so no budget meets a shorter target",
            values["target_step_ms"],
            f"raise it, e.g. -p target_step_ms {math.ceil(weight_read_ms * 2)}, or pick faster hardware",
        )


def _check_tile_chart_shows_a_tile(
    values: Mapping[str, Any], hardware: HardwareSpec | None, model: ModelSpec | None
) -> None:
    """The tile chart reaches past one tile: ``tile_zoom_tokens > tile_tokens``."""
    tile, zoom = values.get("tile_tokens"), values.get("tile_zoom_tokens")
    if tile is not None and zoom is not None and zoom <= tile:
        raise _must(
            "tile_zoom_tokens",
            f"be larger than tile_tokens ({tile}) so the chart shows at least one tile boundary",
            zoom,
            f"pass e.g. -p tile_zoom_tokens {max(8 * tile, SCENARIO_DEFAULTS['tile_zoom_tokens'])}",
        )


def _check_example_measurements_described(
    values: Mapping[str, Any], hardware: HardwareSpec | None, model: ModelSpec | None
) -> None:
    """With no table of one's own, the measured hardware and model are the bundled example's."""
    if values.get("measurements_path") != "":
        return
    for name in ("measured_hardware", "measured_model", "measured_attention"):
        if name in values and values[name] != SCENARIO_DEFAULTS[name]:
            raise _must(
                name,
                f"be {yaml_literal(SCENARIO_DEFAULTS[name])} while measurements_path is empty: the "
                "bundled example table was measured on an H100 SXM with Llama 2 7B, linear layers only",
                values[name],
                "point measurements_path at your own table (-p measurements_path /path/to/steps.csv) "
                f"or leave {name} at its default",
            )


def _check_caps_fit_budgets(values: Mapping[str, Any], hardware: HardwareSpec | None, model: ModelSpec | None) -> None:
    """vLLM's rule max_num_batched_tokens >= max_num_seqs, and the low caps below the baseline."""
    budget = values.get("budget_tokens")
    for name in ("max_num_seqs", "low_max_num_seqs", "slot_bound_max_num_seqs"):
        seqs = values.get(name)
        if budget is not None and seqs is not None and seqs > budget:
            raise _must(
                name,
                f"not exceed budget_tokens ({budget}): every running request takes one token of each "
                "step, so vLLM refuses max_num_batched_tokens < max_num_seqs",
                seqs,
                f"lower {name} (e.g. -p {name} {SCENARIO_DEFAULTS[name]}) or raise budget_tokens",
            )
    budgets, high = values.get("budgets"), values.get("max_num_seqs")
    if budgets is not None and high is not None and max(budgets) < high:
        raise _must(
            "budgets",
            f"hold at least one budget >= max_num_seqs ({high}), since vLLM refuses smaller ones",
            budgets,
            f'e.g. papermill -y "budgets: {yaml_literal(SCENARIO_DEFAULTS["budgets"])}"',
        )
    for name in ("low_max_num_seqs", "slot_bound_max_num_seqs"):
        low = values.get(name)
        if high is not None and low is not None and low >= high:
            raise _must(
                name,
                f"be below max_num_seqs ({high}): it is the cap set too low, compared against the baseline",
                low,
                f"pass e.g. -p {name} {SCENARIO_DEFAULTS[name]}",
            )


def _check_parallel_models(values: Mapping[str, Any], hardware: HardwareSpec | None, model: ModelSpec | None) -> None:
    """Tensor-parallel degrees divide the heads; the MoE model is a mixture of experts."""
    for model_name, tp_name in (("tp_model", "tp_degrees"), ("moe_model", "moe_tp")):
        if model_name not in values or tp_name not in values:
            continue
        spec = catalog.resolve_model(values[model_name], name=model_name)
        degrees = values[tp_name] if isinstance(values[tp_name], list) else [values[tp_name]]
        bad = [tp for tp in degrees if spec.num_attention_heads % tp]
        if bad:
            good = [d for d in (1, 2, 4, 8, 16) if spec.num_attention_heads % d == 0]
            raise _must(
                tp_name,
                f"divide the {spec.num_attention_heads} attention heads of {spec.name} ({model_name}), "
                "as vLLM requires",
                values[tp_name],
                f"use degrees from {good}",
                detail=f" with {bad} not dividing them",
            )
    if "moe_model" in values:
        spec = catalog.resolve_model(values["moe_model"], name="moe_model")
        if not spec.is_moe:
            moe = [slug for slug in catalog.list_models() if catalog.model(slug).is_moe]
            raise _must(
                "moe_model",
                "be a mixture-of-experts model",
                values["moe_model"],
                f"pass e.g. -p moe_model {moe[0] if moe else SCENARIO_DEFAULTS['moe_model']}",
                detail=f" ({spec.name} is dense)",
            )


def _check_custom_shape_only_when_custom(
    values: Mapping[str, Any], hardware: HardwareSpec | None, model: ModelSpec | None
) -> None:
    """Lengths of one's own only with ``workload: custom`` (a preset would ignore them)."""
    if "workload" not in values or values["workload"] == "custom":
        return
    changed = [n for n in CUSTOM_SHAPE if n in values and values[n] != SCENARIO_DEFAULTS[n]]
    if changed:
        one = len(changed) == 1
        raise _must(
            "workload",
            "be custom to use your own lengths",
            values["workload"],
            f"pass -p workload custom, or leave {', '.join(changed)} at {'its default' if one else 'their defaults'}",
            detail=f" while {', '.join(changed)} {'differs' if one else 'differ'} from the defaults "
            "(which describe the conversation-like preset)",
        )


def _check_sweep_budgets_fit_cap(
    values: Mapping[str, Any], hardware: HardwareSpec | None, model: ModelSpec | None
) -> None:
    """Every swept budget is at least the sequence cap (vLLM refuses smaller ones)."""
    cap = values.get("max_num_seqs")
    for name in ("sweep_budgets", "caching_budgets"):
        budgets = values.get(name)
        if budgets is not None and cap is not None and min(budgets) < cap:
            raise _must(
                name,
                f"hold only budgets >= max_num_seqs ({cap}): each running sequence takes a token of every "
                "step, so vLLM refuses smaller ones",
                budgets,
                f"drop {[b for b in budgets if b < cap]} or lower max_num_seqs",
            )


def _check_itl_above_shortest_step(
    values: Mapping[str, Any], hardware: HardwareSpec | None, model: ModelSpec | None
) -> None:
    """The ITL limit exceeds the shortest step the cost model can take (one decode token)."""
    itl_ms = values.get("itl_p99_ms")
    if itl_ms is None or hardware is None or model is None:
        return
    cost_name = values.get("cost_model", SCENARIO_DEFAULTS["cost_model"])
    floor_ms = shortest_step_s(make_cost(cost_name, hardware, model)) * 1e3
    if itl_ms <= floor_ms:
        raise _must(
            "itl_p99_ms",
            f"exceed the shortest possible step of {model.name} on {hardware.name} with the "
            f"{cost_name} cost model ({floor_ms:.2f} ms, one decode token): every token waits at "
            "least one step, so no budget meets a tighter limit",
            itl_ms,
            f"raise it, e.g. -p itl_p99_ms {math.ceil(floor_ms * 4)}, or pick faster hardware",
        )


#: The combination checks, in the order :func:`validate_parameters` runs them (the first
#: failure is reported).
_COMBINATION_CHECKS: tuple[Combination, ...] = (
    _check_budgets_leave_room,
    _check_step_target_above_weight_read,
    _check_tile_chart_shows_a_tile,
    _check_example_measurements_described,
    _check_caps_fit_budgets,
    _check_parallel_models,
    _check_custom_shape_only_when_custom,
    _check_sweep_budgets_fit_cap,
    _check_itl_above_shortest_step,
)
