"""Predicted against measured on published closed-loop benchmark runs (``closed-loop-runs.csv``).

A closed-loop benchmark (``vllm bench serve --max-concurrency C``, InferenceMAX's ``conc``) keeps
C clients busy: each sends its next request when its previous one has finished. budgetlab runs
the same clients (:class:`~budgetlab.ClosedLoopClients`) against its engine and compares, per
concurrency, what the runs publish: output throughput, total throughput per GPU, time per output
token and end-to-end latency (:func:`check_closed_loop_runs`).

The runs
--------
``data/measured/closed-loop-runs.csv`` (:func:`default_runs_path`; its README gives the source of
every row): InferenceX (SemiAnalysis's InferenceMAX) runs of ``openai/gpt-oss-120b`` (MXFP4
experts) on H100 with vLLM v0.15.1 at tensor parallelism 8, 4 and 2, 4 to 64 clients, published
in SemiAnalysisAI/InferenceX issue #828. One row per run: the engine's knobs as the run set them
(``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``,
``max_cudagraph_capture_size``, ``gpu_memory_utilization``, ``enable_prefix_caching``; every
other knob at vLLM's default), the workload (``input_len``, ``output_len``, ``range_ratio``,
``num_prompts``, ``concurrency``) and the measured numbers, blank where the source gives none.

The workload
------------
InferenceX's client (``utils/bench_serving/benchmark_serving.py``, ``sample_random_requests``)
draws each request's input and output length uniformly from the integers
``[int(L × range_ratio), L]`` (not upstream vLLM's ``[L(1 − r), L(1 + r)]``), random token ids
(so no prefix is shared), ``--ignore-eos`` (each request generates exactly its drawn output
length), ``num_prompts`` requests after ``2 × concurrency`` warm-up requests that are not
measured. :func:`run_clients` rebuilds that: the draws with NumPy's default generator and a
seed (the source's own draws are not published, so a different seed gives a slightly different
mean; :func:`check_closed_loop_runs` averages ``seeds``), every request ready at time 0, the
clients taking them in order.

Hybrid attention
----------------
gpt-oss alternates sliding-window (128-token) and full-attention layers; vLLM's hybrid KV-cache
manager gives each kind its own KV-cache group, and the compiled core that runs closed-loop
clients schedules one group. The groups only change which requests the KV pool admits, never a
step's cost (priced from the model's layers either way), so when the pool cannot fill — every
client at once holding ``max_model_len`` tokens in every group fits the pool, with the hybrid
manager and without it (:func:`pool_never_fills`) — one full-attention group (vLLM's
``--disable-hybrid-kv-cache-manager``) schedules exactly the same steps. The check runs such a
row that way and says so (``kv_groups`` column); a row whose pool could fill is refused. A test
replays the realized send times on the hybrid engine and gets the same times, bit for bit.

A deployment's own runs
-----------------------
:func:`fit_closed_loop_runs` fits parameters of the typical preset (by default its weight-read
bandwidth and per-step CPU time) to some runs' measured TPOT; ``check_closed_loop_runs(others,
cost=fit.cost)`` then checks the fitted cost on runs it has not seen.

Accuracy
--------
Every metric the run publishes, ``predicted / measured − 1``, with issue 12's tolerances
(:data:`TOLERANCES`: 15 % for per-token time, end-to-end latency and throughput). TPOT is
``(e2e − TTFT) / (output − 1)`` averaged over the requests, as ``vllm bench serve`` computes
its mean TPOT; client latencies include :meth:`ServingOverhead.vllm` (one step of output lag).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from budgetlab.catalog import data_path
from budgetlab.cost.calibrated import CalibratedCost
from budgetlab.errors import DataFormatError, ParameterError
from budgetlab.experiments.progress import ProgressSpec, progress_reporter
from budgetlab.experiments.published import read_published_csv
from budgetlab.experiments.serving_runs import _int_cell, gpu_from_name, model_from_checkpoint, run_knobs
from budgetlab.memory.kv_specs import scheduler_kv_groups
from budgetlab.memory.pool import ceil_blocks, num_kv_blocks
from budgetlab.serving.overhead import ServingOverhead, client_metrics, client_requests
from budgetlab.simulator import simulate
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request
from budgetlab.workload.closed_loop import ClosedLoopClients

__all__ = [
    "TOLERANCES",
    "MEASURED",
    "default_runs_path",
    "read_closed_loop_runs",
    "run_lengths",
    "run_clients",
    "run_engine",
    "pool_never_fills",
    "ClosedLoopRunsCheck",
    "check_closed_loop_runs",
    "CostBuilder",
    "typical_cost",
    "ClosedLoopFit",
    "fit_closed_loop_runs",
]

MEASURED: dict[str, str] = {
    "output_tokens_per_s": "output throughput [tok/s]",
    "total_tokens_per_s_per_gpu": "total throughput per GPU [tok/s]",
    "tpot_ms": "time per output token [ms]",
    "e2e_s": "end-to-end latency [s]",
}
"""The measured columns a row may fill, and what each is."""

TOLERANCES: dict[str, float] = {
    "output_tokens_per_s": 0.15,
    "total_tokens_per_s_per_gpu": 0.15,
    "tpot_ms": 0.15,
    "e2e_s": 0.15,
}
"""The largest relative error allowed per metric (issue 12's: 15 % for per-token time and
end-to-end latency; throughput, tokens over the same time, gets the same) [-]."""

_NEEDED = (
    "run", "gpu", "model", "tp", "max_num_seqs", "input_len", "output_len", "range_ratio", "num_prompts",
    "concurrency", "source",
)  # fmt: skip


def default_runs_path() -> Path:
    """``closed-loop-runs.csv`` of budgetlab's measured data (shipped with the package)."""
    return data_path("measured", "closed-loop-runs.csv")


def read_closed_loop_runs(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """The file as published (no value changed); default :func:`default_runs_path`.

    Raises
    ------
    DataFormatError
        A needed column is missing, a measured column is absent altogether, or a row measures
        nothing (the message names it).
    """
    frame = read_published_csv(path or default_runs_path(), _NEEDED)
    for column in MEASURED:
        if column not in frame.columns:
            frame[column] = math.nan
    empty = frame.loc[frame[list(MEASURED)].isna().all(axis=1), "run"].tolist()
    if empty:
        raise DataFormatError(f"runs {empty} publish none of {', '.join(MEASURED)}")
    return frame


def _in_run(row: pd.Series, read: Callable[[], Any]) -> Any:
    """``read()``, its ``DataFormatError`` naming the run."""
    try:
        return read()
    except DataFormatError as exc:
        raise DataFormatError(f"run {row['run']}: {exc}") from None


def _whole(row: pd.Series, column: str) -> int:
    """A cell holding a whole number > 0 (``DataFormatError`` naming the run otherwise)."""
    value = _in_run(row, lambda: _int_cell(row, column))
    if value is None:
        raise DataFormatError(f"run {row['run']}: {column} is blank; write a whole number > 0")
    return int(value)


def run_lengths(row: pd.Series, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The run's input and output lengths [tokens], ``num_prompts`` each: uniform integers on
    ``[int(L × range_ratio), L]`` (InferenceX's ``sample_random_requests``), drawn with
    ``numpy.random.default_rng(seed)``, inputs first.

    Examples
    --------
    >>> row = pd.Series({"run": "x", "input_len": 10, "output_len": 5, "range_ratio": 0.8, "num_prompts": 1000})
    >>> ins, outs = run_lengths(row, seed=0)
    >>> int(ins.min()), int(ins.max()), int(outs.min()), int(outs.max())
    (8, 10, 4, 5)
    """
    ratio = float(row["range_ratio"])
    if not 0.0 <= ratio <= 1.0:
        raise DataFormatError(f"run {row['run']}: range_ratio {ratio!r} is not in [0, 1]")
    count = _whole(row, "num_prompts")
    rng = np.random.default_rng(seed)
    lengths = []
    for column in ("input_len", "output_len"):
        longest = _whole(row, column)
        lengths.append(rng.integers(max(1, int(longest * ratio)), longest + 1, size=count))
    return lengths[0], lengths[1]


def run_clients(row: pd.Series, seed: int = 0) -> ClosedLoopClients:
    """The run's clients (module docstring): ``concurrency`` of them sending ``num_prompts``
    requests of :func:`run_lengths`, all ready at time 0."""
    inputs, outputs = run_lengths(row, seed)
    requests = [Request(i, 0.0, int(inputs[i]), int(outputs[i])) for i in range(len(inputs))]
    return ClosedLoopClients(concurrency=_whole(row, "concurrency"), requests=requests)


def _knobs(row: pd.Series) -> dict[str, object]:
    """The engine knobs the run set (:func:`~budgetlab.experiments.serving_runs.run_knobs`;
    ``max_num_seqs`` required: the clients are sized by it), blank cells at vLLM's defaults."""
    _whole(row, "max_num_seqs")
    return dict(_in_run(row, lambda: run_knobs(row)))


def run_engine(row: pd.Series, hardware: HardwareSpec, model: ModelSpec) -> EngineConfig:
    """The run's engine: its knobs, every other at vLLM's default; one full-attention KV-cache
    group for a hybrid model (module docstring: :func:`pool_never_fills` must hold)."""
    engine = EngineConfig.vllm_defaults(hardware, **_knobs(row))
    if scheduler_kv_groups(model, engine)[0] != ("full",):
        engine = EngineConfig.vllm_defaults(hardware, **_knobs(row), kv_groups=("full",))
    return engine


def pool_never_fills(row: pd.Series, hardware: HardwareSpec, model: ModelSpec) -> bool:
    """Whether every client holding ``max_model_len`` tokens (else its longest request) in
    every KV-cache group at once fits the pool, with vLLM's hybrid manager and with one
    full-attention group (then the groups cannot change what is scheduled)."""
    hybrid = EngineConfig.vllm_defaults(hardware, **_knobs(row))
    clients = _whole(row, "concurrency")
    longest = hybrid.max_model_len or (_whole(row, "input_len") + _whole(row, "output_len"))
    for engine in (hybrid, run_engine(row, hardware, model)):
        groups, block_size = scheduler_kv_groups(model, engine)
        if clients * len(groups) * ceil_blocks(longest, block_size) > num_kv_blocks(engine, hardware, model):
            return False
    return True


@dataclass(frozen=True)
class ClosedLoopRunsCheck:
    """Predicted against measured, one row per published run.

    Attributes
    ----------
    table : pandas.DataFrame
        ``run``, ``model``, ``hardware``, ``tp``, ``concurrency``, ``kv_groups`` (``"as vLLM"``, or
        ``"full (pool never fills)"`` for a hybrid model run as one group); for each metric of
        :data:`MEASURED` ``<metric>_measured`` (NaN where the run publishes none),
        ``<metric>_predicted`` (the mean over the seeds) and ``<metric>_error``
        (``predicted / measured − 1``); ``ttft_mean_s_predicted`` and ``num_preemptions``.
    seeds : tuple of int
    """

    table: pd.DataFrame
    seeds: tuple[int, ...]

    @property
    def accuracy(self) -> pd.DataFrame:
        """Per metric: runs compared, median / P90 / largest absolute error, the tolerance
        (:data:`TOLERANCES`) and the runs within it (:func:`budgetlab.experiments.accuracy.error_row`)."""
        from budgetlab.experiments.accuracy import error_row

        rows = [
            error_row(metric, label, self.table[f"{metric}_error"].to_numpy(dtype=float), TOLERANCES[metric])
            for metric, label in MEASURED.items()
        ]
        return pd.DataFrame(rows).set_index("metric")


def _setting(row: pd.Series) -> tuple[HardwareSpec, ModelSpec, EngineConfig]:
    """The run's GPU, model and engine, refused (``DataFormatError``) where a hybrid model's
    KV pool could fill (the groups would then matter: :func:`pool_never_fills`)."""
    gpu, llm = gpu_from_name(str(row["gpu"])), model_from_checkpoint(str(row["model"]))
    engine = run_engine(row, gpu, llm)
    if engine.kv_groups is not None and not pool_never_fills(row, gpu, llm):
        raise DataFormatError(
            f"run {row['run']}: {llm.slug}'s KV pool could fill at {row['concurrency']} clients, so its hybrid "
            "KV-cache groups would change what is scheduled, and closed-loop clients run on one group"
        )
    return gpu, llm, engine


CostBuilder = Callable[[HardwareSpec, ModelSpec, EngineConfig], CalibratedCost]
"""``(hardware, model, engine) -> CalibratedCost``: the cost a run is simulated with."""


def typical_cost(hardware: HardwareSpec, model: ModelSpec, engine: EngineConfig) -> CalibratedCost:
    """The default :data:`CostBuilder`: ``CalibratedCost.typical(hardware, model, engine=engine)``."""
    return CalibratedCost.typical(hardware, model, engine=engine)


def _predict(
    row: pd.Series, gpu: HardwareSpec, llm: ModelSpec, engine: EngineConfig, seed: int, build: CostBuilder
) -> dict[str, float]:
    cost = build(gpu, llm, engine)
    result = simulate(run_clients(row, seed), engine=engine, hardware=gpu, model=llm, cost=cost)
    client = client_requests(result, ServingOverhead.vllm())
    metrics = client_metrics(client)  # as vllm bench serve summarizes a run
    output, prompt = float(client.output_tokens.sum()), float(client.prompt_tokens.sum())
    output_per_s = metrics["output_throughput_tokens_per_s"]
    return {
        "output_tokens_per_s": output_per_s,
        "total_tokens_per_s_per_gpu": output_per_s * (output + prompt) / output / engine.tensor_parallel_size,
        "tpot_ms": metrics["tpot_mean_s"] * 1e3,
        "e2e_s": metrics["e2e_mean_s"],
        "ttft_mean_s": metrics["ttft_mean_s"],
        "num_preemptions": float(result.requests.num_preemptions.sum()),
    }


def check_closed_loop_runs(
    runs: pd.DataFrame | str | os.PathLike[str] | None = None,
    *,
    cost: CostBuilder | None = None,
    seeds: tuple[int, ...] = (0, 1, 2),
    progress: ProgressSpec = None,
) -> ClosedLoopRunsCheck:
    """Simulate every run's clients with one cost (by default the calibrated cost,
    ``CalibratedCost.typical``, no per-run fitting) and compare (module docstring).

    Parameters
    ----------
    runs : pandas.DataFrame, path or None
        :func:`read_closed_loop_runs` output, or the file; default the shipped file.
    cost : callable, optional
        A :data:`CostBuilder`; default :func:`typical_cost` (e.g. :attr:`ClosedLoopFit.cost`
        for a cost fitted to some of the runs).
    seeds : tuple of int
        The length draws simulated per run; the predictions are their means.
    progress : bool, None or callable
        A line counting the runs (:mod:`budgetlab.experiments.progress`).

    Raises
    ------
    ParameterError
        ``seeds`` empty.
    DataFormatError
        A row's GPU or model is not in the catalog, a number is malformed, or a hybrid
        model's KV pool could fill (the groups would then matter: :func:`pool_never_fills`).
    """
    frame = runs if isinstance(runs, pd.DataFrame) else read_closed_loop_runs(runs)
    if not seeds:
        raise ParameterError("seeds is empty: give at least one seed")
    reporter = progress_reporter(progress, "budgetlab closed-loop runs")
    reporter.update(0, len(frame))
    rows = []
    for _, row in frame.iterrows():
        gpu, llm, engine = _setting(row)
        hybrid = engine.kv_groups is not None
        predicted = pd.DataFrame([_predict(row, gpu, llm, engine, seed, cost or typical_cost) for seed in seeds]).mean()
        entry: dict[str, object] = {
            "run": row["run"],
            "model": llm.slug,
            "hardware": gpu.slug,
            "tp": engine.tensor_parallel_size,
            "concurrency": int(row["concurrency"]),
            "kv_groups": "full (pool never fills)" if hybrid else "as vLLM",
        }
        for metric in MEASURED:
            measured = float(row[metric])
            entry[f"{metric}_measured"] = measured
            entry[f"{metric}_predicted"] = float(predicted[metric])
            entry[f"{metric}_error"] = math.nan if math.isnan(measured) else float(predicted[metric]) / measured - 1.0
        entry["ttft_mean_s_predicted"] = float(predicted["ttft_mean_s"])
        entry["num_preemptions"] = float(predicted["num_preemptions"])
        rows.append(entry)
        reporter.advance()
    reporter.close()
    return ClosedLoopRunsCheck(table=pd.DataFrame(rows), seeds=tuple(seeds))


# --------------------------------------------------------------------------------------------
# A cost fitted to a deployment's own closed-loop runs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClosedLoopFit:
    """:data:`~budgetlab.cost.presets.TYPICAL` with some parameters fitted to closed-loop runs.

    Attributes
    ----------
    parameters : mapping
        The fitted values by name (:data:`budgetlab.cost.fit.FITTABLE`'s units) [s or fraction].
    runs : tuple
        The runs fitted to (their ``run`` names).
    tpot_errors : tuple of float
        Each fitted run's TPOT error at the fitted values, ``predicted / measured − 1`` [-].
    """

    parameters: MappingProxyType[str, float]
    runs: tuple[Any, ...]
    tpot_errors: tuple[float, ...]

    def cost(self, hardware: HardwareSpec, model: ModelSpec, engine: EngineConfig) -> CalibratedCost:
        """The fitted :data:`CostBuilder`: the typical preset with :attr:`parameters`."""
        return _preset_with(dict(self.parameters))(hardware, model, engine)


def _preset_with(values: dict[str, float]) -> CostBuilder:
    from budgetlab.cost.presets import TYPICAL

    def build(hardware: HardwareSpec, model: ModelSpec, engine: EngineConfig) -> CalibratedCost:
        return CalibratedCost(hardware=hardware, model=model, **{**TYPICAL, **values}).for_engine(engine)

    return build


def fit_closed_loop_runs(
    runs: pd.DataFrame | str | os.PathLike[str] | None = None,
    *,
    fit: Sequence[str] = ("bandwidth_efficiency", "step_overhead_s"),
    seed: int = 0,
) -> ClosedLoopFit:
    """Fit parameters of the typical preset to runs' measured time per output token.

    Least squares on ``log(predicted / measured)`` of TPOT over the runs (scipy's
    ``least_squares``, bounded by :data:`budgetlab.cost.fit.FITTABLE`, from the preset's values),
    each run simulated as :func:`check_closed_loop_runs` does with one length draw (``seed``).
    Check the fit on runs it was not given: ``check_closed_loop_runs(others, cost=fit.cost)``.

    Parameters
    ----------
    runs : pandas.DataFrame, path or None
        The runs to fit to (rows of :func:`read_closed_loop_runs`); at least as many with a
        measured TPOT as parameters.
    fit : sequence of str
        Names from :data:`budgetlab.cost.fit.FITTABLE`.
    seed : int

    Raises
    ------
    ParameterError
        An unknown or repeated parameter.
    DataFormatError
        Too few runs with a measured TPOT; a run :func:`check_closed_loop_runs` refuses.
    """
    from scipy.optimize import least_squares

    from budgetlab.cost.fit import FITTABLE
    from budgetlab.cost.presets import TYPICAL

    frame = runs if isinstance(runs, pd.DataFrame) else read_closed_loop_runs(runs)
    frame = frame[frame["tpot_ms"].notna()]
    names = tuple(fit)
    if not names or len(set(names)) != len(names) or any(name not in FITTABLE for name in names):
        raise ParameterError(f"fit must name distinct parameters from {', '.join(FITTABLE)}; got {list(names)}")
    if len(frame) < len(names):
        raise DataFormatError(f"{len(frame)} runs with a measured TPOT cannot fit {len(names)} parameters")
    settings = [(row, *_setting(row)) for _, row in frame.iterrows()]
    scales = np.array([FITTABLE[name].scale for name in names])

    def residuals(x: np.ndarray) -> np.ndarray:
        build = _preset_with({name: float(v) for name, v in zip(names, x * scales, strict=True)})
        return np.array(
            [
                math.log(_predict(row, gpu, llm, engine, seed, build)["tpot_ms"] / float(row["tpot_ms"]))
                for row, gpu, llm, engine in settings
            ]
        )

    x0 = np.array([float(TYPICAL[name]) for name in names]) / scales
    low = np.array([FITTABLE[name].low for name in names]) / scales
    high = np.array([FITTABLE[name].high for name in names]) / scales
    solution = least_squares(residuals, np.clip(x0, low, high), bounds=(low, high), diff_step=1e-3, xtol=1e-6)
    values = {name: float(v) for name, v in zip(names, solution.x * scales, strict=True)}
    errors = tuple(float(math.expm1(r)) for r in residuals(solution.x))
    return ClosedLoopFit(MappingProxyType(values), tuple(frame["run"]), errors)
