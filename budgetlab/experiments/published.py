"""The developers' published measurements: where they are, and reading one with its columns checked.

The real-engine data (vLLM start-up logs ``vllm_kv_logs.csv``, serving runs
``vllm_serving_h100_inference_sim.csv``, all-reduce latencies ``allreduce.csv``; the folder's
README gives every source) is **validation data**: budgetlab compares its models against it,
and a few tests refit the shipped constants from it. It is read from the developers' shared
folder and never shipped in the package: a user's clone or an installed wheel does not have it,
and everything that uses it says so and skips. Nothing else needs it at run time: the numbers
fitted from it (the :data:`~budgetlab.cost.presets.TYPICAL` preset of
:meth:`CalibratedCost.typical <budgetlab.cost.CalibratedCost.typical>`, the activation
coefficients of :mod:`budgetlab.memory.profile`, the all-reduce fits of
:mod:`budgetlab.cost.collective`) are constants in the code.

:func:`real_data_dir` finds the folder, in this order:

1. the folder the environment variable ``BUDGETLAB_REAL_DATA`` names (:data:`REAL_DATA_ENV`;
   a copy of the shared ``data/real`` folder anywhere). Set but not an existing folder, it is
   an error, not a silent skip;
2. ``../shared/data/real`` beside a source checkout (the folder holding ``pyproject.toml`` of
   project ``budgetlab`` and the ``budgetlab`` package), where the developers keep it;
3. none: the validation sections and tests skip.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from budgetlab.errors import DataFormatError

__all__ = ["REAL_DATA_ENV", "real_data_dir", "real_data_path", "read_published_csv"]

REAL_DATA_ENV = "BUDGETLAB_REAL_DATA"
"""The environment variable naming the folder of the real-engine data (module docstring)."""


def _is_budgetlab_checkout(root: Path) -> bool:
    """Whether ``root`` is a source checkout of budgetlab: its ``pyproject.toml`` names project
    ``budgetlab`` (an unreadable or malformed file is not a checkout)."""
    try:
        with (root / "pyproject.toml").open("rb") as handle:
            project = tomllib.load(handle).get("project")
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return isinstance(project, dict) and project.get("name") == "budgetlab"


def _checkout_root() -> Path | None:
    """The source checkout budgetlab is imported from (the package's parent folder), or ``None``
    for an installed package."""
    root = Path(__file__).resolve().parents[2]
    return root if _is_budgetlab_checkout(root) else None


def real_data_dir() -> Path | None:
    """The folder of the developers' real-engine data, or ``None`` where there is none.

    ``$BUDGETLAB_REAL_DATA`` when set (``~`` expanded; an empty value counts as unset), else
    ``../shared/data/real`` beside a source checkout when that folder exists, else ``None``
    (module docstring). An installed wheel finds the data only through the variable.

    Raises
    ------
    DataFormatError
        ``BUDGETLAB_REAL_DATA`` is set but names no existing folder (the message names the
        variable and the path).
    """
    named = os.environ.get(REAL_DATA_ENV, "")
    if named:
        folder = Path(named).expanduser()
        if not folder.is_dir():
            raise DataFormatError(
                f"{REAL_DATA_ENV} is set to {named!r}, but {folder} is not an existing folder; point it at "
                "a copy of the real-engine data folder (shared/data/real: vllm_kv_logs.csv, "
                "vllm_serving_h100_inference_sim.csv, allreduce.csv) or unset it"
            )
        return folder
    root = _checkout_root()
    if root is None:
        return None
    folder = root.parent / "shared" / "data" / "real"
    return folder if folder.is_dir() else None


def real_data_path(file_name: str) -> Path | None:
    """``<real_data_dir()>/<file_name>`` if that file exists, else ``None`` (no folder, or the
    folder lacks the file).

    Raises
    ------
    DataFormatError
        As :func:`real_data_dir`.
    """
    folder = real_data_dir()
    if folder is None:
        return None
    path = folder / file_name
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
