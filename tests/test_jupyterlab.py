"""A real JupyterLab, started as ``make lab`` starts it, driven in headless Chromium with every
host but loopback unresolvable: open a notebook, Run All, and check that every chart drew,
that a slider redraws its chart, and that nothing was asked of the network. Notebook 03 has the
budget slider; notebook 01 has six charts of every kind the step-cost pages draw (layers,
facets, a legend-bound selection). ``test_notebooks.py`` checks that every notebook's charts
carry the Vega 5 spec this test sees drawn.

JupyterLab draws the ``application/vnd.vega.v5+json`` output of budgetlab's renderer with the
Vega it ships; after drawing, its renderer stores a PNG of the chart in the output (its own
``image/png``), so a chart whose output gained a PNG is one JupyterLab drew.

Skips when Chromium or JupyterLab is missing, except under CI (``CI`` set), where it fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from devtools import DevTools, Page
from test_notebooks import SMALL

from budgetlab.notebook.lab import LOOPBACK, lab_arguments, lab_environment

# floors: JupyterLab 4.0 must draw the Vega 5 spec too (make test-min runs it)
pytestmark = [pytest.mark.browser, pytest.mark.notebook, pytest.mark.slow, pytest.mark.floors]

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
#: notebook -> the labels of the sliders it shows
SLIDERS = {"03-ttft-vs-budget": ["Token budget"], "01-step-cost": []}
START_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 300.0


def _jupyterlab_or_skip() -> None:
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        message = "JupyterLab is needed for the JupyterLab browser test: pip install -e '.[test]'"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but JupyterLab is missing; {message}")
        pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """JupyterLab on prepared copies of the notebooks (small parameters): ``(base URL, token)``."""
    _jupyterlab_or_skip()
    import papermill

    home = tmp_path_factory.mktemp("jupyterlab")
    root = home / "notebooks"
    root.mkdir()
    for name in SLIDERS:
        papermill.execute_notebook(
            str(NOTEBOOKS_DIR / f"{name}.ipynb"),
            str(root / f"{name}.ipynb"),
            parameters=SMALL.get(name, {}),
            prepare_only=True,
            progress_bar=False,
        )
    # every cell drawn, not only those in view, so that every chart can be checked
    settings = home / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    # a fresh profile, in the environment make lab gives JupyterLab (no news question)
    env = {
        **lab_environment(),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "IPYTHONDIR": str(home / "ipython"),
    }
    port, token = _free_port(), secrets.token_hex(16)
    arguments = [
        *lab_arguments(root, port=port, token=token, open_browser=False),
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, to run the cells
    ]
    log = (home / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", *arguments],
        env=env,
        cwd=home,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    base = f"http://{LOOPBACK}:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with {server.returncode}:\n{(home / 'server.log').read_text()}")
            with (
                contextlib.suppress(urllib.error.URLError, ConnectionError),
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as reply,
            ):
                if reply.status == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer within {START_TIMEOUT_S:g} s")
            time.sleep(0.5)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


APP_READY = """
(() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  return !!(panel && panel.sessionContext && panel.content && panel.content.widgets.length
            && panel.sessionContext.session && panel.sessionContext.session.kernel
            && panel.sessionContext.session.kernel.status === "idle");
})()
"""

RUN_ALL = """
(async () => {
  const app = window.jupyterapp;
  await app.shell.currentWidget.sessionContext.ready;
  app.commands.execute("notebook:run-all-cells");
  return true;
})()
"""

#: Once every code cell has run: each code cell's prompt number and errors, and each chart
#: output's mime types (JupyterLab adds image/png to an output once it has drawn it).
CELLS = """
(() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets.filter(cell => cell.model.type === "code");
  return cells.map(cell => {
    const outputs = cell.model.outputs.toJSON();
    return {
      count: cell.model.executionCount,
      running: cell.node.querySelector(".jp-InputPrompt").textContent.includes("*"),
      errors: outputs.filter(o => o.output_type === "error").map(o => o.ename + ": " + o.evalue),
      charts: outputs.filter(o => o.data && o.data["application/vnd.vega.v5+json"])
                     .map(o => Object.keys(o.data).sort()),
    };
  });
})()
"""

DRAWN = """
(() => Array.from(document.querySelectorAll(".jp-OutputArea-output.jp-RenderedVegaCommon5")).map(div => ({
  canvas: div.querySelectorAll("canvas").length,
  svg: div.querySelectorAll("svg.marks").length,
  sliders: Array.from(div.querySelectorAll(".vega-bindings input[type=range]"))
                .map(r => r.closest("label") ? r.closest("label").textContent.trim() : r.name),
  text: div.textContent.slice(0, 200),
})))()
"""

# the pixels of the chart that holds the slider, before and after moving it to its minimum
SLIDE = """
(async () => {
  const slider = document.querySelector(".jp-RenderedVegaCommon5 .vega-bindings input[type=range]");
  const chart = slider.closest(".jp-RenderedVegaCommon5");
  const pixels = () => Array.from(chart.querySelectorAll("canvas")).map(c => c.toDataURL()).join("|");
  const before = pixels();
  const start = slider.value;
  slider.value = slider.min;
  slider.dispatchEvent(new Event("input", { bubbles: true }));
  await new Promise(resolve => setTimeout(resolve, 1000));
  return { start, moved_to: slider.value, min: slider.min, changed: pixels() !== before };
})()
"""


@pytest.mark.parametrize("notebook", list(SLIDERS))
def test_jupyterlab_runs_the_notebook_and_draws_every_chart_offline(
    lab: tuple[str, str], browser: DevTools, notebook: str
) -> None:
    base, token = lab
    page = Page(browser)
    page.navigate(f"{base}/lab/tree/{notebook}.ipynb?token={token}")
    page.wait_for(APP_READY, what="JupyterLab opening the notebook with an idle kernel", timeout_s=START_TIMEOUT_S)
    page.evaluate(RUN_ALL)
    cells = page.wait_for(
        f"(() => {{ const c = {CELLS}; return c.every(x => x.count !== null && !x.running) && c; }})()",
        what=f"Run All of {notebook}",
        timeout_s=RUN_TIMEOUT_S,
        poll_s=1.0,
    )
    assert [e for cell in cells for e in cell["errors"]] == []
    charts = [chart for cell in cells for chart in cell["charts"]]
    assert charts, f"{notebook} showed no chart"
    # no Altair HTML (it would load Vega from a CDN), and every chart drawn by JupyterLab's Vega
    assert all("text/html" not in chart for chart in charts), charts
    page.wait_for(
        f"(() => {{ const c = {CELLS}; return c.flatMap(x => x.charts).every(m => m.includes('image/png')); }})()",
        what="JupyterLab drawing every chart",
    )
    drawn = page.evaluate(DRAWN)
    assert len(drawn) == len(charts)
    assert all(d["canvas"] + d["svg"] >= 1 for d in drawn), drawn
    assert "Error loading script" not in page.evaluate("document.body.textContent")

    # the sliders are there, and moving one redraws its chart
    sliders = [s for d in drawn for s in d["sliders"]]
    assert len(sliders) == len(SLIDERS[notebook]), sliders
    assert all(want in got for want, got in zip(SLIDERS[notebook], sliders, strict=True)), sliders
    if sliders:
        moved = page.evaluate(SLIDE)
        assert moved["moved_to"] == moved["min"] != moved["start"], moved
        assert moved["changed"], "moving the slider did not redraw its chart"

    # no toast asking whether to fetch Jupyter's news (the fresh profile would ask without
    # make lab's settings; by now the announcements plugin has long been activated)
    assert "official Jupyter news" not in page.evaluate("document.body.textContent")

    # nothing asked of any host but this JupyterLab, and no script failed
    outside = [
        u for u in page.requested_urls() if not u.startswith((base, f"ws://{LOOPBACK}:", "data:", "blob:", "about:"))
    ]
    assert outside == []
    assert page.events("Runtime.exceptionThrown") == []
