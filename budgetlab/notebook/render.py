"""Execute the planned jobs with papermill and export each into offline HTML.

:func:`render` runs every job of :func:`~budgetlab.notebook.plan.plan` from this one Python
process: papermill starts one kernel per report (``kernel_name="python3"``, working directory
the notebooks' folder), several at a time with ``jobs``; HTML is rendered by two reused nbconvert
exporters with the ``offline`` template in ``budgetlab/notebook/templates`` (see
:mod:`budgetlab.notebook.altair_setup` for how charts get there), the Vega bundle inlined once
per page. A failing notebook is reported in its :class:`ReportOutcome`; the others still render.

Each report is written into a staging folder and published, as soon as it is finished, together
with its entry in the reports index (:func:`budgetlab.notebook.index.publish_report`): after
SIGINT or SIGTERM at any moment every report and its entry are either as before or wholly new
(:mod:`budgetlab.notebook.publish`), and a file that cannot be written stops the render with one
:class:`~budgetlab.notebook.plan.ReportError`, publishing nothing half-written.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import errno
import functools
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

from budgetlab.notebook.handout import find_chromium, handout_notebook, print_pdf
from budgetlab.notebook.index import publish_report
from budgetlab.notebook.plan import (
    RESULTS_PARAMETER,
    Folders,
    Job,
    ReportError,
    notebook_title,
    plan,
    resolve_folders,
)
from budgetlab.notebook.publish import (
    LEGACY_LOCK,
    RenderInterrupted,
    Staging,
    remove_stale_staging,
    stop_on_signals,
    write_atomically,
)

__all__ = [
    "KERNEL_NAME",
    "TEMPLATES_DIR",
    "RenderInterrupted",
    "ReportOutcome",
    "check_writable",
    "make_exporters",
    "render",
    "vega_bundle",
]

TEMPLATES_DIR = Path(__file__).parent / "templates"
TEMPLATE_NAME = "offline"
KERNEL_NAME = "python3"
KILL_AFTER_S = 10.0  # [s] after SIGINT a cancelled render's kernels are killed (one starting may never answer)

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
    write_atomically(path, body)  # a full disk leaves no truncated page behind


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


class _WriteFailed(Exception):
    """A report's files could not be written (an ``OSError``): the whole render stops."""

    def __init__(self, folder: Path, exc: OSError) -> None:
        reason = exc.strerror or str(exc) or type(exc).__name__
        super().__init__(
            f"cannot write reports into {folder}/: {reason}; nothing half-written was published "
            "(reports that finished before stay, each with its index entry). "
            "Fix: free disk space or make the folder writable, then run again"
        )


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
    started: Callable[[Job], None] | None = None,
    title: str = "",
    overrides: Mapping[str, Any] | None = None,
) -> ReportOutcome | None:
    """Render one job in a staging folder and publish it with its index entry; ``None`` when
    the render was cancelled first (nothing of it is kept).

    Raises
    ------
    _WriteFailed
        When a file could not be written (nothing of this report is published).
    """
    cancelled = cancelled or threading.Event()
    if cancelled.is_set():
        return None
    if started is not None:
        started(job)
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
    # everything is written to a staging folder and moved into place, with the index entry,
    # only when the render finished: a failed render never replaces an earlier good report,
    # an interrupted one keeps nothing
    try:
        job.out_dir.mkdir(parents=True, exist_ok=True)
        staging = Staging(job.out_dir, job.notebook)
    except OSError as exc:
        raise _WriteFailed(job.out_dir, exc) from None
    with staging:  # the staging folder goes in the end, also on an interrupt
        staged = {key: staging.path / path.name for key, path in final.items()}
        try:
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
            if cancelled.is_set():
                return None
            places = final if error is None else failed
            outcome = ReportOutcome(
                notebook=job.notebook,
                scenario=job.scenario,
                ok=error is None,
                seconds=time.perf_counter() - start,
                ipynb_path=places["ipynb"],
                html_path=places["html"],
                handout_path=places["handout"],
                results_path=places["results"],
                parameters=dict(job.parameters),
                error=error,
                pdf_path=places["pdf"] if staged["pdf"].is_file() else None,
            )
            stale = failed if error is None else {}
            published = publish_report(
                staged, places, stale=stale, lock_dir=lock_dir, index=(outcome, title, overrides), cancelled=cancelled
            )
        except OSError as exc:
            raise _WriteFailed(job.out_dir, exc) from None
    return outcome if published else None


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
            start_timeout=300,  # a kernel on two busy cores can take over papermill's 60 s to start
            # silences the kernel's own log: its start-up banner ("running over TCP without
            # encryption") and the "KeyboardInterrupt caught" line jupyter_client's shutdown
            # interrupt provokes; errors in cells still reach the notebook and this process
            extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
            # kernels run in their own session, so a Ctrl-C here never reaches them: this
            # manager lets render() interrupt them itself (_interrupt_kernels)
            kernel_manager_class=_interruptible_kernel_manager(),
        )
    except OSError as exc:
        if _is_write_error(exc, ipynb.parent):
            raise  # the render stops: the staging folder cannot be written
        error = _error_message(exc)
    except Exception as exc:  # any failure is reported, the others still render
        error = _error_message(exc)
    if cancelled is not None and cancelled.is_set():
        return "interrupted"  # no export: render() is stopping

    if ipynb.exists():
        try:
            nb = nbformat.read(ipynb, as_version=4)
            _relative_results_path(nb, staged["results"], results_name)
            write_atomically(ipynb, nbformat.writes(nb))
            title = notebook_title(job.input_path) or job.notebook
            with export_lock:
                for exporter, path, suffix, source in (
                    (exporters[0], report_html, "", nb),
                    (exporters[1], handout_html, " (handout)", handout_notebook(nb)),
                ):
                    page_title = f"{title} · {job.scenario}{suffix}"
                    _export(exporter, source, path, title=page_title, scenario=job.scenario, parameters=job.parameters)
        except OSError:
            raise  # our own writes (write_atomically): the render stops
        except Exception as exc:  # a failed export is reported like a failed cell
            error = error or f"rendering HTML failed: {_error_message(exc)}"
    elif error is None:
        error = "papermill wrote no notebook"
    if error is None and chromium is not None and not (cancelled is not None and cancelled.is_set()):
        try:
            print_pdf(handout_html, staged["pdf"], chromium=chromium, cancelled=cancelled)
        except OSError as exc:
            if _is_write_error(exc, ipynb.parent):
                raise
            error = f"printing the handout PDF failed: {_error_message(exc)}"
        except (RuntimeError, subprocess.SubprocessError) as exc:
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


def _interrupt_kernels(signum: int = signal.SIGINT, *, skip: set[int] | None = None) -> set[int]:
    """Send ``signum`` to every kernel a render started (SIGINT, as Ctrl-C in a notebook: the
    cell running stops, so does the notebook; SIGKILL to end it now), except the ``skip`` pids;
    the pids signalled."""
    with _KERNELS_LOCK:
        managers = list(_KERNELS)
    sent: set[int] = set()
    for manager in managers:
        pid = getattr(getattr(manager, "provisioner", None), "pid", None)
        if pid and pid not in (skip or set()):
            with contextlib.suppress(OSError):
                os.kill(pid, signum)
                sent.add(pid)
    return sent


def _is_write_error(exc: OSError, staging: Path) -> bool:
    """Whether an ``OSError`` is about writing reports (a full disk, a read-only or vanished
    folder, a file in the staging folder), not, say, a kernel that could not start."""
    if exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EIO):
        return True
    names = [str(name) for name in (exc.filename, exc.filename2) if name]
    return any(os.path.abspath(name).startswith(os.path.abspath(staging) + os.sep) for name in names)


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


def _in_worker_thread(run: Callable[[Job], ReportOutcome | None], job: Job) -> ReportOutcome | None:
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
    on_start: Callable[[Job], None] | None = None,
    on_report: Callable[[ReportOutcome], None] | None = None,
    on_running: Callable[[Mapping[str, float]], None] | None = None,
    running_every_s: float = 30.0,
    pdf: bool = True,
    **folders: Unpack[Folders],
) -> list[ReportOutcome]:
    """Execute and render every selected notebook × scenario, each published with its index entry.

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
    on_start : callable, optional
        Called with each :class:`~budgetlab.notebook.plan.Job` when its render starts.
    on_report : callable, optional
        Called with each :class:`ReportOutcome` as soon as it is finished and published.
    on_running : callable, optional
        Called every ``running_every_s`` seconds [s] while reports are rendering, with how long
        each has been running [s] by ``scenario/notebook``.
    pdf : bool
        Also print each handout to ``<notebook>-handout.pdf`` with headless Chromium
        (:mod:`budgetlab.notebook.handout`); skipped when no Chromium is installed.
    **folders
        ``notebooks_dir`` (also the kernels' working directory), ``params_dir``, ``out_dir``
        (see :class:`~budgetlab.notebook.plan.Folders`).

    Every callback runs in the calling thread. Staging folders that interrupted or killed
    renders left (:func:`~budgetlab.notebook.publish.remove_stale_staging`) are removed first.

    Returns
    -------
    list of ReportOutcome
        In notebook-within-scenario order; empty when there is nothing to render.

    Raises
    ------
    ReportError
        See :func:`~budgetlab.notebook.plan.plan`; also when an output folder cannot be written
        (checked before any kernel starts), or a file cannot be written later (a full disk, a
        folder made read-only): then nothing half-written is published.
    RenderInterrupted
        On SIGINT (Ctrl-C) or SIGTERM, in the main thread: the running notebooks are
        interrupted at their current cell (a second signal kills their kernels), a Chromium
        printing is killed, nothing of theirs is kept, and this is raised once everything is
        tidy. Each report and its index entry are then either as before or wholly new.
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
    cancelled = threading.Event()
    with stop_on_signals(cancelled) as received:  # from here on a signal stops the render tidily
        for folder in sorted({job.out_dir for job in work}):
            remove_stale_staging(folder)
        with contextlib.suppress(OSError):
            (out_dir / LEGACY_LOCK).unlink(missing_ok=True)  # the lock file earlier versions left
        if on_plan:
            on_plan(work)
        outcomes, failure = _render_jobs(
            work,
            cancelled=cancelled,
            received=received,
            notebooks_dir=notebooks_dir,
            out_dir=out_dir,
            overrides=overrides,
            kernel_name=kernel_name,
            cell_timeout_s=cell_timeout_s,
            jobs=jobs,
            pdf=pdf,
            on_start=on_start,
            on_report=on_report,
            on_running=on_running,
            running_every_s=running_every_s,
        )
    if received:
        raise RenderInterrupted(received[0])
    if failure is not None:
        raise failure
    return outcomes


def _render_jobs(
    work: Sequence[Job],
    *,
    cancelled: threading.Event,
    received: Sequence[int],
    notebooks_dir: Path,
    out_dir: Path,
    overrides: Mapping[str, Any] | None,
    kernel_name: str,
    cell_timeout_s: float | None,
    jobs: int,
    pdf: bool,
    on_start: Callable[[Job], None] | None,
    on_report: Callable[[ReportOutcome], None] | None,
    on_running: Callable[[Mapping[str, float]], None] | None,
    running_every_s: float,
) -> tuple[list[ReportOutcome], BaseException | None]:
    """:func:`render`'s work once planned: the outcomes in plan order, and the error that
    stopped it (``None`` when nothing did); ``cancelled`` stops it, ``received`` lists the
    signals that did."""
    # build the bundle while the first kernels start
    threading.Thread(target=vega_bundle, name="vega-bundle", daemon=True).start()
    exporters = make_exporters()
    running: dict[str, float] = {}  # scenario/notebook -> start [perf_counter s], set by workers
    running_lock = threading.Lock()

    def started(job: Job) -> None:
        with running_lock:
            running[f"{job.scenario}/{job.notebook}"] = time.perf_counter()

    run = functools.partial(
        _run_job,
        cwd=notebooks_dir,
        exporters=exporters,
        export_lock=threading.Lock(),
        kernel_name=kernel_name,
        cell_timeout_s=cell_timeout_s,
        chromium=find_chromium() if pdf else None,
        lock_dir=out_dir,
        cancelled=cancelled,
        started=started,
        overrides=dict(overrides or {}),
    )
    by_name = {f"{job.scenario}/{job.notebook}": job for job in work}
    announced: set[str] = set()

    def announce(name: str) -> None:
        if name not in announced:
            announced.add(name)
            if on_start and not cancelled.is_set():
                on_start(by_name[name])

    outcomes: dict[int, ReportOutcome] = {}
    failure: BaseException | None = None
    with _working_directory(notebooks_dir):
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs))
        try:
            futures = {
                pool.submit(_in_worker_thread, functools.partial(run, title=notebook_title(job.input_path)), job): i
                for i, job in enumerate(work)
            }
            pending = set(futures)
            interrupted: set[int] = set()
            killed = False
            cancelled_at: float | None = None
            next_beat = time.perf_counter() + running_every_s
            while pending:
                done, pending = concurrent.futures.wait(pending, timeout=0.2, return_when="FIRST_COMPLETED")
                for future in done:
                    try:
                        outcome = future.result()
                    except concurrent.futures.CancelledError:
                        continue
                    except _WriteFailed as exc:
                        failure = failure or ReportError(str(exc))
                        cancelled.set()
                        continue
                    except Exception as exc:  # a bug: stop the others, then raise it
                        failure = failure or exc
                        cancelled.set()
                        continue
                    if outcome is not None:
                        outcomes[futures[future]] = outcome
                        announce(outcome.name)  # when it started and finished within one wait
                        with running_lock:
                            running.pop(outcome.name, None)
                        if on_report:
                            on_report(outcome)
                with running_lock:
                    new = [name for name in running if name not in announced]
                for name in new:
                    announce(name)
                if cancelled.is_set():
                    for future in pending:
                        future.cancel()  # those not started yet never start
                    # SIGINT to every kernel (also one started since); SIGKILL on a 2nd signal or when overdue
                    cancelled_at = time.perf_counter() if cancelled_at is None else cancelled_at
                    interrupted |= _interrupt_kernels(skip=interrupted)
                    overdue = time.perf_counter() - cancelled_at > KILL_AFTER_S
                    if (len(received) > 1 or overdue) and not killed:
                        killed = bool(_interrupt_kernels(signal.SIGKILL))
                elif on_running and time.perf_counter() >= next_beat:
                    next_beat = time.perf_counter() + running_every_s
                    with running_lock:
                        now = time.perf_counter()
                        busy = {name: now - since for name, since in running.items()}
                    if busy:
                        on_running(busy)
        finally:
            cancelled.set()  # whatever ends the loop, no further notebook starts
            pool.shutdown(wait=True, cancel_futures=True)
    return [outcomes[i] for i in range(len(work)) if i in outcomes], failure
