"""A loopback HTTP server that speaks the parts of GitHub's REST API kernelwatch uses.

It keeps commit statuses, issue comments, labels, pull requests, check runs and
collaborator permissions in memory, records every request, and can be told to fail
the next requests (5xx, rate limits) to exercise the client's retries. It listens on
127.0.0.1 only; ``prefix`` serves it under a path such as ``/api/v3`` (GitHub
Enterprise Server).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

REPO = r"(?P<owner>[^/]+)/(?P<repo>[^/]+)"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Fault:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=lambda: {"message": "injected failure"})


class FakeGitHub:
    def __init__(self, token: str | None = "test-token", prefix: str = "") -> None:
        self.token = token
        self.prefix = prefix.rstrip("/")
        self.requests: list[Recorded] = []
        self.statuses: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.comments: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.labels: dict[tuple[str, int], list[str]] = {}
        self.pulls: dict[tuple[str, int], dict[str, Any]] = {}
        self.check_runs: list[dict[str, Any]] = []
        self.commit_comments: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.permissions: dict[tuple[str, str], str] = {}
        self.faults: list[Fault] = []
        self._next_id = 1_000_000_000_000  # beyond 32 bits, as GitHub's ids are now
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.prefix}"

    def start(self) -> FakeGitHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ inspection

    def fail_next(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def statuses_for(self, full_name: str, sha: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.statuses.get((full_name, sha), []))

    def latest_status(self, full_name: str, sha: str, context: str) -> dict[str, Any] | None:
        for s in reversed(self.statuses_for(full_name, sha)):
            if s["context"] == context:
                return s
        return None

    def requests_to(self, method: str, pattern: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    # ------------------------------------------------------------------ routing

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def dispatch(
        self, method: str, path: str, headers: dict[str, str], body: Any
    ) -> tuple[int, dict[str, str], Any]:
        with self._lock:
            self.requests.append(Recorded(method, path, headers, body))
            if self.faults:
                f = self.faults.pop(0)
                return f.status, f.headers, f.body
            if self.token and headers.get("authorization") != f"Bearer {self.token}":
                return 401, {}, {"message": "Bad credentials"}
            if self.prefix:
                if not path.startswith(self.prefix + "/"):
                    return 404, {}, {"message": "Not Found"}
                path = path[len(self.prefix) :]
            for verb, regex, name in ROUTES:
                m = re.fullmatch(regex, path)
                if verb == method and m:
                    params = {k: unquote(v) for k, v in m.groupdict().items()}
                    result: tuple[int, dict[str, str], Any] = getattr(self, name)(params, body)
                    return result
            return 404, {}, {"message": "Not Found"}

    # ------------------------------------------------------------------ endpoints

    def _full(self, p: dict[str, str]) -> str:
        return f"{p['owner']}/{p['repo']}"

    def create_status(self, p: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        if not isinstance(body, dict) or body.get("state") not in (
            "pending",
            "success",
            "failure",
            "error",
        ):
            return 422, {}, {"message": "Validation Failed"}
        if len(body.get("description") or "") > 140:
            return 422, {}, {"message": "description is too long (maximum is 140 characters)"}
        status = {
            "id": self._new_id(),
            "state": body["state"],
            "context": body.get("context", "default"),
            "description": body.get("description"),
            "target_url": body.get("target_url"),
        }
        self.statuses.setdefault((self._full(p), p["sha"]), []).append(status)
        return 201, {}, status

    def list_statuses(self, p: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        return 200, {}, list(reversed(self.statuses.get((self._full(p), p["sha"]), [])))

    def create_comment(self, p: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        comment = {"id": self._new_id(), "body": body["body"], "user": {"login": "kernelwatch"}}
        self.comments.setdefault((self._full(p), int(p["number"])), []).append(comment)
        return 201, {}, comment

    def create_commit_comment(
        self, p: dict[str, str], body: Any
    ) -> tuple[int, dict[str, str], Any]:
        comment = {
            "id": self._new_id(),
            "body": body["body"],
            "commit_id": p["sha"],
            "user": {"login": "kernelwatch"},
        }
        self.commit_comments.setdefault((self._full(p), p["sha"]), []).append(comment)
        return 201, {}, comment

    def list_comments(self, p: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        return 200, {}, self.comments.get((self._full(p), int(p["number"])), [])

    def update_comment(self, p: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        for (full, _), comments in self.comments.items():
            for c in comments:
                if full == self._full(p) and c["id"] == int(p["id"]):
                    c["body"] = body["body"]
                    return 200, {}, c
        return 404, {}, {"message": "Not Found"}

    def get_pull(self, p: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        pull = self.pulls.get((self._full(p), int(p["number"])))
        return (200, {}, pull) if pull else (404, {}, {"message": "Not Found"})

    def permission(self, p: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        perm = self.permissions.get((self._full(p), p["user"]))
        if perm is None:
            return 404, {}, {"message": "Not Found"}
        legacy = "write" if perm == "maintain" else ("read" if perm == "triage" else perm)
        return 200, {}, {"permission": legacy, "role_name": perm, "user": {"login": p["user"]}}

    def remove_label(self, p: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        labels = self.labels.get((self._full(p), int(p["number"])), [])
        if p["name"] not in labels:
            return 404, {}, {"message": "Label does not exist"}
        labels.remove(p["name"])
        return 200, {}, [{"name": n} for n in labels]

    def create_check_run(self, p: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        run = {"id": self._new_id(), **body}
        self.check_runs.append(run)
        return 201, {}, run

    # ------------------------------------------------------------------ HTTP

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, extra, payload = fake.dispatch(
                    self.command, urlsplit(self.path).path, headers, body
                )
                data = json.dumps(payload).encode() if payload is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


ROUTES: list[tuple[str, str, str]] = [
    ("POST", rf"/repos/{REPO}/statuses/(?P<sha>[0-9a-f]{{40}})", "create_status"),
    ("GET", rf"/repos/{REPO}/commits/(?P<sha>[0-9a-f]{{40}})/statuses", "list_statuses"),
    ("POST", rf"/repos/{REPO}/issues/(?P<number>\d+)/comments", "create_comment"),
    ("GET", rf"/repos/{REPO}/issues/(?P<number>\d+)/comments", "list_comments"),
    (
        "POST",
        rf"/repos/{REPO}/commits/(?P<sha>[0-9a-f]{{40}})/comments",
        "create_commit_comment",
    ),
    ("PATCH", rf"/repos/{REPO}/issues/comments/(?P<id>\d+)", "update_comment"),
    ("GET", rf"/repos/{REPO}/pulls/(?P<number>\d+)", "get_pull"),
    ("GET", rf"/repos/{REPO}/collaborators/(?P<user>[^/]+)/permission", "permission"),
    ("DELETE", rf"/repos/{REPO}/issues/(?P<number>\d+)/labels/(?P<name>[^/]+)", "remove_label"),
    ("POST", rf"/repos/{REPO}/check-runs", "create_check_run"),
]


# --------------------------------------------------------------------------- deliveries

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "github"


def load_payload(name: str, **changes: Any) -> dict[str, Any]:
    """A recorded delivery (``tests/fixtures/github/<name>.json``) with fields replaced.

    ``pull_request__head__sha="ab..."`` sets ``payload["pull_request"]["head"]["sha"]``.
    """
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    for dotted, value in changes.items():
        keys = dotted.split("__")
        node: Any = data
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return data


def delivery_headers(
    event: str, body: bytes, secret: str | None, delivery: str | None = None
) -> dict[str, str]:
    """The headers GitHub sends with a delivery (signature over the exact body)."""
    import uuid

    from kernelwatch.jobs.api.signature import sign

    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-GitHub-Hook-ID": "480001",
        "User-Agent": "GitHub-Hookshot/8f2e1c3",
        "Content-Type": "application/json",
    }
    if secret is not None:
        headers["X-Hub-Signature-256"] = sign(secret, body)
    return headers
