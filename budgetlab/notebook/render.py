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
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

from budgetlab.notebook.handout import find_chromium, handout_notebook, print_pdf
from budgetlab.notebook.index import locked, write_index
from budgetlab.notebook.plan import (
    RESULTS_PARAMETER,
    Folders,
    Job,
    ReportError,
    notebook_title,
    plan,
    resolve_folders,
)

__all__ = [
    "KERNEL_NAME",
    "TEMPLATES_DIR",
    "ReportOutcome",
    "check_writable",
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
    lock_dir: Path,
    cancelled: threading.Event | None = None,
) -> ReportOutcome:
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
    try:  # the staging folder goes in the end, also on Ctrl-C
        error = _execute_and_export(
            job,
            staged,
            results_name=final["results"].name,
            cwd=cwd,
            exporters=exporters,
            export_lock=export_lock,
            kernel_name=kernel_name,
            cell_timeout_s=cell_timeout_s,
            chromium=chromium,
            cancelled=cancelled,
        )
        interrupted = cancelled is not None and cancelled.is_set()
        if interrupted:  # Ctrl-C: nothing of this render is kept, the earlier report stays
            error = "interrupted"
        else:
            ok = error is None
            _publish(staged, final if ok else failed, stale=failed if ok else {}, lock_dir=lock_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    paths = final if error is None or interrupted else failed
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


@contextlib.contextmanager
def _interrupt_deferred() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) that arrives inside the block until the block is done.

    Only the main thread receives signals, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _publish(
    staged: Mapping[str, Path], places: Mapping[str, Path], *, stale: Mapping[str, Path], lock_dir: Path
) -> None:
    """Move a render's files into their places, all of them or none, one render at a time.

    Under the folder's lock (:func:`~budgetlab.notebook.index.locked`), so two renders of the
    same report that finish together leave the files of one of them, not a mix; a Ctrl-C is
    held until the move is done. A file this render did not write is removed from its place
    (no stale copy stays), and so are the ``stale`` paths (the ``.failed`` files of an earlier
    render, once this one succeeded).
    """
    with locked(lock_dir), _interrupt_deferred():
        for key, path in staged.items():
            if path.exists():
                os.replace(path, places[key])
            else:
                places[key].unlink(missing_ok=True)
        for path in stale.values():
            path.unlink(missing_ok=True)


def _execute_and_export(
    job: Job,
    staged: Mapping[str, Path],
    *,
    results_name: str,
    cwd: Path,
    exporters: tuple[Any, Any],
    export_lock: threading.Lock,
    kernel_name: str,
    cell_timeout_s: float | None,
    chromium: str | None,
    cancelled: threading.Event | None = None,
) -> str | None:
    """Execute one job into the staged paths, export its HTML and PDF; the error, or ``None``."""
    import nbformat
    import papermill

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
            # kernels run in their own session, so a Ctrl-C here never reaches them: this
            # manager lets render() interrupt them itself (_interrupt_kernels)
            kernel_manager_class=_interruptible_kernel_manager(),
        )
    except Exception as exc:  # any failure is reported, the others still render
        error = _error_message(exc)
    if cancelled is not None and cancelled.is_set():
        return "interrupted"  # no export: render() is stopping

    if ipynb.exists():
        try:
            nb = nbformat.read(ipynb, as_version=4)
            _relative_results_path(nb, staged["results"], results_name)
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

    return error


_KERNELS: set[Any] = set()
_KERNELS_LOCK = threading.Lock()


@functools.cache
def _interruptible_kernel_manager() -> type:
    """jupyter_client's kernel manager, keeping a register of the kernels running now."""
    from jupyter_client import AsyncKernelManager

    # jupyter_client types these as synchronous; in the async manager they are coroutines
    class InterruptibleKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]
            with _KERNELS_LOCK:
                _KERNELS.add(self)
            # the kernel process's own stderr carries no cell output (that travels over
            # ZeroMQ), only its start-up noise, e.g. a traceback when interrupted while importing
            kw.setdefault("stderr", subprocess.DEVNULL)
            await super().start_kernel(**kw)

        async def shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:  # type: ignore[override]
            with _KERNELS_LOCK:
                _KERNELS.discard(self)
            await super().shutdown_kernel(now=now, restart=restart)

    return InterruptibleKernelManager


def _interrupt_kernels() -> None:
    """Send SIGINT to every kernel a render started, as Ctrl-C in a notebook would: the cell
    running stops, so does the notebook."""
    with _KERNELS_LOCK:
        managers = list(_KERNELS)
    for manager in managers:
        pid = getattr(getattr(manager, "provisioner", None), "pid", None)
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGINT)


def check_writable(folders: Sequence[Path]) -> None:
    """Make each folder (and its parents) and write a file in it, before any kernel starts.

    Raises
    ------
    ReportError
        Naming the folder and the system's reason, when one cannot be made or written.
    """
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ReportError(
                f"cannot write reports into {folder}/: {reason}; "
                "Fix: pass --out (out_dir=) a folder you can write, or fix that folder's permissions"
            ) from None


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
        See :func:`~budgetlab.notebook.plan.plan`; also when an output folder cannot be written
        (checked before any kernel starts).
    KeyboardInterrupt
        On Ctrl-C: the running notebooks are interrupted at their current cell and nothing of
        theirs is kept; earlier reports and the index stay as they were.
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
    check_writable(sorted({job.out_dir for job in work}))
    if on_plan:
        on_plan(work)

    # build the bundle while the first kernels start
    threading.Thread(target=vega_bundle, name="vega-bundle", daemon=True).start()
    exporters = make_exporters()
    lock = threading.Lock()
    cancelled = threading.Event()
    run = functools.partial(
        _run_job,
        cwd=notebooks_dir,
        exporters=exporters,
        export_lock=lock,
        kernel_name=kernel_name,
        cell_timeout_s=cell_timeout_s,
        chromium=find_chromium() if pdf else None,
        lock_dir=out_dir,
        cancelled=cancelled,
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
            except KeyboardInterrupt:
                # the running notebooks stop at their current cell and keep nothing
                cancelled.set()
                _interrupt_kernels()
                raise
            finally:
                # on Ctrl-C, start no further notebook (the running kernels get the SIGINT too)
                pool.shutdown(wait=True, cancel_futures=True)

    ordered = [outcomes[i] for i in range(len(work))]
    titles = {job.notebook: notebook_title(job.input_path) for job in work}
    write_index(out_dir, ordered, titles=titles, overrides=dict(overrides or {}))
    return ordered
