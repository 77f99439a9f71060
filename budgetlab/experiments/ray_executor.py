"""Sweeps, capacity searches, the tuner and frontiers on a Ray cluster: :class:`RayExecutor`.

A :class:`concurrent.futures.Executor` over Ray tasks (``pip install budgetlab[ray]``)::

    from budgetlab.experiments.ray_executor import RayExecutor
    executor = RayExecutor()                      # a local Ray cluster, made for it
    executor = RayExecutor(address="auto")        # or the cluster this machine belongs to
    table = bl.sweep(..., executor=executor)

Each grid point is one Ray task; the table is the same, row for row and bit for bit, as
serially or on Dask (every task is deterministic and the results come back in task order).
The workload a point simulates (its ``workload`` field: a :class:`~budgetlab.workload.TraceWorkload`
may hold a whole trace) is put in Ray's object store once and every task reads it from there,
rather than being pickled into each task; :attr:`RayExecutor.num_shared` counts the objects put.
Workers need budgetlab installed (the same version). Importing budgetlab never imports Ray.
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import dataclasses
import os
from collections.abc import Callable
from typing import Any

from budgetlab.workload import SweepWorkload

__all__ = ["RayExecutor", "SHARED_FIELD"]

#: The task field put in the object store once and shared by every task that carries it.
SHARED_FIELD = "workload"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError(
            "RayExecutor needs Ray: pip install 'budgetlab[ray]' (or pip install ray), or run on Dask or a "
            "process pool instead (see budgetlab.experiments.executors)"
        ) from None
    return ray


@dataclasses.dataclass(frozen=True)
class _Shipped:
    """A task with its :data:`SHARED_FIELD` replaced by a reference into the object store."""

    task: Any
    ref: Any


def _run_shipped(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """In the worker: put each shipped task's workload back, then call ``fn``."""
    import ray

    def restored(arg: Any) -> Any:
        if isinstance(arg, _Shipped):
            task = copy.copy(arg.task)
            object.__setattr__(task, SHARED_FIELD, ray.get(arg.ref))
            return task
        return arg

    return fn(*(restored(arg) for arg in args), **kwargs)


class RayExecutor(cf.Executor):
    """Runs each submitted call as a Ray task; ``address`` and ``init_kwargs`` go to
    ``ray.init`` when Ray is not initialized yet in this process (default: a local cluster,
    no dashboard), and :meth:`shutdown` then shuts that cluster down. With Ray already
    initialized (``ray.init`` called before) the executor uses it and leaves it running.

    Raises
    ------
    ImportError
        Ray is not installed (the message says how to install it).
    """

    def __init__(self, address: str | None = None, **init_kwargs: Any) -> None:
        ray = _import_ray()
        self._ray = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            # no network at run time: Ray's usage statistics are never sent (unless asked for)
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            options = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
            ray.init(address=address, **(options | init_kwargs))
        self._remote = ray.remote(_run_shipped)
        self._shared: dict[int, tuple[Any, Any]] = {}  # id -> (the object, kept alive; its ref)
        self._closed = False

    @property
    def num_shared(self) -> int:
        """Objects put in the object store so far (one per distinct workload)."""
        return len(self._shared)

    def _ship(self, arg: Any) -> Any:
        """``arg``, its workload replaced by a reference put once (a dataclass task carrying one)."""
        workload = getattr(arg, SHARED_FIELD, None)
        if not (dataclasses.is_dataclass(arg) and isinstance(workload, SweepWorkload)):
            return arg
        key = id(workload)
        if key not in self._shared:
            self._shared[key] = (workload, self._ray.put(workload))
        light = copy.copy(arg)
        object.__setattr__(light, SHARED_FIELD, None)
        return _Shipped(light, self._shared[key][1])

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        if self._closed:
            raise RuntimeError("cannot submit to a RayExecutor after shutdown")
        shipped = tuple(self._ship(arg) for arg in args)
        return self._remote.remote(fn, shipped, kwargs).future()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True
        self._shared.clear()
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
