"""Fleet benchmark: many short runs through Redis, PostgreSQL and real worker processes.

    python benchmarks/fleet.py                       # 500 runs, 4 workers, 20 idle probes
    python benchmarks/fleet.py --runs 100 --workers 2 --json docs/data/fleet-bench.json

It starts a private ``redis-server`` (AOF, as deploy/compose.yaml runs it), a fresh
PostgreSQL database and ``--workers`` real ``kernelwatch worker`` processes sharing
one data directory (one host, several GPUs: one git mirror and its lock). Each run
measures a library's ``noop`` suite (two cases of a tensor copy, ``--budget 0.0005``
so a record carries ~100 samples, like a real GPU record), so a run costs its
overhead only: claim, git mirror sync and worktree, the suite subprocess (Python +
torch import), two result writes, analysis, the heartbeat and the ack.

Phases:

1. **burst**: ``--runs`` runs committed at once and enqueued (as planning does,
   without git resolution) - throughput, queue wait (enqueue → start), the
   worker's *pickup gap* (its previous run finished → its next run started: ack,
   fetch, heartbeat, claim) and service time;
2. **idle**: ``--idle`` runs sent one at a time to idle workers - dispatch latency
   (enqueue → start) without a queue in front;
3. **exactly once**: every run succeeded, has exactly its 2 cases, no duplicate
   (run, case) rows, attempts = 1;
4. **micro**: publish/consume rate of the broker alone and result-row write rate
   of PostgreSQL alone (GPU-sized records from docs/data), the ceilings that
   docs/scale.md extrapolates from.

Prints Markdown tables; ``--json`` writes every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from benchmarks.gpu.host import free_port
from kernelwatch.db.config import Settings
from kernelwatch.db.fleet import WorkerHeartbeat, beat
from kernelwatch.db.migrate import upgrade
from kernelwatch.db.models import Result, Run
from kernelwatch.db.session import make_engine
from kernelwatch.db.store import get_or_create_repository, store_record, upsert_commit
from kernelwatch.jobs.planning.broker import enqueue_run, make_celery
from kernelwatch.kernels.record import ResultRecord

PG_ADMIN_URL = os.environ.get(
    "KW_BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REPO_ROOT = Path(__file__).resolve().parents[1]
GPU_RECORDS = REPO_ROOT / "docs" / "data" / "bench-h200-2026-11-29.jsonl"
CASES_PER_RUN = 2
BENCH_ARGS = ["--budget", "0.0005"]

LIBRARY = {
    "nooplib/__init__.py": "def noop(x, out):\n    out.copy_(x)\n",
    ".kernelwatch.toml": (
        '[library]\nname = "nooplib"\nmodule = "nooplib"\n'
        '[install]\nrecipe = "pythonpath"\n[suites]\nnames = ["noop"]\n'
    ),
}


# ----------------------------------------------------------------------------- services


@contextmanager
def redis_server(root: Path) -> Iterator[str]:
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(root)]
    argv += ["--appendonly", "yes", "--save", ""]
    log = open(root / "redis.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        import redis

        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis(port=port, socket_timeout=1).ping()
                break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@contextmanager
def pg_database(keep: bool) -> Iterator[str]:
    name = f"kw_fleet_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        upgrade(url)
        yield url
    finally:
        if not keep:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def make_library(root: Path) -> tuple[str, str]:
    path = root / "nooplib"
    path.mkdir(parents=True)
    for name, content in LIBRARY.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(content)
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "noop"], cwd=path, check=True)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=path, check=True, capture_output=True, text=True
    ).stdout.strip()
    return str(path), sha


def start_workers(n: int, env: dict[str, str], logs: Path) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(n):
        argv = [sys.executable, "-m", "kernelwatch.jobs.cli.main", "worker", "--queues", "cpu"]
        argv += ["--name", f"bench{i}@%h", "--loglevel", "WARNING"]
        with open(logs / f"worker{i}.log", "ab") as log:
            procs.append(
                subprocess.Popen(
                    argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
    return procs


def wait_ready(factory: sessionmaker[Session], n: int, since: datetime, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with factory() as s:
            ready = s.scalar(
                select(func.count())
                .select_from(WorkerHeartbeat)
                .where(WorkerHeartbeat.started >= since, WorkerHeartbeat.stopped.is_(None))
            )
        if ready == n:
            return
        time.sleep(0.5)
    raise TimeoutError(f"workers not ready after {timeout:.0f} s")


# ----------------------------------------------------------------------------- phases


def new_runs(factory: sessionmaker[Session], source: str, sha: str, n: int) -> list[int]:
    with factory() as s, s.begin():
        repo = get_or_create_repository(s, "nooplib", source)
        commit = upsert_commit(s, repo, sha, [])
        runs = [
            Run(
                repository_id=repo.id,
                commit_id=commit.id,
                suites=["noop"],
                trigger="push",
                options={"bench_args": BENCH_ARGS},
            )
            for _ in range(n)
        ]
        s.add_all(runs)
        s.flush()
        return [r.id for r in runs]


def wait_final(factory: sessionmaker[Session], ids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with factory() as s:
            left = s.scalar(
                select(func.count()).where(Run.id.in_(ids), Run.status.in_(["queued", "running"]))
            )
        if not left:
            return
        time.sleep(1.0)
    raise TimeoutError(f"{left} runs not final after {timeout:.0f} s")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def run_rows(factory: sessionmaker[Session], ids: list[int]) -> list[Run]:
    with factory() as s:
        return list(s.scalars(select(Run).where(Run.id.in_(ids)).order_by(Run.id)))


def burst(
    factory: sessionmaker[Session], app: Any, source: str, sha: str, n: int, timeout: float
) -> dict[str, Any]:
    ids = new_runs(factory, source, sha, n)
    sent: dict[int, float] = {}
    t0 = time.time()
    for run_id in ids:
        sent[run_id] = time.time()
        enqueue_run(app, run_id, "cpu", "push")
    enqueue_s = time.time() - t0
    wait_final(factory, ids, timeout)
    runs = run_rows(factory, ids)
    started = {r.id: r.started.timestamp() for r in runs if r.started}
    finished = {r.id: r.finished.timestamp() for r in runs if r.finished}
    end = max(finished.values())
    ends = sorted(finished.values())
    lo, hi = ends[len(ends) // 10], ends[(len(ends) * 9) // 10]
    by_worker: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by_worker[r.worker or "?"].append(r)
    gaps = []
    for rows in by_worker.values():
        rows.sort(key=lambda r: started[r.id])
        for prev, cur in zip(rows, rows[1:], strict=False):
            gaps.append(started[cur.id] - finished[prev.id])
    wait = [started[i] - sent[i] for i in ids if i in started]
    service = [finished[i] - started[i] for i in ids if i in started and i in finished]
    return {
        "ids": ids,
        "runs": n,
        "enqueue_per_s": n / enqueue_s,
        "wall_s": end - t0,
        "throughput_runs_per_s": n / (end - t0),
        "steady_runs_per_s": (len(ends) * 0.8) / (hi - lo) if hi > lo else float("nan"),
        "queue_wait_p50_s": pct(wait, 50),
        "queue_wait_p99_s": pct(wait, 99),
        "pickup_gap_p50_s": pct(gaps, 50),
        "pickup_gap_p99_s": pct(gaps, 99),
        "service_p50_s": pct(service, 50),
        "service_p99_s": pct(service, 99),
        "per_worker": {w: len(rows) for w, rows in sorted(by_worker.items())},
    }


def idle_latency(
    factory: sessionmaker[Session], app: Any, source: str, sha: str, n: int
) -> dict[str, Any]:
    ids = new_runs(factory, source, sha, n)
    latencies = []
    for run_id in ids:
        t = time.time()
        enqueue_run(app, run_id, "cpu", "pull_request")
        deadline = time.monotonic() + 60
        started = None
        while started is None and time.monotonic() < deadline:
            with factory() as s:
                started = s.scalar(select(Run.started).where(Run.id == run_id))
            if started is None:
                time.sleep(0.005)
        assert started is not None, f"run {run_id} did not start"
        latencies.append(started.timestamp() - t)
        wait_final(factory, [run_id], 60)
    return {
        "ids": ids,
        "runs": n,
        "dispatch_p50_s": pct(latencies, 50),
        "dispatch_p99_s": pct(latencies, 99),
        "dispatch_max_s": max(latencies),
    }


def exactly_once(factory: sessionmaker[Session], ids: list[int]) -> dict[str, Any]:
    with factory() as s:
        states = dict(
            s.execute(
                select(Run.status, func.count()).where(Run.id.in_(ids)).group_by(Run.status)
            ).all()
        )
        per_run = dict(
            s.execute(
                select(Result.run_id, func.count())
                .where(Result.run_id.in_(ids))
                .group_by(Result.run_id)
            ).all()
        )
        dup = s.scalar(
            select(func.count()).select_from(
                select(Result.run_id, Result.case_id)
                .where(Result.run_id.in_(ids))
                .group_by(Result.run_id, Result.case_id)
                .having(func.count() > 1)
                .subquery()
            )
        )
        retried = s.scalar(select(func.count()).where(Run.id.in_(ids), Run.attempts != 1))
    wrong = [i for i in ids if per_run.get(i, 0) != CASES_PER_RUN]
    return {
        "runs": len(ids),
        "states": states,
        "results": sum(per_run.values()),
        "runs_with_wrong_case_count": len(wrong),
        "duplicate_rows": dup,
        "runs_executed_more_than_once": retried,
        "ok": states == {"succeeded": len(ids)} and not wrong and not dup,
    }


def storage(engine_url: str) -> dict[str, Any]:
    engine = make_engine(engine_url)
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT count(*), avg(pg_column_size(r.*)), avg(pg_column_size(r.record)),"
                " avg(pg_column_size(r.samples)), avg(n_samples) FROM results r"
            )
        ).one()
        total = conn.scalar(text("SELECT pg_total_relation_size('results')"))
    engine.dispose()
    return {
        "result_rows": row[0],
        "row_bytes": float(row[1] or 0),
        "record_bytes": float(row[2] or 0),
        "samples_bytes": float(row[3] or 0),
        "samples_per_row": float(row[4] or 0),
        "results_table_bytes": int(total or 0),
    }


# ----------------------------------------------------------------------------- micro


def micro_broker(url: str, n: int) -> dict[str, Any]:
    """Publish ``n`` task-shaped messages with priorities, then drain them with acks."""
    from kombu import Connection

    app = make_celery(Settings(broker_url=url, data_dir=Path(tempfile.gettempdir())))
    queue = "bench.scratch"
    t0 = time.perf_counter()
    for i in range(n):
        app.send_task("kernelwatch.execute_run", args=[i], queue=queue, priority=i % 10)
    publish_s = time.perf_counter() - t0
    opts = dict(app.conf.broker_transport_options)
    got = 0
    t0 = time.perf_counter()
    with Connection(url, transport_options=opts) as conn:
        q = conn.SimpleQueue(queue, no_ack=False)
        while got < n:
            msg = q.get(timeout=5)
            msg.ack()
            got += 1
        q.close()
    consume_s = time.perf_counter() - t0
    return {"messages": n, "publish_per_s": n / publish_s, "consume_ack_per_s": n / consume_s}


def _write_rows(
    factory: sessionmaker[Session],
    records: list[dict[str, Any]],
    todo: list[tuple[int, int]],
    prefix: str,
    workers: int,
) -> float:
    lock = threading.Lock()

    def writer() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i, run_id = todo.pop()
            with factory() as s, s.begin():
                run = s.get(Run, run_id)
                assert run is not None
                rec = dict(records[i % len(records)])
                rec["case_id"] = f"{prefix}{i % len(records):015d}"
                store_record(s, run, ResultRecord.from_dict(rec))

    t0 = time.perf_counter()
    pool = [threading.Thread(target=writer) for _ in range(workers)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - t0


def micro_db(url: str, n: int, threads: int) -> dict[str, Any]:
    """Result rows as the executor writes them (one transaction each), GPU-sized records."""
    records = [json.loads(line) for line in GPU_RECORDS.read_text().splitlines() if line.strip()]
    factory = sessionmaker(bind=make_engine(url, pool_size=threads + 2), expire_on_commit=False)
    with factory() as s, s.begin():
        repo = get_or_create_repository(s, "microlib", "/micro/lib")
        commit = upsert_commit(s, repo, "d" * 40, [])
        runs = [Run(repository_id=repo.id, commit_id=commit.id, suites=["basic"]) for _ in range(n)]
        s.add_all(runs)
        s.flush()
        run_ids = [r.id for r in runs]
    size = sum(len(json.dumps(r)) for r in records) / len(records)
    out: dict[str, Any] = {"record_json_bytes": size, "rows": n}
    for label, workers in (("1_writer", 1), (f"{threads}_writers", threads)):
        elapsed = _write_rows(factory, records, list(enumerate(run_ids)), label[:1], workers)
        out[f"rows_per_s_{label}"] = n / elapsed
        out[f"mb_per_s_{label}"] = n * size * 2 / elapsed / 1e6  # record + samples column
    # heartbeats: one small upsert transaction each
    t0 = time.perf_counter()
    for i in range(n):
        with factory() as s, s.begin():
            beat(s, f"micro{i % 50}@host", state="busy")
    out["heartbeats_per_s_1_writer"] = n / (time.perf_counter() - t0)
    factory.kw["bind"].dispose()
    return out


# ----------------------------------------------------------------------------- main


def table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    lines = [f"| {'figure':<{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {k:<{width}} | {v} |" for k, v in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=500)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--idle", type=int, default=20)
    p.add_argument("--micro", type=int, default=2000, help="messages / rows for the micro phase")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--json", help="write all figures here")
    p.add_argument("--keep", action="store_true", help="keep the database and work directory")
    args = p.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="kw-fleet-bench-"))
    figures: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "config": {"runs": args.runs, "workers": args.workers, "bench_args": BENCH_ARGS},
    }
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with redis_server(root) as broker, pg_database(args.keep) as db:
            settings = Settings(data_dir=root / "planner", database_url=db, broker_url=broker)
            settings.ensure_dirs()
            factory = sessionmaker(bind=make_engine(db), expire_on_commit=False)
            app = make_celery(settings)
            source, sha = make_library(root)
            env = {k: v for k, v in os.environ.items() if not k.startswith("KW_")}
            env.update(KW_DATABASE_URL=db, KW_BROKER_URL=broker, KW_DATA_DIR=str(root / "host"))
            since = datetime.now(UTC)
            procs = start_workers(args.workers, env, root)
            wait_ready(factory, args.workers, since, 180)
            print(f"{args.workers} workers ready; {args.runs} runs ...", file=sys.stderr)
            b = burst(factory, app, source, sha, args.runs, args.timeout)
            print("burst done; idle dispatch ...", file=sys.stderr)
            idle = idle_latency(factory, app, source, sha, args.idle)
            once = exactly_once(factory, b["ids"] + idle["ids"])
            store = storage(db)
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=120)
            procs = []
            print("micro benchmarks ...", file=sys.stderr)
            figures["micro_broker"] = micro_broker(broker, args.micro)
            figures["micro_db"] = micro_db(db, args.micro, args.workers)
            b.pop("ids")
            idle.pop("ids")
            figures.update(burst=b, idle=idle, exactly_once=once, storage=store)
    finally:
        for proc in procs:
            proc.kill()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    b, idle, once, store = (figures[k] for k in ("burst", "idle", "exactly_once", "storage"))
    mb, md = figures["micro_broker"], figures["micro_db"]
    w = args.workers
    print(f"\nkernelwatch fleet benchmark: {args.runs} runs, {w} workers, {os.cpu_count()} CPUs\n")
    print(
        table(
            [
                ("throughput (runs/s, whole burst)", f"{b['throughput_runs_per_s']:.2f}"),
                ("throughput (runs/s, middle 80 %)", f"{b['steady_runs_per_s']:.2f}"),
                ("burst wall time (s)", f"{b['wall_s']:.1f}"),
                ("service time per run p50 / p99 (s)", _pair(b, "service")),
                ("queue wait p50 / p99 (s, burst)", _pair(b, "queue_wait")),
                ("pickup gap p50 / p99 (s, burst)", _pair(b, "pickup_gap")),
                ("dispatch latency p50 / p99 (s, idle)", _pair(idle, "dispatch")),
                ("enqueue rate (messages/s, planner)", f"{b['enqueue_per_s']:.0f}"),
                ("runs per worker", ", ".join(str(v) for v in b["per_worker"].values())),
                (
                    "exactly once",
                    f"{'OK' if once['ok'] else 'FAILED'}: {once['results']} results for "
                    f"{once['runs']} runs, {once['duplicate_rows']} duplicates, "
                    f"{once['runs_with_wrong_case_count']} runs short, "
                    f"{once['runs_executed_more_than_once']} re-executed",
                ),
                ("result row (bytes, avg)", f"{store['row_bytes']:.0f}"),
                (
                    "  of which record / samples",
                    f"{store['record_bytes']:.0f} / "
                    f"{store['samples_bytes']:.0f} ({store['samples_per_row']:.0f} samples)",
                ),
                (
                    "broker publish / consume+ack (msg/s)",
                    f"{mb['publish_per_s']:.0f} / {mb['consume_ack_per_s']:.0f}",
                ),
                (
                    f"PG result rows/s, 1 / {w} writers",
                    f"{md['rows_per_s_1_writer']:.0f} / {md[f'rows_per_s_{w}_writers']:.0f}",
                ),
                (
                    f"PG MB/s of results, {w} writers",
                    f"{md[f'mb_per_s_{w}_writers']:.1f} ({md['record_json_bytes']:.0f} B records)",
                ),
                ("PG heartbeats/s, 1 writer", f"{md['heartbeats_per_s_1_writer']:.0f}"),
            ]
        )
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 0 if once["ok"] else 1


def _pair(d: dict[str, Any], key: str) -> str:
    return f"{d[f'{key}_p50_s']:.3f} / {d[f'{key}_p99_s']:.3f}"


if __name__ == "__main__":
    raise SystemExit(main())
