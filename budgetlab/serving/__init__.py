"""Serving: what a client of ``vllm serve`` measures, its benchmark files, and calibrating to them.

* :mod:`budgetlab.serving.overhead` -- :class:`ServingOverhead`, the per-request time outside the
  engine's steps, and :func:`client_requests` / :func:`client_metrics`: a simulation's latencies
  as ``vllm bench serve`` reports them;
* :mod:`budgetlab.serving.bench` -- :func:`read_vllm_bench` (``--save-result`` JSON, with or
  without ``--save-detailed``), the replayed workload, and :func:`bench_from_simulation`;
* :mod:`budgetlab.serving.calibrate` -- :func:`calibrate_serving`: fit the per-step and
  per-request overheads (or other cost parameters) to a benchmark, with standard errors and
  held-back error, then predict other budgets and caps.
"""

from __future__ import annotations

from budgetlab.serving.bench import (
    SIMULATED_LABEL,
    BenchResult,
    bench_from_simulation,
    example_bench_path,
    read_vllm_bench,
)
from budgetlab.serving.calibrate import (
    DEFAULT_SERVING_FIT,
    SERVING_FITTABLE,
    ServingCalibration,
    ServingPrediction,
    calibrate_serving,
)
from budgetlab.serving.overhead import CLIENT_COLUMNS, ServingOverhead, client_metrics, client_requests

__all__ = [
    "CLIENT_COLUMNS",
    "DEFAULT_SERVING_FIT",
    "SERVING_FITTABLE",
    "SIMULATED_LABEL",
    "BenchResult",
    "ServingCalibration",
    "ServingOverhead",
    "ServingPrediction",
    "bench_from_simulation",
    "calibrate_serving",
    "client_metrics",
    "client_requests",
    "example_bench_path",
    "read_vllm_bench",
]
