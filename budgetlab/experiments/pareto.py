"""The throughput–interactivity frontier: output tokens per second per GPU against tokens per
second per user, over budgets, sequence caps, client concurrency and replicas.

The industry's picture of a deployment (``vllm bench sweep plot_pareto``, InferenceMAX,
NVIDIA's AIConfigurator): each configuration is run closed-loop at a concurrency ``C`` (``C``
clients, each sending its next request as its last one ends: :class:`~budgetlab.ClosedLoopClients`),
and placed at ``x = throughput / C`` (tokens/s per user) and ``y = throughput / GPUs``
(tokens/s per GPU), ``throughput`` being the output tokens per second over the run — vLLM
0.33's ``vllm/benchmarks/sweep/plot_pareto.py`` (``_prepare_records``: ``output_throughput``
over the user count and over ``tp × pp × dp``). The Pareto front is the configurations no other
beats on both; an SLO marks which points meet it.

:func:`throughput_frontier` runs the grid as independent tasks on any executor
(:mod:`~budgetlab.experiments.executors`: a process pool, Dask, Ray), one row per point;
:func:`pareto_front` marks a front in any table.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from budgetlab._checks import int_at_least, random_seed
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost.named import CostSpec, check_cost, cost_label, make_cost
from budgetlab.errors import ParameterError
from budgetlab.experiments.executors import check_executor, run_tasks
from budgetlab.experiments.progress import ProgressSpec
from budgetlab.experiments.slo import SLO, SLO_METRICS, check_slo
from budgetlab.experiments.sweep import engine_template
from budgetlab.fleet import simulate_fleet
from budgetlab.fleet.routers import ROUTERS
from budgetlab.simulator import simulate
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request
from budgetlab.workload import ClosedLoopClients, SweepWorkload, TraceWorkload, check_workload, workload_requests

__all__ = ["throughput_frontier", "pareto_front", "slo_tokens_per_s_per_user", "FRONTIER_COLUMNS"]

#: The columns of :func:`throughput_frontier`'s table.
FRONTIER_COLUMNS = (
    "max_num_batched_tokens",
    "max_num_seqs",
    "concurrency",
    "num_replicas",
    "num_gpus",
    "throughput_tokens_per_s",
    "tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "ttft_p90_s",
    "tpot_mean_s",
    "itl_p90_s",
    "e2e_p99_s",
    "meets_slo",
    "on_front",
    "cost",
)


@dataclass(frozen=True)
class FrontierPoint:
    """One configuration of the grid, run as one task (picklable: the workload regenerates in
    the worker)."""

    workload: SweepWorkload
    engine: EngineConfig
    concurrency: int
    num_replicas: int
    router: str
    hardware: HardwareSpec
    model: ModelSpec
    cost: CostSpec
    seed: int


def run_point(point: FrontierPoint) -> dict[str, float]:
    """The point's closed-loop run: its throughput [1/s] and every latency an SLO can limit [s]."""
    requests = workload_requests(point.workload, rate_per_s=1.0, seed=point.seed)  # arrivals unused
    clients = ClosedLoopClients(point.concurrency, requests)
    cost = make_cost(point.cost, point.hardware, point.model, engine=point.engine)
    if point.num_replicas == 1:
        summary = simulate(clients, engine=point.engine, cost=cost).summary()
    else:
        fleet = simulate_fleet(
            clients, replicas=point.num_replicas, engine=point.engine, cost=cost, router=point.router
        )
        summary = fleet.summary()
    return {key: float(summary[key]) for key in ("throughput_tokens_per_s", *SLO_METRICS)}


def pareto_front(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> np.ndarray:
    """Which points no other point beats on both ``x`` and ``y`` (larger is better in both):
    a boolean mask. A point equal to another on both is on the front with it; NaN is never.

    Examples
    --------
    >>> pareto_front([1, 2, 3, 2], [3, 2, 1, 1]).tolist()
    [True, True, True, False]
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1:
        raise ParameterError(f"x and y must be two sequences of one length, got shapes {xs.shape} and {ys.shape}")
    on = np.zeros(xs.shape, dtype=bool)
    best = -math.inf
    # by x descending (y descending among equal x): a point is on the front when its y is at
    # least every y seen so far at a larger or equal x (and strictly more than at a larger x)
    order = np.lexsort((-ys, -xs))
    previous_x, best_before_x = math.nan, -math.inf
    for i in order:
        if math.isnan(xs[i]) or math.isnan(ys[i]):
            continue
        if xs[i] != previous_x:
            previous_x, best_before_x = xs[i], best
        if ys[i] > best_before_x and ys[i] >= best:
            on[i] = True
        best = max(best, ys[i])
    return on


def slo_tokens_per_s_per_user(slo: SLO) -> float | None:
    """The interactivity an SLO asks of each user [tokens/s]: one over its tightest time per
    output token (a TPOT or ITL limit), ``None`` when it limits neither. A user's tokens come
    no faster than one per TPOT, so a point left of it cannot meet that limit; the frontier
    chart shades the region right of it."""
    limits = [limit for metric, limit in slo.limits.items() if metric.startswith(("tpot_", "itl_", "max_itl"))]
    return 1.0 / min(limits) if limits else None


def throughput_frontier(
    workload: SweepWorkload | Iterable[Request],
    *,
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    max_num_batched_tokens: Sequence[int],
    max_num_seqs: Sequence[int],
    concurrency: Sequence[int],
    replicas: Sequence[int] = (1,),
    router: str = "round_robin",
    cost: CostSpec = "typical",
    engine: EngineConfig | None = None,
    slo: SLO | None = None,
    seed: int = 0,
    executor: Any = None,
    progress: ProgressSpec = None,
) -> pd.DataFrame:
    """Every configuration of the grid run closed-loop, placed on the frontier (module docstring).

    Parameters
    ----------
    workload : SweepWorkload or list of Request
        The requests the clients send (their lengths and sharing; arrival times are not used),
        all of them at every point: a few times the largest concurrency or more, so the run
        reaches its steady state.
    hardware, model : str or spec
        One replica's GPU and model.
    max_num_batched_tokens, max_num_seqs : sequence of int
        The budgets [tokens] and sequence caps [count] tried.
    concurrency : sequence of int
        Clients [count] (``vllm bench serve --max-concurrency``; across the fleet).
    replicas : sequence of int
        Fleet sizes tried [count] (default one replica).
    router : str
        The fleet's router, a name of ``simulate_fleet``'s (default ``"round_robin"``).
    cost : str, callable or cost model
        The step cost (default ``"typical"``, the real-engine cost), named in the ``cost`` column.
    engine : EngineConfig, optional
        The template for the other knobs (tensor parallelism included); default vLLM's.
    slo : SLO, optional
        ``meets_slo`` says whether each point meets it (NaN-free bools); without, all True.
    seed : int
        The workload's seed.
    executor, progress
        As :func:`~budgetlab.experiments.sweep.sweep`'s: the points run as independent tasks.

    Returns
    -------
    pandas.DataFrame
        One row per point (:data:`FRONTIER_COLUMNS`), in grid order (budget, cap, concurrency,
        replicas): the knobs, ``num_gpus`` (replicas × tensor × pipeline parallel size),
        ``throughput_tokens_per_s`` (output tokens over the run [1/s]),
        ``tokens_per_s_per_gpu`` and ``tokens_per_s_per_user`` (it over the GPUs and over the
        concurrency), the latencies [s], ``meets_slo``, ``on_front`` (the Pareto front of the
        two rates, over the points that meet the SLO) and ``cost``.

    Raises
    ------
    ParameterError
        An empty or invalid grid value, an unknown router, or a bad workload, cost or SLO.
    """
    if slo is not None:
        check_slo(slo)
    cost = check_cost(cost)
    check_executor(executor)
    seed = random_seed("seed", seed)
    if router not in ROUTERS:
        raise ParameterError(f"router must be one of {', '.join(ROUTERS)}, got {router!r}")
    sent = workload if isinstance(workload, SweepWorkload) else TraceWorkload.from_requests(list(workload))
    workload = check_workload(sent)
    template = engine_template(engine)
    hw, mdl = resolve_hardware(hardware), resolve_model(model)
    grid = {
        name: _grid(name, values)
        for name, values in (
            ("max_num_batched_tokens", max_num_batched_tokens),
            ("max_num_seqs", max_num_seqs),
            ("concurrency", concurrency),
            ("replicas", replicas),
        )
    }
    points = [
        FrontierPoint(
            workload,
            replace(template, max_num_batched_tokens=budget, max_num_seqs=cap),
            clients,
            num,
            router,
            hw,
            mdl,
            cost,
            seed,
        )
        for budget, cap, clients, num in itertools.product(*grid.values())
    ]
    rows = run_tasks(
        run_point,
        points,
        executor=executor,
        progress=progress,
        describe=lambda i: _describe(points[i]),
        desc="budgetlab frontier",
    )
    table = pd.DataFrame(
        [
            {
                "max_num_batched_tokens": p.engine.max_num_batched_tokens,
                "max_num_seqs": p.engine.max_num_seqs,
                "concurrency": p.concurrency,
                "num_replicas": p.num_replicas,
                "num_gpus": p.num_replicas * p.engine.tensor_parallel_size * p.engine.pipeline_parallel_size,
                **row,
            }
            for p, row in zip(points, rows, strict=True)
        ]
    )
    table["tokens_per_s_per_gpu"] = table.throughput_tokens_per_s / table.num_gpus
    table["tokens_per_s_per_user"] = table.throughput_tokens_per_s / table.concurrency
    table["meets_slo"] = [slo.holds(row) if slo is not None else True for row in table.to_dict(orient="records")]
    met = table.meets_slo.to_numpy()
    front = np.zeros(len(table), dtype=bool)
    front[met] = pareto_front(table.tokens_per_s_per_user[met], table.tokens_per_s_per_gpu[met])
    table["on_front"] = front
    table["cost"] = cost_label(cost)
    return table[list(FRONTIER_COLUMNS)]


def _grid(name: str, values: Sequence[int]) -> list[int]:
    """A grid axis: a non-empty sequence of ints >= 1, duplicates dropped, order kept."""
    if isinstance(values, int | np.integer):
        values = [int(values)]
    if not isinstance(values, Iterable) or isinstance(values, str | bytes):
        raise ParameterError(f"{name} must be a sequence of ints >= 1, got {values!r}")
    out = list(dict.fromkeys(int_at_least(name, v, 1, what="ints >= 1") for v in values))
    if not out:
        raise ParameterError(f"{name} must name at least one value")
    return out


def _describe(point: FrontierPoint) -> str:
    return (
        f"budget {point.engine.max_num_batched_tokens:,}, max_num_seqs {point.engine.max_num_seqs:,}, "
        f"{point.concurrency:,} clients, {point.num_replicas} replica(s)"
    )
