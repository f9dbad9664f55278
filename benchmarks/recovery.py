"""Recovery time of a run after ``kill -9`` of its worker, with the default settings.

    python benchmarks/recovery.py                    # main, group, child; ~10 min
    python benchmarks/recovery.py --modes group --json docs/data/recovery.json

For each mode a fresh pair of real ``kernelwatch worker`` processes (a victim and a
rescuer) serves a private ``redis-server`` (AOF) and a fresh PostgreSQL database,
with the fleet's default knobs (heartbeat 30 s, lease stale after 95 s, visibility
timeout 5,100 s) and the reconciler of the API process at its defaults (every 30 s).
A run whose first case sleeps 40 s is planned on the victim; once it runs, the
victim is killed:

- ``main``: SIGKILL of the Celery main process only (its pool child is orphaned);
- ``group``: SIGKILL of the whole process group (main and pool child);
- ``child``: SIGKILL of the pool child only (the main process sees it die).

Reported: seconds from the kill until the run is held by a live worker again
(``runs.worker`` changed or ``attempts`` grew), until it is final, its final
state, and how many results each case has (1 = nothing lost, nothing duplicated).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelwatch.db.migrate import upgrade  # noqa: E402
from kernelwatch.db.models import FINAL_STATES  # noqa: E402
from kernelwatch.jobs.planning.reconcile import ReconcileConfig, ReconcilerThread  # noqa: E402
from tests.conftest import create_pg_database, drop_pg_database  # noqa: E402
from tests.worker.test_fleet import Fleet, RedisServer, library, wait_until  # noqa: E402

DEFAULTS = {
    "KW_HEARTBEAT_S": "30",
    "KW_SUITE_TIMEOUT_S": "1800",
    "KW_VISIBILITY_TIMEOUT_S": "5100",  # install + suite + 1,200 + 300: the default
    "KW_HEALTH_RECHECK_S": "300",
}


def pool_children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(entry))
    return out


def one(root: Path, mode: str) -> dict[str, Any]:
    url = create_pg_database("kw_recovery")
    upgrade(url)
    redis = RedisServer(root / "redis")
    redis.start()
    fleet = Fleet(root, url, redis)
    reconciler = ReconcilerThread(fleet.factory, fleet.app, ReconcileConfig())
    try:
        src, sha = library(root, f"lib_{mode}", sleep={"softmax": 40.0})
        victim = fleet.worker("victim", **DEFAULTS)
        fleet.wait_ready(victim)
        run_id = fleet.plan(src, sha, bench_args=["--budget", "0.05"], case_timeout_s=120)
        rescuer = fleet.worker("rescuer", **DEFAULTS)
        fleet.wait_ready(rescuer)
        reconciler.start()
        wait_until("the run on the victim", lambda: fleet.run(run_id).status == "running", 120)
        time.sleep(3)  # inside the first (sleeping) case
        before = fleet.run(run_id)
        killed_at = time.monotonic()
        if mode == "group":
            victim.kill_group()
        elif mode == "main":
            os.kill(victim.proc.pid, signal.SIGKILL)
            victim.proc.wait(timeout=10)
        else:
            (child,) = pool_children(victim.proc.pid)
            os.kill(child, signal.SIGKILL)

        def taken_over() -> bool:
            run = fleet.run(run_id)
            return run.status in FINAL_STATES or (
                run.status == "running"
                and (run.worker != before.worker or run.attempts > before.attempts)
            )

        wait_until("the run to be taken over", taken_over, 900, every=1)
        held_s = time.monotonic() - killed_at
        fleet.wait_status([run_id], FINAL_STATES, 900)
        final_s = time.monotonic() - killed_at
        run = fleet.run(run_id)
        per_case = fleet.results_per_case([run_id])
        return {
            "mode": mode,
            "held_again_s": round(held_s, 1),
            "final_s": round(final_s, 1),
            "status": run.status,
            "attempts": run.attempts,
            "worker": run.worker,
            "results_per_case": sorted(set(per_case.values())),
            "cases": len(per_case),
        }
    finally:
        reconciler.stop()
        fleet.close()
        redis.stop()
        drop_pg_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="child,main,group")
    parser.add_argument("--root", type=Path, default=Path("/tmp/kw-recovery"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    for mode in args.modes.split(","):
        root = args.root / f"{mode}-{int(time.time())}"
        root.mkdir(parents=True)
        results.append(one(root, mode))
        print(json.dumps(results[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
