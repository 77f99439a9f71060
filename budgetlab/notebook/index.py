"""The reports index: ``reports/index.json`` (every report rendered so far, as data) and
``reports/index.html`` (links to each report, handout, results file and notebook, with status).

Each run merges its outcomes into the manifest; reports rendered by earlier runs stay listed
while their executed notebook exists. Renders that finish together merge one after the other
(an exclusive lock on ``index.lock``), and each file is written whole or not at all (a temporary
file moved into place), so no entry is lost and no reader sees half an index.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from budgetlab.notebook.render import ReportOutcome

__all__ = ["INDEX_HTML", "INDEX_JSON", "locked", "write_index"]

INDEX_HTML = "index.html"
INDEX_JSON = "index.json"


@contextlib.contextmanager
def locked(out_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out_dir/index.lock`` (POSIX ``flock``; no lock elsewhere).

    Taken to merge the index, and to move a finished report's files into place, so that two
    renders of one folder, in threads or processes, never interleave either.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "index.lock", "a+b") as handle:
        try:
            import fcntl
        except ImportError:  # Windows: renders of one folder from one process only
            yield
            return
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: a temporary file beside it, then ``os.replace``."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _load_manifest(out_dir: Path) -> list[dict[str, Any]]:
    try:
        entries = json.loads((out_dir / INDEX_JSON).read_text(encoding="utf-8"))["reports"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [e for e in entries if isinstance(e, dict) and {"scenario", "notebook"} <= set(e)]


def write_index(
    out_dir: Path,
    outcomes: Sequence[ReportOutcome],
    *,
    titles: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Path:
    """Merge ``outcomes`` into ``out_dir/index.json`` and rewrite ``out_dir/index.html``.

    Reports rendered by earlier runs stay listed while their notebook file exists. A failed
    render links its partial pages (``<notebook>.failed.*``) and, when there is one, the last
    good report, which a failure never replaces.
    """
    out_dir = Path(out_dir)
    with locked(out_dir):
        return _merge_and_write(out_dir, outcomes, titles=titles or {}, overrides=overrides)


def _merge_and_write(
    out_dir: Path,
    outcomes: Sequence[ReportOutcome],
    *,
    titles: Mapping[str, str],
    overrides: Mapping[str, Any] | None,
) -> Path:
    now = datetime.now(UTC).isoformat(timespec="seconds")
    entries = {(e["scenario"], e["notebook"]): e for e in _load_manifest(out_dir)}
    for o in outcomes:
        entries[(o.scenario, o.notebook)] = {
            "scenario": o.scenario,
            "notebook": o.notebook,
            "title": titles.get(o.notebook, ""),
            "status": o.status,
            "seconds": round(o.seconds, 2),
            "error": o.error,
            "overrides": {k: v for k, v in (overrides or {}).items() if k in o.parameters},
            "rendered_at": now,
        }
    kept = [
        entries[key]
        for key in sorted(entries)
        if any((out_dir / key[0] / f"{key[1]}{suffix}.ipynb").exists() for suffix in ("", ".failed"))
    ]
    write_atomically(out_dir / INDEX_JSON, json.dumps({"reports": kept}, indent=2, default=str) + "\n")
    path = out_dir / INDEX_HTML
    write_atomically(path, _index_html(out_dir, kept))
    return path


_INDEX_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto;
       max-width: 1100px; padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.6em; margin-bottom: .2em; }
h2 { font-size: 1.2em; margin-top: 1.8em; }
p.lead { color: #555; margin-top: 0; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .35em .6em; border-bottom: 1px solid #ddd;
         vertical-align: top; }
th { background: #f4f4f6; font-weight: 600; }
td.links { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.ok { color: #1a7f37; font-weight: 600; }
.failed { color: #b00020; font-weight: 600; }
.error { color: #b00020; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em;
         white-space: pre-wrap; }
code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em; }
.muted { color: #777; }
"""


def _index_html(out_dir: Path, entries: Sequence[Mapping[str, Any]]) -> str:
    esc = html.escape
    by_scenario: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        by_scenario.setdefault(str(e["scenario"]), []).append(e)
    failed = sum(1 for e in entries if e.get("status") != "ok")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>budgetlab reports</title>",
        f"<style>{_INDEX_CSS}</style></head><body>",
        "<h1>budgetlab reports</h1>",
        f'<p class="lead">{len(entries)} report{"s" * (len(entries) != 1)} in '
        f"{len(by_scenario)} scenario{'s' * (len(by_scenario) != 1)}"
        + (f', <span class="failed">{failed} failed</span>' if failed else "")
        + ". Every page opens offline. Rebuild with <code>make reports</code> or "
        "<code>python -m budgetlab.reports</code>.</p>",
    ]
    for scenario, rows in by_scenario.items():
        parts.append(f'<h2 id="{esc(scenario)}">Scenario <code>{esc(scenario)}</code></h2>')
        parts.append(
            "<table><thead><tr><th>Notebook</th><th>Status</th><th>Report</th><th>Handout</th>"
            "<th>Results</th><th>Time</th><th>Notes</th></tr></thead><tbody>"
        )
        for e in rows:
            nb = str(e["notebook"])
            base = f"{scenario}/{nb}"

            def link(rel: str, label: str) -> str:
                if (out_dir / rel).exists():
                    return f'<a href="{esc(rel)}">{esc(label)}</a>'
                return '<span class="muted">–</span>'

            ok = e.get("status") == "ok"
            if not ok:  # the failed render's partial pages; the last good report stays apart
                if (out_dir / f"{base}.html").exists():
                    last_good = f'<a href="{esc(base)}.html">the last good report</a> is kept'
                else:
                    last_good = ""
                base = f"{base}.failed"
            title = str(e.get("title") or "")
            name_cell = f"<code>{esc(nb)}</code>" + (f"<br>{esc(title)}" if title else "")
            notes = []
            if e.get("overrides"):
                shown = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in e["overrides"].items())
                notes.append(f"<code>-p {esc(shown)}</code>")
            if e.get("error"):
                notes.append(f'<span class="error">{esc(str(e["error"]))}</span>')
            if not ok and last_good:
                notes.append(last_good)
            parts.append(
                "<tr>"
                f"<td>{name_cell}</td>"
                f'<td class="{"ok" if ok else "failed"}">{"ok" if ok else "FAILED"}</td>'
                f"<td>{link(base + '.html', 'report')}</td>"
                f"<td>{link(base + '-handout.html', 'handout')} · {link(base + '-handout.pdf', 'PDF')}</td>"
                f'<td class="links">{link(base + ".results.json", "JSON")} · '
                f"{link(base + '.ipynb', 'ipynb')}</td>"
                f'<td class="num">{float(e.get("seconds") or 0):.1f} s</td>'
                f"<td>{'<br>'.join(notes)}</td>"
                "</tr>"
            )
        parts.append("</tbody></table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
