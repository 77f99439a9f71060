"""budgetlab.notebook.reports: planning, the CLI, the offline template, and rendering the fixture notebooks.

Fixtures live in ``tests/fixtures/notebooks``: ``01-fixture-charts`` (two Altair charts, one
with a slider-bound parameter, and a ``save_results`` call) and ``02-fixture-fails`` (its
validation cell raises), with one scenario, ``params/small.yaml``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import altair as alt
import nbformat
import pandas as pd
import pytest

from budgetlab.notebook import reports
from budgetlab.notebook.altair_setup import (
    RENDERER_NAME,
    VEGA5_MIMETYPE,
    use_offline_renderer,
    vega5_spec,
    vegalite_mimetype,
)

FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"
CHARTS = "01-fixture-charts"
FAILS = "02-fixture-fails"
# one line of the inlined bundle that occurs once in it
BUNDLE_MARKER = "window.vegaEmbed="
START_CWD = Path.cwd()
PROMPT = re.compile(r"\b(In|Out)(&nbsp;|\s)?\[\d+\]:")  # "In [3]:", with a no-break space


def run_main(*argv: str) -> tuple[int, str, str]:
    """Run the CLI in this process; return (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = reports.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def cdn_problems(page: str) -> list[str]:
    """Everything in an HTML page that would load from the network."""
    problems = [f"script src={src}" for src in re.findall(r"<script\b[^>]*\bsrc\s*=\s*[\"']?([^\"' >]+)", page, re.I)]
    problems += [
        f"link href={href}" for href in re.findall(r"<link\b[^>]*\bhref\s*=\s*[\"']?(https?:[^\"' >]+)", page, re.I)
    ]
    problems += re.findall(r"@import\s+url\(\s*[\"']?https?:[^)]*\)", page, re.I)
    problems += re.findall(r"import\(\s*[\"']https?:[^)]*\)", page, re.I)
    for needle in ("cdn.jsdelivr", "cdnjs.cloudflare", "unpkg.com", "require.js", "requirejs"):
        if needle in page.lower():
            problems.append(needle)
    return problems


@pytest.fixture
def fixture_copy(tmp_path: Path) -> Path:
    """A writable copy of the fixture notebooks and scenario."""
    target = tmp_path / "notebooks"
    shutil.copytree(FIXTURES, target)
    return target


# --------------------------------------------------------------------------------------------
# pure functions


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[512, 2048]", [512, 2048]),
        ("true", True),
        ("5000", 5000),
        ("0.04", 0.04),
        ("h100-sxm", "h100-sxm"),
        ("llama-3.1-8b", "llama-3.1-8b"),
        ("null", None),
        ("{a: 1}", {"a": 1}),
        ("[unclosed", "[unclosed"),
    ],
)
def test_parse_override_reads_yaml(text: str, expected: object) -> None:
    assert reports.parse_override(text) == expected


def test_select_notebooks_accepts_names_suffixes_paths_and_prefixes() -> None:
    available = reports.find_notebooks(FIXTURES)
    assert list(available) == [CHARTS, FAILS]
    assert reports.select_notebooks(["01"], available) == [CHARTS]
    assert reports.select_notebooks([f"{FAILS}.ipynb"], available) == [FAILS]
    assert reports.select_notebooks([f"notebooks/{CHARTS}.ipynb"], available) == [CHARTS]
    assert reports.select_notebooks(["02", "01", "01"], available) == [CHARTS, FAILS]
    assert reports.select_notebooks(["0"], available) == [CHARTS, FAILS]
    with pytest.raises(reports.ReportError, match=CHARTS):
        reports.select_notebooks(["07"], available)


def test_plan_passes_each_notebook_only_its_parameters(tmp_path: Path) -> None:
    jobs = reports.plan(overrides={"slope": 0.5}, notebooks_dir=FIXTURES, out_dir=tmp_path / "out")
    by_name = {job.notebook: job for job in jobs}
    assert set(by_name) == {CHARTS, FAILS}
    charts = by_name[CHARTS].parameters
    assert charts == {
        "num_points": 12,
        "slope": 0.5,
        "results_path": str((tmp_path / "out" / "small" / f"{CHARTS}.results.json").resolve()),
    }
    assert Path(charts["results_path"]).is_absolute()
    assert set(by_name[FAILS].parameters) == {"budget_tokens", "results_path"}


def test_notebook_parameters_come_from_the_parameters_cell() -> None:
    params = reports.notebook_parameters(FIXTURES / f"{CHARTS}.ipynb")
    assert list(params) == ["num_points", "slope", "results_path"]
    assert params["num_points"]["inferred_type_name"] == "int"


# --------------------------------------------------------------------------------------------
# command-line errors (no kernel starts)


def test_unknown_notebook_exits_2_listing_notebooks() -> None:
    code, _, err = run_main("99-nope", "--notebooks-dir", str(FIXTURES))
    assert code == 2
    assert "99-nope" in err and CHARTS in err and FAILS in err


def test_unknown_scenario_exits_2_listing_scenarios() -> None:
    code, _, err = run_main("--scenario", "mars", "--notebooks-dir", str(FIXTURES))
    assert code == 2
    assert "mars" in err and "small" in err


def test_undeclared_override_exits_2(tmp_path: Path) -> None:
    code, _, err = run_main("01", "-p", "budget_tokens", "5", "--notebooks-dir", str(FIXTURES), "--out", str(tmp_path))
    assert code == 2  # only 02 declares budget_tokens, and 02 is not selected
    assert "budget_tokens" in err and "num_points" in err
    assert not (tmp_path / "small").exists()


def test_results_path_cannot_be_overridden(tmp_path: Path) -> None:
    code, _, err = run_main(
        "-p",
        "results_path",
        "/tmp/x.json",
        "--notebooks-dir",
        str(FIXTURES),
        "--out",
        str(tmp_path),
    )
    assert code == 2
    assert "results_path" in err


def test_scenario_key_no_notebook_declares_exits_2(fixture_copy: Path, tmp_path: Path) -> None:
    scenario = fixture_copy / "params" / "small.yaml"
    scenario.write_text(scenario.read_text() + "num_pionts: 3\n")
    code, _, err = run_main("--notebooks-dir", str(fixture_copy), "--out", str(tmp_path / "out"))
    assert code == 2
    assert "num_pionts" in err and "small.yaml" in err


def test_scenario_must_be_a_mapping(fixture_copy: Path, tmp_path: Path) -> None:
    (fixture_copy / "params" / "small.yaml").write_text("- 1\n- 2\n")
    code, _, err = run_main("--notebooks-dir", str(fixture_copy), "--out", str(tmp_path / "out"))
    assert code == 2
    assert "mapping" in err


def test_nothing_to_render_exits_2_saying_why(tmp_path: Path) -> None:
    empty = tmp_path / "notebooks"
    empty.mkdir()
    code, out, err = run_main("--notebooks-dir", str(empty), "--out", str(tmp_path / "out"))
    assert code == 2
    assert err.count("\n") == 1 and "nothing to render: no notebooks (*.ipynb) in" in err
    assert str(empty) in err and out == ""

    shutil.copy(FIXTURES / f"{CHARTS}.ipynb", empty)
    code, out, err = run_main("--notebooks-dir", str(empty), "--out", str(tmp_path / "out"))
    assert code == 2
    assert err.count("\n") == 1 and "nothing to render: no scenarios (*.yaml) in" in err
    assert not (tmp_path / "out").exists()


def test_a_filter_matching_no_notebook_exits_2(tmp_path: Path) -> None:
    code, out, err = run_main("9", "--notebooks-dir", str(FIXTURES), "--out", str(tmp_path / "out"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no notebook named '9'" in err
    assert not (tmp_path / "out").exists()


def test_default_notebooks_are_the_shipped_ones(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # any folder: the notebooks do not come from the working directory
    shipped = reports.default_notebooks_dir()  # the checkout's, or an installed wheel's copy
    in_checkout = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
    assert list(reports.find_notebooks(shipped)) == in_checkout and len(in_checkout) == 14
    assert "h100-llama-3.1-8b" in reports.find_scenarios(shipped / "params")
    jobs = reports.plan(["02"], ["h100-llama-3.1-8b"])
    (job,) = jobs
    assert job.input_path == shipped / "02-filling-the-budget.ipynb"
    assert job.out_dir == tmp_path / "reports" / "h100-llama-3.1-8b"


def test_list_shows_notebooks_parameters_and_scenarios() -> None:
    code, out, _ = run_main("--list", "--notebooks-dir", str(FIXTURES))
    assert code == 0
    assert CHARTS in out and "num_points: int" in out and "small" in out
    assert "results_path" not in out


# --------------------------------------------------------------------------------------------
# renderer and template (no kernel starts)


@pytest.fixture
def offline_renderer():
    previous = alt.renderers.active
    use_offline_renderer()
    yield
    alt.renderers.enable(previous)


def _chart_with_slider() -> alt.Chart:
    cut = alt.param(name="cut", value=2, bind=alt.binding_range(min=0, max=4, step=1))
    return (
        alt.Chart(pd.DataFrame({"x": range(5), "y": [3, 1, 4, 1, 5]}))
        .mark_bar()
        .encode(
            x="x:O",
            y="y:Q",
            color=alt.condition(alt.datum.x <= cut, alt.value("steelblue"), alt.value("gray")),
        )
        .add_params(cut)
    )


def test_renderer_output_is_a_valid_notebook_output(offline_renderer) -> None:
    assert alt.renderers.active == RENDERER_NAME
    data, metadata = _chart_with_slider()._repr_mimebundle_()
    mime = vegalite_mimetype()
    assert mime.endswith("+json")  # nbformat only accepts JSON objects under +json types
    assert isinstance(data[mime], dict) and data[mime]["params"][0]["name"] == "cut"
    assert "text/plain" in data
    # no HTML: JupyterLab would draw Altair's CDN-loading HTML instead of the chart
    assert "text/html" not in data
    # the Vega 5 spec JupyterLab's own Vega draws, the slider kept as a bound signal
    vega = data[VEGA5_MIMETYPE]
    assert vega["$schema"] == "https://vega.github.io/schema/vega/v5.json"
    (signal,) = [s for s in vega["signals"] if s["name"] == "cut"]
    assert signal["bind"] == {"input": "range", "min": 0, "max": 4, "step": 1} and signal["value"] == 2
    assert metadata == {}
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("chart")
    cell.outputs = [nbformat.v4.new_output("display_data", data=data, metadata=metadata)]
    nb.cells = [cell]
    nbformat.validate(nb)  # what papermill does when it saves; altair's "mimetype" fails here


def test_embed_options_travel_under_both_chart_mime_types(offline_renderer) -> None:
    alt.renderers.set_embed_options(renderer="svg", actions=False)
    try:
        data, metadata = _chart_with_slider()._repr_mimebundle_()
    finally:
        alt.renderers.set_embed_options()
    options = {"embed_options": {"renderer": "svg", "actions": False}}
    assert metadata == {vegalite_mimetype(): options, VEGA5_MIMETYPE: options}
    assert set(data) == {vegalite_mimetype(), VEGA5_MIMETYPE, "text/plain"}


def test_a_spec_vega_lite_5_cannot_compile_warns_and_keeps_the_report_chart(offline_renderer) -> None:
    from budgetlab.notebook.altair_setup import offline_renderer as render

    broken = {"mark": "nonsense", "data": {"values": []}, "encoding": {"x": {"field": "a", "type": "bogus"}}}
    with pytest.raises(ValueError, match="conversion failed"):
        vega5_spec(broken)
    with pytest.warns(UserWarning, match="only draw in the rendered report"):
        data, _ = render(broken)
    assert VEGA5_MIMETYPE not in data and data[vegalite_mimetype()] is broken


def test_template_prefers_the_vega_lite_spec_and_draws_a_vega_only_output(offline_renderer) -> None:
    data, _ = _chart_with_slider()._repr_mimebundle_()
    vega_only = {VEGA5_MIMETYPE: data[VEGA5_MIMETYPE], "text/plain": "chart"}
    nb = nbformat.v4.new_notebook()
    for bundle in (dict(reversed(list(data.items()))), vega_only):
        cell = nbformat.v4.new_code_cell("chart", execution_count=1)
        cell.outputs = [nbformat.v4.new_output("execute_result", data=bundle, metadata={}, execution_count=1)]
        nb.cells.append(cell)
    report, _ = reports.make_exporters()
    page, _ = report.from_notebook_node(nb, resources={"vega_bundle": reports.vega_bundle()})
    modes = re.findall(r'data-mime-type="([^"]+)" data-vega-mode="([^"]+)"', page)
    assert modes == [(vegalite_mimetype(), "vega-lite"), (VEGA5_MIMETYPE, "vega")]


def test_template_inlines_bundle_once_and_embeds_every_chart(offline_renderer) -> None:
    chart = _chart_with_slider()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Three charts")]
    for i in range(3):
        data, metadata = chart.properties(title=f"chart {i}")._repr_mimebundle_()
        cell = nbformat.v4.new_code_cell(f"chart_{i}", execution_count=i + 1)
        cell.outputs = [nbformat.v4.new_output("execute_result", data=data, metadata=metadata, execution_count=i + 1)]
        nb.cells.append(cell)
    report, handout = reports.make_exporters()
    for exporter in (report, handout):
        page, _ = exporter.from_notebook_node(nb, resources={"vega_bundle": reports.vega_bundle()})
        assert page.count(BUNDLE_MARKER) == 1
        assert page.count('<div class="budgetlab-vega ') == 3
        assert page.count('class="budgetlab-vega-spec"') == 3
        assert "altair-viz-" not in page  # Altair's own (CDN) HTML is not used
        assert cdn_problems(page) == []


def test_template_without_charts_has_no_bundle() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# No charts"), nbformat.v4.new_code_cell("1 + 1")]
    report, _ = reports.make_exporters()
    page, _ = report.from_notebook_node(nb, resources={"vega_bundle": reports.vega_bundle()})
    assert BUNDLE_MARKER not in page
    assert cdn_problems(page) == []


def test_vega_bundle_is_safe_inside_a_script_element() -> None:
    bundle = reports.vega_bundle()
    assert bundle.count(BUNDLE_MARKER) == 1
    assert "</script" not in bundle.lower()


# --------------------------------------------------------------------------------------------
# rendering through papermill (starts kernels)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, str, Path]:
    """Both fixture notebooks through the CLI, two kernels at a time."""
    out = tmp_path_factory.mktemp("cli") / "reports"
    code, stdout, stderr = run_main("--notebooks-dir", str(FIXTURES), "--out", str(out), "-j", "2")
    return code, stdout, stderr, out


@pytest.mark.notebook
@pytest.mark.floors
@pytest.mark.wheel
def test_render_writes_four_offline_files(tmp_path: Path) -> None:
    seen: list[reports.ReportOutcome] = []
    starts: list[reports.Job] = []
    beats: list[dict[str, float]] = []
    outcomes = reports.render(
        [CHARTS],
        overrides={"slope": 3.0},
        notebooks_dir=FIXTURES,
        out_dir=tmp_path,
        on_start=starts.append,
        on_report=seen.append,
        on_running=lambda running: beats.append(dict(running)),
        running_every_s=0.5,
    )
    assert [o.name for o in outcomes] == [f"small/{CHARTS}"] == [o.name for o in seen]
    assert [job.notebook for job in starts] == [CHARTS]
    assert beats and all(set(beat) == {f"small/{CHARTS}"} for beat in beats)  # what runs, how long [s]
    assert [beat[f"small/{CHARTS}"] for beat in beats] == sorted(beat[f"small/{CHARTS}"] for beat in beats)
    (outcome,) = outcomes
    assert outcome.ok, outcome.error
    assert outcome.error is None and outcome.seconds > 0
    folder = tmp_path / "small"
    for name in (f"{CHARTS}.ipynb", f"{CHARTS}.html", f"{CHARTS}-handout.html"):
        assert (folder / name).is_file(), name
    assert outcome.ipynb_path == folder / f"{CHARTS}.ipynb"

    # the notebook wrote its results where it was told, with the scenario and the override
    results = json.loads((folder / f"{CHARTS}.results.json").read_text())
    assert results == {"num_points": 12, "slope": 3.0, "last_y": 33.0}

    page = (folder / f"{CHARTS}.html").read_text()
    handout = (folder / f"{CHARTS}-handout.html").read_text()
    for html_page in (page, handout):
        assert cdn_problems(html_page) == []
        assert html_page.count(BUNDLE_MARKER) == 1
        assert html_page.count('<div class="budgetlab-vega ') == 2
        assert "small" in html_page and "slope = 3.0" in html_page  # the banner

    # the report shows code; the handout shows none of it, nor prompts, but keeps the outputs
    assert "use_offline_renderer" in page and PROMPT.search(page)
    assert 'class="jp-CodeMirrorEditor' in page and 'class="jp-CodeMirrorEditor' not in handout
    assert "use_offline_renderer" not in handout
    assert not PROMPT.search(handout)
    assert "charts drawn: 2" in handout
    assert "Fixture: two charts" in handout  # markdown kept

    index = (tmp_path / "index.html").read_text()
    assert f'href="./small/{CHARTS}.html"' in index
    assert f'href="./small/{CHARTS}-handout.html"' in index
    assert f'href="./small/{CHARTS}.results.json"' in index
    assert cdn_problems(index) == [] and "<script" not in index


@pytest.mark.notebook
@pytest.mark.floors  # the failure as papermill at its floor reports it
def test_failing_notebook_exits_1_and_the_other_still_renders(cli_run) -> None:
    code, stdout, stderr, out = cli_run
    assert code == 1
    # the failure is named with its exception, not a traceback
    assert f"FAILED small/{FAILS}: ValueError: budget_tokens must be positive, got -5" in stderr
    assert "Traceback" not in stdout + stderr
    # a line when each report starts and one when it is finished (with the time since the
    # command started), then the summary table
    for name in (CHARTS, FAILS):
        assert re.search(rf"^\s+small/{name}\s+started  \(\d+:\d\d elapsed\)$", stdout, re.MULTILINE), stdout
    assert stdout.index(f"small/{CHARTS}") < stdout.index(f"] small/{CHARTS}")  # started before finished
    assert re.search(rf"\[\d/2\] small/{CHARTS}\s+\d+\.\d s\s+ok\s+\(\d+:\d\d elapsed\)", stdout)
    assert re.search(rf"\[\d/2\] small/{FAILS}\s+\d+\.\d s\s+FAILED", stdout)
    assert re.search(rf"small\s+{FAILS}\s+\d+\.\d\s+FAILED", stdout)
    assert "1 ok, 1 failed" in stdout

    folder = out / "small"
    # the partial notebook keeps the output up to the failing cell, and is rendered, beside
    # (never in place of) the report's own names, which only a good render writes
    partial = nbformat.read(folder / f"{FAILS}.failed.ipynb", as_version=4)
    text = json.dumps(partial)
    assert "validating the parameters" in text and "budget_tokens must be positive" in text
    assert (folder / f"{FAILS}.failed.html").is_file() and (folder / f"{FAILS}.failed-handout.html").is_file()
    assert not (folder / f"{FAILS}.ipynb").exists() and not (folder / f"{FAILS}.html").exists()
    assert not (folder / f"{FAILS}.results.json").exists()
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no staging folder left
    # the other notebook rendered completely
    for suffix in (".ipynb", ".html", "-handout.html", ".results.json"):
        name = CHARTS + suffix
        assert (folder / name).is_file(), name

    index = (out / "index.html").read_text()
    assert "FAILED" in index and "budget_tokens must be positive" in index
    manifest = json.loads((out / "index.json").read_text())["reports"]
    assert {(e["notebook"], e["status"]) for e in manifest} == {(CHARTS, "ok"), (FAILS, "FAILED")}


@pytest.mark.notebook
@pytest.mark.floors
def test_render_leaves_the_working_directory_alone(cli_run) -> None:
    assert Path.cwd() == START_CWD
    assert not list(FIXTURES.glob("*.json")) and not list(FIXTURES.glob("*.html"))


# --------------------------------------------------------------------------------------------
# where the machinery lives


def test_a_notebook_imports_its_machinery_from_one_place() -> None:
    import budgetlab.notebook as nb
    import budgetlab.reports as old_name

    for name in (
        "use_offline_renderer",
        "validate_parameters",
        "save_results",
        "slo_from_parameters",
        "workload_from_parameters",
    ):
        assert name in nb.__all__ and callable(getattr(nb, name)), name
    assert old_name.main is reports.main  # python -m budgetlab.reports keeps working


def test_importing_the_machinery_starts_no_papermill() -> None:
    code = (
        "import sys, budgetlab, budgetlab.notebook; "
        "print(sorted(m for m in ('papermill', 'nbconvert', 'altair') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.notebook
def test_a_failed_render_never_replaces_a_good_report(tmp_path: Path) -> None:
    (good,) = reports.render([CHARTS], notebooks_dir=FIXTURES, out_dir=tmp_path)
    assert good.ok
    folder = tmp_path / "small"
    before = {name: (folder / name).read_bytes() for name in (f"{CHARTS}.html", f"{CHARTS}.results.json")}
    (bad,) = reports.render([CHARTS], overrides={"num_points": 1}, notebooks_dir=FIXTURES, out_dir=tmp_path)
    assert not bad.ok and "num_points must be an integer >= 2" in (bad.error or "")
    assert {name: (folder / name).read_bytes() for name in before} == before  # the good report stays
    assert bad.ipynb_path == folder / f"{CHARTS}.failed.ipynb" and bad.ipynb_path.is_file()
    assert bad.html_path == folder / f"{CHARTS}.failed.html" and bad.html_path.is_file()
    # a later good render clears the failure
    (again,) = reports.render([CHARTS], notebooks_dir=FIXTURES, out_dir=tmp_path)
    assert again.ok and not (folder / f"{CHARTS}.failed.ipynb").exists()
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]
    injected = json.loads((folder / f"{CHARTS}.ipynb").read_text())
    source = "".join(
        "".join(c["source"]) for c in injected["cells"] if "injected-parameters" in c["metadata"].get("tags", [])
    )
    assert f"{CHARTS}.results.json" in source and str(tmp_path) not in source  # no local path


def test_cli_syntax_in_messages_and_bad_yaml_refused() -> None:
    message = 'Fix: pass a list, e.g. papermill -y "budgets: [256, 512]". Or papermill -p budget_tokens 2048.'
    assert reports.cli_syntax(message) == (
        'Fix: pass a list, e.g. python -m budgetlab.reports -p budgets "[256, 512]". '
        "Or python -m budgetlab.reports -p budget_tokens 2048."
    )
    code, _, stderr = run_main("03", "-p", "budgets", "[512,")
    assert code == 2 and "is not valid YAML" in stderr and '-p budgets "[512, 2048]"' in stderr


def test_concurrent_index_writes_lose_no_entry(tmp_path: Path) -> None:
    import threading

    from budgetlab.notebook.index import write_index
    from budgetlab.notebook.render import ReportOutcome

    def outcome(i: int) -> ReportOutcome:
        folder = tmp_path / "s"
        folder.mkdir(exist_ok=True)
        (folder / f"nb{i:03d}.ipynb").write_text("{}", encoding="utf-8")
        return ReportOutcome(
            notebook=f"nb{i:03d}", scenario="s", ok=True, seconds=0.1, ipynb_path=folder / f"nb{i:03d}.ipynb",
            html_path=folder / f"nb{i:03d}.html", handout_path=folder / f"nb{i:03d}-handout.html",
            results_path=folder / f"nb{i:03d}.results.json", parameters={},
        )  # fmt: skip

    outcomes = [outcome(i) for i in range(120)]
    threads = [threading.Thread(target=write_index, args=(tmp_path, [o])) for o in outcomes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    manifest = json.loads((tmp_path / "index.json").read_text())["reports"]
    assert len(manifest) == 120  # every render's entry survived the others
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".index")]  # no temporary left


def test_an_unwritable_out_folder_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    code, stdout, stderr = run_main(CHARTS, "--notebooks-dir", str(FIXTURES), "--out", str(blocker / "reports"))
    assert code == 2 and "Traceback" not in stderr + stdout
    assert f"error: cannot write reports into {blocker / 'reports'}" in stderr
    assert "Fix: pass --out" in stderr
    assert "Rendering" not in stdout  # refused before any kernel started


def test_publishing_a_report_waits_for_the_folder_lock(tmp_path: Path) -> None:
    """Two renders of one report that finish together: the second moves its files only after
    the first has moved all of its own, so the folder holds one render's files, not a mix."""
    import threading

    from budgetlab.notebook.index import locked, publish_report

    staging, folder = tmp_path / "staging", tmp_path / "out"
    staging.mkdir()
    folder.mkdir()
    staged = {key: staging / f"report.{key}" for key in ("html", "results")}
    for path in staged.values():
        path.write_text("new", encoding="utf-8")
    places = {key: folder / path.name for key, path in staged.items()}
    for path in places.values():
        path.write_text("old", encoding="utf-8")
    mover = threading.Thread(target=publish_report, args=(staged, places), kwargs={"stale": {}, "lock_dir": tmp_path})
    with locked(tmp_path):  # another render is moving its files
        mover.start()
        mover.join(timeout=1.0)
        assert mover.is_alive(), "the files were moved while another render held the lock"
        assert {p.read_text(encoding="utf-8") for p in places.values()} == {"old"}
    mover.join(timeout=10)
    assert {p.read_text(encoding="utf-8") for p in places.values()} == {"new"}


@pytest.mark.notebook
@pytest.mark.slow
def test_two_renders_of_one_report_at_once_leave_one_consistent_report(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "budgetlab.reports", CHARTS, "--notebooks-dir", str(FIXTURES)]
    runs = [
        subprocess.Popen([*command, "--out", str(tmp_path), "-s", "small", "-p", "slope", str(slope)], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for slope in (3.0, 7.0)
    ]  # fmt: skip
    for run in runs:
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
    folder = tmp_path / "small"
    slope = json.loads((folder / f"{CHARTS}.results.json").read_text())["slope"]
    injected = [
        "".join(c["source"])
        for c in json.loads((folder / f"{CHARTS}.ipynb").read_text())["cells"]
        if "injected-parameters" in c["metadata"].get("tags", [])
    ]
    assert f"slope = {slope}" in injected[0]  # the notebook and its results come from one run
    assert f"slope = {slope}" in (folder / f"{CHARTS}.html").read_text(encoding="utf-8")
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]
    assert len(json.loads((tmp_path / "index.json").read_text())["reports"]) == 1


@pytest.mark.notebook
@pytest.mark.slow
def test_ctrl_c_during_a_render_keeps_the_earlier_report(tmp_path: Path) -> None:
    import signal
    import time

    (good,) = reports.render([CHARTS], notebooks_dir=FIXTURES, out_dir=tmp_path, pdf=False)
    assert good.ok
    folder = tmp_path / "small"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    index_before = (tmp_path / "index.json").read_bytes()
    run = subprocess.Popen(
        [sys.executable, "-m", "budgetlab.reports", CHARTS, "--notebooks-dir", str(FIXTURES), "--out", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        # as from a terminal: a shell without job control starts background jobs (a CI tier
        # run with `&`) with SIGINT ignored, and Python keeps an ignored SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not [p for p in folder.iterdir() if p.name.startswith(f".budgetlab-staging-{CHARTS}.")]:  # its staging
        assert run.poll() is None and time.monotonic() < deadline, "the render never started"
        time.sleep(0.05)
    time.sleep(1.0)  # the kernel is starting or running
    os.killpg(run.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground process group
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 130, stdout + stderr
    # one line of ours, no traceback (a floor ipykernel may add its debugger's start-up warning)
    assert stderr.strip().splitlines()[-1] == "interrupted" and "Traceback" not in stderr, stderr
    # the earlier good report is untouched, byte for byte; nothing of the interrupted render
    # stays (no .failed files, no staging folder); the index still lists the good report
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert (tmp_path / "index.json").read_bytes() == index_before
