"""Handouts: the report without what only a screen needs, and printed to PDF by headless Chromium.

A handout is for paper (or a PDF a course posts): the notebook's outputs and its prose, with

* no code (the exporter drops every input);
* no sentence that only makes sense on a screen or in JupyterLab — "drag the slider", "hover",
  "the next cell is tagged `parameters`", how to pass values with papermill — dropped sentence by
  sentence from the Markdown cells (:data:`SCREEN_ONLY`);
* no local path: an absolute path under a home or work folder becomes ``…/name``;
* a print stylesheet (in the offline template): charts scaled to the page width with their
  legends, no slider or chart menu, no chart split across pages.

:func:`print_pdf` prints a rendered handout page with Debian's ``chromium`` (``--print-to-pdf``),
with every host but the local file unreachable; :func:`find_chromium` says whether one is
installed (``budgetlab.reports`` skips the PDF, and says so, when none is).
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["SCREEN_ONLY", "handout_notebook", "strip_screen_only", "strip_local_paths", "find_chromium", "print_pdf"]

SCREEN_ONLY = re.compile(
    r"\b(drag|dragging|hover|hovering|click|slider|tagged|papermill|JupyterLab|explore|cells?|edit it)\b",
    re.IGNORECASE,
)
"""Words that mark a sentence as being about the screen or the notebook itself."""

_LIST_ITEM = re.compile(r"\s*(?:[-*]|\d+\.)\s")
_SENTENCE_END = re.compile(r"(?<=[.!?:])\s+(?=[A-Z`*(\"“])")
_LOCAL_PATH = re.compile(r"(?<![\w:/.])/(?:home|root|tmp|work|Users|var|opt|mnt|srv)/[^\s'\"<>)\]]*")


def strip_screen_only(markdown: str) -> str:
    """``markdown`` without its screen-only sentences (:data:`SCREEN_ONLY`); headings, list
    items and paragraphs that lose every sentence are dropped, the rest kept as written."""
    kept_blocks = []
    for block in markdown.split("\n\n"):
        if block.lstrip().startswith("#"):
            kept_blocks.append(block)
            continue
        lines = block.split("\n")
        if any(line.lstrip().startswith(("|", "```", "<")) for line in lines):  # tables, code, HTML
            kept_blocks.append(block)
            continue
        if _LIST_ITEM.match(lines[0]):  # a list: keep or drop whole items
            items: list[str] = []
            current: list[str] = []
            for line in lines:
                if _LIST_ITEM.match(line) and current:
                    items.append("\n".join(current))
                    current = []
                current.append(line)
            items.append("\n".join(current))
            kept = [item for item in items if not SCREEN_ONLY.search(item)]
            if kept:
                kept_blocks.append("\n".join(kept))
            continue
        sentences = _SENTENCE_END.split(" ".join(line.strip() for line in lines))
        kept_sentences = [s for s in sentences if not SCREEN_ONLY.search(s)]
        if kept_sentences:
            kept_blocks.append(" ".join(kept_sentences))
    return "\n\n".join(kept_blocks)


def strip_local_paths(text: str) -> str:
    """``text`` with every absolute local path shown as ``…/<last part>``."""
    return _LOCAL_PATH.sub(lambda m: "…/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)


def _clean_output(output: Any) -> None:
    if "text" in output:
        output["text"] = strip_local_paths(
            "".join(output["text"]) if isinstance(output["text"], list) else output["text"]
        )
    for mime in ("text/plain", "text/markdown", "text/html"):
        data = output.get("data", {})
        if mime in data:
            value = data[mime]
            data[mime] = strip_local_paths("".join(value) if isinstance(value, list) else value)
    if output.get("output_type") == "error":
        output["traceback"] = [strip_local_paths(line) for line in output.get("traceback", [])]


def handout_notebook(nb: Any) -> Any:
    """A copy of an executed notebook for the handout exporter (module docstring)."""
    out = copy.deepcopy(nb)
    for cell in out.cells:
        if cell.cell_type == "markdown":
            cell.source = strip_local_paths(strip_screen_only(cell.source))
        elif cell.cell_type == "code":
            for output in cell.get("outputs", []):
                _clean_output(output)
    return out


def find_chromium() -> str | None:
    """Debian's ``/usr/bin/chromium``, else a Chromium or Chrome on ``PATH``; ``None`` if none."""
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def print_pdf(html_path: Path, pdf_path: Path, *, chromium: str | None = None, timeout_s: float = 180.0) -> Path:
    """Print a rendered page to PDF with headless Chromium, offline, and return ``pdf_path``.

    Raises
    ------
    FileNotFoundError
        No Chromium installed (``sudo apt-get install chromium``).
    RuntimeError
        Chromium failed or wrote no PDF; the message has its last output lines.
    """
    browser = chromium or find_chromium()
    if browser is None:
        raise FileNotFoundError("printing handouts needs Chromium: sudo apt-get install chromium (Debian/Ubuntu)")
    with tempfile.TemporaryDirectory(prefix="budgetlab-pdf-") as profile:
        command = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: the page must be self-contained
            f"--user-data-dir={profile}",
            "--no-pdf-header-footer",
            "--print-to-pdf-no-header",
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=20000",  # let every chart finish drawing first
            f"--print-to-pdf={pdf_path}",
            Path(html_path).resolve().as_uri(),
        ]
        pdf_path.unlink(missing_ok=True)
        run = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if run.returncode != 0 or not pdf_path.is_file() or pdf_path.stat().st_size == 0:
        tail = "\n".join((run.stderr or run.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"Chromium could not print {html_path} (exit {run.returncode}): {tail}")
    return pdf_path
