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
rather than being pickled into each task (:mod:`budgetlab.experiments.shipping`);
:attr:`RayExecutor.num_shared` counts the objects put. Workers need budgetlab installed (the same
version). Importing budgetlab never imports Ray.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
from collections.abc import Callable
from typing import Any

from budgetlab.experiments.shipping import SHARED_FIELD, ShippingExecutor, call_with_workloads

__all__ = ["RayExecutor", "SHARED_FIELD"]


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError(
            "RayExecutor needs Ray: pip install 'budgetlab[ray]' (or pip install ray), or run on Dask or a "
            "process pool instead (see budgetlab.experiments.executors)"
        ) from None
    return ray


def _run_shipped(fn: Callable[..., Any], args: tuple[Any, ...], refs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """In the worker: put each task's workload back from the object store, then call ``fn``."""
    import ray

    return call_with_workloads(fn, args, tuple(None if ref is None else ray.get(ref) for ref in refs), kwargs)


class RayExecutor(ShippingExecutor):
    """Runs each submitted call as a Ray task; ``address`` and ``init_kwargs`` go to
    ``ray.init`` when Ray is not initialized yet in this process (default: a local cluster,
    no dashboard), and :meth:`shutdown` then shuts that cluster down. With Ray already
    initialized (``ray.init`` called before) the executor uses it and leaves it running.

    :attr:`num_shared` counts the objects put in the object store (one per distinct workload).

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
        super().__init__()

    def _send(self, workload: Any) -> Any:
        return self._ray.put(workload)

    def _submit_light(
        self, fn: Callable[..., Any], args: tuple[Any, ...], handles: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> cf.Future[Any]:
        return self._remote.remote(fn, args, handles, kwargs).future()

    def _close(self, wait: bool) -> None:
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
