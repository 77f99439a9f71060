"""Load sweeps: the second seed's method, simulated.

"Run a load sweep with your own prompt-length and output-length distributions … plot
first-token latency and per-token latency against offered load … the load at which your latency
SLO breaks is your capacity per replica." :func:`sweep` does the first half with
:func:`budgetlab.simulate` instead of hours of live GPU runs: it runs the simulator over a grid
(budget, ``max_num_seqs``, offered load, hardware, model, cost model, seed) on any
:class:`concurrent.futures.Executor` (:mod:`budgetlab.experiments.executors`; a Dask cluster
works too) and returns one tidy table, in grid order. The workloads regenerate their requests at
any load with common random numbers (:class:`~budgetlab.workload.SyntheticWorkload`,
:class:`~budgetlab.workload.TraceWorkload`); the second half, capacity under an SLO, is
:mod:`budgetlab.experiments.capacity`.

The table is the same, row for row and bit for bit, whichever executor computes it: every grid
point is an independent, deterministic simulation (:class:`SweepPoint`, :func:`run_point`), and
rows are placed by grid position, not by completion order.

Offered load and the tables' columns
------------------------------------
``rate_per_s`` is the *offered* load: requests per second arriving at the replica. The
summary's ``requests_per_s`` is what the replica actually completed. Every table row holds the
grid knobs (:data:`KNOB_COLUMNS`), every key of :meth:`SimResult.summary` (``num_kv_blocks`` and
``num_requests`` among them), the gate diagnostics of :func:`budgetlab.metrics.gate_stats` and
the configuration (``block_size``, ``policy``, ``scheduling_policy``, ``enable_prefix_caching``,
``async_scheduling``, ``workload``).
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from budgetlab._checks import (
    MAX_LOAD_FRACTION,
    MAX_RATE_PER_S,
    MAX_REQUESTS,
    grid_axis,
    int_at_least,
    number_in,
    positive_rate,
    random_seed,
)
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost.named import CostSpec, check_cost, cost_label, make_cost
from budgetlab.cost.protocol import CostModel
from budgetlab.errors import ConfigError, ParameterError
from budgetlab.experiments.executors import run_tasks
from budgetlab.experiments.progress import ProgressSpec
from budgetlab.memory import num_kv_blocks
from budgetlab.metrics import SUMMARY_QUANTILES, gate_stats
from budgetlab.simulator import SimMode, simulate
from budgetlab.specs import Batch, EngineConfig, HardwareSpec, ModelSpec
from budgetlab.speculative import draft_rules
from budgetlab.workload import (
    AcceptanceModel,
    SweepWorkload,
    TraceWorkload,
    check_workload,
    mean_sequence_tokens,
    workload_requests,
)

__all__ = [
    "sweep",
    "SweepPoint",
    "run_point",
    "KNOB_COLUMNS",
    "service_rate_per_s",
    "max_service_rate_per_s",
    "engine_template",
    "load_grid",
    "LOAD_PERCENTILES",
    "percentiles_by_budget",
]

SweepValue = float | int | str | bool
"""What a sweep row holds: numbers, the slugs and labels."""


def engine_template(engine: object) -> EngineConfig:
    """The engine whose other knobs a sweep or the tuner keeps; ``None``: vLLM's defaults.

    Raises
    ------
    ParameterError
        Anything but an :class:`~budgetlab.specs.EngineConfig` or ``None``.
    """
    if engine is None:
        return EngineConfig(max_num_batched_tokens=8192, max_num_seqs=256)
    if not isinstance(engine, EngineConfig):
        raise ParameterError(f"engine must be an EngineConfig template or None, got {type(engine).__name__}")
    return engine


def max_service_rate_per_s(cost: CostModel, *, max_num_batched_tokens: int, mean_sequence_tokens: float) -> float:
    """Offered load a replica cannot exceed for long: full-budget steps back to back [1/s].

    ``max_num_batched_tokens / step_time(one full-budget chunk) / mean_sequence_tokens``: every
    request needs about its prompt plus output tokens of step capacity. The simulator's
    latencies blow up above it; :func:`capacity` starts its search just above it.

    Parameters
    ----------
    cost : cost model
    max_num_batched_tokens : int
        Token budget [tokens].
    mean_sequence_tokens : float
        The workload's mean prompt + output [tokens].
    """
    budget = int_at_least("max_num_batched_tokens", max_num_batched_tokens)
    step_s = float(cost.batch_time_s(Batch(prefill_tokens=(budget,), prefill_context_tokens=(0,))))
    return budget / step_s / float(mean_sequence_tokens)


def service_rate_per_s(
    workload: SweepWorkload,
    *,
    budgets: Sequence[int],
    hardware: str | HardwareSpec,
    model: str | ModelSpec,
    cost: CostSpec = "typical",
    seed: int = 0,
) -> float:
    """The highest offered load a replica sustains with any of ``budgets`` [1/s].

    :func:`max_service_rate_per_s` for each budget (full-budget steps back to back, divided by
    the workload's mean prompt + output length), the largest of them. Above it queues grow
    without bound, so a load sweep needs to reach just past it.

    Parameters
    ----------
    workload : SweepWorkload
        Its mean sequence length (:func:`mean_sequence_tokens`) sets the rate.
    budgets : sequence of int
        Token budgets [tokens].
    hardware : str or HardwareSpec
    model : str or ModelSpec
    cost : str, callable or cost model
        See :func:`make_cost`.
    seed : int
        Workload seed for the mean length [-].
    """
    step_cost = make_cost(check_cost(cost), resolve_hardware(hardware), resolve_model(model))
    mean_tokens = mean_sequence_tokens(workload, seed=seed)
    return max(
        max_service_rate_per_s(step_cost, max_num_batched_tokens=int(b), mean_sequence_tokens=mean_tokens)
        for b in budgets
    )


def load_grid(service_rate_per_s: float, *, num_loads: int, max_load_fraction: float = 1.1) -> np.ndarray:
    """Offered loads for a sweep: ``num_loads`` evenly spaced up to ``max_load_fraction`` of the
    replica's service rate [1/s], rounded to three significant digits.

    With the defaults the grid stops just past the service rate (:func:`service_rate_per_s`),
    where every configuration's queue grows without bound, so each curve shows its hockey
    stick.

    Parameters
    ----------
    service_rate_per_s : float
        The replica's service rate [1/s], > 0.
    num_loads : int
        Loads in the grid [count], at least 1 (rounding may merge two).
    max_load_fraction : float
        The highest load as a fraction of the service rate [-], > 0.

    Returns
    -------
    numpy.ndarray of float
        The loads, increasing, without repeats [1/s].

    Raises
    ------
    ParameterError
        ``num_loads`` below 1, or a rate or fraction that is not a finite number > 0.

    Examples
    --------
    ``38 × 1.1 = 41.8`` split in four: ``10.45, 20.9, 31.35, 41.8``, rounded to three digits.

    >>> load_grid(38.0, num_loads=4).tolist()
    [10.5, 20.9, 31.4, 41.8]
    """
    count = int_at_least("num_loads", num_loads, 1, maximum=MAX_REQUESTS)
    rate = number_in(
        "service_rate_per_s", service_rate_per_s, low=0.0, low_open=True, what="> 0", maximum=MAX_RATE_PER_S
    )
    fraction = number_in(
        "max_load_fraction", max_load_fraction, low=0.0, low_open=True, what="> 0", maximum=MAX_LOAD_FRACTION
    )
    rates = rate * fraction * np.arange(1, count + 1) / count
    return np.unique([float(f"{r:.3g}") for r in rates])


# --------------------------------------------------------------------------------------------
# One grid point
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepPoint:
    """One simulation of a sweep: everything a worker needs, small and picklable.

    Attributes
    ----------
    workload : SweepWorkload
    rate_per_s : float
        Offered load [1/s].
    seed : int
    engine : EngineConfig
    hardware : HardwareSpec
    model : ModelSpec
    cost : str, callable or cost model
        See :func:`make_cost`.
    mode : str
        The simulator's mode (``"fast"`` or its reference stepping mode).
    acceptance : AcceptanceModel or None
        Speculative decoding's acceptance (:func:`budgetlab.simulate`'s ``acceptance``), drawn
        with the point's ``seed`` as ``acceptance_seed``.
    """

    workload: SweepWorkload
    rate_per_s: float
    seed: int
    engine: EngineConfig
    hardware: HardwareSpec
    model: ModelSpec
    cost: CostSpec = "typical"
    mode: SimMode = "fast"
    acceptance: AcceptanceModel | None = None


def run_point(point: SweepPoint) -> dict[str, SweepValue]:
    """Simulate one grid point: the summary plus the gate diagnostics, as one dict.

    A module-level function so process pools and Dask can ship it to workers.
    """
    requests = workload_requests(point.workload, rate_per_s=point.rate_per_s, seed=point.seed)
    cost = make_cost(point.cost, point.hardware, point.model, engine=point.engine)
    result = simulate(
        requests,
        engine=point.engine,
        cost=cost,
        hardware=point.hardware,
        model=point.model,
        mode=point.mode,
        acceptance=point.acceptance,
        acceptance_seed=point.seed,  # each workload seed draws its own acceptance
    )
    row = {key: _plain(value) for key, value in result.summary().items()}
    row.update(gate_stats(result, engine=point.engine))
    return row


def _plain(value: SweepValue | np.generic) -> SweepValue:
    if isinstance(value, np.generic):
        return value.item()
    return value


# --------------------------------------------------------------------------------------------
# Sweeps
# --------------------------------------------------------------------------------------------

KNOB_COLUMNS = ("hardware", "model", "cost", "max_num_batched_tokens", "max_num_seqs", "seed", "rate_per_s")
"""The grid knobs, the first columns of every :func:`sweep` row."""


def sweep(
    workload: SweepWorkload,
    *,
    budgets: int | Sequence[int],
    max_num_seqs: int | Sequence[int],
    rates_per_s: float | Sequence[float] | None = None,
    time_scales: float | Sequence[float] | None = None,
    hardware: str | HardwareSpec | Sequence[str | HardwareSpec],
    model: str | ModelSpec | Sequence[str | ModelSpec],
    cost: CostSpec | Sequence[CostSpec] = "typical",
    seed: int | Sequence[int] = 0,
    engine: EngineConfig | None = None,
    skip_invalid: bool = False,
    executor: cf.Executor | None = None,
    progress: ProgressSpec = None,
    mode: SimMode = "fast",
    num_speculative_tokens: int | Sequence[int] | None = None,
    speculative_method: str | None = None,
    acceptance: AcceptanceModel | None = None,
) -> pd.DataFrame:
    """Simulate every point of a grid of knobs and loads; one tidy row per point.

    The grid is the product of ``hardware × model × cost × budgets × max_num_seqs ×
    num_speculative_tokens × seed × loads``, in the order given, the last varying fastest; rows
    come back in exactly that order whichever executor ran them and in whatever order they
    finished.

    Parameters
    ----------
    workload : SweepWorkload
        :class:`SyntheticWorkload` or :class:`TraceWorkload` (or anything with
        ``requests(rate_per_s=, seed=)`` and a ``label``), regenerated at each load.
    budgets : int or sequence of int
        ``max_num_batched_tokens`` values [tokens].
    max_num_seqs : int or sequence of int
        ``max_num_seqs`` values [count].
    rates_per_s : float or sequence of float
        Offered loads [1/s].
    time_scales : float or sequence of float
        Instead of ``rates_per_s``, for a :class:`TraceWorkload`: factors on the trace's gaps
        [-] (0.5 replays it twice as fast); converted to ``rate_per_s`` with
        :meth:`TraceWorkload.rate_for`.
    hardware : str, HardwareSpec or a sequence of them
        GPUs (catalog slugs or specs).
    model : str, ModelSpec or a sequence of them
    cost : str, callable, cost model, or a sequence of them
        ``"typical"`` (default: :meth:`CalibratedCost.typical
        <budgetlab.cost.CalibratedCost.typical>` for each point's deployment, the real-engine
        step cost), ``"ideal"`` (the seeds' roofline), a factory ``(hardware, model) -> cost
        model``, or an instance (see :func:`make_cost`); the ``cost`` column names it.
        Factories must be importable (module level) to run in worker processes; a
        :class:`SerialExecutor` takes anything.
    seed : int or sequence of int
        Workload seed(s) [-]; one row per seed (a trace ignores it). The same name and meaning
        as in :func:`~budgetlab.experiments.by_budget.capacity_by_budget` and
        :func:`~budgetlab.experiments.tune.tune`, so one ``knobs`` dict serves all three.
    engine : EngineConfig or None
        Template for the other knobs (``block_size``, ``policy``, ``gpu_memory_utilization``,
        ``long_prefill_token_threshold``, ``num_kv_blocks``, …); its budget and cap are
        replaced by the grid's. ``None``: vLLM's defaults, KV derived from memory.
    skip_invalid : bool
        Leave out points with ``budget < max_num_seqs`` (vLLM refuses them) instead of raising.
    executor : concurrent.futures.Executor or None
        Runs the points. ``None``: a local :class:`~concurrent.futures.ProcessPoolExecutor`
        with one worker per CPU (``forkserver`` start, so scripts need the usual
        ``if __name__ == "__main__":`` guard), shut down at the end. On a Dask cluster::

            from distributed import Client
            executor = Client("tcp://scheduler:8786").get_executor()

        An executor you pass is left running.
    progress : bool, None or callable
        A line that counts the points done (:mod:`budgetlab.experiments.progress`). ``None``
        (default): for grids of at least :data:`PROGRESS_MIN_POINTS` points, updating in
        place in Jupyter (blanked at the end) or on stderr when it is a terminal; ``True``:
        always; ``False``: never; a callable gets ``(done, total, label)`` after every point.
    mode : str
        Simulator mode (``"fast"``).
    num_speculative_tokens : int, sequence of int, or None
        Speculative decoding's ``k`` values [tokens], 0 for none. ``None``: the template's own ``k``.
    speculative_method : str or None
        The drafter of the points with ``k > 0`` (default: the template's).
    acceptance : AcceptanceModel or None
        How many drafts a verification accepts (:func:`budgetlab.simulate`'s ``acceptance``).

    Returns
    -------
    pandas.DataFrame
        One row per point: ``hardware``, ``model`` (slugs), ``cost`` (its name),
        ``max_num_batched_tokens``, ``max_num_seqs``, ``seed``, ``rate_per_s`` (offered load
        [1/s]; with a trace also ``time_scale``; when the grid speculates also
        ``num_speculative_tokens`` and ``speculative_method``), every summary key (``ttft_p90_s``,
        ``itl_p99_s``, ``requests_per_s`` achieved, ``kv_peak_fraction``, ``num_kv_blocks``,
        ``num_requests``, …), the gate diagnostics of :func:`gate_stats`, then
        ``block_size``, ``policy``, ``scheduling_policy``, ``enable_prefix_caching``,
        ``async_scheduling`` and ``workload`` (its label).

    Raises
    ------
    ConfigError
        A budget/cap pair vLLM refuses (unless ``skip_invalid``), or an engine template vLLM
        refuses.
    DoesNotFitError
        The model leaves no KV cache on a GPU of the grid (raised before anything runs).
    ParameterError
        An empty or repeated axis, a bad load, seed, cost or executor.

    Examples
    --------
    >>> w = SyntheticWorkload.conversation_like(num_requests=500)
    >>> table = sweep(w, budgets=[1024, 2048], max_num_seqs=[128], rates_per_s=[2, 4, 6],
    ...               hardware="h100-sxm", model="llama-3.1-8b")  # doctest: +SKIP
    """
    workload = check_workload(workload)
    template = engine_template(engine)
    budget_axis = grid_axis("budgets", budgets, int_at_least)
    cap_axis = grid_axis("max_num_seqs", max_num_seqs, int_at_least)
    rate_axis, scale_axis = _load_axis(workload, rates_per_s, time_scales)
    hw_axis = grid_axis("hardware", hardware, lambda name, v: resolve_hardware(v, name=name))  # type: ignore[arg-type]
    model_axis = grid_axis("model", model, lambda name, v: resolve_model(v, name=name))  # type: ignore[arg-type]
    cost_axis = _cost_axis(cost)
    seed_axis = grid_axis("seed", seed, random_seed)
    method = speculative_method if speculative_method is not None else template.speculative_method
    spec_axis, speculates = _speculation_axis(template, num_speculative_tokens, method)

    invalid = [(b, c) for b in budget_axis for c in cap_axis if b < c]
    if invalid and not skip_invalid:
        pairs = ", ".join(f"{b}/{c}" for b, c in invalid)
        raise ConfigError(
            f"budget/max_num_seqs pair(s) {pairs} have max_num_batched_tokens < max_num_seqs, "
            "which vLLM refuses (every running sequence needs a token per step). Drop them from "
            "the grid, or pass skip_invalid=True to leave them out."
        )

    points: list[SweepPoint] = []
    knobs: list[dict[str, SweepValue]] = []
    sized: set[tuple[str, str, int, int]] = set()  # KV pools checked to fit
    for hw, mdl, cst, budget, cap, k, point_seed in itertools.product(
        hw_axis, model_axis, cost_axis, budget_axis, cap_axis, spec_axis, seed_axis
    ):
        if budget < cap:
            continue
        drafter = method if k else None
        eng = replace(
            template,
            max_num_batched_tokens=budget,
            max_num_seqs=cap,
            num_speculative_tokens=k,
            speculative_method=drafter,
        )
        key = (hw.slug, mdl.slug, budget, cap)
        if key not in sized:
            num_kv_blocks(eng, hw, mdl)  # DoesNotFitError before anything runs
            sized.add(key)
        for rate, scale in zip(rate_axis, scale_axis):
            points.append(SweepPoint(workload, rate, point_seed, eng, hw, mdl, cst, mode, acceptance))
            row: dict[str, SweepValue] = {
                "hardware": hw.slug,
                "model": mdl.slug,
                "cost": cost_label(cst),
                "max_num_batched_tokens": budget,
                "max_num_seqs": cap,
            }
            if speculates:
                row["num_speculative_tokens"] = k
            row.update(seed=point_seed, rate_per_s=rate)
            if scale is not None:
                row["time_scale"] = scale
            knobs.append(row)

    def describe(i: int) -> str:
        k = knobs[i]
        return (
            f"grid point {i}: {k['hardware']} + {k['model']}, cost {k['cost']}, budget "
            f"{k['max_num_batched_tokens']}, max_num_seqs {k['max_num_seqs']}, seed {k['seed']}, "
            f"{k['rate_per_s']:g} req/s"
        )

    results = run_tasks(run_point, points, executor=executor, progress=progress, describe=describe)
    rows = []
    for point, knob, result in zip(points, knobs, results):
        row = dict(knob)
        row.update(result)
        row.update(
            block_size=point.engine.block_size,
            policy=point.engine.policy,
            scheduling_policy=point.engine.scheduling_policy,
            enable_prefix_caching=point.engine.enable_prefix_caching,
            async_scheduling=point.engine.async_scheduling,
            workload=str(workload.label),
        )
        if speculates:
            row["speculative_method"] = point.engine.speculative_method or "none"
        rows.append(row)
    return pd.DataFrame.from_records(rows)


def _speculation_axis(template: EngineConfig, values: object, method: str | None) -> tuple[tuple[int, ...], bool]:
    """The ``num_speculative_tokens`` axis of a sweep over ``template`` drafting with ``method``,
    and whether the sweep speculates (the table then has the columns)."""
    if values is None:
        return (template.num_speculative_tokens,), bool(template.num_speculative_tokens)
    axis = grid_axis("num_speculative_tokens", values, lambda name, v: int_at_least(name, v, 0))
    if any(axis) and method is None:
        raise ParameterError(
            "num_speculative_tokens needs a drafting method: pass speculative_method='eagle3' (or 'ngram', "
            "'draft_model', 'eagle', 'mtp'), or an engine template with one"
        )
    if any(axis) and method is not None:
        draft_rules(method, 1)  # ConfigError for an unknown method, before anything runs
    return axis, True


def _cost_axis(cost: object) -> tuple[CostSpec, ...]:
    items = tuple(check_cost(c) for c in cost) if isinstance(cost, (list, tuple)) else (check_cost(cost),)
    if not items:
        raise ParameterError("cost is empty; give at least one cost model")
    labels = [cost_label(c) for c in items]
    repeated = sorted({lab for lab in labels if labels.count(lab) > 1})
    if repeated:
        raise ParameterError(f"cost axis repeats {', '.join(repeated)}; each cost model once, please")
    return items


def _load_axis(
    workload: SweepWorkload, rates_per_s: object, time_scales: object
) -> tuple[tuple[float, ...], tuple[float | None, ...]]:
    if (rates_per_s is None) == (time_scales is None):
        raise ParameterError(
            "give the offered loads as rates_per_s (requests per second), or, for a trace, as "
            "time_scales; exactly one of the two"
        )
    if time_scales is not None:
        if not isinstance(workload, TraceWorkload):
            raise ParameterError(
                "time_scales replays a trace faster or slower; this workload is synthetic, so give rates_per_s instead"
            )
        scales = grid_axis("time_scales", time_scales, positive_rate)
        return tuple(workload.rate_for(s) for s in scales), scales
    rates = grid_axis("rates_per_s", rates_per_s, positive_rate)
    if isinstance(workload, TraceWorkload):
        return rates, tuple(workload.time_scale_for(r) for r in rates)
    return rates, (None,) * len(rates)


# --------------------------------------------------------------------------------------------
# Reading a sweep table
# --------------------------------------------------------------------------------------------

LOAD_PERCENTILES = tuple(SUMMARY_QUANTILES)
"""Percentiles a load sweep reports for TTFT and ITL (``"p50"``, ``"p90"``, ``"p99"``: the keys
``ttft_p90_s`` ... of every summary)."""

_LOAD_METRICS = ("ttft", "itl")


def percentiles_by_budget(table: pd.DataFrame) -> dict[int, dict[str, list[float]]]:
    """A load sweep's TTFT and ITL percentiles per budget, one value per load (for results files).

    Parameters
    ----------
    table : pandas.DataFrame
        :func:`sweep` rows (``max_num_batched_tokens``, ``rate_per_s`` and the summary's
        ``ttft_p50_s`` ... ``itl_p99_s``).

    Returns
    -------
    dict
        ``{budget [tokens]: {"ttft_p50_s": [...], ..., "itl_p99_s": [...], "rate_per_s": [...]}}``,
        budgets increasing, each list in increasing load order (latencies [s], loads [1/s]).

    Examples
    --------
    Rows at 20 and 10 req/s for budget 512 give ``{512: {..., "rate_per_s": [10.0, 20.0]}}``, the
    latencies in the same order.
    """
    out: dict[int, dict[str, list[float]]] = {}
    for budget, rows in table.sort_values("rate_per_s").groupby("max_num_batched_tokens", sort=True):
        numbers = {
            f"{metric}_{pct}_s": rows[f"{metric}_{pct}_s"].astype(float).tolist()
            for metric in _LOAD_METRICS
            for pct in LOAD_PERCENTILES
        }
        numbers["rate_per_s"] = rows.rate_per_s.astype(float).tolist()
        out[int(budget)] = numbers
    return out
