"""The developers' published measurements: where they are, and reading one with its columns checked.

The real-engine data (``../shared/data/real/`` beside a source checkout; its README gives every
source) is read, never copied into the project: a user's clone or an installed wheel does not
have it, and everything that uses it says so and skips.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from budgetlab.errors import DataFormatError

__all__ = ["shared_real_path", "read_published_csv"]


def shared_real_path(file_name: str) -> Path | None:
    """``<work>/shared/data/real/<file_name>`` for a checkout at ``<work>/main``, if it exists."""
    path = Path(__file__).resolve().parents[3] / "shared" / "data" / "real" / file_name
    return path if path.is_file() else None


def read_published_csv(path: str | os.PathLike[str], needed: Sequence[str]) -> pd.DataFrame:
    """Read a published CSV as it is (no value changed), checking it has the ``needed`` columns.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    DataFormatError
        A needed column is missing (the message names them).
    """
    frame = pd.read_csv(path)
    missing = [column for column in needed if column not in frame.columns]
    if missing:
        raise DataFormatError(f"{path}: missing column(s) {', '.join(missing)}; is this the published file?")
    return frame
