"""``kernelwatch doctor``: is this machine ready? Database, broker, GPU, compiler, versions."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from collections.abc import Callable

from kernelwatch.db.config import get_settings

Check = tuple[str, Callable[[], str]]


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
    ("database", _database),
    ("broker", _broker),
    ("gpu", _gpu),
    ("compiler", _compiler),
    ("versions", _versions),
]


def run_checks(json_out: bool = False) -> int:
    results = []
    ok = True
    for name, fn in CHECKS:
        try:
            results.append({"check": name, "ok": True, "detail": fn()})
        except Exception as exc:  # every failure is reported, none stops the others
            ok = False
            results.append({"check": name, "ok": False, "detail": f"{type(exc).__name__}: {exc}"})
    if json_out:
        print(json.dumps({"ok": ok, "checks": results}, indent=2))
    else:
        for r in results:
            print(f"{'ok ' if r['ok'] else 'BAD'}  {r['check']:<9} {r['detail']}")
    return 0 if ok else 1
