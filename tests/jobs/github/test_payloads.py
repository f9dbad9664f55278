"""Every signed payload gets a 2xx or a 4xx, on PostgreSQL and SQLite alike.

Issue 14 found NUL bytes, lone surrogates and PR numbers of 2^31 answered with 500
on PostgreSQL (7/7) and SQLite (3/6), and a legitimate 5.4 MB push refused with 413.
The bodies are written as GitHub writes JSON (``\\u0000``, ``\\ud800`` escapes) and
signed correctly, so only the payload check stands between them and the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelwatch.db.github import PullRequest, WebhookDelivery
from kernelwatch.db.models import Run
from kernelwatch.jobs.api.app import DEFAULT_MAX_BODY
from tests.fake_github import FakeGitHub, delivery_headers, load_payload
from tests.jobs.github.test_webhooks import SECRET, Api, build_source, pr_payload, watched

pytestmark = pytest.mark.postgres


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def source(tmp_path: Path) -> dict[str, str]:
    return build_source(tmp_path)


@pytest.fixture
def api(tmp_path: Path, fake: FakeGitHub, source: dict[str, str], db_url: str) -> Api:
    return Api(tmp_path, fake, watched(source), url=db_url)


def _set(payload: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    node: Any = payload
    *parents, last = dotted.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    return payload


NASTY = [
    ("pull_request.head.ref", "feature\x00; rm -rf /"),
    ("pull_request.base.ref", "main\udc00"),
    ("pull_request.head.repo.full_name", "\ud800/fork"),
    ("number", 2**31),
    ("number", 2**63),
    ("pull_request.head.ref", "x" * 256),
    ("action", "opened\x00"),
    ("action", "\udfff"),
    ("pull_request.user.login", "mia\x00"),
]


@pytest.mark.parametrize(("field", "value"), NASTY, ids=[f"{f}={v!r:.20}" for f, v in NASTY])
def test_nul_surrogates_big_ints_and_long_strings_are_4xx(
    api: Api, source: dict[str, str], field: str, value: Any
) -> None:
    payload = _set(pr_payload(source), field, value)
    body = json.dumps(payload).encode()  # ASCII with \\u escapes, as GitHub sends
    assert b"\\u" in body or isinstance(value, int) or len(str(value)) > 255
    r = api.post("pull_request", None, raw=body)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert api.count(Run) == 0 and api.count(PullRequest) == 0


@pytest.mark.parametrize(
    "ref", ["refs/heads/ma\x00in", "refs/heads/\ud83d", "refs/heads/" + "b" * 300]
)
def test_push_refs_that_fit_no_column_are_4xx(api: Api, source: dict[str, str], ref: str) -> None:
    payload = load_payload("push", before=source["A"], after=source["B"], ref=ref)
    r = api.post("push", payload)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert api.count(Run) == 0


def test_the_next_valid_delivery_after_a_refused_one_is_planned(
    api: Api, source: dict[str, str]
) -> None:
    bad = _set(pr_payload(source), "number", 2**31)
    assert api.post("pull_request", bad).status_code == 400
    good = _set(pr_payload(source), "number", 2**31 - 1)  # the largest that fits
    r = api.post("pull_request", good)
    assert r.status_code == 202 and r.json()["status"] == "planned", r.text


def test_a_push_of_5_4_mb_is_accepted_with_the_default_limit(
    tmp_path: Path, fake: FakeGitHub, source: dict[str, str], db_url: str
) -> None:
    api = Api(tmp_path, fake, watched(source), url=db_url, max_body_bytes=DEFAULT_MAX_BODY)
    payload = load_payload("push", before=source["A"], after=source["B"])
    commit = payload["commits"][0] if payload.get("commits") else {"message": ""}
    payload["commits"] = [
        {**commit, "id": source["B"], "message": f"commit {i} " + "m" * 2000} for i in range(2700)
    ]
    body = json.dumps(payload).encode()
    assert 5_300_000 < len(body) < DEFAULT_MAX_BODY
    r = api.post("push", None, raw=body)
    assert r.status_code == 202 and r.json()["status"] == "planned", r.text


def test_a_body_without_a_signature_header_is_401(api: Api) -> None:
    body = json.dumps(load_payload("ping")).encode()
    headers = delivery_headers("ping", body, None)
    assert api.client.post("/webhooks/github", content=body, headers=headers).status_code == 401
    assert api.count(WebhookDelivery) == 0


def test_bodies_spooled_to_disk_are_verified_like_small_ones(
    tmp_path: Path, fake: FakeGitHub, source: dict[str, str], db_url: str
) -> None:
    """Past SPOOL_BYTES the body waits in a temporary file; the HMAC is the same."""
    from kernelwatch.jobs.api.webhook import SPOOL_BYTES

    api = Api(tmp_path, fake, watched(source), url=db_url, max_body_bytes=DEFAULT_MAX_BODY)
    body = json.dumps({**load_payload("ping"), "zen": "z" * (4 * SPOOL_BYTES)}).encode()
    forged = delivery_headers("ping", body, "not-" + SECRET)
    assert api.client.post("/webhooks/github", content=body, headers=forged).status_code == 401
    r = api.post("ping", None, raw=body)
    assert r.status_code == 200 and r.json()["status"] == "pong", r.text
