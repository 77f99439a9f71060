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
from budgetlab.notebook.checkers import (
    require_bool,
    require_existing_file_or_empty,
    require_hardware,
    require_int,
    require_int_list,
    require_model,
    require_number,
    require_str,
)
from budgetlab.notebook.parameters import RULES, Parameters, validate_parameters
from budgetlab.notebook.scenario import CUSTOM_SHAPE, SCENARIO_DEFAULTS

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


@pytest.mark.parametrize("value", [True, False, np.bool_(True)])
def test_require_bool_accepts_bools(value):
    assert require_bool("measured_attention", value) is bool(value)


@pytest.mark.parametrize(("value", "hint"), [("false", "unquoted"), (0, "measured_attention False"), (None, "False")])
def test_require_bool_refuses_other_types(value, hint):
    with pytest.raises(ParameterError) as info:
        require_bool("measured_attention", value)
    assert "must be True or False" in str(info.value) and hint in str(info.value)


def test_require_existing_file_or_empty(tmp_path):
    assert require_existing_file_or_empty("measurements_path", "") == ""
    table = tmp_path / "steps.csv"
    table.write_text("num_prefill_tokens,num_decode_tokens,step_time_ms\n1,0,5.6\n")
    assert require_existing_file_or_empty("measurements_path", str(table)) == str(table)
    with pytest.raises(ParameterError, match="must name an existing file or be empty"):
        require_existing_file_or_empty("measurements_path", str(tmp_path / "missing.csv"))


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
    assert list(params) == [
        "hardware",
        "model",
        "budget_tokens",
        "budgets",
        "num_decodes",
        "target_step_ms",
        "results_path",
    ]
    with pytest.raises(AttributeError, match="no parameter 'prompt_tokens' was validated"):
        _ = params.prompt_tokens


def test_parameters_render_as_a_markdown_table():
    text = validate_parameters(hardware="h100-sxm", budgets=[512, 2048], results_path="")._repr_markdown_()
    assert "| `hardware` | h100-sxm (NVIDIA H100 SXM5 80GB) |" in text
    assert "| `budgets` | \\[512, 2048\\] |" in text  # brackets escaped: text, never a link
    # where the renderer saves the numbers is not a model input: kept out of the report
    assert "results_path" not in text


def test_seed_defaults_validate():
    params = validate_parameters(**SCENARIO_DEFAULTS)
    assert params.values == {
        **SCENARIO_DEFAULTS,
        "target_step_ms": 40.0,
    }


def test_every_default_has_a_rule():
    assert set(SCENARIO_DEFAULTS) <= set(RULES)


def test_every_rule_has_a_default():
    # the fix of every message quotes a valid value: one for each shared parameter
    assert set(RULES) == set(SCENARIO_DEFAULTS)


def test_custom_shape_defaults_are_the_conversation_preset():
    from budgetlab.workload import CONVERSATION_OUTPUT, CONVERSATION_PROMPT

    shape = {name: SCENARIO_DEFAULTS[name] for name in CUSTOM_SHAPE}
    assert shape == {
        "prompt_median_tokens": 1020.0,
        "prompt_sigma": 0.7695,
        "output_median_tokens": 129.0,
        "output_sigma": 0.9285,
    }
    assert shape["prompt_median_tokens"] == CONVERSATION_PROMPT.median_tokens
    assert shape["output_sigma"] == CONVERSATION_OUTPUT.sigma


def test_tuner_factor_defaults_are_a_subset_of_the_tuners_grid():
    from budgetlab.experiments.tune import BUDGET_FACTORS, CAP_FACTORS

    assert set(SCENARIO_DEFAULTS["budget_factors"]) < set(BUDGET_FACTORS)
    assert set(SCENARIO_DEFAULTS["cap_factors"]) < set(CAP_FACTORS)
    assert len(SCENARIO_DEFAULTS["budget_factors"]) * len(SCENARIO_DEFAULTS["cap_factors"]) == 12


def test_defaults_and_rules_are_read_only():
    with pytest.raises(TypeError):
        SCENARIO_DEFAULTS["budget_tokens"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        RULES["budget_tokens"] = require_int  # type: ignore[index]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (17, "parameter `num_loads` must be a whole number of loads >= 2 and <= 16, but got 17 (int)"),
        (1, "parameter `num_loads` must be a whole number of loads >= 2 and <= 16, but got 1 (int)"),
        ("4", "but got '4' (str). Fix: pass e.g. papermill -p num_loads 5 (unquoted; `-r` passes text)."),
    ],
)
def test_require_int_states_both_bounds(value, message):
    with pytest.raises(ParameterError) as info:
        require_int("num_loads", value, minimum=2, maximum=16, unit="loads")
    assert message in str(info.value)
    assert require_int("num_loads", 16.0, minimum=2, maximum=16) == 16


def test_require_number_upper_bound_is_inclusive():
    assert require_number("prompt_sigma", 3, minimum=0, maximum=3) == 3.0
    with pytest.raises(ParameterError, match=r"a finite number >= 0 and <= 3, but got 3.01 \(float\)"):
        require_number("prompt_sigma", 3.01, minimum=0, maximum=3)


def test_unknown_parameter_name_is_a_programming_error():
    with pytest.raises(TypeError, match="no validation rule for parameter\\(s\\) max_num_widgets"):
        validate_parameters(max_num_widgets=256)


def test_extra_rules():
    params = validate_parameters(
        rules={"max_num_seqs": lambda n, v: require_int(n, v, minimum=1, example=256)}, max_num_seqs=256.0
    )
    assert params.max_num_seqs == 256
    with pytest.raises(ParameterError, match="papermill -p max_num_seqs 256"):
        validate_parameters(
            rules={"max_num_seqs": lambda n, v: require_int(n, v, minimum=1, example=256)}, max_num_seqs=0
        )


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"budget_tokens": 100, "num_decodes": 100}, "parameter `budget_tokens` must be larger than num_decodes (100)"),
        (
            {"small_budget_tokens": 64, "num_decodes": 100},
            "parameter `small_budget_tokens` must be larger than num_decodes",
        ),
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


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        (
            {"max_num_seqs": 4096, "budget_tokens": 2048},
            "parameter `max_num_seqs` must not exceed budget_tokens (2048)",
        ),
        (
            {"low_max_num_seqs": 256, "max_num_seqs": 256},
            "parameter `low_max_num_seqs` must be below max_num_seqs (256)",
        ),
        ({"budgets": [64, 128], "max_num_seqs": 256}, "at least one budget >= max_num_seqs (256)"),
        ({"tp_model": "llama-3.1-70b", "tp_degrees": [2, 3]}, "must divide the 64 attention heads of Llama 3.1 70B"),
        ({"moe_model": "mixtral-8x7b", "moe_tp": 3}, "parameter `moe_tp` must divide the 32 attention heads"),
        ({"moe_model": "llama-3.1-8b"}, "parameter `moe_model` must be a mixture-of-experts model"),
        ({"tile_tokens": 256, "tile_zoom_tokens": 256}, "must be larger than tile_tokens (256)"),
        (
            {"measurements_path": "", "measured_model": "llama-3.1-8b"},
            "must be llama-2-7b while measurements_path is empty",
        ),
        ({"measurements_path": "", "measured_attention": True}, "must be False while measurements_path is empty"),
    ],
)
def test_combinations_of_the_newer_notebooks(kwargs, fragment):
    with pytest.raises(ParameterError) as info:
        validate_parameters(**kwargs)
    assert fragment in str(info.value)
    assert "Fix:" in str(info.value)


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("small_kv_tokens", 1000, "whole number of tokens >= 15050"),
        ("gpu_memory_utilization", 1.5, "a fraction in (0, 1]"),
        ("gpu_memory_utilization", 0.0, "a fraction in (0, 1]"),
        ("holdout_fraction", 1.0, "a fraction in [0, 1)"),
        ("rate_per_s", 0, "finite number of requests per second > 0"),
        ("tp_degrees", [0, 2], "each >= 1"),
        ("measured_hardware", "h100", "did you mean"),
    ],
)
def test_newer_rules_refuse_bad_values(name, value, fragment):
    with pytest.raises(ParameterError) as info:
        validate_parameters(**{name: value})
    assert fragment in str(info.value)


def test_slug_rules_return_slugs_and_other_combinations_pass():
    params = validate_parameters(
        tp_model="LLAMA-3.1-70B",
        moe_model="mixtral-8x7b",
        measured_hardware="h100-sxm",
        holdout_fraction=0,
        tp_degrees=[8, 2, 2],
        moe_tp=4,
    )
    assert params.tp_model == "llama-3.1-70b" and params.measured_hardware == "h100-sxm"
    assert params.tp_degrees == [2, 8] and params.holdout_fraction == 0.0
    # with a table of one's own, any measured hardware and model are fine
    assert (
        validate_parameters(measurements_path=__file__, measured_hardware="a100-80gb-sxm").measured_hardware
        == "a100-80gb-sxm"
    )


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
        assert value == SCENARIO_DEFAULTS[name], name


# --- notebooks 07 and 08: load sweeps and the tuner -------------------------------------------

TRACE = Path(__file__).resolve().parent / "fixtures" / "traces" / "azure_sample.csv"


def test_sweep_rules_accept_the_defaults_and_clean_values():
    params = validate_parameters(
        hardware="h100-sxm",
        model="llama-3.1-8b",
        cost_model=" Typical ",
        workload="CUSTOM",
        prompt_median_tokens=2000,
        prompt_sigma=0.5,
        output_median_tokens=300,
        output_sigma=0.0,
        num_requests_per_load=500.0,
        sweep_budgets=[8192, 512],
        max_num_seqs=256,
        num_loads=4,
        max_load_fraction=1,
        ttft_p90_ms=800,
        itl_p99_ms=40,
        capacity_tolerance_fraction=0.05,
        frontier_rate_per_s=0,
        trace_path="",
    )
    assert params.cost_model == "typical" and params.workload == "custom"
    assert params.num_requests_per_load == 500 and params.sweep_budgets == [512, 8192]
    assert params.prompt_median_tokens == 2000.0 and params.frontier_rate_per_s == 0.0
    factors = validate_parameters(budget_factors=[1.125, 0.5, 1], cap_factors=[1, 1, 0.25])
    assert factors.budget_factors == [0.5, 1.0, 1.125] and factors.cap_factors == [0.25, 1.0]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"cost_model": "ideall"},
            "parameter `cost_model` must be one of ideal, typical, but got 'ideall' (str). Fix: did you mean ideal?",
        ),
        ({"cost_model": True}, "parameter `cost_model` must be one of ideal, typical"),
        ({"workload": "chat"}, "parameter `workload` must be one of conversation-like, code-like, custom"),
        ({"trace_path": "no/such/trace.csv"}, "parameter `trace_path` must name an existing trace CSV or be empty"),
        ({"num_requests_per_load": 5}, "parameter `num_requests_per_load` must be a whole number of requests >= 20"),
        ({"num_requests_per_load": 50_000}, "and <= 20,000"),
        ({"num_loads": 1}, "parameter `num_loads` must be a whole number of loads >= 2"),
        ({"max_load_fraction": 0}, "parameter `max_load_fraction` must be a finite number > 0"),
        ({"prompt_sigma": -0.1}, "parameter `prompt_sigma` must be a finite number >= 0"),
        ({"output_median_tokens": 100_000}, "and <= 8192"),
        ({"ttft_p90_ms": "800"}, "parameter `ttft_p90_ms` must be a finite number of ms > 0"),
        ({"capacity_tolerance_fraction": 0.9}, "parameter `capacity_tolerance_fraction`"),
        (
            {"frontier_rate_per_s": -1.0},
            "parameter `frontier_rate_per_s` must be a finite number of requests per second >= 0",
        ),
        (
            {"sweep_budgets": [128, 512], "max_num_seqs": 256},
            "parameter `sweep_budgets` must hold only budgets >= max_num_seqs (256)",
        ),
        (
            {"budget_factors": [0.5, -1.0]},
            "parameter `budget_factors` must be a non-empty list of at most 8 numbers > 0",
        ),
        ({"cap_factors": []}, "parameter `cap_factors` must be a non-empty list"),
        ({"cap_factors": "0.5, 1"}, "parameter `cap_factors` must be a non-empty list"),
        ({"workload": "code-like", "prompt_sigma": 1.0}, "parameter `workload` must be custom to use your own lengths"),
        (
            {"hardware": "h100-sxm", "model": "llama-3.1-8b", "itl_p99_ms": 3.0},
            "parameter `itl_p99_ms` must exceed the shortest possible step of Llama 3.1 8B",
        ),
    ],
)
def test_sweep_rules_refuse_bad_values(values, message):
    with pytest.raises(ParameterError) as info:
        validate_parameters(**values)
    assert message in str(info.value) and "Fix:" in str(info.value)


def test_itl_floor_follows_the_cost_model():
    base = {"hardware": "h100-sxm", "model": "llama-3.1-8b", "itl_p99_ms": 6.0}
    validate_parameters(**base, cost_model="ideal")  # above the 4.79 ms weight read
    with pytest.raises(ParameterError, match="with the typical cost model"):
        validate_parameters(**base, cost_model="typical")  # per-step overhead on top


def test_trace_path_must_be_a_replayable_trace(tmp_path):
    assert validate_parameters(trace_path=str(TRACE)).trace_path == str(TRACE)
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,374\n")
    with pytest.raises(ParameterError, match=r"must name a trace budgetlab can replay.*missing column"):
        validate_parameters(trace_path=str(bad))
    one = tmp_path / "one.csv"
    one.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,10\n")
    with pytest.raises(ParameterError, match="at least two requests"):
        validate_parameters(trace_path=str(one))


def test_slo_from_parameters():
    from budgetlab.notebook.scenario import slo_from_parameters

    slo = slo_from_parameters(validate_parameters(ttft_p90_ms=800.0, itl_p99_ms=40, target_step_ms=40.0))
    assert slo.limits == {"ttft_p90_s": 0.8, "itl_p99_s": 0.04}
    with pytest.raises(ParameterError, match="no SLO limit"):
        slo_from_parameters(validate_parameters(target_step_ms=40.0))


def test_workload_from_parameters():
    from budgetlab.notebook.scenario import CUSTOM_MAX_PROMPT_TOKENS, workload_from_parameters
    from budgetlab.workload import CONVERSATION_PROMPT, Fixed, LogNormal, SyntheticWorkload, TraceWorkload

    default = workload_from_parameters(validate_parameters(num_requests_per_load=100))
    assert isinstance(default, SyntheticWorkload) and default.label == "conversation-like"
    assert default.prompt == CONVERSATION_PROMPT and default.num_requests == 100
    assert workload_from_parameters(validate_parameters(workload="code-like")).label == "code-like"
    custom = workload_from_parameters(
        validate_parameters(workload="custom", prompt_median_tokens=2000, prompt_sigma=0.5, num_requests_per_load=50)
    )
    assert custom.prompt == LogNormal(median_tokens=2000.0, sigma=0.5, max_tokens=CUSTOM_MAX_PROMPT_TOKENS)
    assert custom.label == "custom (prompt median 2,000, output median 129)"

    params = validate_parameters(num_requests_per_load=200, seed=3)
    chat = workload_from_parameters(params)
    fixed = chat.with_fixed_lengths(seed=params.seed)
    assert isinstance(fixed.prompt, Fixed) and isinstance(fixed.output, Fixed)
    real, twin = chat.requests(rate_per_s=5.0, seed=3), fixed.requests(rate_per_s=5.0, seed=3)
    assert [r.arrival_at_s for r in real] == [r.arrival_at_s for r in twin]  # the same arrivals
    assert fixed.prompt.tokens == round(np.mean([r.prompt_tokens for r in real]))
    assert fixed.output.tokens == round(np.mean([r.output_tokens for r in real]))

    trace_params = validate_parameters(trace_path=str(TRACE), num_requests_per_load=20)
    trace = workload_from_parameters(trace_params)
    assert isinstance(trace, TraceWorkload) and trace.num_requests == 8 and trace.label == "azure_sample"
    twin = trace.with_fixed_lengths()
    assert np.array_equal(twin.arrival_at_s, trace.arrival_at_s) and len(set(twin.prompt_tokens.tolist())) == 1
