"""What a merge gate answers for one commit: its verdict, or "pending" while runs of it move.

``kernelwatch gate`` (database) and ``GET /api/v1/verdicts`` (and through it
``gate --api`` and the GitHub Action) read this one answer, so they cannot disagree.

The verdict itself is :func:`kernelwatch.jobs.judging.verdicts.commit_verdict` over
:func:`~kernelwatch.jobs.judging.verdicts.runs_of_commit`. On top of it, a commit with a
run still ``queued`` or ``running`` is ``pending`` whatever its older runs said: a newer
run of the same sha may add or refresh cases, so ``gate --wait`` returning the older
verdict while it is queued was a stale answer (issue 23, item 7). Bisection steps are
the exception: they never change a commit's gate, so nobody waits for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Commit, Run
from kernelwatch.jobs.judging.verdicts import (
    AmbiguousSha,
    CommitVerdict,
    commit_verdict,
    full_sha,
    repository_ids,
    runs_of_commit,
)

IN_FLIGHT = ("queued", "running")


@dataclass(frozen=True)
class GateAnswer:
    verdict: CommitVerdict
    # runs of the sha still queued or running (bisection steps aside), oldest first
    in_flight: tuple[int, ...]
    # every run the answer looked at (the verdict's and the in-flight ones), for progress
    runs: tuple[Run, ...]

    @property
    def overall(self) -> str:
        """The verdict's word (``pass | fail | neutral | error | none``), or ``pending``."""
        return "pending" if self.in_flight else self.verdict.overall


def gate_answer(session: Session, repo: str, sha: str) -> GateAnswer:
    """The answer for ``repo@sha`` (``sha``: full, or a prefix of 7+ hex digits that
    names one commit: ``AmbiguousSha`` where it names several)."""
    ids = repository_ids(session, repo)
    sha = full_sha(session, ids, sha) if ids else sha
    runs = runs_of_commit(session, ids, sha) if ids else []
    moving = in_flight(session, ids, sha) if ids else []
    seen = {r.id: r for r in [*runs, *moving]}
    first = seen[min(seen)] if seen else None
    full = first.commit.sha if first is not None and first.commit is not None else sha
    return GateAnswer(
        verdict=commit_verdict(session, repo, full, runs),
        in_flight=tuple(r.id for r in moving),
        runs=tuple(seen[k] for k in sorted(seen)),
    )


def in_flight(session: Session, repository_ids: list[int], sha: str) -> list[Run]:
    """Runs of ``sha`` still queued or running that can change its answer."""
    q = (
        select(Run)
        .join(Commit, Run.commit_id == Commit.id)
        .where(Run.repository_id.in_(repository_ids), Run.status.in_(IN_FLIGHT))
    )
    q = q.where(Commit.sha == sha) if len(sha) >= 40 else q.where(Commit.sha.startswith(sha))
    return [r for r in session.scalars(q.order_by(Run.id)) if r.options.bisection_id is None]


def gate_table(answer: GateAnswer, dashboard_url: str = "") -> str:
    """The table ``kernelwatch gate`` prints; while runs move, it says the answer is not final."""
    from kernelwatch.jobs.github.render import format_gate

    text = format_gate(answer.verdict, dashboard_url)
    if not answer.in_flight:
        return text
    head, _, rest = text.partition("\n")
    ids = ", ".join(str(i) for i in answer.in_flight)
    runs = "run" if len(answer.in_flight) == 1 else "runs"
    return (
        f"{head.rsplit(':', 1)[0]}: PENDING ({runs} {ids} of this commit still queued or "
        f"running; below: the answer so far)\n{rest}"
    )


__all__ = ["IN_FLIGHT", "AmbiguousSha", "GateAnswer", "gate_answer", "gate_table", "in_flight"]
