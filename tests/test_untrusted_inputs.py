"""Values from outside (scenario files, ``-p``, API overrides) are admitted in one place (issue 21).

Every value papermill will write into a notebook must be plain (None, bool, int, float, str,
lists and str-keyed mappings of them) and small; YAML tags and alias bombs are refused before
anything is expanded. The fuzz tier here needs no kernel: hostile text for every string
parameter of every notebook goes through the admission, and whatever is admitted must come
out of papermill's code generator as one literal assignment of the same value.
"""

from __future__ import annotations

import ast
import math
import time
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
import yaml

from budgetlab.errors import ParameterError
from budgetlab.notebook import reports
from budgetlab.notebook.parameters import undeclared_injected_names, validate_parameters
from budgetlab.notebook.plan import ReportError, load_scenario, parse_override, plan
from budgetlab.notebook.untrusted import (
    LIMITS,
    InputLimits,
    _bounded,
    admit_parameters,
    admit_value,
    load_untrusted_mapping,
    load_untrusted_yaml,
)

papermill_translators = pytest.importorskip("papermill.translators")

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))

#: The exploit of issue 21: a set whose str() closes papermill's quotes.
SET_EXPLOIT = '!!set {"x\\"; import os; os.system(\\"touch pwned\\"); y = \\"": null}'

HOSTILE_STRINGS = [
    "<img src=x onerror=alert(1)>",
    '"><script>alert(1)</script>',
    "</script><script>alert(1)</script>",
    "`whoami` ``` $(id) ```",
    "[x](javascript:alert(1))",
    "![x](javascript:alert(1))",
    "<javascript:alert(1)>",
    "[x]: javascript:alert(1)",
    "{{ 7 * 7 }} {% raw %} ${x}",
    "line one\nline two\r\n\n<script>alert(1)</script>",
    "\"; import os; os.system('touch pwned'); x = \"",
    "'''; import os #",
    '\\"; import os; x = \\"',
    "\\x22; import os",
    "\x1b]0;pwned\x07 \x1b[31mred",
    "\u2028\u2029\x85\x00",
    "&lt;img src=x onerror=alert(1)&gt;",
    "| a | b |\n|---|---|",
    "$$\\href{javascript:alert(1)}{x}$$",
    "*" * 40 + "_" * 40,
    "x" * LIMITS.max_string_chars,
    "x" * (LIMITS.max_string_chars + 1),
    "!!python/object/apply:os.system ['touch pwned']",
    "!!set {a: null}",
    "!!binary aGVsbG8=",
    "&a [*a]",
    "*undefined",
    "? [a]\n: 1",
    "{" * 100,
    "- - - - - - - - - - - - - - - - - - - - x",
]


def _string_parameters() -> list[tuple[str, str]]:
    """(notebook, name) of every parameter a notebook's parameters cell annotates ``str``."""
    found = []
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if "parameters" in cell.metadata.get("tags", []):
                for node in ast.parse(cell.source).body:
                    if isinstance(node, ast.AnnAssign) and ast.unparse(node.annotation) == "str":
                        assert isinstance(node.target, ast.Name)
                        found.append((path.stem[:2], node.target.id))
    return found


STRING_PARAMETERS = _string_parameters()


def _assert_codified_as_literal(name: str, value: Any) -> None:
    """papermill's Python code for ``{name: value}`` is one assignment of a literal equal to it."""
    code = papermill_translators.PythonTranslator.codify({name: value})
    body = ast.parse(code).body
    assert len(body) == 1, code
    (statement,) = body
    assert isinstance(statement, ast.Assign), code
    assert [ast.unparse(t) for t in statement.targets] == [name], code
    if isinstance(value, float) and not math.isfinite(value):
        return  # written as float('nan'): a call, checked by papermill's own tests
    assert ast.literal_eval(statement.value) == value, code


# --- the YAML door --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        SET_EXPLOIT,
        "!!binary aGVsbG8=",
        "!!python/object/apply:os.system ['touch pwned']",
        "!!python/object:os.system x",
        "!!timestamp 2024-01-01",
        "!!str 2048",
        "!custom x",
        "[1, !!set {a: null}]",
        "{a: !!binary aGVsbG8=}",
    ],
)
def test_every_yaml_tag_is_refused_from_p(text: str):
    with pytest.raises(ReportError, match=r"parameter `model` from -p is refused: it carries the YAML tag"):
        parse_override(text, name="model")


def test_the_issue_exploit_is_refused_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    code = reports.main(["02", "-p", "model", SET_EXPLOIT, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "`model`" in err and "!!set" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() and not (NOTEBOOKS_DIR / "pwned").exists()


def test_a_scenario_with_a_tag_is_refused_naming_the_file(tmp_path: Path):
    path = tmp_path / "evil.yaml"
    path.write_text(f"hardware: h100-sxm\nmodel: {SET_EXPLOIT}\n", encoding="utf-8")
    with pytest.raises(ReportError, match=r"evil\.yaml is refused: it carries the YAML tag !!set \(at line 2"):
        load_scenario(path)


def _billion_laughs(levels: int = 9, fan_out: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * fan_out) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan_out) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("base", ["libyaml", "pure-python"])
def test_an_alias_bomb_is_refused_in_milliseconds(tmp_path: Path, base: str):
    text = _billion_laughs()  # 9 levels of 9 aliases: 9**9 ≈ 387 million strings
    text += "".join(f"pad{i}: {'x' * 60}\n" for i in range(6000 // 70))  # a 6 KB file
    assert 5_000 < len(text) < 8_000
    start = time.perf_counter()
    if base == "libyaml":
        path = tmp_path / "bomb.yaml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ReportError, match="more than 10,000 values"):
            load_scenario(path)
    else:
        loader = _bounded(yaml.SafeLoader)(text, LIMITS)
        with pytest.raises(Exception, match="more than 10,000 values"):
            loader.get_single_data()
    assert time.perf_counter() - start < 0.5


def test_an_alias_bomb_is_refused_from_p():
    text = "[&a [1,1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b], "
    text += "&d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]]"
    start = time.perf_counter()
    with pytest.raises(ReportError, match="parameter `budgets` from -p is refused: it holds more than 10,000"):
        parse_override(text, name="budgets")
    assert time.perf_counter() - start < 0.5


def test_small_aliases_still_work_and_count_by_what_they_expand_to():
    text = "budgets: &b [512, 2048]\nsweep_budgets: *b\n"
    assert load_untrusted_mapping(text, origin="s") == {"budgets": [512, 2048], "sweep_budgets": [512, 2048]}
    tight = InputLimits(max_nodes=7)  # mapping, 2 keys, a list of 2, the alias as 3 more = 9
    with pytest.raises(ParameterError, match="more than 7 values"):
        load_untrusted_mapping(text, origin="s", limits=tight)


def test_aliases_of_one_long_text_are_refused_by_the_text_they_expand_to():
    # 20 KB of YAML: one 4,000-character text and 1,000 aliases of it would be 4 MB of source
    long_text = "x" * 4000
    text = f'trace_path: [&s "{long_text}", ' + ", ".join(["*s"] * 1000) + "]\n"
    with pytest.raises(ParameterError, match=r"parameter `trace_path` .* more than 65,536 characters in all"):
        load_untrusted_mapping(text, origin="s")
    few = f'trace_path: [&s "{long_text}", *s]\n'
    assert load_untrusted_mapping(few, origin="s") == {"trace_path": [long_text, long_text]}


@pytest.mark.parametrize("text", ["&a [*a]", "&a {k: *a}", "&a [1, [2, *a]]"])
def test_a_recursive_alias_is_refused(text: str):
    with pytest.raises(ReportError, match="refers to a list or mapping it sits in"):
        parse_override(text, name="budgets")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 10_000 + "]" * 10_000, "not valid YAML|nest deeper than 16"),
        ("a:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 100)), "nest deeper than 16"),
        ("a:\n  " + "- " * 10_000 + "x\n", "not valid YAML|nest deeper than 16"),
        ("a: " + "x" * 5_000 + "\n", "5,000 characters, more than 4,096"),
        ("".join(f"k{i}: 1\n" for i in range(6_000)), "more than 10,000 values"),
        ("a: [" + ", ".join(["1"] * 12_000) + "]\n", "more than 10,000 values"),
        ("a: " + "9" * 30 + "\n", "wider than 63 bits"),
        ("- 1\n- 2\n", "must be a mapping of parameter name to value"),
        ("1: 2\n", "a parameter name is a Python identifier"),
        ('"a b": 2\n', "a parameter name is a Python identifier"),
        ("a: {1: 2}\n", "mapping keys must be text"),
        ("a: [1\n", "not valid YAML"),
        ("a: *nowhere\n", "not valid YAML"),
    ],
    ids=lambda v: v[:24] if isinstance(v, str) else v,
)
def test_malformed_or_huge_scenarios_are_refused_promptly(tmp_path: Path, text: str, message: str):
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    start = time.perf_counter()
    with pytest.raises(ReportError, match=message):
        load_scenario(path)
    assert time.perf_counter() - start < 5.0  # at most ~0.2 s on an idle core: bounded by the 10,000 values


def test_a_huge_scenario_file_is_refused_before_it_is_read(tmp_path: Path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as f:
        f.truncate(2**30)  # 1 GiB, sparse
    start = time.perf_counter()
    with pytest.raises(ReportError, match="more than 65,536"):
        load_scenario(path)
    assert time.perf_counter() - start < 0.1


def test_a_scenario_that_is_not_utf8_is_refused(tmp_path: Path):
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"model: \xff\xfe\n")
    with pytest.raises(ReportError, match="cannot be read"):
        load_scenario(path)


def test_dates_and_equals_stay_text():
    assert load_untrusted_yaml("2024-01-01", name="x") == "2024-01-01"
    assert load_untrusted_yaml("=", name="x") == "="


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[512, 2048]", [512, 2048]),
        ("5000", 5000),
        ("0.04", 0.04),
        ("true", True),
        ("null", None),
        ("h100-sxm", "h100-sxm"),
        ("{a: [1, {b: c}]}", {"a": [1, {"b": "c"}]}),
        ('a"; import os; b="', 'a"; import os; b="'),
        ("[unclosed", "[unclosed"),
    ],
)
def test_plain_values_are_admitted_and_codified_literally(text: str, expected: Any):
    value = parse_override(text, name="p")
    assert value == expected
    _assert_codified_as_literal("p", value)


# --- values from the API ------------------------------------------------------------------------


class _Sneaky(str):
    def __repr__(self) -> str:
        return '"; import os; x = "'


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1, 2}, "is a set"),
        (frozenset(), "is a frozenset"),
        (b'"; import os #', "is a bytes"),
        (bytearray(b"x"), "is a bytearray"),
        (1 + 2j, "is a complex"),
        (object(), "is a object"),
        (_Sneaky("x"), "is a _Sneaky"),
        ({"a": {1}}, r"\['a'\] is a set"),
        ([1, [2, b"x"]], r"\[1\]\[1\] is a bytes"),
        ({1: "a"}, "mapping keys must be text"),
        (10**30, "wider than 63 bits"),
        ("x" * 5_000, "5,000 characters"),
    ],
    ids=repr,
)
def test_api_values_outside_the_whitelist_are_refused(value: Any, message: str):
    with pytest.raises(ParameterError, match=message):
        admit_value("model", value, origin="overrides")


def test_api_values_are_normalised_to_plain_types(tmp_path: Path):
    admitted = admit_parameters(
        {
            "trace_path": tmp_path / 'a".csv',
            "budgets": (512, np.int64(2048)),
            "rate_per_s": np.float64(2.5),
            "measured_attention": np.bool_(True),
        }
    )
    assert admitted == {
        "trace_path": str(tmp_path / 'a".csv'),
        "budgets": [512, 2048],
        "rate_per_s": 2.5,
        "measured_attention": True,
    }
    assert [type(v) for v in admitted["budgets"]] == [int, int]
    for name, value in admitted.items():
        _assert_codified_as_literal(name, value)


def test_shared_and_cyclic_api_structures_are_refused_promptly():
    shared: list[Any] = [1] * 10
    for _ in range(9):
        shared = [shared] * 10  # 10**10 values in 10 lists
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    start = time.perf_counter()
    with pytest.raises(ParameterError, match="more than 10,000 values"):
        admit_value("budgets", shared)
    with pytest.raises(ParameterError, match="nest deeper than 16 levels"):
        admit_value("budgets", cyclic)
    assert time.perf_counter() - start < 0.5


def test_plan_admits_api_overrides(tmp_path: Path):
    with pytest.raises(ReportError, match=r"parameter `model` from overrides is refused: the value is a set"):
        plan(["02"], ["h100-llama-3.1-8b"], {"model": {"x"}}, out_dir=tmp_path)
    with pytest.raises(ReportError, match="parameter name 'a b'"):
        plan(["02"], ["h100-llama-3.1-8b"], {"a b": 1}, out_dir=tmp_path)
    (job,) = plan(["06"], ["h100-llama-3.1-8b"], {"measurements_path": tmp_path / "m.csv"}, out_dir=tmp_path)
    assert job.parameters["measurements_path"] == str(tmp_path / "m.csv")


# --- fuzz: hostile text for every string parameter of every notebook ----------------------------


def test_every_notebook_has_string_parameters_to_fuzz():
    names = {name for _, name in STRING_PARAMETERS}
    assert {"hardware", "model", "results_path", "trace_path", "measurements_path", "bench_path"} <= names


@pytest.mark.parametrize(("notebook", "name"), STRING_PARAMETERS, ids=lambda v: str(v))
def test_hostile_text_for_every_string_parameter_is_refused_or_inert(notebook: str, name: str):
    start = time.perf_counter()
    for text in HOSTILE_STRINGS:
        for admit in (lambda t: parse_override(t, name=name), lambda t: admit_value(name, t, origin="overrides")):
            try:
                value = admit(text)
            except (ReportError, ParameterError) as exc:
                assert f"`{name}`" in str(exc)
                continue
            _assert_codified_as_literal(name, value)
    assert time.perf_counter() - start < 5.0


def test_hostile_values_pass_plan_only_as_plain_text(tmp_path: Path):
    names = sorted({name for notebook, name in STRING_PARAMETERS if notebook in ("06", "08", "10")} - {"results_path"})
    hostile = {name: HOSTILE_STRINGS[i % 12] for i, name in enumerate(names)}
    jobs = plan(["06", "08", "10"], ["h100-llama-3.1-8b"], hostile, out_dir=tmp_path)
    assert len(jobs) == 3
    for job in jobs:
        for name, value in job.parameters.items():
            _assert_codified_as_literal(name, value)


# --- a parameter typo under plain papermill (issue 20, item 11) ---------------------------------


def test_an_injected_typo_names_the_closest_parameter():
    history = [
        "",
        "import budgetlab",
        'budget_tokens: int = 2048\nresults_path: str = ""',
        "# Parameters\nbudget_token = 5\n",
        "validate(...)",
    ]
    assert undeclared_injected_names(history, {"budget_tokens", "results_path"}) == {"budget_token": "budget_tokens"}
    assert undeclared_injected_names(history, {"budget_tokens"}) == {"budget_token": "budget_tokens"}


def test_declared_and_unrelated_injections_pass():
    params = "budget_tokens: int = 2048\nextra: int = 1"
    ok = [params, "# Parameters\nbudget_tokens = 5\nextra = 2\n", "now"]
    assert undeclared_injected_names(ok, {"budget_tokens"}) == {}  # extra: set by the parameters cell
    assert undeclared_injected_names([params, "x = 1", "now"], {"budget_tokens"}) == {}  # nothing injected
    assert undeclared_injected_names([params, "# Parameters\nzzz_qqq = 1\n", "now"], {"budget_tokens"}) == {
        "zzz_qqq": None
    }
    # the latest injection counts, and the running cell itself is never read as one
    later = [params, "# Parameters\ntypo_a = 1\n", params, "# Parameters\nbudget_tokens = 3\n", "# Parameters\nq = 1"]
    assert undeclared_injected_names(later, {"budget_tokens"}) == {}


def test_validate_parameters_catches_a_typo_injected_in_ipython():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_cell('budget_tokens: int = 2048\nresults_path: str = ""', store_history=True)
        shell.run_cell("# Parameters\nbudget_token = 5\n", store_history=True)
        result = shell.run_cell(
            "from budgetlab.notebook import validate_parameters\n"
            "validate_parameters(budget_tokens=budget_tokens, results_path=results_path)",
            store_history=True,
        )
        error = result.error_in_exec
        assert isinstance(error, ParameterError)
        assert "`budget_token`" in str(error) and "did you mean `budget_tokens`?" in str(error)
        shell.run_cell("# Parameters\nbudget_tokens = 4096\n", store_history=True)
        result = shell.run_cell(
            "p = validate_parameters(budget_tokens=budget_tokens, results_path='')", store_history=True
        )
        assert result.error_in_exec is None and shell.user_ns["p"].budget_tokens == 4096
        # a scenario file (papermill -f) carries other notebooks' parameters too: no typo
        shell.run_cell(
            "# Parameters\nbudget_tokens = 1024\nrate_per_s = 12.0\nlow_max_num_seqs = 16\n", store_history=True
        )
        result = shell.run_cell(
            "p = validate_parameters(budget_tokens=budget_tokens, results_path='')", store_history=True
        )
        assert result.error_in_exec is None and shell.user_ns["p"].budget_tokens == 1024
    finally:
        InteractiveShell.clear_instance()


def test_validate_parameters_outside_ipython_is_unaffected():
    assert validate_parameters(budget_tokens=2048).budget_tokens == 2048


def test_every_notebook_validates_exactly_its_parameters_cell():
    """The typo check compares the injection with the names passed to validate_parameters."""
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        declared: set[str] = set()
        validated: set[str] = set()
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            tree = ast.parse(cell.source)
            if "parameters" in cell.metadata.get("tags", []):
                declared = {
                    n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                }
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "validate_parameters":
                    validated = {k.arg for k in node.keywords if k.arg and k.arg != "rules"}
        assert declared and declared == validated, path.name


@pytest.mark.notebook
@pytest.mark.floors  # papermill at its floor injects the typo
def test_plain_papermill_stops_a_typo_at_the_validation_cell(tmp_path: Path):
    papermill = pytest.importorskip("papermill")
    from papermill.exceptions import PapermillExecutionError

    with pytest.raises(PapermillExecutionError) as raised:
        papermill.execute_notebook(
            str(NOTEBOOKS_DIR / "02-filling-the-budget.ipynb"),
            str(tmp_path / "02.ipynb"),
            parameters={"budget_token": 5},
            kernel_name="python3",
            cwd=str(NOTEBOOKS_DIR),
            progress_bar=False,
        )
    assert raised.value.ename == "ParameterError"
    assert "`budget_token`" in raised.value.evalue and "did you mean `budget_tokens`?" in raised.value.evalue
