"""Render the notebooks × scenarios into offline HTML reports, handouts and results files.

Usage (from the repository root; ``make reports`` runs the first line)::

    python -m budgetlab.reports                          # every notebook × every scenario
    python -m budgetlab.reports 03 --scenario h200-llama-3.1-8b -p budgets "[512, 2048, 8192]"
    python -m budgetlab.reports --list                   # notebooks, their parameters, scenarios

For each scenario ``S`` (``notebooks/params/S.yaml``) and notebook ``N`` (``notebooks/N.ipynb``)
this writes into ``reports/S/``:

``N.ipynb``
    the notebook executed by papermill (kept, partial, when a cell fails);
``N.html``
    the report: code, outputs and narrative, every chart drawn offline;
``N-handout.html``
    the same without code cells' inputs or prompts;
``N.results.json``
    the report's key numbers, written by the notebook itself (its ``results_path`` parameter
    is set to this file's absolute path; see :mod:`budgetlab.results`),

and finally ``reports/index.html`` (links to every report rendered so far, with its status)
and ``reports/index.json`` (the same as data).

Scenarios are flat YAML mappings of parameter name → value, the union over all notebooks; each
notebook receives only the parameters its ``parameters`` cell declares. A key no notebook
declares is an error (a typo would otherwise be ignored silently). ``-p NAME VALUE`` overrides
a parameter in every selected notebook that declares it; VALUE is parsed as YAML, so
``-p budgets "[512, 2048]"`` is a list and ``-p budgets true`` a bool (which the notebook's
validation then rejects with a clear message).

All reports are rendered from this one Python process: papermill starts one kernel per report
(``kernel_name="python3"``, working directory ``notebooks/``), several at a time with
``--jobs``; HTML is rendered by two reused nbconvert exporters with the ``offline`` template in
``budgetlab/templates`` (see :mod:`budgetlab.altair_setup` for how charts get there).

Exit status: 0 when every report rendered (or there is nothing to render yet), 1 when a
notebook failed (the others still render), 2 for a command-line or scenario error.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import functools
import html
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from budgetlab.altair_setup import use_offline_renderer
from budgetlab.errors import BudgetlabError

__all__ = [
    "ReportError",
    "ReportOutcome",
    "find_notebooks",
    "find_scenarios",
    "load_scenario",
    "main",
    "make_exporters",
    "notebook_parameters",
    "parse_override",
    "render",
    "select_notebooks",
    "use_offline_renderer",
    "vega_bundle",
]

TEMPLATES_DIR = Path(__file__).parent / "templates"
TEMPLATE_NAME = "offline"
KERNEL_NAME = "python3"
RESULTS_PARAMETER = "results_path"
INDEX_HTML = "index.html"
INDEX_JSON = "index.json"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ReportError(BudgetlabError, ValueError):
    """A notebook, scenario or parameter named on the command line or in a scenario file
    does not exist (the message lists what does)."""


@dataclasses.dataclass(frozen=True)
class ReportOutcome:
    """What happened to one notebook × scenario.

    Attributes
    ----------
    notebook, scenario : str
        Names without suffix (``01-step-cost``, ``h100-llama-3.1-8b``).
    ok : bool
        Whether every cell ran and both HTML files were written.
    seconds : float
        Wall time for executing and rendering this report [s].
    ipynb_path, html_path, handout_path, results_path : Path
        The four outputs (they exist only where that step got that far).
    parameters : dict
        The parameters passed to papermill (``results_path`` included).
    error : str or None
        ``"ExceptionName: message"`` for a failed report.
    """

    notebook: str
    scenario: str
    ok: bool
    seconds: float
    ipynb_path: Path
    html_path: Path
    handout_path: Path
    results_path: Path
    parameters: dict[str, Any]
    error: str | None = None

    @property
    def name(self) -> str:
        """``scenario/notebook``."""
        return f"{self.scenario}/{self.notebook}"

    @property
    def status(self) -> str:
        """``"ok"`` or ``"FAILED"``."""
        return "ok" if self.ok else "FAILED"


# --------------------------------------------------------------------------------------------
# discovery


def find_notebooks(notebooks_dir: Path) -> dict[str, Path]:
    """Notebooks in ``notebooks_dir`` by name (file stem), sorted; ``{}`` if there are none.

    Files starting with ``.`` or ``_`` are skipped.
    """
    notebooks_dir = Path(notebooks_dir)
    if not notebooks_dir.is_dir():
        return {}
    paths = sorted(p for p in notebooks_dir.glob("*.ipynb") if not p.name.startswith((".", "_")))
    return {p.stem: p for p in paths}


def find_scenarios(params_dir: Path) -> dict[str, Path]:
    """Scenario files (``*.yaml``, ``*.yml``) in ``params_dir`` by name, sorted."""
    params_dir = Path(params_dir)
    if not params_dir.is_dir():
        return {}
    paths = sorted(p for p in params_dir.iterdir() if p.suffix in {".yaml", ".yml"} and p.is_file())
    return {p.stem: p for p in paths if not p.name.startswith((".", "_"))}


def select_notebooks(names: Sequence[str], available: Mapping[str, Path]) -> list[str]:
    """Resolve notebook names given with or without ``.ipynb``, as paths, or as prefixes.

    A prefix selects every notebook starting with it (``03`` → ``03-ttft-vs-budget``).

    Raises
    ------
    ReportError
        A name matches no notebook (the message lists the notebooks).
    """
    chosen: list[str] = []
    for raw in names:
        name = Path(raw).name.removesuffix(".ipynb")
        matches = [name] if name in available else [n for n in available if n.startswith(name)]
        if not name or not matches:
            listing = ", ".join(available) or "none"
            raise ReportError(f"no notebook named {raw!r}; the notebooks are: {listing}")
        chosen.extend(m for m in matches if m not in chosen)
    return [n for n in available if n in chosen]


def select_scenarios(names: Sequence[str], available: Mapping[str, Path]) -> list[str]:
    """Resolve scenario names (file stems, ``.yaml`` optional); unknown → :class:`ReportError`."""
    chosen: list[str] = []
    for raw in names:
        name = Path(raw).name.removesuffix(".yaml").removesuffix(".yml")
        if name not in available:
            listing = ", ".join(available) or "none"
            raise ReportError(f"no scenario named {raw!r}; the scenarios are: {listing}")
        if name not in chosen:
            chosen.append(name)
    return chosen


def load_scenario(path: Path) -> dict[str, Any]:
    """Read a scenario file: a flat YAML mapping of parameter name → value (empty → ``{}``)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ReportError(f"scenario {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ReportError(
            f"scenario {path} must be a mapping of parameter name to value, "
            f"got {type(data).__name__}"
        )
    return data


def notebook_parameters(path: Path) -> dict[str, dict[str, Any]]:
    """The parameters a notebook's ``parameters`` cell declares (``papermill.inspect_notebook``).

    Returns name → ``{"name", "inferred_type_name", "default", "help"}``; no kernel is started.
    """
    import papermill

    return dict(papermill.inspect_notebook(str(path)))


def parse_override(value: str) -> Any:
    """Parse a ``-p`` value as YAML.

    ``"[512, 2048]"`` → list, ``"true"`` → bool, ``"5000"`` → int, ``"h100-sxm"`` → str.

    Text that is not valid YAML is kept as the string itself.
    """
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


# --------------------------------------------------------------------------------------------
# HTML


_BUNDLE_LOCK = threading.Lock()


def vega_bundle() -> str:
    """Vega + Vega-Lite + Vega-Embed as one script (``vl_convert.javascript_bundle``), cached.

    The Vega-Lite version matches the installed Altair's (major.minor) when vl-convert ships it.
    Building it takes about 2 s, once per process.
    """
    with _BUNDLE_LOCK:
        return _vega_bundle()


@functools.cache
def _vega_bundle() -> str:
    import altair as alt
    import vl_convert

    wanted = ".".join(str(alt.VEGALITE_VERSION).split(".")[:2])
    available = list(vl_convert.get_vegalite_versions())
    if wanted in available:
        bundle = vl_convert.javascript_bundle(vl_version=wanted)
    else:
        bundle = vl_convert.javascript_bundle()
    # it is inlined in a <script> element: "</script" must not occur in it
    return re.sub(r"</(script)", r"<\\/\1", bundle, flags=re.IGNORECASE)


def make_exporters() -> tuple[Any, Any]:
    """Two reusable nbconvert HTML exporters with the offline template: report and handout."""
    from nbconvert import HTMLExporter

    common = {"template_name": TEMPLATE_NAME, "extra_template_basedirs": [str(TEMPLATES_DIR)]}
    report = HTMLExporter(**common)
    handout = HTMLExporter(
        **common, exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True
    )
    return report, handout


def _export(
    exporter: Any, nb: Any, path: Path, *, title: str, scenario: str, parameters: Mapping[str, Any]
) -> None:
    shown = [
        (name, json.dumps(value, default=str))
        for name, value in parameters.items()
        if name != RESULTS_PARAMETER
    ]
    resources = {
        "metadata": {"name": title},
        "vega_bundle": vega_bundle(),
        "budgetlab_report": {"scenario": scenario, "parameters": shown},
    }
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    path.write_text(body, encoding="utf-8")


# --------------------------------------------------------------------------------------------
# rendering


@dataclasses.dataclass(frozen=True)
class _Job:
    notebook: str
    scenario: str
    input_path: Path
    out_dir: Path
    parameters: dict[str, Any]
    results_path: Path


def _first_heading(path: Path) -> str:
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            source = cell.get("source", "")
            text = "".join(source) if isinstance(source, list) else source
            for line in text.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


def _error_message(exc: BaseException) -> str:
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        evalue = _ANSI.sub("", str(exc.evalue)).strip()
        where = f" (cell [{exc.exec_count}])" if exc.exec_count is not None else ""
        return f"{exc.ename}: {evalue}{where}"
    text = _ANSI.sub("", str(exc)).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


@contextlib.contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    # papermill chdir()s into cwd around each run; with several runs in threads, every one must
    # find (and restore) the same directory, so enter it once for the whole batch.
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _run_job(
    job: _Job,
    *,
    cwd: Path,
    exporters: tuple[Any, Any],
    export_lock: threading.Lock,
    kernel_name: str,
    cell_timeout_s: float | None,
) -> ReportOutcome:
    import nbformat
    import papermill

    start = time.perf_counter()
    ipynb = job.out_dir / f"{job.notebook}.ipynb"
    report_html = job.out_dir / f"{job.notebook}.html"
    handout_html = job.out_dir / f"{job.notebook}-handout.html"
    job.out_dir.mkdir(parents=True, exist_ok=True)
    for stale in (ipynb, report_html, handout_html, job.results_path):
        stale.unlink(missing_ok=True)

    error: str | None = None
    try:
        papermill.execute_notebook(
            str(job.input_path),
            str(ipynb),
            parameters=job.parameters,
            kernel_name=kernel_name,
            cwd=str(cwd),
            progress_bar=False,
            log_output=False,
            # one save at the end (papermill writes the partial notebook on failure too);
            # saving after every cell doubled the render time
            request_save_on_cell_execute=False,
            execution_timeout=cell_timeout_s,
            # silences the kernel's own log: its start-up banner ("running over TCP without
            # encryption") and the "KeyboardInterrupt caught" line jupyter_client's shutdown
            # interrupt provokes; errors in cells still reach the notebook and this process
            extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
        )
    except Exception as exc:  # noqa: BLE001 - any failure is reported, the others still render
        error = _error_message(exc)

    if ipynb.exists():
        try:
            nb = nbformat.read(ipynb, as_version=4)
            title = _first_heading(job.input_path) or job.notebook
            about = {"scenario": job.scenario, "parameters": job.parameters}
            with export_lock:
                _export(exporters[0], nb, report_html, title=f"{title} · {job.scenario}", **about)
                handout_title = f"{title} · {job.scenario} (handout)"
                _export(exporters[1], nb, handout_html, title=handout_title, **about)
        except Exception as exc:  # noqa: BLE001
            error = error or f"rendering HTML failed: {_error_message(exc)}"
    elif error is None:
        error = "papermill wrote no notebook"

    return ReportOutcome(
        notebook=job.notebook,
        scenario=job.scenario,
        ok=error is None,
        seconds=time.perf_counter() - start,
        ipynb_path=ipynb,
        html_path=report_html,
        handout_path=handout_html,
        results_path=job.results_path,
        parameters=dict(job.parameters),
        error=error,
    )


def _in_worker_thread(run: Callable[[_Job], ReportOutcome], job: _Job) -> ReportOutcome:
    # papermill drives the kernel through an event loop per thread (jupyter_core's run_sync);
    # close this thread's loop afterwards, or it leaks sockets when the pool's threads end.
    try:
        return run(job)
    finally:
        try:
            from jupyter_core.utils import ensure_event_loop
        except ImportError:  # older jupyter_core: nothing to close
            pass
        else:
            loop = ensure_event_loop()
            if not loop.is_running():
                loop.close()


def plan(
    notebooks: Sequence[str] | None = None,
    scenarios: Sequence[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    notebooks_dir: Path = Path("notebooks"),
    params_dir: Path | None = None,
    out_dir: Path = Path("reports"),
) -> list[_Job]:
    """Check names and parameters and list the runs :func:`render` would do (no kernel).

    Raises
    ------
    ReportError
        Unknown notebook or scenario, a scenario key or ``-p`` name that no notebook declares,
        or an attempt to set ``results_path``.
    """
    notebooks_dir = Path(notebooks_dir).resolve()
    params_dir = (notebooks_dir / "params") if params_dir is None else Path(params_dir).resolve()
    out_dir = Path(out_dir).resolve()
    overrides = dict(overrides or {})

    available = find_notebooks(notebooks_dir)
    scenario_files = find_scenarios(params_dir)
    chosen_notebooks = select_notebooks(notebooks, available) if notebooks else list(available)
    chosen_scenarios = (
        select_scenarios(scenarios, scenario_files) if scenarios else list(scenario_files)
    )
    if not available or not scenario_files:
        return []

    declared = {name: notebook_parameters(path) for name, path in available.items()}
    all_declared = set().union(*declared.values())
    selected_declared = set().union(*(declared[n] for n in chosen_notebooks))

    if RESULTS_PARAMETER in overrides:
        raise ReportError(
            f"{RESULTS_PARAMETER} is set by budgetlab.reports; do not pass it with -p"
        )
    unknown = sorted(set(overrides) - selected_declared)
    if unknown:
        raise ReportError(
            f"-p {', '.join(unknown)}: no selected notebook declares "
            f"{'this parameter' if len(unknown) == 1 else 'these parameters'}; "
            f"they declare: {', '.join(sorted(selected_declared - {RESULTS_PARAMETER})) or 'none'}"
        )

    jobs: list[_Job] = []
    for scenario in chosen_scenarios:
        values = load_scenario(scenario_files[scenario])
        if RESULTS_PARAMETER in values:
            raise ReportError(
                f"scenario {scenario_files[scenario]} sets {RESULTS_PARAMETER}, which "
                f"budgetlab.reports sets itself; remove it"
            )
        stray = sorted(set(values) - all_declared)
        if stray:
            raise ReportError(
                f"scenario {scenario_files[scenario]} sets {', '.join(stray)}, which no notebook "
                f"declares; the notebooks' parameters are: "
                f"{', '.join(sorted(all_declared - {RESULTS_PARAMETER})) or 'none'}"
            )
        values.update(overrides)
        for notebook in chosen_notebooks:
            names = declared[notebook]
            parameters = {k: v for k, v in values.items() if k in names}
            results_path = out_dir / scenario / f"{notebook}.results.json"
            if RESULTS_PARAMETER in names:
                parameters[RESULTS_PARAMETER] = str(results_path)
            jobs.append(
                _Job(
                    notebook=notebook,
                    scenario=scenario,
                    input_path=available[notebook],
                    out_dir=out_dir / scenario,
                    parameters=parameters,
                    results_path=results_path,
                )
            )
    return jobs


def render(
    notebooks: Sequence[str] | None = None,
    scenarios: Sequence[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    notebooks_dir: Path = Path("notebooks"),
    params_dir: Path | None = None,
    out_dir: Path = Path("reports"),
    jobs: int = 1,
    kernel_name: str = KERNEL_NAME,
    cell_timeout_s: float | None = 600.0,
    on_report: Callable[[ReportOutcome], None] | None = None,
) -> list[ReportOutcome]:
    """Execute and render every selected notebook × scenario; update the index.

    Parameters
    ----------
    notebooks, scenarios : sequence of str, optional
        Names to render (see :func:`select_notebooks`); all when omitted.
    overrides : mapping, optional
        Parameter values applied to every selected notebook that declares them.
    notebooks_dir : Path
        Where the ``*.ipynb`` live; also the kernels' working directory.
    params_dir : Path, optional
        Scenario files; ``notebooks_dir / "params"`` when omitted.
    out_dir : Path
        Output root (``reports``).
    jobs : int
        Notebooks executed at the same time (threads of this process, one kernel each).
    kernel_name : str
        Jupyter kernel (``python3``: this environment's interpreter).
    cell_timeout_s : float or None
        Longest a single cell may run [s]; ``None`` for no limit.
    on_report : callable, optional
        Called with each :class:`ReportOutcome` as soon as it is finished.

    Returns
    -------
    list of ReportOutcome
        In notebook-within-scenario order; empty when there is nothing to render.

    Raises
    ------
    ReportError
        See :func:`plan`.
    """
    notebooks_dir = Path(notebooks_dir).resolve()
    out_dir = Path(out_dir).resolve()
    work = plan(
        notebooks,
        scenarios,
        overrides,
        notebooks_dir=notebooks_dir,
        params_dir=params_dir,
        out_dir=out_dir,
    )
    if not work:
        return []

    # build the bundle while the first kernels start
    threading.Thread(target=vega_bundle, name="vega-bundle", daemon=True).start()
    exporters = make_exporters()
    lock = threading.Lock()
    run = functools.partial(
        _run_job,
        cwd=notebooks_dir,
        exporters=exporters,
        export_lock=lock,
        kernel_name=kernel_name,
        cell_timeout_s=cell_timeout_s,
    )
    outcomes: dict[int, ReportOutcome] = {}
    with _working_directory(notebooks_dir):
        if jobs <= 1:
            for i, job in enumerate(work):
                outcomes[i] = run(job)
                if on_report:
                    on_report(outcomes[i])
        else:
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
            try:
                futures = {
                    pool.submit(_in_worker_thread, run, job): i for i, job in enumerate(work)
                }
                for future in concurrent.futures.as_completed(futures):
                    i = futures[future]
                    outcomes[i] = future.result()
                    if on_report:
                        on_report(outcomes[i])
            finally:
                # on Ctrl-C, start no further notebook (the running kernels get the SIGINT too)
                pool.shutdown(wait=True, cancel_futures=True)

    ordered = [outcomes[i] for i in range(len(work))]
    titles = {job.notebook: _first_heading(job.input_path) for job in work}
    write_index(out_dir, ordered, titles=titles, overrides=dict(overrides or {}))
    return ordered


# --------------------------------------------------------------------------------------------
# index


def _load_manifest(out_dir: Path) -> list[dict[str, Any]]:
    try:
        entries = json.loads((out_dir / INDEX_JSON).read_text(encoding="utf-8"))["reports"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [e for e in entries if isinstance(e, dict) and {"scenario", "notebook"} <= set(e)]


def write_index(
    out_dir: Path,
    outcomes: Sequence[ReportOutcome],
    *,
    titles: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Path:
    """Merge ``outcomes`` into ``out_dir/index.json`` and rewrite ``out_dir/index.html``.

    Reports rendered by earlier runs stay listed while their notebook file exists.
    """
    out_dir = Path(out_dir)
    titles = titles or {}
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    entries = {(e["scenario"], e["notebook"]): e for e in _load_manifest(out_dir)}
    for o in outcomes:
        entries[(o.scenario, o.notebook)] = {
            "scenario": o.scenario,
            "notebook": o.notebook,
            "title": titles.get(o.notebook, ""),
            "status": o.status,
            "seconds": round(o.seconds, 2),
            "error": o.error,
            "overrides": {k: v for k, v in (overrides or {}).items() if k in o.parameters},
            "rendered_at": now,
        }
    kept = [
        entries[key]
        for key in sorted(entries)
        if (out_dir / key[0] / f"{key[1]}.ipynb").exists()
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / INDEX_JSON).write_text(
        json.dumps({"reports": kept}, indent=2, default=str) + "\n", encoding="utf-8"
    )
    path = out_dir / INDEX_HTML
    path.write_text(_index_html(out_dir, kept), encoding="utf-8")
    return path


_INDEX_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto;
       max-width: 1100px; padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.6em; margin-bottom: .2em; }
h2 { font-size: 1.2em; margin-top: 1.8em; }
p.lead { color: #555; margin-top: 0; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .35em .6em; border-bottom: 1px solid #ddd;
         vertical-align: top; }
th { background: #f4f4f6; font-weight: 600; }
td.links { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.ok { color: #1a7f37; font-weight: 600; }
.failed { color: #b00020; font-weight: 600; }
.error { color: #b00020; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em;
         white-space: pre-wrap; }
code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em; }
.muted { color: #777; }
"""


def _index_html(out_dir: Path, entries: Sequence[Mapping[str, Any]]) -> str:
    esc = html.escape
    by_scenario: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        by_scenario.setdefault(str(e["scenario"]), []).append(e)
    failed = sum(1 for e in entries if e.get("status") != "ok")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>budgetlab reports</title>",
        f"<style>{_INDEX_CSS}</style></head><body>",
        "<h1>budgetlab reports</h1>",
        f'<p class="lead">{len(entries)} report{"s" * (len(entries) != 1)} in '
        f"{len(by_scenario)} scenario{'s' * (len(by_scenario) != 1)}"
        + (f', <span class="failed">{failed} failed</span>' if failed else "")
        + ". Every page opens offline. Rebuild with <code>make reports</code> or "
        "<code>python -m budgetlab.reports</code>.</p>",
    ]
    for scenario, rows in by_scenario.items():
        parts.append(f'<h2 id="{esc(scenario)}">Scenario <code>{esc(scenario)}</code></h2>')
        parts.append(
            "<table><thead><tr><th>Notebook</th><th>Status</th><th>Report</th><th>Handout</th>"
            "<th>Results</th><th>Time</th><th>Notes</th></tr></thead><tbody>"
        )
        for e in rows:
            nb = str(e["notebook"])
            base = f"{scenario}/{nb}"

            def link(rel: str, label: str) -> str:
                if (out_dir / rel).exists():
                    return f'<a href="{esc(rel)}">{esc(label)}</a>'
                return '<span class="muted">–</span>'

            ok = e.get("status") == "ok"
            title = str(e.get("title") or "")
            name_cell = f"<code>{esc(nb)}</code>" + (f"<br>{esc(title)}" if title else "")
            notes = []
            if e.get("overrides"):
                shown = ", ".join(
                    f"{k}={json.dumps(v, default=str)}" for k, v in e["overrides"].items()
                )
                notes.append(f"<code>-p {esc(shown)}</code>")
            if e.get("error"):
                notes.append(f'<span class="error">{esc(str(e["error"]))}</span>')
            parts.append(
                "<tr>"
                f"<td>{name_cell}</td>"
                f'<td class="{"ok" if ok else "failed"}">{"ok" if ok else "FAILED"}</td>'
                f"<td>{link(base + '.html', 'report')}</td>"
                f"<td>{link(base + '-handout.html', 'handout')}</td>"
                f'<td class="links">{link(base + ".results.json", "JSON")} · '
                f"{link(base + '.ipynb', 'ipynb')}</td>"
                f'<td class="num">{float(e.get("seconds") or 0):.1f} s</td>'
                f"<td>{'<br>'.join(notes)}</td>"
                "</tr>"
            )
        parts.append("</tbody></table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------
# command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m budgetlab.reports",
        description="Render budgetlab notebooks × scenarios into offline HTML reports, "
        "handouts and results JSON under reports/.",
    )
    p.add_argument(
        "notebooks",
        nargs="*",
        metavar="NOTEBOOK",
        help="notebooks to render, with or without .ipynb, or a prefix such as 03 (default: all)",
    )
    p.add_argument(
        "-s",
        "--scenario",
        action="append",
        default=[],
        metavar="NAME",
        help="scenario from notebooks/params/NAME.yaml; repeatable (default: all)",
    )
    p.add_argument(
        "-p",
        "--parameter",
        action="append",
        nargs=2,
        default=[],
        metavar=("NAME", "VALUE"),
        help="override a parameter in every selected notebook that declares it; "
        'VALUE is YAML: -p budgets "[512, 2048]"',
    )
    p.add_argument("--out", type=Path, default=Path("reports"), help="output folder (reports)")
    p.add_argument(
        "--notebooks-dir", type=Path, default=Path("notebooks"), help="notebook folder (notebooks)"
    )
    p.add_argument(
        "--params-dir", type=Path, default=None, help="scenario folder (NOTEBOOKS_DIR/params)"
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=min(4, os.cpu_count() or 1),
        help="notebooks executed at once (default: %(default)s)",
    )
    p.add_argument(
        "--list", action="store_true", help="list notebooks, their parameters and scenarios"
    )
    return p


def _list(notebooks_dir: Path, params_dir: Path) -> None:
    notebooks = find_notebooks(notebooks_dir)
    scenarios = find_scenarios(params_dir)
    print(f"Notebooks in {notebooks_dir}/:" if notebooks else f"No notebooks in {notebooks_dir}/.")
    for name, path in notebooks.items():
        params = notebook_parameters(path)
        shown = ", ".join(
            f"{k}: {v.get('inferred_type_name') or '?'}" for k, v in params.items()
            if k != RESULTS_PARAMETER
        )
        print(f"  {name}" + (f"  ({shown})" if shown else "  (no parameters)"))
    print(f"Scenarios in {params_dir}/:" if scenarios else f"No scenarios in {params_dir}/.")
    for name in scenarios:
        print(f"  {name}")


def _print_summary(outcomes: Sequence[ReportOutcome], elapsed_s: float, index: Path) -> None:
    w_s = max([len("scenario")] + [len(o.scenario) for o in outcomes])
    w_n = max([len("notebook")] + [len(o.notebook) for o in outcomes])
    print()
    print(f"{'scenario':<{w_s}}  {'notebook':<{w_n}}  {'seconds':>7}  status")
    print(f"{'-' * w_s}  {'-' * w_n}  {'-' * 7}  ------")
    for o in outcomes:
        print(f"{o.scenario:<{w_s}}  {o.notebook:<{w_n}}  {o.seconds:7.1f}  {o.status}")
    failed = [o for o in outcomes if not o.ok]
    print(
        f"\n{len(outcomes)} report{'s' * (len(outcomes) != 1)}: {len(outcomes) - len(failed)} ok, "
        f"{len(failed)} failed, in {elapsed_s:.1f} s. Index: {index}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 1 a report failed, 2 usage)."""
    parser = _parser()
    args = parser.parse_args(argv)
    notebooks_dir: Path = args.notebooks_dir
    params_dir: Path = args.params_dir if args.params_dir is not None else notebooks_dir / "params"

    if args.list:
        _list(notebooks_dir, params_dir)
        return 0
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")

    overrides = {name: parse_override(value) for name, value in args.parameter}
    notebooks = find_notebooks(notebooks_dir)
    scenarios = find_scenarios(params_dir)
    try:
        work = plan(
            args.notebooks,
            args.scenario,
            overrides,
            notebooks_dir=notebooks_dir,
            params_dir=params_dir,
            out_dir=args.out,
        )
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not notebooks:
        print(f"Nothing to render: no notebooks (*.ipynb) in {notebooks_dir}/.")
        return 0
    if not scenarios:
        print(f"Nothing to render: no scenarios (*.yaml) in {params_dir}/.")
        return 0

    total = len(work)
    print(
        f"Rendering {total} report{'s' * (total != 1)} "
        f"({len({j.notebook for j in work})} notebooks × {len({j.scenario for j in work})} "
        f"scenarios) into {args.out}/ with {min(args.jobs, total)} kernel(s) at a time",
        flush=True,
    )
    silent = sorted({j.notebook for j in work if RESULTS_PARAMETER not in j.parameters})
    if silent:
        print(
            f"note: {', '.join(silent)} declare{'s' * (len(silent) == 1)} no {RESULTS_PARAMETER} "
            f"parameter, so no results JSON will be written for "
            f"{'it' if len(silent) == 1 else 'them'}"
        )
    done = 0

    def progress(o: ReportOutcome) -> None:
        nonlocal done
        done += 1
        tail = f"  {o.error}" if o.error else ""
        counter = f"[{done:>{len(str(total))}}/{total}]"
        print(f"{counter} {o.name:<48} {o.seconds:6.1f} s  {o.status}{tail}", flush=True)

    start = time.perf_counter()
    try:
        outcomes = render(
            args.notebooks,
            args.scenario,
            overrides,
            notebooks_dir=notebooks_dir,
            params_dir=params_dir,
            out_dir=args.out,
            jobs=args.jobs,
            on_report=progress,
        )
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    _print_summary(outcomes, time.perf_counter() - start, args.out / INDEX_HTML)
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        print(f"FAILED {o.name}: {o.error} (partial notebook: {o.ipynb_path})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
