"""``fleet``: the GPU-host path of the service, end to end, on one machine.

Runs ``benchmarks/gpu/fleet_host.sh`` (its header says every step): the GPU
health check, GPU detection and queue naming, ``kernelwatch worker --per-gpu``
(one Celery worker per GPU, pinned by UUID), one real run of the demo library's
basic suite through planner, broker, worker, environment, suite subprocess and
database, worker heartbeats, a clean stop. Needs the service's wheels carried
as ``.svc/`` (celery, SQLAlchemy, Alembic, pydantic, ...). The JSON holds the
health report, detection, the run's results, heartbeats, the steps and the
script's summary; its whole staging folder travels as ``logs/fleet/fleet.tgz``
inside ``logs.tgz``. On a machine without a GPU the same check runs on the ``cpu`` queue.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "fleet"
HELP = "per-GPU worker check: health, detection, one run through Celery, stop"
STAGING = Path("/tmp/kwfleet")  # fixed in fleet_host.sh
SCRIPT = host.ROOT / "benchmarks" / "gpu" / "fleet_host.sh"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait-s", type=float, default=90, help="how long the run may take")
    p.add_argument("--python", default=None, help="interpreter (default: this one)")


def _load(name: str) -> Any:
    try:
        return json.loads((STAGING / name).read_text())
    except (OSError, ValueError) as exc:
        return {"_missing": str(exc)}


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    import sys

    budget = ctx.limit(300, reserve=10)
    out = ctx.logs / "fleet"
    out.mkdir(exist_ok=True)
    env = {
        "OUT": str(out),
        "KW_FLEET_BUDGET_S": str(int(budget)),
        "KW_FLEET_WAIT_S": str(int(min(args.wait_s, max(10, budget - 55)))),
        "KW_FLEET_PY": args.python or sys.executable,
        "KW_FLEET_WHEELS": str(host.SERVICE_WHEELS),
    }
    step = ctx.run("fleet_host", ["bash", str(SCRIPT)], budget + 10, reserve=0, env=env)
    steps = host.read_jsonl(STAGING / "steps.jsonl")
    summary = host.tail(STAGING / "summary.txt", 200)
    db = _load("db.json")
    result = {
        "rc": step.rc,
        "health": _load("health.json"),
        "detect": _load("detect.json"),
        "submit": _load("submit.json"),
        "runs": db.get("runs") if isinstance(db, dict) else None,
        "results": db.get("results") if isinstance(db, dict) else None,
        "heartbeats": db.get("heartbeats") if isinstance(db, dict) else None,
        "steps": steps,
        "summary": summary,
    }
    failed = [s for s in steps if s.get("rc")]
    table = summary[:14] or [f"fleet_host.sh rc {step.rc}: {' '.join(step.tail)}"]
    table.append(f"steps: {len(steps)}, failed: {[s['step'] for s in failed] or 'none'}")
    return result, table
