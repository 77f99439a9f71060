"""Open a rendered report from disk in headless Chromium, with the network unusable, and check
that every chart is drawn and the slider drives its chart.

Uses Debian's ``chromium`` (``sudo apt-get install chromium``) through the Chrome DevTools
protocol over ``--remote-debugging-pipe``: no Selenium, no Playwright, no browser download.
Skips when Chromium is missing, except under CI (``CI`` set), where it fails.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import queue
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from budgetlab.notebook import reports

FIXTURES = Path(__file__).parent / "fixtures" / "notebooks"
CHARTS = "01-fixture-charts"
NUM_CHARTS = 2
TIMEOUT_S = 30.0

pytestmark = [pytest.mark.browser, pytest.mark.notebook]


def _high_fd(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class DevTools:
    """A minimal Chrome DevTools protocol client over ``--remote-debugging-pipe``.

    Chromium reads NUL-terminated JSON commands on fd 3 and writes replies and events on fd 4.
    """

    def __init__(self, chromium: str, profile: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium's ends go to fds >= 10, so that moving them to 3 and 4 cannot clobber them
        to_chrome_r, from_chrome_w = (_high_fd(to_chrome_r), _high_fd(from_chrome_w))
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--no-first-run",
            "--no-default-browser-check",
            "--mute-audio",
            # every network fetch goes to a closed local port and fails
            "--proxy-server=127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            f"--user-data-dir={profile}",
            "--window-size=1200,900",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        # bash moves the two pipe ends to fds 3 and 4, where Chromium expects them
        script = f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w} {to_chrome_r}<&- {from_chrome_w}>&-'
        self.proc = subprocess.Popen(
            ["/bin/bash", "-c", script, chromium, *flags],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        with open(self._from_chrome, "rb", buffering=0) as stream:
            while chunk := stream.read(65536):
                buffer += chunk
                *complete, buffer = buffer.split(b"\0")
                for raw in complete:
                    self._messages.put(json.loads(raw))
        self._messages.put(None)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send one command and wait for its reply; events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._messages.get(timeout=max(0.1, deadline - time.monotonic()))
            if reply is None:
                raise RuntimeError(f"Chromium exited while waiting for {method}")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, queue.Empty, OSError):
            self.send("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        self._reader.join(timeout=5)


class Page:
    """One tab, attached through a flat session."""

    def __init__(self, tools: DevTools) -> None:
        self.tools = tools
        target = tools.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = tools.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            tools.send(f"{domain}.enable", session=self.session)

    def evaluate(self, expression: str) -> Any:
        result = self.tools.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
            session=self.session,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.tools.send("Page.navigate", {"url": url}, session=self.session)
        deadline = time.monotonic() + TIMEOUT_S
        done = (
            "document.readyState === 'complete' && document.querySelectorAll("
            "'div.budgetlab-vega:not([data-vega-status])').length === 0"
        )
        while not self.evaluate(done):
            if time.monotonic() > deadline:
                raise TimeoutError(f"charts on {url} did not finish within {TIMEOUT_S} s")
            time.sleep(0.1)

    def events(self, method: str) -> list[dict[str, Any]]:
        return [
            e["params"] for e in self.tools.events if e.get("method") == method and e.get("sessionId") == self.session
        ]


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


@pytest.fixture(scope="module")
def browser(chromium: str, tmp_path_factory: pytest.TempPathFactory):
    tools = DevTools(chromium, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield tools
    finally:
        tools.close()


@pytest.mark.parametrize("page_name", [f"{CHARTS}.html", f"{CHARTS}-handout.html"])
def test_every_chart_draws_offline_and_the_slider_works(rendered: Path, browser: DevTools, page_name: str) -> None:
    path = rendered / page_name
    source = path.read_text()
    assert not re.search(r"<script\b[^>]*\bsrc\s*=\s*[\"']?https?:", source, re.I)

    page = Page(browser)
    page.open(path.resolve().as_uri())

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
    urls = [e["request"]["url"] for e in page.events("Network.requestWillBeSent")]
    assert urls and all(u.startswith(("file:", "data:", "blob:", "about:")) for u in urls), urls
    assert page.events("Runtime.exceptionThrown") == []
    errors = [e["args"] for e in page.events("Runtime.consoleAPICalled") if e.get("type") == "error"]
    assert errors == []
