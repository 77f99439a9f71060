"""The reports index: ``reports/index.json`` (every report rendered so far, as data) and
``reports/index.html`` (links to each report, handout, results file and notebook, with status).

Each finished report merges its entry into the manifest in the same step that publishes its
files (:func:`index_texts` builds both pages for :func:`budgetlab.notebook.publish.commit`), so
a report and its entry are either both old or both new; reports rendered by earlier runs stay
listed while their executed notebook exists. Renders that finish together merge one after the
other (an ``flock`` on the folder itself, :func:`~budgetlab.notebook.publish.folder_lock`, which
leaves no lock file), and each file is written whole or not at all with the mode of any file
the user writes, so no entry is lost and no reader sees half an index.

Every link is a relative path, percent-quoted, after ``./`` (``./javascript%3Aalert%281%29/…``),
so no scenario or notebook name can become a ``javascript:`` (or any other scheme) URL, and
every text and attribute is HTML-escaped.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from budgetlab.notebook.publish import commit, folder_lock, write_atomically
from budgetlab.notebook.results import headline, load_results

if TYPE_CHECKING:
    from budgetlab.notebook.render import ReportOutcome

__all__ = [
    "INDEX_HTML",
    "INDEX_JSON",
    "index_texts",
    "locked",
    "publish_report",
    "relative_href",
    "write_atomically",
    "write_index",
]

INDEX_HTML = "index.html"
INDEX_JSON = "index.json"


@contextlib.contextmanager
def locked(out_dir: Path) -> Iterator[None]:
    """Hold the exclusive lock on ``out_dir`` (:func:`~budgetlab.notebook.publish.folder_lock`).

    Taken to merge the index, and to move a finished report's files into place, so that two
    renders of one folder, in threads or processes, never interleave either.
    """
    with folder_lock(out_dir):
        yield


def relative_href(relative_path: str) -> str:
    """A link to ``relative_path`` (below the index's folder) as an ``href`` value, unescaped:
    ``./`` then the path percent-quoted (``/`` kept), so it is never read as a URL scheme."""
    return "./" + quote(relative_path, safe="/")


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
        manifest, page = index_texts(out_dir, outcomes, titles=titles, overrides=overrides)
        write_atomically(out_dir / INDEX_JSON, manifest)
        path = out_dir / INDEX_HTML
        write_atomically(path, page)
        return path


def index_texts(
    out_dir: Path,
    outcomes: Sequence[ReportOutcome],
    *,
    titles: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    exists: Callable[[Path], bool] | None = None,
    source: Callable[[Path], Path | None] | None = None,
) -> tuple[str, str]:
    """``index.json`` and ``index.html`` with ``outcomes`` merged in, as text; nothing written.

    Take :func:`locked` around reading and writing them. ``exists`` tells which report files
    will exist once published (default: which do now), for the links and for which earlier
    entries stay listed; ``source`` where a report file's content is to be read now (a staged
    copy, or None when it will not exist; default: the file itself), for each scenario's
    headline numbers (:func:`budgetlab.notebook.results.headline`).
    """
    exists = exists or Path.exists
    source = source or (lambda path: path if path.exists() else None)
    titles = titles or {}
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
        if any(exists(out_dir / key[0] / f"{key[1]}{suffix}.ipynb") for suffix in ("", ".failed"))
    ]
    page = _index_html(out_dir, kept, exists, source)
    return json.dumps({"reports": kept}, indent=2, default=str) + "\n", page


def _whole(path: Path) -> bool:
    """Whether a staged file may be published: present, and parseable when it is JSON (a
    notebook or results file a failed cell or a full disk may have cut short)."""
    if not path.is_file():
        return False
    if path.suffix not in (".json", ".ipynb"):
        return True
    try:
        json.loads(path.read_bytes())
    except ValueError:
        return False
    return True


def publish_report(
    staged: Mapping[str, Path],
    places: Mapping[str, Path],
    *,
    stale: Mapping[str, Path],
    lock_dir: Path,
    index: tuple[ReportOutcome, str, Mapping[str, Any] | None] | None = None,
    cancelled: threading.Event | None = None,
) -> bool:
    """Move a render's files into their places, with its index entry, all or none; one render
    of a folder at a time. Whether it published (not when ``cancelled`` was set meanwhile).

    Under the folder's lock (:func:`locked`), so two renders of the
    same report that finish together leave the files of one of them, not a mix. The index
    (``index``: the outcome, its notebook's title, the ``-p`` overrides) is rewritten with this
    report's entry and moved into place in the same :func:`~budgetlab.notebook.publish.commit`
    as the files: an ``OSError`` part-way puts every file back, and SIGINT or SIGTERM waits
    until it is done. A file this render did not write is removed from its place (no stale
    copy stays), and so are the ``stale`` paths (the ``.failed`` files of an earlier render,
    once this one succeeded). A staged JSON file that does not parse (a notebook or results
    file cut short) is not published.

    Raises
    ------
    OSError
        When a file could not be written or moved; every place is then as it was.
    """
    staging = next(iter(staged.values())).parent
    with locked(lock_dir):
        if cancelled is not None and cancelled.is_set():
            return False
        changes: dict[Path, Path | None] = {places[key]: path if _whole(path) else None for key, path in staged.items()}
        for path in stale.values():
            changes.setdefault(path, None)
        if index is not None:
            outcome, title, overrides = index
            will_exist = {os.path.abspath(place): source is not None for place, source in changes.items()}
            manifest, page = index_texts(
                lock_dir,
                [outcome],
                titles={outcome.notebook: title},
                overrides=overrides,
                exists=lambda path: will_exist.get(os.path.abspath(path), path.exists()),
                source=lambda path: _source_after(changes, path),
            )
            for name, text in ((INDEX_JSON, manifest), (INDEX_HTML, page)):
                write_atomically(staging / f".{name}", text)
                changes[lock_dir / name] = staging / f".{name}"
        commit(changes, staging / ".old")
    return True


def _source_after(changes: Mapping[Path, Path | None], path: Path) -> Path | None:
    """Where ``path``'s content will come from once ``changes`` are committed (its staged copy,
    itself when unchanged, None when it is removed or absent)."""
    wanted = os.path.abspath(path)
    for place, source in changes.items():
        if os.path.abspath(place) == wanted:
            return source
    return path if path.exists() else None


def _scenario_results(
    out_dir: Path, scenario: str, rows: Sequence[Mapping[str, Any]], source: Callable[[Path], Path | None]
) -> dict[str, dict[str, Any]]:
    """The results of a scenario's good reports, by notebook (unreadable files left out)."""
    found: dict[str, dict[str, Any]] = {}
    for e in rows:
        if e.get("status") != "ok":
            continue
        path = source(out_dir / scenario / f"{e['notebook']}.results.json")
        if path is None:
            continue
        with contextlib.suppress(OSError, ValueError):
            results = load_results(path)
            if isinstance(results, dict):
                found[str(e["notebook"])] = results
    return found


def _headline_html(results: Mapping[str, Mapping[str, Any]]) -> str:
    """A scenario's headline numbers as a small table, each labelled with its cost model."""
    try:
        rows = headline(results)
    except (ValueError, TypeError, KeyError):  # an old or hand-edited results file: no headline
        return ""
    if not rows:
        return ""
    esc = html.escape
    body = "".join(
        f'<tr><td>{esc(r["quantity"])}</td><td class="num">{esc(r["value"])}</td>'
        f"<td>{esc(_COST_WORDS.get(r['cost_model'], r['cost_model']))}</td>"
        f"<td><code>{esc(r['notebook'])}</code></td></tr>"
        for r in rows
    )
    return (
        '<table class="headline"><thead><tr><th>The answer</th><th>Value</th><th>Cost model</th>'
        f"<th>From</th></tr></thead><tbody>{body}</tbody></table>"
    )


_COST_WORDS = {
    "": "(setting)",
    "ideal": "ideal (the seeds' roofline)",
    "typical": "typical (calibrated to real vLLM runs)",
}


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
table.headline { width: auto; margin-bottom: 1em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.ok { color: #1a7f37; font-weight: 600; }
.failed { color: #b00020; font-weight: 600; }
.error { color: #b00020; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em;
         white-space: pre-wrap; }
code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9em; }
.muted { color: #777; }
"""


def _index_html(
    out_dir: Path,
    entries: Sequence[Mapping[str, Any]],
    exists: Callable[[Path], bool],
    source: Callable[[Path], Path | None],
) -> str:
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
        parts.append(_headline_html(_scenario_results(out_dir, scenario, rows, source)))
        parts.append(
            "<table><thead><tr><th>Notebook</th><th>Status</th><th>Report</th><th>Handout</th>"
            "<th>Results</th><th>Time</th><th>Notes</th></tr></thead><tbody>"
        )
        for e in rows:
            nb = str(e["notebook"])
            base = f"{scenario}/{nb}"

            def link(rel: str, label: str) -> str:
                if exists(out_dir / rel):
                    return f'<a href="{esc(relative_href(rel))}">{esc(label)}</a>'
                return '<span class="muted">–</span>'

            ok = e.get("status") == "ok"
            if not ok:  # the failed render's partial pages; the last good report stays apart
                if exists(out_dir / f"{base}.html"):
                    last_good = f'<a href="{esc(relative_href(base + ".html"))}">the last good report</a> is kept'
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
