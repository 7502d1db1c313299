"""A real headless Chromium (Debian's ``chromium``) driven over the DevTools protocol, for page tests.

``open_page(path)`` loads a local HTML file and reports what a person's browser would
show: console messages and uncaught errors, every URL the page asked for (a
self-contained page asks for none but itself), the value of a script evaluated in the
page, and a full-page PNG screenshot. Only the protocol's own websocket is used
(``websockets``), no browser-automation package.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Page:
    """What happened while a page loaded, and the means to ask it more."""

    _socket: Any
    _ids: Iterator[int]
    console: list[dict[str, Any]] = field(default_factory=list)  # {"level", "text"} of every message
    requests: list[str] = field(default_factory=list)  # every URL the page asked for

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One protocol command; the events that arrive meanwhile are recorded."""
        ident = next(self._ids)
        self._socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=60))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._record(message)

    def wait_for(self, event: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self._socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            self._record(message)
            if message.get("method") == event:
                return

    def _record(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append({"level": params.get("type"), "text": text})
        elif method == "Runtime.exceptionThrown":
            self.console.append({"level": "error", "text": params["exceptionDetails"].get("text", "exception")})
        elif method == "Log.entryAdded":
            entry = params["entry"]
            self.console.append({"level": entry.get("level"), "text": entry.get("text", "")})
        elif method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` evaluated in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page (beyond the window's height)."""
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def errors(self) -> list[str]:
        return [m["text"] for m in self.console if m["level"] in ("error", "assert")]


@contextmanager
def open_page(html_file: Path, *, width: int = 1280, height: int = 900) -> Iterator[Page]:
    """Load ``html_file`` in a fresh headless Chromium profile; yield the :class:`Page` once it has loaded."""
    binary = chromium_path()
    if binary is None:
        raise FileNotFoundError(f"no Chromium on PATH (looked for {', '.join(CHROMIUM_NAMES)}): apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="tracerl-chromium-") as profile:
        process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 60
            while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Chromium did not start (exit code {process.poll()})")
                time.sleep(0.05)
            port = port_file.read_text().split()[0]
            with connect(_page_socket(port), max_size=None) as socket:
                page = Page(socket, itertools.count(1))
                for domain in ("Page", "Runtime", "Log", "Network"):
                    page.call(f"{domain}.enable")
                page.call("Page.navigate", url=html_file.resolve().as_uri())
                page.wait_for("Page.loadEventFired")
                yield page
        finally:
            process.terminate()
            process.wait(timeout=30)


def _page_socket(port: str) -> str:
    """The websocket of the browser's first page (the ``about:blank`` it opened)."""
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as reply:
            targets = [t for t in json.load(reply) if t.get("type") == "page"]
        if targets:
            return targets[0]["webSocketDebuggerUrl"]
        if time.monotonic() > deadline:
            raise RuntimeError("Chromium opened no page")
        time.sleep(0.05)
