"""``kernelwatch gate``: a merge gate for any CI, from the database or the REST API.

With the database (``KW_DATABASE_URL``): the runs of commit ``S`` in repository ``R``
(a watched GitHub name ``owner/name``, a repository name or its source), one per GPU
class, read through :mod:`kernelwatch.jobs.judging.gate_answer` and printed as the table
of :func:`kernelwatch.jobs.github.render.format_gate`. With ``--api URL --token-env
NAME``: the same answer from ``GET /api/v1/verdicts`` (:mod:`.gate_remote`, which is also
the GitHub Action's script), no database access needed.

``--wait`` waits while any run of the sha is queued or running (bisection steps aside),
so a re-run in flight is never answered with the older verdict (issue 23, item 7).

Exit codes (design.md contract, :mod:`.exit_codes`): 0 pass; 1 fail (a regression,
``less_accurate`` or broken case in any class; it wins over an error in another); 2
error, timeout, or no finished answer (unknown commit, still pending without
``--wait``); 3 neutral (inconclusive; ``--neutral pass|fail`` maps it to 0 or 1).

``KW_CPU_TIMING_GATES`` acts in the worker, when a run is judged: set in the gate's own
environment it changes no verdict, and the gate says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.jobs.cli import gate_remote
from kernelwatch.jobs.cli.exit_codes import MEANING, Exit, fail, for_answer
from kernelwatch.jobs.github.render import answer_view
from kernelwatch.jobs.judging.gate_answer import AmbiguousSha, GateAnswer, gate_answer, gate_table
from kernelwatch.jobs.judging.verdicts import CommitVerdict

if TYPE_CHECKING:
    from kernelwatch.jobs.cli.progress import RunProgress

NAME = "gate"
CPU_TIMING_NOTE = gate_remote.CPU_TIMING_NOTE


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    g = sub.add_parser(
        NAME,
        help="merge gate: exit 0 pass, 1 fail, 2 error or timeout, 3 neutral",
        description="The verdict of one commit in every GPU class, from the database, or "
        "with --api from kernelwatch's REST API (no database access). " + gate_remote.EXIT_HELP,
    )
    g.add_argument("--repo", required=True, help="owner/name, repository name or source")
    g.add_argument("--sha", required=True, help="commit (full sha or a 7+ character prefix)")
    g.add_argument(
        "--wait",
        action="store_true",
        help="block until no run of the commit is queued or running and every one is judged",
    )
    g.add_argument("--timeout", type=float, default=3600, help="seconds to wait at most")
    g.add_argument("--json", action="store_true", help="the verdict per class as JSON")
    g.add_argument("--quiet", action="store_true", help="no progress lines while waiting")
    g.add_argument(
        "--api",
        metavar="URL",
        help="ask this kernelwatch API (GET /api/v1/verdicts) instead of the database",
    )
    gate_remote.add_arguments(g, standalone=False)
    g.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if args.api:
        return gate_remote.run(args)
    if args.token_env:
        return fail(
            NAME, "--token-env goes with --api URL (without it the gate reads the database)"
        )
    from kernelwatch.jobs.cli.common import factory, settings

    if args.timeout <= 0 or args.poll <= 0:
        return fail(NAME, "--timeout and --poll must be positive seconds")
    if not gate_remote.is_sha(args.sha):
        return fail(NAME, "--sha must be 7 to 40 hex digits")
    try:
        return gate(
            factory(),
            args.repo,
            args.sha.lower(),
            wait=args.wait,
            timeout_s=args.timeout,
            poll_s=args.poll,
            dashboard_url=settings().dashboard_url,
            as_json=args.json,
            progress=None if args.json or args.quiet else sys.stderr,
            neutral=args.neutral,
            err=sys.stderr,
        )
    except AmbiguousSha as exc:
        return fail(NAME, str(exc))


def answer(
    factory: sessionmaker[Session], repo: str, sha: str, tracker: RunProgress | None = None
) -> GateAnswer:
    with factory() as session:
        found = gate_answer(session, repo, sha)
        if tracker is not None:
            tracker.update(list(found.runs))
        return found


def _nothing_yet(factory: sessionmaker[Session], repo: str, sha: str) -> str:
    """``no runs of abc123 in o/lib yet``, and whether ``repo`` is known here at all."""
    from kernelwatch.jobs.judging.verdicts import repository_ids

    with factory() as session:
        known = bool(repository_ids(session, repo))
    said = f"no runs of {sha[:12]} in {repo} yet"
    return said if known else f"{said} (no repository of that name is known here: a typo?)"


def current(
    factory: sessionmaker[Session], repo: str, sha: str, tracker: RunProgress | None = None
) -> CommitVerdict:
    """The commit's verdict as its runs say now (in-flight runs aside)."""
    return answer(factory, repo, sha, tracker).verdict


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
    neutral: str = "neutral",
    err: TextIO | None = None,
) -> int:
    """Print the answer for ``repo@sha`` and return the exit code.

    ``progress``: where ``--wait`` reports the runs it waits for (``jobs/cli/progress.py``);
    ``err``: where a non-zero exit says why; ``neutral``: what an inconclusive answer exits
    with (``neutral`` 3, ``pass`` 0, ``fail`` 1).
    """
    from kernelwatch.jobs.cli.progress import RunProgress

    tracker = RunProgress(progress if wait else None, f"runs of {sha[:12]}")
    deadline = time.monotonic() + timeout_s
    found = answer(factory, repo, sha, tracker)
    if wait and found.overall == "none" and progress is not None:
        # a typo in --repo waited silently for the whole timeout (an hour by default)
        print(f"kernelwatch gate: {_nothing_yet(factory, repo, sha)}; waiting up to "
              f"{timeout_s:.0f} s", file=progress, flush=True)  # fmt: skip
    while wait and found.overall in ("pending", "none") and time.monotonic() < deadline:
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
        found = answer(factory, repo, sha, tracker)
    tracker.close()
    verdict, overall = found.verdict, found.overall
    timed_out = wait and overall in ("pending", "none")
    code = for_answer(overall)
    why = MEANING[code]
    if code == Exit.NEUTRAL and neutral != "neutral":
        code = Exit(gate_remote.NEUTRAL_AS[neutral])
        why = f"{MEANING[Exit.NEUTRAL]} (--neutral {neutral})"
    if as_json:  # the API's shape (``render.answer_view``), with this gate's code
        view = answer_view(found, dashboard_url)
        out(json.dumps({**view, "timed_out": timed_out, "exit_code": int(code)}, default=str))
    else:
        out(gate_table(found, dashboard_url))
        if timed_out:
            out(f"timed out after {timeout_s:.0f} s waiting for the runs of {sha[:12]}")
        elif overall == "pending":
            out("not finished yet: pass --wait to block until it is")
        elif overall == "none":
            out(_nothing_yet(factory, repo, sha))
    if err is not None and gate_remote.cpu_timing_note_due(
        [c.device_class for c in verdict.classes]
    ):
        print(f"kernelwatch gate: {CPU_TIMING_NOTE}", file=err)
    if err is not None and code != Exit.PASS:
        print(f"kernelwatch gate: {Exit(code).name.lower()}: {why}", file=err)
    return code


__all__ = ["CPU_TIMING_NOTE", "NAME", "add_parser", "answer", "current", "gate", "handle"]
