"""Fit the calibrated step cost to measured step times, and score any cost model on them.

The input is a table with one measured step per row (format: ``data/measured/README.md``):

===================== ======== ==========================================================
column                unit     meaning
===================== ======== ==========================================================
``num_prefill_tokens``  tokens   length of the step's one prefill chunk (0: none)
``num_decode_tokens``   count    decoding sequences in the step, one token each
``context_tokens``      tokens   optional (default 0): tokens already cached for the chunk's
                                 request and for each decoding sequence
``step_time_ms``        ms       measured time of the step, > 0
===================== ======== ==========================================================

Other columns (``source``, notes) are carried along untouched.

:func:`calibrate` fits chosen parameters of a :class:`~budgetlab.calibrated.CalibratedCost`
by bounded least squares on the relative error (``scipy.optimize.least_squares``), reports each
parameter with a standard error from the Jacobian at the optimum (``cov = s² (JᵀJ)⁻¹`` with
``s² = Σ r² / (rows − parameters)``), and scores the fit on the rows it used and on rows held
back at random. :func:`predict_step_ms` evaluates any cost model (anything with
``batch_time_s``) on every row.

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

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from budgetlab.calibrated import CalibratedCost
from budgetlab._checks import number_in
from budgetlab.errors import CalibrationError  # importable from here too
from budgetlab.roofline import Batch, CostModel
from budgetlab.specs import HardwareSpec, ModelSpec

__all__ = [
    "CalibrationError",
    "CalibrationResult",
    "calibrate",
    "predict_step_ms",
    "read_measurements",
    "FITTABLE",
    "DEFAULT_FIT",
]

REQUIRED_COLUMNS = ("num_prefill_tokens", "num_decode_tokens", "step_time_ms")
TOKEN_COLUMNS = ("num_prefill_tokens", "num_decode_tokens", "context_tokens")

#: Parameters :func:`calibrate` can fit: (unit, lower bound, upper bound, internal scale).
FITTABLE: dict[str, tuple[str, float, float, float]] = {
    "step_overhead_s": ("s", 0.0, 1.0, 1e-3),
    "layer_overhead_s": ("s", 0.0, 0.1, 1e-5),
    "bandwidth_efficiency": ("fraction", 1e-3, 1.0, 1.0),
    "flop_efficiency": ("fraction", 1e-3, 1.0, 1.0),
    "knee_overlap_loss": ("fraction", 0.0, 1.0, 1.0),
}
DEFAULT_FIT = ("step_overhead_s", "bandwidth_efficiency", "flop_efficiency", "knee_overlap_loss")
TILE_CANDIDATES = (16, 32, 64, 128, 256)


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

    def summary(self) -> str:
        """A few lines for a notebook: each parameter ± its standard error, and the errors."""
        lines = []
        for row in self.parameters.itertuples(index=False):
            flag = "  (at bound)" if row.at_bound else ""
            lines.append(f"{row.name} = {row.value:.6g} ± {row.stderr:.2g} {row.unit}{flag}")
        lines.append(
            f"train ({self.num_train} rows): MAPE {self.train_mape:.1%}, max {self.train_max_error:.1%}"
        )
        if self.num_holdout:
            caution = "; too few rows for more than a rough check" if self.num_holdout < 5 else ""
            lines.append(
                f"held back ({self.num_holdout} rows, not fitted{caution}): "
                f"MAPE {self.holdout_mape:.1%}, max {self.holdout_max_error:.1%}"
            )
        else:
            lines.append("no rows held back: the errors above are in-sample only")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Reading and checking a table
# --------------------------------------------------------------------------------------------


def read_measurements(table: str | os.PathLike[str] | pd.DataFrame) -> pd.DataFrame:
    """Read and validate a measured-step table (path to a CSV, or a DataFrame).

    Returns a copy with integer token columns (``context_tokens`` added as 0 when absent) and a
    float ``step_time_ms``; other columns are kept.

    Raises
    ------
    CalibrationError
        For a missing file or column, a non-number, NaN, a negative token count, a step with
        no tokens, or a time that is not > 0; the message names the rows.
    """
    if isinstance(table, pd.DataFrame):
        frame = table.copy()
        where = "table"
    elif isinstance(table, (str, os.PathLike)):
        where = os.fspath(table)
        try:
            frame = pd.read_csv(where)
        except FileNotFoundError:
            raise CalibrationError(f"measurement table {where} does not exist") from None
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise CalibrationError(f"{where} is not a readable CSV: {exc}") from None
        except OSError as exc:  # a directory, no permission, ...
            raise CalibrationError(f"measurement table {where} cannot be read: {exc}") from None
    else:
        raise CalibrationError(
            f"table must be a CSV path or a pandas DataFrame, got {type(table).__name__}"
        )
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise CalibrationError(
            f"{where}: missing column(s) {', '.join(missing)}; a measured-step table needs "
            f"{', '.join(REQUIRED_COLUMNS)} and optionally context_tokens "
            "(see data/measured/README.md)"
        )
    if frame.empty:
        raise CalibrationError(f"{where} has no rows")
    if "context_tokens" not in frame.columns:
        frame["context_tokens"] = 0
    for column in (*TOKEN_COLUMNS, "step_time_ms"):
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = values.isna()
        if bad.any():
            raise CalibrationError(
                f"{where}: column {column!r} must hold numbers, but row(s) {_rows(bad)} are "
                "empty, NaN or not numeric"
            )
        frame[column] = values.astype(float)
    for column in TOKEN_COLUMNS:
        values = frame[column]
        bad = (values < 0) | (values != np.floor(values)) | ~np.isfinite(values)
        if bad.any():
            raise CalibrationError(
                f"{where}: column {column!r} must hold whole token counts >= 0; row(s) "
                f"{_rows(bad)} do not"
            )
        frame[column] = values.astype(np.int64)
    empty = (frame["num_prefill_tokens"] + frame["num_decode_tokens"]) == 0
    if empty.any():
        raise CalibrationError(
            f"{where}: row(s) {_rows(empty)} have no tokens (num_prefill_tokens and "
            "num_decode_tokens both 0); every measured step processes at least one token"
        )
    times = frame["step_time_ms"]
    bad = ~np.isfinite(times) | (times <= 0)
    if bad.any():
        raise CalibrationError(
            f"{where}: step_time_ms must be a finite time > 0 in milliseconds; row(s) "
            f"{_rows(bad)} are not"
        )
    return frame.reset_index(drop=True)


def _rows(mask: pd.Series) -> str:
    """Row labels as a person counts them (0-based DataFrame index), at most 5."""
    labels = [str(i) for i in mask[mask].index[:5]]
    more = int(mask.sum()) - len(labels)
    return ", ".join(labels) + (f" and {more} more" if more > 0 else "")


def _batches(frame: pd.DataFrame) -> list[Batch]:
    batches = []
    for prefill, decodes, context in zip(
        frame["num_prefill_tokens"].tolist(),
        frame["num_decode_tokens"].tolist(),
        frame["context_tokens"].tolist(),
        strict=True,
    ):
        batches.append(
            Batch(
                num_decodes=int(decodes),
                decode_context_tokens=int(decodes) * int(context),
                prefill_tokens=(int(prefill),) if prefill > 0 else (),
                prefill_context_tokens=(int(context),) if prefill > 0 else (),
            )
        )
    return batches


def predict_step_ms(cost: CostModel, table: str | os.PathLike[str] | pd.DataFrame) -> np.ndarray:
    """Predicted time of every row's step [ms], from any cost model.

    Each row becomes a :class:`~budgetlab.roofline.Batch`: one prefill chunk of
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
    return _predict_ms(cost, _batches(frame))


def _predict_ms(cost: CostModel, batches: Sequence[Batch]) -> np.ndarray:
    return np.array([cost.batch_time_s(b) for b in batches], dtype=float) * 1e3


# --------------------------------------------------------------------------------------------
# The fit
# --------------------------------------------------------------------------------------------


def _resolve(hardware: HardwareSpec | str, model: ModelSpec | str) -> tuple[HardwareSpec, ModelSpec]:
    if isinstance(hardware, str) or isinstance(model, str):
        from budgetlab import catalog

        if isinstance(hardware, str):
            hardware = catalog.hardware(hardware)
        if isinstance(model, str):
            model = catalog.model(model)
    if not isinstance(hardware, HardwareSpec):
        raise CalibrationError(f"hardware must be a HardwareSpec or a catalog slug, got {hardware!r}")
    if not isinstance(model, ModelSpec):
        raise CalibrationError(f"model must be a ModelSpec or a catalog slug, got {model!r}")
    return hardware, model


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
    """
    hardware, model = _resolve(hardware, model)
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
            layer_overhead_s=0.0, attention=attention, kv_reads=kv_reads, moe=moe,
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

    batches = _batches(frame)
    train_batches = [b for b, h in zip(batches, holdout, strict=True) if not h]
    measured = frame["step_time_ms"].to_numpy(dtype=float)
    train_measured = measured[~holdout]

    tiles: list[int | None] = [start.tile_tokens]
    if fit_tile:
        tiles = [None, *TILE_CANDIDATES]
    best: tuple[float, CalibratedCost, Any] | None = None
    for tile in tiles:
        candidate = start.with_(tile_tokens=tile)
        cost, solution = _least_squares(candidate, names, train_batches, train_measured)
        if solution is not None:
            score = float(np.sum(solution.fun**2))
        else:
            score = _sse(cost, train_batches, train_measured)
        if best is None or score < best[0]:
            best = (score, cost, solution)
    assert best is not None
    _, cost, solution = best

    parameters = _parameter_table(cost, names, solution, num_train=len(train_batches))
    if fit_tile:
        parameters = pd.concat(
            [
                parameters,
                pd.DataFrame(
                    [{"name": "tile_tokens", "value": cost.tile_tokens, "stderr": np.nan,
                      "unit": "tokens", "at_bound": False}]
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


def _sse(cost: CalibratedCost, batches: Sequence[Batch], measured: np.ndarray) -> float:
    residual = (_predict_ms(cost, batches) - measured) / measured
    return float(np.sum(residual**2))


def _least_squares(
    start: CalibratedCost, names: tuple[str, ...], batches: Sequence[Batch], measured: np.ndarray
) -> tuple[CalibratedCost, Any]:
    """Bounded least squares on relative error over the named parameters (scaled internally)."""
    if not names:
        return start, None
    scales = np.array([FITTABLE[n][3] for n in names])
    lower = np.array([FITTABLE[n][1] for n in names]) / scales
    upper = np.array([FITTABLE[n][2] for n in names]) / scales
    x0 = np.array([float(getattr(start, n)) for n in names]) / scales
    x0 = np.clip(x0, lower, upper)
    # Start strictly inside the box: least_squares' trust region method needs it.
    span = upper - lower
    x0 = np.clip(x0, lower + 1e-6 * span, upper - 1e-6 * span)

    def build(x: np.ndarray) -> CalibratedCost:
        values = {n: float(v) for n, v in zip(names, x * scales, strict=True)}
        return dataclasses.replace(start, **values)

    def residuals(x: np.ndarray) -> np.ndarray:
        return (_predict_ms(build(x), batches) - measured) / measured

    from scipy.optimize import least_squares  # here, not at the top: scipy costs 0.4 s to import

    solution = least_squares(residuals, x0, bounds=(lower, upper), method="trf", x_scale=1.0)
    return build(solution.x), solution


def _parameter_table(
    cost: CalibratedCost, names: tuple[str, ...], solution: Any, *, num_train: int
) -> pd.DataFrame:
    columns = ["name", "value", "stderr", "unit", "at_bound"]
    if not names:
        return pd.DataFrame(columns=columns)
    scales = np.array([FITTABLE[n][3] for n in names])
    stderr = _stderr(solution.jac, solution.fun, num_train) * scales
    lower = np.array([FITTABLE[n][1] for n in names])
    upper = np.array([FITTABLE[n][2] for n in names])
    values = np.array([float(getattr(cost, n)) for n in names])
    tol = 1e-6 * (upper - lower)
    at_bound = (values <= lower + tol) | (values >= upper - tol)
    return pd.DataFrame(
        {
            "name": list(names),
            "value": values,
            "stderr": stderr,
            "unit": [FITTABLE[n][0] for n in names],
            "at_bound": at_bound,
        },
        columns=columns,
    )


def _stderr(jac: np.ndarray, residual: np.ndarray, num_rows: int) -> np.ndarray:
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
