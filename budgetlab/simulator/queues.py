"""The waiting queue of vLLM's priority policy (``--scheduling-policy priority``).

Under FCFS the waiting queue is a plain ``collections.deque``; under the priority policy it is
:class:`PriorityWaitingQueue`, which offers the same four operations the steps use
(:mod:`budgetlab.simulator.state` re-exports it).
"""

from __future__ import annotations

import heapq

__all__ = ["PriorityWaitingQueue"]


class PriorityWaitingQueue:
    """The waiting queue of ``scheduling_policy="priority"``: a heap on ``(priority, index)``.

    Requests are indexed in arrival order (equal arrivals in input order), so the key is vLLM's
    ``(priority, arrival_time, request_id)`` (``vllm-v1-prefix-async-priority.md`` rule 32), the
    submission order breaking arrival ties as vLLM's wall-clock stamps do: the smallest first. It offers the
    deque operations the steps use; :meth:`appendleft` (a preempted request) pushes at the
    request's own key, not at the front (rule 33).

    Parameters
    ----------
    priority : list of int
        Each request's priority, in arrival order.
    """

    __slots__ = ("_heap", "_priority")

    def __init__(self, priority: list[int]) -> None:
        self._heap: list[tuple[int, int]] = []
        self._priority = priority

    def append(self, request: int) -> None:
        """Queue ``request`` at its key."""
        heapq.heappush(self._heap, (self._priority[request], request))

    appendleft = append  # a preempted request re-enters at its own key

    def popleft(self) -> int:
        """Take the best request (smallest key) off the queue."""
        return heapq.heappop(self._heap)[1]

    def __getitem__(self, position: int) -> int:
        """``queue[0]``, the best request (only the head can be read)."""
        if position != 0:
            raise IndexError("only the head (index 0) of the priority queue can be read")
        return self._heap[0][1]

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)
