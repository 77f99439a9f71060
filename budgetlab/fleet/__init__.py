"""Fleets: replicas of an engine behind a router (:func:`simulate_fleet`).

Modules: :mod:`.routers` (round robin, vLLM's data-parallel load balancer, session affinity, the vLLM
router's cache-aware policy, a callable)
and :mod:`.simulate` (the fleet's run and :class:`FleetResult`).
"""

from budgetlab.fleet.routers import (
    DEFAULT_STATS_INTERVAL_S,
    ROUTERS,
    LeastLoaded,
    PrefixAware,
    RoundRobin,
    RoutedRequest,
    Router,
    SessionAffinity,
)
from budgetlab.fleet.simulate import FleetResult, simulate_fleet
from budgetlab.simulator.streamed import ReplicaLoad

__all__ = [
    "simulate_fleet",
    "FleetResult",
    "ReplicaLoad",
    "RoutedRequest",
    "Router",
    "RoundRobin",
    "LeastLoaded",
    "SessionAffinity",
    "PrefixAware",
    "ROUTERS",
    "DEFAULT_STATS_INTERVAL_S",
]
