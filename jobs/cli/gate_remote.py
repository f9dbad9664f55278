"""``kernelwatch gate --api URL``: the merge gate over the REST API, standard library only.

Any CI that can reach kernelwatch's API (not its database) asks
``GET /api/v1/verdicts?repo=R&sha=S`` with the read token (``Authorization: Bearer``),
waits while the answer is ``pending`` (a run of the sha queued or running) or ``none``
(the webhook has not been planned yet), then prints the table and the dashboard links
and exits with the gate's code. The server decides the code (``exit_code`` in the
answer, from ``jobs/cli/exit_codes.py``); this client only maps neutral as asked.

This file is also the GitHub Action's script (``action.yml`` runs it with the hosted
runner's ``python3``, no kernelwatch install), so it imports nothing but the standard
library and stays valid Python 3.8. On GitHub Actions it also appends the PR
comment's markdown to the job summary (``GITHUB_STEP_SUMMARY``) and sets the step's
outputs ``verdict``, ``exit-code`` and ``dashboard-url`` (``GITHUB_OUTPUT``).

Exit codes (design.md): 0 pass, 1 fail (regression, less_accurate, broken), 2 error,
timeout or no finished answer, 3 neutral (inconclusive; ``--neutral pass`` or
``--neutral fail`` turn it into 0 or 1).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, TextIO

PASS, FAIL, ERROR, NEUTRAL = 0, 1, 2, 3
NEUTRAL_AS = {"neutral": NEUTRAL, "pass": PASS, "fail": FAIL}
EXIT_HELP = (
    "Exit 0 pass, 1 fail (regression, less_accurate, broken), 2 error or timeout, "
    "3 neutral (inconclusive)."
)
DEFAULT_TOKEN_ENV = "KW_API_TOKEN"
# answers worth waiting for: not final yet, or not planned yet
WAITING = ("pending", "none")
# A commit as the gate, the API and an import take it: a full sha or a prefix of 7+ hex
# digits (lower case; callers lower what a person typed).
SHA_PATTERN = r"^[0-9a-f]{7,40}$"


def is_sha(text: str) -> bool:
    """``text`` (any case) is a full sha or a prefix of 7+ hex digits."""
    return re.fullmatch(SHA_PATTERN, text.lower()) is not None


# HTTP statuses that end the gate at once: the request itself is wrong
REFUSED = (400, 401, 403, 409, 422)  # 409: a sha prefix of several commits
USER_AGENT = "kernelwatch-gate"
# KW_CPU_TIMING_GATES acts where runs are judged; a gate with a CPU class says so
CPU_TIMING_NOTE = (
    "note: KW_CPU_TIMING_GATES is set here, where it has no effect: it acts in the worker "
    "when a run is judged (set it in the workers' environment; runs judged before keep "
    "their verdict)"
)


class Refused(Exception):
    """The API refused the request (a wrong token, a bad sha): waiting cannot help."""


class Unreachable(Exception):
    """No answer (connection refused, a timeout, a 5xx): it may come back."""


def verdict_url(api: str, repo: str, sha: str) -> str:
    query = urllib.parse.urlencode({"repo": repo, "sha": sha})
    return f"{api.rstrip('/')}/api/v1/verdicts?{query}"


def fetch(
    api: str, repo: str, sha: str, token: str | None, timeout_s: float = 30
) -> dict[str, Any]:
    """One answer; ``{"verdict": "none"}`` when the API knows no such repository yet."""
    request = urllib.request.Request(verdict_url(api, repo, sha))
    request.add_header("Accept", "application/json")
    request.add_header("User-Agent", USER_AGENT)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body: dict[str, Any] = json.loads(response.read().decode("utf-8"))
            return body
    except urllib.error.HTTPError as exc:
        detail = _detail(exc)
        if exc.code == 404:
            return {"verdict": "none", "exit_code": ERROR, "classes": [], "detail": detail}
        if exc.code in REFUSED:
            raise Refused(f"HTTP {exc.code}: {detail}") from None
        raise Unreachable(f"HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unreachable(f"{type(exc).__name__}: {reason}") from None


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        data = json.loads(exc.read().decode("utf-8", "replace"))
        detail = data.get("detail") if isinstance(data, dict) else None
        return detail if isinstance(detail, str) else json.dumps(detail)
    except ValueError:
        return str(exc.reason)


def exit_code(body: dict[str, Any], neutral: str = "neutral") -> int:
    """The gate's code for a final answer, neutral mapped as asked."""
    code = body.get("exit_code")
    if not isinstance(code, int) or code not in (PASS, FAIL, ERROR, NEUTRAL):
        return ERROR
    return NEUTRAL_AS[neutral] if code == NEUTRAL else code


def progress_line(body: dict[str, Any]) -> str:
    """``pending: h100 measuring on w1; cpu queued`` (what a waiting log shows)."""
    classes = body.get("classes") or []
    if body.get("verdict") == "none":
        return "none: no runs of this commit yet (waiting for the webhook's runs)"
    parts = [f"{c.get('device_class')} {c.get('description')}" for c in classes]
    moving = body.get("in_flight") or []
    if moving:
        parts.append("in flight: run " + ", ".join(str(i) for i in moving))
    return f"{body.get('verdict')}: " + "; ".join(parts)


def poll(
    fetch_once: Callable[[], dict[str, Any]],
    *,
    wait: bool,
    timeout_s: float,
    poll_s: float,
    progress: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[dict[str, Any] | None, bool, str]:
    """(the last answer, timed out, the last error) after waiting as asked.

    A refused request raises :class:`Refused`; an unreachable API is retried while
    waiting (a restart of the API is not a verdict) and ends the gate otherwise.
    """
    start = clock()
    deadline = start + timeout_s
    body: dict[str, Any] | None = None
    error, last = "", ""
    while True:
        try:
            body, error = fetch_once(), ""
        except Unreachable as exc:
            error = str(exc)
            if not wait:
                return body, False, error
        line = f"API unreachable: {error}" if error else progress_line(body) if body else ""
        if progress is not None and line != last:
            print(f"[{clock() - start:6.0f}s] {line}", file=progress, flush=True)
            last = line
        finished = body is not None and not error and body.get("verdict") not in WAITING
        if finished or not wait:
            return body, False, error
        left = deadline - clock()
        if left <= 0:
            return body, True, error
        sleep(min(poll_s, left))


def report(body: dict[str, Any], out: Callable[[str], None]) -> None:
    """The table and a dashboard link per GPU class."""
    table = body.get("table")
    if isinstance(table, str) and table:
        out(table)
    for c in body.get("classes") or []:
        out(f"dashboard ({c.get('device_class')}): {c.get('target_url')}")


def github_outputs(
    body: dict[str, Any] | None, code: int, env: dict[str, str] | None = None
) -> None:
    """Outputs and the job summary of a GitHub Actions step (nothing elsewhere)."""
    env = dict(os.environ) if env is None else env
    body = body or {}
    output = env.get("GITHUB_OUTPUT")
    if output:
        with open(output, "a", encoding="utf-8") as f:
            f.write(f"verdict={body.get('verdict', 'error')}\n")
            f.write(f"exit-code={code}\n")
            f.write(f"dashboard-url={body.get('dashboard_url', '')}\n")
    summary = env.get("GITHUB_STEP_SUMMARY")
    markdown = body.get("markdown")
    if summary and isinstance(markdown, str) and markdown:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(markdown.rstrip() + "\n")


def gate(
    api: str,
    repo: str,
    sha: str,
    token: str | None,
    *,
    wait: bool = False,
    timeout_s: float = 3600,
    poll_s: float = 10,
    neutral: str = "neutral",
    as_json: bool = False,
    out: Callable[[str], None] = print,
    progress: TextIO | None = None,
    err: TextIO = sys.stderr,
) -> int:
    """Ask, wait, print; the exit code."""
    try:
        body, timed_out, error = poll(
            lambda: fetch(api, repo, sha, token),
            wait=wait,
            timeout_s=timeout_s,
            poll_s=poll_s,
            # as the database gate: progress while waiting only; without --wait it said
            # "(waiting for the webhook's runs)" above an answer it did not wait for
            progress=progress if wait else None,
        )
    except Refused as exc:
        print(f"kernelwatch gate: the API refused the request: {exc}", file=err)
        github_outputs(None, ERROR)
        return ERROR
    word = (body or {}).get("verdict", "error")
    finished = body is not None and not error and word not in WAITING
    code = exit_code(body, neutral) if finished and body is not None else ERROR
    if as_json:
        out(json.dumps({**(body or {}), "timed_out": timed_out, "exit_code": code}))
    elif body is not None:
        report(body, out)
    github_outputs(body, code)
    if cpu_timing_note_due([str(c.get("device_class")) for c in (body or {}).get("classes") or []]):
        print(f"kernelwatch gate: {CPU_TIMING_NOTE}", file=err)
    if error and not finished:
        why = f"no answer from {api}: {error}"
    elif timed_out:
        why = f"timed out after {timeout_s:.0f} s; the answer is still {word}"
    elif word == "pending":
        why = "not finished yet: pass --wait to block until it is"
    elif word == "none":
        why = f"no runs of {sha[:12]} in {repo} (is the repository watched, its webhook set?)"
    else:
        why = "" if code == PASS else f"{word} (exit {code})"
    if why:
        print(f"kernelwatch gate: {why}", file=err)
    return code


def cpu_timing_note_due(classes: list[str], env: dict[str, str] | None = None) -> bool:
    """Whether to say that ``KW_CPU_TIMING_GATES`` in this environment changes nothing:
    it is set (as pydantic reads a true value) and the answer has a CPU class."""
    env = dict(os.environ) if env is None else env
    value = env.get("KW_CPU_TIMING_GATES", "").strip().lower()
    return value in ("1", "true", "yes", "on", "y", "t") and "cpu" in classes


def token_from(name: str, explicit: bool, env: dict[str, str] | None = None) -> str:
    """The token in environment variable ``name`` ('' when unset and not asked for)."""
    env = dict(os.environ) if env is None else env
    token = env.get(name, "").strip()
    if not token and explicit:
        raise ValueError(f"environment variable {name} (--token-env) is empty or unset")
    return token


def check_api_url(api: str) -> list[str]:
    """What is wrong with ``--api`` (empty when nothing is)."""
    parsed = urllib.parse.urlsplit(api)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return [f"--api must be an http(s) URL such as https://kw.example.com, got {api!r}"]
    return []


def add_arguments(p: argparse.ArgumentParser, standalone: bool) -> None:
    """The options of ``gate --api`` (``standalone``: this file run as a script)."""
    if standalone:
        p.add_argument("--api", required=True, help="kernelwatch API root, https://HOST")
        p.add_argument("--repo", required=True, help="owner/name as kernelwatch watches it")
        p.add_argument("--sha", required=True, help="commit (full sha or 7+ hex digits)")
        p.add_argument("--wait", action="store_true", help="block until the answer is final")
        p.add_argument("--timeout", type=float, default=3600, help="seconds to wait at most")
        p.add_argument("--json", action="store_true", help="the API's answer as JSON")
        p.add_argument("--quiet", action="store_true", help="no progress lines while waiting")
    p.add_argument(
        "--token-env",
        metavar="NAME",
        help=f"environment variable holding the API read token (default {DEFAULT_TOKEN_ENV})",
    )
    p.add_argument(
        "--neutral",
        choices=sorted(NEUTRAL_AS),
        default="neutral",
        help="what an inconclusive answer exits with: neutral 3 (default), pass 0, fail 1",
    )
    p.add_argument(
        "--poll", type=float, default=10.0, help="seconds between questions while waiting"
    )


def run(args: argparse.Namespace, err: TextIO = sys.stderr) -> int:
    """``gate --api``: from parsed arguments."""
    problems = check_api_url(args.api)
    if args.timeout <= 0 or args.poll <= 0:
        problems.append("--timeout and --poll must be positive seconds")
    sha = args.sha.lower()
    if not is_sha(sha):
        problems.append("--sha must be 7 to 40 hex digits")
    try:
        token = token_from(args.token_env or DEFAULT_TOKEN_ENV, bool(args.token_env))
    except ValueError as exc:
        problems.append(str(exc))
        token = ""
    if problems:
        print(f"kernelwatch gate: {problems[0]}", file=err)
        return ERROR
    host = urllib.parse.urlsplit(args.api).hostname or ""
    if token and args.api.startswith("http://") and host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"kernelwatch gate: warning: the token goes to {host} over plain http; use https",
            file=err,
        )
    return gate(
        args.api,
        args.repo,
        sha,
        token or None,
        wait=args.wait,
        timeout_s=args.timeout,
        poll_s=args.poll,
        neutral=args.neutral,
        as_json=args.json,
        progress=None if args.json or args.quiet else err,
        err=err,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="kernelwatch-gate",
        description="The merge gate's answer for one commit, asked of kernelwatch's REST API. "
        + EXIT_HELP,
    )
    add_arguments(p, standalone=True)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
