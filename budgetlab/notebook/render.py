"""Execute the planned jobs with papermill and export each into offline HTML.

:func:`render` runs every job of :func:`~budgetlab.notebook.plan.plan` from this one Python
process: papermill starts one kernel per report (``kernel_name="python3"``, working directory
the notebooks' folder), several at a time with ``jobs``; HTML is rendered by two reused nbconvert
exporters with the ``offline`` template in ``budgetlab/notebook/templates`` (see
:mod:`budgetlab.notebook.altair_setup` for how charts get there), the Vega bundle inlined once
per page. A failing notebook is reported in its :class:`ReportOutcome`; the others still render.
Finally the reports index is updated (:func:`budgetlab.notebook.index.write_index`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

from budgetlab.notebook.handout import find_chromium, handout_notebook, print_pdf
from budgetlab.notebook.index import write_index
from budgetlab.notebook.plan import RESULTS_PARAMETER, Folders, Job, notebook_title, plan, resolve_folders

__all__ = [
    "KERNEL_NAME",
    "TEMPLATES_DIR",
    "ReportOutcome",
    "make_exporters",
    "render",
    "vega_bundle",
]

TEMPLATES_DIR = Path(__file__).parent / "templates"
TEMPLATE_NAME = "offline"
KERNEL_NAME = "python3"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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
    pdf_path : Path or None
        The handout printed to PDF (``<notebook>-handout.pdf``); ``None`` when no PDF was asked
        for or no Chromium is installed.
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
    pdf_path: Path | None = None

    @property
    def name(self) -> str:
        """``scenario/notebook``."""
        return f"{self.scenario}/{self.notebook}"

    @property
    def status(self) -> str:
        """``"ok"`` or ``"FAILED"``."""
        return "ok" if self.ok else "FAILED"


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
    # vl_convert's stub marks ``snippet`` required; at run time it defaults to None (the whole bundle)
    bundle = vl_convert.javascript_bundle(vl_version=wanted if wanted in available else None)  # type: ignore[call-arg]
    # it is inlined in a <script> element: "</script" must not occur in it
    return re.sub(r"</(script)", r"<\\/\1", bundle, flags=re.IGNORECASE)


def make_exporters() -> tuple[Any, Any]:
    """Two reusable nbconvert HTML exporters with the offline template: report and handout."""
    from nbconvert import HTMLExporter

    common = {"template_name": TEMPLATE_NAME, "extra_template_basedirs": [str(TEMPLATES_DIR)]}
    report = HTMLExporter(**common)
    handout = HTMLExporter(**common, exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    return report, handout


def _export(exporter: Any, nb: Any, path: Path, *, title: str, scenario: str, parameters: Mapping[str, Any]) -> None:
    shown = [(name, json.dumps(value, default=str)) for name, value in parameters.items() if name != RESULTS_PARAMETER]
    resources = {
        "metadata": {"name": title},
        "vega_bundle": vega_bundle(),
        "budgetlab_report": {"scenario": scenario, "parameters": shown},
    }
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    path.write_text(body, encoding="utf-8")


# --------------------------------------------------------------------------------------------
# rendering


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


def _relative_results_path(nb: Any, staged: Path, name: str) -> None:
    """Show the results file by its name in the injected-parameters cell (no local path)."""
    for cell in nb.cells:
        if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            cell.source = cell.source.replace(repr(str(staged)), repr(name)).replace(str(staged), name)


def _run_job(
    job: Job,
    *,
    cwd: Path,
    exporters: tuple[Any, Any],
    export_lock: threading.Lock,
    kernel_name: str,
    cell_timeout_s: float | None,
    chromium: str | None = None,
) -> ReportOutcome:
    import nbformat
    import papermill

    start = time.perf_counter()
    final = {
        "ipynb": job.out_dir / f"{job.notebook}.ipynb",
        "html": job.out_dir / f"{job.notebook}.html",
        "handout": job.out_dir / f"{job.notebook}-handout.html",
        "results": job.results_path,
        "pdf": job.out_dir / f"{job.notebook}-handout.pdf",
    }
    failed = {
        key: path.with_name(f"{job.notebook}.failed{path.name[len(job.notebook) :]}") for key, path in final.items()
    }
    job.out_dir.mkdir(parents=True, exist_ok=True)
    # everything is written to a staging folder and moved into place only when the render
    # succeeded: a failed (or interrupted) render never replaces an earlier good report
    staging = Path(tempfile.mkdtemp(prefix=f".{job.notebook}.", dir=job.out_dir))
    staged = {key: staging / path.name for key, path in final.items()}
    ipynb, report_html, handout_html = staged["ipynb"], staged["html"], staged["handout"]
    parameters = dict(job.parameters)
    if RESULTS_PARAMETER in parameters:
        parameters[RESULTS_PARAMETER] = str(staged["results"])

    error: str | None = None
    try:
        papermill.execute_notebook(
            str(job.input_path),
            str(ipynb),
            parameters=parameters,
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
    except Exception as exc:  # any failure is reported, the others still render
        error = _error_message(exc)

    if ipynb.exists():
        try:
            nb = nbformat.read(ipynb, as_version=4)
            _relative_results_path(nb, staged["results"], final["results"].name)
            nbformat.write(nb, ipynb)
            title = notebook_title(job.input_path) or job.notebook
            with export_lock:
                for exporter, path, suffix, source in (
                    (exporters[0], report_html, "", nb),
                    (exporters[1], handout_html, " (handout)", handout_notebook(nb)),
                ):
                    page_title = f"{title} · {job.scenario}{suffix}"
                    _export(exporter, source, path, title=page_title, scenario=job.scenario, parameters=job.parameters)
        except Exception as exc:  # a failed export is reported like a failed cell
            error = error or f"rendering HTML failed: {_error_message(exc)}"
    elif error is None:
        error = "papermill wrote no notebook"
    if error is None and chromium is not None:
        try:
            print_pdf(handout_html, staged["pdf"], chromium=chromium)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            error = f"printing the handout PDF failed: {_error_message(exc)}"

    try:
        places = final if error is None else failed
        for key, path in staged.items():
            if path.exists():
                os.replace(path, places[key])
            elif error is None:
                final[key].unlink(missing_ok=True)  # not written this time: no stale copy stays
        if error is None:
            for path in failed.values():
                path.unlink(missing_ok=True)  # a failure of an earlier render is no longer true
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    paths = final if error is None else failed
    return ReportOutcome(
        notebook=job.notebook,
        scenario=job.scenario,
        ok=error is None,
        seconds=time.perf_counter() - start,
        ipynb_path=paths["ipynb"],
        html_path=paths["html"],
        handout_path=paths["handout"],
        results_path=paths["results"],
        parameters=dict(job.parameters),
        error=error,
        pdf_path=paths["pdf"] if paths["pdf"].exists() else None,
    )


def _in_worker_thread(run: Callable[[Job], ReportOutcome], job: Job) -> ReportOutcome:
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


def render(
    notebooks: Sequence[str] | None = None,
    scenarios: Sequence[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    jobs: int = 1,
    kernel_name: str = KERNEL_NAME,
    cell_timeout_s: float | None = 600.0,
    on_plan: Callable[[Sequence[Job]], None] | None = None,
    on_report: Callable[[ReportOutcome], None] | None = None,
    pdf: bool = True,
    **folders: Unpack[Folders],
) -> list[ReportOutcome]:
    """Execute and render every selected notebook × scenario; update the index.

    Parameters
    ----------
    notebooks, scenarios, overrides
        What to render, as for :func:`~budgetlab.notebook.plan.plan`.
    jobs : int
        Notebooks executed at the same time (threads of this process, one kernel each).
    kernel_name : str
        Jupyter kernel (``python3``: this environment's interpreter).
    cell_timeout_s : float or None
        Longest a single cell may run [s]; ``None`` for no limit.
    on_plan : callable, optional
        Called with the planned jobs (:func:`~budgetlab.notebook.plan.plan`) before any kernel
        starts, when there are any.
    on_report : callable, optional
        Called with each :class:`ReportOutcome` as soon as it is finished.
    pdf : bool
        Also print each handout to ``<notebook>-handout.pdf`` with headless Chromium
        (:mod:`budgetlab.notebook.handout`); skipped when no Chromium is installed.
    **folders
        ``notebooks_dir`` (also the kernels' working directory), ``params_dir``, ``out_dir``
        (see :class:`~budgetlab.notebook.plan.Folders`).

    Returns
    -------
    list of ReportOutcome
        In notebook-within-scenario order; empty when there is nothing to render.

    Raises
    ------
    ReportError
        See :func:`~budgetlab.notebook.plan.plan`.
    """
    notebooks_dir, params_dir, out_dir = resolve_folders(**folders)
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
    if on_plan:
        on_plan(work)

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
        chromium=find_chromium() if pdf else None,
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
                futures = {pool.submit(_in_worker_thread, run, job): i for i, job in enumerate(work)}
                for future in concurrent.futures.as_completed(futures):
                    i = futures[future]
                    outcomes[i] = future.result()
                    if on_report:
                        on_report(outcomes[i])
            finally:
                # on Ctrl-C, start no further notebook (the running kernels get the SIGINT too)
                pool.shutdown(wait=True, cancel_futures=True)

    ordered = [outcomes[i] for i in range(len(work))]
    titles = {job.notebook: notebook_title(job.input_path) for job in work}
    write_index(out_dir, ordered, titles=titles, overrides=dict(overrides or {}))
    return ordered
