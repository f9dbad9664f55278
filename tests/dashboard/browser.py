"""Dashboard pages in headless Chromium, read over the DevTools protocol once drawn.

One visit a page, no reload: Chromium starts with a debugging port, the test's page is
opened once, and its DOM is read every half second until every expected text is in it,
Streamlit's script run is over and the DOM held still between two reads; then a
screenshot is taken and read from its pixels (blank or drawn). Earlier versions held a
fixed 10-20 s of real time before a one-shot ``--screenshot`` (virtual time does not wait
for Streamlit's websocket), which made every page cost its hold however fast it drew;
a page now costs what it takes to draw, with ``patience_s`` as the bound.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from PIL import Image, ImageStat
from websockets.sync.client import ClientConnection, connect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Headless Chromium on this closed network (every browser test uses these).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1400,1000",
)
# Standard deviation of the grey levels: a blank Streamlit page (white, a spinner) is
# far below this, any page with a title, a sidebar and a table far above.
MIN_STDDEV = 12.0
# Streamlit's status widget shows one of these while a script run is going on.
RUNNING = '[data-testid="stStatusWidgetRunningIcon"], [data-testid="stStatusWidgetRunningManIcon"]'
POLL_S = 0.5


class Tab:
    """One page of a headless Chromium, driven over the DevTools protocol."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events that come first are dropped)."""
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv(timeout=60))
            if message.get("id") != self._id:
                continue
            if "error" in message:
                raise RuntimeError(f"{method}: {message['error']}")
            result: dict[str, Any] = message.get("result", {})
            return result

    def visit(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)[
            "result"
        ].get("value")

    def html(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML") or "")

    def screenshot(self, png: Path) -> float:
        """The page as it is now, written to ``png``; its grey stddev."""
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        png.write_bytes(data)
        with Image.open(io.BytesIO(data)) as img:  # read from memory, not the file again
            return float(ImageStat.Stat(img.convert("L")).stddev[0])


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Terminate ``proc``, killed where it has not ended 10 s later."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _page_socket(profile: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The DevTools websocket of Chromium's first page.

    The port is the first line of ``DevToolsActivePort`` in the profile. Chromium
    writes that file when its DevTools server listens; the page list is read until it
    holds a page, in case the first page comes later (a race not seen here, guarded).
    """
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = port_file.read_text().splitlines() if port_file.exists() else []
        if lines and lines[0].isdigit():
            url = f"http://127.0.0.1:{int(lines[0])}/json/list"
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    targets = json.loads(r.read())
            except OSError:
                targets = []
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
        if proc.poll() is not None:
            raise RuntimeError(f"chromium ended ({proc.returncode}) before it had a page")
        time.sleep(0.1)
    raise RuntimeError(f"chromium had no page to drive within {timeout_s:.0f} s")


@contextmanager
def open_tab(profile: Path, flags: Sequence[str] = FLAGS) -> Iterator[Tab]:
    """A headless Chromium on ``profile`` with one blank page, closed when the block ends."""
    assert CHROMIUM is not None
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "DevToolsActivePort").unlink(missing_ok=True)
    proc = subprocess.Popen(
        [CHROMIUM, *flags, f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        socket_url = _page_socket(profile, proc, timeout_s=60)
        with connect(socket_url, max_size=None, open_timeout=30) as ws:
            yield Tab(ws)
    finally:
        _end(proc)


def settled_page(
    url: str,
    png: Path,
    profile: Path,
    expect: Sequence[str] = (),
    flags: Sequence[str] = FLAGS,
    patience_s: float = 120.0,
) -> tuple[str, float, float]:
    """One visit to ``url``: its DOM, the screenshot's grey stddev and the seconds it took.

    Drawn means every text of ``expect`` is in the DOM, Streamlit's script run is over,
    the DOM did not change over the last read and the screenshot is not blank. Past
    ``patience_s`` the page is taken as it is (the caller's assertions say what is
    missing). A loaded 2-core CI host once took more than 10 s to draw a cold server's
    first page (2026-12-01); a page that never draws is what the bound is for.
    """
    t0 = time.monotonic()
    with open_tab(profile, flags) as tab:
        tab.visit(url)
        last = None
        while True:
            time.sleep(POLL_S)
            try:
                dom = tab.html()
                running = bool(tab.evaluate(f"!!document.querySelector('{RUNNING}')"))
            except RuntimeError:  # the document was being replaced: read it again
                dom, running = "", True
            steady = dom == last and not running and all(e in dom for e in expect)
            last = dom
            late = time.monotonic() - t0 >= patience_s
            if steady or late:
                sd = tab.screenshot(png)
                if sd > MIN_STDDEV or late:
                    return dom, sd, time.monotonic() - t0


@contextmanager
def dashboard_server(database_url: str, root: Path) -> Iterator[str]:
    """``kernelwatch dashboard``'s server on a free loopback port, until the block ends.

    The first request it gets is the test's (no warm-up): a new user's first page must
    be drawn (issue 18).
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("KW_")}
    env.update(KW_DATABASE_URL=database_url, KW_DATA_DIR=str(root))
    log_path = root / "streamlit.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kernelwatch.dashboard.server",  # `kernelwatch dashboard`
             "--server.headless", "true", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                        if r.read() == b"ok":
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit did not start:\n{log_path.read_text()}")
                time.sleep(0.3)
            yield base
        finally:
            _end(proc)
