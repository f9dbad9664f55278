"""``kernelwatch gate --repo R --sha S [--wait] [--timeout S]``: a merge gate for any CI.

Reads the database (no GitHub needed): the runs of commit ``S`` in repository ``R``
(a watched GitHub name ``owner/name``, a repository name or its source), one per GPU
class, and prints the table of :func:`kernelwatch.jobs.github.render.format_gate`.

Exit codes (design.md contract): 0 pass; 1 a regression or a broken case in any
class; 2 error, timeout, or no finished answer (unknown commit, still pending without
``--wait``). A definite regression wins over an error in another class.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict

from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.jobs.github.render import format_gate
from kernelwatch.jobs.judging.verdicts import (
    CommitVerdict,
    commit_verdict,
    repository_ids,
    runs_of_commit,
)

EXIT = {"pass": 0, "fail": 1, "error": 2, "pending": 2, "none": 2}


def current(factory: sessionmaker[Session], repo: str, sha: str) -> CommitVerdict:
    with factory() as session:
        ids = repository_ids(session, repo)
        runs = runs_of_commit(session, ids, sha) if ids else []
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
) -> int:
    """Print the verdict of ``repo@sha`` and return the exit code."""
    deadline = time.monotonic() + timeout_s
    verdict = current(factory, repo, sha)
    while wait and verdict.overall in ("pending", "none") and time.monotonic() < deadline:
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
        verdict = current(factory, repo, sha)
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
    return EXIT[overall]


__all__ = ["EXIT", "current", "gate"]
