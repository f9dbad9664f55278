"""`kernelwatch serve` brings up API, worker, dashboard and beat, and takes them down together."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except OSError:
        return 0


def test_serve_starts_all_parts_and_stops_them_together(tmp_path: Path) -> None:
    api, dash = _free_port(), _free_port()
    env = {**os.environ, "KW_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kernelwatch.jobs.cli.main",
            "serve",
            "--port",
            str(api),
            "--dashboard-port",
            str(dash),
            "--queues",
            "cpu",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if (
                _get(f"http://127.0.0.1:{api}/healthz") == 200
                and _get(f"http://127.0.0.1:{dash}/_stcore/health") == 200
            ):
                break
            time.sleep(0.5)
        else:
            raise AssertionError("api and dashboard did not come up")
        children = subprocess.run(
            ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert len(children) == 4  # api, worker, dashboard, beat
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # beat validates its schedule, then becomes celery
            cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children]
            if any(b"kernelwatch.jobs.planning.beat_app" in c for c in cmdlines):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"no beat among the parts: {cmdlines}")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        time.sleep(1)
        for pid in children:  # every part is gone with the supervisor
            assert (
                not Path(f"/proc/{pid}").exists()
                or "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
            )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
