"""kernelwatch.jobs.github.client: retries, rate limits, Enterprise URLs, name checks.

httpx.MockTransport for exact control of answers; the loopback fake GitHub for the
same calls over a real socket.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from kernelwatch.jobs.github.client import GitHubClient, GitHubError, RateLimited, check_full_name
from tests.fake_github import FakeGitHub, Fault

SHA = "a" * 40


class Script:
    """A transport that answers from a list and records requests and sleeps."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.sleeps: list[float] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def client(self, base_url: str = "https://api.github.com", **kw: object) -> GitHubClient:
        return GitHubClient(
            "tok",
            base_url,
            transport=httpx.MockTransport(self.handler),
            sleep=self.sleeps.append,
            clock=lambda: 1_000_000.0,
            **kw,  # type: ignore[arg-type]
        )


def ok(body: object = None, status: int = 201) -> httpx.Response:
    return httpx.Response(status, json=body if body is not None else {"id": 1})


def test_retries_502_then_succeeds() -> None:
    s = Script(httpx.Response(502), httpx.Response(502), ok({"id": 7, "state": "success"}))
    out = s.client().create_status("acme/kernels", SHA, "success", "kernelwatch/h100", "ok")
    assert out["id"] == 7
    assert len(s.requests) == 3 and len(s.sleeps) == 2
    assert s.sleeps[1] > s.sleeps[0] * 1.0 or s.sleeps[1] >= 0.5  # exponential backoff


def test_gives_up_after_max_retries_with_the_status() -> None:
    s = Script(*[httpx.Response(503) for _ in range(3)])
    with pytest.raises(GitHubError) as err:
        s.client(max_retries=2).get_pull("acme/kernels", 1)
    assert err.value.status == 503 and len(s.requests) == 3


def test_transport_errors_are_retried() -> None:
    s = Script(httpx.ConnectError("refused"), ok({"number": 1}, 200))
    assert s.client().get_pull("acme/kernels", 1)["number"] == 1
    assert len(s.sleeps) == 1


def test_primary_rate_limit_waits_until_reset() -> None:
    limited = httpx.Response(
        403,
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1000020"},
        json={"message": "API rate limit exceeded"},
    )
    s = Script(limited, ok())
    s.client().create_comment("acme/kernels", 3, "hi")
    assert s.sleeps == [21.0]  # reset - now + 1 s of slack


def test_secondary_rate_limit_honours_retry_after() -> None:
    s = Script(httpx.Response(429, headers={"retry-after": "7"}), ok())
    s.client().create_comment("acme/kernels", 3, "hi")
    assert s.sleeps == [7.0]
    s = Script(
        httpx.Response(403, json={"message": "You have exceeded a secondary rate limit"}), ok()
    )
    s.client().create_comment("acme/kernels", 3, "hi")
    assert len(s.sleeps) == 1


def test_a_rate_limit_too_far_away_raises_instead_of_blocking() -> None:
    s = Script(httpx.Response(429, headers={"retry-after": "3600"}))
    with pytest.raises(RateLimited) as err:
        s.client(max_wait_s=60).create_comment("acme/kernels", 3, "hi")
    assert err.value.retry_in_s == 3600 and s.sleeps == []


def test_plain_403_and_422_are_not_retried() -> None:
    s = Script(httpx.Response(403, json={"message": "Resource not accessible by integration"}))
    with pytest.raises(GitHubError, match="not accessible") as err:
        s.client().create_status("acme/kernels", SHA, "pending", "kernelwatch/cpu")
    assert err.value.status == 403 and len(s.requests) == 1


def test_enterprise_base_url_and_headers() -> None:
    s = Script(ok())
    client = s.client("https://ghe.example.com/api/v3/")
    client.create_status(
        "acme/kernels", SHA, "failure", "kernelwatch/b200", "x" * 300, "https://kw/?page=run&run=1"
    )
    req = s.requests[0]
    assert str(req.url) == f"https://ghe.example.com/api/v3/repos/acme/kernels/statuses/{SHA}"
    assert req.headers["authorization"] == "Bearer tok"
    assert req.headers["accept"] == "application/vnd.github+json"
    body = httpx.Response(200, content=req.content).json()
    assert len(body["description"]) == 140 and body["target_url"] == "https://kw/?page=run&run=1"


def test_permission_roles() -> None:
    s = Script(
        ok({"permission": "write", "role_name": "maintain"}, 200),
        ok({"permission": "read", "role_name": "triage"}, 200),
        httpx.Response(404, json={"message": "Not Found"}),
    )
    client = s.client()
    assert client.permission("acme/kernels", "mia") == "maintain"
    assert client.permission("acme/kernels", "tom") == "read"
    assert client.permission("acme/kernels", "nobody") == "none"


@pytest.mark.parametrize(
    "name", ["../etc", "acme/..", "acme/kernels;rm", "acme/$(id)", "acme", "a/b/c", "acme/ k"]
)
def test_names_that_could_escape_the_url_path_are_refused(name: str) -> None:
    with pytest.raises(GitHubError):
        check_full_name(name)
    s = Script()
    with pytest.raises(GitHubError):
        s.client().create_comment(name, 1, "x")
    assert s.requests == []


def test_user_and_label_segments_are_encoded() -> None:
    s = Script(ok({"permission": "read"}, 200), httpx.Response(200, json=[]))
    client = s.client()
    client.permission("acme/kernels", "../../admin")
    client.remove_label("acme/kernels", 4, "kernelwatch:run/../x")
    assert s.requests[0].url.raw_path == (
        b"/repos/acme/kernels/collaborators/..%2F..%2Fadmin/permission"
    )
    assert s.requests[1].url.raw_path.endswith(b"/labels/kernelwatch%3Arun%2F..%2Fx")


def test_sha_must_be_full() -> None:
    with pytest.raises(GitHubError):
        Script().client().create_status("acme/kernels", "HEAD", "success", "c")


# ----------------------------------------------------------------------------- loopback


@pytest.fixture
def ghe() -> Iterator[FakeGitHub]:
    with FakeGitHub(prefix="/api/v3") as fake:
        yield fake


def loopback(fake: FakeGitHub) -> GitHubClient:
    return GitHubClient("test-token", fake.url, backoff_s=0.01)


def test_loopback_comment_create_list_update(ghe: FakeGitHub) -> None:
    client = loopback(ghe)
    created = client.create_comment("acme/kernels", 5, "first")
    assert created["id"] > 2**32
    client.update_comment("acme/kernels", created["id"], "second")
    assert [c["body"] for c in client.list_comments("acme/kernels", 5)] == ["second"]
    assert ghe.requests[0].path == "/api/v3/repos/acme/kernels/issues/5/comments"
    with pytest.raises(GitHubError) as err:
        client.update_comment("acme/kernels", 1, "gone")
    assert err.value.status == 404


def test_loopback_retries_injected_failures(ghe: FakeGitHub) -> None:
    ghe.fail_next(Fault(502), Fault(429, {"Retry-After": "0"}))
    client = loopback(ghe)
    client.create_status("acme/kernels", SHA, "success", "kernelwatch/cpu", "fine")
    assert len(ghe.requests) == 3
    assert ghe.latest_status("acme/kernels", SHA, "kernelwatch/cpu") == {
        "id": ghe.statuses[("acme/kernels", SHA)][0]["id"],
        "state": "success",
        "context": "kernelwatch/cpu",
        "description": "fine",
        "target_url": None,
    }


def test_loopback_wrong_token_is_an_error(ghe: FakeGitHub) -> None:
    client = GitHubClient("wrong", ghe.url, backoff_s=0.01)
    with pytest.raises(GitHubError) as err:
        client.get_pull("acme/kernels", 1)
    assert err.value.status == 401


def test_check_run(ghe: FakeGitHub) -> None:
    loopback(ghe).create_check_run(
        "acme/kernels", SHA, "kernelwatch/h100", "completed", "success", "ok", "table"
    )
    assert ghe.check_runs[0]["conclusion"] == "success"
    assert ghe.check_runs[0]["output"] == {"title": "ok", "summary": "table"}
