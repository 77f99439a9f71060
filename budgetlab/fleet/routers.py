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
* :class:`PrefixAware` — the vLLM router's (``vllm-project/router``, ``src/policies/cache_aware.rs``,
  ``CacheAwarePolicy``; SGLang's gateway has the same policy) cache-aware routing: when the
  replicas' loads (the requests it sent each and not finished) are imbalanced — ``max − min >
  balance_abs_threshold`` and ``max > min × balance_rel_threshold`` — the least loaded;
  otherwise the replica whose past prompts share the longest prefix with this one, if that
  prefix is more than ``cache_threshold`` of the prompt, else the least loaded (the first, on
  ties). Each request's prompt is then remembered for the replica chosen. The router's
  approximate tree holds request text; here a request's text is its tokens, and two prompts
  share ``min(prefix_tokens)`` of one ``prefix_id`` (capped at each prompt: the tree holds
  prompts, not outputs). Defaults are the ``vllm-router`` command line's (``src/main.rs``:
  0.3, 64, 1.5; the library's ``CacheAwareConfig::default`` has 0.5, 32, 1.1). Not modelled:
  the tree's LRU eviction (every 120 s, beyond 2^26 characters per replica); a tie between
  replicas with equally long matches goes to the one sent that prefix last.
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
    "PrefixAware",
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
    output lengths [tokens], priority, session (``prefix_id``; ``None``: none) and the tokens it
    shares with the session's stream (``prefix_tokens``) [tokens]."""

    request_id: Hashable
    arrival_at_s: float
    prompt_tokens: int
    output_tokens: int
    priority: int
    session: Hashable | None
    prefix_tokens: int = 0


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
class PrefixAware:
    """The vLLM router's cache-aware policy (module docstring): ``cache_threshold`` is the
    fraction of a prompt a replica's past prompts must share for the request to follow them,
    in [0, 1]; ``balance_abs_threshold`` [requests] and ``balance_rel_threshold`` [-] say when
    the loads are imbalanced enough to send to the least loaded instead."""

    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    stats_interval_s: float | None = field(default=None, init=False)
    reads_loads: bool = field(default=True, init=False)
    #: per session: each replica's longest prompt prefix of it sent there [tokens], the replicas
    #: in the order they were last sent it
    _shared: dict[Hashable, dict[int, int]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be a fraction in [0, 1], got {self.cache_threshold!r}")
        if isinstance(self.balance_abs_threshold, bool) or not (
            isinstance(self.balance_abs_threshold, int) and self.balance_abs_threshold >= 0
        ):
            raise ValueError(
                f"balance_abs_threshold must be an int >= 0 [requests], got {self.balance_abs_threshold!r}"
            )
        if not 1.0 <= self.balance_rel_threshold < float("inf"):
            raise ValueError(f"balance_rel_threshold must be a finite number >= 1, got {self.balance_rel_threshold!r}")

    def reset(self, num_replicas: int) -> None:
        self._shared = {}

    def on_stats(self, loads: Sequence[ReplicaLoad]) -> None:
        pass

    def choose(self, request: RoutedRequest, loads: Sequence[ReplicaLoad] | None, time_s: float) -> int:
        assert loads is not None
        in_flight = [load.num_in_flight for load in loads]
        least = in_flight.index(min(in_flight))
        most, fewest = max(in_flight), min(in_flight)
        shared = min(request.prefix_tokens, request.prompt_tokens) if request.session is not None else 0
        sent = self._shared.setdefault(request.session, {}) if request.session is not None else None
        chosen = least
        if not (most - fewest > self.balance_abs_threshold and most > fewest * self.balance_rel_threshold):
            # the longest match: the last replica (in the order they were sent the session) of the longest
            match, tenant = 0, least
            for replica, length in (sent or {}).items():
                if min(length, shared) >= match:
                    match, tenant = min(length, shared), replica
            if match / request.prompt_tokens > self.cache_threshold:
                chosen = tenant
        if sent is not None:  # remembered for the replica chosen, most recent last
            length = max(sent.pop(chosen, 0), shared)
            sent[chosen] = length
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
    "prefix_aware": PrefixAware,
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
