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

Issue 17 (one worker per GPU, several cards): ``--runs R`` submits R runs at once
(distinct commits: none joins another) of ``--suite`` (default basic; ``noop`` for
runs that cost only their overhead), ``--runs-per-gpu K`` makes R = K x the GPUs
``nvidia-smi`` lists. The JSON's ``fleet`` holds runs finished / lost (no row left) /
unfinished (still queued or running when the wait ended) / duplicated (two result rows
for one (run, case)), each run's worker and the card UUID its
records carry, runs per worker, throughput (runs/s from the first start to the last
finish) and p50/p99 of queue to start (created -> started) and of start to finish.

    python -m benchmarks.gpu fleet --runs-per-gpu 4 --suite noop
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "fleet"
HELP = "per-GPU worker check: health, detection, one run through Celery, stop"
STAGING = Path("/tmp/kwfleet")  # fixed in fleet_host.sh
SCRIPT = host.ROOT / "benchmarks" / "gpu" / "fleet_host.sh"


NVLS_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wait-s",
        type=float,
        default=None,
        help="how long the runs may take (default 90, +30 per further run a worker gets)",
    )
    p.add_argument("--python", default=None, help="interpreter (default: this one)")
    p.add_argument("--runs", type=int, default=1, help="runs submitted at once (default 1)")
    p.add_argument("--runs-per-gpu", type=int, default=None, help="R = this x the GPUs")
    p.add_argument("--suite", default="basic", help="suite(s) of the runs, comma-separated")


def _gpus() -> int:
    smi = host.nvidia_smi()
    return len(smi) if isinstance(smi, list) else 0


def plan_runs(runs: int, per_gpu: int | None, gpus: int, wait_s: float | None) -> tuple[int, float]:
    """(runs to submit, seconds to wait for them): one worker per GPU (one on the CPU)."""
    n = max(1, per_gpu * max(1, gpus) if per_gpu else runs)
    if wait_s is None:
        rounds = math.ceil(n / max(1, gpus))
        wait_s = 90.0 + 30.0 * (rounds - 1)
    return n, wait_s


def _load(name: str) -> Any:
    try:
        return json.loads((STAGING / name).read_text())
    except (OSError, ValueError) as exc:
        return {"_missing": str(exc)}


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    import sys

    gpus = 0 if ctx.cpu else _gpus()
    runs, wait_s = plan_runs(args.runs, args.runs_per_gpu, gpus, args.wait_s)
    budget = ctx.limit(max(300.0, wait_s + 80), reserve=10)
    out = ctx.logs / "fleet"
    out.mkdir(exist_ok=True)
    env = {
        "OUT": str(out),
        "KW_FLEET_BUDGET_S": str(int(budget)),
        "KW_FLEET_WAIT_S": str(int(min(wait_s, max(10, budget - 55)))),
        "KW_FLEET_PY": args.python or sys.executable,
        "KW_FLEET_WHEELS": str(host.SERVICE_WHEELS),
        "KW_FLEET_RUNS": str(runs),
        "KW_FLEET_SUITE": args.suite,
        **NVLS_OFF,  # the supervisor, its workers and what they start inherit them
    }
    step = ctx.run("fleet_host", ["bash", str(SCRIPT)], budget + 10, reserve=0, env=env)
    steps = host.read_jsonl(STAGING / "steps.jsonl")
    summary = host.tail(STAGING / "summary.txt", 200)
    db = _load("db.json")
    stats = _load("stats.json")
    result = {
        "rc": step.rc,
        "runs_asked": runs,
        "suite": args.suite,
        "gpus_seen": gpus,
        "wait_s": env["KW_FLEET_WAIT_S"],
        "fleet": stats,
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
    table += fleet_table(stats)
    table.append(f"steps: {len(steps)}, failed: {[s['step'] for s in failed] or 'none'}")
    return result, table


def fleet_table(st: dict[str, Any]) -> list[str]:
    """The issue-17 figures of ``stats.json`` as a few lines (nothing if it is missing)."""
    if not isinstance(st, dict) or "planned" not in st:
        return [f"fleet stats: none ({st.get('_missing', 'no runs submitted')})"[:200]]
    q, f = st["queue_to_start_s"], st["start_to_finish_s"]
    lines = [
        f"runs {st['planned']} ({','.join(st.get('suites') or [])}) on {st['cards']} card(s), "
        f"{st['workers_planned']} worker(s): finished {st['finished']}, succeeded "
        f"{st['succeeded']}, lost {len(st['lost'])}, unfinished {len(st.get('unfinished') or {})}, "
        f"duplicated {len(st['duplicated'])}, "
        f"attempts>1 {len(st['retried'])}",
        f"throughput {st['throughput_runs_per_s']} runs/s over {st['span_s']} s; "
        f"queue->start p50/p99 {q['p50']}/{q['p99']} s; start->finish p50/p99 "
        f"{f['p50']}/{f['p99']} s",
        "per worker: "
        + ", ".join(f"{k} {v}" for k, v in sorted(st["runs_per_worker"].items()))
        + f"; card UUIDs in records: {len(st['cards_used'])}; "
        f"UUID != pin: {st['uuid_mismatch'] or 'none'}",
    ]
    return lines
