"""``kernelwatch gate --repo R --sha S [--wait] [--timeout S]``: a merge gate for any CI.

Reads the database (no GitHub needed): the runs of commit ``S`` in repository ``R``
(a watched GitHub name ``owner/name``, a repository name or its source), one per GPU
class, and prints the table of :func:`kernelwatch.jobs.github.render.format_gate`.

Exit codes (design.md contract, :mod:`.exit_codes`): 0 pass; 1 a regression or a
broken case in any class; 2 error, timeout, or no finished answer (unknown commit,
still pending without ``--wait``); 3 neutral. A definite regression wins over an error
in another class.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, TextIO

from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.jobs.cli.exit_codes import MEANING, Exit, fail, for_answer
from kernelwatch.jobs.github.render import format_gate
from kernelwatch.jobs.judging.verdicts import (
    CommitVerdict,
    commit_verdict,
    repository_ids,
    runs_of_commit,
)

if TYPE_CHECKING:
    from kernelwatch.jobs.cli.progress import RunProgress

NAME = "gate"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    g = sub.add_parser(
        NAME,
        help="merge gate: exit 0 pass, 1 fail, 2 error or timeout, 3 neutral",
        description="The verdict of one commit in every GPU class, from the database. "
        "Exit 0 pass, 1 fail (regression, less_accurate, broken), 2 error or timeout, "
        "3 neutral (inconclusive).",
    )
    g.add_argument("--repo", required=True, help="owner/name, repository name or source")
    g.add_argument("--sha", required=True, help="commit (full sha or a 7+ character prefix)")
    g.add_argument("--wait", action="store_true", help="block until every run is judged")
    g.add_argument("--timeout", type=float, default=3600, help="seconds to wait at most")
    g.add_argument("--poll", type=float, default=5.0, help=argparse.SUPPRESS)
    g.add_argument("--json", action="store_true", help="the verdict per class as JSON")
    g.add_argument("--quiet", action="store_true", help="no progress lines while waiting")
    g.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.cli.common import factory, settings

    if args.timeout <= 0:
        return fail(NAME, "--timeout must be positive")
    if not all(c in "0123456789abcdef" for c in args.sha.lower()) or not 7 <= len(args.sha) <= 40:
        return fail(NAME, "--sha must be 7 to 40 hex digits")
    code = gate(
        factory(),
        args.repo,
        args.sha.lower(),
        wait=args.wait,
        timeout_s=args.timeout,
        poll_s=args.poll,
        dashboard_url=settings().dashboard_url,
        as_json=args.json,
        progress=None if args.json or args.quiet else sys.stderr,
    )
    if code != Exit.PASS:
        code = Exit(code)
        print(f"kernelwatch gate: {code.name.lower()}: {MEANING[code]}", file=sys.stderr)
    return code


def current(
    factory: sessionmaker[Session], repo: str, sha: str, tracker: RunProgress | None = None
) -> CommitVerdict:
    with factory() as session:
        ids = repository_ids(session, repo)
        runs = runs_of_commit(session, ids, sha) if ids else []
        if tracker is not None:
            tracker.update(runs)
        full = runs[0].commit.sha if runs and runs[0].commit else sha
        return commit_verdict(session, repo, full, runs)


def gate(
    factory: sessionmaker[Session],
    repo: str,
    sha: str,
    *,
    wait: bool = False,
    timeout_s: float = 3600.0,
    poll_s: float = 2.0,
    dashboard_url: str = "",
    as_json: bool = False,
    out: Callable[[str], None] = print,
    progress: TextIO | None = None,
) -> int:
    """Print the verdict of ``repo@sha`` and return the exit code.

    ``progress``: where ``--wait`` reports the runs it waits for (``jobs/cli/progress.py``).
    """
    from kernelwatch.jobs.cli.progress import RunProgress

    tracker = RunProgress(progress if wait else None, f"runs of {sha[:12]}")
    deadline = time.monotonic() + timeout_s
    verdict = current(factory, repo, sha, tracker)
    while wait and verdict.overall in ("pending", "none") and time.monotonic() < deadline:
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
        verdict = current(factory, repo, sha, tracker)
    tracker.close()
    overall = verdict.overall
    timed_out = wait and overall in ("pending", "none")
    if as_json:
        out(
            json.dumps(
                {
                    "repository": verdict.repository,
                    "sha": verdict.sha,
                    "verdict": overall,
                    "timed_out": timed_out,
                    "classes": [asdict(c) for c in verdict.classes],
                },
                default=str,
            )
        )
    else:
        out(format_gate(verdict, dashboard_url))
        if timed_out:
            out(f"timed out after {timeout_s:.0f} s waiting for the runs of {sha[:12]}")
        elif overall == "pending":
            out("not finished yet: pass --wait to block until it is")
        elif overall == "none":
            out(f"no runs of {sha[:12]} in {repo}")
    return for_answer(overall)


__all__ = ["NAME", "add_parser", "current", "gate", "handle"]
