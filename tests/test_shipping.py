"""A task's workload sent to a cluster once (budgetlab.experiments.shipping), without a cluster."""

from __future__ import annotations

from dataclasses import dataclass

from budgetlab.experiments.shipping import SharedWorkloads, carried_workload, with_workload, without_workload
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
