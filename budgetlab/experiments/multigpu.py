"""Multi-GPU serving (notebook 11): tensor parallelism, the CUDA-graph ladder, a mixture of experts.

Every function returns a tidy :class:`pandas.DataFrame`, one row per observation, units in the
column names (``*_s``, ``*_tokens``, ``*_bytes``) and a ``cost_model`` column naming the step cost
that priced it. The numbers are the package's models' (:mod:`budgetlab.memory`,
:mod:`budgetlab.cost.collective`, :mod:`budgetlab.cudagraph`, ``CalibratedCost.step_terms``,
the simulator and :func:`~budgetlab.experiments.sweep.sweep`); published measurements come from
the developers' real-engine data (:mod:`budgetlab.experiments.serving_runs`, ``allreduce.csv``;
:func:`~budgetlab.experiments.published.real_data_dir`, never shipped). In
the notebook's order: what fits at each tensor-parallel degree and what a decode step and a
token cost there; all-reduce latencies; the CUDA-graph ladder and its end; a mixture of
experts' TTFT against the token budget.

A *cost factory* is ``(hardware, model, engine) -> CalibratedCost``; the default
:func:`typical_cost` is :meth:`CalibratedCost.typical <budgetlab.cost.CalibratedCost.typical>`
for the engine's deployment, labelled ``"typical"``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from budgetlab._checks import int_at_least, number_in
from budgetlab.cost.calibrated import CalibratedCost
from budgetlab.cudagraph import cudagraph_capture_sizes, cudagraph_dispatch
from budgetlab.errors import DataFormatError, DoesNotFitError, ParameterError, RequestTooLargeError
from budgetlab.experiments.executors import SerialExecutor
from budgetlab.experiments.published import read_published_csv, real_data_path
from budgetlab.experiments.serving_runs import (
    check_serving_runs,
    gpu_from_name,
    measured_overloaded,
    model_from_checkpoint,
    read_serving_runs,
    run_engine,
)
from budgetlab.experiments.sweep import max_service_rate_per_s, sweep
from budgetlab.memory import activation_dtype_bytes, kv_capacity, weight_bytes_per_gpu, weights_fit
from budgetlab.simulator import simulate
from budgetlab.specs import Batch, EngineConfig, HardwareSpec, ModelSpec
from budgetlab.workload import SweepWorkload, check_workload, mean_sequence_tokens, workload_requests

__all__ = [
    "CostFactory",
    "typical_cost",
    "tp_deployments",
    "decode_step_by_tp",
    "tpot_by_tp",
    "run_tpot_by_tp",
    "steady_runs_at_rate",
    "default_all_reduce_path",
    "read_all_reduce",
    "MESSAGE_BYTES",
    "all_reduce_by_size",
    "all_reduce_errors",
    "graph_ladder_sizes",
    "graph_ladder",
    "ladder_jumps",
    "ladder_marks",
    "ladder_step_terms",
    "moe_ttft_by_budget",
]

CostFactory = Callable[[HardwareSpec, ModelSpec, EngineConfig], CalibratedCost]
"""``(hardware, model, engine) -> CalibratedCost``: the step cost for the engine's deployment."""


def typical_cost(hardware: HardwareSpec, model: ModelSpec, engine: EngineConfig) -> CalibratedCost:
    """:meth:`CalibratedCost.typical` for ``engine``'s deployment (the default cost factory)."""
    return CalibratedCost.typical(hardware, model, engine=engine)


def _cost_label(cost: CostFactory | None) -> str:
    return "typical" if cost is None or cost is typical_cost else getattr(cost, "__name__", "custom")


def _degrees(tp_degrees: Sequence[int]) -> list[int]:
    if isinstance(tp_degrees, str | bytes) or not isinstance(tp_degrees, Sequence) or not tp_degrees:
        raise ParameterError(f"tp_degrees must be a non-empty list of GPU counts like [1, 2, 4, 8], got {tp_degrees!r}")
    degrees = [int_at_least("tp_degrees", tp, 1, what="GPU counts >= 1") for tp in tp_degrees]
    if len(set(degrees)) != len(degrees):
        raise ParameterError(f"tp_degrees {list(tp_degrees)} repeats a degree; list each once")
    return sorted(degrees)


def _engine_at(engine: EngineConfig | None, hardware: HardwareSpec, tp: int) -> EngineConfig:
    """``engine`` (default: vLLM's defaults on ``hardware``) with ``tensor_parallel_size=tp``."""
    if engine is None:
        return EngineConfig.vllm_defaults(hardware, tensor_parallel_size=tp)
    if not isinstance(engine, EngineConfig):
        raise ParameterError(f"engine must be an EngineConfig or None, got {type(engine).__name__}")
    return dataclasses.replace(engine, tensor_parallel_size=tp)


# --------------------------------------------------------------------------------------------
# 1. Tensor parallelism: what fits, one decode step, the simulated time per output token
# --------------------------------------------------------------------------------------------


def tp_deployments(
    hardware: HardwareSpec, model: ModelSpec, tp_degrees: Sequence[int], *, engine: EngineConfig | None = None
) -> pd.DataFrame:
    """Which tensor-parallel degrees can serve ``model`` on ``hardware``, and with how much KV cache.

    A degree is *deployable* when each GPU's share of the weights fits its memory
    (:func:`~budgetlab.memory.weights_fit`) and vLLM's start-up accounting leaves at least one
    KV block (:func:`~budgetlab.memory.kv_capacity` does not raise
    :class:`~budgetlab.errors.DoesNotFitError`).

    ``tp_degrees`` [GPUs] must each divide the attention heads; ``engine`` is the template of
    the other knobs (budget, ``gpu_memory_utilization``, dtypes), ``None`` vLLM's defaults.

    Returns
    -------
    pandas.DataFrame
        One row per degree: ``tp``, ``weight_bytes_per_gpu`` [B], ``memory_bytes`` (one GPU)
        [B], ``weights_fit``, ``deployable``, ``kv_tokens`` (the pool, 0 when not deployable)
        [tokens] and ``reason`` (why not, else ``""``).
    """
    rows = []
    for tp in _degrees(tp_degrees):
        eng = _engine_at(engine, hardware, tp)
        per_gpu = float(weight_bytes_per_gpu(model, tp=tp, dtype=eng.dtype, quantization=eng.quantization))
        fits = weights_fit(hardware, model, tp=tp, quantization=eng.quantization)
        kv_tokens, reason = 0, ""
        if not fits:
            reason = "weights exceed one GPU's memory"
        else:
            try:
                kv_tokens = int(kv_capacity(hardware, model, eng).num_tokens)
            except DoesNotFitError:
                reason = "no room left for the KV cache"
        rows.append(
            {
                "tp": tp,
                "weight_bytes_per_gpu": per_gpu,
                "memory_bytes": float(hardware.memory_bytes),
                "weights_fit": fits,
                "deployable": reason == "",
                "kv_tokens": kv_tokens,
                "reason": reason,
            }
        )
    return pd.DataFrame(rows)


def decode_step_by_tp(
    hardware: HardwareSpec,
    model: ModelSpec,
    tp_degrees: Sequence[int],
    *,
    num_decodes: int,
    context_tokens: int,
    engine: EngineConfig | None = None,
    cost: CostFactory | None = None,
) -> pd.DataFrame:
    """One decode step of ``num_decodes`` users at each tensor-parallel degree (the cost model alone).

    Every user decodes one token after ``context_tokens`` cached tokens, so the step is
    ``Batch(num_decodes, num_decodes × context_tokens)`` and its time is also each user's time
    per output token while the batch lasts.

    ``hardware``, ``model``, ``tp_degrees`` and ``engine`` as :func:`tp_deployments`;
    ``num_decodes`` [requests] >= 1, ``context_tokens`` [tokens] >= 0; ``cost`` a cost factory
    (``None``: :func:`typical_cost`).

    Returns
    -------
    pandas.DataFrame
        One row per degree: ``tp``, ``deployable`` (:func:`tp_deployments`), ``num_decodes``,
        ``context_tokens``, ``decode_step_s`` [s], ``weight_read_s`` (one GPU's full weight
        read) [s], ``all_reduce_s`` (the step's all-reduce term, ``step_terms``) [s],
        ``all_reduce_collective_s`` (two all-reduces per layer of ``num_decodes × hidden``
        activations priced by :func:`budgetlab.cost.collective.all_reduce_s`; 0 at ``tp = 1``)
        [s], ``cost_model``.
    """
    from budgetlab.cost.collective import all_reduce_s  # the collective model of issue 22

    decodes = int_at_least("num_decodes", num_decodes, 1)
    context = int_at_least("context_tokens", context_tokens, 0, what="an int >= 0")
    build = cost or typical_cost
    fit = tp_deployments(hardware, model, tp_degrees, engine=engine).set_index("tp")
    rows = []
    for tp in fit.index:
        eng = _engine_at(engine, hardware, int(tp))
        step_cost = build(hardware, model, eng)
        message_bytes = decodes * model.hidden_size * activation_dtype_bytes(model, eng.dtype)
        collective_s = (
            0.0
            if tp == 1
            else 2 * model.num_layers * float(all_reduce_s(hardware, tp=int(tp), message_bytes=message_bytes))
        )
        batch = Batch(decodes, decodes * context)
        rows.append(
            {
                "tp": int(tp),
                "deployable": bool(fit.deployable[tp]),
                "num_decodes": decodes,
                "context_tokens": context,
                "decode_step_s": float(step_cost.batch_time_s(batch)),
                "weight_read_s": float(step_cost.weight_read_s),
                "all_reduce_s": float(step_cost.step_terms(batch).terms["all_reduce"]),
                "all_reduce_collective_s": collective_s,
                "cost_model": _cost_label(cost),
            }
        )
    return pd.DataFrame(rows)


def tpot_by_tp(
    hardware: HardwareSpec,
    model: ModelSpec,
    tp_degrees: Sequence[int],
    *,
    workload: SweepWorkload,
    rate_per_s: float,
    seed: int = 0,
    engine: EngineConfig | None = None,
    cost: CostFactory | None = None,
) -> pd.DataFrame:
    """Simulated time per output token of one workload at each deployable tensor-parallel degree.

    Every degree serves the same requests (``workload`` at ``rate_per_s``, ``seed``) with the
    engine's other knobs unchanged and the KV pool its memory leaves (:func:`tp_deployments`).

    Returns
    -------
    pandas.DataFrame
        One row per degree: ``tp``, ``deployable``, ``kv_tokens``, ``rate_per_s`` [1/s],
        ``tpot_mean_s``, ``tpot_p90_s``, ``ttft_mean_s``, ``itl_p99_s`` [s] and
        ``num_preemptions`` (NaN where not simulated), ``simulated``, ``reason`` (why not:
        not deployable, or a KV pool smaller than the workload's longest request, which vLLM
        could never finish), ``cost_model``.
    """
    checked = check_workload(workload)
    rate = number_in("rate_per_s", rate_per_s, low=0.0, low_open=True, what="> 0 requests per second")
    build = cost or typical_cost
    requests = workload_requests(checked, rate_per_s=rate, seed=seed)
    rows = []
    for _, fit in tp_deployments(hardware, model, tp_degrees, engine=engine).iterrows():
        tp = int(fit.tp)
        row: dict[str, object] = {
            "tp": tp,
            "deployable": bool(fit.deployable),
            "kv_tokens": int(fit.kv_tokens),
            "rate_per_s": rate,
        }
        keys = ("tpot_mean_s", "tpot_p90_s", "ttft_mean_s", "itl_p99_s", "num_preemptions")
        row.update(dict.fromkeys(keys, math.nan), simulated=False, reason=str(fit.reason))
        if fit.deployable:
            eng = _engine_at(engine, hardware, tp)
            try:
                result = simulate(
                    requests, engine=eng, cost=build(hardware, model, eng), hardware=hardware, model=model
                )
            except RequestTooLargeError:
                row["reason"] = "KV pool smaller than the longest request"
            else:
                summary = result.summary()
                row.update({key: float(summary[key]) for key in keys}, simulated=True)
        row["cost_model"] = _cost_label(cost)
        rows.append(row)
    return pd.DataFrame(rows)


def run_tpot_by_tp(
    runs: pd.DataFrame | str | os.PathLike[str],
    tp_degrees: Sequence[int],
    *,
    run_ids: Sequence[int],
    max_duration_s: float | None = 60.0,
    cost: CostFactory | None = None,
) -> pd.DataFrame:
    """Published serving runs rebuilt at other tensor-parallel degrees, beside what was measured.

    Each run's workload and knobs (:func:`~budgetlab.experiments.serving_runs.run_requests`,
    :func:`~budgetlab.experiments.serving_runs.run_engine`) are simulated at every deployable
    degree of ``tp_degrees`` and at the degree the run used; the measured time per output token,
    ``(e2e − TTFT) / (output − 1)`` on the published means, sits at the run's own degree.

    ``runs`` is :func:`~budgetlab.experiments.serving_runs.read_serving_runs`' output or the
    file, ``run_ids`` the ``run`` numbers to rebuild, ``max_duration_s`` the seconds of each
    stage to simulate [s] and ``cost`` a cost factory (``None``: :func:`typical_cost`).

    Returns
    -------
    pandas.DataFrame
        One row per run and degree: ``run``, ``model`` (catalog slug), ``rate_per_s``, ``tp``,
        ``run_tp`` (the degree the run used), ``deployable``, ``tpot_s_predicted`` [s] (NaN
        where not deployable), ``tpot_s_measured`` [s] (only at ``tp == run_tp``, else NaN),
        ``cost_model``.

    A run number the file does not hold raises :class:`~budgetlab.errors.ParameterError`.
    """
    frame = runs if isinstance(runs, pd.DataFrame) else read_serving_runs(runs)
    missing = [r for r in run_ids if r not in set(frame.run)]
    if missing or not run_ids:
        raise ParameterError(f"run_ids {list(run_ids)} must name runs of the file (0 to {len(frame) - 1})")
    rows = []
    for run in run_ids:
        row = frame[frame.run == run].iloc[0]
        gpu, llm, run_tp = gpu_from_name(str(row["gpu"])), model_from_checkpoint(str(row["model"])), int(row["tp"])
        fit = tp_deployments(gpu, llm, sorted({*_degrees(tp_degrees), run_tp}), engine=run_engine(row, gpu))
        for _, degree in fit.iterrows():
            tp = int(degree.tp)
            predicted = math.nan
            if degree.deployable:
                check = check_serving_runs(
                    frame[frame.run == run].assign(tp=tp),
                    cost=cost or typical_cost,
                    max_duration_s=max_duration_s,
                    progress=False,
                )
                predicted = float(check.table.tpot_s_predicted.iloc[0])
            measured = (float(row["e2e_mean_s"]) - float(row["ttft_mean_s"])) / (float(row["output_len_mean"]) - 1)
            rows.append(
                {
                    "run": int(run),
                    "model": llm.slug,
                    "rate_per_s": float(row["requested_rate_per_s"]),
                    "tp": tp,
                    "run_tp": run_tp,
                    "deployable": bool(degree.deployable),
                    "tpot_s_predicted": predicted,
                    "tpot_s_measured": measured if tp == run_tp else math.nan,
                    "cost_model": _cost_label(cost),
                }
            )
    return pd.DataFrame(rows)


def steady_runs_at_rate(runs: pd.DataFrame | str | os.PathLike[str], rate_per_s: float) -> list[int]:
    """The ``run`` numbers of the steady published stages offered ``rate_per_s``, one per model.

    A stage is steady when it was not overloaded
    (:func:`~budgetlab.experiments.serving_runs.measured_overloaded`); of several stages of one
    model at that rate the first is taken. ``[]`` when none matches.
    """
    frame = runs if isinstance(runs, pd.DataFrame) else read_serving_runs(runs)
    rate = number_in("rate_per_s", rate_per_s, low=0.0, low_open=True, what="> 0 requests per second")
    steady = ~measured_overloaded(frame)
    chosen = frame[steady & np.isclose(frame.requested_rate_per_s.astype(float), rate)]
    return [int(run) for run in chosen.drop_duplicates("model").run]


# --------------------------------------------------------------------------------------------
# 2. All-reduce: measured latencies and the collective model
# --------------------------------------------------------------------------------------------

_ALL_REDUCE_NEEDED = ("source_kind", "gpu", "tp", "message_bytes", "implementation", "cuda_graph", "latency_us")


def default_all_reduce_path() -> Path | None:
    """``allreduce.csv`` in the developers' real-engine data, if present
    (:func:`~budgetlab.experiments.published.real_data_path`)."""
    return real_data_path("allreduce.csv")


def read_all_reduce(path: str | os.PathLike[str]) -> pd.DataFrame:
    """The published all-reduce latencies, tidy.

    Returns
    -------
    pandas.DataFrame
        One row per measurement: ``gpu``, ``tp`` [GPUs], ``message_bytes`` [B],
        ``implementation``, ``cuda_graph`` (``"yes"``, ``"no"`` or ``"unknown"``, the first word
        of the file's column), ``source_kind`` and ``latency_s`` [s] (the file's microseconds).
        Rows with an empty ``message_bytes`` (a source that gives an element count of an
        unknown dtype) are left out: their size is not known.

    Raises
    ------
    DataFormatError
        A needed column is missing, or a latency or size that is not a positive number.
    """
    raw = read_published_csv(path, _ALL_REDUCE_NEEDED)
    latency_s = pd.to_numeric(raw.latency_us, errors="coerce") * 1e-6
    size = pd.to_numeric(raw.message_bytes, errors="coerce")
    if not (latency_s > 0).all() or (size <= 0).any():
        raise DataFormatError(f"{path}: every latency_us must be a number > 0 and every message_bytes > 0 or empty")
    raw, latency_s, size = raw[size.notna()], latency_s[size.notna()], size[size.notna()]
    return pd.DataFrame(
        {
            "gpu": raw.gpu.astype(str),
            "tp": raw.tp.astype(int),
            "message_bytes": size.astype(float),
            "implementation": raw.implementation.astype(str),
            "cuda_graph": raw.cuda_graph.astype(str).str.split().str[0].str.lower(),
            "source_kind": raw.source_kind.astype(str),
            "latency_s": latency_s,
        }
    )


#: Message sizes of :func:`all_reduce_by_size` by default: 4 KiB to 32 MiB, doubling [B].
MESSAGE_BYTES = tuple(float(2**k) for k in range(12, 26))


def all_reduce_by_size(
    hardware: HardwareSpec,
    tp_degrees: Sequence[int],
    message_bytes: Sequence[float] = MESSAGE_BYTES,
    *,
    cuda_graph: bool = True,
) -> pd.DataFrame:
    """The collective model's all-reduce time over a grid of degrees and message sizes [B].

    Returns
    -------
    pandas.DataFrame
        One row per degree and size: ``tp``, ``message_bytes`` [B], ``cuda_graph``,
        ``all_reduce_s`` (:func:`budgetlab.cost.collective.all_reduce_s`) [s].
    """
    from budgetlab.cost.collective import all_reduce_s  # the collective model of issue 22

    sizes = np.asarray(message_bytes, dtype=float)
    if sizes.ndim != 1 or not sizes.size or not (np.isfinite(sizes) & (sizes > 0)).all():
        raise ParameterError(f"message_bytes must be a non-empty list of sizes > 0 bytes, got {message_bytes!r}")
    rows = [
        (tp, float(b), cuda_graph, float(all_reduce_s(hardware, tp=tp, message_bytes=float(b), cuda_graph=cuda_graph)))
        for tp in _degrees(tp_degrees)
        for b in sizes
    ]
    return pd.DataFrame(rows, columns=["tp", "message_bytes", "cuda_graph", "all_reduce_s"])


#: The file's implementation names -> the names of :func:`budgetlab.cost.collective.all_reduce_algorithm`.
_KERNELS = {"ca_1stage": "custom_one_shot", "ca_2stage": "custom_two_shot", "pynccl": "nccl"}


def all_reduce_errors(measured: pd.DataFrame, hardware: HardwareSpec) -> pd.DataFrame:
    """Each measured all-reduce beside the collective model's time for the same degree and size.

    ``measured`` is :func:`read_all_reduce`'s table; ``hardware`` the GPU the model prices (the
    file's measurements are H100 NVLink). A measurement taken inside a CUDA graph (``"yes"``) or
    of unknown timing is compared with the graph-replayed model, an eager one (``"no"``) with
    the eager model. The model prices the kernel vLLM picks for the size, which need not be the
    one measured: ``vllm_kernel`` names vLLM's pick and ``same_kernel`` says whether the row
    measured it.

    Returns
    -------
    pandas.DataFrame
        ``measured`` with ``vllm_kernel``, ``same_kernel``, ``modelled_s`` [s] and ``error``
        (``modelled / measured − 1``) [-].
    """
    from budgetlab.cost.collective import all_reduce_algorithm, all_reduce_s  # the collective model of issue 22

    rows = zip(measured.tp, measured.message_bytes, measured.cuda_graph, strict=True)
    modelled = [
        float(all_reduce_s(hardware, tp=int(t), message_bytes=float(b), cuda_graph=g != "no")) for t, b, g in rows
    ]
    picks = [
        all_reduce_algorithm(hardware, tp=int(t), message_bytes=float(b))
        for t, b in zip(measured.tp, measured.message_bytes, strict=True)
    ]
    same = [_KERNELS.get(name, name) == pick for name, pick in zip(measured.implementation, picks, strict=True)]
    out = measured.assign(vllm_kernel=picks, same_kernel=same, modelled_s=modelled)
    return out.assign(error=out.modelled_s / out.latency_s - 1.0)


# --------------------------------------------------------------------------------------------
# 3. The CUDA-graph ladder
# --------------------------------------------------------------------------------------------


def _engines(engines: Mapping[str, EngineConfig]) -> dict[str, EngineConfig]:
    if not isinstance(engines, Mapping) or not engines:
        raise ParameterError("engines must be a non-empty mapping of label -> EngineConfig")
    for label, engine in engines.items():
        if not isinstance(engine, EngineConfig):
            raise ParameterError(f"engines[{label!r}] must be an EngineConfig, got {type(engine).__name__}")
    return dict(engines)


def graph_ladder_sizes(hardware: HardwareSpec, engines: Mapping[str, EngineConfig]) -> pd.DataFrame:
    """The batch sizes each engine captures CUDA graphs for.

    Returns
    -------
    pandas.DataFrame
        One row per engine and captured size: ``engine`` (the label), ``max_num_seqs``,
        ``max_num_batched_tokens``, ``size_tokens`` [tokens], ``full`` (a FULL graph for a
        uniform decode batch of that many requests, as well as a PIECEWISE one).
    """
    columns = ["engine", "max_num_seqs", "max_num_batched_tokens", "size_tokens", "full"]
    rows = [
        (label, engine.max_num_seqs, engine.max_num_batched_tokens, size,
         cudagraph_dispatch(engine, hardware, size, True) == ("FULL", size))
        for label, engine in _engines(engines).items()
        for size in cudagraph_capture_sizes(engine, hardware)
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def graph_ladder(
    hardware: HardwareSpec,
    model: ModelSpec,
    engines: Mapping[str, EngineConfig],
    *,
    max_batch: int,
    context_tokens: int,
    cost: CostFactory | None = None,
) -> pd.DataFrame:
    """Decode steps of 1 to ``max_batch`` users on each engine: graph mode, padding and step time.

    A decode batch holds at most ``max_num_seqs`` users, so each engine's rows stop there. Each
    step is a uniform decode of ``n`` users with ``context_tokens`` cached each; its mode and
    padded size are :func:`~budgetlab.cudagraph.cudagraph_dispatch`'s and its time the engine's
    cost model's ``batch_time_s``.

    Returns
    -------
    pandas.DataFrame
        One row per engine and batch: ``engine``, ``max_num_seqs``, ``num_decodes``
        [requests], ``mode`` (``FULL``, ``PIECEWISE`` or ``NONE``), ``padded_tokens`` and
        ``padding_tokens`` [tokens], ``step_time_s`` [s], ``cost_model``.
    """
    top = int_at_least("max_batch", max_batch, 1)
    context = int_at_least("context_tokens", context_tokens, 0, what="an int >= 0")
    build = cost or typical_cost
    columns = ["engine", "max_num_seqs", "num_decodes", "mode", "padded_tokens", "padding_tokens", "step_time_s"]
    rows = []
    for label, engine in _engines(engines).items():
        step_cost = build(hardware, model, engine)
        for n in range(1, min(top, engine.max_num_seqs) + 1):
            mode, padded = cudagraph_dispatch(engine, hardware, n, True)
            step_s = float(step_cost.batch_time_s(Batch(n, n * context)))
            rows.append((label, engine.max_num_seqs, n, mode, padded, padded - n, step_s))
    return pd.DataFrame(rows, columns=columns).assign(cost_model=_cost_label(cost))


def ladder_jumps(ladder: pd.DataFrame) -> pd.DataFrame:
    """Where each engine's graphs end and what the next decode batch costs.

    ``ladder`` is :func:`graph_ladder`'s table.

    Returns
    -------
    pandas.DataFrame
        One row per engine: ``engine``, ``max_num_seqs``, ``top_graph_tokens`` (the largest
        batch that runs with a graph), ``past_top`` (whether a batch past it exists, i.e. the
        engine admits more users than its ladder holds), ``past_top_tokens`` (the first batch
        past it), ``mode_past_top``,
        ``step_at_top_s`` and ``step_past_top_s`` [s], ``jump_s`` (the difference, NaN without
        a batch past the top) [s], ``padded_fraction`` (share of the batches drawn that are
        padded) [-] and ``max_padding_tokens`` [tokens].
    """
    rows = []
    for label, group in ladder.groupby("engine", sort=False):
        graphed = group[group["mode"] != "NONE"]
        top = int(graphed.num_decodes.max()) if len(graphed) else 0
        at_top = group[group.num_decodes == top]
        past = group[group.num_decodes == top + 1]
        step_at = float(at_top.step_time_s.iloc[0]) if len(at_top) else math.nan
        step_past = float(past.step_time_s.iloc[0]) if len(past) else math.nan
        rows.append(
            {
                "engine": label,
                "max_num_seqs": int(group.max_num_seqs.iloc[0]),
                "top_graph_tokens": top,
                "past_top": bool(len(past)),
                "past_top_tokens": top + 1,
                "mode_past_top": str(past["mode"].iloc[0]) if len(past) else "",
                "step_at_top_s": step_at,
                "step_past_top_s": step_past,
                "jump_s": step_past - step_at,
                "padded_fraction": float((group.padding_tokens > 0).mean()),
                "max_padding_tokens": int(group.padding_tokens.max()),
            }
        )
    return pd.DataFrame(rows)


def ladder_marks(hardware: HardwareSpec, engine: EngineConfig, *, max_batch: int, stride: int = 8) -> list[int]:
    """Decode batches to break down: every ``stride``-th from 1, the top FULL rung and the batch
    after it, all at most ``min(max_batch, max_num_seqs)`` [requests]."""
    limit = min(int_at_least("max_batch", max_batch, 1), engine.max_num_seqs)
    full = [n for n in cudagraph_capture_sizes(engine, hardware) if n <= engine.max_num_seqs]
    top = max(full, default=0)
    return sorted({*range(1, limit + 1, int_at_least("stride", stride, 1)), top, top + 1} & set(range(1, limit + 1)))


def ladder_step_terms(
    hardware: HardwareSpec,
    model: ModelSpec,
    engine: EngineConfig,
    *,
    batches: Sequence[int],
    context_tokens: int,
    cost: CostFactory | None = None,
) -> pd.DataFrame:
    """The named terms of decode steps on one engine (``CalibratedCost.step_terms``), long form.

    Returns
    -------
    pandas.DataFrame
        One row per batch and term that is not 0 at every batch: ``num_decodes`` [requests],
        ``term``, ``time_s`` [s], ``mode``, ``padded_tokens`` [tokens], ``cost_model``. The
        terms of one batch add up to its ``batch_time_s``.
    """
    context = int_at_least("context_tokens", context_tokens, 0, what="an int >= 0")
    counts = sorted({int_at_least("batches", n, 1) for n in batches})
    if not counts:
        raise ParameterError("batches must list at least one decode batch size [requests]")
    step_cost = (cost or typical_cost)(hardware, model, engine)
    rows: list[dict[str, object]] = []
    for n in counts:
        terms = step_cost.step_terms(Batch(n, n * context))
        rows.extend(
            {
                "num_decodes": n,
                "term": name,
                "time_s": float(value),
                "mode": terms.mode,
                "padded_tokens": terms.padded_tokens,
                "cost_model": _cost_label(cost),
            }
            for name, value in terms.terms.items()
        )
    frame = pd.DataFrame(rows)
    used = frame.groupby("term", sort=False).time_s.transform(lambda t: bool((t != 0).any()))
    return frame[used.astype(bool)].reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# 4. Mixture of experts: the budget and TTFT
# --------------------------------------------------------------------------------------------


def moe_ttft_by_budget(
    hardware: HardwareSpec,
    model: ModelSpec,
    *,
    tp: int,
    budgets: Sequence[int],
    workload: SweepWorkload,
    load_fraction: float,
    max_num_seqs: int,
    seed: int = 0,
) -> pd.DataFrame:
    """Simulated TTFT against ``max_num_batched_tokens`` at one load, with the typical step cost.

    The load is ``load_fraction`` of the service rate of vLLM's default budget on ``hardware``
    (:func:`~budgetlab.experiments.sweep.max_service_rate_per_s`: full-budget steps back to back
    divided by the workload's mean prompt + output), the same for every budget. Each budget runs
    with ``min(max_num_seqs, budget)`` as its cap (vLLM refuses a cap above the budget).

    ``tp`` [GPUs], ``budgets`` [tokens], ``load_fraction`` (of that service rate, in (0, 2]),
    ``max_num_seqs`` [requests] and ``seed`` configure the runs.

    Returns
    -------
    pandas.DataFrame
        One row per budget: ``max_num_batched_tokens``, ``max_num_seqs``, ``tp``,
        ``load_fraction``, ``rate_per_s`` [1/s], ``ttft_mean_s``, ``ttft_p90_s``,
        ``tpot_mean_s``, ``itl_p99_s`` [s], ``num_preemptions``, ``service_rate_per_s`` (the
        budget's own, as above: a load above it cannot be carried for long) [1/s],
        ``cost_model`` (``"typical"``).
    """
    checked = check_workload(workload)
    fraction = number_in("load_fraction", load_fraction, low=0.0, low_open=True, high=2.0, what="in (0, 2]")
    cap = int_at_least("max_num_seqs", max_num_seqs, 1)
    if isinstance(budgets, str | bytes) or not isinstance(budgets, Sequence) or not budgets:
        raise ParameterError(f"budgets must be a non-empty list of token counts, got {budgets!r}")
    template = EngineConfig.vllm_defaults(hardware, tensor_parallel_size=int_at_least("tp", tp, 1))
    step_cost, mean_tokens = (
        CalibratedCost.typical(hardware, model, engine=template),
        mean_sequence_tokens(checked, seed=seed),
    )
    sizes = sorted({int_at_least("budgets", b, 1) for b in budgets})
    service = {
        b: max_service_rate_per_s(step_cost, max_num_batched_tokens=b, mean_sequence_tokens=mean_tokens)
        for b in {*sizes, template.max_num_batched_tokens}
    }
    rate = float(f"{fraction * service[template.max_num_batched_tokens]:.3g}")
    tables = [
        sweep(checked, budgets=[budget], max_num_seqs=[min(cap, budget)], rates_per_s=[rate], hardware=hardware,
              model=model, cost="typical", seed=seed, engine=template, executor=SerialExecutor(), progress=False)
        for budget in sizes
    ]  # fmt: skip
    table = pd.concat(tables, ignore_index=True)
    columns = ["rate_per_s", "ttft_mean_s", "ttft_p90_s", "tpot_mean_s", "itl_p99_s"]
    out = table[["max_num_batched_tokens", "max_num_seqs"]].astype(int).assign(tp=tp, load_fraction=fraction)
    out = out.assign(**{c: table[c].astype(float) for c in columns}, num_preemptions=table.num_preemptions.astype(int))
    return out.assign(
        service_rate_per_s=[service[int(b)] for b in out.max_num_batched_tokens], cost_model=table.cost.astype(str)
    )
