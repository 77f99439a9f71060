"""Notebook parameter validation: one clear ParameterError per bad value, cleaned values back."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import numpy as np
import pytest
import yaml

from budgetlab.errors import ParameterError
from budgetlab.parameters import (
    RULES,
    SEED_DEFAULTS,
    Parameters,
    require_hardware,
    require_int,
    require_int_list,
    require_model,
    require_number,
    require_str,
    validate_parameters,
)

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
SCENARIOS = sorted((NOTEBOOKS / "params").glob("*.yaml"))


# --- per-field checkers ------------------------------------------------------------------------


@pytest.mark.parametrize("value", [2048, 2048.0, np.int64(2048), np.float64(2048.0)])
def test_require_int_accepts_whole_numbers(value):
    result = require_int("budget_tokens", value, minimum=1)
    assert result == 2048 and type(result) is int


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (True, "True (bool)"),
        ("2048", "'2048' (str)"),
        (2048.5, "2048.5 (float)"),
        (float("nan"), "nan (float)"),
        (None, "None (NoneType)"),
        ([2048], "[2048] (list)"),
    ],
)
def test_require_int_refuses_other_types(value, shown):
    with pytest.raises(ParameterError) as info:
        require_int("budget_tokens", value, minimum=1, unit="tokens")
    message = str(info.value)
    assert "parameter `budget_tokens`" in message
    assert shown in message
    assert "whole number of tokens >= 1" in message
    assert "Fix: pass e.g. papermill -p budget_tokens 2048" in message


def test_require_int_string_hint_mentions_raw_parameters():
    with pytest.raises(ParameterError, match="unquoted; `-r` passes text"):
        require_int("prompt_tokens", "5000", minimum=1)


@pytest.mark.parametrize(("kwargs", "value"), [({"minimum": 1}, 0), ({"minimum": 1}, -5), ({"above": 0}, 0)])
def test_require_int_bounds(kwargs, value):
    with pytest.raises(ParameterError, match=rf"but got {value} \(int\)"):
        require_int("prompt_tokens", value, **kwargs)


def test_require_number():
    assert require_number("target_step_ms", 40, above=0) == 40.0
    assert isinstance(require_number("target_step_ms", 40, above=0), float)
    for bad in (True, "40", float("inf"), float("nan"), 0, -1.5):
        with pytest.raises(ParameterError, match="parameter `target_step_ms` must be a finite number"):
            require_number("target_step_ms", bad, above=0, unit="ms")


def test_require_int_list_sorts_and_deduplicates():
    assert require_int_list("budgets", [2048, 512.0, np.int64(512)], minimum=1) == [512, 2048]
    assert require_int_list("budgets", (256,), minimum=1) == [256]


@pytest.mark.parametrize("value", [True, "[512, 2048]", 2048, [], {"a": 1}, None, [512, "x"], [512, 0], [512, 1.5]])
def test_require_int_list_refuses(value):
    with pytest.raises(ParameterError) as info:
        require_int_list("budgets", value, minimum=1, unit="tokens")
    message = str(info.value)
    assert message.startswith("parameter `budgets` must be a non-empty list of whole numbers of tokens")
    assert 'papermill -y "budgets: [256, 512, 1024, 2048, 4096, 8192]"' in message


def test_require_int_list_length_cap():
    with pytest.raises(ParameterError, match="at most 64 entries"):
        require_int_list("budgets", list(range(1, 100)), minimum=1)


def test_require_str():
    assert require_str("results_path", "") == ""
    with pytest.raises(ParameterError, match="must be a string"):
        require_str("results_path", None)
    with pytest.raises(ParameterError, match="non-empty string"):
        require_str("label", "  ", allow_empty=False)


def test_require_hardware_and_model(h100, llama8b):
    assert require_hardware("hardware", "H100-SXM") == h100
    assert require_model("model", " llama-3.1-8b ") == llama8b


def test_unknown_hardware_names_close_matches_and_the_list():
    with pytest.raises(ParameterError) as info:
        require_hardware("hardware", "h100")
    message = str(info.value)
    assert "parameter `hardware`" in message and "'h100' (str)" in message
    assert "did you mean h100-sxm or h100-pcie?" in message
    assert "papermill -p hardware h100-sxm" in message
    assert "budgetlab.catalog.list_hardware()" in message and "a100-80gb-sxm" in message


@pytest.mark.parametrize("value", [True, 3, "", None])
def test_hardware_of_wrong_type(value):
    with pytest.raises(ParameterError, match="parameter `hardware` must be a hardware slug"):
        require_hardware("hardware", value)


def test_unknown_model():
    with pytest.raises(ParameterError, match=r"parameter `model`.*'gpt-5' \(str\)\. Fix"):
        require_model("model", "gpt-5")


# --- validate_parameters -------------------------------------------------------------------------


def test_validate_parameters_returns_cleaned_values(h100, llama8b):
    params = validate_parameters(
        hardware="H100-SXM",
        model="llama-3.1-8b",
        budget_tokens=2048.0,
        budgets=[8192, 512.0],
        num_decodes=100,
        target_step_ms=40,
        results_path="",
    )
    assert isinstance(params, Parameters)
    assert params.hardware == "h100-sxm" and params.hardware_spec == h100
    assert params.model == "llama-3.1-8b" and params.model_spec == llama8b
    assert params.budget_tokens == 2048 and type(params.budget_tokens) is int
    assert params["budgets"] == [512, 8192]
    assert params.target_step_ms == 40.0 and params.target_step_s == pytest.approx(0.04)
    assert list(params) == ["hardware", "model", "budget_tokens", "budgets", "num_decodes", "target_step_ms", "results_path"]
    with pytest.raises(AttributeError, match="no parameter 'prompt_tokens' was validated"):
        params.prompt_tokens


def test_parameters_render_as_a_markdown_table():
    text = validate_parameters(hardware="h100-sxm", budgets=[512, 2048], results_path="")._repr_markdown_()
    assert "| `hardware` | h100-sxm (NVIDIA H100 SXM5 80GB) |" in text
    assert "| `budgets` | [512, 2048] |" in text
    assert '| `results_path` | "" |' in text


def test_seed_defaults_validate():
    params = validate_parameters(**SEED_DEFAULTS)
    assert params.values == {
        **SEED_DEFAULTS,
        "target_step_ms": 40.0,
    }


def test_every_default_has_a_rule():
    assert set(SEED_DEFAULTS) <= set(RULES)


def test_unknown_parameter_name_is_a_programming_error():
    with pytest.raises(TypeError, match="no validation rule for parameter\\(s\\) max_num_seqs"):
        validate_parameters(max_num_seqs=256)


def test_extra_rules():
    params = validate_parameters(
        rules={"max_num_seqs": lambda n, v: require_int(n, v, minimum=1, example=256)}, max_num_seqs=256.0
    )
    assert params.max_num_seqs == 256
    with pytest.raises(ParameterError, match="papermill -p max_num_seqs 256"):
        validate_parameters(rules={"max_num_seqs": lambda n, v: require_int(n, v, minimum=1, example=256)}, max_num_seqs=0)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"budget_tokens": 100, "num_decodes": 100}, "parameter `budget_tokens` must be larger than num_decodes (100)"),
        ({"small_budget_tokens": 64, "num_decodes": 100}, "parameter `small_budget_tokens` must be larger than num_decodes"),
        ({"budgets": [64, 512, 2048], "num_decodes": 100}, "with [64] too small"),
        ({"small_budget_tokens": 8192, "big_budget_tokens": 512}, "must be below big_budget_tokens (512)"),
        ({"decoder_counts": [60, 4000], "budget_tokens": 2048}, "must hold counts below budget_tokens (2048)"),
        (
            {"hardware": "h100-sxm", "model": "llama-3.1-8b", "target_step_ms": 3.0},
            "must exceed the weight read of Llama 3.1 8B on NVIDIA H100 SXM5 80GB (4.79 ms)",
        ),
    ],
)
def test_combinations(kwargs, fragment):
    with pytest.raises(ParameterError) as info:
        validate_parameters(**kwargs)
    assert fragment in str(info.value)
    assert "Fix:" in str(info.value)


def test_budget_leaving_room_is_fine():
    assert validate_parameters(budget_tokens=101, num_decodes=100).budget_tokens == 101


# --- how the error shows in IPython ------------------------------------------------------------


def test_parameter_error_renders_as_its_message_alone():
    error = ParameterError("parameter `budgets` must be a list, but got True (bool). Fix: ...")
    lines = error._render_traceback_()
    assert len(lines) == 1
    assert "ParameterError" in lines[0]
    assert lines[0].endswith("parameter `budgets` must be a list, but got True (bool). Fix: ...")


def test_parameter_error_is_a_value_error():
    with pytest.raises(ValueError):
        validate_parameters(prompt_tokens=-5)


# --- scenarios -------------------------------------------------------------------------------------


def _notebook_parameter_names() -> set[str]:
    names: set[str] = set()
    for path in NOTEBOOKS.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if "parameters" in cell.metadata.get("tags", []):
                for node in ast.parse(cell.source).body:
                    if isinstance(node, ast.AnnAssign):
                        names.add(node.target.id)
    return names


def test_scenarios_exist():
    names = {path.stem for path in SCENARIOS}
    assert {"h100-llama-3.1-8b", "h200-llama-3.1-8b", "a100-llama-3.1-8b"} <= names


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_is_a_valid_flat_mapping(path):
    text = path.read_text()
    assert text.startswith("#"), "a scenario starts with a comment describing it"
    values = yaml.safe_load(text)
    assert isinstance(values, dict) and values
    assert all(not isinstance(v, dict) for v in values.values()), "scenarios are flat"
    unknown = set(values) - _notebook_parameter_names()
    assert not unknown, f"{path.name} sets parameters no notebook has: {sorted(unknown)}"
    assert "results_path" not in values, "the renderer sets results_path"
    validate_parameters(**values)
    json.dumps(values)  # plain types only


def test_default_scenario_is_the_seeds():
    values = yaml.safe_load((NOTEBOOKS / "params" / "h100-llama-3.1-8b.yaml").read_text())
    for name, value in values.items():
        assert value == SEED_DEFAULTS[name], name
