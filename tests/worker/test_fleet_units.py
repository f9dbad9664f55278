"""The fleet's parts without workers: dedup, cancel, the run lease, knobs, GPUs, launcher, health.

Database tests run on SQLite and PostgreSQL (the ``db_url`` fixture).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.fleet import beat
from kernelwatch.db.models import Run
from kernelwatch.db.session import engine_for
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from kernelwatch.jobs.planning import cancel, dedup
from kernelwatch.jobs.planning.broker import make_celery
from kernelwatch.worker import fleet_cli, fleetconfig, gpus, health
from kernelwatch.worker.executor import _patiently, execute
from kernelwatch.worker.heartbeat import lease_holder

SHA_A, SHA_B, SHA_C = "a" * 40, "b" * 40, "c" * 40


@pytest.fixture
def factory(db_url: str) -> sessionmaker[Session]:
    return sessionmaker(bind=engine_for(db_url), expire_on_commit=False)


def add_run(
    s: Session,
    sha: str,
    status: str = "queued",
    trigger: str = "push",
    suites: tuple[str, ...] = ("basic",),
    options: dict[str, object] | None = None,
    **columns: object,
) -> Run:
    repo = get_or_create_repository(s, "lib", "/src/lib")
    commit = upsert_commit(s, repo, sha, [])
    run = Run(
        repository_id=repo.id,
        commit_id=commit.id,
        status=status,
        trigger=trigger,
        suites=list(suites),
        options=dict(options or {}),
        **columns,
    )
    s.add(run)
    s.flush()
    return run


# ----------------------------------------------------------------------------- dedup


def test_a_duplicate_request_joins_the_active_run(session: Session) -> None:
    run = add_run(session, SHA_A, suites=("noop", "basic"), options={"bench_args": ["--x"]})
    repo = run.repository_id
    find = dedup.find_joinable
    assert find(session, repo, SHA_A, ["basic", "noop"], "cpu", {"bench_args": ["--x"]}) is run
    # the trigger, requester and unrelated options do not matter
    assert find(session, repo, SHA_A, ["noop", "basic"], "cpu", {"bench_args": ["--x"], "pr": 7})
    # what is measured, where, and against what baseline does
    assert find(session, repo, SHA_A, ["basic"], "cpu", {"bench_args": ["--x"]}) is None
    assert find(session, repo, SHA_A, ["basic", "noop"], "h100", {"bench_args": ["--x"]}) is None
    assert find(session, repo, SHA_A, ["basic", "noop"], "cpu", {}) is None
    assert find(session, repo, SHA_B, ["basic", "noop"], "cpu", {"bench_args": ["--x"]}) is None
    assert (
        find(session, repo, SHA_A, ["basic", "noop"], "cpu", {"bench_args": ["--x"]}, SHA_B) is None
    )
    run.status = "running"
    assert find(session, repo, SHA_A, ["basic", "noop"], "cpu", {"bench_args": ["--x"]}) is run
    run.status = "succeeded"  # a finished run is a past answer: asking again re-measures
    assert find(session, repo, SHA_A, ["basic", "noop"], "cpu", {"bench_args": ["--x"]}) is None
    assert find(
        session,
        repo,
        SHA_A,
        ["basic", "noop"],
        "cpu",
        {"bench_args": ["--x"]},
        states=["succeeded"],
    )


def test_joining_records_requests_and_asks_for_a_requeue_only_to_outrank(
    session: Session,
) -> None:
    run = add_run(session, SHA_A, trigger="nightly")
    assert dedup.join(run, "push", {"delivery": "d1"}) is True  # push outranks nightly
    assert dedup.join(run, "manual") is False  # below push, already requested
    assert dedup.join(run, "pull_request") is True
    assert dedup.join(run, "gate") is False  # same priority as pull_request
    assert [j["trigger"] for j in run.options.joined] == [
        "push",
        "manual",
        "pull_request",
        "gate",
    ]
    assert run.options.joined[0]["delivery"] == "d1"
    run.status = "running"
    assert dedup.join(run, "pull_request") is False  # too late to reorder a running run


def test_concurrent_planners_make_one_run_on_postgres(pg_url: str) -> None:
    """Two transactions look up and insert the same key at once: the advisory lock
    serializes them, so the second one joins the first one's run."""
    from tests.conftest import _truncate

    _truncate(pg_url)
    factory = sessionmaker(bind=engine_for(pg_url), expire_on_commit=False)
    with factory() as s, s.begin():
        repo = get_or_create_repository(s, "lib", "/src/lib")
        commit = upsert_commit(s, repo, SHA_A, [])
        repo_id, commit_id = repo.id, commit.id
    made: list[int] = []
    barrier = threading.Barrier(2)

    def planner() -> None:
        with factory() as s, s.begin():
            barrier.wait()
            found = dedup.find_joinable(s, repo_id, SHA_A, ["basic"], "cpu")
            if found is None:
                time.sleep(0.5)  # widen the window between look-up and insert
                run = Run(repository_id=repo_id, commit_id=commit_id, suites=["basic"])
                s.add(run)
                s.flush()
                made.append(run.id)

    threads = [threading.Thread(target=planner) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(made) == 1
    with factory() as s:
        assert len(s.scalars(select(Run)).all()) == 1


# ----------------------------------------------------------------------------- cancel


def test_superseded_runs_of_a_pr_are_the_old_heads_not_the_new_head_or_its_baseline(
    session: Session,
) -> None:
    old = add_run(session, SHA_A, trigger="pull_request", options={"pr": 7})
    new = add_run(session, SHA_B, trigger="pull_request", options={"pr": 7}, baseline_sha=SHA_C)
    base = add_run(session, SHA_C, trigger="pull_request", options={"pr": 7})
    other_pr = add_run(session, SHA_A, trigger="pull_request", options={"pr": 8})
    push = add_run(session, SHA_A, trigger="push")
    done = add_run(session, SHA_A, status="succeeded", trigger="gate", options={"pr": 7})
    running = add_run(session, SHA_A, status="running", trigger="gate", options={"pr": "7"})
    found = cancel.superseded(session, old.repository_id, 7, SHA_B)
    assert {r.id for r in found} == {old.id, running.id}
    assert not {new.id, base.id, other_pr.id, push.id, done.id} & {r.id for r in found}


def test_cancel_marks_runs_final_once_and_revokes_their_tasks(
    factory: sessionmaker[Session],
) -> None:
    with factory() as s, s.begin():
        queued = add_run(s, SHA_A).id
        running = add_run(s, SHA_B, status="running").id
        finished = add_run(s, SHA_C, status="succeeded", verdict="pass").id
    revoked: list[list[str]] = []
    settings = Settings()
    ids = cancel.cancel_runs(
        factory, settings, [queued, running, finished, 999], "superseded", revoked.append
    )
    assert ids == [queued, running]
    assert revoked == [[cancel.task_id_for(queued), cancel.task_id_for(running)]]
    with factory() as s:
        runs = {r.id: r for r in s.scalars(select(Run))}
    assert runs[queued].status == runs[running].status == "cancelled"
    assert runs[queued].error == "superseded" and runs[queued].finished is not None
    assert runs[queued].verdict == "error"  # judged, so nobody waits for it
    assert runs[finished].status == "succeeded" and runs[finished].verdict == "pass"
    assert cancel.cancel_runs(factory, settings, [queued], "again", revoked.append) == []


def test_a_worker_skips_a_cancelled_run_without_touching_it(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    with factory() as s, s.begin():
        run_id = add_run(s, SHA_A, status="cancelled").id
    settings = Settings(data_dir=tmp_path)
    assert execute(factory, settings, run_id, worker="w@h") == "cancelled"
    with factory() as s:
        run = s.get(Run, run_id)
        assert run is not None and run.attempts == 0 and run.worker is None


# ----------------------------------------------------------------------------- the lease


def test_the_lease_is_held_only_by_a_live_worker_busy_with_the_run(session: Session) -> None:
    run = add_run(session, SHA_A, status="running", worker="a@h")
    other = add_run(session, SHA_B)
    hb = beat(session, "a@h", state="busy", current_run_id=run.id)
    assert lease_holder(session, run, "b@h", stale_s=10) == "a@h"
    assert lease_holder(session, run, "a@h", stale_s=10) is None  # my own, e.g. after a restart
    hb.last_seen = datetime.now(UTC) - timedelta(seconds=11)
    session.flush()
    assert lease_holder(session, run, "b@h", stale_s=10) is None  # silent too long: dead
    beat(session, "a@h", current_run_id=other.id)
    assert lease_holder(session, run, "b@h", stale_s=10) is None  # busy with something else
    beat(session, "a@h", current_run_id=run.id, stopped=datetime.now(UTC))
    assert lease_holder(session, run, "b@h", stale_s=10) is None  # shut down
    run.worker = "ghost@h"  # no heartbeat at all
    assert lease_holder(session, run, "b@h", stale_s=10) is None
    run.status = "queued"
    assert lease_holder(session, run, "b@h", stale_s=10) is None


def test_the_executor_refuses_a_run_whose_lease_is_held(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    from kernelwatch.worker.heartbeat import RunLeased

    with factory() as s, s.begin():
        run = add_run(s, SHA_A, status="running", worker="a@h", attempts=1)
        beat(s, "a@h", state="busy", current_run_id=run.id)
        run_id = run.id
    with pytest.raises(RunLeased, match="a@h"):
        execute(factory, Settings(data_dir=tmp_path), run_id, worker="b@h")
    with factory() as s:
        again = s.get(Run, run_id)
        assert again is not None and again.attempts == 1 and again.worker == "a@h"


def test_writes_wait_out_a_database_outage_then_give_up() -> None:
    calls = []

    def flaky() -> str:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise OperationalError("INSERT", {}, Exception("connection refused"))
        return "stored"

    assert _patiently(30, flaky) == "stored"
    assert len(calls) == 3 and calls[2] - calls[0] >= 2.9  # 1 s, then 2 s

    def down() -> str:
        raise OperationalError("INSERT", {}, Exception("connection refused"))

    t0 = time.monotonic()
    with pytest.raises(OperationalError):
        _patiently(2.5, down)
    assert time.monotonic() - t0 < 2.5


# ----------------------------------------------------------------------------- knobs


def test_fleet_knobs_derive_from_the_run_limits_and_fail_fast() -> None:
    settings = Settings(install_timeout_s=600, suite_timeout_s=900)
    f = fleetconfig.FleetConfig.from_settings(settings, environ={})
    assert f.time_limit_s == 600 + 900 + 1200 and f.soft_time_limit_s == f.time_limit_s - 120
    assert f.visibility_timeout_s > f.time_limit_s  # a live worker's message is not handed out
    assert f.lease_stale_s == 3 * f.heartbeat_s + 5 and f.health_command == ()
    env = {
        "KW_VISIBILITY_TIMEOUT_S": "10",
        "KW_HEARTBEAT_S": "1",
        "KW_HEALTH_COMMAND": "dcgmi diag -r 1",
    }
    f = fleetconfig.FleetConfig.from_settings(settings, environ=env)
    assert (f.visibility_timeout_s, f.restore_interval_s, f.lease_stale_s) == (10, 1, 8)
    assert f.health_command == ("dcgmi", "diag", "-r", "1")
    with pytest.raises(ValueError, match="KW_HEARTBEAT_S"):
        fleetconfig.FleetConfig.from_settings(settings, environ={"KW_HEARTBEAT_S": "soon"})
    with pytest.raises(ValueError, match="KW_VISIBILITY_TIMEOUT_S"):
        fleetconfig.FleetConfig.from_settings(settings, environ={"KW_VISIBILITY_TIMEOUT_S": "0"})


def test_redis_workers_get_the_redelivery_and_time_limits() -> None:
    settings = Settings(broker_url="redis://127.0.0.1:6379/3")
    app = make_celery(settings)
    f = fleetconfig.FleetConfig.from_settings(settings, environ={"KW_VISIBILITY_TIMEOUT_S": "30"})
    fleetconfig.configure(app, f)
    opts = app.conf.broker_transport_options
    assert opts["visibility_timeout"] == 30 and opts["unacked_restore_interval"] == 3
    assert opts["unacked_restore_throttle"] == 1
    assert opts["unacked_mutex_expire"] == 6  # a dead sweeper's lock lapses in 2 intervals
    assert opts["queue_order_strategy"] == "priority"  # kept from make_celery
    assert app.conf.task_time_limit == f.time_limit_s
    assert app.conf.broker_connection_max_retries is None


# ----------------------------------------------------------------------------- GPUs


SMI = """\
0, GPU-11111111-aaaa, NVIDIA H200, 570.86.15, 1980, 1980, 1, 143771, 34, 0x0000000000000000
1, GPU-22222222-bbbb, NVIDIA H100 80GB HBM3, 570.86.15, 345, 1980, 20000, 81559, 91, 0x48
2, GPU-33333333-cccc, NVIDIA B200, 570.86.15, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]
"""


def test_a_sweep_lock_left_by_a_killed_worker_lapses_within_two_intervals(
    redis_db_url: str,
) -> None:
    # A worker killed mid-sweep leaves kombu's restore lock in Redis; with kombu's 300 s
    # default no other worker could hand out the dead worker's message for 5 minutes.
    app = make_celery(Settings(broker_url=redis_db_url))
    env = {"KW_VISIBILITY_TIMEOUT_S": "1", "KW_RESTORE_INTERVAL_S": "1"}
    fleetconfig.configure(app, fleetconfig.FleetConfig.from_settings(Settings(), environ=env))
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        channel.queue_declare("sweep-test", auto_delete=False)
        message = channel.prepare_message("run 1")
        channel.basic_publish(message, exchange="", routing_key="sweep-test")
        taken = channel.basic_get("sweep-test", no_ack=False)  # now unacknowledged
        assert taken is not None and channel.client.hlen(channel.unacked_key) == 1
        # the killed worker's sweep took the lock as kombu's Mutex does, and never let go
        lock = channel.client.lock(channel.unacked_mutex_key, timeout=channel.unacked_mutex_expire)
        assert lock.acquire(blocking=False)
        start = time.monotonic()
        while channel._size("sweep-test") == 0 and time.monotonic() - start < 30:
            channel.qos.restore_visible(num=10, interval=1)  # another worker's sweeps
            time.sleep(0.2)
        waited = time.monotonic() - start
    assert channel.unacked_mutex_expire == 5  # the floor: 2 intervals would be 2 s
    assert 4.0 < waited < 15.0, f"the message came back after {waited:.1f} s, not after ~5 s"


def test_nvidia_smi_rows_parse_into_classes_and_problems() -> None:
    a, b, c = gpus.parse(SMI)
    assert (a.device_class, b.device_class, c.device_class) == ("h200", "h100", "b200")
    assert a.sm_mhz == 1980 and a.memory_total_mib == 143771 and a.throttle_reasons == []
    assert b.throttle_reasons == ["hw_slowdown", "hw_thermal"]
    assert c.sm_mhz is None and c.throttle_mask == 0
    assert [g.index for g in gpus.select_visible([a, b, c], "2,GPU-1111")] == ["2", "0"]
    assert gpus.select_visible([a, b, c], "") == []
    assert gpus.select_visible([a, b, c], None) == [a, b, c]


FAKE_SMI = """#!/bin/sh
case "$*" in
  *clocks_throttle_reasons*) [ -n "$OLD_DRIVER" ] && { echo "not a valid field" >&2; exit 2; } ;;
esac
echo "0, GPU-11111111-aaaa, NVIDIA H200, 570.86.15, 1980, 1980, 1, 143771, 34, 0x0"
echo "1, GPU-22222222-bbbb, NVIDIA H200, 570.86.15, 1980, 1980, 1, 143771, 35, 0x0"
"""


def test_gpus_are_found_through_nvidia_smi_even_when_it_rejects_a_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the nvidia-smi path, even on a GPU host
    both = gpus.query()
    assert [g.uuid for g in both] == ["GPU-11111111-aaaa", "GPU-22222222-bbbb"]
    assert both[0].temperature_c == 34
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # a worker pinned to the second GPU
    assert [g.index for g in gpus.query()] == ["1"]
    monkeypatch.setenv("OLD_DRIVER", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    old = gpus.query()
    assert [g.device_class for g in old] == ["h200", "h200"] and old[0].driver == "570.86.15"


def test_one_pinned_worker_per_gpu_on_its_class_queue() -> None:
    specs = fleet_cli.plan(gpus.parse(SMI)[:2], prefix="kw", host="node7")
    assert [(s.name, s.queues, s.env["CUDA_VISIBLE_DEVICES"]) for s in specs] == [
        ("kw-gpu0@node7", "gpu.h200", "GPU-11111111-aaaa"),
        ("kw-gpu1@node7", "gpu.h100", "GPU-22222222-bbbb"),
    ]
    argv = specs[0].argv
    assert argv[argv.index("-c") + 1] == "1" and argv[argv.index("-Q") + 1] == "gpu.h200"
    assert argv[argv.index("--prefetch-multiplier") + 1] == "1"
    assert "--without-gossip" in argv and "--without-mingle" in argv
    (cpu,) = fleet_cli.plan([], host="box")
    assert (cpu.name, cpu.queues, cpu.env) == ("kw-cpu@box", "cpu", {})
    (forced,) = fleet_cli.plan(gpus.parse(SMI)[:1], queues="gpu.h200-canary", host="n")
    assert forced.queues == "gpu.h200-canary"


def test_the_supervisor_restarts_a_dead_worker_and_stops_all_on_sigterm() -> None:
    crashy = fleet_cli.WorkerSpec("crashy", "cpu", {}, [sys.executable, "-c", "exit(3)"])
    steady = fleet_cli.WorkerSpec(
        "steady", "cpu", {}, [sys.executable, "-c", "import time; time.sleep(60)"]
    )
    sup = fleet_cli.Supervisor([crashy, steady], poll_s=0.05)
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        sup.step()
        time.sleep(0.05)
    crash, keep = sup.children
    assert crash.exits[:2] == [3, 3] and crash.restarts >= 2  # restarted after 1 s, then 2 s
    assert crash.backoff >= 4
    assert keep.restarts == 0 and keep.proc is not None and keep.proc.poll() is None
    sup.stop()
    deadline = time.monotonic() + 10
    while sup.step() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert keep.exits == [-signal.SIGTERM]


# ----------------------------------------------------------------------------- health


def test_health_fails_on_throttling_heat_leaked_memory_and_the_site_check(
    tmp_path: Path,
) -> None:
    ok, throttled, _ = gpus.parse(SMI)
    report = health.HealthReport()
    health.check_smi(ok, report)
    assert report.healthy
    health.check_smi(throttled, report)
    assert not report.healthy
    assert "hw_slowdown" in report.checks["smi"] and "91 C" in report.checks["smi"]
    assert "20000 MiB in use" in report.checks["smi"]

    settings = Settings(data_dir=tmp_path)
    fine = fleetconfig.FleetConfig.from_settings(settings, environ={"KW_HEALTH_COMMAND": "true"})
    assert health.check(settings, fine, found=[]).healthy  # a CPU host: disk and command
    sick = fleetconfig.FleetConfig.from_settings(settings, environ={"KW_HEALTH_COMMAND": "false"})
    report = health.check(settings, sick, found=[])
    assert not report.healthy and report.checks["command"].startswith("FAIL false: exit 1")
    gone = fleetconfig.FleetConfig.from_settings(
        settings, environ={"KW_HEALTH_COMMAND": "/no/such/check"}
    )
    assert not health.check(settings, gone, found=[]).healthy


# ----------------------------------------------------------------------------- processes


KILL_SCRIPT = """
import json, subprocess, sys, time
from kernelwatch.worker.heartbeat import child_pids, kill_children
RUNNER = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
runner = subprocess.Popen([sys.executable, "-c", RUNNER], start_new_session=True)
helper = subprocess.Popen(["sleep", "60"])  # a child in our own process group
time.sleep(0.5)
compiler = child_pids(runner.pid)
killed = kill_children(grace_s=2)
print(json.dumps({"runner": runner.pid, "helper": helper.pid, "compiler": compiler,
                  "killed": killed, "codes": [runner.wait(5), helper.wait(5)]}))
"""


def test_kill_children_takes_each_runner_with_its_group() -> None:
    """In a throwaway process: kill_children must not signal its own process group."""
    import json

    from kernelwatch.worker.heartbeat import _alive

    out = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert sorted(got["killed"]) == sorted([got["runner"], got["helper"]])
    assert got["codes"] == [-signal.SIGTERM, -signal.SIGTERM]
    (compiler,) = got["compiler"]
    deadline = time.monotonic() + 5
    while _alive(compiler) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(compiler)  # the runner's own child went with its group


# ----------------------------------------------------------------------------- reconcile


def test_orphaned_runs_are_sent_again_once_per_stale_period(
    factory: sessionmaker[Session],
) -> None:
    from kernelwatch.jobs.planning.reconcile import requeue_orphans

    long_ago = datetime.now(UTC) - timedelta(hours=1)
    with factory() as s, s.begin():
        dead = add_run(s, SHA_A, status="running", worker="dead@h", started=long_ago)
        alive = add_run(s, SHA_B, status="running", worker="live@h", started=long_ago)
        ghost = add_run(s, SHA_C, status="running", worker="ghost@h", started=long_ago)
        fresh = add_run(s, SHA_A, status="running", worker="nobeat@h")  # just claimed
        lost = add_run(s, SHA_B, created=long_ago, trigger="pull_request")
        waiting = add_run(s, SHA_C, created=long_ago, queue="gpu.b200")
        new = add_run(s, SHA_A)
        beat(s, "dead@h", current_run_id=dead.id).last_seen = long_ago
        beat(s, "live@h", current_run_id=alive.id)
        ids = {k: v.id for k, v in locals().items() if isinstance(v, Run)}
    sent: list[tuple[int, str, str]] = []
    depth = {"cpu": 0, "gpu.b200": 3}.__getitem__
    got = requeue_orphans(
        factory, lambda *a: sent.append(a), stale_s=60, queued_after_s=600, queue_depth=depth
    )
    assert sorted(got) == sorted([ids["dead"], ids["ghost"], ids["lost"]])
    assert (ids["lost"], "cpu", "pull_request") in sent
    assert not {ids["alive"], ids["fresh"], ids["waiting"], ids["new"]} & set(got)
    # sent once: the next sweep within the stale period leaves them alone
    assert requeue_orphans(factory, lambda *a: None, 60, 600, depth) == []
    with factory() as s:
        run = s.get(Run, ids["dead"])
        assert run is not None and run.options.requeues == 1
