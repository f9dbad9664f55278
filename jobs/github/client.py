"""A small GitHub REST client: commit statuses, issue comments, pulls, permissions, labels.

Why not a library: kernelwatch needs eight endpoints, a configurable base URL (GitHub
Enterprise Server lives at ``https://HOST/api/v3``), an injectable httpx transport for
tests, and retries that understand GitHub's rate limits. That is this file.

Retries (the one policy of ``jobs/retry.py``): 5xx answers and transport errors are
retried with exponential backoff and jitter; 429, and 403 that carries a rate-limit
signal (``retry-after``, or ``x-ratelimit-remaining: 0`` with ``x-ratelimit-reset``),
wait as long as GitHub asks, up to ``max_wait_s``; a longer wait raises
:class:`RateLimited` instead of blocking.
Every other 4xx raises :class:`GitHubError` at once. Path segments built from names
(owner, repository, user, label) are validated or percent-encoded, never spliced raw.

What it does not do: pagination beyond the first 100 items (kernelwatch only looks
for its own comment), GraphQL, or token minting for GitHub Apps.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from kernelwatch.jobs.errors import KernelwatchError
from kernelwatch.jobs.retry import retrying

DEFAULT_API_URL = "https://api.github.com"
RETRY_STATUSES = frozenset({500, 502, 503, 504})
_FULL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
_SHA = re.compile(r"^[0-9a-f]{40}$")


class GitHubError(KernelwatchError):
    """GitHub answered with an error (after retries) or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Transient(GitHubError):
    """A failure worth retrying: a 5xx, a transport error, a rate limit we wait out.

    Raised to the caller once the retries are spent, as the last answer's error.
    """

    def __init__(self, message: str, status: int | None = None, wait_s: float | None = None):
        super().__init__(message, status)
        self.wait_s = wait_s


class RateLimited(GitHubError):
    """GitHub asked us to wait longer than we are willing to block."""

    def __init__(self, message: str, retry_in_s: float) -> None:
        super().__init__(message, 403)
        self.retry_in_s = retry_in_s


def check_full_name(full_name: str) -> str:
    """``owner/name`` as GitHub spells it; anything else (``..``, ``;``, ``/``) is refused."""
    if not _FULL_NAME.match(full_name) or any(p in (".", "..") for p in full_name.split("/")):
        raise GitHubError(f"not a repository name: {full_name!r}")
    return full_name


def _segment(value: str) -> str:
    return quote(value, safe="")


class GitHubClient:
    """Synchronous client; one per process, safe to share between threads."""

    def __init__(
        self,
        token: str | None = None,
        base_url: str = DEFAULT_API_URL,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 10.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        max_wait_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "kernelwatch",
        }
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_wait_s = max_wait_s
        self._sleep = sleep
        self._clock = clock
        self._http = httpx.Client(
            base_url=self.base_url + "/",
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ transport

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
    ) -> httpx.Response:
        """One API call with retries; raises GitHubError for a final non-2xx answer.

        The policy is :func:`kernelwatch.jobs.retry.retrying`: :class:`Transient`
        failures are retried up to ``max_retries`` times, each waiting what GitHub
        asked for or the jittered backoff.
        """
        url = path.lstrip("/")
        policy = retrying(
            on=Transient,
            attempts=self.max_retries + 1,
            first_s=self.backoff_s,
            max_s=self.max_wait_s,
            jitter=True,
            wait_hint=lambda exc: exc.wait_s if isinstance(exc, Transient) else None,
            sleep=self._sleep,
        )
        return policy(self._attempt, method, path, url, json, params)

    def _attempt(
        self,
        method: str,
        path: str,
        url: str,
        json: Any,
        params: Mapping[str, str | int] | None,
    ) -> httpx.Response:
        """One try: the answer, or :class:`Transient` if it may be retried."""
        try:
            resp = self._http.request(method, url, json=json, params=params)
        except httpx.TransportError as exc:
            raise Transient(f"{method} {path}: {exc}") from exc
        if resp.is_success:
            return resp
        message = f"{method} {path}: {resp.status_code} {_message(resp)}"
        retryable, wait = self._retry_wait(resp)
        if not retryable:
            raise GitHubError(message, resp.status_code)
        raise Transient(message, resp.status_code, wait_s=wait)

    def _retry_wait(self, resp: httpx.Response) -> tuple[bool, float | None]:
        """Whether ``resp`` may be retried, and the wait GitHub asked for (None: backoff)."""
        if resp.status_code in RETRY_STATUSES:
            return True, None
        if resp.status_code not in (403, 429):
            return False, None
        headers = resp.headers
        wait: float | None = None
        if "retry-after" in headers:
            try:
                wait = max(0.0, float(headers["retry-after"]))
            except ValueError:
                return True, None
        elif headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
            try:
                wait = max(0.0, float(headers["x-ratelimit-reset"]) - self._clock()) + 1.0
            except ValueError:
                return True, None
        elif resp.status_code == 429 or "rate limit" in _message(resp).lower():
            return True, None  # secondary rate limit without headers: back off
        else:
            return False, None  # a plain 403: permission denied, not worth retrying
        if wait > self.max_wait_s:
            raise RateLimited(f"GitHub rate limit: retry in {wait:.0f} s", wait)
        return True, wait

    # ------------------------------------------------------------------ endpoints

    def create_status(
        self,
        full_name: str,
        sha: str,
        state: str,
        context: str,
        description: str = "",
        target_url: str | None = None,
    ) -> dict[str, Any]:
        """POST /repos/{o}/{r}/statuses/{sha}; the description is cut to GitHub's 140."""
        if not _SHA.match(sha):
            raise GitHubError(f"not a commit sha: {sha!r}")
        body: dict[str, Any] = {
            "state": state,
            "context": context,
            "description": shorten(description, 140),
        }
        if target_url:
            body["target_url"] = target_url
        path = f"repos/{check_full_name(full_name)}/statuses/{sha}"
        return _json(self.request("POST", path, json=body))

    def create_comment(self, full_name: str, number: int, body: str) -> dict[str, Any]:
        path = f"repos/{check_full_name(full_name)}/issues/{int(number)}/comments"
        return _json(self.request("POST", path, json={"body": body}))

    def create_commit_comment(self, full_name: str, sha: str, body: str) -> dict[str, Any]:
        """POST /repos/{o}/{r}/commits/{sha}/comments (a bisection's culprit)."""
        if not _SHA.match(sha):
            raise GitHubError(f"not a commit sha: {sha!r}")
        path = f"repos/{check_full_name(full_name)}/commits/{sha}/comments"
        return _json(self.request("POST", path, json={"body": body}))

    def update_comment(self, full_name: str, comment_id: int, body: str) -> dict[str, Any]:
        path = f"repos/{check_full_name(full_name)}/issues/comments/{int(comment_id)}"
        return _json(self.request("PATCH", path, json={"body": body}))

    def list_comments(self, full_name: str, number: int) -> list[dict[str, Any]]:
        path = f"repos/{check_full_name(full_name)}/issues/{int(number)}/comments"
        data = self.request("GET", path, params={"per_page": 100}).json()
        return [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []

    def get_pull(self, full_name: str, number: int) -> dict[str, Any]:
        return _json(self.request("GET", f"repos/{check_full_name(full_name)}/pulls/{int(number)}"))

    def permission(self, full_name: str, user: str) -> str:
        """``admin | maintain | write | triage | read | none`` of ``user`` on the repository."""
        path = f"repos/{check_full_name(full_name)}/collaborators/{_segment(user)}/permission"
        try:
            data = _json(self.request("GET", path))
        except GitHubError as exc:
            if exc.status == 404:  # not a collaborator
                return "none"
            raise
        role = str(data.get("role_name") or "")
        return role if role in ("admin", "maintain", "write") else str(data.get("permission"))

    def remove_label(self, full_name: str, number: int, label: str) -> None:
        path = f"repos/{check_full_name(full_name)}/issues/{int(number)}/labels/{_segment(label)}"
        try:
            self.request("DELETE", path)
        except GitHubError as exc:
            if exc.status != 404:  # already gone is fine
                raise

    def create_check_run(
        self,
        full_name: str,
        head_sha: str,
        name: str,
        status: str,
        conclusion: str | None = None,
        title: str = "",
        summary: str = "",
        details_url: str | None = None,
    ) -> dict[str, Any]:
        """POST /repos/{o}/{r}/check-runs (GitHub App tokens only)."""
        body: dict[str, Any] = {"name": name, "head_sha": head_sha, "status": status}
        if conclusion:
            body["conclusion"] = conclusion
        if title or summary:
            body["output"] = {"title": title or name, "summary": summary[:65_000]}
        if details_url:
            body["details_url"] = details_url
        path = f"repos/{check_full_name(full_name)}/check-runs"
        return _json(self.request("POST", path, json=body))


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _message(resp: httpx.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:200]
    if isinstance(data, dict):
        return str(data.get("message", ""))[:200]
    return ""


def _json(resp: httpx.Response) -> dict[str, Any]:
    if not resp.content:
        return {}
    data = resp.json()
    return data if isinstance(data, dict) else {"items": data}


__all__ = [
    "DEFAULT_API_URL",
    "GitHubClient",
    "GitHubError",
    "RateLimited",
    "Transient",
    "check_full_name",
    "shorten",
]
