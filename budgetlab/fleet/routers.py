"""Routers: which replica each arriving request goes to, decided as a real router decides it.

A router sees each request at its arrival, in arrival order (equal arrivals in input order),
and the replicas' loads (:class:`~budgetlab.simulator.streamed.ReplicaLoad`) as it would see them then:

* :class:`RoundRobin` — the k-th arrival to replica ``k mod N`` (0-based); it reads no load.
* :class:`LeastLoaded` — vLLM 0.33's data-parallel load balancer
  (``vllm/v1/engine/core_client.py``, ``DPLBAsyncMPClient.get_core_engine_for_request``, one
  API-server client): each replica's score is ``max(in_flight, waiting + running)``, plus
  ``waiting × 6 × max(0, kv_usage − 0.5)`` when requests wait; the lowest score wins, ties to the
  first in a scan that starts one replica further on at each request. ``waiting``, ``running``
  and ``kv_usage`` are the coordinator's latest snapshot (``vllm/v1/engine/coordinator.py``:
  every engine's counts after its latest step, published every ``stats_interval_s``, 100 ms by
  default, when any changed), and the balancer adds 1 to a replica's ``waiting`` for each
  request it sends there until the next snapshot replaces them; ``in_flight`` counts the
  requests it sent there that have not finished (exact, as the client tracks them).
* :class:`SessionAffinity` — every request of a session (``Request.prefix_id``: the
  conversation whose history it shares) goes where the session's first request went; first
  requests, and requests with no session, go round robin.
* any callable ``router(request, loads, time_s) -> int``: :class:`RoutedRequest` and the live
  loads (the replicas' counts after their last step started before ``time_s``).

An older vLLM scored ``waiting × 4 + running``; the score above is 0.33's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from budgetlab.simulator.streamed import ReplicaLoad

__all__ = [
    "RoutedRequest",
    "Router",
    "RoundRobin",
    "LeastLoaded",
    "SessionAffinity",
    "ROUTERS",
    "make_router",
    "DEFAULT_STATS_INTERVAL_S",
]

#: vLLM's coordinator publishes the engines' counts at most this often [s]
#: (``DPCoordinator``'s ``min_stats_update_interval_ms=100``).
DEFAULT_STATS_INTERVAL_S = 0.1


@dataclass(frozen=True)
class RoutedRequest:
    """What a router knows of a request: its id, arrival [s, the input's clock], prompt and
    output lengths [tokens], priority and session (``prefix_id``; ``None``: none)."""

    request_id: Hashable
    arrival_at_s: float
    prompt_tokens: int
    output_tokens: int
    priority: int
    session: Hashable | None


class Router(Protocol):
    """A routing policy the fleet drives (see the module docstring).

    ``stats_interval_s``: when not ``None``, the fleet calls :meth:`on_stats` with every
    replica's load at each multiple of it (from the workload's first arrival) before the
    requests that arrive after it. ``reads_loads``: whether :meth:`choose` reads the live
    loads (the fleet then runs every replica up to each arrival first)."""

    stats_interval_s: float | None
    reads_loads: bool

    def reset(self, num_replicas: int) -> None: ...

    def on_stats(self, loads: Sequence[ReplicaLoad]) -> None: ...

    def choose(self, request: RoutedRequest, loads: Sequence[ReplicaLoad] | None, time_s: float) -> int: ...


@dataclass
class RoundRobin:
    """The k-th arrival to replica ``k mod N``."""

    stats_interval_s: float | None = field(default=None, init=False)
    reads_loads: bool = field(default=False, init=False)
    _next: int = field(default=0, init=False, repr=False)
    _num: int = field(default=1, init=False, repr=False)

    def reset(self, num_replicas: int) -> None:
        self._next, self._num = 0, num_replicas

    def on_stats(self, loads: Sequence[ReplicaLoad]) -> None:
        pass

    def choose(self, request: RoutedRequest, loads: Sequence[ReplicaLoad] | None, time_s: float) -> int:
        chosen = self._next
        self._next = (chosen + 1) % self._num
        return chosen


@dataclass
class LeastLoaded:
    """vLLM 0.33's data-parallel load balancer (module docstring); ``stats_interval_s`` [s] is
    how often the coordinator publishes the engines' counts (> 0)."""

    stats_interval_s: float | None = DEFAULT_STATS_INTERVAL_S
    reads_loads: bool = field(default=True, init=False)
    _counts: list[list[float]] = field(default_factory=list, init=False, repr=False)
    _published: list[tuple[int, int, float]] | None = field(default=None, init=False, repr=False)
    _start: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.stats_interval_s is None or not 0.0 < self.stats_interval_s < float("inf"):
            raise ValueError(f"stats_interval_s must be a positive number of seconds, got {self.stats_interval_s!r}")

    def reset(self, num_replicas: int) -> None:
        self._counts = [[0, 0, 0.0] for _ in range(num_replicas)]
        self._published = None
        self._start = 0

    def on_stats(self, loads: Sequence[ReplicaLoad]) -> None:
        snapshot = [(x.num_waiting, x.num_running, x.kv_used_fraction) for x in loads]
        if snapshot != self._published:  # the coordinator publishes only what changed
            self._published = snapshot
            self._counts = [list(counts) for counts in snapshot]

    def choose(self, request: RoutedRequest, loads: Sequence[ReplicaLoad] | None, time_s: float) -> int:
        assert loads is not None
        num = len(self._counts)
        best, chosen = float("inf"), 0
        for i in range(num):
            idx = (self._start + i) % num
            waiting, running, kv_usage = self._counts[idx]
            score = max(loads[idx].num_in_flight, waiting + running)
            if waiting:
                score += waiting * 6.0 * max(0.0, kv_usage - 0.5)
            if score < best:
                best, chosen = score, idx
        self._counts[chosen][0] += 1
        self._start = (self._start + 1) % num
        return chosen


@dataclass
class SessionAffinity:
    """Every request of a session where its first went; first requests and those without a
    session round robin."""

    stats_interval_s: float | None = field(default=None, init=False)
    reads_loads: bool = field(default=False, init=False)
    _home: dict[Hashable, int] = field(default_factory=dict, init=False, repr=False)
    _fallback: RoundRobin = field(default_factory=RoundRobin, init=False, repr=False)

    def reset(self, num_replicas: int) -> None:
        self._home = {}
        self._fallback.reset(num_replicas)

    def on_stats(self, loads: Sequence[ReplicaLoad]) -> None:
        pass

    def choose(self, request: RoutedRequest, loads: Sequence[ReplicaLoad] | None, time_s: float) -> int:
        if request.session is not None and request.session in self._home:
            return self._home[request.session]
        chosen = self._fallback.choose(request, loads, time_s)
        if request.session is not None:
            self._home[request.session] = chosen
        return chosen


@dataclass
class _CallableRouter:
    """A user's ``router(request, loads, time_s) -> int`` over the live loads."""

    call: Callable[[RoutedRequest, Sequence[ReplicaLoad], float], int]
    stats_interval_s: float | None = field(default=None, init=False)
    reads_loads: bool = field(default=True, init=False)

    def reset(self, num_replicas: int) -> None:
        pass

    def on_stats(self, loads: Sequence[ReplicaLoad]) -> None:
        pass

    def choose(self, request: RoutedRequest, loads: Sequence[ReplicaLoad] | None, time_s: float) -> int:
        assert loads is not None
        return self.call(request, loads, time_s)


#: The routers by name (``simulate_fleet(router=...)``).
ROUTERS: dict[str, Callable[[], Router]] = {
    "round_robin": RoundRobin,
    "least_loaded": LeastLoaded,
    "session": SessionAffinity,
}


def make_router(router: str | Router | Callable[[RoutedRequest, Sequence[ReplicaLoad], float], int]) -> Router:
    """A router from a name of :data:`ROUTERS`, a :class:`Router`, or a callable."""
    if isinstance(router, str):
        if router not in ROUTERS:
            raise ValueError(f"unknown router {router!r}: use one of {', '.join(ROUTERS)}, or a callable")
        return ROUTERS[router]()
    if all(hasattr(router, name) for name in ("choose", "reset", "on_stats")):
        return router  # type: ignore[return-value]
    if callable(router):
        return _CallableRouter(router)
    raise TypeError(f"router must be a name ({', '.join(ROUTERS)}), a Router or a callable, got {router!r}")
