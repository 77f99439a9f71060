"""Closed-loop clients: a fixed number of clients, each sending its next request when its last
one has finished (and a think time has passed), as benchmarks drive a server.

``vllm bench serve --max-concurrency C`` (vLLM 0.33, ``vllm/benchmarks/serve.py``,
``benchmark``'s ``limited_request_func``: each request, once its paced arrival has come, waits
on an ``asyncio.Semaphore(max_concurrency)``, first come first served, and holds it until its
response has ended) sends its requests in order, each as soon as one of ``C`` slots is free;
``--request-rate inf`` (its default) paces nothing. GuideLLM's and
InferenceMAX's concurrency sweeps are the same loop. :class:`ClosedLoopClients` describes it;
:func:`budgetlab.simulate` and :func:`budgetlab.simulate_fleet` run it (the simulator's
:mod:`budgetlab.simulator.closed_loop`), and a result's ``arrival_at_s`` is when each request
was sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from budgetlab._checks import MAX_REQUESTS, MAX_TIME_S, int_at_least, number_in
from budgetlab.specs import Request

__all__ = ["ClosedLoopClients"]


@dataclass(frozen=True, eq=False)
class ClosedLoopClients:
    """``concurrency`` clients sending ``requests`` in order, each request as soon as a client
    is free: at the start, or ``think_time_s`` after that client's last request finished (its
    last token).

    Parameters
    ----------
    concurrency : int
        Clients, >= 1: never more requests in flight (``vllm bench serve --max-concurrency``).
    requests : sequence of Request, or pandas.DataFrame
        What they send, as :func:`~budgetlab.simulate` takes a workload: the k-th request (in
        input order; in arrival order when ``paced``) is the k-th sent. Its lengths, ids,
        priorities and shared prefixes are used; its ``arrival_at_s`` only when ``paced``.
    think_time_s : float
        Time a client waits after its request finished before sending the next [s], >= 0
        (0: at once, as vLLM's benchmark does).
    paced : bool
        False (default): every client starts at time 0 and the requests' arrival times are
        ignored (``--request-rate inf``). True: each request is also sent no earlier than its
        ``arrival_at_s`` (``--request-rate`` with ``--max-concurrency``: arrivals paced, at most
        ``concurrency`` in flight), in arrival order.

    Raises
    ------
    ParameterError
        ``concurrency`` not an int >= 1 (or above the bound on requests), ``think_time_s`` not
        a finite number >= 0, or ``paced`` not a bool.
    """

    concurrency: int
    requests: Sequence[Request] | pd.DataFrame
    think_time_s: float = 0.0
    paced: bool = False

    def __post_init__(self) -> None:
        int_at_least(
            "ClosedLoopClients.concurrency",
            self.concurrency,
            1,
            what="an int >= 1 (clients, each with one request in flight)",
            maximum=MAX_REQUESTS,
        )
        number_in(
            "ClosedLoopClients.think_time_s",
            self.think_time_s,
            what="seconds >= 0",
            low=0.0,
            maximum=MAX_TIME_S,
        )
        if not isinstance(self.paced, bool):
            from budgetlab.errors import ParameterError

            raise ParameterError(f"ClosedLoopClients.paced must be True or False, got {self.paced!r}")
        if not isinstance(self.requests, pd.DataFrame) and isinstance(self.requests, Iterable):
            # a generator would be spent by the first simulation: keep the requests themselves
            object.__setattr__(self, "requests", tuple(self.requests))

    def __repr__(self) -> str:
        return (
            f"ClosedLoopClients(concurrency={self.concurrency}, {len(self.requests)} requests, "
            f"think_time_s={self.think_time_s:g}, paced={self.paced})"
        )
