"""A task's workload sent to a cluster once (budgetlab.experiments.shipping), without a cluster."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from dataclasses import dataclass

import pytest

from budgetlab.experiments.shipping import (
    SharedWorkloads,
    ShippingExecutor,
    call_with_workloads,
    carried_workload,
    with_workload,
    without_workload,
)
from budgetlab.workload import SyntheticWorkload, Uniform


@dataclass(frozen=True)
class Task:
    workload: object
    rate_per_s: float


A = SyntheticWorkload(prompt=Uniform(10, 20), output=Uniform(1, 5), num_requests=5, label="a")
B = SyntheticWorkload(prompt=Uniform(10, 20), output=Uniform(1, 5), num_requests=5, label="b")


def test_each_distinct_workload_is_sent_once_and_put_back_whole():
    sent = []
    shared = SharedWorkloads(lambda workload: sent.append(workload) or f"handle-{len(sent)}")
    light, handles = shared.split((Task(A, 1.0), 7, Task(A, 2.0)))
    assert handles == ("handle-1", None, "handle-1") and sent == [A]
    assert light[0] == Task(None, 1.0) and light[1] == 7 and light[2] == Task(None, 2.0)
    _, handles = shared.split((Task(B, 3.0), Task(A, 4.0)))
    assert handles == ("handle-2", "handle-1") and sent == [A, B] and len(shared) == 2
    assert with_workload(light[2], A) == Task(A, 2.0)
    shared.clear()
    assert len(shared) == 0


def test_only_a_dataclass_task_holding_a_workload_carries_one():
    assert carried_workload(Task(A, 1.0)) is A
    assert carried_workload(Task("not a workload", 1.0)) is None
    assert carried_workload({"workload": A}) is None  # not a task: sent as it is
    task = Task(A, 1.0)
    assert without_workload(task) == Task(None, 1.0) and task.workload is A  # the task itself is untouched


class _OnThreads(ShippingExecutor):
    """A ShippingExecutor over one thread: "sending" a workload records it."""

    def __init__(self) -> None:
        self.sent: list[object] = []
        self.closed_with: list[bool] = []
        self._threads = cf.ThreadPoolExecutor(max_workers=1)
        super().__init__()

    def _send(self, workload):
        self.sent.append(workload)
        return workload

    def _submit_light(self, fn, args, handles, kwargs):
        return self._threads.submit(call_with_workloads, fn, args, handles, kwargs)

    def _close(self, wait):
        self.closed_with.append(wait)
        self._threads.shutdown(wait=False)


def test_a_shipping_executor_sends_once_waits_and_cancels_as_executors_do():
    gate = threading.Event()
    executor = _OnThreads()
    first = executor.submit(lambda task: (gate.wait(5), task.workload.label)[1], Task(A, 1.0))
    second = executor.submit(lambda task: task.workload.label, Task(A, 2.0))
    third = executor.submit(lambda task: task.rate_per_s, Task(B, 3.0))
    assert executor.num_shared == 2 and executor.sent == [A, B]
    threading.Timer(0.2, gate.set).start()
    executor.shutdown(wait=True)  # waits for all three
    assert (first.result(0), second.result(0), third.result(0)) == ("a", "a", 3.0)
    assert executor.closed_with == [True] and executor.num_shared == 0
    with pytest.raises(RuntimeError, match="_OnThreads after shutdown"):
        executor.submit(sum, [1])

    gate.clear()
    executor = _OnThreads()
    running = executor.submit(lambda task: gate.wait(5), Task(A, 1.0))
    queued = executor.submit(lambda task: task.rate_per_s, Task(A, 2.0))
    executor.shutdown(wait=False, cancel_futures=True)
    assert queued.cancelled() and executor.closed_with == [False]
    gate.set()
    assert running.result(5) is True
