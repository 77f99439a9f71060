"""Where an experiment's simulations run: any :class:`concurrent.futures.Executor`.

A sweep, a set of capacity searches or the tuner hands independent, deterministic tasks to
:func:`run_tasks`, which runs them on an executor and returns the results in task order,
whatever order they finished in. Without an executor it makes one for the call
(:func:`executor_for`: this process for a single task, else :func:`default_executor`, a local
process pool) and shuts it down at the end; an executor you pass is left running.

Running on a Dask cluster
-------------------------
:class:`~budgetlab.experiments.dask_executor.DaskExecutor` (``pip install budgetlab[distributed]``)
runs the tasks on a Dask cluster and scatters each task's workload to the workers once::

    from distributed import Client
    from budgetlab.experiments.dask_executor import DaskExecutor
    executor = DaskExecutor(Client("tcp://scheduler:8786"))

then ``sweep(..., executor=executor)``. A client's own executor (``client.get_executor()``) works
too, but pickles the workload into every task. The table is the same, row for row and bit for
bit, whichever executor computes it. Workers need budgetlab installed (the same version): tasks
are pickled with their module paths (``budgetlab.experiments.sweep.SweepPoint``, ...).

Running on a Ray cluster
------------------------
:class:`~budgetlab.experiments.ray_executor.RayExecutor` (``pip install budgetlab[ray]``) is an
executor over Ray tasks; it puts each task's workload in Ray's object store once, so a large
trace is not pickled into every grid point's task.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from budgetlab.errors import ParameterError
from budgetlab.experiments.progress import ProgressReporter, check_progress, progress_reporter

__all__ = [
    "SerialExecutor",
    "default_executor",
    "executor_for",
    "run_tasks",
    "show_progress",
    "check_executor",
    "PROGRESS_MIN_POINTS",
    "FORKSERVER_PRELOAD",
]

TaskT = TypeVar("TaskT")
ResultT = TypeVar("ResultT")

PROGRESS_MIN_POINTS = 16
"""With ``progress=None`` a sweep draws its progress line only from this many grid points up
(a callback is called whatever the size)."""

FORKSERVER_PRELOAD = ("budgetlab.experiments.sweep", "budgetlab.experiments.capacity", "budgetlab.simulator")
"""Modules a ``forkserver`` imports once, before forking workers. The forkserver ignores an
``ImportError`` here (workers then only start slower), so a test imports each of them."""


class SerialExecutor(cf.Executor):
    """Runs each task in the calling process, at submission: no workers, no pickling.

    Handy for debugging, for tiny grids, and for workloads or cost factories defined in a
    notebook cell (which worker processes cannot import). Gives the same table as any other
    executor.
    """

    def __init__(self) -> None:
        self._shutdown = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to a SerialExecutor after shutdown")
        future: cf.Future[Any] = cf.Future()
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller through the future
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True


def _main_is_a_script() -> bool:
    """Whether ``__main__`` is a file run as ``python file.py`` (not a module, a notebook or a REPL).

    ``forkserver`` and ``spawn`` workers run such a file again before they start, which re-runs
    every sweep written in it without an ``if __name__ == "__main__":`` guard (and breaks the
    pool): a script therefore gets ``fork`` workers, which do not re-run it.
    """
    main = sys.modules.get("__main__")
    if main is None or getattr(getattr(main, "__spec__", None), "name", None) is not None:
        return False
    return bool(getattr(main, "__file__", None))


def _mp_context() -> multiprocessing.context.BaseContext:
    """``forkserver`` where available (clean, fast workers with budgetlab preloaded; fork
    from a process that may hold threads, such as a Dask client's, can deadlock), else
    ``spawn``; but ``fork`` for a plain script (:func:`_main_is_a_script`), so that ``sweep``,
    ``capacity`` and ``tune`` work in a ``.py`` file without a ``__main__`` guard."""
    methods = multiprocessing.get_all_start_methods()
    if _main_is_a_script() and "fork" in methods:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))
        return ctx
    return multiprocessing.get_context("spawn")


def default_executor(num_tasks: int) -> cf.ProcessPoolExecutor:
    """A local process pool with ``min(os.cpu_count(), num_tasks)`` workers."""
    workers = max(1, min(os.cpu_count() or 1, num_tasks))
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=_mp_context())


def check_executor(executor: object) -> cf.Executor | None:
    """``executor`` if it is a :class:`concurrent.futures.Executor` or ``None``.

    Raises
    ------
    ParameterError
        Anything else.
    """
    if executor is not None and not isinstance(executor, cf.Executor):
        raise ParameterError(
            "executor must be a concurrent.futures.Executor (a ProcessPoolExecutor, "
            f"SerialExecutor, or a Dask client's get_executor()), got {type(executor).__name__}"
        )
    return executor


def show_progress(progress: object, num_tasks: int) -> bool:
    """Whether ``progress`` reports anything over ``num_tasks`` tasks (a line or a callback).

    Parameters
    ----------
    progress : bool, None or callable
        See :mod:`budgetlab.experiments.progress`: ``True`` always; ``False`` never; ``None``
        from :data:`PROGRESS_MIN_POINTS` tasks up, in Jupyter or when stderr is a terminal; a
        callable always.
    num_tasks : int
        Tasks to run [count].

    Raises
    ------
    ParameterError
        ``progress`` neither a bool, ``None`` nor a callable.
    """
    reporter = progress_reporter(progress, "", min_total=PROGRESS_MIN_POINTS, total=num_tasks)
    return reporter.active


@contextmanager
def executor_for(executor: cf.Executor | None, num_tasks: int) -> Iterator[cf.Executor]:
    """The executor to run ``num_tasks`` tasks on, owned for the ``with`` block when made here.

    ``executor`` itself when given (left running afterwards). ``None``: a
    :class:`SerialExecutor` for at most one task, else :func:`default_executor`; either is shut
    down when the block ends (pending tasks cancelled), even on an error. Use it around several
    :func:`run_tasks` calls to share one pool between them (the tuner's two phases do).

    Parameters
    ----------
    executor : concurrent.futures.Executor or None
    num_tasks : int
        How many tasks the pool should have workers for [count].
    """
    check_executor(executor)
    if executor is not None:
        yield executor
        return
    made: cf.Executor = SerialExecutor() if num_tasks <= 1 else default_executor(num_tasks)
    try:
        yield made
    finally:
        made.shutdown(wait=True, cancel_futures=True)


def run_tasks(
    fn: Callable[[TaskT], ResultT],
    tasks: Sequence[TaskT],
    *,
    executor: cf.Executor | None,
    progress: object,
    describe: Callable[[int], str],
    unit: str = "point",
    desc: str = "budgetlab sweep",
) -> list[ResultT]:
    """Run ``fn`` over ``tasks`` on an executor; results in task order whatever the completion
    order.

    A failing task cancels the rest and re-raises, with a note naming the task.

    Parameters
    ----------
    fn : callable
        Module-level function (process pools and Dask pickle it by name).
    tasks : sequence
        Its arguments, one task each (picklable for a pool).
    executor : concurrent.futures.Executor or None
        See :func:`executor_for`.
    progress : bool, None, callable or ProgressReporter
        See :mod:`budgetlab.experiments.progress` (``None``: a line from
        :data:`PROGRESS_MIN_POINTS` tasks up). A :class:`ProgressReporter` is advanced by one
        per finished task and left open (the tuner shares one across its phases).
    describe : callable
        ``describe(i)`` names task ``i`` in the note added to its error
        (``"grid point 3: ..."``).
    unit, desc : str
        The progress line's unit and title (``"budgetlab sweep: points"``).
    """
    shared = isinstance(progress, ProgressReporter)
    reporter = (
        progress
        if isinstance(progress, ProgressReporter)
        else progress_reporter(
            check_progress(progress), f"{desc}: {unit}s", min_total=PROGRESS_MIN_POINTS, total=len(tasks)
        )
    )
    results: list[Any] = [None] * len(tasks)
    with executor_for(executor, len(tasks)) as pool:
        if not shared:
            reporter.update(0, len(tasks))
        futures: dict[cf.Future[ResultT], int] = {}
        try:
            for i, task in enumerate(tasks):
                futures[pool.submit(fn, task)] = i
            for future in cf.as_completed(futures):
                i = futures[future]
                try:
                    results[i] = future.result()
                except Exception as exc:
                    exc.add_note(f"(while simulating {describe(i)})")
                    raise
                reporter.advance()
        finally:
            for future in futures:
                future.cancel()
            if not shared:
                reporter.close()
    return results
