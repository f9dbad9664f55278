"""Sending builds ahead of a bisection (``jobs/planning/build_ahead.py``, ``advance``).

The pure part with the fake measurement of ``test_bisect_search.py`` (every commit sent
once, before the step that needs it); the driver's part on SQLite and PostgreSQL with
the step runs ended by hand (``test_bisect_driver.py``'s model) and real Redis: what
lands in the ``build`` queue, nothing sent twice across fresh processes, ``0`` turns it
off, a broker that is down leaves the bisection going.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
import redis
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Case
from kernelwatch.db.session import engine_for
from kernelwatch.jobs.planning import bisect_driver as driver
from kernelwatch.jobs.planning.bisect import Limits, Outcome, Purpose, Step
from kernelwatch.jobs.planning.broker import BUILD_AHEAD, make_celery, queue_depth
from kernelwatch.jobs.planning.build_ahead import due, send, wanted
from kernelwatch.jobs.planning.queues import BUILD_QUEUE
from tests.helpers import make_repo
from tests.jobs.planning.test_bisect_driver import UNBUILDABLE, N, finish_in_flight
from tests.jobs.planning.test_bisect_search import history, simulate

DOWN = "redis://127.0.0.1:1/0"  # nothing listens there


def in_flight(step: Step) -> Step:
    return Step(step.index, step.against, step.purpose)


@pytest.mark.parametrize("culprit", [1, 20, 41, 63])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_each_commit_is_sent_once_and_before_the_step_that_measures_it(
    culprit: int, depth: int
) -> None:
    _, steps = simulate(64, history(64, {culprit: 3.0}), frozenset({31}), establish=True)
    sent: list[int] = []
    for k in range(len(steps)):
        planned = [*steps[:k], in_flight(steps[k])]
        new = due(63, planned, Limits(), establish=True, depth=depth)
        built = {i for s in planned for i in (s.index, s.against)}
        assert not built & set(new)  # the step in flight builds its own
        sent += new
        if k + 1 < len(steps) and steps[k].outcome != Outcome.SKIP:
            assert {steps[k + 1].index, steps[k + 1].against} <= built | set(sent)
    assert len(sent) == len(set(sent))
    assert due(63, [], Limits(), establish=True, depth=2) == []
    assert due(63, [in_flight(steps[0])], Limits(), establish=True, depth=0) == []


def test_a_build_is_wanted_while_the_search_may_still_measure_it() -> None:
    first = [Step(63, 0, Purpose.ESTABLISH, Outcome.BAD), Step(31, 0, Purpose.SEARCH)]
    assert wanted(63, first, Limits(), establish=True, depth=1) == {0, 31, 47, 15}
    # 31 good: the lower half is not searched any more
    later = [*first[:1], Step(31, 0, Purpose.SEARCH, Outcome.GOOD), Step(47, 0, Purpose.SEARCH)]
    assert 15 not in wanted(63, later, Limits(), establish=True, depth=2)
    assert {39, 55} <= wanted(63, later, Limits(), establish=True, depth=1)


def build_messages(url: str) -> list[list[object]]:
    """The args of every build-ahead waiting in the ``build`` queue, oldest first."""
    client = redis.Redis.from_url(url)
    out: list[list[object]] = []
    for key in sorted(client.keys(f"{BUILD_QUEUE}*")):
        for raw in reversed(client.lrange(key, 0, -1)):  # kombu pushes left, pops right
            msg = json.loads(raw)
            assert msg["headers"]["task"] == BUILD_AHEAD
            args, _, _ = json.loads(base64.b64decode(msg["body"]))
            out.append(list(args))
    client.close()
    return out


@pytest.mark.redis
def test_send_puts_one_message_per_commit_on_the_build_queue(redis_db_url: str) -> None:
    app = make_celery(Settings(broker_url=redis_db_url))
    assert send(app, 7, ["a" * 40, "b" * 40], 2) == ["a" * 40, "b" * 40]
    assert queue_depth(app, BUILD_QUEUE) == 2 and queue_depth(app, "cpu") == 0
    assert build_messages(redis_db_url) == [[7, "a" * 40, 2], [7, "b" * 40, 2]]
    t0 = time.monotonic()
    assert send(make_celery(Settings(broker_url=DOWN)), 7, ["c" * 40], 2) == []
    assert time.monotonic() - t0 < 20  # no reconnecting forever


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> tuple[sessionmaker[Session], Settings, list[str]]:
    src = tmp_path / "lib"
    shas = [make_repo(src, {"f": f"{i}\n"}, f"commit {i}") for i in range(N)]
    settings = Settings(data_dir=tmp_path / "data", database_url=db_url)
    settings.ensure_dirs()
    factory = sessionmaker(bind=engine_for(db_url), expire_on_commit=False)
    with factory() as s, s.begin():
        s.merge(Case(id="c1", suite="basic", kernel="softmax", backend="lib", params={}))
    return factory, settings, [str(src), *shas]


@pytest.mark.redis
def test_advance_sends_the_next_steps_builds_once_across_restarts(
    world: tuple[sessionmaker[Session], Settings, list[str]], redis_db_url: str
) -> None:
    factory, settings, (src, *shas) = world
    settings = settings.model_copy(update={"broker_url": redis_db_url})
    app = make_celery(settings)
    bid = driver.start(factory, settings, driver.BisectRequest(src, shas[0], shas[-1]))
    status = driver.advance(factory, settings, app, bid)  # establish: 11 against 0
    # its two outcomes' next steps: 5 (bad), then 8 or 2
    assert [m[1] for m in build_messages(redis_db_url)] == [shas[5], shas[8], shas[2]]
    assert all(m[0] == bid and m[2] == 2 for m in build_messages(redis_db_url))
    while status == "running":
        assert finish_in_flight(factory, shas)
        # every pass a fresh process, as after a restart: the sent set is the steps' own
        fresh = sessionmaker(bind=factory.kw["bind"], expire_on_commit=False)
        status = driver.advance(fresh, settings, make_celery(settings), bid)
        assert driver.advance(fresh, settings, app, bid) == status  # nothing new planned
    assert status == "found"
    sent = [m[1] for m in build_messages(redis_db_url)]
    assert len(sent) == len(set(sent)) and shas[0] not in sent
    with factory() as s:
        row = s.get(driver.Bisection, bid)
        assert row is not None
        measured = [st.sha for st in row.steps]
        after_skip = {b.sha for a, b in zip(row.steps, row.steps[1:], strict=False) if a.skipped}
    # every commit a step measured was sent ahead, but the first step's (bad and good) and
    # the neighbour tried after the commit that does not build (a skip is not explored)
    assert shas[UNBUILDABLE] in measured and after_skip
    assert set(measured) - {shas[0], shas[-1]} - after_skip <= set(sent)
    assert queue_depth(app, "cpu") == len(measured)  # the step runs themselves, once each


@pytest.mark.redis
def test_zero_turns_it_off(
    world: tuple[sessionmaker[Session], Settings, list[str]], redis_db_url: str
) -> None:
    factory, settings, (src, *shas) = world
    off = settings.model_copy(update={"broker_url": redis_db_url, "bisect_build_ahead": 0})
    bid = driver.start(factory, off, driver.BisectRequest(src, shas[0], shas[-1]))
    assert driver.advance(factory, off, make_celery(off), bid) == "running"
    assert build_messages(redis_db_url) == []
    assert queue_depth(make_celery(off), "cpu") == 1  # the step itself is sent


def test_a_broker_that_is_down_only_costs_the_builds_ahead(
    world: tuple[sessionmaker[Session], Settings, list[str]],
) -> None:
    factory, settings, (src, *shas) = world
    down = settings.model_copy(update={"broker_url": DOWN})
    bid = driver.start(factory, down, driver.BisectRequest(src, shas[0], shas[-1]))
    status = driver.advance(factory, down, make_celery(down), bid)
    while status == "running":  # the step runs wait in the outbox; the search goes on
        assert finish_in_flight(factory, shas)
        status = driver.advance(factory, down, make_celery(down), bid)
    assert status == "found"


def test_the_setting_is_validated() -> None:
    assert Settings().bisect_build_ahead == 2
    with pytest.raises(ValueError, match="bisect_build_ahead"):
        Settings(bisect_build_ahead=-1)
