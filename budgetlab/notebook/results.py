"""Save a report's key numbers as JSON, so tests and readers can check them without parsing HTML.

Notebooks take a ``results_path`` parameter (empty: save nothing) and end with one
:func:`save_results` call; the report renderer (:mod:`budgetlab.notebook.reports`) points it at
``reports/<scenario>/<notebook>.results.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["save_results", "load_results", "to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and mappings into plain JSON types.

    Non-finite floats become ``None`` (JSON has no NaN or infinity); mapping keys become
    strings (``step_time_s`` keyed by token count reads ``{"512": 0.0083}``).
    """
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [to_jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    raise TypeError(f"cannot store {type(value).__name__} in a results file: {value!r}")


def save_results(results_path: str | Path, results: Mapping[str, Any]) -> Path | None:
    """Write ``results`` as pretty JSON to ``results_path``; do nothing when it is empty.

    Parameters
    ----------
    results_path : str or Path
        Destination file; ``""`` skips writing (interactive use).
    results : mapping
        The report's key numbers, named with units (``knee_tokens``, ``ttft_s``).

    Returns
    -------
    Path or None
        Where the file was written.
    """
    if not str(results_path):
        return None
    path = Path(results_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_jsonable(results), indent=2, sort_keys=True) + "\n")
    return path


def load_results(results_path: str | Path) -> dict[str, Any]:
    """Read a results file written by :func:`save_results`."""
    return json.loads(Path(results_path).read_text())
