"""``kernelwatch serve``: API, worker, dashboard and beat on one machine, as one command.

Each part runs as its own ``kernelwatch`` process (the worker must be a separate
process anyway, and the dashboard is a Streamlit server); this supervisor starts
them, runs database migrations first, and stops all of them when it is stopped
or when any one of them exits, so a half-running service never lingers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from types import FrameType

from kernelwatch.jobs.lifetime import die_with_parent, stop_group

PARTS = ("api", "worker", "dashboard", "beat")
NAME = "serve"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sv = sub.add_parser(
        NAME,
        help="api + worker + dashboard + beat on one machine",
        description="Run the API, a worker, the dashboard and beat (scheduled runs) on this "
        "machine as one command (database migrated first); stopping it, or any part "
        "exiting, stops all.",
    )
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8000, help="API port (default 8000)")
    sv.add_argument(
        "--dashboard-port", type=int, default=8501, help="dashboard port (default 8501)"
    )
    sv.add_argument("--queues", help="worker queues (default: this machine's class)")
    sv.add_argument(
        "--no-beat", action="store_true", help="no scheduled runs (when beat runs elsewhere)"
    )
    sv.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.db.migrate import upgrade

    upgrade()
    argvs = part_argvs(args.port, args.dashboard_port, args.host, args.queues)
    if args.no_beat:
        del argvs["beat"]
    return supervise(argvs, env=part_env(os.environ, args.host, args.dashboard_port))


def part_env(environ: Mapping[str, str], host: str, dashboard_port: int) -> dict[str, str]:
    """The parts' environment: ``KW_DASHBOARD_URL``, where unset, names the dashboard this
    command starts. Without it ``serve --dashboard-port 8600`` linked the API's answers,
    commit statuses and PR comments to :8501, where nothing listened (an audit)."""
    env = dict(environ)
    if not env.get("KW_DASHBOARD_URL"):
        shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
        shown = f"[{shown}]" if ":" in shown else shown
        env["KW_DASHBOARD_URL"] = f"http://{shown}:{dashboard_port}"
    return env


def part_argvs(
    api_port: int, dashboard_port: int, host: str, queues: str | None
) -> dict[str, list[str]]:
    base = [sys.executable, "-m", "kernelwatch.jobs.cli.main"]
    worker = [*base, "worker"] + (["--queues", queues] if queues else [])
    return {
        "api": [*base, "api", "--host", host, "--port", str(api_port)],
        "worker": worker,
        "dashboard": [*base, "dashboard", "--address", host, "--port", str(dashboard_port)],
        "beat": [*base, "beat"],
    }


def supervise(
    argvs: dict[str, list[str]], poll_s: float = 0.5, env: Mapping[str, str] | None = None
) -> int:
    """Start every part; when one exits or we get SIGTERM/SIGINT, stop the others.

    Each part leads a process group of its own and gets SIGTERM if this supervisor
    dies (``kill -9``); stopping a part stops its whole group, so a worker's pool
    child or a dashboard's helper goes with it (issue 24).
    """
    procs = {
        name: subprocess.Popen(
            argv,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),
            env=None if env is None else dict(env),
        )
        for name, argv in argvs.items()
    }
    stopping = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    code = 0
    try:
        while not stopping:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    print(
                        f"kernelwatch serve: {name} exited ({proc.returncode}); stopping",
                        file=sys.stderr,
                    )
                    code = proc.returncode or 1
                    stopping = True
                    break
            time.sleep(poll_s)
    finally:
        _stop_all(procs.values())
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def _stop_all(procs: Iterable[subprocess.Popen[bytes]], grace_s: float = 30) -> None:
    """SIGTERM every part's process group, SIGKILL what is left after ``grace_s``."""
    procs = list(procs)
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        stop_group(p.pid, grace_s=max(0.1, deadline - time.monotonic()))
        if p.poll() is None:
            p.kill()
        p.wait()
