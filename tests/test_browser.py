"""Open a rendered report from disk in headless Chromium, with the network unusable, and check
that every chart is drawn and the slider drives its chart.

Uses Debian's ``chromium`` (``sudo apt-get install chromium``) through the DevTools client in
``tests/devtools.py``, which the JupyterLab test shares. Skips when Chromium is missing, except
under CI (``CI`` set), where it fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from devtools import DevTools, Page

from budgetlab.notebook import reports

FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"
CHARTS = "01-fixture-charts"
NUM_CHARTS = 2

# floors: the report as nbconvert and vl-convert at their floors write it (make test-min runs it too)
pytestmark = [pytest.mark.browser, pytest.mark.notebook, pytest.mark.floors]

CHARTS_DONE = (
    "document.readyState === 'complete' && document.querySelectorAll("
    "'div.budgetlab-vega:not([data-vega-status])').length === 0"
)

CHART_STATE = """
(() => Array.from(document.querySelectorAll("div.budgetlab-vega")).map(div => ({
  status: div.getAttribute("data-vega-status"),
  svg: div.querySelectorAll("svg.marks").length,
  canvas: div.querySelectorAll("canvas").length,
  marks: div.querySelectorAll(
    "svg.marks [class^='mark-'] path, svg.marks [class^='mark-'] line").length,
  ranges: div.querySelectorAll("input[type=range]").length,
  error: (div.querySelector(".budgetlab-vega-error") || {}).textContent || null,
})))()
"""

STEELBLUE_BARS = "document.querySelectorAll('div.budgetlab-vega svg.marks path[fill=\"steelblue\"]').length"

MOVE_SLIDER = """
(async () => {
  const slider = document.querySelector("div.budgetlab-vega input[type=range]");
  slider.value = "0";
  slider.dispatchEvent(new Event("input", { bubbles: true }));
  await new Promise(resolve => setTimeout(resolve, 500));
  return slider.value;
})()
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("browser") / "reports"
    (outcome,) = reports.render([CHARTS], notebooks_dir=FIXTURES, out_dir=out)
    assert outcome.ok, outcome.error
    return out / "small"


@pytest.mark.parametrize("page_name", [f"{CHARTS}.html", f"{CHARTS}-handout.html"])
def test_every_chart_draws_offline_and_the_slider_works(rendered: Path, browser: DevTools, page_name: str) -> None:
    path = rendered / page_name
    source = path.read_text()
    assert not re.search(r"<script\b[^>]*\bsrc\s*=\s*[\"']?https?:", source, re.I)

    page = Page(browser)
    page.navigate(path.resolve().as_uri())
    page.wait_for(CHARTS_DONE, what=f"drawing the charts of {page_name}")

    charts = page.evaluate(CHART_STATE)
    assert len(charts) == NUM_CHARTS
    for i, chart in enumerate(charts):
        assert chart["status"] == "ok", f"chart {i}: {chart['error']}"
        assert chart["svg"] + chart["canvas"] >= 1, f"chart {i} has no Vega output"
        assert chart["marks"] > 0, f"chart {i} drew no marks"
    assert [c["ranges"] for c in charts] == [0, 1]  # the second chart's slider

    # the slider is live: at threshold 6 of 0..11 seven bars are blue, at 0 only one
    assert page.evaluate(STEELBLUE_BARS) == 7
    assert page.evaluate(MOVE_SLIDER) == "0"
    assert page.evaluate(STEELBLUE_BARS) == 1

    # nothing was fetched from the network, and no script failed
    urls = page.requested_urls()
    assert urls and all(u.startswith(("file:", "data:", "blob:", "about:")) for u in urls), urls
    assert page.events("Runtime.exceptionThrown") == []
    assert page.console_errors() == []
