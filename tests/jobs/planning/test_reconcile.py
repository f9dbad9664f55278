"""No run stuck: the outbox, the reconciler pass and its thread in the API process.

Real Redis (a private ``redis-server`` a test can stop), real SQLite and PostgreSQL,
the real webhook application. What is checked: a broker outage at planning is a 503
with the run committed and sent once the broker is back (by the reconciler, or by
the redelivered webhook that joins it); a run that keeps killing its worker ends as
``error`` with the reason; the API process runs the pass by itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from celery import Celery
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db import outbox
from kernelwatch.db.config import Settings
from kernelwatch.db.fleet import beat
from kernelwatch.db.github import RunLink, WebhookDelivery
from kernelwatch.db.models import Run
from kernelwatch.db.session import make_engine
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from kernelwatch.jobs.planning.broker import enqueue_run, make_celery, queue_depth
from kernelwatch.jobs.planning.reconcile import (
    ReconcileConfig,
    Send,
    end_crash_loops,
    reconcile_once,
)
from tests.fake_github import FakeGitHub
from tests.jobs.github.test_webhooks import Api, build_source, push_payload, watched
from tests.worker.test_fleet import RedisServer, wait_until

SHA = "a" * 40


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", persistent=False)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def factory(db_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(db_url)
    yield sessionmaker(bind=engine, expire_on_commit=False)
    engine.dispose()


def add_run(factory: sessionmaker[Session], **fields: object) -> int:
    with factory() as s, s.begin():
        repo = get_or_create_repository(s, "lib", "/src/lib")
        commit = upsert_commit(s, repo, SHA, [])
        run = Run(repository_id=repo.id, commit_id=commit.id, suites=["basic"], **fields)
        s.add(run)
        s.flush()
        return run.id


@pytest.mark.redis
def test_broker_down_at_planning_is_503_and_the_run_is_sent_when_it_is_back(
    tmp_path: Path, fake: FakeGitHub, redis_server: RedisServer
) -> None:
    source = build_source(tmp_path)
    api = Api(tmp_path, fake, watched(source), broker_url=redis_server.url)
    payload = push_payload(source, source["A"], source["B"])
    redis_server.stop()

    r = api.post("push", payload, delivery="outage-1")
    assert r.status_code == 503, r.text
    assert "broker unreachable" in r.json()["detail"]
    with api.factory() as s:
        runs = s.scalars(select(Run)).all()
        assert runs and all(run.status == "queued" for run in runs)  # committed all the same
        assert {p.run_id for p in s.scalars(select(outbox.PendingSend))} == {r.id for r in runs}
        assert {link.run_id for link in s.scalars(select(RunLink))} == {r.id for r in runs}
        assert s.scalars(select(WebhookDelivery)).all() == []  # released for redelivery
    # the reconciler, while the broker is still down, keeps the notes
    config = ReconcileConfig(unsent_after_s=0.001, queued_after_s=3600)
    app = api.ctx.celery
    assert app is not None
    report = reconcile_once(api.factory, _sender(app), config)
    assert report.sent == []

    redis_server.start()  # empty: it keeps nothing
    report = reconcile_once(api.factory, _sender(app), config)
    assert sorted(report.sent) == sorted(run.id for run in runs)
    assert queue_depth(app, "cpu") == len(runs)
    with api.factory() as s:
        assert s.scalars(select(outbox.PendingSend)).all() == []


@pytest.mark.redis
def test_a_redelivered_webhook_that_joins_an_unsent_run_sends_it(
    tmp_path: Path, fake: FakeGitHub, redis_server: RedisServer
) -> None:
    source = build_source(tmp_path)
    api = Api(tmp_path, fake, watched(source), broker_url=redis_server.url)
    payload = push_payload(source, source["A"], source["B"])
    redis_server.stop()
    assert api.post("push", payload, delivery="outage-2").status_code == 503
    with api.factory() as s:
        before = sorted(s.scalars(select(Run.id)))
    redis_server.start()
    r = api.post("push", payload, delivery="outage-2")  # GitHub's "Redeliver"
    assert r.status_code == 202 and r.json()["status"] == "planned", r.text
    with api.factory() as s:
        ids = sorted(s.scalars(select(Run.id)))
        assert s.scalars(select(outbox.PendingSend)).all() == []
    assert ids == before and set(r.json()["runs"]) < set(ids)  # joined, not planned twice
    assert queue_depth(api.ctx.celery, "cpu") == len(ids)


def _sender(app: Celery | None) -> Send:
    assert app is not None

    def send(run_id: int, queue: str, trigger: str) -> None:
        enqueue_run(app, run_id, queue, trigger)

    return send


def test_runs_that_keep_killing_their_worker_end_as_error(
    factory: sessionmaker[Session],
) -> None:
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    third_dead = add_run(factory, status="running", worker="w1@h", attempts=3, started=long_ago)
    second_dead = add_run(factory, status="running", worker="w1@h", attempts=2, started=long_ago)
    looping = add_run(factory, status="running", worker="w2@h", attempts=4, started=long_ago)
    third_live = add_run(factory, status="running", worker="w3@h", attempts=3, started=long_ago)
    with factory() as s, s.begin():
        beat(s, "w1@h").last_seen = long_ago
        beat(s, "w2@h", current_run_id=looping)  # alive, but on its 4th attempt
        beat(s, "w3@h", current_run_id=third_live)
    ended = end_crash_loops(factory, stale_s=60, max_attempts=3)
    assert sorted(ended) == sorted([third_dead, looping])
    with factory() as s:
        run = s.get(Run, third_dead)
        assert run is not None and run.status == "error" and run.finished is not None
        assert "died 3 times" in run.error and "w1@h" in run.error
        loop = s.get(Run, looping)
        assert loop is not None and loop.status == "error" and "died 3 times" in loop.error
        for kept in (second_dead, third_live):
            r = s.get(Run, kept)
            assert r is not None and r.status == "running"


def test_a_lost_message_is_sent_again_only_when_the_queue_is_short(
    factory: sessionmaker[Session],
) -> None:
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    ids = [add_run(factory, created=long_ago) for _ in range(3)]
    sent: list[int] = []
    config = ReconcileConfig(stale_s=60, queued_after_s=60)

    def send(run_id: int, queue: str, trigger: str) -> None:
        sent.append(run_id)

    # three queued runs, three messages: nothing is missing
    assert reconcile_once(factory, send, config, lambda q: 3).requeued == []
    # two messages for three runs: which one is lost cannot be told, all are re-sent
    assert sorted(reconcile_once(factory, send, config, lambda q: 2).requeued) == ids
    assert sorted(sent) == ids
    # and not again within the stale period
    assert reconcile_once(factory, send, config, lambda q: 0).requeued == []


def test_the_api_process_runs_the_reconciler(tmp_path: Path, sqlite_url: str) -> None:
    """A queued run with no message is found by the API's own loop and sent."""
    from kernelwatch.jobs.api import create_app

    settings = Settings(data_dir=tmp_path / "kw", database_url=sqlite_url, webhook_secret="s")
    settings.ensure_dirs()
    engine = make_engine(sqlite_url)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    celery_app = make_celery(settings)  # the embedded (filesystem) broker
    run_id = add_run(factory, created=datetime.now(UTC) - timedelta(hours=1))
    config = ReconcileConfig(interval_s=0.2, stale_s=60, queued_after_s=1)
    app = create_app(
        settings, factory, celery_app, None, repos={}, reporter_interval_s=None, reconcile=config
    )
    started = time.monotonic()
    with TestClient(app):
        wait_until("the reconciler to send the run", lambda: queue_depth(celery_app, "cpu"), 20)
    took = time.monotonic() - started
    with factory() as s:
        run = s.get(Run, run_id)
        assert run is not None and run.options.requeues == 1
    assert took < 20
    engine.dispose()


def test_reconcile_knobs_come_from_the_environment_and_the_lease(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, heartbeat_s=1.0)
    env = {
        "KW_RECONCILE_INTERVAL_S": "5",
        "KW_MAX_ATTEMPTS": "2",
        "KW_RECONCILE_UNSENT_AFTER_S": "",
    }
    config = ReconcileConfig.from_settings(settings, env)
    assert (config.interval_s, config.max_attempts, config.unsent_after_s) == (5.0, 2, 10.0)
    assert config.stale_s == 8.0  # the worker's lease rule: 3 beats + 5 s
    with pytest.raises(ValueError, match="KW_RECONCILE_QUEUED_AFTER_S"):
        ReconcileConfig.from_settings(settings, {"KW_RECONCILE_QUEUED_AFTER_S": "soon"})


# ----------------------------------------------------------------------------- issue 24, hole 11
# The reconciler ran only inside the API: a deployment of workers (and `kernelwatch run`)
# without the API never re-sent a lost message. It runs in every worker now, one pass
# at a time fleet-wide.


@pytest.mark.redis
@pytest.mark.parametrize("kind", ["redis", "file"])
def test_one_pass_per_interval_however_many_processes_wake(
    tmp_path: Path, redis_db_url: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelwatch.jobs.planning import reconcile
    from kernelwatch.jobs.planning.passlock import pass_lock

    spans: list[tuple[float, float]] = []

    stamp = tmp_path / "locks" / "reconcile.last"

    def fake_pass(*_: object, **__: object) -> reconcile.PassReport:
        # the file lock's own record of when this pass was let through (its thread may
        # be descheduled between that and here on a loaded CPU: 0.43 s apart once)
        start = float(stamp.read_text()) if kind == "file" else time.time()
        time.sleep(0.15)  # a pass takes a while: another process must not start one
        spans.append((start, time.time()))
        return reconcile.PassReport()

    monkeypatch.setattr(reconcile, "reconcile_once", fake_pass)
    interval = 0.5
    config = ReconcileConfig(interval_s=interval)
    broker = redis_db_url if kind == "redis" else None
    threads = [
        reconcile.ReconcilerThread(
            None,  # type: ignore[arg-type]  # the fake pass needs no database
            None,  # type: ignore[arg-type]
            ReconcileConfig(interval_s=0.05),  # each process wakes often
            pass_lock(broker, tmp_path, "reconcile", config.interval_s),
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    time.sleep(2.6)
    for t in threads:
        t.stop()
    spans.sort()
    assert sum(t.ran for t in threads) == len(spans)
    assert sum(t.passes for t in threads) > 4 * len(spans)  # woke often, ran rarely
    assert 3 <= len(spans) <= 6, spans  # ~2.6 s / 0.5 s, not one per wake-up
    for (a0, a1), (b0, _) in zip(spans, spans[1:], strict=False):
        assert b0 >= a1, "two passes at once"
        assert b0 - a0 >= interval * 0.9, "two passes within one interval"


@pytest.mark.redis
def test_a_worker_without_the_api_sends_a_lost_message_again(
    tmp_path: Path, redis_server: RedisServer, sqlite_url: str
) -> None:
    from kernelwatch.db.migrate import upgrade
    from kernelwatch.jobs.cli.processes import worker_running

    settings = Settings(
        data_dir=tmp_path / "data", database_url=sqlite_url, broker_url=redis_server.url
    )
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url)
    engine = make_engine(sqlite_url)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    # queued an hour ago, its message lost (Redis restarted without persistence, say)
    run_id = add_run(factory, created=datetime.now(UTC) - timedelta(hours=1), queue="cpu")
    knobs = {"KW_RECONCILE_INTERVAL_S": "0.5", "KW_RECONCILE_QUEUED_AFTER_S": "1"}
    with worker_running(settings, queue="cpu", name="healer", extra_env=knobs):

        def moved() -> bool:
            with factory() as s:
                run = s.get(Run, run_id)
                return run is not None and run.status != "queued"

        wait_until("the worker to re-send and take the run", moved, 60)
    with factory() as s:
        run = s.get(Run, run_id)
        assert run is not None and run.options.requeues == 1
        assert run.attempts == 1  # taken by the worker: the message was sent again
    engine.dispose()
