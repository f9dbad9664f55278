"""Screenshots of dashboard pages in headless Chromium after a real-time wait.

Chromium's ``--virtual-time-budget`` runs the clock forward whenever no HTTP request is
pending, and Streamlit draws over a websocket, which does not count: a page whose
script run takes a second can be captured blank however large the budget. Here the
page is framed by a loopback page that also fetches a slow ``/hold`` URL; the pending
fetch keeps virtual time in step with real time for ``hold_s`` seconds, so one visit
(no reload) gets that long to draw. Blank or drawn is then read from the pixels.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from PIL import Image, ImageStat

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
    "--window-size=1400,1000",
    "--run-all-compositor-stages-before-draw",
)
# Standard deviation of the grey levels: a blank Streamlit page (white, a spinner) is
# far below this, any page with a title, a sidebar and a table far above.
MIN_STDDEV = 12.0


def dump_dom(
    url: str,
    expect: list[str],
    profile: Path,
    flags: tuple[str, ...] = FLAGS,
    patience_s: float = 150.0,
) -> str:
    """The page's DOM once every text of ``expect`` is in it, or the last try's.

    ``--dump-dom`` runs on virtual time, which does not wait for Streamlit's websocket:
    on a loaded 2-core CI machine a dashboard's first page stayed blank through three
    tries of growing budget (2026-11-30, and the trend page on 2026-12-03). So tries
    go on, each with a larger budget up to 60 s and 5 s of real time between them,
    until the page is drawn or ``patience_s`` of real time has passed.
    """
    assert CHROMIUM is not None
    dom, budget = "", 15_000
    deadline = time.monotonic() + patience_s
    while True:
        dom = subprocess.run(
            [CHROMIUM, *flags, f"--user-data-dir={profile}", f"--virtual-time-budget={budget}",
             "--dump-dom", url],
            capture_output=True, text=True, timeout=180, check=False,
        ).stdout  # fmt: skip
        if all(e in dom for e in expect) or time.monotonic() >= deadline:
            return dom
        budget = min(2 * budget, 60_000)
        time.sleep(5)


@contextmanager
def frame_server(target: str, hold_s: float) -> Iterator[str]:
    """A loopback page framing ``target`` that holds the clock for ``hold_s`` seconds."""
    page = (
        f'<html><body style="margin:0"><iframe src="{target}" style="border:0;width:1400px;'
        'height:1000px"></iframe><script>fetch("/hold")</script></body></html>'
    )

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/hold"):
                time.sleep(hold_s)
                body = b"ok"
            else:
                body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def screenshot(url: str, png: Path, profile: Path, hold_s: float = 12.0) -> float:
    """One visit to ``url``, a screenshot after ``hold_s`` real seconds; its grey stddev."""
    assert CHROMIUM is not None
    with frame_server(url, hold_s) as wrapper:
        subprocess.run(
            [
                CHROMIUM,
                *FLAGS,
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=600000",
                f"--screenshot={png}",
                wrapper,
            ],
            capture_output=True,
            timeout=hold_s + 120,
            check=False,
        )
    return stddev(png)


def drawn(url: str, png: Path, profile: Path, hold_s: float = 12.0, again_s: float = 30.0) -> float:
    """``screenshot``, visited once more with a longer hold where the first picture is
    blank: on a loaded 2-core host a page once took longer than its hold to draw (the
    runs page of ``test_new_user_session``), and a page that never draws stays blank."""
    sd = screenshot(url, png, profile, hold_s)
    if sd > MIN_STDDEV:
        return sd
    return screenshot(url, png, profile.with_name(profile.name + "-again"), again_s)


def stddev(png: Path) -> float:
    """How much the picture varies (0 for a blank one); 0 when there is no picture."""
    if not png.exists():
        return 0.0
    with Image.open(png) as img:
        return float(ImageStat.Stat(img.convert("L")).stddev[0])


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
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
