"""Sweeps, capacity searches, the tuner and frontiers on a Dask cluster, the workload scattered
once: :class:`DaskExecutor`.

A Dask client's own executor (``Client(...).get_executor()``) runs budgetlab's tasks too, but
pickles each task whole: a sweep over a large trace sends the trace once per grid point.
:class:`DaskExecutor` sends each distinct workload to the workers once with
``Client.scatter`` and submits every task without it (:mod:`budgetlab.experiments.shipping`);
Dask hands each task the scattered workload on its worker::

    from budgetlab.experiments.dask_executor import DaskExecutor
    executor = DaskExecutor(Client("tcp://scheduler:8786"))   # a cluster's client
    executor = DaskExecutor(n_workers=4)                       # or a LocalCluster made for it
    table = bl.sweep(..., executor=executor)

The table is the same, row for row and bit for bit, as serially or on Ray. Workers need
budgetlab installed (the same version). Importing budgetlab never imports Dask.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable
from typing import Any

from budgetlab.experiments.shipping import ShippingExecutor, call_with_workloads

__all__ = ["DaskExecutor"]


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise ImportError(
            "DaskExecutor needs Dask distributed: pip install 'budgetlab[distributed]' (or pip install "
            "distributed), or run on Ray or a process pool instead (see budgetlab.experiments.executors)"
        ) from None
    return distributed


class DaskExecutor(ShippingExecutor):
    """Runs each submitted call as a Dask task, each distinct workload scattered once.

    Parameters
    ----------
    client : distributed.Client, optional
        The cluster's client, left open by :meth:`shutdown`. Default: a ``LocalCluster`` of
        ``n_workers`` single-threaded worker processes on the loopback interface, no dashboard,
        made for this executor and closed by :meth:`shutdown`.
    n_workers : int, optional
        Workers of the local cluster (default: Dask's choice, one per core); only without
        ``client``.
    **cluster_kwargs
        More ``LocalCluster`` arguments; only without ``client``.

    :attr:`num_shared` counts the workloads scattered (one per distinct workload).

    Raises
    ------
    ImportError
        Dask distributed is not installed (the message says how to install it).
    TypeError
        ``n_workers`` or cluster arguments given with a ``client``.
    """

    def __init__(self, client: Any = None, *, n_workers: int | None = None, **cluster_kwargs: Any) -> None:
        distributed = _import_distributed()
        self._cluster: Any = None
        if client is None:
            options: dict[str, Any] = {
                "threads_per_worker": 1,
                "processes": True,
                "host": "127.0.0.1",
                "dashboard_address": None,
            }
            self._cluster = distributed.LocalCluster(n_workers=n_workers, **(options | cluster_kwargs))
            client = distributed.Client(self._cluster)
        elif n_workers is not None or cluster_kwargs:
            raise TypeError("n_workers and LocalCluster arguments make a local cluster: pass them without a client")
        self.client = client
        self._inner = client.get_executor()
        super().__init__()

    def _send(self, workload: Any) -> Any:
        # to every worker: a task is then free to run on any of them (Dask places a task by its data)
        return self.client.scatter([workload], broadcast=True, hash=False)[0]

    def _submit_light(
        self, fn: Callable[..., Any], args: tuple[Any, ...], handles: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> cf.Future[Any]:
        # Dask hands the task the scattered workloads in place of their futures
        return self._inner.submit(call_with_workloads, fn, args, handles, kwargs)

    def _close(self, wait: bool) -> None:
        self._inner.shutdown(wait=wait)
        if self._cluster is not None:
            self.client.close()
            self._cluster.close()
            self._cluster = None
