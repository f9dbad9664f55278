"""Screenshots of dashboard pages in headless Chromium after a real-time wait.

Chromium's ``--virtual-time-budget`` runs the clock forward whenever no HTTP request is
pending, and Streamlit draws over a websocket, which does not count: a page whose
script run takes a second can be captured blank however large the budget. Here the
page is framed by a loopback page that also fetches a slow ``/hold`` URL; the pending
fetch keeps virtual time in step with real time for ``hold_s`` seconds, so one visit
(no reload) gets that long to draw. Blank or drawn is then read from the pixels.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
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


def stddev(png: Path) -> float:
    """How much the picture varies (0 for a blank one); 0 when there is no picture."""
    if not png.exists():
        return 0.0
    with Image.open(png) as img:
        return float(ImageStat.Stat(img.convert("L")).stddev[0])
