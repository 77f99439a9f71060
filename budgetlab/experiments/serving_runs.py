"""Predicted against measured on published vLLM serving runs (``vllm_serving_h100_inference_sim.csv``).

The file (in the developers' ``../shared/data/real/``; its README gives the source and caveats)
holds one row per load stage of a real vLLM server on H100 driven by inference-perf: the
configuration (model, TP, ``max_num_batched_tokens``, ``max_num_seqs``, ``max_model_len``), the
workload (``num_unique_system_prompts`` system prompts of ``system_prompt_len`` tokens, each
shared by ``num_users_per_system_prompt`` users, a question, a fixed output length, constant
arrivals at ``requested_rate_per_s`` for ``stage_duration_s``) and the measured TTFT,
end-to-end latency and throughput.

:func:`run_requests` rebuilds a stage's workload: constant arrivals, every request at the
stage's measured mean prompt and output lengths (the per-request lengths are not published),
its first ``system_prompt_len`` tokens shared with the other requests of its system prompt
(``prefix_id``), the prompts taken round robin. :func:`check_serving_runs` simulates each stage
with one cost model and serving overhead for all of them — no per-run fitting — and compares:

* TTFT mean, end-to-end mean, and time per output token as the README says to compute it,
  ``(e2e − TTFT) / (output − 1)`` on the means (the file's own TPOT columns count tokens twice);
* overload: a stage is measured overloaded when more than 5 % of its requests failed; it is
  predicted overloaded when the simulated queue does not drain — the mean TTFT exceeds 2 s or
  the last request finishes more than 30 s after the last arrival.

The published runs are few: the error table is a check of the model, not a fit to it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from budgetlab.catalog import hardware, model
from budgetlab.cost.calibrated import CalibratedCost
from budgetlab.errors import DataFormatError
from budgetlab.experiments.progress import ProgressReporter, ProgressSpec, progress_reporter
from budgetlab.experiments.published import read_published_csv, shared_real_path
from budgetlab.serving.overhead import ServingOverhead, client_requests
from budgetlab.simulator import simulate
from budgetlab.specs import EngineConfig, HardwareSpec, ModelSpec, Request

__all__ = [
    "RUN_MODELS",
    "OVERLOAD_FAILED_FRACTION",
    "ServingRunsCheck",
    "default_runs_path",
    "read_serving_runs",
    "run_requests",
    "run_engine",
    "check_serving_runs",
    "BOUNDS",
    "preset_grid",
    "matches_typical",
]

RUN_MODELS: dict[str, str] = {"meta-llama/Llama-2-7b-hf": "llama-2-7b", "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b"}
"""Checkpoint in the file → catalog model."""

OVERLOAD_FAILED_FRACTION = 0.05
"""A stage with more failed requests than this share was overloaded [-]."""

_OVERLOAD_TTFT_S = 2.0
_OVERLOAD_DRAIN_S = 30.0

_NEEDED = (
    "model", "tp", "max_model_len", "max_num_batched_tokens", "max_num_seqs", "system_prompt_len",
    "num_unique_system_prompts", "requested_rate_per_s", "stage_duration_s", "num_requests", "num_failures",
    "prompt_len_mean", "output_len_mean", "ttft_mean_s", "e2e_mean_s", "gpu",
)  # fmt: skip


def default_runs_path() -> Path | None:
    """``vllm_serving_h100_inference_sim.csv`` in the developers' shared data, if present."""
    return shared_real_path("vllm_serving_h100_inference_sim.csv")


def read_serving_runs(path: str | os.PathLike[str]) -> pd.DataFrame:
    """The file as published, with a ``run`` column (its row number).

    Raises
    ------
    DataFormatError
        A needed column is missing (the message names it).
    """
    return read_published_csv(path, _NEEDED).assign(run=lambda frame: range(len(frame)))


def run_engine(row: pd.Series) -> EngineConfig:
    """The stage's configuration: its knobs and TP, every other field at vLLM's default."""
    return EngineConfig(
        max_num_batched_tokens=int(row["max_num_batched_tokens"]),
        max_num_seqs=int(row["max_num_seqs"]),
        max_model_len=int(row["max_model_len"]),
        tensor_parallel_size=int(row["tp"]),
    )


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
        ``run``, ``model``, ``tp``, ``rate_per_s``, measured and predicted ``ttft_mean_s``,
        ``tpot_s``, ``e2e_mean_s`` (``*_measured``, ``*_predicted``), their relative errors
        (``*_error``), ``overloaded_measured``, ``overloaded_predicted`` and ``prefix_hit_rate``.
    """

    table: pd.DataFrame

    @property
    def steady(self) -> pd.DataFrame:
        """The stages that were not overloaded."""
        return self.table[~self.table.overloaded_measured]


def _hardware_of(row: pd.Series) -> HardwareSpec:
    if not str(row["gpu"]).startswith("H100 SXM"):
        raise DataFormatError(f"GPU {row['gpu']!r} is not an H100 SXM; add its catalog row")
    return hardware("h100-sxm")


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
    if not shared:
        reporter.update(0, len(frame))
    for _, row in frame.iterrows():
        gpu, llm, engine = _hardware_of(row), model(RUN_MODELS[str(row["model"])]), run_engine(row)
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
            "tp": engine.tensor_parallel_size,
            "rate_per_s": float(row["requested_rate_per_s"]),
            "ttft_mean_s_measured": float(row["ttft_mean_s"]),
            "ttft_mean_s_predicted": ttft,
            "tpot_s_measured": measured_tpot,
            "tpot_s_predicted": tpot,
            "e2e_mean_s_measured": float(row["e2e_mean_s"]),
            "e2e_mean_s_predicted": e2e,
            "overloaded_measured": bool(
                float(row["num_failures"]) > OVERLOAD_FAILED_FRACTION * float(row["num_requests"])
            ),
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
