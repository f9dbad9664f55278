"""Verdicts out to GitHub: one commit status per GPU class, one PR comment kept up to date.

Where: every run planned for a GitHub event has a
:class:`~kernelwatch.db.github.RunLink`. :meth:`Reporter.reconcile` looks at the links
not yet reported final, computes each commit's state per GPU class
(:mod:`kernelwatch.jobs.judging.verdicts`) and sends what changed:

- a commit status ``kernelwatch/<class>``: pending → success | failure | error, with a
  description and a ``target_url`` to the dashboard view (run, or compare with the
  baseline run);
- for the head commit of an open pull request, one comment with the table of cases
  that moved, created once and then edited in place (its id is stored; if it was
  deleted, a new one is made).

The API process runs ``reconcile`` in a loop (:class:`ReporterThread`, every 2 s by
default), so GPU workers, which execute code from pull requests, never need the GitHub
token, and a finished run is reported within one pass of the loop.
Statuses already sent with the same state and description are not sent again.
GitHub failures are logged and retried on the next pass; they never fail a run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.github import CommitStatus, PullRequest, RunLink
from kernelwatch.db.models import Run
from kernelwatch.jobs.github import bisect_comment
from kernelwatch.jobs.github.client import GitHubClient, GitHubError, shorten
from kernelwatch.jobs.github.render import COMMENT_MARKER, render_comment
from kernelwatch.jobs.judging.verdicts import (
    ClassVerdict,
    CommitVerdict,
    commit_verdict,
    repository_ids,
    runs_of_commit,
)
from kernelwatch.kernels.verdict import CaseVerdict, excluded_effect

log = logging.getLogger(__name__)

CONTEXT_PREFIX = "kernelwatch"
# commit status state -> (check run status, conclusion)
CHECK_STATES: dict[str, tuple[str, str | None]] = {
    "pending": ("in_progress", None),
    "success": ("completed", "success"),
    "failure": ("completed", "failure"),
    "neutral": ("completed", "neutral"),
    "error": ("completed", "failure"),
}
# A commit status has no neutral state: a neutral class is sent as success, and its
# status text begins with the state it stands for ("neutral: 2 inconclusive, ...").
STATUS_STATES = {"neutral": "success"}


def context_for(device_class: str) -> str:
    return f"{CONTEXT_PREFIX}/{device_class}"


def status_text(cv: ClassVerdict) -> str:
    """The status description (and check-run title) of one class.

    The class's own description, and for every case that stayed inconclusive after
    its re-measures, which case and what its interval did exclude: a ``neutral``
    status must say what is still open and how large a change could hide in it
    ("neutral: 1 inconclusive, 9 unchanged. Inconclusive: gemm m=64 (a change
    beyond ±3.6 % is excluded)"). Whether inconclusive is neutral, fail or pass is
    the run's verdict (``KW_INCONCLUSIVE_POLICY``, applied by analysis); under
    ``pass`` or ``fail`` the open cases are named all the same.
    """
    description = cv.description
    if cv.state in STATUS_STATES:  # the only place a state is not said beside the text
        description = f"{cv.state}: {description}"
    if cv.telemetry_off:  # the comment says why; the status that it is so
        description += f" (GPU telemetry off: {cv.telemetry_off} cases)"
    open_cases = [m for m in cv.moved if m.verdict == CaseVerdict.INCONCLUSIVE]
    if not open_cases:
        return description
    parts = []
    for m in open_cases:
        name = shorten(f"{m.kernel} {m.label}".strip(), 48)
        effect = (
            excluded_effect(m.ci_low, m.ci_high)
            if m.ci_low is not None and m.ci_high is not None
            else None
        )
        parts.append(
            f"{name} (a change beyond ±{effect * 100:.1f} % is excluded)"
            if effect is not None
            else f"{name} (no interval)"
        )
    return f"{description}. Inconclusive: {'; '.join(parts)}"


def _last_status(session: Session, full_name: str, sha: str, context: str) -> CommitStatus | None:
    """The status last sent for this commit and context (what GitHub shows now)."""
    return session.scalars(
        select(CommitStatus).where(
            CommitStatus.full_name == full_name,
            CommitStatus.sha == sha,
            CommitStatus.context == context,
        )
    ).first()


class Reporter:
    """Sends commit statuses and PR comments; idempotent, safe to call repeatedly."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        settings: Settings,
        github: GitHubClient | None,
        *,
        paired: bool = False,
    ) -> None:
        self.factory = factory
        self.settings = settings
        self.github = github
        self.paired = paired
        self._lock = threading.RLock()

    def url(self, path: str) -> str:
        return self.settings.dashboard_url.rstrip("/") + path

    # ------------------------------------------------------------------ statuses

    def send_status(
        self,
        full_name: str,
        sha: str,
        device_class: str,
        state: str,
        description: str,
        target_url: str | None = None,
        summary: str = "",
    ) -> bool:
        """Send a status (or check run) unless the same one was sent last; True if sent.

        ``summary``: the markdown a check run shows (the verdict table); statuses have
        only the description.
        """
        context = context_for(device_class)
        description = shorten(description, 140)
        with self.factory() as session, session.begin():
            row = _last_status(session, full_name, sha, context)
            if (
                row is not None
                and row.state == state
                and row.description == description
                and row.target_url == (target_url or "")
            ):
                return False
        if self.github is not None and self.settings.github_checks:
            # A new check run of the same name supersedes the older one in GitHub's UI,
            # so each state change is one POST and nothing needs the previous run's id.
            status, conclusion = CHECK_STATES[state]
            self.github.create_check_run(
                full_name,
                sha,
                context,
                status,
                conclusion,
                title=description,
                summary=summary or description,
                details_url=target_url,
            )
        elif self.github is not None:
            self.github.create_status(
                full_name, sha, STATUS_STATES.get(state, state), context, description, target_url
            )
        with self.factory() as session, session.begin():
            row = _last_status(session, full_name, sha, context)
            if row is None:
                row = CommitStatus(full_name=full_name, sha=sha, context=context, state=state)
                session.add(row)
            row.state = state
            row.description = description
            row.target_url = target_url or ""
        return True

    def send_statuses(
        self,
        full_name: str,
        sha: str,
        device_classes: Sequence[str],
        state: str,
        description: str,
        target_url: str | None = None,
    ) -> None:
        """The same status for several classes; GitHub errors are logged, not raised."""
        for dc in device_classes:
            try:
                self.send_status(full_name, sha, dc, state, description, target_url)
            except GitHubError as exc:
                log.warning("status for %s@%s (%s) not sent: %s", full_name, sha[:12], dc, exc)

    # ------------------------------------------------------------------ reconcile

    def reconcile(self) -> int:
        """Report every commit with links not yet final; returns how many were looked at."""
        with self._lock:
            with self.factory() as session:
                pending = session.execute(
                    select(RunLink.full_name, RunLink.sha)
                    .where(RunLink.done.is_(False), RunLink.role == "candidate")
                    .distinct()
                ).all()
            for full_name, sha in pending:
                try:
                    self.report_commit(full_name, sha)
                except GitHubError as exc:
                    log.warning("reporting %s@%s failed, will retry: %s", full_name, sha[:12], exc)
            # bisections' culprits: a commit comment each, once (jobs/github/bisect_comment.py)
            bisect_comment.send_pending(self.factory, self.github, self.settings.dashboard_url)
            return len(pending)

    def report_commit(self, full_name: str, sha: str) -> CommitVerdict:
        """Send the statuses of one commit (and its PR comment); mark its links done if final.

        Serialised per reporter, so an older state computed by one caller can never be
        sent after a newer one computed by another.
        """
        with self._lock:
            return self._report_commit(full_name, sha)

    def _report_commit(self, full_name: str, sha: str) -> CommitVerdict:
        with self.factory() as session:
            links = session.scalars(
                select(RunLink).where(
                    RunLink.full_name == full_name,
                    RunLink.sha == sha,
                    RunLink.role == "candidate",
                )
            ).all()
            # the commit's one composed answer (every run of it), plus its linked runs (a
            # cancelled one still says so)
            linked = session.scalars(select(Run).where(Run.id.in_([link.run_id for link in links])))
            runs = {r.id: r for r in linked}
            ids = repository_ids(session, full_name)
            runs.update({r.id: r for r in runs_of_commit(session, ids, sha)} if ids else {})
            verdict = commit_verdict(session, full_name, sha, runs.values())
        for cv in verdict.classes:
            summary = ""
            if self.settings.github_checks and cv.final:
                summary = render_comment(
                    CommitVerdict(full_name, sha, (cv,)),
                    dashboard_url=self.settings.dashboard_url,
                    paired=self.paired,
                )
            self.send_status(
                full_name,
                sha,
                cv.device_class,
                cv.state,
                status_text(cv),
                self.url(cv.dashboard_path),
                summary,
            )
        if verdict.classes and all(c.final for c in verdict.classes):
            with self.factory() as session, session.begin():
                for link in session.scalars(
                    select(RunLink).where(
                        RunLink.full_name == full_name, RunLink.sha == sha, RunLink.done.is_(False)
                    )
                ):
                    link.done = True
        self.update_pr_comments(full_name, sha, verdict)
        return verdict

    # ------------------------------------------------------------------ PR comment

    def update_pr_comments(self, full_name: str, sha: str, verdict: CommitVerdict) -> None:
        """Create or edit the comment of each open PR whose head is ``sha``."""
        if not any(c.final for c in verdict.classes):
            return  # nothing to say yet; statuses show progress
        with self.factory() as session:
            numbers = list(
                session.scalars(
                    select(PullRequest.number).where(
                        PullRequest.full_name == full_name,
                        PullRequest.head_sha == sha,
                        PullRequest.state == "open",
                    )
                )
            )
        body = render_comment(
            verdict, dashboard_url=self.settings.dashboard_url, paired=self.paired
        )
        for number in numbers:
            self._upsert_comment(full_name, number, body)

    def _upsert_comment(self, full_name: str, number: int, body: str) -> None:
        with self.factory() as session, session.begin():
            pr = session.scalars(
                select(PullRequest)
                .where(PullRequest.full_name == full_name, PullRequest.number == number)
                .with_for_update()
            ).one()
            if pr.comment_body == body:
                return
            if self.github is None:
                pr.comment_body = body
                return
            comment_id = pr.comment_id or self._find_comment(full_name, number)
            if comment_id is not None:
                try:
                    self.github.update_comment(full_name, comment_id, body)
                except GitHubError as exc:
                    if exc.status != 404:
                        raise
                    comment_id = None  # deleted by someone: write a new one
            if comment_id is None:
                comment_id = int(self.github.create_comment(full_name, number, body)["id"])
            pr.comment_id = comment_id
            pr.comment_body = body

    def _find_comment(self, full_name: str, number: int) -> int | None:
        """Our comment if the database forgot its id (first page of comments only)."""
        assert self.github is not None
        for comment in self.github.list_comments(full_name, number):
            if COMMENT_MARKER in str(comment.get("body", "")):
                return int(comment["id"])
        return None


class ReporterThread(threading.Thread):
    """Calls ``reporter.reconcile()`` every ``interval_s`` until stopped."""

    def __init__(self, reporter: Reporter, interval_s: float = 2.0) -> None:
        super().__init__(name="kernelwatch-reporter", daemon=True)
        self.reporter = reporter
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.reporter.reconcile()
            except Exception:  # the loop must survive a database hiccup
                log.exception("reporter pass failed")
            self._stop_event.wait(self.interval_s)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop_event.set()
        self.join(timeout)


__all__ = ["Reporter", "ReporterThread", "context_for", "status_text"]
