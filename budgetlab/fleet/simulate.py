"""A fleet: replicas of an engine behind a router, advanced together in time.

:func:`simulate_fleet` routes each request at its arrival (:mod:`.routers`) and runs every
replica as :func:`~budgetlab.simulator.simulate` would run it — the compiled engine core, fed its
requests as the router sends them (:mod:`budgetlab.simulator.streamed`). Replicas share nothing but the router's
view, so a replica's result is bit for bit the simulation of the requests it was sent, and one
replica is :func:`simulate` itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pandas as pd

from budgetlab.cost import CostModel
from budgetlab.fleet.routers import RoutedRequest, Router, make_router
from budgetlab.metrics import WeightedGaps, summarize
from budgetlab.simulator import Deployment, SimResult, resolve_deployment
from budgetlab.simulator.closed_loop import clients_inputs, realized_table, send_as_clients_free
from budgetlab.simulator.compiled import CoreInputs, core_schedules
from budgetlab.simulator.inputs import RequestTable, check_requests_fit, request_id_at, request_table
from budgetlab.simulator.state import arrival_order
from budgetlab.simulator.streamed import ReplicaLoad, StreamedCore
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request
from budgetlab.workload.closed_loop import ClosedLoopClients

__all__ = ["simulate_fleet", "FleetResult"]


@dataclass(frozen=True, eq=False)
class FleetResult:
    """The run of a fleet.

    Attributes
    ----------
    replicas : list of SimResult or None
        Each replica's run (``None`` for a replica the router sent nothing): the simulation of
        the requests it was sent, times from its own first arrival (its ``time_origin_s``).
    assignment : pandas.Series
        The replica of each request (int), indexed by request id, in input order.
    time_origin_s : float
        The workload's first arrival (the input's clock) [s]: the fleet's time 0.
    """

    replicas: list[SimResult | None]
    assignment: pd.Series
    time_origin_s: float

    @cached_property
    def _summary(self) -> dict[str, float | int]:
        return _fleet_summary(self)

    def summary(self) -> dict[str, float | int]:
        """The fleet's headline numbers: :meth:`SimResult.summary`'s keys over every request
        and inter-token gap of every replica (latencies each in its replica's clock, exact);
        ``makespan_s`` from the first arrival to the last finish anywhere, and the rates over
        it; ``num_steps`` and ``num_forward_passes`` summed over the replicas;
        ``kv_peak_fraction`` and ``kv_peak_blocks`` those of the replica that peaked highest;
        ``num_kv_blocks`` the fleet's pool; ``num_replicas``."""
        return dict(self._summary)

    @cached_property
    def requests(self) -> pd.DataFrame:
        """Every request as its replica's :attr:`SimResult.requests` has it, with a ``replica``
        column, in the input's order, its times (``arrival_at_s``, ``first_token_at_s``,
        ``finished_at_s``) on the fleet's clock (from :attr:`time_origin_s`; latencies are each
        replica's, exact)."""
        frames = []
        for index, result in enumerate(self.replicas):
            if result is None:
                continue
            frame = result.requests.copy()
            shift = result.time_origin_s - self.time_origin_s
            for column in ("arrival_at_s", "first_token_at_s", "finished_at_s"):
                frame[column] = frame[column] + shift
            frame.insert(1, "replica", index)
            frames.append(frame)
        joined = pd.concat(frames, ignore_index=True).set_index("request_id")
        return joined.loc[self.assignment.index].reset_index()

    def load(self) -> pd.DataFrame:
        """Every step of every replica, in the fleet's clock: ``replica``, ``start_at_s``,
        ``num_running``, ``num_waiting``, ``kv_used_fraction``, ``num_cached_tokens`` and
        ``num_prefill_tokens`` (the prefix-cache hits and the prompt tokens computed)."""
        frames = []
        for index, result in enumerate(self.replicas):
            if result is None:
                continue
            steps = result.steps
            shift = result.time_origin_s - self.time_origin_s
            frames.append(
                pd.DataFrame(
                    {
                        "replica": index,
                        "start_at_s": steps["start_at_s"] + shift,
                        "num_running": steps["num_running"],
                        "num_waiting": steps["num_waiting"],
                        "kv_used_fraction": 1.0 - steps["num_free_kv_blocks"] / result.num_kv_blocks,
                        "num_cached_tokens": steps["num_cached_tokens"],
                        "num_prefill_tokens": steps["num_prefill_tokens"],
                    }
                )
            )
        return pd.concat(frames, ignore_index=True)

    def timeline(self, bin_s: float = 1.0) -> pd.DataFrame:
        """Each replica's load and prefix-cache hit rate over time, in bins of ``bin_s`` [s] of
        the fleet's clock (a step counts in the bin it starts in).

        Returns
        -------
        pandas.DataFrame
            One row per replica and bin with a step: ``replica``, ``start_s`` (the bin's start
            [s]), ``num_steps``, ``num_running_mean`` and ``num_waiting_mean`` (over the bin's
            steps), ``kv_used_fraction_max``, ``num_cached_tokens`` and ``num_prefill_tokens``
            (summed [tokens]) and ``prefix_hit_rate`` (cached over cached + computed prompt
            tokens; NaN where the bin computed no prompt token).
        """
        if not (isinstance(bin_s, int | float) and 0.0 < bin_s < math.inf):
            raise ValueError(f"bin_s must be a positive number of seconds, got {bin_s!r}")
        load = self.load()
        load["start_s"] = np.floor(load.start_at_s / bin_s) * bin_s
        grouped = load.groupby(["replica", "start_s"], sort=True)
        out = grouped.agg(
            num_steps=("start_at_s", "size"),
            num_running_mean=("num_running", "mean"),
            num_waiting_mean=("num_waiting", "mean"),
            kv_used_fraction_max=("kv_used_fraction", "max"),
            num_cached_tokens=("num_cached_tokens", "sum"),
            num_prefill_tokens=("num_prefill_tokens", "sum"),
        ).reset_index()
        prompt = out.num_cached_tokens + out.num_prefill_tokens
        out["prefix_hit_rate"] = (out.num_cached_tokens / prompt.where(prompt > 0)).astype(float)
        return out


def simulate_fleet(
    requests: Iterable[Request] | pd.DataFrame | ClosedLoopClients,
    *,
    replicas: int,
    router: str | Router | Callable[[RoutedRequest, Sequence[ReplicaLoad], float], int] = "round_robin",
    engine: EngineConfig | Sequence[EngineConfig],
    cost: CostModel | str | Sequence[CostModel | str],
    hardware: HardwareSpec | str | None = None,
    model: ModelSpec | str | None = None,
) -> FleetResult:
    """Replay ``requests`` through ``replicas`` engines behind ``router``.

    Parameters
    ----------
    requests : iterable of Request, pandas.DataFrame, or ClosedLoopClients
        The workload, as for :func:`~budgetlab.simulator.simulate`: requests arriving at their
        times, or :class:`~budgetlab.ClosedLoopClients` sending each as a client frees up
        (anywhere in the fleet; the router places it at its send time).
    replicas : int
        Number of replicas, >= 1.
    router : str, Router or callable
        ``"round_robin"`` (default), ``"least_loaded"`` (vLLM 0.33's data-parallel balancer),
        ``"session"`` (a session's requests to one replica), ``"prefix_aware"`` (the vLLM
        router's cache-aware policy), a :class:`~.routers.Router`
        (e.g. ``LeastLoaded(stats_interval_s=0.5)``), or ``router(request, loads, time_s) ->
        int`` over :class:`~.routers.RoutedRequest` and the replicas' live
        :class:`~budgetlab.simulator.streamed.ReplicaLoad` (:mod:`budgetlab.fleet.routers`).
    engine : EngineConfig or sequence of EngineConfig
        Every replica's engine, or one per replica (heterogeneous replicas).
    cost : CostModel, str or a sequence of them
        Every replica's step cost (a name as for ``simulate``), or one per replica.
    hardware, model : optional
        As for ``simulate`` (the KV pool, a named cost).

    Returns
    -------
    FleetResult

    Raises
    ------
    ValueError
        ``replicas`` < 1, an engine or cost list of another length, an unknown router, or a
        router choosing no replica; ``simulate``'s errors for the workload and each engine.
    ConfigError
        An engine the compiled core does not schedule (several KV-cache groups, speculative
        decoding): a fleet runs the compiled core.
    """
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise ValueError(f"replicas must be an int >= 1, got {replicas!r}")
    engines = _per_replica("engine", engine, replicas)
    costs = _per_replica("cost", cost, replicas)
    deployments = [resolve_deployment(e, c, hardware, model) for e, c in zip(engines, costs)]
    clients = requests if isinstance(requests, ClosedLoopClients) else None
    table = request_table(clients.requests if clients is not None else requests)
    for index, deployment in enumerate(deployments):
        _check_deployment(index, deployment, table)
    if clients is not None:
        whole = clients_inputs(clients, table, deployments[0])
    else:
        order, origin, arrival = arrival_order(table)
        whole = CoreInputs(table, order, origin, arrival, deployments[0].engine, deployments[0].num_blocks, None)
    keys: dict = {}  # the blocks' keys, made once per block size for every replica
    fleet = [
        StreamedCore(deployment, whole, stop_on_finish=clients is not None, share=1.0 / replicas, keys=keys)
        for deployment in deployments
    ]
    policy = make_router(router)
    policy.reset(replicas)
    dispatch = _RouterDispatch(whole, fleet, policy)
    if clients is not None:
        sent_at, chosen = send_as_clients_free(clients, whole, fleet, dispatch)
        table = realized_table(table, whole.order, sent_at)
        whole = replace(whole, table=table, time_origin_s=float(sent_at[0]))
    else:
        chosen = _send_at_arrivals(whole, fleet, dispatch)
    results = [replica.result(table) for replica in fleet]
    assignment = np.empty(len(table), dtype=np.int64)
    assignment[whole.order] = chosen
    return FleetResult(
        replicas=results,
        assignment=pd.Series(assignment, index=pd.Index(table.ids, name="request_id"), name="replica"),
        time_origin_s=whole.time_origin_s,
    )


def _per_replica(name: str, value: object, replicas: int) -> list:
    """``value`` for every replica: one for all, or a list or tuple of one each."""
    if isinstance(value, list | tuple):
        if len(value) != replicas:
            raise ValueError(f"{name} has {len(value)} entries for {replicas} replicas: give one, or one each")
        return list(value)
    return [value] * replicas


def _check_deployment(index: int, deployment: Deployment, table: RequestTable) -> None:
    """A replica's engine must be one the compiled core schedules, and fit every request
    (any request may be routed to it)."""
    from budgetlab.errors import ConfigError

    engine, _, num_blocks, groups = deployment
    if not core_schedules(engine, groups):
        raise ConfigError(
            f"replica {index}: a fleet runs the compiled engine core, which does not schedule several "
            "KV-cache groups (sliding-window, chunked-local or Mamba layers) or speculative decoding yet; "
            "simulate each replica's share with simulate() instead"
        )
    check_requests_fit(table, engine, num_blocks, groups)


class _RouterDispatch:
    """The router of a fleet, as the senders see it (:class:`~budgetlab.simulator.closed_loop.Dispatch`):
    its stats snapshots every ``stats_interval_s`` from the first send (the coordinator's), and
    its choice for each request from the replicas' loads at its send time."""

    def __init__(self, whole: CoreInputs, fleet: list[StreamedCore], policy: Router) -> None:
        self._table = whole.table
        self._order = whole.order
        self._fleet = fleet
        self._policy = policy
        self._origin = math.nan  # the first send: the snapshots' clock
        self._next_stats = math.inf

    def _advanced(self, time_s: float) -> list[ReplicaLoad]:
        for replica in self._fleet:
            replica.advance_to(time_s)
        return [replica.load(time_s) for replica in self._fleet]

    def next_tick_s(self) -> float:
        return self._next_stats

    def tick(self, time_s: float) -> None:
        self._policy.on_stats(self._advanced(time_s))
        interval = self._policy.stats_interval_s
        assert interval is not None
        self._next_stats = self._origin + (round((time_s - self._origin) / interval) + 1) * interval

    def choose(self, position: int, time_s: float) -> int:
        if math.isnan(self._origin):  # the coordinator's first snapshot: at the first send
            self._origin = time_s
            if self._policy.stats_interval_s is not None:
                self.tick(time_s)
        table, row = self._table, int(self._order[position])
        loads = self._advanced(time_s) if self._policy.reads_loads else None
        request = RoutedRequest(
            request_id=request_id_at(table.ids, row),
            arrival_at_s=time_s,
            prompt_tokens=int(table.prompt_tokens[row]),
            output_tokens=int(table.output_tokens[row]),
            priority=int(table.priority[row]),
            session=table.prefix_id[row],
            prefix_tokens=int(table.prefix_tokens[row]),
        )
        pick = self._policy.choose(request, loads, time_s)
        if not isinstance(pick, int | np.integer) or not 0 <= pick < len(self._fleet):
            raise ValueError(
                f"the router sent request {request.request_id!r} to {pick!r}: not a replica 0..{len(self._fleet) - 1}"
            )
        return int(pick)


def _send_at_arrivals(whole: CoreInputs, fleet: list[StreamedCore], dispatch: _RouterDispatch) -> np.ndarray:
    """Send every request at its arrival (arrival order) to the replica the router picks, the
    router's snapshots taken in time order between them; returns the picks."""
    arrival = whole.table.arrival_at_s
    chosen = np.empty(len(whole.order), dtype=np.int64)
    for position, row in enumerate(whole.order.tolist()):
        time_s = float(arrival[row])
        while dispatch.next_tick_s() <= time_s:
            dispatch.tick(dispatch.next_tick_s())
        pick = dispatch.choose(position, time_s)
        fleet[pick].send(position, time_s)
        chosen[position] = pick
    return chosen


def _fleet_summary(result: FleetResult) -> dict[str, float | int]:
    """:meth:`FleetResult.summary` (see there)."""
    runs = [r for r in result.replicas if r is not None]
    records = [r._record for r in runs]

    def joined(read: Callable[[SimResult], np.ndarray]) -> np.ndarray:
        return np.concatenate([read(r) for r in runs])

    pairs = [rec.gaps.pairs() for rec in records]
    summary = summarize(
        arrival_at_s=joined(lambda r: r._record.in_input_order(r._record.arrival_at_s)),
        first_token_at_s=joined(lambda r: r._record.in_input_order(r._record.req.first_token_at_s)),
        finished_at_s=joined(lambda r: r._record.in_input_order(r._record.req.finished_at_s)),
        output_tokens=joined(lambda r: r._record.table.output_tokens),
        prompt_tokens=joined(lambda r: r._record.table.prompt_tokens),
        gaps=WeightedGaps(np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])),
        num_preemptions=sum(rec.num_preemptions for rec in records),
        kv_peak_blocks=0,
        num_kv_blocks=1,
        num_steps=sum(rec.num_steps for rec in records),
    )
    # the fleet's clock: the first arrival to the last finish anywhere
    makespan = max((r.time_origin_s - result.time_origin_s) + float(np.max(r._record.req.finished_at_s)) for r in runs)
    summary["makespan_s"] = makespan
    summary["throughput_tokens_per_s"] = summary["num_output_tokens"] / makespan if makespan > 0 else math.nan
    summary["requests_per_s"] = summary["num_requests"] / makespan if makespan > 0 else math.nan
    each = [r.summary() for r in runs]
    peak = max(each, key=lambda s: s["kv_peak_fraction"])
    summary["kv_peak_blocks"] = peak["kv_peak_blocks"]
    summary["kv_peak_fraction"] = peak["kv_peak_fraction"]
    summary["num_kv_blocks"] = sum(r.num_kv_blocks for r in result.replicas if r is not None)
    summary["num_forward_passes"] = sum(s["num_forward_passes"] for s in each)
    query = sum(s["prefix_query_tokens"] for s in each)
    hits = sum(s["prefix_hit_tokens"] for s in each)
    summary["prefix_query_tokens"] = query
    summary["prefix_hit_tokens"] = hits
    summary["prefix_hit_rate"] = hits / query if query else math.nan
    summary["num_replicas"] = len(result.replicas)
    return summary
