"""Accuracy against real serving runs, stated the way BLIS states it (issue 22, item 5).

BLIS (the inference-sim project's simulator) publishes the median and the 90th percentile of
the absolute relative error over held-out real runs, per metric. :func:`accuracy_summary` gives
the same figures for a :class:`~budgetlab.experiments.serving_runs.ServingRunsCheck`: for TTFT
mean, time per output token and end-to-end mean, over the steady runs (the measured overloaded
ones have no steady-state latency to compare), the median, P90 and largest ``|predicted /
measured − 1|``, with how many runs are within issue 12's bounds
(:data:`~budgetlab.experiments.serving_runs.BOUNDS`); and how many runs of all are predicted
overloaded, or not, as they were measured.

P90 is NumPy's default percentile (linear interpolation between order statistics): over 10
steady runs it lies between the 9th and the 10th smallest error, so it is close to the largest.

Which real runs
---------------
Every real serving run in the developers' real-engine data
(:func:`~budgetlab.experiments.published.real_data_dir`) that the check can rebuild
faithfully: the 12 stages of ``vllm_serving_h100_inference_sim.csv`` (Llama-2-7B TP1 and
Mixtral-8x7B TP2 on H100; 10 steady, 2 overloaded). :func:`real_runs_accuracy` runs that check.

Not included: the vLLM 0.6.0 online rows of ``sglang_bench_vllm060.csv`` (Llama 3.1 8B on one
A100, 70B on 4× H100, 4 and 8 requests/s). They cannot be rebuilt honestly: the workload is
ShareGPT sampled by ``sglang.bench_serving``, whose per-request prompt and output lengths are not
published (nor their means), so the simulated requests would be guessed; the figures are medians,
where the check compares means; and vLLM 0.6.0 ran the old engine with
``--num-scheduler-steps 10`` (ten decode steps per scheduling pass, tokens streamed in ten-token
chunks, new prompts admitted only between passes), an engine budgetlab does not model (it
models vLLM V1's scheduler), with its token budget unstated. An error against those rows would
measure the guesses, not the model.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from budgetlab.experiments.progress import ProgressSpec
from budgetlab.experiments.serving_runs import BOUNDS, ServingRunsCheck, check_serving_runs, default_runs_path

__all__ = ["METRICS", "accuracy_summary", "error_row", "format_accuracy", "real_runs_accuracy"]

METRICS: dict[str, str] = {"ttft_mean_s": "TTFT mean", "tpot_s": "per-token time", "e2e_mean_s": "E2E mean"}
"""The compared metrics (``ServingRunsCheck.table``'s ``<metric>_error`` columns) and their labels."""

_COLUMNS = ["metric", "label", "runs", "median_abs_error", "p90_abs_error", "max_abs_error", "bound", "within"]


def accuracy_summary(check: ServingRunsCheck | pd.DataFrame) -> pd.DataFrame:
    """Median and P90 absolute relative error per metric, and the overload agreement.

    Parameters
    ----------
    check : ServingRunsCheck or pandas.DataFrame
        A check, or its ``table`` (the ``<metric>_error``, ``overloaded_measured`` and
        ``overloaded_predicted`` columns are read).

    Returns
    -------
    pandas.DataFrame
        Indexed by ``metric``: one row per metric of :data:`METRICS` and an ``overloaded`` row.
        Columns: ``label``; ``runs`` (the steady runs scored; every run for ``overloaded``);
        ``median_abs_error``, ``p90_abs_error``, ``max_abs_error`` [-] (fractions: 0.1 is
        10 %; NaN for ``overloaded`` and when no run is steady); ``bound`` [-] (issue 12's
        largest allowed error; NaN for ``overloaded``); ``within`` (runs within the bound; for
        ``overloaded``, runs predicted overloaded or not as measured).

    Examples
    --------
    >>> table = pd.DataFrame({"ttft_mean_s_error": [0.1, -0.3], "tpot_s_error": [0.0, 0.2],
    ...     "e2e_mean_s_error": [-0.05, 0.05], "overloaded_measured": [False, False],
    ...     "overloaded_predicted": [False, True]})
    >>> summary = accuracy_summary(table)
    >>> float(summary.loc["ttft_mean_s", "median_abs_error"]), int(summary.loc["ttft_mean_s", "within"])
    (0.2, 1)
    >>> int(summary.loc["overloaded", "within"]), int(summary.loc["overloaded", "runs"])
    (1, 2)
    """
    table = check.table if isinstance(check, ServingRunsCheck) else check
    steady = table[~table.overloaded_measured.astype(bool)]
    rows: list[dict[str, object]] = []
    for metric, label in METRICS.items():
        rows.append(error_row(metric, label, steady[f"{metric}_error"].to_numpy(dtype=float), BOUNDS[metric]))
    agree = table.overloaded_measured.astype(bool) == table.overloaded_predicted.astype(bool)
    rows.append(
        {
            "metric": "overloaded",
            "label": "overload predicted as measured",
            "runs": len(table),
            "median_abs_error": math.nan,
            "p90_abs_error": math.nan,
            "max_abs_error": math.nan,
            "bound": math.nan,
            "within": int(agree.sum()),
        }
    )
    return pd.DataFrame(rows, columns=_COLUMNS).set_index("metric")


def error_row(metric: str, label: str, errors: np.ndarray, bound: float) -> dict[str, object]:
    """One metric's row of an accuracy table: how many runs (``errors``: ``predicted / measured
    − 1`` per run, NaN where a run has no measurement, left out), the median, P90 and largest
    absolute error, the ``bound`` and how many runs are within it.

    Examples
    --------
    >>> row = error_row("tpot_s", "TPOT", np.array([0.1, -0.3, np.nan]), 0.15)
    >>> row["runs"], row["median_abs_error"], row["within"]
    (2, 0.2, 1)
    """
    values = np.abs(np.asarray(errors, dtype=float))
    values = values[~np.isnan(values)]
    some = values.size > 0
    return {
        "metric": metric,
        "label": label,
        "runs": int(values.size),
        "median_abs_error": float(np.median(values)) if some else math.nan,
        "p90_abs_error": float(np.percentile(values, 90)) if some else math.nan,
        "max_abs_error": float(values.max()) if some else math.nan,
        "bound": bound,
        "within": int((values <= bound).sum()),
    }


def format_accuracy(summary: pd.DataFrame) -> str:
    """:func:`accuracy_summary` as text lines (``make bench``, the tests' ``-s`` output).

    Examples
    --------
    >>> table = pd.DataFrame({"ttft_mean_s_error": [0.1], "tpot_s_error": [0.0],
    ...     "e2e_mean_s_error": [0.2], "overloaded_measured": [False], "overloaded_predicted": [False]})
    >>> print(format_accuracy(accuracy_summary(table)).splitlines()[0])
    TTFT mean       over 1 steady runs: median 10.0 %, P90 10.0 %, largest 10.0 %; 1/1 within 25 %
    """
    lines = []
    for metric, row in summary.iterrows():
        if metric == "overloaded":
            lines.append(f"{row.label}: {row.within}/{row.runs} runs")
            continue
        lines.append(
            f"{row.label:15s} over {row.runs} steady runs: median {row.median_abs_error:.1%}, "
            f"P90 {row.p90_abs_error:.1%}, largest {row.max_abs_error:.1%}; "
            f"{row.within}/{row.runs} within {row.bound:.0%}".replace("%", " %")
        )
    return "\n".join(lines)


def real_runs_accuracy(
    *, max_duration_s: float | None = 60.0, progress: ProgressSpec = None
) -> tuple[ServingRunsCheck, pd.DataFrame] | None:
    """The check over every real serving run in the developers' real-engine data (module
    docstring), and its :func:`accuracy_summary`; ``None`` where that data is absent (a user's
    clone or an installed wheel without ``BUDGETLAB_REAL_DATA``).

    Parameters
    ----------
    max_duration_s : float or None
        Simulated seconds of each stage (:func:`check_serving_runs`) [s].
    progress : bool, None or callable
        :mod:`budgetlab.experiments.progress`.
    """
    path = default_runs_path()
    if path is None:
        return None
    check = check_serving_runs(path, max_duration_s=max_duration_s, progress=progress)
    return check, accuracy_summary(check)
