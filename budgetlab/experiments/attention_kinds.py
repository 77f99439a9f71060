"""Models of similar size with different attention (notebook 12): the KV pool, concurrency, the KV gate, the knobs.

Full attention keeps every token of every layer; a sliding-window layer only the last ``W``
tokens (plus those in flight); an MLA layer one latent vector per token, the same on every
tensor-parallel GPU; a Mamba / linear-attention layer one fixed state per request. vLLM's hybrid
KV cache manager gives each kind its own block tables on one shared pool
(:mod:`budgetlab.attention`, :mod:`budgetlab.memory.kv_specs`), so two models of the same size
can hold very different numbers of requests. Every function returns a tidy
:class:`pandas.DataFrame`, units in the column names, and names the model that produced each
number: ``memory_model`` (``"vLLM 0.19 start-up accounting"``: :func:`~budgetlab.memory.kv_capacity`)
or ``cost_model`` (the step cost of a simulation, ``"typical"`` by default:
:meth:`CalibratedCost.typical <budgetlab.cost.CalibratedCost.typical>`).

In the notebook's order: the models' layouts (:func:`model_layouts`); where each is deployed and
the pool it gets, with and without the hybrid manager (:func:`deployments`); the requests the
pool holds against the context length (:func:`concurrency_by_length`); the same load simulated
on every model, hybrid manager on and off, and which gate holds requests back
(:func:`kv_gate_runs`); the tuner's ``max_num_batched_tokens`` and ``max_num_seqs`` per model
(:func:`recommended_knobs`); the real start-up logs row by row (:func:`kv_log_rows`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from budgetlab._checks import int_at_least, number_in
from budgetlab.attention import describe_kv_groups, kv_cache_groups
from budgetlab.catalog import resolve_model
from budgetlab.errors import (
    CapacityAboveBoundsError,
    CapacitySearchError,
    ConfigError,
    DoesNotFitError,
    NoBudgetMeetsTargetError,
    ParameterError,
    RequestTooLargeError,
)
from budgetlab.experiments.guess import requests_pool_holds
from budgetlab.experiments.slo import SLO
from budgetlab.experiments.tune import tune
from budgetlab.memory import (
    KVCapacity,
    kv_block_size,
    kv_capacity,
    layer_kv_bytes_per_token,
    mamba_state_bytes_per_gpu,
    valid_tp_sizes,
    weight_bytes_per_gpu,
    weights_fit,
)
from budgetlab.metrics import gate_shares, run_numbers
from budgetlab.simulator import simulate
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec
from budgetlab.workload import SweepWorkload, check_workload, mean_sequence_tokens, workload_requests

__all__ = [
    "DEFAULT_MODELS",
    "MEMORY_MODEL",
    "FAMILIES",
    "HYBRID_MANAGER",
    "FULL_ONLY_MANAGER",
    "KV_BOUND_FRACTION",
    "attention_family",
    "engine_for",
    "model_layouts",
    "deployments",
    "concurrency_by_length",
    "GateRuns",
    "kv_gate_runs",
    "recommended_knobs",
    "kv_log_rows",
]

#: Models of 16 to 80 billion parameters, one per kind of attention (catalog slugs): full
#: attention, sliding window 1:1 (4,096 and 128 tokens), sliding window 5:1, MLA, Gated DeltaNet 3:1.
DEFAULT_MODELS = ("qwen3-32b", "gemma-2-27b", "gemma-3-27b", "gpt-oss-20b", "deepseek-v2-lite", "qwen3-next-80b-a3b")

#: What sized every pool, named in the ``memory_model`` columns.
MEMORY_MODEL = "vLLM 0.19 start-up accounting"

#: The attention families, in the order the charts list them.
FAMILIES = ("full attention", "sliding window", "chunked local", "MLA", "hybrid (Mamba / linear)")

#: The ``manager`` labels: vLLM's hybrid KV cache manager, and every layer full
#: (``--disable-hybrid-kv-cache-manager``, ``EngineConfig(kv_groups=("full",))``).
HYBRID_MANAGER = "hybrid KV cache manager"
FULL_ONLY_MANAGER = "every layer full (hybrid manager off)"
_MANAGERS = {"hybrid": HYBRID_MANAGER, "full": FULL_ONLY_MANAGER}

#: A run is *KV-bound* when the KV gate holds waiting requests back for at least this share of
#: its busy time [-].
KV_BOUND_FRACTION = 0.25


def attention_family(model: ModelSpec) -> str:
    """The family of ``model``'s attention, one of :data:`FAMILIES`.

    A model with any Mamba / linear-attention layer is ``"hybrid (Mamba / linear)"``; else one
    with MLA layers ``"MLA"``; else chunked local, else sliding window; else full attention.
    """
    kinds = set(model.attention.layer_kinds) if model.attention is not None else {"full"}
    for kind, family in (
        ("mamba", FAMILIES[4]),
        ("mla", FAMILIES[3]),
        ("chunked_local", FAMILIES[2]),
        ("sliding_window", FAMILIES[1]),
    ):
        if kind in kinds:
            return family
    return FAMILIES[0]


def _models(models: Sequence[str | ModelSpec]) -> list[ModelSpec]:
    if isinstance(models, str | bytes) or not isinstance(models, Sequence) or not models:
        raise ParameterError(f"models must be a non-empty list of catalog slugs like {list(DEFAULT_MODELS[:2])}")
    specs = [m if isinstance(m, ModelSpec) else resolve_model(m, name="models") for m in models]
    slugs = [m.slug for m in specs]
    if len(set(slugs)) != len(slugs):
        raise ParameterError(f"models {slugs} repeats a model; list each once")
    return specs


def engine_for(
    hardware: HardwareSpec, model: ModelSpec, *, tp: int, max_model_len: int, engine: EngineConfig | None = None
) -> EngineConfig:
    """The engine ``model`` is served with at ``tp`` GPUs: ``engine`` (default vLLM's defaults on
    ``hardware``) with that degree, ``max_model_len`` [tokens] and the block size vLLM uses for
    the model (:func:`~budgetlab.memory.kv_block_size`: larger for a Mamba hybrid). A model with
    Mamba / linear-attention layers runs with prefix caching off: with it on vLLM keeps their
    states in its ``mamba_cache_mode="align"`` cache, which budgetlab does not model."""
    mamba = model.attention is not None and "mamba" in model.attention.layer_kinds
    changes: dict[str, object] = {"tensor_parallel_size": tp, "max_model_len": max_model_len}
    if mamba:
        changes["enable_prefix_caching"] = False
    base = (
        EngineConfig.vllm_defaults(hardware, **changes) if engine is None else dataclasses.replace(engine, **changes)  # type: ignore[arg-type]
    )
    return dataclasses.replace(base, block_size=kv_block_size(model, base))


def model_layouts(models: Sequence[str | ModelSpec]) -> pd.DataFrame:
    """What each decoder layer of each model runs, and what one token or request costs there.

    Returns
    -------
    pandas.DataFrame
        One row per model: ``model`` (slug), ``name``, ``family`` (:func:`attention_family`),
        ``num_params``, ``num_active_params`` [count], ``num_layers`` and the layers of each kind
        ``full_layers``, ``sliding_window_layers``, ``chunked_local_layers``, ``mla_layers``,
        ``mamba_layers`` [count], ``sliding_window`` [tokens] (0 without), ``layout`` (in words),
        ``kv_groups`` (vLLM's KV-cache groups, in words), ``kv_bytes_per_token_every_token``
        (one token in the layers that keep every token: full and MLA) [B],
        ``kv_bytes_per_token_windowed`` (one token in the sliding and chunked layers, while it is
        in their window) [B], ``state_bytes_per_request`` (the Mamba / linear layers' states) [B];
        the bytes at tensor parallelism 1 and the checkpoint's dtypes.
    """
    rows = []
    for model in _models(models):
        layout = model.attention
        kinds = layout.layer_kinds if layout is not None else ("full",) * model.num_layers
        every = sum(layer_kv_bytes_per_token(model, k) for k in kinds if k in ("full", "mla"))
        windowed = sum(layer_kv_bytes_per_token(model, k) for k in kinds if k in ("sliding_window", "chunked_local"))
        mamba = kinds.count("mamba")
        rows.append(
            {
                "model": model.slug,
                "name": model.name,
                "family": attention_family(model),
                "num_params": float(model.num_params),
                "num_active_params": float(model.num_active_params),
                "num_layers": len(kinds),
                **{f"{kind}_layers": kinds.count(kind) for kind in ("full", "sliding_window", "chunked_local", "mla")},
                "mamba_layers": mamba,
                "sliding_window": int(layout.sliding_window or 0) if layout is not None else 0,
                "layout": layout.describe() if layout is not None else f"{model.num_layers} full",
                "kv_groups": describe_kv_groups(kv_cache_groups(layout)[0]),
                "kv_bytes_per_token_every_token": float(every),
                "kv_bytes_per_token_windowed": float(windowed),
                "state_bytes_per_request": float(mamba * mamba_state_bytes_per_gpu(model)) if mamba else 0.0,
            }
        )
    return pd.DataFrame(rows)


def _full_only(model: ModelSpec, engine: EngineConfig) -> EngineConfig | None:
    """``engine`` with vLLM's hybrid manager off (``kv_groups=("full",)``), or None where vLLM
    cannot run that (Mamba layers) or where it changes nothing (no sliding or chunked layers)."""
    kinds = set(model.attention.layer_kinds) if model.attention is not None else set()
    if "mamba" in kinds or not kinds & {"sliding_window", "chunked_local"}:
        return None
    return dataclasses.replace(engine, kv_groups=("full",))


def _pool(hardware: HardwareSpec, model: ModelSpec, engine: EngineConfig | None) -> KVCapacity | None:
    if engine is None:
        return None
    try:
        return kv_capacity(hardware, model, engine)
    except (DoesNotFitError, ConfigError):
        return None


def deployments(
    hardware: HardwareSpec,
    models: Sequence[str | ModelSpec],
    *,
    max_model_len: int,
    min_concurrency: float = 1.0,
    tp_degrees: Sequence[int] = (1, 2, 4, 8),
    engine: EngineConfig | None = None,
) -> pd.DataFrame:
    """Each model on the fewest GPUs whose pool holds ``min_concurrency`` requests of ``max_model_len`` tokens.

    For each model the degrees of ``tp_degrees`` that vLLM accepts (they divide the attention
    heads) are tried in increasing order (:func:`engine_for`); the first whose weights fit and
    whose KV pool (:func:`~budgetlab.memory.kv_capacity`) gives a "Maximum concurrency" of at
    least ``min_concurrency`` [requests] (>= 1) is kept.
    The pool is also sized with vLLM's hybrid manager off (every sliding or chunked layer
    keeping every token, ``--disable-hybrid-kv-cache-manager``), where vLLM can run that.

    Returns
    -------
    pandas.DataFrame
        One row per model: ``model``, ``name``, ``family``, ``tp`` [GPUs] (0 when none fits),
        ``deployable``, ``reason`` (why not, else ``""``), ``weight_bytes_per_gpu``, ``kv_bytes``
        [B], ``kv_groups`` (in words), ``num_groups``, ``block_size`` [tokens], ``num_blocks``
        (usable) [blocks], ``kv_tokens`` (tokens each group holds) [tokens],
        ``vllm_kv_cache_tokens`` (vLLM 0.19's "GPU KV cache size") [tokens],
        ``max_concurrency`` (vLLM's "Maximum concurrency" for ``max_model_len``) [requests],
        ``max_concurrency_full_only`` (the same with the hybrid manager off; NaN where vLLM
        cannot or it changes nothing) [requests], ``hybrid_gain`` (their ratio) [-],
        ``max_model_len`` [tokens], ``memory_model``.
    """
    length = int_at_least("max_model_len", max_model_len, 1)
    wanted = number_in("min_concurrency", min_concurrency, low=1.0, what=">= 1 requests")
    degrees = sorted({int_at_least("tp_degrees", t, 1, what="GPU counts >= 1") for t in tp_degrees})
    if not degrees:
        raise ParameterError("tp_degrees must list at least one GPU count, like [1, 2, 4, 8]")
    rows = []
    for model in _models(models):
        row: dict[str, object] = {"model": model.slug, "name": model.name, "family": attention_family(model)}
        chosen = None
        reason = f"no degree of {degrees} holds {wanted:g} requests of {length:,} tokens"
        for tp in degrees:
            if tp not in valid_tp_sizes(model):
                continue
            eng = engine_for(hardware, model, tp=tp, max_model_len=length, engine=engine)
            if not weights_fit(hardware, model, tp=tp, quantization=eng.quantization):
                continue
            cap = _pool(hardware, model, eng)
            if cap is not None and (cap.max_concurrency or 0) >= wanted:
                chosen = (tp, eng, cap)
                break
        if chosen is None:
            row.update(tp=0, deployable=False, reason=reason)
            rows.append(row)
            continue
        tp, eng, cap = chosen
        full = _pool(hardware, model, _full_only(model, eng))
        full_concurrency = float(full.max_concurrency or 0) if full is not None else math.nan
        row.update(
            tp=tp,
            deployable=True,
            reason="",
            weight_bytes_per_gpu=float(
                weight_bytes_per_gpu(model, tp=tp, dtype=eng.dtype, quantization=eng.quantization)
            ),
            kv_bytes=float(cap.kv_bytes),
            kv_groups=describe_kv_groups(cap.kv_groups),
            num_groups=len(cap.kv_groups),
            block_size=int(cap.block_size),
            num_blocks=int(cap.num_blocks),
            kv_tokens=int(cap.num_tokens),
            vllm_kv_cache_tokens=int(cap.vllm_kv_cache_tokens),
            max_concurrency=float(cap.max_concurrency or 0),
            max_concurrency_full_only=full_concurrency,
            hybrid_gain=float(cap.max_concurrency or 0) / full_concurrency if full_concurrency > 0 else math.nan,
        )
        rows.append(row)
    frame = _with_columns(rows, _DEPLOYMENT_COLUMNS)
    frame["max_model_len"] = length
    frame["memory_model"] = MEMORY_MODEL
    return frame


_DEPLOYMENT_COLUMNS = (
    "model", "name", "family", "tp", "deployable", "reason", "weight_bytes_per_gpu", "kv_bytes", "kv_groups",
    "num_groups", "block_size", "num_blocks", "kv_tokens", "vllm_kv_cache_tokens", "max_concurrency",
    "max_concurrency_full_only", "hybrid_gain",
)  # fmt: skip


def _deployed(table: pd.DataFrame) -> pd.DataFrame:
    needed = ("model", "tp", "deployable")
    missing = [c for c in needed if c not in table]
    if missing:
        raise ParameterError(f"pass the table deployments() made (it lacks {', '.join(missing)})")
    return table[table.deployable.astype(bool)]


def concurrency_by_length(
    hardware: HardwareSpec,
    deployed: pd.DataFrame,
    lengths: Sequence[int],
    *,
    engine: EngineConfig | None = None,
) -> pd.DataFrame:
    """vLLM's "Maximum concurrency" against ``max_model_len``, hybrid manager on and off.

    Every deployable model of ``deployed`` (:func:`deployments`) keeps its degree; only
    ``max_model_len`` changes.

    Returns
    -------
    pandas.DataFrame
        One row per model, length and manager: ``model``, ``name``, ``family``, ``tp``,
        ``max_model_len`` [tokens], ``manager`` (``"hybrid KV cache manager"`` or ``"every layer
        full (hybrid manager off)"``, the latter only where vLLM can run it and it differs),
        ``max_concurrency`` [requests], ``memory_model``.
    """
    grid = sorted({int_at_least("lengths", n, 1) for n in lengths})
    if not grid:
        raise ParameterError("lengths must list at least one max_model_len [tokens]")
    rows = []
    for row in _deployed(deployed).itertuples():
        model = resolve_model(str(row.model))
        for length in grid:
            eng = engine_for(hardware, model, tp=int(row.tp), max_model_len=length, engine=engine)
            for key, candidate in (("hybrid", eng), ("full", _full_only(model, eng))):
                cap = _pool(hardware, model, candidate)
                if cap is None:
                    continue
                rows.append(
                    {
                        "model": model.slug,
                        "name": model.name,
                        "family": attention_family(model),
                        "tp": int(row.tp),
                        "max_model_len": length,
                        "manager": _MANAGERS[key],
                        "max_concurrency": float(cap.max_concurrency or 0),
                    }
                )
    frame = pd.DataFrame(rows, columns=["model", "name", "family", "tp", "max_model_len", "manager", "max_concurrency"])
    frame["memory_model"] = MEMORY_MODEL
    return frame


@dataclass(frozen=True)
class GateRuns:
    """The simulations of :func:`kv_gate_runs`.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per model and manager (see :func:`kv_gate_runs`).
    timeline : pandas.DataFrame
        Every run's steps, thinned to at most ``max_points`` per run: ``model``, ``name``,
        ``manager``, ``time_s`` (step start) [s], ``num_running``, ``num_waiting`` [requests],
        ``kv_used_fraction`` (blocks held over the pool) [-], ``cost_model``.
    """

    table: pd.DataFrame
    timeline: pd.DataFrame


def kv_gate_runs(
    hardware: HardwareSpec,
    deployed: pd.DataFrame,
    *,
    workload: SweepWorkload,
    rate_per_s: float,
    seed: int = 0,
    engine: EngineConfig | None = None,
    cost: str = "typical",
    max_points: int = 300,
) -> GateRuns:
    """One load offered to every deployable model, with vLLM's hybrid manager on and off.

    Each model runs at its degree of ``deployed`` (:func:`deployments`, whose
    ``max_model_len`` it keeps) the same requests (``workload`` at ``rate_per_s``, ``seed``),
    priced by ``cost`` for that deployment; a model with sliding-window layers runs a second
    time with every layer full (``kv_groups=("full",)``, its pool sized that way too). Which
    gate held waiting requests back is :func:`budgetlab.gate_shares`: ``kv`` is the KV gate
    (preemptions, or requests waiting for blocks).

    Returns
    -------
    GateRuns
        ``table``: one row per model and manager: ``model``, ``name``, ``family``, ``tp``,
        ``manager``, ``kv_groups`` (in words), ``num_kv_blocks`` [blocks], ``rate_per_s`` [1/s],
        ``num_requests``, ``simulated``, ``reason`` (why not), ``num_preemptions``,
        ``kv_peak_fraction`` [-], ``running_max``, ``running_mean`` [requests],
        ``ttft_p50_s``, ``ttft_p90_s``, ``tpot_mean_s``, ``itl_p99_s`` [s],
        ``throughput_tokens_per_s`` [tokens/s], ``gate_slot``, ``gate_budget``, ``gate_kv``,
        ``gate_none`` (shares of the busy time) [-], ``kv_bound`` (``gate_kv`` at least
        :data:`KV_BOUND_FRACTION`), ``cost_model``; ``timeline`` as
        :class:`GateRuns` says.
    """
    checked = check_workload(workload)
    rate = number_in("rate_per_s", rate_per_s, low=0.0, low_open=True, what="> 0 requests per second")
    points = int_at_least("max_points", max_points, 2)
    requests = workload_requests(checked, rate_per_s=rate, seed=seed)
    rows, timelines = [], []
    for row in _deployed(deployed).itertuples():
        model = resolve_model(str(row.model))
        length = int(getattr(row, "max_model_len", 0)) or None
        base = engine_for(hardware, model, tp=int(row.tp), max_model_len=length or 32768, engine=engine)
        for key, eng in (("hybrid", base), ("full", _full_only(model, base))):
            if eng is None:
                continue
            out: dict[str, object] = {
                "model": model.slug,
                "name": model.name,
                "family": attention_family(model),
                "tp": int(row.tp),
                "manager": _MANAGERS[key],
                "kv_groups": describe_kv_groups(eng.kv_groups or kv_cache_groups(model.attention)[0]),
                "rate_per_s": rate,
                "num_requests": len(requests),
                "simulated": False,
                "reason": "",
                "cost_model": cost,
            }
            try:
                result = simulate(requests, engine=eng, cost=cost, hardware=hardware, model=model)
            except (RequestTooLargeError, DoesNotFitError) as error:
                out["reason"] = str(error).split(";")[0]
                rows.append(out)
                continue
            numbers = run_numbers(result)
            shares = gate_shares(result).fraction
            out.update(
                simulated=True,
                num_kv_blocks=int(result.num_kv_blocks),
                **{
                    k: float(numbers[k])
                    for k in (
                        "num_preemptions",
                        "kv_peak_fraction",
                        "running_max",
                        "running_mean",
                        "ttft_p50_s",
                        "ttft_p90_s",
                        "tpot_mean_s",
                        "itl_p99_s",
                        "throughput_tokens_per_s",
                    )
                },
                **{f"gate_{gate}": float(shares[gate]) for gate in ("slot", "budget", "kv", "none")},
                kv_bound=bool(shares["kv"] >= KV_BOUND_FRACTION),
            )
            rows.append(out)
            steps = result.steps
            keep = np.unique(np.linspace(0, len(steps) - 1, num=min(points, len(steps))).astype(int))
            thin = steps.iloc[keep]
            timelines.append(
                pd.DataFrame(
                    {
                        "model": model.slug,
                        "name": model.name,
                        "manager": _MANAGERS[key],
                        "time_s": thin.start_at_s.to_numpy(),
                        "num_running": thin.num_running.to_numpy(),
                        "num_waiting": thin.num_waiting.to_numpy(),
                        "kv_used_fraction": 1.0 - thin.num_free_kv_blocks.to_numpy() / max(result.num_kv_blocks, 1),
                        "cost_model": cost,
                    }
                )
            )
    timeline = pd.concat(timelines, ignore_index=True) if timelines else pd.DataFrame(columns=_TIMELINE_COLUMNS)
    return GateRuns(table=_with_columns(rows, _GATE_COLUMNS), timeline=timeline)


_GATE_COLUMNS = (
    "model", "name", "family", "tp", "manager", "kv_groups", "num_kv_blocks", "rate_per_s", "num_requests",
    "simulated", "reason", "num_preemptions", "kv_peak_fraction", "running_max", "running_mean", "ttft_p50_s",
    "ttft_p90_s", "tpot_mean_s", "itl_p99_s", "throughput_tokens_per_s", "gate_slot", "gate_budget", "gate_kv",
    "gate_none", "kv_bound", "cost_model",
)  # fmt: skip
_TIMELINE_COLUMNS = (
    "model",
    "name",
    "manager",
    "time_s",
    "num_running",
    "num_waiting",
    "kv_used_fraction",
    "cost_model",
)
_KNOB_COLUMNS = (
    "model", "name", "family", "tp", "tuned", "reason", "max_num_batched_tokens", "max_num_seqs", "capacity_per_s",
    "rate_per_s", "binding_gate", "cap_bound", "first_max_num_seqs", "mean_sequence_tokens", "requests_pool_holds",
    "cost_model",
)  # fmt: skip


def _with_columns(rows: list[dict[str, object]], columns: Sequence[str]) -> pd.DataFrame:
    """``rows`` as a frame with every column of ``columns`` (NaN where a row has none), even empty
    (then the flags ``simulated`` and ``tuned`` are bool columns, so that they select rows)."""
    frame = pd.DataFrame(rows).reindex(columns=list(columns))
    for flag in ("simulated", "tuned"):
        if flag in frame and not rows:
            frame[flag] = frame[flag].astype(bool)
    return frame


def _pool_holds(cap: KVCapacity, tokens: float) -> float:
    return requests_pool_holds(cap.kv_groups, cap.num_blocks, cap.block_size, tokens)


def recommended_knobs(
    hardware: HardwareSpec,
    deployed: pd.DataFrame,
    *,
    workload: SweepWorkload,
    slo: SLO,
    budget_factors: Sequence[float],
    cap_factors: Sequence[float],
    tolerance_fraction: float = 0.05,
    seed: int = 0,
    engine: EngineConfig | None = None,
    cost: str = "typical",
) -> pd.DataFrame:
    """``max_num_batched_tokens`` and ``max_num_seqs`` for every deployable model: :func:`~budgetlab.tune`.

    Each model is tuned at its degree of ``deployed`` (:func:`deployments`) for ``workload``
    under ``slo``, the tuner searching ``budget_factors`` × its first budget and
    ``cap_factors`` × its first cap. Beside the answer: the requests of the workload's mean
    length the KV pool holds at once, group by group (a sliding group keeps only its window;
    :func:`budgetlab.experiments.guess.requests_pool_holds`), which is where the tuner's first
    cap comes from (rounded, and clipped to the budget).

    Returns
    -------
    pandas.DataFrame
        One row per model: ``model``, ``name``, ``family``, ``tp``, ``tuned`` (False where
        the tuner found no configuration meeting the SLO, or where the SLO held at every load it
        reached), ``reason`` (why not),
        ``max_num_batched_tokens`` [tokens], ``max_num_seqs`` [requests],
        ``capacity_per_s``, ``rate_per_s`` (the load to run it at) [requests/s],
        ``binding_gate`` (the gate that binds at capacity, in words), ``cap_bound`` (that gate
        is ``max_num_seqs``: a larger cap factor may raise the capacity), ``first_max_num_seqs``
        (the tuner's first cap) [requests], ``mean_sequence_tokens`` [tokens],
        ``requests_pool_holds`` [requests], ``cost_model``.
    """
    checked = check_workload(workload)
    mean_tokens = float(mean_sequence_tokens(checked, seed=seed))
    rows = []
    for row in _deployed(deployed).itertuples():
        model = resolve_model(str(row.model))
        length = int(getattr(row, "max_model_len", 0)) or 32768
        eng = engine_for(hardware, model, tp=int(row.tp), max_model_len=length, engine=engine)
        out: dict[str, object] = {
            "model": model.slug,
            "name": model.name,
            "family": attention_family(model),
            "tp": int(row.tp),
            "mean_sequence_tokens": mean_tokens,
            "requests_pool_holds": _pool_holds(kv_capacity(hardware, model, eng), mean_tokens),
            "cost_model": cost,
        }
        try:
            result = tune(
                checked,
                slo=slo,
                hardware=hardware,
                model=model,
                cost=cost,
                engine=eng,
                seed=seed,
                tolerance_fraction=tolerance_fraction,
                budget_factors=budget_factors,
                cap_factors=cap_factors,
                progress=False,
            )
        except CapacityAboveBoundsError:
            out.update(
                tuned=False,
                reason="the SLO holds at every load the search reached: too few requests per simulation "
                "for queues to build (simulate more)",
            )
            rows.append(out)
            continue
        except (CapacitySearchError, NoBudgetMeetsTargetError, ConfigError, DoesNotFitError) as error:
            out.update(tuned=False, reason=str(error).split(". ")[0])
            rows.append(out)
            continue
        out.update(
            tuned=True,
            reason="",
            max_num_batched_tokens=int(result.max_num_batched_tokens),
            max_num_seqs=int(result.max_num_seqs),
            capacity_per_s=float(result.capacity_per_s),
            rate_per_s=float(result.rate_per_s),
            binding_gate=str(result.binding_gate.label),
            cap_bound=result.binding_gate.key == "slot",
            first_max_num_seqs=int(result.first_guess.max_num_seqs),
        )
        rows.append(out)
    return _with_columns(rows, _KNOB_COLUMNS)


def kv_log_rows(compared: pd.DataFrame, skipped: pd.DataFrame) -> pd.DataFrame:
    """The real start-up logs row by row: :func:`~budgetlab.experiments.kv_logs.check_kv_logs`'
    ``compared`` and ``skipped`` frames in one table, each compared row with its model's
    attention family.

    Returns
    -------
    pandas.DataFrame
        One row per log row, by ``row_id``: ``row_id``, ``checkpoint``, ``model`` (slug, ``""``
        where skipped), ``family``, ``status`` (``"compared"`` or ``"skipped"``), ``tp``,
        ``kv_groups`` [count], ``kv_tokens_logged``, ``kv_tokens_predicted`` [tokens],
        ``kv_tokens_error_fraction`` [-], ``max_concurrency_logged``,
        ``max_concurrency_predicted`` [requests], ``max_concurrency_error_fraction`` [-],
        ``tight``, ``within`` (inside its tolerance), ``reason`` (why skipped), ``memory_model``.
    """
    columns = (
        "row_id",
        "model",
        "tp",
        "kv_groups",
        "kv_tokens_logged",
        "kv_tokens_predicted",
        "kv_tokens_error_fraction",
        "max_concurrency_logged",
        "max_concurrency_predicted",
        "max_concurrency_error_fraction",
        "tight",
        "within",
    )
    missing = [c for c in columns if c not in compared] + [c for c in ("row_id", "reason") if c not in skipped]
    if missing:
        raise ParameterError(f"pass check_kv_logs(...).compared and .skipped (missing {', '.join(missing)})")
    done = compared.copy()
    done["checkpoint"] = done["checkpoint"] if "checkpoint" in done else done["model"]
    done["family"] = [attention_family(resolve_model(str(slug))) for slug in done["model"]]
    done["status"], done["reason"] = "compared", ""
    rest = skipped.copy()
    rest["model"], rest["family"], rest["status"] = "", "", "skipped"
    frame = pd.concat([done, rest], ignore_index=True, sort=False)
    keep = ["row_id", "checkpoint", "model", "family", "status", *columns[2:], "reason"]
    frame = frame.reindex(columns=keep).sort_values("row_id", kind="stable").reset_index(drop=True)
    frame["memory_model"] = MEMORY_MODEL
    return frame
