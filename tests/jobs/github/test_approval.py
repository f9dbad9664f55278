"""Fork approval from signed events only, and a PR head that only moves forward.

The attacks of issue 14: code that reaches the database writes an approval for a
commit it is about to push; a signed label of a user without write access copied
into the approvals table; a late ``labeled`` (or ``synchronize``) delivery for an
older head that used to roll the head back and cancel the real head's run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from kernelwatch.db.github import Approval, PullRequest
from kernelwatch.jobs.api.signature import sign
from tests.fake_github import FakeGitHub
from tests.helpers import git, make_repo
from tests.jobs.github.test_webhooks import FULL, SECRET, Api, build_source, pr_payload, watched

MIA = "maintainer-mia"  # the sender of pull_request_labeled_fork.json
OPENED, SYNC, LABELED = (
    "pull_request_opened_fork",
    "pull_request_synchronize_fork",
    "pull_request_labeled_fork",
)


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


def new_head(source: dict[str, str], pr: int, name: str) -> str:
    """A new commit on the fork's branch, served as refs/pull/<pr>/head."""
    repo = Path(source["path"])
    git(repo, "checkout", "-q", "feature")
    sha = make_repo(repo, {f"{name}.py": f"# {name}\n"}, f"{name}: more")
    git(repo, "checkout", "-q", "main")
    git(repo, "update-ref", f"refs/pull/{pr}/head", sha)
    return sha


def fork_event(source: dict[str, str], fixture: str, head: str, at: str, **kw: Any) -> Any:
    """A fork PR event for ``head`` whose ``updated_at`` is 2026-11-30 ``at`` (HH:MM)."""
    when = f"2026-11-30T{at}:00Z"
    return pr_payload(source, fixture, head=head, pull_request__updated_at=when, **kw)


def post(api: Api, source: dict[str, str], fixture: str, head: str, at: str, **kw: Any) -> Any:
    r = api.post("pull_request", fork_event(source, fixture, head, at, **kw))
    assert r.status_code == 202, r.text
    return r.json()


def statuses(api: Api, sha: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for run in api.runs():
        if run.commit is not None and run.commit.sha == sha:
            out[run.status] = out.get(run.status, 0) + 1
    return out


def test_an_approval_written_into_the_database_is_ignored(api: Api, source: dict[str, str]) -> None:
    """Code that reaches the database approves the commit it is about to push: in vain."""
    assert post(api, source, OPENED, source["C"], "09:00")["status"] == "awaiting_approval"
    future = new_head(source, 8, "evil")
    unsigned = json.dumps({"action": "labeled", "number": 8}).encode()
    with api.factory() as s, s.begin():
        pr = s.scalars(select(PullRequest)).one()
        pr.approved_sha, pr.approved_by = future, MIA  # the field the old check trusted
        s.add(
            Approval(
                delivery_id="forged-1",
                full_name=FULL,
                number=8,
                sha=future,
                approved_by=MIA,
                body=unsigned,
                signature="sha256=" + "0" * 64,
            )
        )
    api.fake.permissions[(FULL, MIA)] = "admin"
    assert post(api, source, SYNC, future, "09:05")["status"] == "awaiting_approval"
    assert statuses(api, future) == {}


def test_a_copied_signed_label_from_a_user_without_write_access_does_not_approve(
    api: Api, source: dict[str, str]
) -> None:
    """A genuine, signed delivery, but its sender may not approve: re-checked at use."""
    post(api, source, OPENED, source["C"], "09:00")
    future = new_head(source, 8, "evil")
    labeled = fork_event(source, LABELED, future, "09:01", sender__login="triage-tom")
    body = json.dumps(labeled).encode()
    with api.factory() as s, s.begin():
        s.add(
            Approval(
                delivery_id="copied-1",
                full_name=FULL,
                number=8,
                sha=future,
                approved_by="triage-tom",
                body=body,
                signature=sign(SECRET, body),
            )
        )
    api.fake.permissions[(FULL, "triage-tom")] = "triage"
    assert post(api, source, SYNC, future, "09:05")["status"] == "awaiting_approval"
    assert api.fake.requests_to("GET", r"/collaborators/triage-tom/permission$")
    assert statuses(api, future) == {}


def test_a_signed_approval_holds_for_its_head_until_the_approver_loses_access(
    api: Api, source: dict[str, str]
) -> None:
    c = source["C"]
    api.fake.permissions[(FULL, MIA)] = "maintain"
    post(api, source, OPENED, c, "09:00")
    assert post(api, source, LABELED, c, "09:01")["status"] == "planned"
    with api.factory() as s:
        kept = s.scalars(select(Approval)).one()
        assert (kept.sha, kept.approved_by, kept.number) == (c, MIA, 8)
    # closed and reopened: the stored signed label still approves the same head
    assert post(api, source, OPENED, c, "09:02", action="closed")["detail"] == "pull request closed"
    assert post(api, source, OPENED, c, "09:03", action="reopened")["status"] == "planned"
    # the maintainer loses write access: the same signed label approves nothing more
    api.fake.permissions[(FULL, MIA)] = "read"
    post(api, source, OPENED, c, "09:04", action="closed")
    assert post(api, source, OPENED, c, "09:05", action="reopened")["status"] == "awaiting_approval"


def test_a_late_labeled_delivery_for_an_older_head_cancels_nothing(
    api: Api, source: dict[str, str]
) -> None:
    """opened C, label C (delivered late), synchronize D, label D; then label C arrives."""
    c = source["C"]
    api.fake.permissions[(FULL, MIA)] = "admin"
    post(api, source, OPENED, c, "09:00")
    d = new_head(source, 8, "v2")
    assert post(api, source, SYNC, d, "09:02")["status"] == "awaiting_approval"
    assert post(api, source, LABELED, d, "09:03")["status"] == "planned"
    assert statuses(api, d) == {"queued": 1}

    late = post(api, source, LABELED, c, "09:01")
    assert late["status"] == "ignored" and "no longer the head" in late["detail"]
    assert statuses(api, d) == {"queued": 1}  # the real head's run stays
    assert statuses(api, c) == {}
    with api.factory() as s:
        pr = s.scalars(select(PullRequest)).one()
        assert pr.head_sha == d and pr.approved_sha == d


def test_a_late_synchronize_for_an_older_head_does_not_move_it_back(
    api: Api, source: dict[str, str]
) -> None:
    c = source["C"]
    at = "pull_request__updated_at"
    first = pr_payload(source, head=c, **{at: "2026-11-30T09:00:00Z"})
    assert api.post("pull_request", first).json()["status"] == "planned"
    repo = Path(source["path"])
    git(repo, "checkout", "-q", "feature")
    d = make_repo(repo, {"NOTES.md": "v2\n"}, "D")
    e = make_repo(repo, {"NOTES.md": "v3\n"}, "E")
    git(repo, "checkout", "-q", "main")
    git(repo, "update-ref", "refs/pull/7/head", e)
    to_e = pr_payload(source, "pull_request_synchronize", head=e, **{at: "2026-11-30T09:02:00Z"})
    assert api.post("pull_request", to_e).json()["status"] == "planned"
    to_d = pr_payload(source, "pull_request_synchronize", head=d, **{at: "2026-11-30T09:01:00Z"})
    r = api.post("pull_request", to_d).json()
    assert r["status"] == "ignored" and "older event" in r["detail"], r
    assert statuses(api, e) == {"queued": 1} and statuses(api, d) == {}
    assert statuses(api, c) == {"cancelled": 1}
    with api.factory() as s:
        assert s.scalars(select(PullRequest)).one().head_sha == e


def test_events_that_do_not_move_the_head_leave_it(api: Api, source: dict[str, str]) -> None:
    c = source["C"]
    at = "pull_request__updated_at"
    api.post("pull_request", pr_payload(source, head=c, **{at: "2026-11-30T09:00:00Z"}))
    newer = pr_payload(source, LABELED, head=source["B"], number=7, **{at: "2026-11-30T09:09:00Z"})
    newer["pull_request"]["head"]["repo"]["full_name"] = FULL
    assert api.post("pull_request", newer).status_code == 202
    with api.factory() as s:
        assert s.scalars(select(PullRequest)).one().head_sha == c
