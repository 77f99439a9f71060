"""A task's workload sent to a cluster's workers once, not pickled into every task.

A sweep point, a capacity search, a tuner or frontier task is a frozen dataclass whose
``workload`` field (:data:`SHARED_FIELD`) may hold a whole trace; every point of a sweep holds
the same one. A cluster executor (:class:`~budgetlab.experiments.ray_executor.RayExecutor`,
:class:`~budgetlab.experiments.dask_executor.DaskExecutor`) sends each distinct workload to the
cluster once (Ray's object store, Dask's scatter), submits every task without it
(:func:`without_workload`), and the worker puts it back (:func:`with_workload`) before running
the task. :class:`SharedWorkloads` keeps the one handle per workload.
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import dataclasses
from collections.abc import Callable
from typing import Any

from budgetlab.workload import SweepWorkload

__all__ = [
    "SHARED_FIELD",
    "carried_workload",
    "without_workload",
    "with_workload",
    "call_with_workloads",
    "SharedWorkloads",
    "ShippingExecutor",
]

SHARED_FIELD = "workload"
"""The task field sent to the cluster once and shared by every task that carries it."""


def carried_workload(arg: Any) -> SweepWorkload | None:
    """The workload ``arg`` carries: its :data:`SHARED_FIELD` when ``arg`` is a dataclass task
    holding a :class:`~budgetlab.workload.SweepWorkload`, else ``None`` (sent as it is)."""
    workload = getattr(arg, SHARED_FIELD, None)
    return workload if dataclasses.is_dataclass(arg) and isinstance(workload, SweepWorkload) else None


def without_workload(task: Any) -> Any:
    """A shallow copy of ``task`` with its workload field set to ``None`` (what is pickled)."""
    light = copy.copy(task)
    object.__setattr__(light, SHARED_FIELD, None)
    return light


def with_workload(task: Any, workload: SweepWorkload) -> Any:
    """``task`` (from :func:`without_workload`) with ``workload`` put back, in the worker."""
    full = copy.copy(task)
    object.__setattr__(full, SHARED_FIELD, workload)
    return full


def call_with_workloads(
    fn: Callable[..., Any], args: tuple[Any, ...], workloads: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """In the worker: ``fn(*args, **kwargs)`` with each ``args[i]`` given back ``workloads[i]``
    (``None``: sent as it was)."""
    full = tuple(
        arg if workload is None else with_workload(arg, workload) for arg, workload in zip(args, workloads, strict=True)
    )
    return fn(*full, **kwargs)


class SharedWorkloads:
    """One cluster handle per distinct workload (by identity), made by ``send`` on first use.

    The workload is kept alive with its handle, so its ``id`` cannot be reused by another
    object while the handle is in use.

    Parameters
    ----------
    send : callable
        ``send(workload) -> handle``: puts the workload on the cluster (``ray.put``,
        ``client.scatter``).
    """

    def __init__(self, send: Callable[[SweepWorkload], Any]) -> None:
        self._send = send
        self._handles: dict[int, tuple[SweepWorkload, Any]] = {}

    def __len__(self) -> int:
        return len(self._handles)

    def split(self, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """``args`` without their workloads, and for each one its workload's handle (or ``None``)."""
        light: list[Any] = []
        handles: list[Any] = []
        for arg in args:
            workload = carried_workload(arg)
            if workload is None:
                light.append(arg)
                handles.append(None)
                continue
            key = id(workload)
            if key not in self._handles:
                self._handles[key] = (workload, self._send(workload))
            light.append(without_workload(arg))
            handles.append(self._handles[key][1])
        return tuple(light), tuple(handles)

    def clear(self) -> None:
        """Drop every handle (the cluster may then free the workloads)."""
        self._handles.clear()


class ShippingExecutor(cf.Executor):
    """An executor that sends each distinct workload once (:class:`SharedWorkloads` over
    :meth:`_send`) and submits every call without it (:meth:`_submit_light`); :meth:`_close`
    frees what it made. :attr:`num_shared` counts the workloads sent.

    :meth:`shutdown` works as :meth:`concurrent.futures.Executor.shutdown` says: it refuses new
    calls, cancels the pending ones with ``cancel_futures=True``, waits for the submitted calls
    with ``wait=True`` (the default), then frees the cluster it made (without ``wait``, what
    still runs there is lost) and the workloads it sent (they stay on the cluster until then)."""

    def __init__(self) -> None:
        self._shared = SharedWorkloads(self._send)
        self._pending: set[cf.Future[Any]] = set()
        self._closed = False

    def _send(self, workload: SweepWorkload) -> Any:
        raise NotImplementedError

    def _submit_light(
        self, fn: Callable[..., Any], args: tuple[Any, ...], handles: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> cf.Future[Any]:
        raise NotImplementedError

    def _close(self, wait: bool) -> None:
        """Free what the executor made (its cluster, its connection)."""

    @property
    def num_shared(self) -> int:
        """Workloads sent to the cluster so far (one per distinct workload)."""
        return len(self._shared)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        if self._closed:
            raise RuntimeError(f"cannot submit to a {type(self).__name__} after shutdown")
        light, handles = self._shared.split(args)
        future = self._submit_light(fn, light, handles, kwargs)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True
        if cancel_futures:
            for future in list(self._pending):
                future.cancel()
        if wait:
            cf.wait(list(self._pending))
        self._close(wait)
        self._shared.clear()
