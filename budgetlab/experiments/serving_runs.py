"""Predicted against measured on published vLLM serving runs (``vllm_serving_h100_inference_sim.csv``).

The file (in the developers' real-engine data, ``../shared/data/real/`` or ``$BUDGETLAB_REAL_DATA``,
:func:`~budgetlab.experiments.published.real_data_dir`; never shipped; its README gives the source
and caveats) holds one row per load stage of a real vLLM server on H100 driven by inference-perf:
the configuration (``gpu``, ``model``, ``tp``, ``max_num_batched_tokens``, ``max_num_seqs``,
``max_model_len``), the workload (``num_unique_system_prompts`` system prompts of
``system_prompt_len`` tokens, each shared by ``num_users_per_system_prompt`` users, a question,
a fixed output length, constant arrivals at ``requested_rate_per_s`` for ``stage_duration_s``)
and the measured TTFT, end-to-end latency and throughput.

:func:`run_requests` rebuilds a stage's workload: constant arrivals, every request at the
stage's measured mean prompt and output lengths (the per-request lengths are not published),
its first ``system_prompt_len`` tokens shared with the other requests of its system prompt
(``prefix_id``), the prompts taken round robin. :func:`check_serving_runs` simulates each stage
with one cost model and serving overhead for all of them — no per-run fitting — and compares:

* TTFT mean, end-to-end mean, and time per output token as the README says to compute it,
  ``(e2e − TTFT) / (output − 1)`` on the means (the file's own TPOT columns count tokens twice);
* overload: a stage is measured overloaded when more than 5 % of its requests failed or its
  mean TTFT passed 10 s (issue 22's criterion); it is predicted overloaded when the simulated
  queue does not drain — the mean TTFT exceeds 2 s or the last request finishes more than 30 s
  after the last arrival.

Any file in that format is checked the same way, on any GPU and model the catalog holds:

* ``model`` is a Hugging Face checkpoint, found through the catalog's ``hf_ids``
  (:func:`model_from_checkpoint`: any case, base and instruct variants, a local
  ``.../owner/name`` path);
* ``gpu`` is a GPU as people and tools write it (``H100 SXM``, ``NVIDIA H100 80GB HBM3``,
  ``A100-SXM4-80GB``, ``1x A100 80G``), found by :func:`gpu_from_name`;
* ``max_num_batched_tokens``, ``max_num_seqs``, ``max_model_len`` and
  ``max_cudagraph_capture_size`` may be absent or blank: vLLM's default for the GPU then
  (:meth:`EngineConfig.vllm_defaults`; no length limit for ``max_model_len``); optional
  ``gpu_memory_utilization``, ``enable_prefix_caching`` (``true``/``false``) and
  ``quantization`` columns are used when present (:func:`run_knobs`).

The published runs are few: the error table is a check of the model, not a fit to it.
:attr:`ServingRunsCheck.accuracy` states it as BLIS does (:mod:`budgetlab.experiments.accuracy`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from budgetlab.catalog import hardware, hf_ids, list_hardware, model
from budgetlab.cost.calibrated import CalibratedCost
from budgetlab.errors import DataFormatError, UnknownNameError
from budgetlab.experiments.progress import ProgressReporter, ProgressSpec, progress_reporter
from budgetlab.experiments.published import read_published_csv, real_data_path
from budgetlab.serving.overhead import ServingOverhead, client_requests
from budgetlab.simulator import simulate
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request

__all__ = [
    "OVERLOAD_FAILED_FRACTION",
    "OVERLOAD_MEASURED_TTFT_S",
    "measured_overloaded",
    "gpu_from_name",
    "model_from_checkpoint",
    "ServingRunsCheck",
    "default_runs_path",
    "read_serving_runs",
    "run_requests",
    "run_knobs",
    "run_engine",
    "check_serving_runs",
    "BOUNDS",
    "preset_grid",
    "matches_typical",
]

OVERLOAD_FAILED_FRACTION = 0.05
"""A stage with more failed requests than this share was overloaded [-]."""
OVERLOAD_MEASURED_TTFT_S = 10.0
"""A stage whose measured mean TTFT passed this was overloaded too (issue 22's criterion) [s]."""

_OVERLOAD_TTFT_S = 2.0
_OVERLOAD_DRAIN_S = 30.0

_NEEDED = (
    "model", "tp", "system_prompt_len", "num_unique_system_prompts", "requested_rate_per_s", "stage_duration_s",
    "num_requests", "num_failures", "prompt_len_mean", "output_len_mean", "ttft_mean_s", "e2e_mean_s", "gpu",
)  # fmt: skip
_ENGINE_KNOBS = ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "max_cudagraph_capture_size")
"""Optional columns: absent or blank, vLLM's default for the GPU."""


def default_runs_path() -> Path | None:
    """``vllm_serving_h100_inference_sim.csv`` in the developers' real-engine data, if present
    (:func:`~budgetlab.experiments.published.real_data_path`)."""
    return real_data_path("vllm_serving_h100_inference_sim.csv")


def measured_overloaded(runs: pd.DataFrame | pd.Series) -> Any:
    """Whether each published stage was overloaded, as measured (bool, or a boolean Series):
    more than :data:`OVERLOAD_FAILED_FRACTION` of its requests failed, or its mean TTFT passed
    :data:`OVERLOAD_MEASURED_TTFT_S`."""
    failed = runs["num_failures"].astype(float) if isinstance(runs, pd.DataFrame) else float(runs["num_failures"])
    requests = runs["num_requests"].astype(float) if isinstance(runs, pd.DataFrame) else float(runs["num_requests"])
    ttft = runs["ttft_mean_s"].astype(float) if isinstance(runs, pd.DataFrame) else float(runs["ttft_mean_s"])
    return (failed > OVERLOAD_FAILED_FRACTION * requests) | (ttft > OVERLOAD_MEASURED_TTFT_S)


def read_serving_runs(path: str | os.PathLike[str]) -> pd.DataFrame:
    """The file as published, with a ``run`` column (its row number).

    Raises
    ------
    DataFormatError
        A needed column is missing (the message names it).
    """
    return read_published_csv(path, _NEEDED).assign(run=lambda frame: range(len(frame)))


# --------------------------------------------------------------------------------------------
# The GPU and model a row names
# --------------------------------------------------------------------------------------------

_GPU_FILLER = frozenset({"nvidia", "amd", "instinct", "tensor", "core", "gpu", "gpus"})
_GPU_RULES: dict[str, tuple[tuple[frozenset[str], frozenset[str], str], ...]] = {
    "h100": (
        (frozenset({"pcie"}), frozenset({"pcie", "80gb", "hbm2e"}), "h100-pcie"),
        (frozenset(), frozenset({"sxm", "sxm5", "80gb", "hbm3"}), "h100-sxm"),
    ),
    "h200": ((frozenset(), frozenset({"sxm", "sxm5", "141gb", "hbm3e"}), "h200-sxm"),),
    "a100": (
        (frozenset({"40gb"}), frozenset({"sxm", "sxm4", "40gb", "hbm2"}), "a100-40gb"),
        (frozenset(), frozenset({"sxm", "sxm4", "80gb", "hbm2e"}), "a100-80gb-sxm"),
    ),
    "b200": ((frozenset(), frozenset({"sxm", "sxm6", "180gb", "192gb", "hbm3e"}), "b200"),),
    "l40s": ((frozenset(), frozenset({"48gb", "pcie"}), "l40s"),),
    "mi300x": ((frozenset(), frozenset({"192gb", "oam"}), "mi300x"),),
}
"""GPU family → (words the name must hold, words it may hold, catalog slug), tried in order."""


def _gpu_words(name: str) -> list[str]:
    """``name`` without annotations in parentheses, a leading GPU count (``8x``), vendor and
    filler words, split into lower-case words; memory sizes read as ``<n>gb`` (``80G`` → ``80gb``)."""
    text = re.sub(r"\([^)]*\)", " ", name)
    text = re.sub(r"^\s*\d+\s*[x×]\s*", "", text, flags=re.IGNORECASE).lower()
    text = re.sub(r"(\d+)\s*g(?:i?b)?\b", r"\1gb", re.sub(r"[-_/,]", " ", text))
    return [word for word in text.split() if word not in _GPU_FILLER]


def gpu_from_name(name: str) -> HardwareSpec:
    """The catalog GPU a run's ``gpu`` cell names, as people and tools write it.

    Accepted, case and separators (``-``, ``_``, spaces) aside: a catalog slug or name
    (``h100-sxm``, ``NVIDIA A100 SXM4 80GB``); ``nvidia-smi``'s names (``NVIDIA H100 80GB HBM3``,
    ``NVIDIA A100-SXM4-80GB``, ``NVIDIA A100-SXM4-40GB``, ``NVIDIA H100 PCIe``); and short forms
    (``H100 SXM``, ``A100 80GB``, ``1x A100 80G``). A note in parentheses and a leading GPU
    count (``4x``) are ignored. The rules, by family:

    ========  =========================================  ===============
    family    other words allowed                        row
    ========  =========================================  ===============
    H100      ``PCIe`` (required), ``80GB``, ``HBM2e``    ``h100-pcie``
    H100      ``SXM``, ``SXM5``, ``80GB``, ``HBM3``       ``h100-sxm``
    H200      ``SXM``, ``SXM5``, ``141GB``, ``HBM3e``     ``h200-sxm``
    A100      ``40GB`` (required), ``SXM``, ``SXM4``      ``a100-40gb``
    A100      ``SXM``, ``SXM4``, ``80GB``, ``HBM2e``      ``a100-80gb-sxm``
    B200      ``SXM``, ``180GB``, ``192GB``, ``HBM3e``    ``b200``
    L40S      ``48GB``, ``PCIe``                          ``l40s``
    MI300X    ``192GB``, ``OAM``                          ``mi300x``
    ========  =========================================  ===============

    So a bare ``H100`` or ``A100`` is the SXM board (the A100 at 80 GB), as ``nvidia-smi`` names
    the SXM H100 (``H100 80GB HBM3``). A word outside its family's list refuses the name rather
    than reading it as another board: an ``H100 NVL``, an ``A100 PCIe`` (PCIe Gen4 links, not
    NVLink) and a ``GH200`` have no catalog row.

    Parameters
    ----------
    name : str
        The ``gpu`` cell.

    Returns
    -------
    HardwareSpec

    Raises
    ------
    DataFormatError
        A name no rule and no catalog row matches; the message lists the catalog's GPUs.

    Examples
    --------
    >>> gpu_from_name("NVIDIA A100-SXM4-80GB").slug
    'a100-80gb-sxm'
    >>> gpu_from_name("H100 SXM (repo README/DESIGN.md)").slug
    'h100-sxm'
    """
    text = str(name).strip()
    key = " ".join(re.sub(r"[-_]", " ", text.lower()).split())
    for slug in list_hardware():
        spec = hardware(slug)
        if key in (" ".join(slug.replace("-", " ").split()), " ".join(spec.name.lower().split())):
            return spec
    words = _gpu_words(text)
    families = [word for word in words if word in _GPU_RULES]
    if len(families) == 1:
        rest = set(words) - set(families)
        for required, allowed, slug in _GPU_RULES[families[0]]:
            if required <= rest <= allowed:
                return hardware(slug)
    known = "; ".join(f"{slug} ({hardware(slug).name})" for slug in list_hardware())
    raise DataFormatError(
        f"GPU {text!r} names no GPU of budgetlab's hardware catalog (data/catalog/hardware.csv; "
        f"budgetlab.list_hardware()): {known}. Write one of these names or slugs in the gpu column "
        "(nvidia-smi's names such as 'NVIDIA A100-SXM4-80GB' are read too), or add the GPU's row "
        "to the catalog (data/catalog/README.md)."
    )


def _checkpoint_key(name: str) -> str:
    """A checkpoint's name without owner, ``Meta-`` prefix and variant words (``Instruct``,
    ``chat``, ``hf``, ``Base``, ``it``): ``Meta-Llama-3.1-8B-Instruct`` → ``llama-3.1-8b``."""
    key = name.rpartition("/")[2].lower()
    key = key.removeprefix("meta-")
    return re.sub(r"-(?:instruct|chat|hf|base|it)(?=-|$)", "", key)


def model_from_checkpoint(name: str) -> ModelSpec:
    """The catalog model a run's ``model`` cell (a Hugging Face checkpoint) stands for.

    Tried in order: the id as the catalog lists it in ``models.csv``'s ``hf_ids`` (any case;
    a catalog slug works too); the last two parts of a local path (``/models/owner/name``);
    then the one catalog row whose listed ids share the name once owner, a ``Meta-`` prefix
    and variant words (``Instruct``, ``chat``, ``hf``, ``Base``, ``it``) are set aside, so a
    re-upload under another owner or an unlisted base/instruct twin finds its architecture.
    The check's table names the row used (``model``).

    Parameters
    ----------
    name : str
        The ``model`` cell, e.g. ``"meta-llama/Llama-3.1-70B-Instruct"``.

    Returns
    -------
    ModelSpec

    Raises
    ------
    DataFormatError
        No row, or more than one, fits; the message names the closest listed ids.

    Examples
    --------
    >>> model_from_checkpoint("mistralai/Mixtral-8x22B-Instruct-v0.1").slug
    'mixtral-8x22b'
    """
    text = str(name).strip()
    parts = [part for part in text.split("/") if part]
    attempts = [text] + (["/".join(parts[-2:])] if len(parts) > 2 else [])
    first: UnknownNameError | None = None
    for attempt in attempts:
        try:
            return model(attempt)
        except UnknownNameError as exc:
            first = first or exc
    key = _checkpoint_key(text)
    slugs = sorted({slug for repo_id, slug in hf_ids().items() if _checkpoint_key(repo_id) == key})
    if len(slugs) == 1:
        return model(slugs[0])
    several = f" Its name fits several rows ({', '.join(slugs)}): write the listed id." if slugs else ""
    raise DataFormatError(f"model {text!r} is not in budgetlab's model catalog: {first}{several}")


def _int_cell(row: pd.Series, column: str) -> int | None:
    """A whole number from an optional cell; ``None`` when the column is absent or blank."""
    value = row.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not number.is_integer() or number <= 0:
        raise DataFormatError(f"{column} {value!r} is not a whole number > 0")
    return int(number)


_SWITCH = {"true": True, "1": True, "false": False, "0": False}


def run_knobs(row: pd.Series) -> dict[str, object]:
    """The engine knobs a row sets, for :meth:`EngineConfig.vllm_defaults`: ``tp`` (required)
    as ``tensor_parallel_size``, and each optional knob column present and not blank (module
    docstring); the others stay at vLLM's defaults.

    Raises
    ------
    DataFormatError
        ``tp`` blank, or a knob not a whole number > 0 (``enable_prefix_caching``: not true or
        false).
    """
    tp = _int_cell(row, "tp")
    if tp is None:
        raise DataFormatError("the tp cell is blank; write the tensor-parallel size")
    changes: dict[str, object] = {"tensor_parallel_size": tp}
    for knob in _ENGINE_KNOBS:
        value = _int_cell(row, knob)
        if value is not None:
            changes[knob] = value
    utilization = row.get("gpu_memory_utilization")
    if utilization is not None and not pd.isna(utilization):
        changes["gpu_memory_utilization"] = float(utilization)
    caching = row.get("enable_prefix_caching")
    if caching is not None and not pd.isna(caching):
        switch = str(caching).strip().lower()
        if switch not in _SWITCH:
            raise DataFormatError(f"enable_prefix_caching {switch!r} is not true or false")
        changes["enable_prefix_caching"] = _SWITCH[switch]
    quantization = row.get("quantization")
    if quantization is not None and not pd.isna(quantization):
        changes["quantization"] = str(quantization)
    return changes


def run_engine(row: pd.Series, hardware: HardwareSpec | None = None) -> EngineConfig:
    """The stage's configuration: its knobs and TP (:func:`run_knobs`), every other field at
    vLLM's default.

    Parameters
    ----------
    row : pandas.Series
        One row of the file.
    hardware : HardwareSpec, optional
        The GPU; default :func:`gpu_from_name` of the row's ``gpu``. A knob whose column is
        absent or blank takes :meth:`EngineConfig.vllm_defaults` for it (module docstring).
    """
    gpu = hardware or gpu_from_name(str(row["gpu"]))
    return EngineConfig.vllm_defaults(gpu, **run_knobs(row))


def run_requests(row: pd.Series, *, max_duration_s: float | None = None) -> list[Request]:
    """The stage's workload (module docstring), optionally cut to its first ``max_duration_s``."""
    rate = float(row["requested_rate_per_s"])
    duration = (
        float(row["stage_duration_s"])
        if max_duration_s is None
        else min(float(row["stage_duration_s"]), max_duration_s)
    )
    count = max(1, round(duration * rate))
    prompt = max(1, round(float(row["prompt_len_mean"])))
    output = max(1, round(float(row["output_len_mean"])))
    shared = min(int(row["system_prompt_len"]), prompt)
    groups = max(1, int(row["num_unique_system_prompts"]))
    return [
        Request(i, i / rate, prompt, output, prefix_id=f"system-{i % groups}", prefix_tokens=shared)
        for i in range(count)
    ]


@dataclass(frozen=True)
class ServingRunsCheck:
    """Predicted against measured, one row per published stage.

    Attributes
    ----------
    table : pandas.DataFrame
        ``run``, ``model`` and ``hardware`` (catalog slugs), ``tp``, ``rate_per_s``, measured
        and predicted ``ttft_mean_s``, ``tpot_s``, ``e2e_mean_s`` (``*_measured``,
        ``*_predicted``), their relative errors (``*_error``), ``overloaded_measured``,
        ``overloaded_predicted`` and ``prefix_hit_rate``.
    """

    table: pd.DataFrame

    @property
    def steady(self) -> pd.DataFrame:
        """The stages that were not overloaded."""
        return self.table[~self.table.overloaded_measured]

    @property
    def accuracy(self) -> pd.DataFrame:
        """Median and P90 absolute error per metric over the steady stages, and the overload
        agreement: :func:`budgetlab.experiments.accuracy.accuracy_summary` of this check."""
        from budgetlab.experiments.accuracy import accuracy_summary

        return accuracy_summary(self)


def _setting(row: pd.Series) -> tuple[HardwareSpec, ModelSpec, EngineConfig]:
    """The row's GPU, model and engine; a :class:`DataFormatError` names the run."""
    try:
        gpu = gpu_from_name(str(row["gpu"]))
        return gpu, model_from_checkpoint(str(row["model"])), run_engine(row, gpu)
    except DataFormatError as exc:
        raise DataFormatError(f"run {row['run']}: {exc}") from None


def check_serving_runs(
    runs: pd.DataFrame | str | os.PathLike[str],
    *,
    cost: Callable[[HardwareSpec, ModelSpec, EngineConfig], CalibratedCost] | None = None,
    overhead: ServingOverhead | None = None,
    max_duration_s: float | None = 120.0,
    progress: ProgressSpec | ProgressReporter = None,
) -> ServingRunsCheck:
    """Simulate every stage with one cost model and overhead, and compare (module docstring).

    Parameters
    ----------
    runs : pandas.DataFrame or path
        :func:`read_serving_runs` output, or the file.
    cost : callable, optional
        ``(hardware, model, engine) -> CalibratedCost``; default ``CalibratedCost.typical(hw,
        model, engine=engine)``.
    overhead : ServingOverhead, optional
        Default :meth:`ServingOverhead.vllm` (one step of output lag).
    max_duration_s : float or None
        Simulate each stage's first seconds only (steady state is reached in a few seconds at
        these loads) [s]; ``None`` the whole stage.
    progress : bool, None, callable or ProgressReporter
        A line counting the stages simulated (:mod:`budgetlab.experiments.progress`;
        ``None``: in Jupyter or on a terminal). A reporter is advanced and left open.
    """
    frame = runs if isinstance(runs, pd.DataFrame) else read_serving_runs(runs)
    build = cost or (lambda hw, m, e: CalibratedCost.typical(hw, m, engine=e))
    rows = []
    shared = isinstance(progress, ProgressReporter)
    reporter = (
        progress
        if isinstance(progress, ProgressReporter)
        else progress_reporter(progress, "budgetlab serving runs: stages")
    )
    settings = [_setting(row) for _, row in frame.iterrows()]  # every row resolved before any simulation
    if not shared:
        reporter.update(0, len(frame))
    for (_, row), (gpu, llm, engine) in zip(frame.iterrows(), settings, strict=True):
        requests = run_requests(row, max_duration_s=max_duration_s)
        result = simulate(requests, engine=engine, cost=build(gpu, llm, engine))
        client = client_requests(result, overhead or ServingOverhead.vllm())
        ttft, e2e = float(client.ttft_s.mean()), float(client.e2e_s.mean())
        output = float(client.output_tokens.mean())
        tpot = (e2e - ttft) / (output - 1) if output > 1 else math.nan
        drain = float(result.requests.finished_at_s.max() - requests[-1].arrival_at_s)
        measured_tpot = (float(row["e2e_mean_s"]) - float(row["ttft_mean_s"])) / (float(row["output_len_mean"]) - 1)
        entry: dict[str, float | int | str | bool] = {
            "run": int(row["run"]),
            "model": llm.slug,
            "hardware": gpu.slug,
            "tp": engine.tensor_parallel_size,
            "rate_per_s": float(row["requested_rate_per_s"]),
            "ttft_mean_s_measured": float(row["ttft_mean_s"]),
            "ttft_mean_s_predicted": ttft,
            "tpot_s_measured": measured_tpot,
            "tpot_s_predicted": tpot,
            "e2e_mean_s_measured": float(row["e2e_mean_s"]),
            "e2e_mean_s_predicted": e2e,
            "overloaded_measured": bool(measured_overloaded(row)),
            "overloaded_predicted": bool(ttft > _OVERLOAD_TTFT_S or drain > _OVERLOAD_DRAIN_S),
            "prefix_hit_rate": float(result.summary()["prefix_hit_rate"]),
        }
        for metric, predicted, measured in (
            ("ttft_mean_s", ttft, float(row["ttft_mean_s"])),
            ("tpot_s", tpot, measured_tpot),
            ("e2e_mean_s", e2e, float(row["e2e_mean_s"])),
        ):
            entry[f"{metric}_error"] = predicted / measured - 1.0
        rows.append(entry)
        reporter.advance()
    if not shared:
        reporter.close()
    return ServingRunsCheck(table=pd.DataFrame(rows))


BOUNDS: dict[str, float] = {"ttft_mean_s": 0.25, "tpot_s": 0.15, "e2e_mean_s": 0.15}
"""The largest relative error the shipped preset may make on a steady run (issue 12's check) [-]."""


def preset_grid(
    runs: pd.DataFrame | str | os.PathLike[str],
    *,
    bandwidth_efficiencies: tuple[float, ...] = (0.85, 0.90, 0.95),
    step_overheads_s: tuple[float, ...] = (1.5e-3, 2.0e-3, 2.5e-3),
    overhead: ServingOverhead | None = None,
    max_duration_s: float | None = 60.0,
    progress: ProgressSpec = None,
) -> pd.DataFrame:
    """The search :data:`budgetlab.cost.presets.TYPICAL` came from: the GPU profile with each
    (bandwidth efficiency, per-step time) pair, scored on the steady runs.

    ``progress`` (bool, None or callable) counts the stages simulated over every pair
    (:mod:`budgetlab.experiments.progress`; ``None``: a line in Jupyter or on a terminal).

    Returns
    -------
    pandas.DataFrame
        One row per pair: ``bandwidth_efficiency`` [-], ``step_overhead_s`` [s], the largest
        absolute error of each metric of :data:`BOUNDS` on the steady runs (``*_max_error``)
        [-], ``overload_right`` (every run's overload predicted as measured) and ``score``
        (the largest error relative to its bound: below 1 meets every bound), best first.
    """
    from budgetlab.cost.presets import GPU_PROFILE

    frame = runs if isinstance(runs, pd.DataFrame) else read_serving_runs(runs)
    serving = overhead or ServingOverhead.vllm()
    rows = []
    pairs = len(bandwidth_efficiencies) * len(step_overheads_s)
    reporter = progress_reporter(progress, "budgetlab preset search: stages")
    reporter.update(0, pairs * len(frame))
    for bandwidth in bandwidth_efficiencies:
        for step in step_overheads_s:
            params = {**GPU_PROFILE, "bandwidth_efficiency": bandwidth, "step_overhead_s": step}

            def preset(hw: HardwareSpec, m: ModelSpec, e: EngineConfig, p: dict[str, Any] = params) -> CalibratedCost:
                return CalibratedCost(hardware=hw, model=m, **p).for_engine(e)

            check = check_serving_runs(
                frame,
                cost=preset,
                overhead=serving,
                max_duration_s=max_duration_s,
                progress=reporter,
            )
            steady, table = check.steady, check.table
            errors = {metric: float(steady[f"{metric}_error"].abs().max()) for metric in BOUNDS}
            rows.append(
                {
                    "bandwidth_efficiency": bandwidth,
                    "step_overhead_s": step,
                    **{f"{metric}_max_error": value for metric, value in errors.items()},
                    "overload_right": bool((table.overloaded_measured == table.overloaded_predicted).all()),
                    "score": max(errors[m] / bound for m, bound in BOUNDS.items()),
                }
            )
    reporter.close()
    return pd.DataFrame(rows).sort_values("score", ignore_index=True)


def matches_typical(bandwidth_efficiency: float, step_overhead_s: float) -> bool:
    """Whether a (bandwidth efficiency, per-step time) pair is the one :data:`TYPICAL
    <budgetlab.cost.presets.TYPICAL>` ships (to 1e-9 relative)."""
    from budgetlab.cost.presets import TYPICAL

    return math.isclose(bandwidth_efficiency, TYPICAL["bandwidth_efficiency"], rel_tol=1e-9) and math.isclose(
        step_overhead_s, TYPICAL["step_overhead_s"], rel_tol=1e-9
    )
