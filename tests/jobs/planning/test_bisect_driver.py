"""The bisection driver on SQLite and PostgreSQL, with the step runs finished by hand.

No worker: each step's paired run is planned for real (``plan`` with no broker) and
then ended here the way the worker and analysis would end it (state, times, one
judged result), from a model of a 12-commit history whose commit 7 is 3x slower and
whose commit 5 does not build. What is checked is the driver: what it plans, how it
reads finished runs, where the culprit and the device time end up, joining,
cancelling, the gate staying out of it, ``show`` naming the bisection, the automatic
trigger and the culprit's GitHub comment.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.bisect import Bisection, BisectionStep, of_run
from kernelwatch.db.config import Settings
from kernelwatch.db.models import Case, Commit, Result, Run
from kernelwatch.db.session import engine_for
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from kernelwatch.jobs.github.bisect_comment import MARKER, send_pending
from kernelwatch.jobs.github.client import GitHubClient
from kernelwatch.jobs.judging import bisect_trigger
from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.jobs.judging.verdicts import runs_of_commit
from kernelwatch.jobs.planning import bisect_driver as driver
from tests.fake_github import FakeGitHub
from tests.helpers import make_repo

CULPRIT, UNBUILDABLE, N = 7, 5, 12


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


def finish_in_flight(factory: sessionmaker[Session], shas: list[str]) -> bool:
    """End the step run in flight as the worker would: False when none is."""
    with factory() as s, s.begin():
        step = s.scalars(select(BisectionStep).where(BisectionStep.outcome.is_(None))).first()
        if step is None:
            return False
        run = s.get(Run, step.run_id)
        assert run is not None and run.options.paired and run.trigger == driver.TRIGGER
        assert run.baseline_sha == step.against_sha and run.status == "queued"
        i, a = shas.index(step.sha), shas.index(step.against_sha)
        now = datetime.now(UTC)
        run.started, run.finished = now - timedelta(seconds=30), now
        if i == UNBUILDABLE:
            run.status, run.verdict, run.error = "failed", "error", "install failed"
            return True
        slow = (i >= CULPRIT) != (a >= CULPRIT)
        ratio = 3.0 if slow else 1.0
        run.status, run.verdict = "succeeded", "fail" if slow else "pass"
        s.add(
            Result(
                run_id=run.id,
                case_id="c1",
                status="pass",
                verdict="regression" if slow else "unchanged",
                ratio=ratio,
                ratio_ci_low=ratio * 0.9,
                ratio_ci_high=ratio * 1.1,
                record={"kernel": "softmax"},
            )
        )
    return True


def drive(factory: sessionmaker[Session], settings: Settings, bid: int, shas: list[str]) -> str:
    status = driver.advance(factory, settings, None, bid)
    while status == "running":
        assert finish_in_flight(factory, shas), "running with no step in flight"
        # each pass in a fresh session factory: nothing lives in the driver but the rows
        fresh = sessionmaker(bind=factory.kw["bind"], expire_on_commit=False)
        status = driver.advance(fresh, settings, None, bid)
    return status


def test_the_culprit_is_named_the_broken_build_skipped_and_the_gate_left_alone(
    world: tuple[sessionmaker[Session], Settings, list[str]],
) -> None:
    factory, settings, (src, *shas) = world
    req = driver.BisectRequest(src, shas[0], shas[-1], case_pattern="soft*", budget_s=1e6)
    bid = driver.start(factory, settings, req)
    assert driver.start(factory, settings, req) == bid  # the same range joins
    other = driver.BisectRequest(src, shas[0], shas[-1], case_pattern="rms*")
    assert driver.start(factory, settings, other) != bid  # other cases: its own
    driver.cancel(factory, bid + 1)
    assert drive(factory, settings, bid, shas) == "found"
    with factory() as s:
        summary = driver.summary(s, bid)
        row = s.get(Bisection, bid)
        assert row is not None and summary is not None
        assert summary["culprit"] == {
            "sha": shas[CULPRIT],
            "parent": shas[CULPRIT - 1],
            "ratio": 3.0,
            "interval": [pytest.approx(2.7), pytest.approx(3.3)],
            "verdict": "regression",
        }
        steps = summary["steps"]
        assert isinstance(steps, list)
        assert [st["sha"] for st in steps if st["skipped"]] == [shas[UNBUILDABLE]]
        assert steps[0]["sha"] == shas[-1]  # bad established against good first
        purposes = [st.purpose for st in row.steps]
        assert purposes[0] == "establish" and purposes[-2:] == ["confirm", "residual"]
        assert len({st.sha for st in row.steps}) <= 5  # log2(11) + the skip + bad
        assert summary["gpu_seconds"] == pytest.approx(30.0 * len(steps))
        step_run = s.get(Run, row.steps[1].run_id)
        assert step_run is not None and step_run.options.bisection_id == bid
        # only the bisection's cases are measured: the runner gets its pattern
        assert step_run.options.bench_args[-2:] == ["--case", "soft*"]
        # step runs never decide a commit's gate result
        assert runs_of_commit(s, [row.repository_id], shas[CULPRIT]) == []
        # ``show`` of a step run names its bisection
        shown = run_summary(s, step_run)
        assert shown["bisection"]["id"] == bid and shown["bisection"]["status"] == "found"
        assert f"step of bisection {bid} (found" in format_run(shown)
        assert of_run(s, step_run.id) is not None
    assert driver.advance(factory, settings, None, bid) == "found"  # ended stays ended


def test_the_budget_ends_it_as_not_found_and_cancel_stops_the_run_in_flight(
    world: tuple[sessionmaker[Session], Settings, list[str]],
) -> None:
    factory, settings, (src, *shas) = world
    bid = driver.start(factory, settings, driver.BisectRequest(src, shas[0], shas[-1], budget_s=50))
    assert drive(factory, settings, bid, shas) == "not_found"
    with factory() as s:
        row = s.get(Bisection, bid)
        assert row is not None and "budget" in row.reason and len(row.steps) == 2
        assert driver.summary(s, bid)["culprit"] is None  # type: ignore[index]
    bid2 = driver.start(factory, settings, driver.BisectRequest(src, shas[2], shas[-1]))
    assert driver.advance(factory, settings, None, bid2) == "running"
    assert driver.cancel(factory, bid2) and not driver.cancel(factory, bid2)
    with factory() as s:
        row = s.get(Bisection, bid2)
        assert row is not None and row.status == "cancelled"
        run = s.get(Run, row.steps[0].run_id)
        assert run is not None and run.status == "cancelled"


def test_good_not_on_the_first_parent_line_of_bad_is_refused(
    world: tuple[sessionmaker[Session], Settings, list[str]],
) -> None:
    factory, settings, (src, *shas) = world
    with pytest.raises(Exception, match="does not follow|nothing to bisect"):
        driver.start(factory, settings, driver.BisectRequest(src, shas[5], shas[2]))


def test_a_push_regression_over_several_commits_records_a_bisection(
    world: tuple[sessionmaker[Session], Settings, list[str]],
) -> None:
    factory, settings, (src, *shas) = world
    with factory() as s, s.begin():
        repo = get_or_create_repository(s, "lib", src)
        commits = [upsert_commit(s, repo, sha, [], generation=i + 1) for i, sha in enumerate(shas)]

        def run(trigger: str, head: int, base: int) -> Run:
            r = Run(
                repository_id=repo.id,
                commit_id=commits[head].id,
                suites=["basic"],
                trigger=trigger,
                status="succeeded",
                verdict="fail",
                baseline_sha=shas[base],
            )
            s.add(r)
            s.flush()
            s.add(
                Result(
                    run_id=r.id,
                    case_id="c1",
                    status="pass",
                    verdict="regression",
                    record={"kernel": "softmax"},
                )
            )
            s.flush()
            s.refresh(r)
            return r

        row = bisect_trigger.on_judged(s, run("push", 9, 3))
        assert row is not None and row.commits == [] and row.case_pattern == "c1"
        assert row.bench_args == ["--kernel", "softmax"] and not row.establish
        assert bisect_trigger.on_judged(s, run("push", 9, 3)).id == row.id  # type: ignore[union-attr]
        assert bisect_trigger.on_judged(s, run("push", 4, 3)) is None  # one commit back
        assert bisect_trigger.on_judged(s, run("pull_request", 9, 3)) is None  # not main
        bid = row.id
    # the driver reads the range from git on its first pass
    assert driver.advance(factory, settings, None, bid) == "running"
    with factory() as s:
        loaded = s.get(Bisection, bid)
        assert loaded is not None and loaded.commits == shas[3:10]
        assert loaded.steps[0].purpose == "search"  # no establish: the push run did that
        assert s.scalars(select(Commit).where(Commit.sha == shas[6])).first() is not None


def test_the_culprit_gets_one_commit_comment_from_the_reporter_side(
    world: tuple[sessionmaker[Session], Settings, list[str]],
) -> None:
    factory, settings, (src, *shas) = world
    req = driver.BisectRequest(src, shas[0], shas[-1], full_name="octo/lib")
    bid = driver.start(factory, settings, req)
    assert drive(factory, settings, bid, shas) == "found"
    with FakeGitHub() as gh:
        client = GitHubClient("test-token", gh.url, backoff_s=0.01)
        assert send_pending(factory, client, "https://kw.test") == [bid]
        assert send_pending(factory, client, "https://kw.test") == []  # once
        client.close()
        (comment,) = gh.commit_comments[("octo/lib", shas[CULPRIT])]
        # the commit where the regression was seen links to the answer
        status = gh.latest_status("octo/lib", shas[-1], "kernelwatch/bisect")
    body = comment["body"]
    assert MARKER in body and "regression" in body and "3.000× [2.700, 3.300]" in body
    link = f"https://kw.test/?page=bisect&id={bid}"
    assert shas[CULPRIT - 1][:12] in body and link in body
    assert status is not None and status["state"] == "failure"
    assert status["target_url"] == link and shas[CULPRIT][:12] in status["description"]
    assert send_pending(factory, None, "https://kw.test") == []  # no token: nothing


def test_the_command_line_says_what_it_needs_and_what_it_cannot_cancel(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    env = {"KW_DATA_DIR": str(tmp_path / "kw")}
    proc = run_cli("bisect", env=env, timeout=120)
    assert proc.returncode == 2 and "give SOURCE --good A --bad B" in proc.stderr
    proc = run_cli("bisect", "--cancel", "999", env=env, timeout=120)
    assert proc.returncode == 2 and "bisection 999 is not running" in proc.stderr


def test_the_command_line_warns_when_no_worker_would_take_the_steps(
    sqlite_url: str, tmp_path: Path
) -> None:
    from tests.conftest import run_cli

    src = tmp_path / "lib"
    shas = [make_repo(src, {"k.py": f"{i}\n"}, f"commit {i}") for i in range(4)]
    env = {"KW_DATABASE_URL": sqlite_url, "KW_DATA_DIR": str(tmp_path / "kw")}
    args = ["bisect", str(src), "--good", shas[0], "--bad", shas[-1], "--device-class", "cpu"]
    proc = run_cli(*args, "--wait", "--timeout", "1", env=env, timeout=120)
    assert "kernelwatch bisect: warning: no live worker serves queue 'cpu'" in proc.stderr
    assert proc.returncode == 2 and "timed out" in proc.stderr, proc.stderr


def test_commits_that_change_no_build_input_are_left_out_of_the_range(
    db_url: str, tmp_path: Path
) -> None:
    # [install] inputs = ["src", "vendor"]: docs and tests commits build the same library
    src = tmp_path / "lib"
    toml = '[install]\nrecipe = "pythonpath"\ninputs = ["src", "vendor"]\n'
    shas = [make_repo(src, {".kernelwatch.toml": toml, "src/k.py": "0\n"}, "good")]
    for i, (path, text) in enumerate(
        [
            ("README", "a"),
            ("src/k.py", "1\n"),
            ("tests/t.py", "x"),
            ("vendor/v.h", "v"),
            ("README", "b"),
            ("src/k.py", "2\n"),
            ("docs/d.md", "d"),
        ]  # fmt: skip
    ):
        shas.append(make_repo(src, {path: text}, f"commit {i + 1}"))
    settings = Settings(data_dir=tmp_path / "data", database_url=db_url)
    settings.ensure_dirs()
    factory = sessionmaker(bind=engine_for(db_url), expire_on_commit=False)
    bid = driver.start(factory, settings, driver.BisectRequest(str(src), shas[0], shas[-1]))
    with factory() as s:
        row = s.get(Bisection, bid)
        assert row is not None
        # good, the commits that touch src/ or vendor/, and bad (a docs commit: kept as
        # the end the user named; it builds what commit 6 built)
        assert row.commits == [shas[i] for i in (0, 2, 4, 6, 7)]


def test_a_bisection_follows_the_kind_of_change_that_started_it(sqlite_url: str) -> None:
    # judged as any blocking change, a step where the case was broken for a while was
    # "bad" in a bisection of a slowdown, and the slowdown's commit was never named
    factory = sessionmaker(bind=engine_for(sqlite_url), expire_on_commit=False)
    with factory() as s, s.begin():
        repo = get_or_create_repository(s, "lib", "/src/lib")
        commit = upsert_commit(s, repo, "a" * 40, [])
        run = Run(repository_id=repo.id, commit_id=commit.id, status="succeeded",
                  device_class="cpu", suites=["basic"])  # fmt: skip
        s.add_all([run, Case(id="c-gemm", suite="basic", kernel="gemm", backend="b",
                             params={}, label="m=64"),
                   Case(id="c-norm", suite="basic", kernel="rmsnorm", backend="b",
                        params={}, label="")])  # fmt: skip
        s.flush()
        s.add_all([
            Result(run_id=run.id, case_id="c-gemm", status="pass", verdict="regression",
                   record={"kernel": "gemm"}),
            Result(run_id=run.id, case_id="c-norm", status="fail", verdict="broken",
                   record={"kernel": "rmsnorm"}),
        ])  # fmt: skip
        row = Bisection(repository_id=repo.id, good_sha="0" * 40, bad_sha="a" * 40,
                        case_pattern="gemm*", origin_run_id=run.id)  # fmt: skip
        s.add(row)
        s.flush()
        # the run that asked for it: what its followed cases found
        assert driver.followed(s, row) == frozenset({"regression"})
        row.case_pattern = ""
        assert driver.followed(s, row) == frozenset({"regression", "broken"})
        # bad against good, measured: what that step found
        s.add(BisectionStep(bisection_id=row.id, position=0, sha="a" * 40,
                            against_sha="0" * 40, purpose="establish", outcome="bad",
                            verdict="less_accurate"))  # fmt: skip
        s.flush()
        s.refresh(row)
        assert driver.followed(s, row) == frozenset({"less_accurate"})
        row.origin_run_id = None
        assert driver.followed(s, row) == frozenset({"less_accurate"})
