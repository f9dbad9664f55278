"""``kernelwatch show RUN``: one run with its status, verdict, worker and per-case results.

Exits with the run's code (:mod:`.exit_codes`): 0 pass, 1 fail, 2 error or unknown run
or not judged yet, 3 neutral, so a script can ask about one run as it asks the gate.
"""

from __future__ import annotations

import argparse
import json

from kernelwatch.jobs.cli.exit_codes import Exit, fail, for_run

NAME = "show"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        NAME,
        help="one run with its per-case results",
        description="One run: status, verdict, worker, per-case results. Exit code: "
        "0 pass, 1 fail, 2 error or not judged yet, 3 neutral.",
    )
    s.add_argument("run", type=int, help="run id (as `kernelwatch run` printed it)")
    s.add_argument("--json", action="store_true", help="the run summary as JSON")
    s.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.db.models import FINAL_STATES, Run
    from kernelwatch.jobs.cli.common import factory
    from kernelwatch.jobs.judging.report import format_run, run_summary

    with factory()() as session:
        run = session.get(Run, args.run)
        if run is None:
            return fail(NAME, f"no run {args.run}")
        summary = run_summary(session, run)
        status, verdict = run.status, run.verdict
    print(json.dumps(summary, indent=2, default=str) if args.json else format_run(summary))
    if status not in FINAL_STATES or verdict is None and status == "succeeded":
        return fail(NAME, f"run {args.run} is {status}, not judged yet")
    code = for_run(status, verdict)
    if code != Exit.PASS:
        return fail(NAME, f"run {args.run} {status}, verdict {verdict or '-'}", code)
    return code


__all__ = ["NAME", "add_parser", "handle"]
