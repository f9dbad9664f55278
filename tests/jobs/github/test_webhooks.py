"""POST /webhooks/github through the real application: signatures, dedup, events, planning.

Real SQLite database, real git repositories, the embedded broker (messages are sent,
no worker consumes them here: tests/jobs/github/test_webhooks_e2e.py runs one) and the loopback
GitHub of tests/fake_github.py. Recorded payloads come from tests/fixtures/github.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.github import PullRequest, RunLink, WebhookDelivery
from kernelwatch.db.migrate import upgrade
from kernelwatch.db.models import Run
from kernelwatch.db.session import make_engine
from kernelwatch.db.store import public_source
from kernelwatch.jobs.api import create_app
from kernelwatch.jobs.errors import SourceError
from kernelwatch.jobs.github.client import GitHubClient
from kernelwatch.jobs.github.watched import WatchedRepo, parse_repos
from kernelwatch.jobs.library.mirror import validate_source
from kernelwatch.jobs.planning.broker import make_celery
from tests.fake_github import FakeGitHub, delivery_headers, load_payload
from tests.helpers import git, library_files, make_repo

SECRET = "webhook-secret-for-tests"
FULL = "acme/kernels"
INIT = "from kernelwatch.kernels.triton_kernels import softmax, rmsnorm, matmul, attention\n"


class Api:
    """The application under test plus what a test needs to look at."""

    def __init__(
        self,
        root: Path,
        fake: FakeGitHub,
        repos: dict[str, WatchedRepo],
        *,
        url: str | None = None,
        max_body_bytes: int = 256 * 1024,
        broker_url: str | None = None,
    ) -> None:
        url = url or f"sqlite:///{root / 'kw.db'}"
        self.settings = Settings(
            data_dir=root / "kwdata",
            database_url=url,
            broker_url=broker_url,
            webhook_secret=SECRET,
            dashboard_url="https://kw.example.com",
        )
        self.settings.ensure_dirs()
        upgrade(url)
        self.factory: sessionmaker[Session] = sessionmaker(
            bind=make_engine(url), expire_on_commit=False
        )
        self.fake = fake
        self.github = GitHubClient("test-token", fake.url, backoff_s=0.01)
        self.app = create_app(
            self.settings,
            self.factory,
            make_celery(self.settings),
            self.github,
            repos=repos,
            max_body_bytes=max_body_bytes,
            reporter_interval_s=None,
        )
        self.client = TestClient(self.app)
        self.ctx = self.app.state.kw

    def post(
        self,
        event: str,
        payload: Any,
        *,
        secret: str | None = SECRET,
        delivery: str | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        body = raw if raw is not None else json.dumps(payload).encode()
        h = delivery_headers(event, body, secret, delivery)
        h.update(headers or {})
        return self.client.post("/webhooks/github", content=body, headers=h)

    def count(self, model: Any) -> int:
        with self.factory() as s:
            return int(s.scalar(select(func.count()).select_from(model)) or 0)

    def runs(self) -> list[Run]:
        with self.factory() as s:
            q = select(Run).options(selectinload(Run.commit)).order_by(Run.id)
            return list(s.scalars(q))


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def source(tmp_path: Path) -> dict[str, str]:
    return build_source(tmp_path)


def build_source(root: Path) -> dict[str, str]:
    """main: A → B; feature (from A): C; refs/pull/7/head and refs/pull/8/head → C."""
    repo = root / "src"
    a = make_repo(repo, library_files("kern", INIT, recipe="pythonpath"), "A: kernels")
    b = make_repo(repo, {"README.md": "docs\n"}, "B: docs")
    git(repo, "checkout", "-q", "-b", "feature", a)
    c = make_repo(repo, {"NOTES.md": "exp2\n"}, "C: feature")
    git(repo, "checkout", "-q", "main")
    for n in (7, 8):
        git(repo, "update-ref", f"refs/pull/{n}/head", c)
    return {"path": str(repo), "A": a, "B": b, "C": c}


def watched(source: dict[str, str], **extra: Any) -> dict[str, WatchedRepo]:
    table = {
        "source": source["path"],
        "branches": ["main"],
        "device_classes": ["cpu"],
        "bench_args": ["--kernel", "softmax", "--budget", "0.1"],
        # these tests look at the two-run path (pushes use it too); the paired default
        # for PRs has its own test below and tests/worker/test_paired_pipeline.py
        "pr_mode": "separate",
        **extra,
    }
    return parse_repos({"repos": {FULL: table}})


@pytest.fixture
def api(tmp_path: Path, fake: FakeGitHub, source: dict[str, str]) -> Api:
    return Api(tmp_path, fake, watched(source))


def push_payload(
    source: dict[str, str], before: str, after: str, ref: str = "refs/heads/main"
) -> dict[str, Any]:
    return load_payload("push", before=before, after=after, ref=ref)


# ----------------------------------------------------------------------------- ping / auth


def test_ping_is_answered_and_recorded(api: Api) -> None:
    r = api.post("ping", load_payload("ping"))
    assert r.status_code == 200 and r.json()["status"] == "pong"
    assert api.count(WebhookDelivery) == 1


@pytest.mark.parametrize(
    "signature",
    [
        None,  # missing
        "sha256=" + "0" * 64,  # forged
        "sha1=0123456789abcdef0123456789abcdef01234567",  # wrong algorithm
        "sha256=nothex",
    ],
)
def test_missing_or_forged_signature_is_401_and_stores_nothing(
    api: Api, signature: str | None
) -> None:
    body = json.dumps(load_payload("push")).encode()
    headers = delivery_headers("push", body, None)
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    r = api.client.post("/webhooks/github", content=body, headers=headers)
    assert r.status_code == 401
    assert api.count(WebhookDelivery) == 0 and api.count(Run) == 0


def test_wrong_secret_is_401(api: Api) -> None:
    r = api.post("push", load_payload("push"), secret="not-the-secret")
    assert r.status_code == 401
    assert api.count(WebhookDelivery) == 0


def test_signature_over_a_different_body_is_401(api: Api) -> None:
    body = json.dumps(load_payload("ping")).encode()
    headers = delivery_headers("ping", body, SECRET)
    r = api.client.post("/webhooks/github", content=body + b" ", headers=headers)
    assert r.status_code == 401


def test_per_repository_secret_is_required_for_that_repository(
    tmp_path: Path, fake: FakeGitHub, source: dict[str, str]
) -> None:
    api = Api(tmp_path, fake, watched(source, secret="per-repo-secret-123"))
    # the global secret may not sign events of a repository that has its own
    assert api.post("ping", load_payload("ping")).status_code == 401
    assert api.post("ping", load_payload("ping"), secret="per-repo-secret-123").status_code == 200
    # and a repository's secret cannot sign events that name another repository
    other = load_payload("ping", repository__full_name="acme/other")
    assert api.post("ping", other, secret="per-repo-secret-123").status_code == 401
    assert api.count(WebhookDelivery) == 1


def test_replayed_delivery_is_not_planned_twice(api: Api, source: dict[str, str]) -> None:
    payload = push_payload(source, source["A"], source["B"])
    first = api.post("push", payload, delivery="1f0c2a00-aaaa-11ef-8000-000000000001")
    assert first.status_code == 202 and first.json()["status"] == "planned"
    planned = api.count(Run)
    replay = api.post("push", payload, delivery="1f0c2a00-aaaa-11ef-8000-000000000001")
    assert replay.status_code == 200 and replay.json()["status"] == "duplicate"
    assert api.count(Run) == planned
    assert api.count(WebhookDelivery) == 1


def test_oversized_body_is_413(api: Api) -> None:
    big = {"zen": "x" * (300 * 1024)}
    r = api.post("ping", big)
    assert r.status_code == 413
    # also when the sender does not declare a length (chunked)
    chunks = iter([b"{" + b" " * (200 * 1024), b" " * (200 * 1024) + b"}"])
    headers = delivery_headers("ping", b"", SECRET)
    r = api.client.post("/webhooks/github", content=chunks, headers=headers)
    assert r.status_code == 413
    assert api.count(WebhookDelivery) == 0


@pytest.mark.parametrize("raw", [b"{not json", b"\xff\xfe", b"[1, 2]", b'"text"', b""])
def test_malformed_json_is_400(api: Api, raw: bytes) -> None:
    r = api.post("push", None, raw=raw)
    assert r.status_code == 400
    assert api.count(WebhookDelivery) == 0


def test_missing_event_or_delivery_header_is_400(api: Api) -> None:
    body = json.dumps(load_payload("ping")).encode()
    headers = delivery_headers("ping", body, SECRET)
    del headers["X-GitHub-Delivery"]
    assert api.client.post("/webhooks/github", content=body, headers=headers).status_code == 400
    headers = delivery_headers("ping", body, SECRET)
    headers["X-GitHub-Event"] = "push; rm -rf /"
    assert api.client.post("/webhooks/github", content=body, headers=headers).status_code == 400


def test_form_encoded_delivery_is_accepted(api: Api) -> None:
    from urllib.parse import urlencode

    body = urlencode({"payload": json.dumps(load_payload("ping"))}).encode()
    headers = delivery_headers("ping", body, SECRET)
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    r = api.client.post("/webhooks/github", content=body, headers=headers)
    assert r.status_code == 200 and r.json()["status"] == "pong"


# ----------------------------------------------------------------------------- ignored


def test_unknown_repository_is_acknowledged_and_ignored(api: Api) -> None:
    r = api.post("push", load_payload("push", repository__full_name="someone/else"))
    assert r.status_code == 202 and r.json()["status"] == "ignored"
    assert "not watched" in r.json()["detail"]
    assert api.count(Run) == 0 and api.fake.requests == []


@pytest.mark.parametrize(
    ("fixture", "reason"),
    [("push_tag", "tag push"), ("push_branch_deleted", "branch deletion")],
)
def test_tag_pushes_and_branch_deletions_are_ignored(api: Api, fixture: str, reason: str) -> None:
    r = api.post("push", load_payload(fixture))
    assert r.status_code == 202 and r.json() == {"status": "ignored", "detail": reason, "runs": []}
    assert api.count(Run) == 0


def test_other_events_are_acknowledged_and_ignored(api: Api) -> None:
    r = api.post("issue_comment", load_payload("issue_comment_created"))
    assert r.status_code == 202 and r.json()["status"] == "ignored"


def test_push_to_an_unwatched_branch_is_ignored(api: Api, source: dict[str, str]) -> None:
    r = api.post("push", push_payload(source, source["A"], source["C"], "refs/heads/feature"))
    assert r.json()["status"] == "ignored" and api.count(Run) == 0


# ----------------------------------------------------------------------------- injection


@pytest.mark.parametrize(
    "full_name",
    ["../../etc/passwd", "acme/../admin", "acme/kernels;touch pwned", "acme/$(id)", "a/b/c"],
)
def test_repository_names_that_are_not_names_are_rejected(api: Api, full_name: str) -> None:
    r = api.post("push", load_payload("push", repository__full_name=full_name))
    assert r.status_code == 400
    assert api.count(WebhookDelivery) == 0 and api.count(Run) == 0


def test_shell_metacharacters_in_branch_names_stay_data(
    tmp_path: Path, fake: FakeGitHub, source: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    api = Api(tmp_path, fake, watched(source, branches=["*"]))
    for i, ref in enumerate(
        ["refs/heads/$(touch pwned1)", "refs/heads/x;touch pwned2", "refs/heads/`touch pwned3`"]
    ):
        payload = push_payload(source, source["A"], source["B"], ref)
        payload["after"] = source["B"] if i == 0 else source["A"]
        r = api.post("push", payload)
        assert r.status_code == 202, r.text
    assert not list(tmp_path.glob("pwned*"))
    assert {r.commit.sha for r in api.runs() if r.commit} <= {source["A"], source["B"]}
    # a head that is not a sha is refused before git sees it
    bad = push_payload(source, source["A"], "HEAD; touch pwned4")
    assert api.post("push", bad).status_code == 400
    assert not list(tmp_path.glob("pwned*"))


def test_pr_with_shell_metacharacters_in_refs(api: Api, source: dict[str, str]) -> None:
    payload = load_payload(
        "pull_request_opened",
        pull_request__head__sha=source["C"],
        pull_request__base__sha=source["B"],
        pull_request__head__ref="$(reboot)",
    )
    payload["pull_request"]["base"]["ref"] = "main"
    r = api.post("pull_request", payload)
    assert r.status_code == 202 and r.json()["status"] == "planned", r.text


# ----------------------------------------------------------------------------- push


def test_push_plans_the_head_against_its_first_parent(api: Api, source: dict[str, str]) -> None:
    r = api.post("push", push_payload(source, source["A"], source["B"]))
    assert r.status_code == 202 and r.json()["status"] == "planned"
    runs = api.runs()
    by_sha = {r.commit.sha: r for r in runs if r.commit}
    assert set(by_sha) == {source["A"], source["B"]}  # A measured as B's baseline
    assert by_sha[source["B"]].baseline_sha == source["A"]
    assert by_sha[source["B"]].trigger == "push" and by_sha[source["B"]].queue == "cpu"
    assert by_sha[source["B"]].options.bench_args == ["--kernel", "softmax", "--budget", "0.1"]
    status = api.fake.latest_status(FULL, source["B"], "kernelwatch/cpu")
    assert status is not None and status["state"] == "pending"
    assert status["target_url"].startswith("https://kw.example.com/?page=run&run=")
    with api.factory() as s:
        roles = {link.sha: link.role for link in s.scalars(select(RunLink))}
    assert roles == {source["A"]: "baseline", source["B"]: "candidate"}


def test_push_each_mode_measures_every_pushed_commit(
    tmp_path: Path, fake: FakeGitHub, source: dict[str, str]
) -> None:
    repo = Path(source["path"])
    d = make_repo(repo, {"README.md": "more docs\n"}, "D: docs")
    api = Api(tmp_path, fake, watched(source, push_mode="each"))
    r = api.post("push", push_payload(source, source["A"], d))
    assert r.json()["status"] == "planned"
    candidates = [r for r in api.runs() if r.baseline_sha]
    assert [(r.commit.sha, r.baseline_sha) for r in candidates if r.commit] == [
        (source["B"], source["A"]),
        (d, source["B"]),
    ]


def test_bad_repo_config_at_the_commit_is_an_error_status(api: Api, source: dict[str, str]) -> None:
    repo = Path(source["path"])
    bad = make_repo(repo, {".kernelwatch.toml": "[install\nrecipe = 'pip'"}, "broken config")
    r = api.post("push", push_payload(source, source["B"], bad))
    assert r.status_code == 202 and r.json()["status"] == "config_error"
    assert api.count(Run) == 0
    status = api.fake.latest_status(FULL, bad, "kernelwatch/cpu")
    assert status is not None and status["state"] == "error"
    assert ".kernelwatch.toml" in status["description"]
    # an invalid value is reported the same way
    worse = make_repo(
        repo, {".kernelwatch.toml": "[install]\nrecipe = 'curl | sh'\n"}, "shell recipe"
    )
    r = api.post("push", push_payload(source, bad, worse))
    assert r.json()["status"] == "config_error" and "install.recipe" in r.json()["detail"]
    # a file built to break the parser (issue 24: RecursionError, a 500 on every delivery)
    deep = make_repo(repo, {".kernelwatch.toml": "a = " + "[" * 5000 + "]" * 5000}, "deep")
    r = api.post("push", push_payload(source, worse, deep))
    assert r.status_code == 202 and r.json()["status"] == "config_error"
    assert "nested 5000 deep" in r.json()["detail"]
    status = api.fake.latest_status(FULL, deep, "kernelwatch/cpu")
    assert status is not None and status["state"] == "error"


# ----------------------------------------------------------------------------- pull requests


def pr_payload(source: dict[str, str], fixture: str = "pull_request_opened", **kw: Any) -> Any:
    return load_payload(
        fixture,
        pull_request__head__sha=kw.pop("head", source["C"]),
        pull_request__base__sha=kw.pop("base", source["B"]),
        **kw,
    )


def test_a_pr_is_one_paired_run_against_the_merge_base_by_default(
    tmp_path: Path, fake: FakeGitHub, source: dict[str, str]
) -> None:
    table = {"source": source["path"], "device_classes": ["cpu"]}
    api = Api(tmp_path, fake, parse_repos({"repos": {FULL: table}}))
    r = api.post("pull_request", pr_payload(source))
    assert r.status_code == 202 and r.json()["status"] == "planned", r.text
    [run] = [r for r in api.runs() if r.commit]
    assert run.commit is not None and run.commit.sha == source["C"]
    assert run.baseline_sha == source["A"]  # the merge-base, built inside the same run
    assert run.options.paired is True and run.options.pr == 7


def test_same_repo_pr_is_measured_against_the_merge_base(api: Api, source: dict[str, str]) -> None:
    r = api.post("pull_request", pr_payload(source))
    assert r.status_code == 202 and r.json()["status"] == "planned", r.text
    by_sha = {r.commit.sha: r for r in api.runs() if r.commit}
    # base tip is B, but the PR branched from A: A is the baseline, not B
    assert set(by_sha) == {source["A"], source["C"]}
    assert by_sha[source["C"]].baseline_sha == source["A"]
    assert by_sha[source["C"]].trigger == "pull_request"
    with api.factory() as s:
        pr = s.scalars(select(PullRequest)).one()
        assert (pr.number, pr.merge_base_sha, pr.fork) == (7, source["A"], False)
    status = api.fake.latest_status(FULL, source["C"], "kernelwatch/cpu")
    assert status is not None and status["state"] == "pending"


def test_a_pr_cannot_loosen_the_rules_that_judge_it(api: Api, source: dict[str, str]) -> None:
    # issue 24: a PR changing only its own thresholds was judged by them
    repo = Path(source["path"])
    git(repo, "checkout", "-q", "feature")
    toml = (
        library_files("kern", INIT, recipe="pythonpath")[".kernelwatch.toml"]
        .replace("regression = 1.0", "regression = 9.0\nconfidence = 0.999999")
        .replace('names = ["basic"]', 'names = ["basic"]\nkernels = ["matmul"]')
    )
    loose = make_repo(repo, {".kernelwatch.toml": toml}, "D: loosen the gate")
    git(repo, "checkout", "-q", "main")
    git(repo, "update-ref", "refs/pull/7/head", loose)
    r = api.post("pull_request", pr_payload(source, head=loose))
    assert r.json()["status"] == "planned", r.text
    (run,) = [r for r in api.runs() if r.commit and r.commit.sha == loose]
    note = run.options.config
    assert run.options.regression_threshold == 1.0  # the merge-base's, not 9.0
    assert run.options.confidence is None  # the service's, not 0.999999
    assert note is not None and note.kernels is None  # never the PR's pick of kernels
    ignored = "\n".join(note.loosened)
    assert "thresholds.regression = 9" in ignored and "thresholds.confidence" in ignored
    assert "suites.kernels keeps only matmul" in ignored


def test_reopened_pr_with_the_same_head_is_not_measured_again(
    api: Api, source: dict[str, str]
) -> None:
    api.post("pull_request", pr_payload(source))
    n = api.count(Run)
    r = api.post("pull_request", pr_payload(source, action="reopened"))
    assert r.json()["status"] == "ignored" and api.count(Run) == n


def test_new_pr_head_cancels_queued_runs_of_the_old_one(api: Api, source: dict[str, str]) -> None:
    api.post("pull_request", pr_payload(source))
    repo = Path(source["path"])
    git(repo, "checkout", "-q", "feature")
    d = make_repo(repo, {"NOTES.md": "exp2 v2\n"}, "D: feature v2")
    git(repo, "checkout", "-q", "main")
    git(repo, "update-ref", "refs/pull/7/head", d)
    r = api.post("pull_request", pr_payload(source, "pull_request_synchronize", head=d))
    assert r.json()["status"] == "planned"
    state = {r.commit.sha: r.status for r in api.runs() if r.commit}
    assert state[source["C"]] == "cancelled" and state[d] == "queued"
    assert state[source["A"]] == "queued"  # the shared baseline is kept


def test_draft_pr_is_skipped_until_ready(api: Api, source: dict[str, str]) -> None:
    r = api.post("pull_request", pr_payload(source, pull_request__draft=True))
    assert r.json()["detail"] == "draft pull request" and api.count(Run) == 0
    ready = pr_payload(source, action="ready_for_review")
    assert api.post("pull_request", ready).json()["status"] == "planned"


def test_pr_into_an_unwatched_branch_is_ignored(api: Api, source: dict[str, str]) -> None:
    payload = pr_payload(source)
    payload["pull_request"]["base"]["ref"] = "release/9"
    assert api.post("pull_request", payload).json()["status"] == "ignored"


# ----------------------------------------------------------------------------- forks


def fork_payload(source: dict[str, str], fixture: str = "pull_request_opened_fork") -> Any:
    return pr_payload(source, fixture)


def test_fork_pr_waits_for_approval_with_a_pending_status(api: Api, source: dict[str, str]) -> None:
    r = api.post("pull_request", fork_payload(source))
    assert r.status_code == 202 and r.json()["status"] == "awaiting_approval"
    assert api.count(Run) == 0
    status = api.fake.latest_status(FULL, source["C"], "kernelwatch/cpu")
    assert status is not None and status["state"] == "pending"
    assert "waiting for maintainer approval" in status["description"]


def test_label_from_a_user_without_write_access_does_not_approve(
    api: Api, source: dict[str, str]
) -> None:
    api.post("pull_request", fork_payload(source))
    api.fake.permissions[(FULL, "maintainer-mia")] = "triage"
    r = api.post("pull_request", fork_payload(source, "pull_request_labeled_fork"))
    assert r.json()["status"] == "ignored" and "lacks write access" in r.json()["detail"]
    assert api.count(Run) == 0
    assert api.fake.requests_to("GET", r"/collaborators/maintainer-mia/permission$")


def test_label_from_a_maintainer_approves_that_head(api: Api, source: dict[str, str]) -> None:
    api.post("pull_request", fork_payload(source))
    api.fake.permissions[(FULL, "maintainer-mia")] = "maintain"
    r = api.post("pull_request", fork_payload(source, "pull_request_labeled_fork"))
    assert r.json()["status"] == "planned", r.text
    runs = {r.commit.sha: r for r in api.runs() if r.commit}
    assert runs[source["C"]].baseline_sha == source["A"]
    with api.factory() as s:
        pr = s.scalars(select(PullRequest)).one()
        assert (pr.fork, pr.approved_sha, pr.approved_by) == (
            True,
            source["C"],
            "maintainer-mia",
        )
    # new commits from the fork need a new approval: the label is taken off again
    repo = Path(source["path"])
    git(repo, "checkout", "-q", "feature")
    d = make_repo(repo, {"evil.py": "import os\n"}, "D: more")
    git(repo, "checkout", "-q", "main")
    git(repo, "update-ref", "refs/pull/8/head", d)
    api.fake.labels[(FULL, 8)] = ["kernelwatch:run"]
    n = api.count(Run)
    r = api.post("pull_request", pr_payload(source, "pull_request_synchronize_fork", head=d))
    assert r.json()["status"] == "awaiting_approval"
    assert api.count(Run) == n
    assert api.fake.labels[(FULL, 8)] == []
    assert api.fake.requests_to("DELETE", r"/issues/8/labels/kernelwatch%3Arun$")


def test_fork_author_on_the_allow_list_runs_without_label(
    tmp_path: Path, fake: FakeGitHub, source: dict[str, str]
) -> None:
    api = Api(tmp_path, fake, watched(source, allow_users=["contributor-carl"]))
    assert api.post("pull_request", fork_payload(source)).json()["status"] == "planned"


def test_labels_of_any_shape_never_cause_a_server_error(api: Api, source: dict[str, str]) -> None:
    # a label whose name is a list or an object made a set of unhashables: a 500
    payload = fork_payload(source)
    payload["pull_request"]["labels"] = [{"name": ["x"]}, {"name": {"a": 1}}, {"name": 5}, "y"]
    r = api.post("pull_request", payload)
    assert r.status_code == 202 and r.json()["status"] == "awaiting_approval", r.text


def test_a_new_prs_opened_and_labeled_arriving_at_once_both_succeed(
    api: Api, source: dict[str, str]
) -> None:
    # GitHub sends both for a pull request created with labels; the second insert of the
    # pull request's row failed its unique key, a 500 that left the PR unmeasured (8 of
    # 8 tries before the mend)
    handler = api.ctx.handler
    for number in (30, 31, 32):
        opened = pr_payload(source)
        labeled = {**pr_payload(source), "action": "labeled", "label": {"name": "perf"}}
        opened["number"] = labeled["number"] = number
        gate = threading.Barrier(2)
        outcomes: dict[str, str] = {}

        def deliver(payload: dict[str, Any], gate: threading.Barrier = gate,
                    outcomes: dict[str, str] = outcomes) -> None:  # fmt: skip
            gate.wait()
            try:
                done = handler.handle("pull_request", uuid.uuid4().hex, payload, None)
                outcomes[payload["action"]] = done.outcome
            except Exception as exc:  # what the route would answer with a 500
                outcomes[payload["action"]] = f"raised {type(exc).__name__}"

        threads = [threading.Thread(target=deliver, args=(p,)) for p in (opened, labeled)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert outcomes == {"opened": "planned", "labeled": "ignored"}, outcomes
    with api.factory() as s:
        rows = s.scalars(select(PullRequest).where(PullRequest.number.in_([30, 31, 32]))).all()
        assert sorted(pr.number for pr in rows) == [30, 31, 32]


def test_pr_from_a_deleted_fork_counts_as_a_fork(api: Api, source: dict[str, str]) -> None:
    payload = fork_payload(source)
    payload["pull_request"]["head"]["repo"] = None
    assert api.post("pull_request", payload).json()["status"] == "awaiting_approval"


def test_fork_pr_head_commit_that_cannot_be_fetched_is_an_error_status(
    api: Api, source: dict[str, str]
) -> None:
    api.fake.permissions[(FULL, "maintainer-mia")] = "admin"
    payload = pr_payload(source, "pull_request_labeled_fork", head="c" * 40)
    r = api.post("pull_request", payload)
    assert r.json()["status"] == "error" and "not found" in r.json()["detail"]
    status = api.fake.latest_status(FULL, "c" * 40, "kernelwatch/cpu")
    assert status is not None and status["state"] == "error"


def test_unreachable_source_is_503_and_can_be_redelivered(
    tmp_path: Path, fake: FakeGitHub, source: dict[str, str]
) -> None:
    api = Api(tmp_path, fake, watched({**source, "path": str(tmp_path / "nowhere")}))
    payload = push_payload(source, source["A"], source["B"])
    r = api.post("push", payload, delivery="d-1")
    assert r.status_code == 503
    assert api.count(WebhookDelivery) == 0  # released: GitHub's redelivery is processed
    # the answer names the repository, not the server's path to it
    assert str(tmp_path) not in r.text and FULL in r.json()["detail"], r.text


def test_what_github_is_told_never_holds_the_servers_source(
    api: Api, source: dict[str, str]
) -> None:
    # a pushed commit that is not in the repository: the error named the server's path
    # (or a source URL with its token) in a public commit status and in the answer
    missing = "1" * 40
    r = api.post("push", push_payload(source, source["B"], missing))
    assert r.status_code == 202 and r.json()["status"] == "error", r.text
    status = api.fake.latest_status(FULL, missing, "kernelwatch/cpu")
    assert status is not None and status["state"] == "error"
    for told in (status["description"], r.json()["detail"]):
        assert source["path"] not in told and str(api.settings.data_dir) not in told, told
        assert FULL in told and missing[:12] in told, told


def test_a_source_url_is_shown_without_its_credentials() -> None:
    token = "https://x-access-token:ghp_SECRET@git.example.com/acme/kernels.git"
    assert public_source(token) == "https://git.example.com/acme/kernels.git"
    assert public_source("ssh://git@host:22/a/b.git") == "ssh://host:22/a/b.git"
    for kept in ("/srv/src/kernels", "git@github.com:acme/kernels.git", "https://h/a/b"):
        assert public_source(kept) == kept
    with pytest.raises(SourceError) as caught:
        validate_source("ext::" + token)
    assert "ghp_SECRET" not in str(caught.value)


# ----------------------------------------------------------------------------- fuzzing

FIXTURE_NAMES = [
    "ping",
    "push",
    "push_tag",
    "push_branch_deleted",
    "pull_request_opened",
    "pull_request_synchronize",
    "pull_request_opened_fork",
    "pull_request_labeled_fork",
]


def _paths(node: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    return out


@pytest.mark.postgres
def test_signed_mutated_deliveries_never_cause_a_server_error(
    tmp_path: Path, fake: FakeGitHub, source: dict[str, str], db_url: str
) -> None:
    """Hypothesis: real payloads with fields replaced by arbitrary JSON, correctly signed,
    on SQLite and on PostgreSQL (which refuses NUL, lone surrogates and 2^31 itself)."""
    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st

    api = Api(tmp_path, fake, watched(source), url=db_url)
    nasty = st.sampled_from(["\x00", "a\x00b", "\ud800", "x" * 300, 2**31, 2**63, -1])
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
        | st.text(max_size=30) | nasty
        | st.sampled_from([source["A"], source["C"], "0" * 40, "../x"]),
        lambda children: st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=8), children, max_size=3),
        max_leaves=6,
    )  # fmt: skip

    @settings(max_examples=80, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(
        name=st.sampled_from(FIXTURE_NAMES),
        event=st.sampled_from(["push", "pull_request", "ping", "issues"]),
        picks=st.lists(st.tuples(st.integers(0, 10_000), json_values), max_size=3),
    )
    # a CI run's failure: the first pick replaced the parent of the second one's path
    @example(name="pull_request_synchronize", event="push", picks=[(298, None), (7880, None)])
    def check(name: str, event: str, picks: list[tuple[int, Any]]) -> None:
        payload = load_payload(name)
        paths = _paths(payload)
        for index, value in picks:
            *parents, last = paths[index % len(paths)]
            node: Any = payload
            for key in parents:
                # an earlier pick may have replaced a parent: then this path is gone
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node[last] = value
        r = api.post(event, payload)
        assert r.status_code < 500, (r.status_code, r.text)

    check()
