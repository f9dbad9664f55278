"""Commit order comes from git, not from the order commits happened to be planned in.

``kernelwatch run --commit X`` plans X and then its baseline; numbering commits as
they were inserted put the parent after X on the Trends page (a fake step) and fed
change-point detection a shuffled series. Here X is planned first, the rest of the
history after, and the plotted order (``dashboard/queries.py:trend``) and the change
point (``jobs/judging/history.py``) must both follow git's first-parent order.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, selectinload, sessionmaker

from kernelwatch.dashboard import queries
from kernelwatch.db.config import Settings
from kernelwatch.db.models import Case, Commit, Regression, Result, Run
from kernelwatch.db.session import make_engine
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from kernelwatch.jobs.judging.history import scan_run
from kernelwatch.jobs.library.mirror import repository_name
from kernelwatch.jobs.planning.plan import RunRequest, plan
from tests.helpers import make_repo

CASE = "order-case-1"
N = 16  # commits: a rank test needs 8 on each side of a step at 1 % significance


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def history(root: Path, n: int) -> tuple[str, list[str]]:
    """A linear main branch of ``n`` commits; returns (path, shas oldest first)."""
    path = root / "lib"
    shas = [make_repo(path, {f"f{i}.txt": f"{i}\n"}, f"commit {i}") for i in range(1, n + 1)]
    return str(path), shas


def measured(factory: sessionmaker[Session], medians: dict[str, float]) -> None:
    """Every planned run succeeded with one passing case at ``medians[sha]`` seconds."""
    with factory() as s, s.begin():
        if s.get(Case, CASE) is None:
            s.add(Case(id=CASE, suite="basic", kernel="softmax", backend="torch", params={}))
        for run in s.scalars(select(Run).options(selectinload(Run.commit))):
            assert run.commit is not None
            run.status = "succeeded"
            median = medians[run.commit.sha]
            s.add(
                Result(
                    run_id=run.id,
                    case_id=CASE,
                    status="pass",
                    median_s=median,
                    ci_low_s=median * 0.99,
                    ci_high_s=median * 1.01,
                    n_samples=3,
                    samples=[median] * 3,
                    reliable=True,
                    record={},
                )
            )


def test_a_commit_planned_before_its_baseline_plots_after_it(
    tmp_path: Path, factory: sessionmaker[Session], engine: Engine, db_url: str
) -> None:
    src, shas = history(tmp_path, N)
    settings = Settings(data_dir=tmp_path / "kw", database_url=db_url)
    settings.ensure_dirs()
    x = shas[N // 2]  # the slow one: it and every commit after are 50 % slower
    # ``kernelwatch run --commit X`` first: X, then its parent as baseline
    plan(factory, settings, None, RunRequest(source=src, commits=[x]))
    # then the rest of the history
    plan(factory, settings, None, RunRequest(source=src, range=f"{shas[0]}..{shas[-1]}"))
    with factory() as s:
        seq = dict(s.execute(select(Commit.sha, Commit.sequence)).all())
    assert [seq[sha] for sha in shas] == list(range(1, N + 1))  # first-parent depth

    rng = random.Random(7)
    medians = {
        sha: 1e-3 * (1.5 if i >= N // 2 else 1.0) * (1 + rng.gauss(0, 0.003))
        for i, sha in enumerate(shas)
    }
    measured(factory, medians)
    with factory() as s:
        repo_id = get_or_create_repository(s, repository_name(src), src).id
    trend = queries.trend(engine, [CASE], repo_id, "cpu")
    assert list(trend["sha"]) == shas  # the plotted order is git's
    assert list(trend["sequence"]) == list(range(1, N + 1))

    with factory() as s, s.begin():
        newest = s.scalars(
            select(Run).join(Commit, Run.commit_id == Commit.id).where(Commit.sha == shas[-1])
        ).one()
        found = scan_run(s, newest, min_effect=0.01)
        flagged = s.scalars(
            select(Commit.sha)
            .join(Run, Run.commit_id == Commit.id)
            .where(Run.id.in_([r.run_id for r in found]))
        ).all()
    assert flagged == [x]  # the change point is where git says the step is
    with factory() as s:
        assert s.scalars(select(Regression)).one().ratio == pytest.approx(1.5, rel=0.01)


def test_an_insertion_numbered_commit_is_put_in_git_order_when_planned(
    tmp_path: Path, factory: sessionmaker[Session], db_url: str
) -> None:
    src, shas = history(tmp_path, 3)
    settings = Settings(data_dir=tmp_path / "kw", database_url=db_url)
    settings.ensure_dirs()
    with factory() as s, s.begin():  # stored before, by a path that knew no order
        repo = get_or_create_repository(s, repository_name(src), src)
        upsert_commit(s, repo, shas[2], [shas[1]])
        upsert_commit(s, repo, shas[0], [])
    plan(factory, settings, None, RunRequest(source=src, commits=[shas[2]]))
    with factory() as s:
        seq = dict(s.execute(select(Commit.sha, Commit.sequence)).all())
    assert seq[shas[2]] == 3  # corrected from its insertion number, 1
    assert seq[shas[1]] == 2  # the baseline, new, in git order
