"""Fit the step cost and the serving overhead to a real ``vllm bench serve`` run, then predict.

:func:`calibrate_serving` replays a benchmark's workload (:meth:`BenchResult.workload
<budgetlab.serving.bench.BenchResult.workload>`: its requests, or for ``--max-concurrency`` the
closed loop of clients sending them) through :func:`budgetlab.simulate` and fits
chosen parameters — by default the cost model's per-step CPU time (``step_overhead_s``) and the
per-request serving time (``request_overhead_s``, :class:`~budgetlab.serving.ServingOverhead`)
— so the simulated TTFT and time per output token match the measured ones. It is bounded least
squares on relative errors, each evaluation one simulation:

* a detailed file (``--save-detailed``): the mean and the 10th to 90th percentiles of TTFT and
  of TPOT over a random training share of the requests, each residual divided by its
  statistic's bootstrap spread over those requests (a TTFT percentile of a few hundred requests
  is far noisier than the TPOT mean) (per-request residuals would not do:
  a small change in a parameter reorders the schedule and moves single requests by whole
  steps); the rest are held back and scored on their mean TTFT, TPOT and end-to-end latency;
* a summary-only file: the residuals are the published means and medians, and nothing is held
  back (the errors are in-sample).

The search is a coarse grid, then Nelder-Mead (simulated latencies are only piecewise smooth
in the parameters). Each parameter comes with a standard error from the Jacobian at the
optimum, as
:func:`budgetlab.calibrate` reports them (:func:`budgetlab.cost.fit.standard_errors`). The two
default parameters are identifiable apart: the per-request time moves TTFT and end-to-end
latency but not the time per output token, the per-step time moves all three.
:meth:`ServingCalibration.predict` then runs the fitted model on another configuration (a
different budget or cap) of the same workload.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from budgetlab._checks import number_in, random_seed
from budgetlab.cost.calibrated import CalibratedCost
from budgetlab.cost.fit import FITTABLE, Fittable, estimate_text, standard_errors
from budgetlab.display import html_table, one_line
from budgetlab.errors import CalibrationError
from budgetlab.serving.bench import BenchResult, read_vllm_bench
from budgetlab.serving.overhead import ServingOverhead, client_metrics, client_requests
from budgetlab.simulator import simulate
from budgetlab.specs import EngineConfig, Request
from budgetlab.text import fmt_latency
from budgetlab.workload.closed_loop import ClosedLoopClients

__all__ = [
    "SERVING_FITTABLE",
    "DEFAULT_SERVING_FIT",
    "MAX_FIT_ERROR",
    "CalibrationWarning",
    "ServingCalibration",
    "ServingPrediction",
    "calibrate_serving",
]

MAX_FIT_ERROR = 0.5
"""Largest relative error of a fitted mean (train or held back) :func:`calibrate_serving`
returns without a :class:`CalibrationWarning` [-]: a good fit is within a few percent."""


class CalibrationWarning(UserWarning):
    """A serving calibration whose fit is far off the measurement it was fitted to."""


SERVING_FITTABLE: dict[str, Fittable] = {
    "request_overhead_s": Fittable("s", 0.0, 1.0, 1e-2),
    **{
        name: FITTABLE[name]
        for name in ("step_overhead_s", "layer_overhead_s", "bandwidth_efficiency", "flop_efficiency")
    },
}
"""Parameters :func:`calibrate_serving` can fit: the serving overhead's, and the cost model's
(with :data:`budgetlab.cost.fit.FITTABLE`'s bounds)."""

DEFAULT_SERVING_FIT = ("step_overhead_s", "request_overhead_s")
"""What :func:`calibrate_serving` fits unless told otherwise."""


@dataclass(frozen=True)
class ServingPrediction:
    """What a client would measure on a configuration: ``vllm bench serve``'s summary, predicted.

    Attributes
    ----------
    ttft_mean_s, ttft_median_s, ttft_p99_s : float
        Time to first token [s].
    tpot_mean_s, tpot_median_s, tpot_p99_s : float
        Time per output token, per request ``(e2e − TTFT) / (output − 1)`` [s].
    e2e_mean_s, e2e_median_s, e2e_p99_s : float
        End-to-end latency [s].
    output_throughput_tokens_per_s : float
        Output tokens over the span from the first start to the last finish [tokens/s].
    max_num_batched_tokens : int
        The budget predicted for [tokens].
    max_num_seqs : int
        The cap predicted for [count].
    """

    ttft_mean_s: float
    ttft_median_s: float
    ttft_p99_s: float
    tpot_mean_s: float
    tpot_median_s: float
    tpot_p99_s: float
    e2e_mean_s: float
    e2e_median_s: float
    e2e_p99_s: float
    output_throughput_tokens_per_s: float
    max_num_batched_tokens: int
    max_num_seqs: int

    def to_dict(self) -> dict[str, float]:
        """The metrics as a plain dict (the keys of :func:`~budgetlab.serving.client_metrics`)."""
        return {
            name: float(getattr(self, name))
            for name in self.__dataclass_fields__
            if name not in ("max_num_batched_tokens", "max_num_seqs")
        }

    def _display_rows(self) -> list[tuple[str, str]]:
        rows = [
            (
                metric.upper(),
                " / ".join(fmt_latency(getattr(self, f"{metric}_{stat}_s")) for stat in ("mean", "median", "p99")),
            )
            for metric in ("ttft", "tpot", "e2e")
        ]
        return [
            ("", "mean / median / p99"),
            *rows,
            ("output throughput", f"{self.output_throughput_tokens_per_s:,.0f} tokens/s"),
        ]

    def __str__(self) -> str:
        return (
            f"budget {self.max_num_batched_tokens:,}, max_num_seqs {self.max_num_seqs:,}: "
            f"TTFT mean {fmt_latency(self.ttft_mean_s)} (p99 {fmt_latency(self.ttft_p99_s)}), "
            f"TPOT mean {fmt_latency(self.tpot_mean_s)} (p99 {fmt_latency(self.tpot_p99_s)}), "
            f"end-to-end mean {fmt_latency(self.e2e_mean_s)}, "
            f"{self.output_throughput_tokens_per_s:,.0f} output tokens/s"
        )

    def __repr__(self) -> str:
        return one_line("ServingPrediction", f"budget {self.max_num_batched_tokens:,}", self._display_rows()[1:])

    def _repr_html_(self) -> str:
        title = f"ServingPrediction: budget {self.max_num_batched_tokens:,}, max_num_seqs {self.max_num_seqs:,}"
        return html_table(title, self._display_rows())


@dataclass(frozen=True, eq=False)
class ServingCalibration:
    """What :func:`calibrate_serving` found.

    Attributes
    ----------
    cost : CalibratedCost
        The fitted cost model.
    overhead : ServingOverhead
        The fitted serving overhead.
    engine : EngineConfig
        The configuration the benchmark ran with.
    parameters : pandas.DataFrame
        ``name``, ``value``, ``stderr`` (one standard error), ``unit``, ``at_bound``.
    train_errors, holdout_errors : dict
        Relative error (simulated / measured − 1) of ``ttft_mean``, ``tpot_mean`` and
        ``e2e_mean`` on the training requests and on the held-back ones (NaN for a summary-only
        file, where nothing is held back) [fraction].
    comparison : pandas.DataFrame
        ``metric``, ``measured_s``, ``simulated_s``, ``relative_error`` for the client summary
        of every request (means, medians, p99).
    workload : list of Request, or ClosedLoopClients
        The replayed workload (:meth:`BenchResult.workload`); a closed loop's clients send each
        request the fitted ``request_overhead_s`` after their last one finished in the engine.
    """

    cost: CalibratedCost
    overhead: ServingOverhead
    engine: EngineConfig
    parameters: pd.DataFrame
    train_errors: dict[str, float]
    holdout_errors: dict[str, float]
    comparison: pd.DataFrame
    workload: Sequence[Request] | ClosedLoopClients = dataclasses.field(repr=False)

    @property
    def requests(self) -> Sequence[Request]:
        """The replayed requests (a closed loop's, in the order its clients send them)."""
        workload = self.workload
        return workload.requests if isinstance(workload, ClosedLoopClients) else workload

    def predict(
        self, *, engine: EngineConfig | None = None, requests: Sequence[Request] | ClosedLoopClients | None = None
    ) -> ServingPrediction:
        """Client metrics (:func:`~budgetlab.serving.client_metrics`) of the fitted model on
        ``engine`` (default: the benchmark's) and ``requests`` (default: the replayed workload,
        a closed loop's clients sending again the fitted overhead after each finish), as a
        :class:`ServingPrediction` (``.to_dict()`` gives the plain dict)."""
        used = engine or self.engine
        workload = requests if requests is not None else self.workload
        if isinstance(workload, ClosedLoopClients):
            workload = dataclasses.replace(workload, think_time_s=self.overhead.request_overhead_s)
        else:
            workload = list(workload)
        run = simulate(workload, engine=used, cost=self.cost)
        metrics = client_metrics(client_requests(run, self.overhead))
        return ServingPrediction(
            **metrics, max_num_batched_tokens=used.max_num_batched_tokens, max_num_seqs=used.max_num_seqs
        )

    def _error_rows(self) -> list[tuple[str, str]]:
        """``(split, "ttft_mean +1.2%, ...")`` for the training and held-back errors that exist."""
        return [
            (split, ", ".join(f"{k} {v:+.1%}" for k, v in errors.items()))
            for split, errors in (("train", self.train_errors), ("held back", self.holdout_errors))
            if not all(math.isnan(v) for v in errors.values())
        ]

    def _display_rows(self) -> list[tuple[str, str]]:
        rows = [
            (str(r.name), estimate_text(r) + (" (at bound)" if r.at_bound else ""))
            for r in self.parameters.itertuples(index=False)
        ]
        return rows + self._error_rows()

    def __repr__(self) -> str:
        return one_line("ServingCalibration", f"{len(self.requests):,} requests", self._display_rows())

    def _repr_html_(self) -> str:
        return html_table("ServingCalibration", self._display_rows())

    def summary(self) -> str:
        """Each parameter ± its standard error, and the errors, in a few lines."""
        lines = [
            f"{r.name} = {estimate_text(r)}" + ("  (at bound)" if r.at_bound else "")
            for r in self.parameters.itertuples(index=False)
        ]
        lines += [f"{split}: {text}" for split, text in self._error_rows()]
        return "\n".join(lines)

    def numbers(self) -> dict[str, Any]:
        """Plain values for a report: ``parameters`` (name → value, stderr, at_bound),
        ``train_errors``, ``holdout_errors`` and ``comparison`` (metric → measured, simulated)."""
        return {
            "parameters": {
                str(r.name): {"value": float(r.value), "stderr": float(r.stderr), "at_bound": bool(r.at_bound)}
                for r in self.parameters.itertuples(index=False)
            },
            "train_errors": dict(self.train_errors),
            "holdout_errors": dict(self.holdout_errors),
            "comparison": {
                str(r.metric): {"measured_s": float(r.measured_s), "simulated_s": float(r.simulated_s)}
                for r in self.comparison.itertuples(index=False)
            },
        }


PROFILE_QUANTILES = (10, 25, 50, 75, 90)
"""Percentiles of TTFT and TPOT (with the mean) a detailed fit matches [%]."""


def _profile(values: np.ndarray) -> np.ndarray:
    """The mean and :data:`PROFILE_QUANTILES` of the finite ``values``."""
    finite = values[np.isfinite(values)]
    return np.concatenate([[finite.mean()], np.percentile(finite, PROFILE_QUANTILES)])


_GRID_FACTORS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
"""Multiples of each parameter's typical scale the coarse search tries (clipped to the bounds)."""


def _minimize(
    residuals: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    cheap: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimize the sum of squared residuals over a box; return the point, the Jacobian there and
    the residuals there.

    Simulated latencies are only piecewise smooth in the cost parameters (a small change can
    reorder the schedule), so a gradient method alone stops in a local dip. The ``cheap``
    parameters (the per-request overhead: no new simulation) are profiled out by an inner
    search at every point; the others get a coarse grid (:data:`_GRID_FACTORS` of their scale,
    the start included, at most 60 points), then Nelder-Mead from the best point. The Jacobian
    is central differences with a step of 5 % of the value (at least 0.01 of the scale).
    """
    from scipy.optimize import minimize  # scipy costs 0.4 s to import

    costly = ~cheap

    def sse(x: np.ndarray) -> float:
        return float(np.sum(residuals(x) ** 2))

    def inner(outer: np.ndarray) -> np.ndarray:
        x = x0.copy()
        x[costly] = np.clip(outer, lower[costly], upper[costly])
        if not cheap.any():
            return x

        def partial(free: np.ndarray) -> float:
            trial = x.copy()
            trial[cheap] = np.clip(free, lower[cheap], upper[cheap])
            return sse(trial)

        axes = [
            np.unique(np.clip(np.array([*_GRID_FACTORS, v]), lo, hi))
            for v, lo, hi in zip(x0[cheap], lower[cheap], upper[cheap], strict=True)
        ]
        grid = np.array(np.meshgrid(*axes, indexing="ij")).reshape(int(cheap.sum()), -1).T
        start = min((np.asarray(g, dtype=float) for g in grid), key=partial)
        found = minimize(
            partial,
            start,
            method="Nelder-Mead",
            bounds=list(zip(lower[cheap], upper[cheap], strict=True)),
            options={"xatol": 1e-4, "fatol": 1e-9, "maxfev": 200},
        )
        x[cheap] = np.clip(found.x, lower[cheap], upper[cheap])
        return x

    if costly.any():
        axes = [
            np.unique(np.clip(np.array([*_GRID_FACTORS, v]), lo, hi))
            for v, lo, hi in zip(x0[costly], lower[costly], upper[costly], strict=True)
        ]
        grid = np.array(np.meshgrid(*axes, indexing="ij")).reshape(int(costly.sum()), -1).T
        if len(grid) > 60:
            grid = grid[np.random.default_rng(0).choice(len(grid), 60, replace=False)]
        start = min((np.asarray(g, dtype=float) for g in grid), key=lambda g: sse(inner(g)))
        found = minimize(
            lambda g: sse(inner(g)),
            start,
            method="Nelder-Mead",
            bounds=list(zip(lower[costly], upper[costly], strict=True)),
            options={"xatol": 1e-3, "fatol": 1e-8, "maxfev": 60 * int(costly.sum())},
        )
        best = inner(found.x)
    else:
        best = inner(x0[costly])
    fun = residuals(best)
    step = np.maximum(0.05 * np.abs(best), 0.01)
    columns = []
    for i in range(len(best)):
        up, down = best.copy(), best.copy()
        up[i] = min(best[i] + step[i], upper[i])
        down[i] = max(best[i] - step[i], lower[i])
        columns.append((residuals(up) - residuals(down)) / (up[i] - down[i]) if up[i] > down[i] else np.zeros_like(fun))
    return best, np.column_stack(columns), fun


def _bootstrap_spread(values: np.ndarray, rng: np.random.Generator, *, rounds: int = 200) -> np.ndarray:
    """Relative standard deviation of each :func:`_profile` statistic over bootstrap resamples
    of the measured requests (at least 0.2 %): each residual is divided by it, so a noisy
    statistic (a TTFT percentile of few requests) weighs less than a steady one (TPOT)."""
    finite = values[np.isfinite(values)]
    draws = np.array([_profile(rng.choice(finite, finite.size)) for _ in range(rounds)])
    return np.maximum(draws.std(axis=0) / _profile(finite), 2e-3)


def _mean_errors(simulated: pd.DataFrame, measured: pd.DataFrame) -> dict[str, float]:
    out = {}
    for metric in ("ttft", "tpot", "e2e"):
        sim, meas = simulated[f"{metric}_s"].mean(), measured[f"{metric}_s"].mean()
        out[f"{metric}_mean"] = float(sim / meas - 1.0) if meas > 0 else math.nan
    return out


def calibrate_serving(
    bench: BenchResult | str | Any,
    *,
    cost: CalibratedCost,
    engine: EngineConfig,
    fit: Sequence[str] = DEFAULT_SERVING_FIT,
    overhead: ServingOverhead | None = None,
    holdout_fraction: float = 0.25,
    seed: int = 0,
) -> ServingCalibration:
    """Fit ``fit`` so the simulated client latencies match the benchmark (module docstring).

    Parameters
    ----------
    bench : BenchResult, path or dict
        The run (:func:`~budgetlab.serving.read_vllm_bench` reads a path or dict).
    cost : CalibratedCost
        The starting cost model; its hardware, model and deployment are kept (build it with
        ``engine=`` so it matches the engine).
    engine : EngineConfig
        The configuration the server ran with (budget, cap, KV pool, deployment).
    fit : sequence of str
        Names from :data:`SERVING_FITTABLE`.
    overhead : ServingOverhead, optional
        The starting serving overhead (default none).
    holdout_fraction : float
        Share of the requests of a detailed file held back from the fit, in [0, 1) [-].
    seed : int
        Seed of the train/holdout split and of a summary-only replay's arrivals.

    Raises
    ------
    CalibrationError
        An unknown or repeated parameter, or fewer requests than parameters.
    """
    result = bench if isinstance(bench, BenchResult) else read_vllm_bench(bench)
    names = tuple(fit)
    unknown = [n for n in names if n not in SERVING_FITTABLE]
    if unknown or len(set(names)) != len(names) or not names:
        raise CalibrationError(
            f"fit must name distinct parameters from {', '.join(SERVING_FITTABLE)}; got {list(names)}"
        )
    holdout = number_in(
        "holdout_fraction", holdout_fraction, low=0.0, high=1.0, high_open=True, what="a fraction in [0, 1)"
    )
    rng = np.random.default_rng(random_seed("seed", seed))
    workload = result.workload(seed=seed)
    # a closed loop's clients send again once the response is theirs: the per-request overhead
    # delays the next send too, so every value of it is a new run
    closed = isinstance(workload, ClosedLoopClients)
    start_overhead = overhead or ServingOverhead()
    measured = result.per_request
    if measured is not None:
        held = rng.random(len(measured)) < holdout if holdout > 0 else np.zeros(len(measured), bool)
        if held.all() or (~held).sum() < len(names) + 1:
            raise CalibrationError(f"{result.source}: too few requests to fit {len(names)} parameters")
        train = measured[~held]
        target = {column: _profile(train[column].to_numpy()) for column in ("ttft_s", "tpot_s")}
        spread = {column: _bootstrap_spread(train[column].to_numpy(), rng) for column in ("ttft_s", "tpot_s")}
    scales = np.array([SERVING_FITTABLE[n].scale for n in names])
    lower = np.array([SERVING_FITTABLE[n].low for n in names]) / scales
    upper = np.array([SERVING_FITTABLE[n].high for n in names]) / scales
    current = {**dataclasses.asdict(start_overhead), **{n: getattr(cost, n) for n in names if hasattr(cost, n)}}
    x0 = np.array([float(current.get(n, 0.0)) for n in names]) / scales
    span = upper - lower
    x0 = np.clip(x0, lower + 1e-3 * span, upper - 1e-3 * span)

    def build(x: np.ndarray) -> tuple[CalibratedCost, ServingOverhead]:
        values = {n: float(v) for n, v in zip(names, x * scales, strict=True)}
        request_overhead_s = values.pop("request_overhead_s", start_overhead.request_overhead_s)
        return cost.with_(**values) if values else cost, dataclasses.replace(
            start_overhead, request_overhead_s=request_overhead_s
        )

    cache: dict[bytes, tuple[pd.DataFrame, np.ndarray, np.ndarray]] = {}
    cheap = np.array([n == "request_overhead_s" and not closed for n in names])

    def engine_side(x: np.ndarray) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
        """The simulation at ``x`` without the per-request overhead (which needs no new run),
        and the training requests' engine TTFT and TPOT."""
        key = np.asarray(x, dtype=float)[~cheap].tobytes()
        if key not in cache:
            lag_only = dataclasses.replace(start_overhead, request_overhead_s=0.0)  # the output lag needs the steps
            x_cost, x_overhead = build(x)
            if isinstance(workload, ClosedLoopClients):
                run = simulate(
                    dataclasses.replace(workload, think_time_s=x_overhead.request_overhead_s),
                    engine=engine,
                    cost=x_cost,
                )
            else:
                run = simulate(workload, engine=engine, cost=x_cost)
            frame = client_requests(run, lag_only).set_index("request_id")
            rows = frame.loc[train.request_id.to_numpy()] if measured is not None else frame
            cache[key] = (frame, rows.ttft_s.to_numpy(), rows.tpot_s.to_numpy())
        return cache[key]

    def client(x: np.ndarray) -> pd.DataFrame:
        frame = engine_side(x)[0]
        extra = build(x)[1].request_overhead_s
        return frame.assign(ttft_s=frame.ttft_s + extra, e2e_s=frame.e2e_s + extra)

    def residuals(x: np.ndarray) -> np.ndarray:
        if measured is not None:
            _, ttft, tpot = engine_side(x)
            extra = build(x)[1].request_overhead_s
            return np.concatenate(
                [
                    (_profile(ttft + extra) / target["ttft_s"] - 1.0) / spread["ttft_s"],
                    (_profile(tpot) / target["tpot_s"] - 1.0) / spread["tpot_s"],
                ]
            )
        sim = client(x)
        metrics = client_metrics(sim.reset_index())
        keys = [
            k
            for k in ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "ttft_median_s", "tpot_median_s")
            if k in result.summary_s
        ]
        return np.array([metrics[k] / result.summary_s[k] - 1.0 for k in keys])

    best, jac, fun = _minimize(residuals, x0, lower, upper, cheap)
    fitted_cost, fitted_overhead = build(best)
    values = best * scales
    stderr = standard_errors(jac, fun, len(fun)) * scales
    tol = 1e-3 * span * scales
    parameters = pd.DataFrame(
        {
            "name": list(names),
            "value": values,
            "stderr": stderr,
            "unit": [SERVING_FITTABLE[n].unit for n in names],
            "at_bound": (values <= lower * scales + tol) | (values >= upper * scales - tol),
        }
    )
    sim = client(best).reset_index()
    nan_errors = {f"{m}_mean": math.nan for m in ("ttft", "tpot", "e2e")}
    if measured is not None:
        by_id = sim.set_index("request_id")
        train_errors = _mean_errors(by_id.loc[train.request_id.to_numpy()], train)
        held_rows = measured[held]
        holdout_errors = (
            _mean_errors(by_id.loc[held_rows.request_id.to_numpy()], held_rows) if len(held_rows) else nan_errors
        )
        published = client_metrics(measured)
    else:
        metrics = client_metrics(sim)
        train_errors = {
            f"{m}_mean": metrics[f"{m}_mean_s"] / result.summary_s[f"{m}_mean_s"] - 1.0
            if f"{m}_mean_s" in result.summary_s
            else math.nan
            for m in ("ttft", "tpot", "e2e")
        }
        holdout_errors = nan_errors
        published = dict(result.summary_s)
    simulated = client_metrics(sim)
    comparison = pd.DataFrame(
        [
            {
                "metric": key,
                "measured_s": published[key],
                "simulated_s": simulated[key],
                "relative_error": simulated[key] / published[key] - 1.0 if published[key] else math.nan,
            }
            for key in simulated
            if key in published and key.endswith("_s")
        ]
    )
    _warn_if_far_off(result.source, train_errors, holdout_errors)
    return ServingCalibration(
        cost=fitted_cost,
        overhead=fitted_overhead,
        engine=engine,
        parameters=parameters,
        train_errors=train_errors,
        holdout_errors=holdout_errors,
        comparison=comparison,
        workload=workload,
    )


def _warn_if_far_off(source: str, train_errors: dict[str, float], holdout_errors: dict[str, float]) -> None:
    """:class:`CalibrationWarning` when a fitted mean is more than :data:`MAX_FIT_ERROR` off."""
    errors = [
        (abs(value), split, metric, value)
        for split, by_metric in (("train", train_errors), ("held back", holdout_errors))
        for metric, value in by_metric.items()
        if math.isfinite(value)
    ]
    worst = max(errors, default=None)
    if worst is not None and worst[0] > MAX_FIT_ERROR:
        _, split, metric, value = worst
        warnings.warn(
            f"{source}: the fitted model is {value:+.0%} off the measured {metric} ({split} requests), more than "
            f"{MAX_FIT_ERROR:.0%}: the simulation does not describe this run. Check that engine= is the "
            "configuration the server ran with and that the file is an open-loop run of one model; do not use "
            "this fit for predictions",
            CalibrationWarning,
            stacklevel=3,
        )
