"""The one Chrome DevTools protocol client the browser tests share (rendered reports and a real
JupyterLab), driving Debian's headless ``chromium`` over ``--remote-debugging-pipe``: no
Selenium, no Playwright, no browser download.

Every host but the loopback one is unresolvable (``--host-resolver-rules``), so a page that
tries the network fails the way it would on a machine with none; :meth:`Page.requested_urls`
lists what the page asked for, so a test can also assert it asked for nothing outside.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

TIMEOUT_S = 30.0

#: Chromium as the workplace runs it headless, with nothing resolvable but loopback.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--mute-audio",
    # every host name but localhost fails to resolve, as with no network at all
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
    "--window-size=1200,900",
    "--remote-debugging-pipe",
)


def _high_fd(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class DevTools:
    """A minimal DevTools protocol client: one headless Chromium, commands over a pipe.

    Chromium reads NUL-terminated JSON commands on fd 3 and writes replies and events on fd 4.
    """

    def __init__(self, chromium: str, profile: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium's ends go to fds >= 10, so that moving them to 3 and 4 cannot clobber them
        to_chrome_r, from_chrome_w = (_high_fd(to_chrome_r), _high_fd(from_chrome_w))
        flags = [*CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"]
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

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout_s: float = TIMEOUT_S,
    ) -> dict[str, Any]:
        """Send one command and wait for its reply; events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
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
    """One tab, attached through a flat session, with the Page, Runtime, Network and Log events on."""

    def __init__(self, tools: DevTools) -> None:
        self.tools = tools
        target = tools.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = tools.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            tools.send(f"{domain}.enable", session=self.session)

    def evaluate(self, expression: str, timeout_s: float = TIMEOUT_S) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.tools.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
            session=self.session,
            timeout_s=timeout_s,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        self.tools.send("Page.navigate", {"url": url}, session=self.session)

    def wait_for(self, expression: str, *, what: str, timeout_s: float = TIMEOUT_S, poll_s: float = 0.1) -> Any:
        """Poll a JavaScript expression until it is truthy; return its value."""
        deadline = time.monotonic() + timeout_s
        while not (value := self.evaluate(expression)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not happen within {timeout_s:g} s")
            time.sleep(poll_s)
        return value

    def events(self, method: str) -> list[dict[str, Any]]:
        """This tab's events of one kind, e.g. ``"Runtime.exceptionThrown"``."""
        return [
            e["params"] for e in self.tools.events if e.get("method") == method and e.get("sessionId") == self.session
        ]

    def requested_urls(self) -> list[str]:
        """Every URL the tab asked for so far."""
        return [e["request"]["url"] for e in self.events("Network.requestWillBeSent")]

    def console_errors(self) -> list[str]:
        """The text of every ``console.error`` call and every logged error so far."""
        calls = [
            " ".join(str(arg.get("value", arg.get("description", ""))) for arg in e["args"])
            for e in self.events("Runtime.consoleAPICalled")
            if e.get("type") == "error"
        ]
        logged = [e["entry"]["text"] for e in self.events("Log.entryAdded") if e["entry"].get("level") == "error"]
        return calls + logged
