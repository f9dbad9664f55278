"""``kernelwatch doctor``: is this machine ready? Settings, database, broker, sandbox,
workers, GPU.

A check that raises is ``BAD`` and makes the exit code 1; a check may instead return a
:class:`Warn` (no live worker yet: runs would wait) that is shown but does not fail.
The checks of what a worker here would meet (the sandbox for code under test, NVML, its
queue) run in ``python -m kernelwatch.worker.doctor``, a process of this interpreter: the
command line may not import the worker (import-linter's layers), and a worker started
here would have exactly that environment. A missing or unusable bubblewrap is BAD: every
run would end as an error.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable

from kernelwatch.db.config import get_settings

NAME = "doctor"


class Warn(str):
    """A check's detail that deserves attention but is not a failure."""


Check = tuple[str, Callable[[], str]]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doc = sub.add_parser(
        NAME,
        help="check settings, database, broker, sandbox, workers, GPU, NVML, compiler, versions",
        description="Check that this machine can run kernelwatch: its KW_* settings, "
        "database, broker, the sandbox for code under test (bubblewrap), the worker that "
        "would take this "
        "machine's runs, GPU and NVML, compiler, versions. Exit 0 when nothing is BAD "
        "(warnings do not fail), 1 otherwise.",
    )
    doc.add_argument("--json", action="store_true", help="the checks as JSON")
    doc.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    return run_checks(json_out=args.json)


def _settings() -> str:
    """The ``KW_*`` settings, read once: one bad variable is said here, once, and the
    checks that need the settings (database, broker, workers) are not run."""
    settings = get_settings()
    settings.ensure_dirs()
    return f"KW_* variables valid; data directory {settings.data_dir}"


def _database() -> str:
    from sqlalchemy import text

    from kernelwatch.db.session import default_engine

    with default_engine().connect() as conn:
        conn.execute(text("select 1"))
    return get_settings().resolved_database_url.split("@")[-1]


def _broker() -> str:
    from kernelwatch.jobs.planning.broker import broker_url, make_celery

    settings = get_settings()
    app = make_celery(settings)
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=5)
    return broker_url(settings).split("@")[-1]


def _workers() -> str:
    """The worker this machine's runs would use: a live one serving its queue, or a Warn."""
    from kernelwatch.db.fleet import live_workers
    from kernelwatch.db.migrate import upgrade
    from kernelwatch.db.session import session_factory
    from kernelwatch.jobs.planning.queues import local_device_class, queue_for

    upgrade()
    queue = queue_for(local_device_class())
    with session_factory()() as session:
        workers = live_workers(session)
        serving = [f"{w.name} ({w.state})" for w in workers if queue in w.queues.split(",")]
        others = [
            f"{w.name} [{w.queues or '-'}] {w.state}"
            for w in workers
            if queue not in w.queues.split(",")
        ]
    elsewhere = f"; other live workers: {', '.join(others)}" if others else ""
    if not serving:
        return Warn(
            f"no live worker serves queue {queue}, where runs from this machine go: they "
            "wait until one does; start `kernelwatch worker`, or `kernelwatch serve` on one "
            f"machine{elsewhere}"
        )
    return f"queue {queue} served by " + ", ".join(serving) + elsewhere


def worker_checks(timeout_s: float = 120) -> list[dict[str, object]]:
    """The checks of ``python -m kernelwatch.worker.doctor`` (sandbox, NVML, queue)."""
    proc = subprocess.run(
        [sys.executable, "-m", "kernelwatch.worker.doctor"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    try:
        checks: list[dict[str, object]] = json.loads(proc.stdout)["checks"]
        return [c for c in checks if c["check"] != "queue"]  # _workers names the queue
    except (ValueError, KeyError, TypeError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return [{"check": "sandbox", "ok": False, "warn": False,
                 "detail": f"the worker's checks did not run: {tail[0]}"}]  # fmt: skip


def _gpu() -> str:
    from kernelwatch.jobs.planning.queues import local_device_class, local_gpu_names

    names = local_gpu_names()
    return (
        f"{len(names)} x {names[0]} (queue gpu.{local_device_class()})"
        if names
        else "no GPU: suites run on the CPU under TRITON_INTERPRET=1"
    )


def _compiler() -> str:
    found = []
    for tool in ("git", "cc", "nvcc", "ccache"):
        path = shutil.which(tool)
        if path and tool == "nvcc":
            out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
            found.append(f"nvcc {out.stdout.strip().splitlines()[-1] if out.stdout else '?'}")
        elif path:
            found.append(tool)
    if "git" not in found:
        raise RuntimeError("git not found")
    return ", ".join(found)


def _versions() -> str:
    parts = [f"python {platform.python_version()}"]
    for mod in ("torch", "triton", "celery", "sqlalchemy"):
        try:
            m = __import__(mod)
            parts.append(f"{mod} {getattr(m, '__version__', '?')}")
        except ImportError:
            parts.append(f"{mod} missing")
    return ", ".join(parts)


CHECKS: list[Check] = [
    ("settings", _settings),
    ("database", _database),
    ("broker", _broker),
    ("workers", _workers),
    ("gpu", _gpu),
    ("compiler", _compiler),
    ("versions", _versions),
]


# What cannot be checked without valid settings: reported as not checked, not as three
# more failures with the settings' message.
_NEED_SETTINGS = frozenset({"database", "broker", "workers"})


def run_checks(json_out: bool = False) -> int:
    results: list[dict[str, object]] = []
    ok = True
    settings_ok = True
    for name, fn in CHECKS:
        if name == "workers":  # the worker's own checks first: can it run code at all?
            found = worker_checks()
            ok = ok and all(bool(c["ok"]) for c in found)
            results += found
        if name in _NEED_SETTINGS and not settings_ok:
            results.append({"check": name, "ok": True, "warn": True,
                            "detail": Warn("not checked: the settings are not valid")})  # fmt: skip
            continue
        try:
            detail = fn()
            results.append(
                {"check": name, "ok": True, "warn": isinstance(detail, Warn), "detail": detail}
            )
        except Exception as exc:  # every failure is reported, none stops the others
            ok = False
            settings_ok = settings_ok and name != "settings"
            results.append(
                {
                    "check": name,
                    "ok": False,
                    "warn": False,
                    "detail": f"{type(exc).__name__}: {exc}",
                }
            )
    if json_out:
        print(json.dumps({"ok": ok, "checks": results}, indent=2, default=str))
    else:
        for r in results:
            mark = "BAD" if not r["ok"] else "warn" if r["warn"] else "ok"
            print(f"{mark:<4} {r['check']:<9} {r['detail']}")
    if not ok:
        bad = ", ".join(str(r["check"]) for r in results if not r["ok"])
        print(f"kernelwatch doctor: not ready: {bad}", file=sys.stderr)
    return 0 if ok else 1
