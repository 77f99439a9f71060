"""Measured step times: reading and checking the table that calibration and scoring use.

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

Other columns (``source``, notes) are carried along untouched. :func:`read_measurements`
validates a table (a CSV path or a DataFrame) and :func:`measured_batches` turns its rows into
the step compositions a cost model prices; :mod:`budgetlab.cost.fit` fits and scores on them.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from budgetlab.errors import CalibrationError
from budgetlab.specs import Batch

__all__ = ["read_measurements", "measured_batches", "REQUIRED_COLUMNS", "TOKEN_COLUMNS"]

#: Columns every measured-step table must have.
REQUIRED_COLUMNS = ("num_prefill_tokens", "num_decode_tokens", "step_time_ms")
#: Columns holding whole token counts (``context_tokens`` is added as 0 when absent).
TOKEN_COLUMNS = ("num_prefill_tokens", "num_decode_tokens", "context_tokens")


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
        raise CalibrationError(f"table must be a CSV path or a pandas DataFrame, got {type(table).__name__}")
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
                f"{where}: column {column!r} must hold numbers, but row(s) {_rows(bad)} are empty, NaN or not numeric"
            )
        frame[column] = values.astype(float)
    for column in TOKEN_COLUMNS:
        values = frame[column]
        bad = (values < 0) | (values != np.floor(values)) | ~np.isfinite(values)
        if bad.any():
            raise CalibrationError(
                f"{where}: column {column!r} must hold whole token counts >= 0; row(s) {_rows(bad)} do not"
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
            f"{where}: step_time_ms must be a finite time > 0 in milliseconds; row(s) {_rows(bad)} are not"
        )
    return frame.reset_index(drop=True)


def _rows(mask: pd.Series) -> str:
    """Row labels as a person counts them (0-based DataFrame index), at most 5."""
    labels = [str(i) for i in mask[mask].index[:5]]
    more = int(mask.sum()) - len(labels)
    return ", ".join(labels) + (f" and {more} more" if more > 0 else "")


def measured_batches(frame: pd.DataFrame) -> list[Batch]:
    """Each row of a read measurement table as the :class:`~budgetlab.specs.Batch` it measured.

    A row is one prefill chunk of ``num_prefill_tokens`` tokens after ``context_tokens`` cached
    tokens (none when 0), plus ``num_decode_tokens`` decodes each with ``context_tokens`` of
    context.

    Parameters
    ----------
    frame : pandas.DataFrame
        A table as :func:`read_measurements` returns it (integer token columns).

    Returns
    -------
    list of Batch
        One per row, in row order.
    """
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
