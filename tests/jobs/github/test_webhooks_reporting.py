"""Reporting to GitHub: statuses per GPU class and the PR comment kept in place.

Runs are planned through the real API; their outcome is then written into the
database as a worker would (the real worker path is tests/jobs/github/test_webhooks_e2e.py), and
the reporter's pass sends statuses and the comment to the loopback GitHub.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from kernelwatch.db.github import CommitStatus, PullRequest, RunLink
from kernelwatch.db.models import Case, Commit, Result, Run
from kernelwatch.jobs.github.client import GitHubClient
from kernelwatch.jobs.github.render import COMMENT_MARKER
from kernelwatch.jobs.github.reporter import Reporter, ReporterThread
from tests.fake_github import FakeGitHub, Fault
from tests.helpers import git, make_repo
from tests.jobs.github.test_webhooks import (
    FULL,
    Api,
    build_source,
    pr_payload,
    push_payload,
    watched,
)

CASE = Case(id="case-softmax", suite="basic", kernel="softmax", backend="kern",
            params={"rows": 64}, label="rows=64")  # fmt: skip


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def source(tmp_path: Path) -> dict[str, str]:
    return build_source(tmp_path)


@pytest.fixture
def api(tmp_path: Path, fake: FakeGitHub, source: dict[str, str]) -> Api:
    return Api(tmp_path, fake, watched(source))


@pytest.fixture
def api2(tmp_path: Path, fake: FakeGitHub, source: dict[str, str]) -> Api:
    return Api(tmp_path, fake, watched(source, device_classes=["cpu", "h100"]))


def finish(api: Api, sha: str, *, ratio: float = 1.0, status: str = "succeeded") -> None:
    """Write what a worker and analysis would: results and verdicts for the runs of sha."""
    with api.factory() as s, s.begin():
        if s.get(Case, CASE.id) is None:
            s.add(Case(**{k: getattr(CASE, k) for k in ("id", "suite", "kernel", "backend",
                                                      "params", "label")}))  # fmt: skip
            s.flush()
        runs = s.scalars(select(Run).join(Commit).where(Commit.sha == sha)).all()
        for run in runs:
            run.status, run.finished = status, datetime.now(UTC)
            if status != "succeeded":
                run.verdict, run.error = "error", "install failed: no wheel"
                continue
            base = None
            if run.baseline_sha:
                base = s.scalars(
                    select(Run)
                    .join(Commit)
                    .where(Commit.sha == run.baseline_sha, Run.device_class == run.device_class)
                ).first()
            run.baseline_run_id = base.id if base else None
            verdict = "regression" if ratio > 1.1 else "unchanged"
            s.add(Result(run_id=run.id, case_id=CASE.id, status="pass", median_s=1e-4 * ratio,
                         verdict=verdict if base else None, ratio=ratio if base else None,
                         ratio_ci_low=ratio * 0.98 if base else None,
                         ratio_ci_high=ratio * 1.02 if base else None))  # fmt: skip
            run.verdict = "fail" if base and verdict == "regression" else "pass"


def statuses(api: Api, sha: str) -> dict[str, Any]:
    return {
        ctx: api.fake.latest_status(FULL, sha, ctx)
        for ctx in ("kernelwatch/cpu", "kernelwatch/h100")
    }


def test_statuses_per_class_go_pending_then_final(api2: Api, source: dict[str, str]) -> None:
    r = api2.post("pull_request", pr_payload(source))
    assert r.json()["status"] == "planned"
    c = source["C"]
    assert {k: v["state"] for k, v in statuses(api2, c).items()} == {
        "kernelwatch/cpu": "pending",
        "kernelwatch/h100": "pending",
    }
    finish(api2, source["A"])
    api2.ctx.reporter.reconcile()
    assert api2.fake.comments == {}  # nothing final for the head yet: no comment
    finish(api2, c, ratio=1.5)
    api2.ctx.reporter.reconcile()
    st = statuses(api2, c)
    assert st["kernelwatch/cpu"]["state"] == "failure"
    assert st["kernelwatch/cpu"]["description"] == "1 regression"
    assert "/?page=compare&a=" in st["kernelwatch/cpu"]["target_url"]
    assert st["kernelwatch/cpu"]["target_url"].startswith("https://kw.example.com/")
    # the baseline's commit gets no status of its own
    assert api2.fake.statuses_for(FULL, source["A"]) == []
    [comment] = api2.fake.comments[(FULL, 7)]
    assert comment["body"].startswith(COMMENT_MARKER)
    assert "🔴 regression" in comment["body"] and "1.500×" in comment["body"]
    # a second pass sends nothing new
    sent = len(api2.fake.requests)
    api2.ctx.reporter.reconcile()
    assert len(api2.fake.requests) == sent
    with api2.factory() as s:
        assert all(link.done for link in s.scalars(select(RunLink)))


def test_comment_is_updated_in_place_on_a_new_head(api: Api, source: dict[str, str]) -> None:
    api.post("pull_request", pr_payload(source))
    finish(api, source["A"])
    finish(api, source["C"], ratio=1.5)
    api.ctx.reporter.reconcile()
    [first] = api.fake.comments[(FULL, 7)]
    repo = Path(source["path"])
    git(repo, "checkout", "-q", "feature")
    d = make_repo(repo, {"NOTES.md": "fixed\n"}, "D: fix")
    git(repo, "checkout", "-q", "main")
    git(repo, "update-ref", "refs/pull/7/head", d)
    api.post("pull_request", pr_payload(source, "pull_request_synchronize", head=d))
    finish(api, d, ratio=1.0)
    api.ctx.reporter.reconcile()
    [same] = api.fake.comments[(FULL, 7)]
    assert same["id"] == first["id"]
    assert "✅ no regressions" in same["body"] and d[:12] in same["body"]
    assert api.fake.requests_to("PATCH", rf"/issues/comments/{first['id']}$")
    with api.factory() as s:
        assert s.scalars(select(PullRequest)).one().comment_id == first["id"]


def test_deleted_comment_is_written_again_and_lost_id_is_found(
    api: Api, source: dict[str, str]
) -> None:
    api.post("pull_request", pr_payload(source))
    finish(api, source["A"])
    finish(api, source["C"], ratio=1.5)
    api.ctx.reporter.reconcile()
    api.fake.comments[(FULL, 7)].clear()  # someone deleted it
    with api.factory() as s, s.begin():
        s.scalars(select(PullRequest)).one().comment_body = ""
    api.ctx.reporter.report_commit(FULL, source["C"])
    assert len(api.fake.comments[(FULL, 7)]) == 1
    # database lost the id: the marker finds the existing comment, no duplicate
    with api.factory() as s, s.begin():
        pr = s.scalars(select(PullRequest)).one()
        pr.comment_id, pr.comment_body = None, ""
    api.ctx.reporter.report_commit(FULL, source["C"])
    assert len(api.fake.comments[(FULL, 7)]) == 1


def test_failed_build_is_an_error_status(api: Api, source: dict[str, str]) -> None:
    api.post("push", push_payload(source, source["A"], source["B"]))
    finish(api, source["A"])
    finish(api, source["B"], status="failed")
    api.ctx.reporter.reconcile()
    st = api.fake.latest_status(FULL, source["B"], "kernelwatch/cpu")
    assert st is not None and st["state"] == "error"
    assert st["description"] == "build or install failed: install failed: no wheel"


def test_github_outage_is_retried_on_the_next_pass(api: Api, source: dict[str, str]) -> None:
    api.post("pull_request", pr_payload(source))
    finish(api, source["A"])
    finish(api, source["C"])
    api.fake.fail_next(*[Fault(503) for _ in range(5)])  # more than the client retries
    api.ctx.reporter.reconcile()
    with api.factory() as s:
        row = s.scalars(select(CommitStatus).where(CommitStatus.sha == source["C"])).one()
        assert row.state == "pending"  # the final state was not recorded as sent
        assert not s.scalars(select(RunLink).where(RunLink.sha == source["C"])).one().done
    api.ctx.reporter.reconcile()
    st = api.fake.latest_status(FULL, source["C"], "kernelwatch/cpu")
    assert st is not None and st["state"] == "success"


def test_the_reporter_loop_reports_a_finished_run_and_survives_a_broken_github(
    api: Api, source: dict[str, str]
) -> None:
    """What replaced the worker's optional hook: the API's loop reports every finished
    run, and an unreachable GitHub is logged, never raised, and caught up on later."""
    api.post("pull_request", pr_payload(source))
    finish(api, source["A"])
    finish(api, source["C"])
    settings = api.ctx.reporter.settings
    broken = GitHubClient("test-token", "http://127.0.0.1:9", backoff_s=0.01, max_retries=1)
    try:
        Reporter(api.factory, settings, broken).reconcile()  # must not raise
    finally:
        broken.close()
    st = api.fake.latest_status(FULL, source["C"], "kernelwatch/cpu")
    assert st is None or st["state"] != "success"
    loop = ReporterThread(api.ctx.reporter, interval_s=0.05)
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            st = api.fake.latest_status(FULL, source["C"], "kernelwatch/cpu")
            if st is not None and st["state"] == "success":
                break
            time.sleep(0.05)
    finally:
        loop.stop()
    assert st is not None and st["state"] == "success"


def test_check_runs_carry_the_verdict_table_when_configured(
    api: Api, source: dict[str, str]
) -> None:
    api.ctx.reporter.settings.github_checks = True  # a GitHub App installation
    api.post("pull_request", pr_payload(source))
    finish(api, source["A"])
    finish(api, source["C"], ratio=1.5)
    api.ctx.reporter.reconcile()
    runs = [r for r in api.fake.check_runs if r["head_sha"] == source["C"]]
    assert [r["status"] for r in runs] == ["in_progress", "completed"]
    final = runs[-1]
    assert final["name"] == "kernelwatch/cpu" and final["conclusion"] == "failure"
    assert final["output"]["title"] == "1 regression"
    assert "🔴 regression" in final["output"]["summary"] and "1.500×" in final["output"]["summary"]
    assert final["details_url"].startswith("https://kw.example.com/?page=compare&a=")
    assert api.fake.statuses_for(FULL, source["C"]) == []  # check runs instead of statuses
