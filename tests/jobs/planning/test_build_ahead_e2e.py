"""Builds ahead end to end: a build worker on the ``build`` queue, a step worker on ``cpu``.

Real Celery workers on Redis, PostgreSQL, the torch matmul library of
``test_bisect_e2e.py`` in 16 commits (commit 5 ``less_accurate``). The test drives the bisection as
``kernelwatch bisect --wait`` does (``advance`` in a loop); before each step is planned
it waits until the step's commits are in the environment cache, which only the build
worker can have put there (no run of them was planned yet). Then every step run after
the first must say in its log that it found its environments cached, i.e. built
nothing itself, and the culprit must still be named.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.bisect import Bisection
from kernelwatch.db.config import Settings
from kernelwatch.db.migrate import upgrade
from kernelwatch.db.models import FINAL_STATES, Run
from kernelwatch.db.session import engine_for, make_engine
from kernelwatch.jobs.cli.processes import worker_running
from kernelwatch.jobs.planning import bisect_driver as driver
from kernelwatch.jobs.planning.bisect import Limits, Measure, next_action
from kernelwatch.jobs.planning.broker import make_celery
from kernelwatch.jobs.planning.queues import BUILD_QUEUE
from kernelwatch.worker.venvs import MARKER
from tests.conftest import create_pg_database, drop_pg_database
from tests.helpers import MATMUL_GOOD, MATMUL_SPLIT_K
from tests.jobs.planning.test_bisect_e2e import TOML, history

# crowd: several Celery workers and sandboxed builds each; beside another file's
# multi-process tests on the 2-core CI machine they pushed paired runs past their waits
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis, pytest.mark.crowd]


@pytest.fixture
def settings(tmp_path: Path, redis_db_url: str) -> Iterator[Settings]:
    pg = create_pg_database("kw_ahead")
    upgrade(pg)
    s = Settings(data_dir=tmp_path / "data", database_url=pg, broker_url=redis_db_url)
    s.ensure_dirs()
    yield s
    engine_for(pg).dispose()
    drop_pg_database(pg)


def cached_shas(settings: Settings) -> set[str]:
    """Commits with a complete environment in the cache (the marker is written last)."""
    found = set()
    for marker in (settings.data_dir / "venvs" / "entries").glob(f"*/{MARKER}"):
        found.add(str(json.loads(marker.read_text())["spec"]).rsplit("@", 1)[-1])
    return found


def next_commits(factory: sessionmaker[Session], bid: int) -> set[str] | None:
    """The commits of the step ``advance`` is about to plan; None while its step runs."""
    with factory() as s:
        row = s.get(Bisection, bid)
        assert row is not None
        steps = driver.search_steps(row)
        for k, st in enumerate(row.steps):
            if st.outcome is None:
                run = s.get(Run, st.run_id)
                assert run is not None
                if run.status not in FINAL_STATES or run.verdict is None:
                    return None
                steps[k] = replace(steps[k], outcome=driver.judge_step(s, run, "")[0])
        action = next_action(len(row.commits) - 1, steps, Limits(), establish=row.establish)
        if not isinstance(action, Measure):
            return set()
        return {row.commits[action.index], row.commits[action.against]}


def step_decided(factory: sessionmaker[Session], bid: int, timeout_s: float = 600) -> set[str]:
    """Wait for the step in flight to end; the commits of the step that follows it."""
    deadline = time.monotonic() + timeout_s
    while (coming := next_commits(factory, bid)) is None:
        assert time.monotonic() < deadline, "timed out waiting for the step run"
        time.sleep(0.5)
    return coming


def wait_cached(settings: Settings, shas: set[str], timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not shas <= cached_shas(settings):
        assert time.monotonic() < deadline, f"timed out waiting for builds of {sorted(shas)}"
        time.sleep(0.5)


@pytest.mark.timeout(1500)
def test_the_build_worker_builds_each_step_before_the_step_worker_takes_it(
    settings: Settings, tmp_path: Path
) -> None:
    src = tmp_path / "aheadkern"
    toml = TOML.format(name="aheadkern", what="5x change", threshold=4.0)
    # 16 commits: the 64-commit search is test_bisect_e2e's; here what counts is that
    # the build worker is ahead of every step after the first
    shas = history(src, "aheadkern", MATMUL_GOOD, MATMUL_SPLIT_K, 5, None, toml, count=16)
    factory = sessionmaker(bind=make_engine(str(settings.database_url)), expire_on_commit=False)
    app = make_celery(settings)
    bench = ["--kernel", "matmul", "--pairs", "1", "--budget", "0.3"]
    req = driver.BisectRequest(str(src), shas[0], shas[-1], bench_args=bench)
    t0 = time.monotonic()
    with (
        worker_running(settings, "cpu", "steps"),
        worker_running(settings, BUILD_QUEUE, "builder"),
    ):
        bid = driver.start(factory, settings, req)
        status = driver.advance(factory, settings, app, bid)  # establish: bad against good
        while status == "running":
            wait_cached(settings, step_decided(factory, bid))
            status = driver.advance(factory, settings, app, bid)
    wall = time.monotonic() - t0
    assert status == "found"
    with factory() as s:
        row = s.get(Bisection, bid)
        assert row is not None and row.culprit_sha == shas[5]
        assert row.culprit_verdict == "less_accurate"
        steps = list(row.steps)
        logs = [(st, (s.get(Run, st.run_id) or Run()).build_log or "") for st in steps]
        seconds = row.gpu_seconds
    print(
        f"\nbisection {bid}: {len(steps)} steps, {seconds:.0f} device s, wall {wall:.0f} s: "
        + ", ".join(f"{shas.index(st.sha)}:{st.purpose}:{st.verdict}" for st in steps)
    )
    first, *later = logs
    assert f"{shas[-1][:12]}: built in" in first[1]  # nobody could have built it before
    for st, log in later:
        for sha in (st.sha, st.against_sha):
            assert f"{sha[:12]}: cached environment" in log, (shas.index(sha), log[-2000:])
        assert ": built in" not in log
    assert len(later) >= 5  # after the establish: 4 search steps, confirm, residual
