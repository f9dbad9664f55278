"""`kernelwatch serve` brings up API, worker, dashboard and beat, and takes them down together."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kernelwatch.jobs.cli.serve import part_env, supervise

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


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = subprocess.run(
            ["pgrep", "-P", str(todo.pop())], capture_output=True, text=True, check=False
        ).stdout.split()
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out


def _gone(pid: int) -> bool:
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


# the crowd half of make test (it starts a worker and servers): the other half was the
# longer one (1314 s against 1166 s on a 2-core machine, 2026-12-05)
@pytest.mark.crowd
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_serve_starts_all_parts_and_stops_them_together(tmp_path: Path, how: str) -> None:
    """SIGTERM: a clean stop; SIGKILL (issue 24): no part, pool child or helper is left."""
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
    everything: list[int] = []
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
        deadline = time.monotonic() + 60
        while len(everything := _descendants(proc.pid)) <= 4:  # the worker's pool child
            assert time.monotonic() < deadline, everything
            time.sleep(0.5)
        proc.send_signal(getattr(signal, how))
        code = proc.wait(timeout=60)
        assert code == (0 if how == "SIGTERM" else -signal.SIGKILL)
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline and not all(_gone(p) for p in everything):
            time.sleep(0.5)
        assert [p for p in everything if not _gone(p)] == []  # every part, and theirs
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in everything:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_worker_started_for_a_command_dies_with_it(tmp_path: Path) -> None:
    """The demo and the tests start a worker of their own (jobs/cli/processes.py); a
    killed test run left one consuming its queue for good, taking other runs' messages."""
    code = (
        "import sys, time\n"
        "from kernelwatch.db.config import Settings\n"
        "from kernelwatch.jobs.cli.processes import start_worker\n"
        "s = Settings(data_dir=sys.argv[1]); s.ensure_dirs()\n"
        "print(start_worker(s, queue='kw-orphan-test', name='orphan').pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "data")], stdout=subprocess.PIPE, text=True
    )
    everything: list[int] = []
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        deadline = time.monotonic() + 60
        while len(everything := [worker, *_descendants(worker)]) < 2:  # its pool child
            assert time.monotonic() < deadline, "the worker did not start its pool"
            time.sleep(0.5)
        parent.kill()  # no clean-up of its own runs
        parent.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(_gone(p) for p in everything):
            time.sleep(0.5)
        assert [p for p in everything if not _gone(p)] == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
        for pid in everything:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_the_parts_link_to_the_dashboard_serve_starts(tmp_path: Path) -> None:
    """``serve --dashboard-port P``: the API's answers, statuses and PR comments linked
    to :8501, where nothing listened (an audit, 2026-12-05); a URL set stays."""
    out = tmp_path / "url"
    probe = "import os, sys; open(sys.argv[1], 'w').write(os.environ['KW_DASHBOARD_URL'])"
    env = part_env({k: v for k, v in os.environ.items() if k != "KW_DASHBOARD_URL"},
                   "0.0.0.0", 8600)  # fmt: skip
    supervise({"probe": [sys.executable, "-c", probe, str(out)]}, poll_s=0.1, env=env)
    assert out.read_text() == "http://127.0.0.1:8600"
    kept = part_env({"KW_DASHBOARD_URL": "https://kw.example.com"}, "127.0.0.1", 8600)
    assert kept["KW_DASHBOARD_URL"] == "https://kw.example.com"
