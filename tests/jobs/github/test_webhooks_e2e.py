"""GitHub deliveries end to end: API → PostgreSQL → Redis → a real worker → statuses.

A push and a same-repository pull request go through ``create_app`` (reporter loop
running), are planned into PostgreSQL, sent through Redis, executed by a real Celery
worker process on small real git repositories (softmax only, 0.1 s budget), judged,
and reported to the loopback GitHub as commit statuses and one PR comment.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.session import engine_for
from kernelwatch.jobs.api import create_app
from kernelwatch.jobs.cli.gate import gate
from kernelwatch.jobs.cli.processes import start_worker
from kernelwatch.jobs.github.client import GitHubClient
from kernelwatch.jobs.github.watched import parse_repos
from kernelwatch.jobs.planning.broker import make_celery
from tests.conftest import _truncate
from tests.fake_github import FakeGitHub, delivery_headers, load_payload
from tests.helpers import git, library_files, make_repo

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

SECRET = "e2e-webhook-secret"
FULL = "acme/kernels"
INIT = "from kernelwatch.kernels.triton_kernels import softmax, rmsnorm, matmul, attention\n"


@pytest.fixture
def stack(
    tmp_path: Path, pg_url: str, redis_db_url: str
) -> Iterator[tuple[TestClient, FakeGitHub, dict[str, str], sessionmaker[Session]]]:
    _truncate(pg_url)
    repo = tmp_path / "src"
    a = make_repo(repo, library_files("kern", INIT, recipe="pythonpath"), "A: kernels")
    b = make_repo(repo, {"README.md": "docs\n"}, "B: docs")
    git(repo, "checkout", "-q", "-b", "feature", a)
    c = make_repo(repo, {"NOTES.md": "notes\n"}, "C: notes")
    git(repo, "checkout", "-q", "main")
    git(repo, "update-ref", "refs/pull/7/head", c)
    settings = Settings(
        data_dir=tmp_path / "kw",
        database_url=pg_url,
        broker_url=redis_db_url,
        webhook_secret=SECRET,
        dashboard_url="https://kw.example.com",
        suite_timeout_s=300,
    )
    settings.ensure_dirs()
    repos = parse_repos(
        {
            "repos": {
                FULL: {
                    "source": str(repo),
                    "device_classes": ["cpu"],
                    "bench_args": ["--kernel", "softmax", "--budget", "0.1"],
                }
            }
        }
    )
    factory: sessionmaker[Session] = sessionmaker(bind=engine_for(pg_url), expire_on_commit=False)
    worker = start_worker(settings, name="webhooks-e2e")
    with FakeGitHub() as fake:
        github = GitHubClient("test-token", fake.url, backoff_s=0.05)
        app = create_app(
            settings, factory, make_celery(settings), github, repos=repos, reporter_interval_s=0.3
        )
        try:
            with TestClient(app) as client:  # runs the lifespan: the reporter loop
                yield client, fake, {"A": a, "B": b, "C": c}, factory
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            github.close()


def post(client: TestClient, event: str, payload: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps(payload).encode()
    r = client.post("/webhooks/github", content=body, headers=delivery_headers(event, body, SECRET))
    assert r.status_code in (200, 202), r.text
    data: dict[str, Any] = r.json()
    return data


def wait_status(fake: FakeGitHub, sha: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = fake.latest_status(FULL, sha, "kernelwatch/cpu")
        if st is not None and st["state"] != "pending":
            return st
        time.sleep(0.5)
    raise AssertionError(f"no final status for {sha[:12]}: {fake.statuses_for(FULL, sha)}")


# the crowd half of make test (it starts a worker and servers): the other half was the
# longer one (1314 s against 1166 s on a 2-core machine, 2026-12-05)
@pytest.mark.crowd
def test_push_and_pull_request_end_to_end(
    stack: tuple[TestClient, FakeGitHub, dict[str, str], sessionmaker[Session]],
) -> None:
    client, fake, sha, factory = stack

    pushed = post(client, "push", load_payload("push", before=sha["A"], after=sha["B"]))
    assert pushed["status"] == "planned" and len(pushed["runs"]) == 2
    status = wait_status(fake, sha["B"])
    assert status["state"] == "success", status
    assert status["target_url"].startswith("https://kw.example.com/?page=compare&a=")
    states = [s["state"] for s in fake.statuses_for(FULL, sha["B"])]
    assert states[0] == "pending" and states[-1] == "success"
    assert gate(factory, FULL, sha["B"], out=lambda _: None) == 0

    opened = post(
        client,
        "pull_request",
        load_payload(
            "pull_request_opened",
            pull_request__head__sha=sha["C"],
            pull_request__base__sha=sha["B"],
        ),
    )
    assert opened["status"] == "planned" and len(opened["runs"]) == 1  # merge-base A reused
    status = wait_status(fake, sha["C"])
    assert status["state"] == "success", status
    deadline = time.monotonic() + 30
    while not fake.comments.get((FULL, 7)) and time.monotonic() < deadline:
        time.sleep(0.2)
    [comment] = fake.comments[(FULL, 7)]
    assert "<!-- kernelwatch:pr-comment -->" in comment["body"]
    assert f"against merge-base `{sha['A'][:12]}`" in comment["body"]
    lines: list[str] = []
    assert gate(factory, FULL, sha["C"], out=lines.append) == 0
    assert "success" in "\n".join(lines)
