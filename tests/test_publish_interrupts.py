"""Publishing reports: atomic with the index entry under SIGINT/SIGTERM and write errors, safe links,
file modes, no lock file or staging folder left behind, terminal-safe output, prompt PDF stop.

The interrupt trials render three tiny notebooks (no charts, no budgetlab import in the kernel),
written here, through the command line, and stop it with SIGINT or SIGTERM at seeded random
moments.
"""

from __future__ import annotations

import contextlib
import errno
import html.parser
import io
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

from budgetlab.notebook import publish, reports
from budgetlab.notebook.index import INDEX_HTML, INDEX_JSON, index_texts, write_index
from budgetlab.notebook.render import ReportOutcome

FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"
FAILS = "02-fixture-fails"
HOSTILE_SCENARIO = "javascript:alert(1)"


def run_main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = reports.main(list(argv))
    return code, out.getvalue(), err.getvalue()


class _Markup(html.parser.HTMLParser):
    """Every start tag with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def link_problems(page: str) -> list[str]:
    """Script-capable links and event-handler attributes in a page, read by an HTML parser."""
    parser = _Markup()
    parser.feed(page)
    problems = []
    for tag, attrs in parser.tags:
        for name, value in attrs:
            if name.startswith("on"):
                problems.append(f"<{tag} {name}=...>")
            link = name in ("href", "src", "action", "formaction") and value is not None
            if link and (urlsplit(str(value).strip()).scheme or not str(value).startswith("./")):
                problems.append(f"<{tag} {name}={value!r}>")
    return problems


def _outcome(out_dir: Path, scenario: str, notebook: str, *, ok: bool = True) -> ReportOutcome:
    folder = out_dir / scenario
    folder.mkdir(parents=True, exist_ok=True)
    base = notebook if ok else f"{notebook}.failed"
    for suffix in (".ipynb", ".html", "-handout.html", ".results.json", "-handout.pdf"):
        (folder / f"{base}{suffix}").write_text("{}", encoding="utf-8")
    return ReportOutcome(
        notebook=notebook, scenario=scenario, ok=ok, seconds=1.0, ipynb_path=folder / f"{base}.ipynb",
        html_path=folder / f"{base}.html", handout_path=folder / f"{base}-handout.html",
        results_path=folder / f"{base}.results.json", parameters={"x": 1},
        error=None if ok else '<img src=x onerror="alert(2)">',
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# the index: links, escaping, file modes, no lock file


def test_index_links_are_relative_quoted_paths_never_script_urls(tmp_path: Path) -> None:
    notebook = '01-"><img src=x onerror=alert(1)>'
    outcomes = [
        _outcome(tmp_path, HOSTILE_SCENARIO, notebook),
        _outcome(tmp_path, "data:text", "02-x", ok=False),
    ]
    manifest, page = index_texts(tmp_path, outcomes, titles={notebook: "<script>alert(3)</script>"})
    assert link_problems(page) == []
    parser = _Markup()
    parser.feed(page)
    allowed = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "span", "code", "table"}
    allowed |= {"thead", "tbody", "tr", "th", "td", "a", "br"}
    assert {tag for tag, _ in parser.tags} <= allowed
    hrefs = [value or "" for tag, attrs in parser.tags if tag == "a" for name, value in attrs if name == "href"]
    assert "./javascript%3Aalert%281%29/01-%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E.html" in hrefs
    # every link leads to the file it names
    for href in hrefs:
        assert (tmp_path / unquote(href[2:])).is_file(), href
    assert {e["scenario"] for e in json.loads(manifest)["reports"]} == {HOSTILE_SCENARIO, "data:text"}


def test_index_files_get_the_mode_of_any_file_and_no_lock_file_stays(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        write_index(tmp_path, [_outcome(tmp_path, "s", "n")])
        (tmp_path / "plain").write_text("x", encoding="utf-8")
    finally:
        os.umask(previous)
    expected = (tmp_path / "plain").stat().st_mode & 0o777
    assert expected == 0o640
    for name in (INDEX_HTML, INDEX_JSON):
        assert (tmp_path / name).stat().st_mode & 0o777 == expected, name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([INDEX_HTML, INDEX_JSON, "plain", "s"])


# --------------------------------------------------------------------------------------------
# the publishing step


def _changes(tmp_path: Path, count: int) -> tuple[dict[Path, Path | None], list[Path]]:
    staging, folder = tmp_path / "staging", tmp_path / "out"
    staging.mkdir()
    folder.mkdir()
    changes: dict[Path, Path | None] = {}
    places = []
    for i in range(count):
        place = folder / f"f{i}"
        place.write_text(f"old {i}", encoding="utf-8")
        (staging / f"f{i}").write_text(f"new {i}", encoding="utf-8")
        changes[place] = staging / f"f{i}"
        places.append(place)
    changes[folder / "gone"] = None
    (folder / "gone").write_text("old gone", encoding="utf-8")
    return changes, [*places, folder / "gone"]


def test_a_move_that_fails_puts_every_file_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    changes, places = _changes(tmp_path, 4)
    before = {p: p.read_text(encoding="utf-8") for p in places}
    real_replace, calls = os.replace, []

    def replace(source: object, target: object) -> None:
        calls.append(target)
        if len(calls) == 3:  # the folder turned read-only part-way
            raise OSError(errno.EROFS, "Read-only file system", str(target))
        real_replace(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(publish.os, "replace", replace)
    with pytest.raises(OSError, match="Read-only"):
        publish.commit(changes, tmp_path / "staging" / ".old")
    assert {p: p.read_text(encoding="utf-8") for p in places} == before  # f0, f1 put back


def test_sigint_and_sigterm_wait_for_the_publishing_step(tmp_path: Path) -> None:
    changes, places = _changes(tmp_path, 3)
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    # as from a terminal: a shell without job control (CI) starts background jobs with SIGINT ignored
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), publish.signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert seen == []  # held
            publish.commit(changes, tmp_path / "staging" / ".old")
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    assert seen == [signal.SIGTERM]
    assert [p.read_text(encoding="utf-8") for p in places[:-1]] == [f"new {i}" for i in range(3)]


def test_only_stale_staging_folders_are_removed(tmp_path: Path) -> None:
    stale = tmp_path / f"{publish.STAGING_PREFIX}01-a.abc"
    (stale / ".old").mkdir(parents=True)
    (stale / publish.OWNER).write_text("", encoding="utf-8")
    no_owner = tmp_path / f"{publish.STAGING_PREFIX}02-b.def"  # not ours (or being made): kept
    no_owner.mkdir()
    users = tmp_path / ".my-notes"
    users.mkdir()
    (users / publish.OWNER).write_text("", encoding="utf-8")
    with publish.Staging(tmp_path, "03-c") as live:
        # a killed render's folder: its flock went with its process
        killed = subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; from budgetlab.notebook.publish import "
             "Staging; s = Staging(Path(sys.argv[1]), '04-d'); print(s.path, flush=True); import os; "
             "os.kill(os.getpid(), 9)", str(tmp_path)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        killed_path = Path(killed.stdout.strip())
        assert killed_path.is_dir() and killed.returncode == -9
        removed = publish.remove_stale_staging(tmp_path)
        assert sorted(removed) == sorted([stale, killed_path])
        assert live.path.is_dir() and no_owner.is_dir() and users.is_dir()
    assert not live.path.exists()


# --------------------------------------------------------------------------------------------
# the terminal and the PDF printer


def test_terminal_safe_escapes_every_control_sequence() -> None:
    hostile = "a\x1b]0;owned\x07b\x1b[31mc\x9b1md\x7fe\nf\u202eg"
    safe = reports.terminal_safe(hostile)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c == "\u202e" for c in safe)
    assert safe == "a\\x1b]0;owned\\x07b\\x1b[31mc\\x9b1md\\x7fe\\nf\\u202eg"
    assert reports.terminal_safe("h100-llama-3.1-8b · é") == "h100-llama-3.1-8b · é"


def test_a_hostile_scenario_file_name_sends_no_escape_to_the_terminal(tmp_path: Path) -> None:
    notebooks = tmp_path / "notebooks"
    shutil.copytree(FIXTURES, notebooks)
    shutil.copy(notebooks / "params" / "small.yaml", notebooks / "params" / "\x1b]0;owned\x07\x1b[2J.yaml")
    code, out, err = run_main("--list", "--notebooks-dir", str(notebooks))
    assert code == 0 and "\\x1b]0;owned\\x07" in out
    code, out2, err2 = run_main("-s", "\x1b]2;x\x07", "--notebooks-dir", str(notebooks))
    assert code == 2
    for text in (out, err, out2, err2):
        assert "\x1b" not in text and "\x07" not in text


def _running_with(marker: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(proc.name))
    return found


@pytest.mark.slow
def test_printing_stops_promptly_when_the_render_is_interrupted(tmp_path: Path, chromium: str) -> None:
    from budgetlab.notebook.handout import print_pdf

    page = tmp_path / "busy-page-7f3a.html"
    page.write_text("<!DOCTYPE html><p>busy</p><script>for (;;) {}</script>", encoding="utf-8")
    cancelled = threading.Event()
    threading.Timer(1.5, cancelled.set).start()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="interrupted"):
        print_pdf(page, tmp_path / "busy.pdf", chromium=chromium, cancelled=cancelled)
    assert time.monotonic() - start < 10  # not the 180 s timeout
    time.sleep(0.2)
    assert _running_with(str(page.name)) == []  # the whole process group is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == [page.name]  # no partial PDF


# --------------------------------------------------------------------------------------------
# write errors part-way (kernels start)


@pytest.mark.notebook
def test_a_full_disk_mid_run_is_one_line_and_publishes_nothing_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from budgetlab.notebook import render as render_module

    real = render_module.write_atomically

    def full_disk(path: Path, data: str | bytes) -> None:
        if path.name.endswith("-handout.html"):
            path.write_text(str(data)[: len(data) // 2], encoding="utf-8")  # what a full disk leaves
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(render_module, "write_atomically", full_disk)
    code, stdout, stderr = run_main(FAILS, "--notebooks-dir", str(FIXTURES), "--out", str(tmp_path), "--no-pdf")
    assert code == 2, stdout + stderr
    assert "Traceback" not in stdout + stderr
    (line,) = stderr.strip().splitlines()
    assert line.startswith(f"error: cannot write reports into {tmp_path / 'small'}/: No space left on device")
    folder = tmp_path / "small"
    assert list(folder.iterdir()) == []  # no .failed-handout.html, nothing else, no staging
    assert not (tmp_path / INDEX_JSON).exists()


# --------------------------------------------------------------------------------------------
# SIGINT and SIGTERM at random moments of a multi-report render (kernels start)

NOTEBOOKS = ("01-alpha", "02-beta", "03-gamma")
FIRST_TIME = "03-gamma"  # not in the earlier render


def _tiny_notebook(name: str, pause_s: float) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    parameters = nbformat.v4.new_code_cell('value: int = 0  # [1]\nresults_path: str = ""  # [path]')
    parameters.metadata["tags"] = ["parameters"]
    nb.cells = [
        nbformat.v4.new_markdown_cell(f"# {name}"),
        parameters,
        nbformat.v4.new_code_cell(f"import json, time\ntime.sleep({pause_s})\nprint('value', value)"),
        nbformat.v4.new_code_cell(
            "if results_path:\n    with open(results_path, 'w') as f:\n        json.dump({'value': value}, f)"
        ),
    ]
    return nb


@pytest.fixture(scope="module")
def earlier_render(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    """(notebooks folder, reports folder of an earlier render with value 1, its wall time [s])."""
    root = tmp_path_factory.mktemp("interrupts")
    notebooks = root / "notebooks"
    (notebooks / "params").mkdir(parents=True)
    for i, name in enumerate(NOTEBOOKS):
        nbformat.write(_tiny_notebook(name, 0.5 + 0.5 * i), notebooks / f"{name}.ipynb")
    (notebooks / "params" / f"{HOSTILE_SCENARIO}.yaml").write_text("value: 1\n", encoding="utf-8")
    out = root / "earlier"
    run = _start(NOTEBOOKS[:2], notebooks, out)
    start = time.monotonic()
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stdout + stderr
    return notebooks, out, time.monotonic() - start


def _start(names: tuple[str, ...], notebooks: Path, out: Path, *options: str) -> subprocess.Popen[str]:
    """The command line rendering ``names``, returned once it has said what it renders."""
    run = subprocess.Popen(
        [sys.executable, "-m", "budgetlab.reports", *names, "--notebooks-dir", str(notebooks),
         "--out", str(out), "--no-pdf", "-j", "2", *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as from a terminal
    )  # fmt: skip
    assert run.stdout is not None
    first = run.stdout.readline()
    assert first.startswith("Rendering"), first + run.communicate()[1]
    return run


def _snapshot(out: Path) -> tuple[dict[str, dict[str, bytes]], dict[str, dict]]:
    """Each report's files (name -> bytes) and index entry, by notebook."""
    folder = out / HOSTILE_SCENARIO
    files: dict[str, dict[str, bytes]] = {name: {} for name in NOTEBOOKS}
    for path in folder.iterdir() if folder.is_dir() else []:
        owner = next((n for n in NOTEBOOKS if path.name.startswith(n)), None)
        if owner:
            files[owner][path.name] = path.read_bytes()
    index = json.loads((out / INDEX_JSON).read_text(encoding="utf-8"))["reports"] if (out / INDEX_JSON).exists() else []
    return files, {e["notebook"]: e for e in index}


def _is_new(files: dict[str, bytes], entry: dict | None, name: str) -> bool:
    if entry is None or entry.get("overrides") != {"value": 2} or entry.get("status") != "ok":
        return False
    expected = {f"{name}{s}" for s in (".ipynb", ".html", "-handout.html", ".results.json")}
    if set(files) != expected or json.loads(files[f"{name}.results.json"]) != {"value": 2}:
        return False
    cells = json.loads(files[f"{name}.ipynb"])["cells"]
    injected = [c for c in cells if "injected-parameters" in c["metadata"].get("tags", [])]
    return len(injected) == 1 and "value = 2" in "".join(injected[0]["source"])


# each trial waits for one moment of the render, then for a random time after it [s]: start-up
# (kernels starting), the kernels running, the first report just published (the second is
# finishing), the second published (the third running or publishing)
MOMENTS = {
    "start-up": ("Rendering", 3.0),
    "running": ("started", 3.0),
    "first": ("[1/3]", 1.0),
    "second": ("[2/3]", 1.5),
}


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "seed", "moment"),
    [(signal.SIGINT, 11, "start-up"), (signal.SIGTERM, 12, "running"), (signal.SIGINT, 13, "first"),
     (signal.SIGTERM, 14, "second")],
)  # fmt: skip
def test_an_interrupt_at_any_moment_leaves_each_report_and_its_entry_old_or_new(
    earlier_render: tuple[Path, Path, float], tmp_path: Path, signum: int, seed: int, moment: str
) -> None:
    notebooks, earlier, wall_s = earlier_render
    old_files, old_index = _snapshot(earlier)
    # the earlier render's links are safe although its scenario is named like a script URL
    assert link_problems((earlier / INDEX_HTML).read_text(encoding="utf-8")) == []
    out = tmp_path / "reports"
    shutil.copytree(earlier, out)
    # a staging folder a killed render left: removed at start
    leftover = out / HOSTILE_SCENARIO / f"{publish.STAGING_PREFIX}01-alpha.zzz"
    leftover.mkdir()
    (leftover / publish.OWNER).write_text("", encoding="utf-8")
    marker, spread_s = MOMENTS[moment]
    delay_s = random.Random(seed).uniform(0.0, spread_s)
    run = _start(NOTEBOOKS, notebooks, out, "-p", "value", "2")
    assert run.stdout is not None and run.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=lambda: [*map(lines.put, run.stdout), lines.put(None)], daemon=True)  # type: ignore[arg-type]
    reader.start()
    seen = ["Rendering"]
    deadline = time.monotonic() + 120
    while not any(marker in line for line in seen) and time.monotonic() < deadline:
        line = lines.get(timeout=120)
        if line is None:
            break  # the render finished first
        seen.append(line)
    time.sleep(delay_s)
    with contextlib.suppress(ProcessLookupError):
        os.kill(run.pid, signum)
    try:
        run.wait(timeout=300)  # three test tiers side by side on two cores: a kernel may still be starting
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)  # leave no process behind for later tests
        run.wait()
        pytest.fail(f"the render did not stop within 300 s of signal {signum} ({delay_s:.1f} s after {marker!r})")
    reader.join(timeout=10)
    stdout, stderr = "".join(seen) + "".join(iter(lambda: lines.get_nowait() or "", "")), run.stderr.read()
    run.stdout.close()
    run.stderr.close()
    # 128 + signal: stopped by us; -signal: before the render began (the default action)
    assert run.returncode in (0, 128 + signum, -signum), stdout + stderr
    assert "Traceback" not in stderr, stderr
    files, index = _snapshot(out)
    states = {}
    for name in NOTEBOOKS:
        if name == FIRST_TIME and not files[name] and name not in index:
            states[name] = "absent"
        elif files[name] == old_files[name] and index.get(name) == old_index.get(name):
            states[name] = "old"
        elif _is_new(files[name], index.get(name), name):
            states[name] = "new"
        else:
            pytest.fail(f"{name} is a mix after a signal at {delay_s:.1f} s: {sorted(files[name])}, {index.get(name)}")
    print(f"signal {signum} {delay_s:.1f} s after {marker!r} ({wall_s:.1f} s before): {states}, exit {run.returncode}")
    if run.returncode == 0:
        assert set(states.values()) == {"new"}
    leftovers = [p.name for p in (out / HOSTILE_SCENARIO).iterdir() if p.name.startswith(".")]
    assert leftovers == []
    assert sorted(p.name for p in out.iterdir()) == sorted([HOSTILE_SCENARIO, INDEX_HTML, INDEX_JSON])
    assert link_problems((out / INDEX_HTML).read_text(encoding="utf-8")) == []
