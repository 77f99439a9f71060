"""How budgetlab's objects show themselves: a one-line ``repr`` and a compact HTML table.

A notebook cell that ends with a spec, an engine configuration, a cost model or a result shows a
small table (``_repr_html_``) instead of a dump of every field; ``repr`` is one line that names
what matters. Both are built here from ``(label, value)`` rows the object provides, so every
object looks the same. Values are escaped: a model name or a trace file name is never HTML.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

__all__ = ["html_table", "one_line"]

_STYLE = (
    "border-collapse:collapse;font-size:0.9em;margin:0.2em 0;"
    "font-family:-apple-system,BlinkMacSystemFont,'Segoe UI',sans-serif"
)


def html_table(title: str, rows: Iterable[tuple[str, str]]) -> str:
    """A two-column table headed by ``title``; every label and value is HTML-escaped."""
    body = "".join(
        f"<tr><th style='text-align:left;padding:1px 12px 1px 0;font-weight:normal;color:#555'>"
        f"{html.escape(str(label))}</th><td style='text-align:left;padding:1px 0'>{html.escape(str(value))}</td></tr>"
        for label, value in rows
    )
    caption = f"<caption style='text-align:left;font-weight:bold;padding-bottom:2px'>{html.escape(title)}</caption>"
    return f'<table style="{_STYLE}">{caption}{body}</table>'


def one_line(kind: str, head: str, rows: Iterable[tuple[str, str]], *, limit: int = 6) -> str:
    """``kind(head: label value, label value, ...)`` with at most ``limit`` rows."""
    parts = [f"{label} {value}" for label, value in list(rows)[:limit]]
    inside = head + (": " + ", ".join(parts) if parts else "")
    return f"{kind}({inside})"
