"""The replica planner: the fewest replicas that hold an SLO at a load, verified by simulating
the fleet, each replica's knobs from the tuner and vLLM's queue caps sized for the SLO.

:func:`plan_replicas` (1) tunes one replica's ``max_num_batched_tokens`` and ``max_num_seqs``
for the SLO (:func:`~budgetlab.experiments.tune.tune`; or takes the engine given), (2) starts
from the load over that replica's capacity, rounded up, and (3) simulates the whole fleet
(:func:`~budgetlab.simulate_fleet`, behind the router asked for) at the workload's load,
galloping then bisecting on the number of replicas until ``N`` meets the SLO and ``N − 1``
does not. Nothing is extrapolated: the answer is the pair of simulations that brackets it.

vLLM's queue caps (vLLM 0.33, ``vllm/config/scheduler.py``, ``SchedulerConfig``: each enforced
by a replica's API server, a request over it refused with HTTP 503) are sized as their
documentation says: ``max_num_queued_tokens = target TTFT × prefill throughput`` (the SLO's
tightest TTFT limit; the replica's prefill throughput is its budget over one step's time of
a full budget of prompt tokens, from the cost model), and ``max_num_queued_reqs =
max_num_seqs +`` the queue depth that many tokens make at the workload's mean prompt length.
They are derived numbers for the command line, not simulated: budgetlab's engines queue
every request.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from budgetlab._checks import int_at_least, number_in, random_seed
from budgetlab.batch import Batch
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost import CostModel, hardware_of, model_of
from budgetlab.cost.named import CostSpec, check_cost, cost_label, make_cost
from budgetlab.display import html_table, one_line
from budgetlab.errors import ParameterError, SLOUnattainableError
from budgetlab.experiments.executors import check_executor
from budgetlab.experiments.progress import ProgressSpec
from budgetlab.experiments.slo import SLO, Violation, check_slo
from budgetlab.experiments.tune import TuneResult, tune
from budgetlab.fleet import FleetResult, simulate_fleet
from budgetlab.fleet.routers import Router, make_router
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request
from budgetlab.workload import ClosedLoopClients, SweepWorkload, TraceWorkload, check_workload, workload_requests

__all__ = ["plan_replicas", "ReplicaPlan", "MAX_PLANNED_REPLICAS", "queue_caps", "replicas_by_load", "compare_routers"]

#: The most replicas a plan searches [count]: a fleet's every simulation is the whole workload.
MAX_PLANNED_REPLICAS = 1024

_SUMMARY_COLUMNS = ("ttft_p90_s", "ttft_p99_s", "itl_p90_s", "itl_p99_s", "e2e_p99_s", "throughput_tokens_per_s")


@dataclass(frozen=True)
class ReplicaPlan:
    """How many replicas, with which knobs, hold an SLO at a load.

    Attributes
    ----------
    num_replicas : int
        The fewest replicas found to meet the SLO: the fleet of ``num_replicas`` meets it and
        the fleet of one fewer does not, both simulated [count].
    engine : EngineConfig
        Every replica's engine (the tuner's budget and cap, or the engine given).
    rate_per_s : float
        The fleet's offered load [1/s].
    slo : SLO
    router : str
        The router the fleets were simulated behind (its name, or its class's).
    cost : str
        The step-cost model every simulation used.
    fleet : FleetResult
        The run of ``num_replicas`` replicas.
    fewer : FleetResult or None
        The run of ``num_replicas − 1`` (``None`` when one replica suffices).
    fewer_violations : tuple of Violation
        What the fleet of one fewer broke, worst first.
    checked : pandas.DataFrame
        Every fleet simulated, by ``num_replicas``: ``meets``, ``worst_metric`` and
        ``worst_ratio`` (value / limit of the worst limit; ≤ 1 when it meets) and the fleet's
        TTFT, ITL and end-to-end percentiles [s] and ``throughput_tokens_per_s``.
    max_num_queued_reqs, max_num_queued_tokens : int or None
        vLLM's queue caps per replica sized for the SLO (module docstring); ``None`` when the
        SLO has no TTFT limit to size them by.
    tuned : TuneResult or None
        The tuner's recommendation for one replica (``None`` when the engine was given).
    first_guess : int
        Where the search started: the load over the tuned replica's capacity, rounded up (1
        without the tuner) [count].
    """

    num_replicas: int
    engine: EngineConfig
    rate_per_s: float
    slo: SLO
    router: str
    cost: str
    fleet: FleetResult = field(repr=False)
    fewer: FleetResult | None = field(repr=False)
    fewer_violations: tuple[Violation, ...]
    checked: pd.DataFrame = field(repr=False)
    max_num_queued_reqs: int | None
    max_num_queued_tokens: int | None
    tuned: TuneResult | None = field(default=None, repr=False)
    first_guess: int = 1

    @property
    def replicas(self) -> int:
        """:attr:`num_replicas` (the name ``simulate_fleet`` gives it) [count]."""
        return self.num_replicas

    @property
    def num_fewer(self) -> int:
        """One replica fewer than the plan: the fleet size that breaks the SLO [count] (0 when
        one replica suffices)."""
        return self.num_replicas - 1

    @property
    def rate_per_replica_s(self) -> float:
        """The load each replica takes on average [1/s]."""
        return self.rate_per_s / self.num_replicas

    def vllm_args(self) -> str:
        """Each replica's ``vllm serve`` scheduling flags."""
        args = [
            f"--max-num-batched-tokens {self.engine.max_num_batched_tokens}",
            f"--max-num-seqs {self.engine.max_num_seqs}",
        ]
        if self.max_num_queued_reqs is not None:
            args.append(f"--max-num-queued-reqs {self.max_num_queued_reqs}")
        if self.max_num_queued_tokens is not None:
            args.append(f"--max-num-queued-tokens {self.max_num_queued_tokens}")
        return " ".join(args)

    def numbers(self) -> dict[str, Any]:
        """The plan as a plain dict: ``num_replicas``, ``rate_per_s``, ``rate_per_replica_s``
        [1/s], the knobs, the queue caps, ``router``, ``cost``, ``slo`` (metric -> limit [s]),
        ``fleet`` (the summary of the run that meets it), ``fewer_violations`` (metric, value
        [s], limit [s]) and ``checked`` (its rows)."""
        return {
            "num_replicas": self.num_replicas,
            "rate_per_s": self.rate_per_s,
            "rate_per_replica_s": self.rate_per_replica_s,
            "max_num_batched_tokens": self.engine.max_num_batched_tokens,
            "max_num_seqs": self.engine.max_num_seqs,
            "max_num_queued_reqs": self.max_num_queued_reqs,
            "max_num_queued_tokens": self.max_num_queued_tokens,
            "router": self.router,
            "cost": self.cost,
            "slo": self.slo.limits,
            "fleet": self.fleet.summary(),
            "fewer_violations": [(v.metric, v.value_s, v.limit_s) for v in self.fewer_violations],
            "checked": self.checked.to_dict(orient="records"),
        }

    def _rows(self) -> list[tuple[str, str]]:
        broken = ", ".join(f"{v.metric} ({v.ratio:.2f}x)" for v in self.fewer_violations)
        fewer = "one replica meets it" if self.fewer is None else f"{self.num_replicas - 1:,} break {broken}"
        return [
            ("replicas", f"{self.num_replicas:,} ({self.rate_per_replica_s:.3g} requests/s each)"),
            ("load", f"{self.rate_per_s:.3g} requests/s"),
            ("flags", self.vllm_args()),
            ("router", self.router),
            ("cost model", self.cost),
            ("SLO", str(self.slo)),
            ("one fewer", fewer),
            ("fleets simulated", f"{len(self.checked):,}"),
        ]

    def __repr__(self) -> str:
        return one_line("ReplicaPlan", f"{self.num_replicas} replicas, {self.cost} cost", self._rows())

    def _repr_html_(self) -> str:
        return html_table("ReplicaPlan", self._rows())


def queue_caps(
    slo: SLO, engine: EngineConfig, cost: CostModel, mean_prompt_tokens: float
) -> tuple[int | None, int | None]:
    """vLLM's ``max_num_queued_reqs`` and ``max_num_queued_tokens`` for one replica, sized for
    ``slo`` as vLLM's ``SchedulerConfig`` documents them (module docstring); ``(None, None)``
    when the SLO limits no TTFT.

    Parameters
    ----------
    slo : SLO
    engine : EngineConfig
        The replica's engine (its budget and cap).
    cost : CostModel
        Its step cost: the prefill throughput is ``budget / batch_time_s`` of one step of a full
        budget of prompt tokens [tokens/s].
    mean_prompt_tokens : float
        The workload's mean prompt length [tokens].
    """
    ttft_limits = [limit for metric, limit in slo.limits.items() if metric.startswith("ttft_")]
    if not ttft_limits:
        return None, None
    budget = engine.max_num_batched_tokens
    step_s = cost.batch_time_s(Batch(prefill_tokens=(budget,), prefill_context_tokens=(0,)))
    tokens = int(min(ttft_limits) * budget / step_s)
    return engine.max_num_seqs + math.ceil(tokens / mean_prompt_tokens), tokens


def plan_replicas(
    workload: SweepWorkload | Iterable[Request] | pd.DataFrame,
    *,
    slo: SLO,
    hardware: str | HardwareSpec | None = None,
    model: str | ModelSpec | None = None,
    rate_per_s: float | None = None,
    cost: CostSpec = "typical",
    engine: EngineConfig | None = None,
    tune_knobs: bool = True,
    router: str | Router | Callable[..., int] = "round_robin",
    max_replicas: int = MAX_PLANNED_REPLICAS,
    seed: int = 0,
    executor: Any = None,
    progress: ProgressSpec = False,
) -> ReplicaPlan:
    """The fewest replicas that meet ``slo`` at ``rate_per_s``, each tuned (module docstring).

    Parameters
    ----------
    workload : SweepWorkload, list of Request or pandas.DataFrame
        What arrives: a workload that regenerates at any load
        (:class:`~budgetlab.workload.SyntheticWorkload`, :class:`~budgetlab.workload.TraceWorkload`,
        ...) or a list of requests / a frame: the fleets are then those requests as given (with
        ``rate_per_s``, their arrivals scaled to it, as a trace), and the tuner replays them as a
        trace at its loads.
    slo : SLO
        The latency limits every fleet's summary is checked against.
    hardware, model : str or spec, optional
        Each replica's GPU and model (a replica's deployment, tensor parallelism included, is
        ``engine``'s); default the cost model's when ``cost`` is an instance (a named cost needs
        them).
    rate_per_s : float, optional
        The fleet's offered load [1/s]; default the workload's own rate (a trace's or a list's
        arrivals), which a synthetic workload does not have.
    cost : str, callable or cost model
        As :func:`~budgetlab.experiments.tune.tune`'s (default ``"typical"``: the real-engine
        cost).
    engine : EngineConfig, optional
        With ``tune_knobs`` the template for the knobs not tuned (default vLLM's); without, every
        replica's engine (default ``EngineConfig.vllm_defaults(hardware)``).
    tune_knobs : bool
        Tune each replica's budget and cap for the SLO (default) or keep ``engine``'s.
    router : str, Router or callable
        As :func:`~budgetlab.simulate_fleet`'s (default ``"round_robin"``).
    max_replicas : int
        The most replicas tried [count], at most :data:`MAX_PLANNED_REPLICAS`.
    seed : int
        The workload's seed [-].
    executor, progress
        For the tuner (:func:`~budgetlab.experiments.tune.tune`); the fleets run here.

    Returns
    -------
    ReplicaPlan

    Raises
    ------
    SLOUnattainableError
        ``max_replicas`` replicas still break the SLO (it fails for one replica at any load: more
        replicas cannot mend an ITL limit below a step's time), or the tuner finds no budget.
    ParameterError
        No load for a synthetic workload, a load or count out of range, or a bad SLO, cost or
        workload.
    """
    check_slo(slo)
    cost = check_cost(cost)
    check_executor(executor)
    seed = random_seed("seed", seed)
    if not isinstance(tune_knobs, bool):
        raise ParameterError(f"tune_knobs must be True or False, got {tune_knobs!r}")
    limit = int_at_least("max_replicas", max_replicas, 1, what="an int >= 1 [replicas]")
    if limit > MAX_PLANNED_REPLICAS:
        raise ParameterError(
            f"max_replicas must be at most {MAX_PLANNED_REPLICAS:,}: every try simulates the whole workload"
        )
    given: Sequence[Request] | None = None  # a list replayed as given at its own rate
    if not isinstance(workload, SweepWorkload):
        given = _as_requests(workload)
        workload = TraceWorkload.from_requests(given)
        given = given if rate_per_s is None else None
    workload = check_workload(workload)
    if rate_per_s is None:
        native = getattr(workload, "native_rate_per_s", None)
        if native is None:
            raise ParameterError(
                f"rate_per_s is needed: {type(workload).__name__} has no load of its own (give the fleet's "
                "offered load in requests per second)"
            )
        rate_per_s = float(native)
    rate = number_in("rate_per_s", rate_per_s, what="requests per second > 0", low=0.0, low_open=True)
    hw, mdl = _deployment_specs(hardware, model, cost)
    tuned = None
    if tune_knobs:
        tuned = tune(
            workload, slo=slo, hardware=hw, model=mdl, cost=cost, engine=engine, seed=seed,
            executor=executor, progress=progress,
        )  # fmt: skip
        chosen = tuned.engine
        first = max(1, math.ceil(rate / tuned.capacity_per_s)) if tuned.capacity_per_s > 0 else 1
    else:
        chosen = engine if engine is not None else EngineConfig.vllm_defaults(hw)
        if not isinstance(chosen, EngineConfig):
            raise ParameterError(f"engine must be an EngineConfig or None, got {type(engine).__name__}")
        first = 1
    step_cost = make_cost(cost, hw, mdl, engine=chosen)
    requests = given if given is not None else workload_requests(workload, rate_per_s=rate, seed=seed)
    policy = make_router(router)
    runs: dict[int, FleetResult] = {}

    def meets(num: int) -> bool:
        if num not in runs:
            runs[num] = simulate_fleet(requests, replicas=num, engine=chosen, cost=step_cost, router=policy)
        return slo.holds(runs[num].summary())

    low, high = _bracket(meets, min(first, limit), limit, slo, runs)
    while high - low > 1:  # low breaks the SLO (0: no fleet), high meets it
        middle = (low + high) // 2
        low, high = (low, middle) if meets(middle) else (middle, high)
    fewer = runs.get(low)
    prompts = pd.Series([r.prompt_tokens for r in requests], dtype=float)
    reqs, tokens = queue_caps(slo, chosen, step_cost, float(prompts.mean()))
    return ReplicaPlan(
        num_replicas=high,
        engine=chosen,
        rate_per_s=rate,
        slo=slo,
        router=router if isinstance(router, str) else type(policy).__name__,
        cost=cost_label(cost),
        fleet=runs[high],
        fewer=fewer,
        fewer_violations=tuple(slo.violations(fewer.summary())) if fewer is not None else (),
        checked=_checked(runs, slo),
        max_num_queued_reqs=reqs,
        max_num_queued_tokens=tokens,
        tuned=tuned,
        first_guess=min(first, limit),
    )


def _deployment_specs(
    hardware: str | HardwareSpec | None, model: str | ModelSpec | None, cost: CostSpec
) -> tuple[HardwareSpec, ModelSpec]:
    """The GPU and model: as given, else the cost model's."""
    hw = resolve_hardware(hardware) if hardware is not None else hardware_of(cost)
    mdl = resolve_model(model) if model is not None else model_of(cost)
    if hw is None or mdl is None:
        missing = " and ".join(name for name, value in (("hardware", hw), ("model", mdl)) if value is None)
        raise ParameterError(
            f"plan_replicas needs the {missing}: pass hardware= and model= (catalog slugs or specs), or a cost "
            "model instance that carries them (e.g. CalibratedCost.typical(hw, model, engine=engine))"
        )
    return hw, mdl


def _as_requests(workload: object) -> Sequence[Request]:
    """A list of requests or a frame as requests (what a trace workload wraps)."""
    from budgetlab.workload import requests_from_frame

    if isinstance(workload, pd.DataFrame):
        return requests_from_frame(workload)
    if isinstance(workload, Iterable) and not isinstance(workload, str | bytes):
        return list(workload)
    raise ParameterError(
        "workload must be a SweepWorkload (SyntheticWorkload, TraceWorkload, ...), a list of Request or a "
        f"DataFrame, got {type(workload).__name__}"
    )


def _bracket(
    meets: Callable[[int], bool], first: int, limit: int, slo: SLO, runs: dict[int, FleetResult]
) -> tuple[int, int]:
    """``(low, high)``: ``low`` replicas break the SLO (0 always does), ``high`` meet it,
    galloping from ``first``."""
    if meets(first):
        high, step = first, 1
        while high - step > 0 and meets(high - step):
            high, step = high - step, step * 2
        return max(high - step, 0), high
    low, step = first, 1
    while True:
        if low == limit:
            worst = slo.violations(runs[limit].summary())
            raise SLOUnattainableError(
                f"{limit:,} replicas still break the SLO ({', '.join(f'{v.metric} {v.ratio:.2f}x' for v in worst)}): "
                "raise max_replicas, or relax a limit more replicas cannot mend (a step's time bounds the ITL)",
                rate_per_s=math.nan,
                violations=tuple(worst),
            )
        high = min(low + step, limit)
        if meets(high):
            return low, high
        low, step = high, step * 2


def _checked(runs: dict[int, FleetResult], slo: SLO) -> pd.DataFrame:
    """One row per fleet simulated, by size."""
    rows = []
    for num in sorted(runs):
        summary = runs[num].summary()
        worst = slo.violations(summary)
        ratios = {metric: float(summary[metric]) / limit for metric, limit in slo.limits.items()}
        top = max(ratios, key=lambda m: ratios[m]) if ratios else ""
        rows.append(
            {
                "num_replicas": num,
                "meets": not worst,
                "worst_metric": top,
                "worst_ratio": ratios.get(top, math.nan),
                **{column: summary[column] for column in _SUMMARY_COLUMNS},
            }
        )
    return pd.DataFrame(rows)


def replicas_by_load(
    workload: SweepWorkload,
    *,
    rates_per_s: Sequence[float],
    routers: Sequence[str],
    slo: SLO,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    engine: EngineConfig,
    cost: CostSpec = "typical",
    max_replicas: int = MAX_PLANNED_REPLICAS,
    seed: int = 0,
) -> pd.DataFrame:
    """The replicas each router needs to meet ``slo`` at each load, every replica on ``engine``
    (:func:`plan_replicas` with ``tune_knobs=False``; tune the engine once beforehand).

    Returns
    -------
    pandas.DataFrame
        One row per load and router: ``rate_per_s`` [1/s], ``router``, ``num_replicas`` [count],
        the fleet's ``ttft_p90_s``, ``itl_p90_s`` and ``e2e_p99_s`` at that size [s], and ``cost``.
    """
    rows = []
    for rate in rates_per_s:
        for router in routers:
            plan = plan_replicas(
                workload, rate_per_s=rate, slo=slo, hardware=hardware, model=model, cost=cost, engine=engine,
                tune_knobs=False, router=router, max_replicas=max_replicas, seed=seed,
            )  # fmt: skip
            summary = plan.fleet.summary()
            rows.append(
                {
                    "rate_per_s": float(rate),
                    "router": router,
                    "num_replicas": plan.num_replicas,
                    **{key: float(summary[key]) for key in ("ttft_p90_s", "itl_p90_s", "e2e_p99_s")},
                    "cost": plan.cost,
                }
            )
    return pd.DataFrame(rows)


def compare_routers(
    requests: Iterable[Request] | pd.DataFrame | ClosedLoopClients,
    *,
    replicas: int,
    routers: Sequence[str],
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    engine: EngineConfig,
    cost: CostSpec = "typical",
) -> pd.DataFrame:
    """What the router buys: the same requests on ``replicas`` replicas behind each router.

    Returns
    -------
    pandas.DataFrame
        One row per router: ``router``, ``ttft_p50_s``, ``ttft_p90_s``, ``itl_p90_s``,
        ``e2e_p99_s`` [s], ``prefix_hit_rate`` (the share of prompt tokens the replicas' prefix
        caches served) [-], ``throughput_tokens_per_s`` [1/s], ``fewest_requests`` and
        ``most_requests`` (the least and most any replica was sent) [count], and ``cost``.
    """
    hw, mdl = resolve_hardware(hardware), resolve_model(model)
    step_cost = make_cost(check_cost(cost), hw, mdl, engine=engine)
    rows = []
    for router in routers:
        fleet = simulate_fleet(requests, replicas=replicas, engine=engine, cost=step_cost, router=router)
        summary = fleet.summary()
        shares = fleet.assignment.value_counts().reindex(range(replicas), fill_value=0)
        rows.append(
            {
                "router": router,
                **{
                    key: float(summary[key])
                    for key in ("ttft_p50_s", "ttft_p90_s", "itl_p90_s", "e2e_p99_s", "prefix_hit_rate")
                },
                "throughput_tokens_per_s": float(summary["throughput_tokens_per_s"]),
                "fewest_requests": int(shares.min()),
                "most_requests": int(shares.max()),
                "cost": cost_label(cost),
            }
        )
    return pd.DataFrame(rows)
