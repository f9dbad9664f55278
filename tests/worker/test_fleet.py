"""The fleet under failure: real Redis, real PostgreSQL, real ``kernelwatch worker`` processes.

Each test starts its own ``redis-server`` (AOF with ``appendfsync always``) on a
free loopback port and its own workers, each worker with its own data directory
as if on its own host; the module shares one PostgreSQL database. Workers beat
every second (``KW_HEARTBEAT_S=1``), so a killed worker's lease is stale after 8 s.

What is checked is what the fleet promises: a run outlives the worker, broker or
database that fails under it, every case ends with exactly one result, crashing
and hanging kernels cost one case each, and nothing secret reaches the code under
test.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.fleet import WorkerHeartbeat
from kernelwatch.db.models import FINAL_STATES, Result, Run
from kernelwatch.db.session import make_engine
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from kernelwatch.jobs.lifetime import die_with_parent
from kernelwatch.jobs.planning.broker import enqueue_run, make_celery
from kernelwatch.jobs.planning.cancel import cancel_runs
from kernelwatch.jobs.planning.plan import RunRequest, plan
from tests.conftest import create_pg_database, drop_pg_database
from tests.helpers import make_repo

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis, pytest.mark.crowd]

HOST = socket.gethostname()

# Kernels with PyTorch bodies (fast on a CPU) for the ``basic`` and ``noop`` suites.
# ``SLEEP`` stretches the first call of a kernel in each runner process, so a test
# can act while a case is in progress; later definitions override earlier ones.
TORCH_KERNELS = """
import time

import torch
import torch.nn.functional as F

SLEEP = {sleep!r}
_done = set()


def _once(name):
    if name not in _done:
        _done.add(name)
        time.sleep(SLEEP.get(name, 0))


def softmax(x, out):
    _once("softmax")
    out.copy_(torch.softmax(x.float(), -1).to(out.dtype))


def rmsnorm(x, w, eps, out):
    _once("rmsnorm")
    xf = x.float()
    out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(out.dtype))


def matmul(a, b, out):
    _once("matmul")
    out.copy_((a.float() @ b.float()).to(out.dtype))


def attention(q, k, v, causal, scale, out):
    _once("attention")
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, 1).float()
    v = v.repeat_interleave(rep, 1).float()
    o = F.scaled_dot_product_attention(q.float(), k, v, is_causal=causal, scale=scale)
    out.copy_(o.to(out.dtype))


def noop(x, out):
    _once("noop")
    out.copy_(x)
"""

RAISES = """
def softmax(x, out):
    raise RuntimeError("softmax kernel exploded on purpose")
"""
HANGS = """
def rmsnorm(x, w, eps, out):
    while True:  # never returns
        time.sleep(0.5)
"""
SEGFAULTS = """
def matmul(a, b, out):
    import ctypes
    ctypes.string_at(0)  # the process dies mid-case
"""
SNOOPS = """
def softmax(x, out):
    import json, os
    seen = {{"env": dict(os.environ)}}
    try:
        with open(f"/proc/{{os.getppid()}}/environ", "rb") as fh:
            seen["parent_environ"] = fh.read().decode(errors="replace")
    except OSError as exc:
        seen["parent_environ"] = f"unreadable: {{exc}}"
    with open({dump!r}, "w") as fh:
        json.dump(seen, fh)
    out.copy_(torch.softmax(x.float(), -1).to(out.dtype))
"""

TOML = """
[library]
name = "{name}"
module = "{name}"
[install]
recipe = "pythonpath"
env = {{ HARMLESS = "1", MY_API_KEY = "from-the-repo" }}  # a KW_* name is refused (issue 24)
[suites]
names = ["{suite}"]
[thresholds]
regression = 1.0
"""

SECRETS = {
    "KW_WEBHOOK_SECRET": "whsec-do-not-leak-1",
    "KW_GITHUB_TOKEN": "ghp_doNotLeak2",
    "GITHUB_TOKEN": "ghp_doNotLeak3",
    "HF_TOKEN": "hf_doNotLeak4",
    "AWS_SECRET_ACCESS_KEY": "aws-do-not-leak-5",
    "PGPASSWORD": "pg-do-not-leak-6",
}


def library(
    root: Path,
    name: str,
    suite: str = "basic",
    sleep: dict[str, float] | None = None,
    extra: str = "",
) -> tuple[str, str]:
    """A git repository of a kernel library; returns (path, head sha)."""
    files = {
        f"{name}/__init__.py": TORCH_KERNELS.format(sleep=sleep or {}) + extra,
        ".kernelwatch.toml": TOML.format(name=name, suite=suite),
    }
    path = root / name
    return str(path), make_repo(path, files)


# ----------------------------------------------------------------------------- services


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# CI's loaded 2-core machine has run these tests 1.2-4x slower than a development VM. A
# wait that succeeds ends when its condition holds, so each wait gets twice its figure.
WAIT_SLACK = 2.0


def wait_until(what: str, cond: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    timeout *= WAIT_SLACK
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class RedisServer:
    """A private redis-server that a test may kill and restart.

    With AOF persistence by default; ``persistent=False`` keeps nothing on disk, so a
    restart loses every message (a cache-style deployment, or a replaced instance).
    """

    def __init__(self, root: Path, *, persistent: bool = True) -> None:
        self.dir = root
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.persistent = persistent
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir"]
        argv += [str(self.dir), "--save", ""]
        argv += ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else []
        with open(self.dir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_until("redis to answer", self.ping, 20)

    def ping(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs; only what the AOF holds survives."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


class PgProxy:
    """A TCP relay from a loopback port to PostgreSQL that the test can cut and restore.

    ``cut()`` closes the listening socket and every relayed connection: the worker
    sees its connections reset and new ones refused, as when the database host
    drops off the network.
    """

    def __init__(self, upstream: tuple[str, int] = ("127.0.0.1", 5432)) -> None:
        self.upstream = upstream
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def url(self, pg_url: str) -> str:
        return pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{self.port}")

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            server.settimeout(None)
            with self._lock:
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._lock:
            for s in self._conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._conns.clear()

    def restore(self) -> None:
        self.start()


def pids_under(path: Path) -> list[int]:
    """Processes whose working directory lies under ``path`` (a worker's suite runners)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/cwd").startswith(str(path)):
                    out.append(int(entry))
    return out


class Worker:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], data_dir: Path, log: Path):
        self.name, self.proc, self.data_dir, self.log = name, proc, data_dir, log
        self.node = f"{name}@{HOST}"
        self.spawned = datetime.now(UTC)

    def kill_group(self) -> None:
        """``kill -9`` of the worker's whole process group (main process and pool child)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        # The suite runner lives in a session of its own and outlives a SIGKILLed worker;
        # on a real host its next start would find it. Here: clean it up.
        for pid in pids_under(self.data_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill_group()
        for pid in pids_under(self.data_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Fleet:
    """One test's broker, the module's database, and the workers the test starts."""

    def __init__(self, root: Path, pg_url: str, redis: RedisServer) -> None:
        self.root = root
        self.pg_url = pg_url
        self.redis = redis
        self.settings = Settings(
            data_dir=root / "planner", database_url=pg_url, broker_url=redis.url
        )
        self.settings.ensure_dirs()
        self.factory: sessionmaker[Session] = sessionmaker(
            bind=make_engine(pg_url), expire_on_commit=False
        )
        self.app = make_celery(self.settings)
        self.workers: list[Worker] = []

    def worker(
        self, name: str, *, db_url: str | None = None, queue: str = "cpu", **env: str
    ) -> Worker:
        data_dir = self.root / name
        data_dir.mkdir(parents=True, exist_ok=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith("KW_")}
        base.update(
            KW_DATABASE_URL=db_url or self.pg_url,
            KW_BROKER_URL=self.redis.url,
            KW_DATA_DIR=str(data_dir),
            KW_HEARTBEAT_S="1",
            KW_VISIBILITY_TIMEOUT_S="600",
            KW_SUITE_TIMEOUT_S="300",
            KW_HEALTH_RECHECK_S="2",
        )
        base.update(env)
        log = data_dir / "worker.log"
        argv = [sys.executable, "-m", "kernelwatch.jobs.cli.main", "worker", "--queues", queue]
        argv += ["--name", f"{name}@%h", "--loglevel", "INFO"]
        with open(log, "ab") as fh:
            proc = subprocess.Popen(  # a killed test run takes its workers along
                argv,
                env=base,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        w = Worker(name, proc, data_dir, log)
        self.workers.append(w)
        return w

    def heartbeat(self, node: str) -> WorkerHeartbeat | None:
        with self.factory() as s:
            return s.scalars(select(WorkerHeartbeat).where(WorkerHeartbeat.name == node)).first()

    def wait_ready(self, *workers: Worker, timeout: float = 90) -> None:
        for w in workers:

            def ready(w: Worker = w) -> bool:
                assert w.proc.poll() is None, f"{w.name} exited:\n{w.log_text()[-3000:]}"
                hb = self.heartbeat(w.node)
                return hb is not None and hb.stopped is None and hb.started >= w.spawned

            wait_until(f"{w.name} to be ready", ready, timeout)

    def plan(self, source: str, sha: str, **options: Any) -> int:
        req = RunRequest(
            source=source, commits=[sha], measure_baseline=False, options=dict(options)
        )
        (planned,) = plan(self.factory, self.settings, self.app, req)
        return planned.id

    def insert_runs(self, source: str, sha: str, n: int, **options: Any) -> list[int]:
        """``n`` runs of one commit, committed, then enqueued (as planning does)."""
        with self.factory() as s, s.begin():
            repo = get_or_create_repository(s, Path(source).name, source)
            commit = upsert_commit(s, repo, sha, [])
            runs = [
                Run(repository_id=repo.id, commit_id=commit.id, suites=["noop"], options=options)
                for _ in range(n)
            ]
            s.add_all(runs)
            s.flush()
            ids = [r.id for r in runs]
        for run_id in ids:
            enqueue_run(self.app, run_id, "cpu")
        return ids

    def run(self, run_id: int) -> Run:
        with self.factory() as s:
            run = s.get(Run, run_id)
            assert run is not None
            return run

    def wait_status(self, run_ids: list[int], states: tuple[str, ...], timeout: float) -> None:
        def done() -> bool:
            with self.factory() as s:
                rows = s.scalars(select(Run.status).where(Run.id.in_(run_ids))).all()
            return len(rows) == len(run_ids) and all(r in states for r in rows)

        try:
            wait_until(f"runs {run_ids[:5]}... to reach {states}", done, timeout, every=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.post_mortem(run_ids)}") from None

    def post_mortem(self, run_ids: list[int]) -> str:
        """What a timed-out wait needs to be read on CI: the runs, the broker, the logs."""
        lines = []
        with self.factory() as s:
            for run in s.scalars(select(Run).where(Run.id.in_(run_ids[:5]))):
                lines.append(
                    f"run {run.id}: {run.status} worker={run.worker} attempts={run.attempts}"
                )
        with contextlib.suppress(Exception), self.app.connection_for_write() as conn:
            client = conn.default_channel.client
            lines.append(f"unacked: {client.hlen('unacked')}, queue: {self.queue_depth()}")
            lines.append(f"unacked_mutex ttl: {client.ttl('unacked_mutex')}")
        for w in self.workers:
            lines.append(f"---- {w.name} (exit {w.proc.poll()}): last lines of its log")
            lines.extend(w.log_text().splitlines()[-25:])
        return "\n".join(lines)

    def results(self, run_id: int) -> dict[str, Result]:
        with self.factory() as s:
            rows = s.scalars(select(Result).where(Result.run_id == run_id)).all()
            by_kernel = {r.record["kernel"]: r for r in rows}
            assert len(by_kernel) == len(rows), "one kernel, one case in the smoke grid"
            return by_kernel

    def results_per_case(self, run_ids: list[int]) -> dict[tuple[int, str], int]:
        with self.factory() as s:
            rows = s.execute(
                select(Result.run_id, Result.case_id, func.count())
                .where(Result.run_id.in_(run_ids))
                .group_by(Result.run_id, Result.case_id)
            ).all()
        return {(r, c): n for r, c, n in rows}

    def queue_depth(self, queue: str = "cpu") -> int:
        with self.app.connection_for_write() as conn:
            return int(conn.default_channel._size(queue))

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        self.factory.kw["bind"].dispose()


@pytest.fixture(scope="module")
def pg() -> Iterator[str]:
    from kernelwatch.db.migrate import upgrade

    url = create_pg_database("kw_fleet")
    upgrade(url)
    yield url
    drop_pg_database(url)


@pytest.fixture
def fleet(tmp_path: Path, pg: str) -> Iterator[Fleet]:
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    f = Fleet(tmp_path, pg, redis)
    try:
        yield f
    finally:
        f.close()
        redis.stop()


def final(fleet: Fleet, run_id: int, timeout: float) -> Run:
    fleet.wait_status([run_id], FINAL_STATES, timeout)
    return fleet.run(run_id)


# ----------------------------------------------------------------------------- the tests


def test_kill_9_mid_run_the_run_completes_elsewhere_once_per_case(
    fleet: Fleet, tmp_path: Path
) -> None:
    # softmax passes, rmsnorm crashes its runner (so two results are stored while the
    # run is still going), then matmul and attention take 6 s and 4 s.
    src, sha = library(
        tmp_path,
        "slowlib",
        sleep={"softmax": 1.0, "matmul": 6.0, "attention": 4.0},
        extra=SEGFAULTS.replace("def matmul(a, b, out)", "def rmsnorm(x, w, eps, out)"),
    )
    fast_redelivery = {"KW_VISIBILITY_TIMEOUT_S": "10"}
    a = fleet.worker("victim", **fast_redelivery)
    fleet.wait_ready(a)
    run_id = fleet.plan(src, sha, bench_args=["--budget", "0.05"], case_timeout_s=60)
    b = fleet.worker("rescuer", **fast_redelivery)

    def mid_run() -> bool:
        run = fleet.run(run_id)
        return run.status == "running" and len(fleet.results(run_id)) >= 1

    wait_until("a stored result while the run is running", mid_run, 60)
    assert fleet.run(run_id).worker == a.node
    before = {k: r.id for k, r in fleet.results(run_id).items()}
    a.kill_group()
    fleet.wait_ready(b)

    run = final(fleet, run_id, 120)
    assert run.status == "succeeded", run.error
    assert run.worker == b.node
    assert run.attempts == 2
    res = fleet.results(run_id)
    assert set(res) == {"softmax", "rmsnorm", "matmul", "attention"}
    assert all(n == 1 for n in fleet.results_per_case([run_id]).values())
    assert {k: res[k].id for k in before} == before  # what the dead worker stored stays
    assert res["rmsnorm"].status == "error" and "SIGSEGV" in res["rmsnorm"].error
    assert all(res[k].status == "pass" for k in ("softmax", "matmul", "attention"))


def test_redis_restart_with_50_runs_queued_loses_none(fleet: Fleet, tmp_path: Path) -> None:
    src, sha = library(tmp_path, "nooplib", suite="noop")
    ids = fleet.insert_runs(src, sha, 50, bench_args=["--budget", "0.01"])
    assert fleet.queue_depth() == 50
    fleet.redis.kill()  # SIGKILL: only the append-only file survives
    fleet.redis.start()
    assert fleet.queue_depth() == 50

    workers = [fleet.worker("w1"), fleet.worker("w2")]
    fleet.wait_ready(*workers)

    def some_done() -> bool:
        with fleet.factory() as s:
            n = s.scalar(select(func.count()).where(Run.id.in_(ids), Run.status == "succeeded"))
        return bool(n and n >= 5)

    wait_until("a few runs to finish", some_done, 60)
    fleet.redis.kill()  # again, this time under connected, busy workers
    time.sleep(2)
    fleet.redis.start()

    fleet.wait_status(ids, FINAL_STATES, 150)
    with fleet.factory() as s:
        states = s.scalars(select(Run.status).where(Run.id.in_(ids))).all()
    assert states == ["succeeded"] * 50
    per_case = fleet.results_per_case(ids)
    assert len(per_case) == 100 and set(per_case.values()) == {1}
    assert fleet.queue_depth() == 0


def test_redis_restarted_without_persistence_loses_no_run(tmp_path: Path) -> None:
    """20 queued runs, Redis restarted with nothing on disk: the reconciler re-sends all."""
    from kernelwatch.db.migrate import upgrade
    from kernelwatch.jobs.planning.reconcile import ReconcileConfig, ReconcilerThread

    url = create_pg_database("kw_volatile")  # its own: the reconciler sees every run
    upgrade(url)
    redis = RedisServer(tmp_path / "redis", persistent=False)
    redis.start()
    fleet = Fleet(tmp_path, url, redis)
    reconciler = ReconcilerThread(
        fleet.factory, fleet.app, ReconcileConfig(interval_s=1, stale_s=8, queued_after_s=5)
    )
    try:
        src, sha = library(tmp_path, "nooplib", suite="noop")
        ids = fleet.insert_runs(src, sha, 20, bench_args=["--budget", "0.01"])
        assert fleet.queue_depth() == 20
        redis.kill()
        redis.start()
        assert fleet.queue_depth() == 0  # every message is gone
        workers = [fleet.worker("w1"), fleet.worker("w2")]
        fleet.wait_ready(*workers)
        started = time.monotonic()
        reconciler.start()
        fleet.wait_status(ids, FINAL_STATES, 420)
        recovered_s = time.monotonic() - started
        with fleet.factory() as s:
            states = s.scalars(select(Run.status).where(Run.id.in_(ids))).all()
        assert states == ["succeeded"] * 20
        per_case = fleet.results_per_case(ids)
        assert len(per_case) == 40 and set(per_case.values()) == {1}  # 2 cases, once each
        print(f"20 runs recovered and finished {recovered_s:.0f} s after the worker was ready")
    finally:
        reconciler.stop()
        fleet.close()
        redis.stop()
        drop_pg_database(url)


def test_postgres_unreachable_for_30s_results_uploaded_after(fleet: Fleet, tmp_path: Path) -> None:
    proxy = PgProxy()
    proxy.start()
    src, sha = library(
        tmp_path, "pglib", sleep={"softmax": 2.0, "rmsnorm": 2.0, "matmul": 2.0, "attention": 2.0}
    )
    w = fleet.worker("cutoff", db_url=proxy.url(fleet.pg_url))
    fleet.wait_ready(w)
    run_id = fleet.plan(src, sha, bench_args=["--budget", "0.05"])
    wait_until(
        "the suite runner to start",
        lambda: (w.data_dir / "work" / f"run-{run_id}" / "suite" / "runner-0.log").exists(),
        60,
    )
    proxy.cut()
    cut_at = datetime.now(UTC)
    time.sleep(30)
    # the suite finished during the outage, nothing could be written
    assert fleet.results(run_id) == {}
    assert fleet.run(run_id).status == "running"
    proxy.restore()
    back_at = datetime.now(UTC)

    run = final(fleet, run_id, 90)
    assert run.status == "succeeded", run.error
    assert run.attempts == 1  # uploaded, not measured again
    res = fleet.results(run_id)
    assert set(res) == {"softmax", "rmsnorm", "matmul", "attention"}
    assert all(n == 1 for n in fleet.results_per_case([run_id]).values())
    assert all(r.status == "pass" and r.created >= back_at for r in res.values())
    assert (back_at - cut_at).total_seconds() >= 30
    proxy.cut()


def test_hanging_and_segfaulting_kernels_cost_one_case_each(fleet: Fleet, tmp_path: Path) -> None:
    src, sha = library(tmp_path, "badlib", extra=RAISES + HANGS + SEGFAULTS)
    w = fleet.worker("survivor")
    fleet.wait_ready(w)
    t0 = time.monotonic()
    run_id = fleet.plan(src, sha, bench_args=["--budget", "0.05"], case_timeout_s=5)
    run = final(fleet, run_id, 120)
    assert run.status == "succeeded", run.error
    res = fleet.results(run_id)
    assert res["softmax"].status == "error" and "exploded on purpose" in res["softmax"].error
    assert res["rmsnorm"].status == "error" and "timed out" in res["rmsnorm"].error
    assert res["matmul"].status == "error" and "SIGSEGV" in res["matmul"].error
    assert "KW-CASE-START" in res["matmul"].log_tail  # the runner's log tail is kept
    assert "KW-CASE-START" in res["rmsnorm"].log_tail
    assert res["attention"].status == "pass" and (res["attention"].median_s or 0) > 0
    assert time.monotonic() - t0 < 90
    assert pids_under(w.data_dir) == []  # the hung runner's process group is gone

    good, good_sha = library(tmp_path, "goodlib", suite="noop")
    nxt = final(fleet, fleet.plan(good, good_sha, bench_args=["--budget", "0.01"]), 60)
    assert nxt.status == "succeeded" and nxt.worker == w.node
    assert fleet.results_per_case([nxt.id]) and len(fleet.results_per_case([nxt.id])) == 2


def test_heartbeat_row_is_fresh_and_names_the_current_run(fleet: Fleet, tmp_path: Path) -> None:
    src, sha = library(tmp_path, "beatlib", suite="noop", sleep={"noop": 5.0})
    w = fleet.worker("beater")
    fleet.wait_ready(w)
    idle = fleet.heartbeat(w.node)
    assert idle is not None and idle.state == "idle" and idle.current_run_id is None
    run_id = fleet.plan(src, sha, bench_args=["--budget", "0.01"])

    def busy() -> WorkerHeartbeat | None:
        hb = fleet.heartbeat(w.node)
        return hb if hb is not None and hb.current_run_id == run_id else None

    first = wait_until("a busy heartbeat", busy, 30)
    assert first.state == "busy"
    assert first.host == HOST and first.device_class == "cpu" and "cpu" in first.queues
    assert {"python", "torch", "celery", "kernelwatch"} <= set(first.versions)
    time.sleep(2.5)
    later = busy()
    assert later is not None and later.last_seen > first.last_seen  # beats while busy
    assert (datetime.now(UTC) - later.last_seen).total_seconds() < 5

    assert final(fleet, run_id, 60).status == "succeeded"
    wait_until(
        "an idle heartbeat",
        lambda: (hb := fleet.heartbeat(w.node)) and hb.state == "idle" and not hb.current_run_id,
        20,
    )
    w.stop()
    gone = fleet.heartbeat(w.node)
    assert gone is not None and gone.state == "gone" and gone.stopped is not None


def test_secrets_never_reach_the_code_under_test(fleet: Fleet, tmp_path: Path) -> None:
    # written to the runner's working directory: the sandbox lets it write nothing else
    src, sha = library(tmp_path, "snooplib", extra=SNOOPS.format(dump="seen.json"))
    w = fleet.worker("guarded", KW_KEEP_WORK="all", **SECRETS)  # seen.json stays
    fleet.wait_ready(w)
    run_id = fleet.plan(src, sha, bench_args=["--kernel", "softmax", "--budget", "0.05"])
    assert final(fleet, run_id, 60).status == "succeeded"
    assert fleet.results(run_id)["softmax"].status == "pass"

    dump = w.data_dir / "work" / f"run-{run_id}" / "suite" / "seen.json"
    seen = json.loads(dump.read_text())
    env: dict[str, str] = seen["env"]
    assert env.get("HARMLESS") == "1"  # the repository's own install env does arrive
    assert not [k for k in env if k.startswith("KW_")]
    assert not [k for k in env if any(m in k for m in ("TOKEN", "SECRET", "PASSWORD", "KEY"))]
    blob = json.dumps(env)
    for value in [*SECRETS.values(), fleet.pg_url, fleet.redis.url, "127.0.0.1:5432"]:
        assert value not in blob
    if os.geteuid() != 0:
        # The worker is non-dumpable: same-uid code cannot read its /proc/<pid>/environ.
        assert seen["parent_environ"].startswith("unreadable")


def test_kill_9_of_the_main_process_takes_the_busy_pool_child_along(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Issue 24: the pool child lived on as an orphan (PPID 1) and finished the run."""
    slow, slow_sha = library(tmp_path, "orphanlib", suite="noop", sleep={"noop": 60.0})
    w = fleet.worker("orphaned")
    fleet.wait_ready(w)
    orphaned = fleet.plan(slow, slow_sha, bench_args=["--budget", "0.01"])
    wait_until("the runner to start", lambda: pids_under(w.data_dir / "work"), 60)
    (pool,) = child_pids(w.proc.pid)
    os.kill(w.proc.pid, signal.SIGKILL)  # the main process only: no shutdown hook runs
    w.proc.wait(timeout=10)

    def gone() -> bool:
        try:
            state = Path(f"/proc/{pool}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            state = "gone"
        return state in ("gone", "Z") and not pids_under(w.data_dir / "work")

    wait_until("the pool child and its runner to die", gone, 15)
    # Its run is left to no one: end it, or the next test's worker re-sends it (the
    # reconciler) and spends 60 s on it first (the cancellation test read that runner
    # as its own and waited 40 s for a kill that was not its to make)
    cancel_runs(fleet.factory, fleet.settings, [orphaned], "test over")
    assert fleet.run(orphaned).status not in ("queued", "running")


def test_cancelled_runs_stop_queued_and_running_and_the_worker_goes_on(
    fleet: Fleet, tmp_path: Path
) -> None:
    slow, slow_sha = library(tmp_path, "longlib", suite="noop", sleep={"noop": 60.0})
    quick, quick_sha = library(tmp_path, "quicklib", suite="noop")
    w = fleet.worker("cancellee")
    fleet.wait_ready(w)
    running = fleet.plan(slow, slow_sha, bench_args=["--budget", "0.01"])
    queued = fleet.plan(quick, quick_sha, bench_args=["--budget", "0.01"])
    wait_until("the runner to start", lambda: pids_under(w.data_dir / "work"), 60)
    assert fleet.run(queued).status == "queued"

    t0 = time.monotonic()
    done = cancel_runs(fleet.factory, fleet.settings, [running, queued, 10**9], "superseded")
    assert sorted(done) == sorted([running, queued])
    wait_until("the runner to be killed", lambda: not pids_under(w.data_dir / "work"), 20)
    assert time.monotonic() - t0 < 20
    # the cancelled queued message is consumed without being run
    wait_until("the queue to drain", lambda: fleet.queue_depth() == 0, 30)
    for run_id in (running, queued):
        run = fleet.run(run_id)
        assert run.status == "cancelled" and run.error == "superseded"
    assert fleet.run(queued).attempts == 0
    assert "WorkerLostError" not in w.log_text()  # the task ended, its process lives on
    assert fleet.results(queued) == {}

    after = final(fleet, fleet.plan(quick, quick_sha, bench_args=["--budget", "0.01"]), 60)
    assert after.status == "succeeded" and after.worker == w.node
    assert w.proc.poll() is None


def test_unhealthy_worker_leaves_its_queue_until_it_recovers(fleet: Fleet, tmp_path: Path) -> None:
    sick = tmp_path / "gpu-is-sick"
    sick.touch()
    src, sha = library(tmp_path, "healthlib", suite="noop")
    w = fleet.worker("patient", KW_HEALTH_COMMAND=f"test ! -e {sick}")
    fleet.wait_ready(w)
    hb = fleet.heartbeat(w.node)
    assert hb is not None and hb.state == "unhealthy"
    run_id = fleet.plan(src, sha, bench_args=["--budget", "0.01"])
    time.sleep(6)
    assert fleet.run(run_id).status == "queued"  # not consumed while unhealthy

    sick.unlink()  # the GPU recovers: the next re-check puts the worker back in service
    assert final(fleet, run_id, 60).status == "succeeded"
    wait_until("an idle heartbeat", lambda: fleet.heartbeat(w.node).state == "idle", 20)  # type: ignore[union-attr]

    # Unhealthy after a task: the check between tasks takes it out of service again.
    sick.touch()
    second = fleet.plan(src, sha, bench_args=["--budget", "0.01"])
    # other options, so the planner does not join it to ``second`` (jobs/planning/dedup.py)
    third = fleet.plan(src, sha, bench_args=["--budget", "0.02"])
    assert third != second
    assert final(fleet, second, 60).status == "succeeded"
    wait_until("an unhealthy heartbeat", lambda: fleet.heartbeat(w.node).state == "unhealthy", 20)  # type: ignore[union-attr]
    time.sleep(4)
    assert fleet.run(third).status == "queued"
    sick.unlink()
    assert final(fleet, third, 60).status == "succeeded"


def test_per_gpu_supervisor_restarts_a_killed_worker(fleet: Fleet, tmp_path: Path) -> None:
    data = tmp_path / "supervised"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KW_")}
    env.update(
        KW_DATABASE_URL=fleet.pg_url,
        KW_BROKER_URL=fleet.redis.url,
        KW_DATA_DIR=str(data),
        KW_HEARTBEAT_S="1",
        CUDA_VISIBLE_DEVICES="",  # a CPU host: one cpu worker
    )
    log = tmp_path / "supervisor.log"
    with open(log, "ab") as fh:
        sup = subprocess.Popen(
            [sys.executable, "-m", "kernelwatch.worker.fleet_cli", "--name", "sup"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    node = f"sup-cpu@{HOST}"
    try:
        started = datetime.now(UTC)
        first = wait_until(
            "the supervised worker",
            lambda: (hb := fleet.heartbeat(node)) and hb.started >= started and hb,
            90,
        )
        (child,) = wait_until("one child", lambda: child_pids(sup.pid), 10)
        os.killpg(child, signal.SIGKILL)
        wait_until(
            "a restarted worker",
            lambda: (hb := fleet.heartbeat(node)) and hb.started > first.started,
            90,
        )
        src, sha = library(tmp_path, "suplib", suite="noop")
        run = final(fleet, fleet.plan(src, sha, bench_args=["--budget", "0.01"]), 60)
        assert run.status == "succeeded" and run.worker == node
        assert "exited (-9); restart in 1 s" in log.read_text()
    finally:
        sup.terminate()
        assert sup.wait(timeout=60) == 0
    gone = fleet.heartbeat(node)
    assert gone is not None and gone.state == "gone"


def child_pids(parent: int) -> list[int]:
    from kernelwatch.worker.heartbeat import child_pids as children

    return children(parent)
