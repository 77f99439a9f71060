"""Fit the calibrated step cost to measured step times, and score any cost model on them.

The input is a measured-step table (one step per row; columns in
:mod:`budgetlab.cost.measurements` and ``data/measured/README.md``).

:func:`calibrate` fits chosen parameters of a :class:`~budgetlab.cost.CalibratedCost`
by bounded least squares on the relative error (``scipy.optimize.least_squares``), reports each
parameter with a standard error from the Jacobian at the optimum (``cov = s² (JᵀJ)⁻¹`` with
``s² = Σ r² / (rows − parameters)``), and scores the fit on the rows it used and on rows held
back at random. :func:`predict_step_ms` evaluates any cost model (anything with
``batch_time_s``) on every row; :func:`residuals` and :func:`residual_summary` compare several
models on the same rows. scipy is imported only when a fit runs (it costs 0.4 s).

Identifiability
---------------
``step_overhead_s`` and ``layer_overhead_s`` both add a constant to every step of one model
(``step + layers × layer``), so a table for one model cannot tell them apart; fitting both is
refused. The default fits the per-step overhead and keeps the per-layer overhead at its
starting value (0 unless ``start`` says otherwise). ``bandwidth_efficiency`` needs rows below
the knee (few tokens, or decodes), ``flop_efficiency`` rows above it, and ``knee_overlap_loss``
rows near it (a few hundred tokens); a parameter the rows do not constrain gets an infinite
standard error.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from budgetlab._checks import number_in
from budgetlab.catalog import resolve_hardware, resolve_model
from budgetlab.cost.calibrated import CalibratedCost
from budgetlab.cost.measurements import TOKEN_COLUMNS, measured_batches, read_measurements
from budgetlab.display import html_table, one_line
from budgetlab.errors import CalibrationError  # importable from here too
from budgetlab.specs import Batch, HardwareSpec, ModelSpec

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

    from budgetlab.cost.protocol import CostModel

__all__ = [
    "CalibrationError",
    "CalibrationResult",
    "calibrate",
    "predict_step_ms",
    "residuals",
    "residual_summary",
    "Fittable",
    "FITTABLE",
    "DEFAULT_FIT",
    "TILE_CANDIDATES",
    "standard_errors",
    "estimate_text",
]


class Fittable(NamedTuple):
    """How :func:`calibrate` treats one fittable parameter of :class:`CalibratedCost`.

    Attributes
    ----------
    unit : str
        Its unit, as the parameter table reports it (``"s"`` or ``"fraction"``).
    low, high : float
        The bounds of the fit, in that unit.
    scale : float
        A typical magnitude, in that unit: the optimizer works on ``value / scale`` so every
        parameter moves on a scale near 1.
    """

    unit: str
    low: float
    high: float
    scale: float


#: Parameters :func:`calibrate` can fit, by name (read-only).
FITTABLE: Mapping[str, Fittable] = MappingProxyType(
    {
        "step_overhead_s": Fittable(unit="s", low=0.0, high=1.0, scale=1e-3),
        "layer_overhead_s": Fittable(unit="s", low=0.0, high=0.1, scale=1e-5),
        "bandwidth_efficiency": Fittable(unit="fraction", low=1e-3, high=1.0, scale=1.0),
        "flop_efficiency": Fittable(unit="fraction", low=1e-3, high=1.0, scale=1.0),
        "knee_overlap_loss": Fittable(unit="fraction", low=0.0, high=1.0, scale=1.0),
    }
)
#: What :func:`calibrate` fits by default: every fittable parameter but ``layer_overhead_s``.
DEFAULT_FIT = ("step_overhead_s", "bandwidth_efficiency", "flop_efficiency", "knee_overlap_loss")
#: GEMM tile sizes ``calibrate(fit_tile=True)`` tries, besides no tile quantization [tokens].
TILE_CANDIDATES = (16, 32, 64, 128, 256)


def estimate_text(row: Any, *, digits: int = 4) -> str:
    """One fitted parameter as ``value ± stderr unit`` (a row of a fit's ``parameters`` table),
    the way every fit summary and table shows it."""
    return f"{row.value:.{digits}g} ± {row.stderr:.2g} {row.unit}"


@dataclass(frozen=True)
class CalibrationResult:
    """What :func:`calibrate` found.

    Attributes
    ----------
    cost : CalibratedCost
        The fitted cost model (fixed parameters at their starting values).
    parameters : pandas.DataFrame
        One row per fitted parameter: ``name``, ``value``, ``stderr`` (one standard error; NaN
        when rows equal parameters, inf when the rows do not constrain it), ``unit`` and
        ``at_bound`` (the optimum sits on a bound, so the standard error understates it).
    train_mape, train_max_error : float
        Mean and largest absolute relative error on the rows the fit used [fraction].
    holdout_mape, holdout_max_error : float
        The same on the held-back rows, which the fit never saw [fraction]; NaN when no row
        was held back.
    table : pandas.DataFrame
        The input rows plus ``predicted_ms``, ``residual_ms`` (predicted − measured),
        ``relative_error`` (residual / measured) and ``split`` (``"train"`` or ``"holdout"``).
    """

    cost: CalibratedCost
    parameters: pd.DataFrame
    train_mape: float
    train_max_error: float
    holdout_mape: float
    holdout_max_error: float
    table: pd.DataFrame

    @property
    def num_train(self) -> int:
        """Rows the fit used [count]."""
        return int((self.table["split"] == "train").sum())

    @property
    def num_holdout(self) -> int:
        """Rows held back [count]."""
        return int((self.table["split"] == "holdout").sum())

    def _display_rows(self) -> list[tuple[str, str]]:
        rows = [
            (str(row.name), estimate_text(row) + (" (at bound)" if row.at_bound else ""))
            for row in self.parameters.itertuples(index=False)
        ]
        rows.append(("train", f"{self.num_train} rows, MAPE {self.train_mape:.1%}, max {self.train_max_error:.1%}"))
        if self.num_holdout:
            rows.append(
                (
                    "held back",
                    f"{self.num_holdout} rows, MAPE {self.holdout_mape:.1%}, max {self.holdout_max_error:.1%}",
                )
            )
        return rows

    def __repr__(self) -> str:
        return one_line("CalibrationResult", f"{len(self.parameters)} parameters", self._display_rows())

    def _repr_html_(self) -> str:
        return html_table("CalibrationResult", self._display_rows())

    def summary(self) -> str:
        """A few lines for a notebook: each parameter ± its standard error, and the errors."""
        lines = []
        for row in self.parameters.itertuples(index=False):
            flag = "  (at bound)" if row.at_bound else ""
            lines.append(f"{row.name} = {estimate_text(row, digits=6)}{flag}")
        lines.append(f"train ({self.num_train} rows): MAPE {self.train_mape:.1%}, max {self.train_max_error:.1%}")
        if self.num_holdout:
            caution = "; too few rows for more than a rough check" if self.num_holdout < 5 else ""
            lines.append(
                f"held back ({self.num_holdout} rows, not fitted{caution}): "
                f"MAPE {self.holdout_mape:.1%}, max {self.holdout_max_error:.1%}"
            )
        else:
            lines.append("no rows held back: the errors above are in-sample only")
        return "\n".join(lines)

    def numbers(self) -> dict[str, Any]:
        """The fit's key numbers as plain Python values, for a report's results JSON.

        Returns
        -------
        dict
            ``parameters`` maps each fitted name to ``{"value", "stderr", "relative_stderr",
            "at_bound"}`` in the parameter's unit (SI: [s] or [fraction]; ``relative_stderr`` =
            stderr / |value|, infinite at a value of 0); then ``train_mape``,
            ``train_max_error``, ``holdout_mape``, ``holdout_max_error`` [fraction] and
            ``num_train``, ``num_holdout`` [count].
        """
        parameters: dict[str, dict[str, float | bool]] = {}
        for row in self.parameters.itertuples(index=False):
            value, stderr = float(row.value), float(row.stderr)
            relative = stderr / abs(value) if value != 0 else math.inf
            parameters[str(row.name)] = {
                "value": value,
                "stderr": stderr,
                "relative_stderr": relative,
                "at_bound": bool(row.at_bound),
            }
        return {
            "parameters": parameters,
            "train_mape": self.train_mape,
            "train_max_error": self.train_max_error,
            "holdout_mape": self.holdout_mape,
            "holdout_max_error": self.holdout_max_error,
            "num_train": self.num_train,
            "num_holdout": self.num_holdout,
        }


def predict_step_ms(cost: CostModel, table: str | os.PathLike[str] | pd.DataFrame) -> np.ndarray:
    """Predicted time of every row's step [ms], from any cost model.

    Each row becomes a :class:`~budgetlab.specs.Batch`: one prefill chunk of
    ``num_prefill_tokens`` after ``context_tokens`` cached tokens, and ``num_decode_tokens``
    decodes each with ``context_tokens`` of context.

    Parameters
    ----------
    cost : CostModel
        ``IdealCost``, ``CalibratedCost``, ``ConstantCost`` or anything with ``batch_time_s``.
    table : path or pandas.DataFrame
        A measured-step table (see the module docstring); ``step_time_ms`` must be present and
        valid, as :func:`read_measurements` checks.
    """
    frame = read_measurements(table)
    return _predict_ms(cost, measured_batches(frame))


def _predict_ms(cost: CostModel, batches: Sequence[Batch]) -> np.ndarray:
    return np.array([cost.batch_time_s(b) for b in batches], dtype=float) * 1e3


def residuals(table: str | os.PathLike[str] | pd.DataFrame, costs: Mapping[str, CostModel]) -> pd.DataFrame:
    """Each cost model's error on every measured row.

    Parameters
    ----------
    table : path or pandas.DataFrame
        Measured steps (checked by :func:`read_measurements`); a
        :class:`CalibrationResult`'s ``table`` keeps its ``split`` column.
    costs : mapping of str to CostModel
        Name → model, in the order the rows should come.

    Returns
    -------
    pandas.DataFrame
        One row per measured row × model (models in ``costs`` order, then rows in table
        order): the token columns, ``step_time_ms`` and ``split`` (when the table has it), plus
        ``cost_model``, ``predicted_ms``, ``residual_ms`` (predicted − measured [ms]) and
        ``relative_error`` (residual / measured [fraction]).
    """
    frame = read_measurements(table)
    keep = [*TOKEN_COLUMNS, "step_time_ms", *(["split"] if "split" in frame.columns else [])]
    rows = frame[keep]
    batches = measured_batches(frame)
    measured = frame["step_time_ms"].to_numpy(dtype=float)
    parts = []
    for name, cost in costs.items():
        predicted = _predict_ms(cost, batches)
        part = rows.copy()
        part["cost_model"] = name
        part["predicted_ms"] = predicted
        part["residual_ms"] = predicted - measured
        part["relative_error"] = (predicted - measured) / measured
        parts.append(part)
    columns = [*keep, "cost_model", "predicted_ms", "residual_ms", "relative_error"]
    if not parts:
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)


def residual_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per cost model of :func:`residuals`: ``mape`` and ``max_error`` (absolute relative
    errors) over all rows, and ``mean_error`` (signed: > 0 means the model is too slow)
    [fraction]; indexed by ``cost_model`` in first-seen order."""
    grouped = frame.assign(abs_error=frame.relative_error.abs()).groupby("cost_model", sort=False)
    return pd.DataFrame(
        {
            "mape": grouped.abs_error.mean(),
            "max_error": grouped.abs_error.max(),
            "mean_error": grouped.relative_error.mean(),
        }
    )


# --------------------------------------------------------------------------------------------
# The fit
# --------------------------------------------------------------------------------------------


def _check_fit_names(fit: Sequence[str]) -> tuple[str, ...]:
    if isinstance(fit, str):
        fit = (fit,)
    names = tuple(fit)
    unknown = [n for n in names if n not in FITTABLE]
    if unknown:
        raise CalibrationError(
            f"cannot fit {', '.join(map(repr, unknown))}; fittable parameters are "
            f"{', '.join(FITTABLE)} (and the tile size with fit_tile=True)"
        )
    if len(set(names)) != len(names):
        raise CalibrationError(f"fit names a parameter twice: {names}")
    if "step_overhead_s" in names and "layer_overhead_s" in names:
        raise CalibrationError(
            "step_overhead_s and layer_overhead_s are perfectly collinear for one model (both "
            "add the same constant to every step: step + layers × layer), so they cannot both "
            "be fitted; fit one and fix the other through start="
        )
    return names


def calibrate(
    table: str | os.PathLike[str] | pd.DataFrame,
    *,
    hardware: HardwareSpec | str,
    model: ModelSpec | str,
    fit: Sequence[str] = DEFAULT_FIT,
    start: CalibratedCost | None = None,
    tp: int = 1,
    attention: bool = True,
    kv_reads: bool = True,
    moe: bool = True,
    tile_tokens: int | None = None,
    fit_tile: bool = False,
    holdout_fraction: float = 0.25,
    seed: int = 0,
) -> CalibrationResult:
    """Fit a :class:`CalibratedCost` to measured step times.

    Parameters
    ----------
    table : path or pandas.DataFrame
        Measured steps (columns in the module docstring and ``data/measured/README.md``).
    hardware : HardwareSpec or str
        The GPU the measurements ran on, or its catalog slug (``"h100-sxm"``).
    model : ModelSpec or str
        The model measured, or its catalog slug (``"llama-2-7b"``).
    fit : sequence of str
        Parameters to fit, from :data:`FITTABLE`. Default: per-step overhead, both efficiencies
        and the knee overlap loss. The rest keep their values in ``start``.
    start : CalibratedCost or None
        Starting point and fixed values; default ``CalibratedCost.typical(hardware, model,
        tp=tp)`` with ``layer_overhead_s`` set to 0 (the fitted per-step overhead absorbs it)
        and the switches below applied. When given, its switches and ``tp`` are used as they
        are and the keyword switches below are ignored.
    tp : int
        Tensor-parallel GPUs of the measured runs [count].
    attention, kv_reads, moe : bool
        Terms to include; turn ``attention`` off when the measurements cover the linear layers
        only (as in Vidur's operator profiles).
    tile_tokens : int or None
        GEMM tile for token-count quantization (None: off).
    fit_tile : bool
        Also choose the tile size: every candidate in ``16, 32, 64, 128, 256`` and None is
        fitted and the one with the smallest training error kept (reported without a
        standard error, as it is discrete).
    holdout_fraction : float
        Share of rows held back at random (``floor(fraction × rows)``) and never fitted, in
        [0, 1). Use 0 with very few rows; the result then says its errors are in-sample only.
    seed : int
        Seed of the random hold-out split.

    Returns
    -------
    CalibrationResult

    Raises
    ------
    CalibrationError
        For a bad table (see :func:`read_measurements`), an unknown or collinear parameter, or
        fewer training rows than free parameters.
    ParameterError
        When ``hardware`` or ``model`` is neither a spec nor a str.
    UnknownNameError
        For a slug not in the catalog.
    """
    hardware, model = resolve_hardware(hardware), resolve_model(model)
    names = _check_fit_names(fit)
    frame = read_measurements(table)
    number_in(
        "holdout_fraction",
        holdout_fraction,
        low=0.0,
        high=1.0,
        high_open=True,
        what="in [0, 1)",
        error=CalibrationError,
    )

    if start is None:
        start = CalibratedCost.typical(hardware, model, tp=tp).with_(
            layer_overhead_s=0.0,
            attention=attention,
            kv_reads=kv_reads,
            moe=moe,
            tile_tokens=tile_tokens,
        )
    elif start.hardware != hardware or start.model != model:
        raise CalibrationError(
            f"start is a cost for {start.hardware.name} + {start.model.name}, but the "
            f"measurements are for {hardware.name} + {model.name}"
        )

    num_rows = len(frame)
    num_holdout = math.floor(holdout_fraction * num_rows)
    order = np.random.default_rng(seed).permutation(num_rows)
    holdout = np.zeros(num_rows, dtype=bool)
    holdout[order[:num_holdout]] = True
    num_free = len(names)
    if num_rows - num_holdout < max(num_free, 1):
        advice = (
            " (lower holdout_fraction, e.g. 0, or fit fewer parameters)"
            if num_holdout
            else " (fit fewer parameters, or measure more steps)"
        )
        raise CalibrationError(
            f"{num_rows - num_holdout} usable training row(s) for {num_free} free parameter(s) "
            f"{', '.join(names)}{advice}; a fit needs at least as many rows as parameters"
        )

    batches = measured_batches(frame)
    train_batches = [b for b, h in zip(batches, holdout, strict=True) if not h]
    measured = frame["step_time_ms"].to_numpy(dtype=float)
    train_measured = measured[~holdout]

    tiles: list[int | None] = [None, *TILE_CANDIDATES] if fit_tile else [start.tile_tokens]
    cost, solution = _best_tile(start, tiles, names, train_batches, train_measured)

    parameters = _parameter_table(cost, names, solution, num_train=len(train_batches))
    if fit_tile:
        parameters = pd.concat(
            [
                parameters,
                pd.DataFrame(
                    [
                        {
                            "name": "tile_tokens",
                            "value": cost.tile_tokens,
                            "stderr": np.nan,
                            "unit": "tokens",
                            "at_bound": False,
                        }
                    ]
                ),
            ],
            ignore_index=True,
        )

    predicted = _predict_ms(cost, batches)
    out = frame.copy()
    out["predicted_ms"] = predicted
    out["residual_ms"] = predicted - measured
    out["relative_error"] = (predicted - measured) / measured
    out["split"] = np.where(holdout, "holdout", "train")
    errors = np.abs(out["relative_error"].to_numpy())
    train_err = errors[~holdout]
    hold_err = errors[holdout]
    return CalibrationResult(
        cost=cost,
        parameters=parameters,
        train_mape=float(np.mean(train_err)),
        train_max_error=float(np.max(train_err)),
        holdout_mape=float(np.mean(hold_err)) if hold_err.size else math.nan,
        holdout_max_error=float(np.max(hold_err)) if hold_err.size else math.nan,
        table=out,
    )


def _best_tile(
    start: CalibratedCost,
    tiles: Sequence[int | None],
    names: tuple[str, ...],
    batches: Sequence[Batch],
    measured: np.ndarray,
) -> tuple[CalibratedCost, OptimizeResult | None]:
    """Fit once per tile size and keep the fit with the smallest training error.

    ``tiles`` holds at least one entry (``None``: no tile quantization); ties keep the earlier.
    """
    first, *others = tiles
    best = _least_squares(start.with_(tile_tokens=first), names, batches, measured)
    best_score = _score(*best, batches, measured)
    for tile in others:
        candidate = _least_squares(start.with_(tile_tokens=tile), names, batches, measured)
        score = _score(*candidate, batches, measured)
        if score < best_score:
            best, best_score = candidate, score
    return best


def _score(
    cost: CalibratedCost, solution: OptimizeResult | None, batches: Sequence[Batch], measured: np.ndarray
) -> float:
    """Sum of squared relative errors of a fit on its training rows."""
    return float(np.sum(solution.fun**2)) if solution is not None else _sse(cost, batches, measured)


def _sse(cost: CalibratedCost, batches: Sequence[Batch], measured: np.ndarray) -> float:
    residual = (_predict_ms(cost, batches) - measured) / measured
    return float(np.sum(residual**2))


def _least_squares(
    start: CalibratedCost, names: tuple[str, ...], batches: Sequence[Batch], measured: np.ndarray
) -> tuple[CalibratedCost, OptimizeResult | None]:
    """Bounded least squares on relative error over the named parameters (scaled internally)."""
    if not names:
        return start, None
    scales = np.array([FITTABLE[n].scale for n in names])
    lower = np.array([FITTABLE[n].low for n in names]) / scales
    upper = np.array([FITTABLE[n].high for n in names]) / scales
    x0 = np.array([float(getattr(start, n)) for n in names]) / scales
    x0 = np.clip(x0, lower, upper)
    # Start strictly inside the box: least_squares' trust region method needs it.
    span = upper - lower
    x0 = np.clip(x0, lower + 1e-6 * span, upper - 1e-6 * span)

    def build(x: np.ndarray) -> CalibratedCost:
        values = {n: float(v) for n, v in zip(names, x * scales, strict=True)}
        return start.with_(**values)

    def residuals(x: np.ndarray) -> np.ndarray:
        return (_predict_ms(build(x), batches) - measured) / measured

    from scipy.optimize import least_squares  # here, not at the top: scipy costs 0.4 s to import

    solution = least_squares(residuals, x0, bounds=(lower, upper), method="trf", x_scale=1.0)
    return build(solution.x), solution


def _parameter_table(
    cost: CalibratedCost, names: tuple[str, ...], solution: OptimizeResult | None, *, num_train: int
) -> pd.DataFrame:
    columns = ["name", "value", "stderr", "unit", "at_bound"]
    if not names or solution is None:
        return pd.DataFrame(columns=columns)
    scales = np.array([FITTABLE[n].scale for n in names])
    stderr = standard_errors(solution.jac, solution.fun, num_train) * scales
    lower = np.array([FITTABLE[n].low for n in names])
    upper = np.array([FITTABLE[n].high for n in names])
    values = np.array([float(getattr(cost, n)) for n in names])
    tol = 1e-6 * (upper - lower)
    at_bound = (values <= lower + tol) | (values >= upper - tol)
    return pd.DataFrame(
        {
            "name": list(names),
            "value": values,
            "stderr": stderr,
            "unit": [FITTABLE[n].unit for n in names],
            "at_bound": at_bound,
        },
        columns=columns,
    )


def standard_errors(jac: np.ndarray, residual: np.ndarray, num_rows: int) -> np.ndarray:
    """Standard errors: ``sqrt(diag(s² (JᵀJ)⁻¹))`` with ``s² = Σ r² / (rows − params)``."""
    jac = np.asarray(jac, dtype=float)
    num_params = jac.shape[1]
    dof = num_rows - num_params
    if dof <= 0:
        return np.full(num_params, np.nan)
    s2 = float(np.sum(np.asarray(residual) ** 2)) / dof
    # Columns the rows do not move at all cannot be estimated.
    norms = np.linalg.norm(jac, axis=0)
    free = norms > 0
    stderr = np.full(num_params, np.inf)
    if not free.any():
        return stderr
    sub = jac[:, free]
    if np.linalg.matrix_rank(sub) < sub.shape[1]:
        return stderr
    cov = s2 * np.linalg.inv(sub.T @ sub)
    stderr[free] = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    return stderr
