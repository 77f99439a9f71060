"""Handouts: the report without what only a screen needs, and printed to PDF by headless Chromium.

A handout is for paper (or a PDF a course posts): the notebook's outputs and its prose, with

* no code (the exporter drops every input);
* no sentence that only makes sense on a screen or in JupyterLab — "drag the slider", "hover",
  "the next cell is tagged `parameters`", how to pass values with papermill — dropped sentence by
  sentence from the Markdown cells (:data:`SCREEN_ONLY`);
* no API call or shell command in the prose (:data:`API_OR_SHELL`): a parenthesis holding one
  is dropped, a sentence naming one is dropped;
* no local path: an absolute path under a home or work folder becomes ``…/name``;
* tables without pandas' scaffolding: no ``0, 1, 2, …`` index column, and an index's name sits
  in the header row instead of a second header row (:func:`clean_table_html`); the validated
  parameters' table is left out (the banner above the title lists the scenario's values);
* a print stylesheet and chart sizing (in the offline template): on A4 every chart is drawn at
  most the text width wide with its smallest text at 8.25 pt, tables wrap to the text width and
  split between rows, headings stay with their text.

:func:`print_pdf` prints a rendered handout page with Debian's ``chromium`` (``--print-to-pdf``),
with every host but the local file unreachable; :func:`find_chromium` says whether one is
installed (``budgetlab.reports`` skips the PDF, and says so, when none is).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = [
    "API_OR_SHELL",
    "SCREEN_ONLY",
    "clean_table_html",
    "handout_notebook",
    "strip_screen_only",
    "strip_local_paths",
    "find_chromium",
    "print_pdf",
]

SCREEN_ONLY = re.compile(
    r"\b(drag|dragging|hover|hovering|click|slider|sliders|dropdown|dropdowns|drop-down|tagged|papermill|"
    r"JupyterLab|explore|cells?|edit it|widgets?)\b",
    re.IGNORECASE,
)
"""Words that mark a sentence as being about the screen or the notebook itself."""

API_OR_SHELL = re.compile(r"`(?:[^`]*\w\([^`]*|\s*(?:python|make|pip|papermill|jupyter|\.venv|bl\.|budgetlab\.)[^`]*)`")
"""An inline code span holding an API call (``bl.tune(...)``), a module path (``budgetlab.x``)
or a shell command (``python -m ...``, ``make reports``): words for a programmer, not a class."""

_FENCED_CODE = re.compile(r"^```.*?^```[^\n]*\n?", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"`[^`]*`")
_STASHED = re.compile(r"\x00(\d+)\x00")


def _has_api(text: str) -> bool:
    """Whether one of ``text``'s code spans (read left to right, in pairs) is an API call or command."""
    return any(API_OR_SHELL.fullmatch(span.group(0)) for span in _CODE_SPAN.finditer(text))


def _without_api_asides(text: str) -> str:
    """``text`` without the parentheses that hold an API call or a command (code spans are set
    aside first, so a parenthesis inside ``f(x)`` is not taken for the text's own)."""
    spans: list[str] = []

    def stash(match: re.Match[str]) -> str:
        spans.append(match.group(0))
        return f"\x00{len(spans) - 1}\x00"

    def aside(match: re.Match[str]) -> str:
        held = [spans[int(i)] for i in _STASHED.findall(match.group(0))]
        return "" if any(API_OR_SHELL.fullmatch(span) for span in held) else match.group(0)

    masked = re.sub(r"\s*\([^()]*\)", aside, _CODE_SPAN.sub(stash, text))
    return _STASHED.sub(lambda m: spans[int(m.group(1))], masked)


_LIST_ITEM = re.compile(r"\s*(?:[-*]|\d+\.)\s")
_SENTENCE_END = re.compile(r"(?<=[.!?:])\s+(?=[A-Z`*(\"“])")
_LOCAL_PATH = re.compile(r"(?<![\w:/.])/(?:home|root|tmp|work|Users|var|opt|mnt|srv)/[^\s'\"<>)\]]*")


def strip_screen_only(markdown: str) -> str:
    """``markdown`` without its screen-only sentences (:data:`SCREEN_ONLY`) and without API calls
    or shell commands (:data:`API_OR_SHELL`: a parenthesis holding one goes, a sentence of a
    paragraph naming one goes); headings, list items and paragraphs that lose every sentence are
    dropped, the rest kept as written."""
    kept_blocks = []
    markdown = _FENCED_CODE.sub("", markdown)  # commands to type: for a screen, not a class
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
            kept = [_without_api_asides(item) for item in items if not SCREEN_ONLY.search(item)]
            if kept:
                kept_blocks.append("\n".join(kept))
            continue
        paragraph = _without_api_asides(" ".join(line.strip() for line in lines))
        sentences = _SENTENCE_END.split(paragraph)
        kept_sentences = [s for s in sentences if not SCREEN_ONLY.search(s) and not _has_api(s)]
        if kept_sentences:
            kept_blocks.append(" ".join(kept_sentences))
    return "\n\n".join(kept_blocks)


def strip_local_paths(text: str) -> str:
    """``text`` with every absolute local path shown as ``…/<last part>``."""
    return _LOCAL_PATH.sub(lambda m: "…/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)


_THEAD = re.compile(r"<thead>(.*?)</thead>", re.DOTALL)
_TBODY = re.compile(r"<tbody>(.*?)</tbody>", re.DOTALL)
_ROW = re.compile(r"<tr[^>]*>(.*?)</tr>", re.DOTALL)
_HEADER_CELL = re.compile(r"<th[^>]*>(.*?)</th>", re.DOTALL)
_ROW_LABEL = re.compile(r"(<tr[^>]*>\s*)<th[^>]*>(.*?)</th>\s*", re.DOTALL)


def _clean_one_table(table: str) -> str:
    table = _breakable(_strip_index(table))
    return table


def _breakable(table: str) -> str:
    """A line-break opportunity after each ``_`` of the text (``max_num_<wbr>seqs``): a narrow
    printed column can wrap a long knob name instead of pushing the table off the page."""
    return re.sub(r">([^<>]*_[^<>]*)<", lambda m: ">" + m.group(1).replace("_", "_<wbr>") + "<", table)


def _breakable_markdown(markdown: str) -> str:
    """:func:`_breakable` for the rows of Markdown tables (code spans left as they are)."""

    def row(line: str) -> str:
        if not line.lstrip().startswith("|"):
            return line
        parts = line.split("`")  # even parts are outside code spans
        return "`".join(part.replace("_", "_<wbr>") if i % 2 == 0 else part for i, part in enumerate(parts))

    return "\n".join(row(line) for line in markdown.split("\n"))


def _strip_index(table: str) -> str:
    head, body = _THEAD.search(table), _TBODY.search(table)
    if head is None or body is None:
        return table
    rows = _ROW.findall(head.group(1))
    if len(rows) != 2:  # one header row, or a column MultiIndex: leave it as pandas drew it
        first_cells = _HEADER_CELL.findall(rows[0]) if rows else []
        name_row: list[str] = []
    else:
        first_cells, name_row = _HEADER_CELL.findall(rows[0]), _HEADER_CELL.findall(rows[1])
    if name_row and first_cells and first_cells[0] == "" and name_row[0] and not any(name_row[1:]):
        # the index's name in a second header row: move it into the first row's corner cell
        first_row = next(_ROW.finditer(head.group(1))).group(0)
        corner = re.sub(r"<th([^>]*)></th>", lambda m: f"<th{m.group(1)}>{name_row[0]}</th>", first_row, count=1)
        table = table.replace(head.group(0), f"<thead>\n    {corner}\n  </thead>")
        return table
    labels = [m.group(2).strip() for m in _ROW_LABEL.finditer(body.group(1))]
    if first_cells and first_cells[0] == "" and labels and labels == [str(i) for i in range(len(labels))]:
        # a default 0, 1, 2, … index: no reader needs it
        table = table.replace(body.group(0), _ROW_LABEL.sub(lambda m: m.group(1), body.group(0)))
        table = re.sub(r"(<thead>\s*<tr[^>]*>\s*)<th[^>]*></th>\s*", lambda m: m.group(1), table, count=1)
    return table


def clean_table_html(html: str) -> str:
    """``html`` with every pandas table (``class="dataframe"``) shown as a reader expects: a
    default ``0, 1, 2, …`` index column removed, and a named index's name moved from the second
    header row pandas draws into the first row's corner cell."""
    tables = re.compile(r"<table[^>]*class=\"dataframe\"[^>]*>.*?</table>", re.DOTALL)
    return tables.sub(lambda m: _clean_one_table(m.group(0)), html)


def _is_parameters_table(output: Any) -> bool:
    markdown = output.get("data", {}).get("text/markdown", "")
    markdown = "".join(markdown) if isinstance(markdown, list) else markdown
    return markdown.startswith("| parameter | value |")


def _clean_output(output: Any) -> None:
    if "text" in output:
        output["text"] = strip_local_paths(
            "".join(output["text"]) if isinstance(output["text"], list) else output["text"]
        )
    for mime in ("text/plain", "text/markdown", "text/html"):
        data = output.get("data", {})
        if mime in data:
            value = data[mime]
            text = strip_local_paths("".join(value) if isinstance(value, list) else value)
            if mime == "text/markdown":
                text = _breakable_markdown(strip_screen_only(text))
            elif mime == "text/html":
                text = clean_table_html(text)
            data[mime] = text
    if output.get("output_type") == "error":
        output["traceback"] = [strip_local_paths(line) for line in output.get("traceback", [])]


def handout_notebook(nb: Any) -> Any:
    """A copy of an executed notebook for the handout exporter (module docstring)."""
    out = copy.deepcopy(nb)
    for cell in out.cells:
        if cell.cell_type == "markdown":
            cell.source = _breakable_markdown(strip_local_paths(strip_screen_only(cell.source)))
        elif cell.cell_type == "code":
            cell.outputs = [output for output in cell.get("outputs", []) if not _is_parameters_table(output)]
            for output in cell.outputs:
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


def print_pdf(
    html_path: Path,
    pdf_path: Path,
    *,
    chromium: str | None = None,
    timeout_s: float = 180.0,
    cancelled: threading.Event | None = None,
) -> Path:
    """Print a rendered page to PDF with headless Chromium, offline, and return ``pdf_path``.

    Chromium runs in its own process group, which is killed as a whole (its renderer and GPU
    helpers too) when ``cancelled`` is set, on Ctrl-C in this thread, and after ``timeout_s``
    [s]; a check every 0.1 s, so an interrupted render does not wait for the printing. The PDF
    is printed to a temporary file beside ``pdf_path`` and moved into place only when whole.

    Raises
    ------
    FileNotFoundError
        No Chromium installed (``sudo apt-get install chromium``).
    RuntimeError
        Chromium failed or wrote no PDF (the message has its last output lines), or
        ``cancelled`` was set.
    subprocess.TimeoutExpired
        Chromium took longer than ``timeout_s``.
    """
    browser = chromium or find_chromium()
    if browser is None:
        raise FileNotFoundError("printing handouts needs Chromium: sudo apt-get install chromium (Debian/Ubuntu)")
    pdf_path = Path(pdf_path)
    printing = pdf_path.with_name(f".{pdf_path.stem}.{secrets.token_hex(6)}.pdf")
    try:
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
                f"--print-to-pdf={printing}",
                Path(html_path).resolve().as_uri(),
            ]
            # its own session: a Ctrl-C at the terminal reaches this process, which kills the group
            chrome = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
            )
            deadline = time.monotonic() + timeout_s
            try:
                while True:
                    try:
                        stdout, stderr = chrome.communicate(timeout=0.1)
                        break
                    except subprocess.TimeoutExpired:
                        if cancelled is not None and cancelled.is_set():
                            raise RuntimeError(f"printing {html_path} stopped: the render was interrupted") from None
                        if time.monotonic() > deadline:
                            raise subprocess.TimeoutExpired(command, timeout_s) from None
            finally:
                if chrome.returncode is None:  # still running: stop it and every helper it started
                    with contextlib.suppress(OSError):
                        os.killpg(chrome.pid, signal.SIGKILL)
                    chrome.communicate()
        if chrome.returncode != 0 or not printing.is_file() or printing.stat().st_size == 0:
            tail = "\n".join((stderr or stdout).strip().splitlines()[-5:])
            raise RuntimeError(f"Chromium could not print {html_path} (exit {chrome.returncode}): {tail}")
        os.replace(printing, pdf_path)
    finally:
        printing.unlink(missing_ok=True)
    return pdf_path
