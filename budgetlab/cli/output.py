"""What the command line prints and writes: tables, progress lines, escaped names and JSON.

Every human line goes through :func:`shown` (:func:`budgetlab.text.terminal_safe`), which
escapes characters a terminal would act on (escape sequences, carriage returns, other control
and format characters), so a file name can never rewrite the screen. :func:`json_safe` turns
results into plain JSON values: NaN and infinities become ``null`` (JSON has neither), NumPy
scalars and arrays plain numbers and lists, frames lists of records, dataclasses dicts.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from budgetlab.text import terminal_safe as shown

__all__ = ["shown", "one_line", "json_safe", "write_json", "print_table", "Progress", "fmt_number", "fmt_ms"]


def one_line(text: object) -> str:
    """An error message as one escaped line: line breaks become spaces, the rest :func:`shown`."""
    return shown(" ".join(part.strip() for part in str(text).splitlines() if part.strip()))


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON values: dict, list, str, int, finite float, bool or ``None``.

    NaN and ±infinity become ``None``; NumPy scalars and arrays become Python numbers and
    lists; a :class:`pandas.DataFrame` becomes a list of row dicts; a dataclass a dict of its
    fields; an :class:`enum.Enum` its value; a path its text; anything else its ``str``.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, enum.Enum):
        return json_safe(value.value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, pd.DataFrame):
        return [json_safe(row) for row in value.to_dict(orient="records")]
    if isinstance(value, pd.Series):
        return json_safe(value.to_dict())
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_safe(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def write_json(document: Mapping[str, Any], target: str) -> str | None:
    """Write ``document`` as JSON to the file ``target``, or to stdout for ``"-"``.

    The document goes through :func:`json_safe` and is written with ``allow_nan=False``, so a
    reader with a strict parser (NaN rejected) accepts it. A file is written whole or not at
    all (a temporary file beside it, renamed into place).

    Returns
    -------
    str or None
        The file written, or ``None`` for stdout.

    Raises
    ------
    OSError
        The folder is missing or not writable.
    """
    text = json.dumps(json_safe(document), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return None
    path = Path(target).expanduser()  # as _check_json_target reads it (`--json=~/out.json`)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return str(path)


def fmt_number(value: object, digits: int = 3) -> str:
    """A number for a table: ``-`` for None/NaN, thousands separators for whole numbers."""
    if value is None:
        return "-"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | np.floating):
        number = float(value)
        if not math.isfinite(number):
            return "-"
        return f"{number:,.0f}" if abs(number) >= 10**digits else f"{number:.{digits}g}"
    return shown(value)


def fmt_ms(seconds: object) -> str:
    """Seconds shown in milliseconds (``-`` for None/NaN)."""
    if seconds is None or not isinstance(seconds, int | float | np.number) or not math.isfinite(float(seconds)):
        return "-"
    return fmt_number(float(seconds) * 1e3)


def print_table(
    header: Sequence[str], rows: Iterable[Sequence[object]], *, stream: IO[str], right: Sequence[bool] | None = None
) -> None:
    """Print ``rows`` under ``header`` as aligned plain-text columns.

    Parameters
    ----------
    header : sequence of str
    rows : iterable of sequences
        Cells; each is shown with :func:`fmt_number` unless already a str (then :func:`shown`).
    stream : file
    right : sequence of bool, optional
        Right-align these columns (default: every column but the first).
    """
    cells = [[shown(h) for h in header]]
    for row in rows:
        cells.append([shown(c) if isinstance(c, str) else fmt_number(c) for c in row])
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    align = list(right) if right is not None else [i > 0 for i in range(len(header))]
    for n, row in enumerate(cells):
        parts = [c.rjust(w) if a else c.ljust(w) for c, w, a in zip(row, widths, align, strict=True)]
        print("  ".join(parts).rstrip(), file=stream)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=stream)


class Progress:
    """Progress lines on stderr for work that takes a while, when asked or on a terminal.

    Parameters
    ----------
    enabled : bool or None
        ``True``: always; ``False``: never; ``None``: when stderr is a terminal.
    """

    def __init__(self, enabled: bool | None) -> None:
        self.enabled = bool(sys.stderr.isatty()) if enabled is None else bool(enabled)
        self._started = time.perf_counter()

    def start(self, what: str) -> None:
        """Say what starts (``what`` already escaped)."""
        self._started = time.perf_counter()
        if self.enabled:
            print(f"budgetlab: {what} ...", file=sys.stderr, flush=True)

    def done(self, what: str = "done") -> None:
        """Say it finished, with the time it took [s]."""
        if self.enabled:
            print(f"budgetlab: {what} in {time.perf_counter() - self._started:.1f} s", file=sys.stderr, flush=True)
