"""GitHub events to planned runs: pushes, pull requests, fork approval, config errors.

Called by the HTTP layer after the signature was verified and the JSON parsed; knows
nothing about HTTP except the status code it suggests. For each event:

- ``ping``: pong.
- ``push`` to a watched branch (fnmatch patterns): the head commit, or every pushed
  commit (``push_mode = "each"``, newest ``max_commits_per_push``), each against its
  first parent. Tag pushes and branch deletions are ignored.
- ``pull_request`` opened / synchronize / reopened / ready_for_review into a watched
  branch: the head commit against the merge-base of head and base, computed in the
  mirror after fetching (GitHub serves fork heads at ``refs/pull/N/head``). Queued
  runs of an older head of the same PR are cancelled.
- A PR whose head repository is not the base repository (a fork) runs only once a
  user with write access adds the approval label (checked through the permission
  API, or the user is on the repository's allow-list); approval binds to that head
  commit, and a new push to the fork removes the label and waits again. Meanwhile a
  ``pending`` status says so. The approval itself is the signed ``labeled`` delivery,
  kept and re-verified (:mod:`kernelwatch.jobs.github.approval`), never a database
  field that code under test could write.
- Only ``opened``, ``synchronize`` and ``reopened`` move a PR's recorded head, and
  only forward in ``pull_request.updated_at``: a late delivery of an older event
  (a ``labeled`` for the previous head, say) neither moves it back nor cancels the
  current head's runs.
- ``.kernelwatch.toml`` is read once per planned commit by the planner
  (``jobs/planning/resolve.py``), which stores each run's resolved configuration; here
  the head's file (and a pull request's merge-base's) picks the ``[gpus]`` classes. An
  invalid file at the head becomes an ``error`` status whose message names the key and
  what is allowed, and nothing is planned (a bad file at another pushed commit makes
  that commit's run an ``error`` with the message). A pull request is judged by its
  merge-base's file: its own may only tighten thresholds, suites and kernels; what it
  tries to loosen is ignored and said in the PR comment.

Payload fields are data, never code: shas must be 40 hex digits, repository names
match GitHub's alphabet, branch names are only compared with patterns, and every
string or integer that is stored or handed to git is checked against its column
first (:mod:`kernelwatch.jobs.github.fields`: NUL, lone surrogates, length, 2^31),
so a signed payload gets a 4xx, never a 500. No shell is used anywhere; git gets
argument lists (:mod:`kernelwatch.jobs.library.mirror`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from sqlalchemy import select
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.github import PullRequest, RunLink, WebhookDelivery
from kernelwatch.db.models import Run
from kernelwatch.db.outbox import PendingSend
from kernelwatch.db.run_options import GithubOrigin, RunOptions
from kernelwatch.db.store import get_or_create_repository, public_source
from kernelwatch.jobs.errors import (
    CommitNotFound,
    ConfigError,
    InfrastructureError,
    KernelwatchError,
    SourceError,
)
from kernelwatch.jobs.github import approval, fields
from kernelwatch.jobs.github.client import GitHubError, check_full_name
from kernelwatch.jobs.github.fields import PayloadError
from kernelwatch.jobs.github.reporter import Reporter
from kernelwatch.jobs.github.watched import Secrets, WatchedRepo
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.jobs.library.served import table as served_table
from kernelwatch.jobs.planning import cancel
from kernelwatch.jobs.planning.plan import BrokerUnavailable, PlannedRun, RunRequest, plan
from kernelwatch.jobs.planning.resolve import Configs

log = logging.getLogger(__name__)

ZERO_SHA = "0" * 40
PR_RUN_ACTIONS = ("opened", "synchronize", "reopened", "ready_for_review")
HEAD_MOVING_ACTIONS = ("opened", "synchronize", "reopened")
WRITE_PERMISSIONS = ("admin", "maintain", "write")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$")


@dataclass(frozen=True)
class Signed:
    """The raw body of a delivery and the signature header it was verified with."""

    body: bytes
    signature: str


@dataclass
class Outcome:
    """What became of a delivery: an HTTP status to answer with and a record."""

    http_status: int
    outcome: str  # pong | planned | ignored | duplicate | awaiting_approval | config_error | error
    detail: str = ""
    run_ids: list[int] = field(default_factory=list)

    def body(self) -> dict[str, Any]:
        return {"status": self.outcome, "detail": self.detail, "runs": self.run_ids}


def repository_of(payload: Mapping[str, Any]) -> str | None:
    """``repository.full_name`` of a payload, if it names one (org-level pings do not)."""
    repo = payload.get("repository")
    if not isinstance(repo, dict):
        return None
    name = repo.get("full_name")
    return name if isinstance(name, str) else None


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            raise PayloadError(f"payload lacks {'.'.join(path)}")
        data = data[key]
    return data


def _sha(data: Any, *path: str) -> str:
    value = _get(data, *path)
    if not isinstance(value, str) or not _SHA.match(value):
        raise PayloadError(f"{'.'.join(path)} is not a commit sha")
    return value


def _str(data: Any, *path: str, max_len: int = 255) -> str:
    return fields.text(_get(data, *path), ".".join(path), max_len)


def _older(event_at: datetime | None, known_at: datetime | None) -> bool:
    """Whether an event is older than the one that last moved the head (unknown: no)."""
    if event_at is None or known_at is None:
        return False
    known = known_at if known_at.tzinfo else known_at.replace(tzinfo=UTC)
    return event_at < known


def _login(data: Any, *path: str) -> str:
    value = _str(data, *path)
    if not _LOGIN.match(value):
        raise PayloadError(f"{'.'.join(path)} is not a GitHub login")
    return value


class WebhookHandler:
    """Turns verified, parsed deliveries into runs; one instance per API process."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        settings: Settings,
        celery_app: Celery | None,
        repos: Mapping[str, WatchedRepo],
        reporter: Reporter,
    ) -> None:
        self.factory = factory
        self.settings = settings
        self.celery = celery_app
        self.repos = dict(repos)
        self.reporter = reporter
        self.secrets = Secrets.of(self.repos, settings.webhook_secret)

    # ------------------------------------------------------------------ entry

    def handle(
        self,
        event: str,
        delivery: str,
        payload: dict[str, Any],
        signed: Signed | None = None,
    ) -> Outcome:
        """``signed``: the raw delivery, kept when it approves a fork (None: cannot approve)."""
        full_name = repository_of(payload)
        if full_name is not None:
            try:
                check_full_name(full_name)
            except GitHubError:
                return Outcome(400, "invalid", "repository.full_name is not a repository name")
        action = payload.get("action", "")
        try:
            action = fields.text(action, "action", 64) if action is not None else ""
        except PayloadError as exc:
            return Outcome(400, "invalid", str(exc))
        if not self.claim(delivery, event, action, full_name or ""):
            return Outcome(200, "duplicate", f"delivery {delivery} was already received")
        try:
            outcome = self._dispatch(event, delivery, action, full_name, payload, signed)
        except PayloadError as exc:
            outcome = Outcome(400, "invalid", str(exc))
        except (SourceError, InfrastructureError) as exc:
            # Our side (fetch, broker): let GitHub's redelivery try again.
            self.release(delivery)
            return Outcome(503, "error", self._public(str(exc)))
        except DataError as exc:
            # A value fields.py should have refused: still the payload's fault, not ours.
            log.warning("delivery %s: database refused a payload value: %s", delivery, exc)
            self.release(delivery)
            return Outcome(422, "invalid", "a payload value does not fit the database")
        except IntegrityError as exc:
            # A concurrent delivery wrote the same row first (where no retry covers it):
            # released, so a redelivery is handled, not answered ``duplicate``
            log.warning("delivery %s: a concurrent delivery's row: %s", delivery, exc)
            self.release(delivery)
            return Outcome(503, "error", "a concurrent delivery changed the same records; "
                           "redeliver this one")  # fmt: skip
        except Exception:
            self.release(delivery)
            raise
        self.record(delivery, outcome)
        return outcome

    def claim(self, delivery: str, event: str, action: str, full_name: str) -> bool:
        """Record the delivery id; False if it was recorded before (a replay)."""
        try:
            with self.factory() as session, session.begin():
                session.add(
                    WebhookDelivery(
                        delivery_id=delivery, event=event[:64], action=action, full_name=full_name
                    )
                )
        except IntegrityError:
            return False
        return True

    def release(self, delivery: str) -> None:
        with self.factory() as session, session.begin():
            row = session.scalars(
                select(WebhookDelivery).where(WebhookDelivery.delivery_id == delivery)
            ).first()
            if row is not None:
                session.delete(row)

    def record(self, delivery: str, outcome: Outcome) -> None:
        with self.factory() as session, session.begin():
            row = session.scalars(
                select(WebhookDelivery).where(WebhookDelivery.delivery_id == delivery)
            ).one()
            row.outcome = outcome.outcome
            row.detail = outcome.detail[:2000]
            row.run_ids = list(outcome.run_ids)

    def _dispatch(
        self,
        event: str,
        delivery: str,
        action: str,
        full_name: str | None,
        payload: dict[str, Any],
        signed: Signed | None,
    ) -> Outcome:
        if event == "ping":
            return Outcome(200, "pong", "pong")
        if event not in ("push", "pull_request"):
            return Outcome(202, "ignored", f"event {event[:64]!r} is not handled")
        if full_name is None:
            raise PayloadError("payload lacks repository.full_name")
        repo = self.repos.get(full_name)
        if repo is None:
            return Outcome(202, "ignored", f"repository {full_name} is not watched")
        if event == "push":
            return self._push(repo, payload)
        return self._pull_request(repo, delivery, action, payload, signed)

    # ------------------------------------------------------------------ push

    def _push(self, repo: WatchedRepo, payload: dict[str, Any]) -> Outcome:
        ref = _str(payload, "ref")
        if ref.startswith("refs/tags/"):
            return Outcome(202, "ignored", "tag push")
        if not ref.startswith("refs/heads/"):
            return Outcome(202, "ignored", "not a branch")
        if payload.get("deleted") is True:
            return Outcome(202, "ignored", "branch deletion")
        after = _sha(payload, "after")
        if after == ZERO_SHA:
            return Outcome(202, "ignored", "branch deletion")
        branch = ref.removeprefix("refs/heads/")
        if not repo.watches_branch(branch):
            return Outcome(202, "ignored", "branch is not watched")
        before = payload.get("before")
        mirror = self._mirror(repo)
        targets = [after]
        if (
            repo.push_mode == "each"
            and isinstance(before, str)
            and _SHA.match(before)
            and before != ZERO_SHA
            and mirror.has_commit(before)
        ):
            pushed = mirror.range(f"{before}..{after}")
            targets = pushed[-repo.max_commits_per_push :] or [after]
        with self.factory() as session:
            measured = set(
                session.scalars(
                    select(RunLink.sha).where(
                        RunLink.full_name == repo.full_name,
                        RunLink.sha.in_(targets),
                        RunLink.role == "candidate",
                        RunLink.event == "push",
                        # planned while the broker was down: a redelivery sends it
                        RunLink.run_id.not_in(select(PendingSend.run_id)),
                    )
                )
            )
        targets = [t for t in targets if t not in measured]
        if not targets:
            return Outcome(202, "ignored", "every pushed commit is already measured")
        return self._plan(repo, mirror, targets, after, None, "push", None)

    # ------------------------------------------------------------------ pull request

    def _pull_request(
        self,
        repo: WatchedRepo,
        delivery: str,
        action: str,
        payload: dict[str, Any],
        signed: Signed | None,
    ) -> Outcome:
        pr = _get(payload, "pull_request")
        number = fields.int32(_get(payload, "number"), "number")
        head_sha = _sha(pr, "head", "sha")
        base_sha = _sha(pr, "base", "sha")
        base_ref = _str(pr, "base", "ref")
        head_ref = _str(pr, "head", "ref")
        head_repo_data = _get(pr, "head").get("repo")
        head_repo = ""
        if isinstance(head_repo_data, dict) and isinstance(head_repo_data.get("full_name"), str):
            head_repo = _str(head_repo_data, "full_name")
        fork = head_repo != repo.full_name  # a deleted fork (repo null) is a fork too
        author = _login(pr, "user", "login")
        event_at = fields.timestamp(pr.get("updated_at"))

        def upsert() -> tuple[bool, bool, str]:
            """The pull request's row brought up to this event: (fresh, current, head)."""
            with self.factory() as session, session.begin():
                row = session.scalars(
                    select(PullRequest).where(
                        PullRequest.full_name == repo.full_name, PullRequest.number == number
                    )
                ).first()
                first_sight = row is None  # whatever the action: this is all we know
                if row is None:
                    row = PullRequest(full_name=repo.full_name, number=number, head_sha=head_sha)
                    session.add(row)
                fresh = first_sight or not _older(event_at, row.head_event_at)
                if fresh and (action in HEAD_MOVING_ACTIONS or first_sight):
                    row.head_sha, row.head_ref, row.head_repo = head_sha, head_ref, head_repo
                    row.base_ref, row.base_sha = base_ref, base_sha
                    row.fork, row.author = fork, author
                    row.head_event_at = event_at or row.head_event_at
                if fresh and action in ("closed", *HEAD_MOVING_ACTIONS):
                    row.state = "closed" if action == "closed" else "open"
                return fresh, row.head_sha == head_sha, row.head_sha

        try:
            fresh, current, known_head = upsert()
        except IntegrityError:
            # GitHub sends a new pull request's ``opened`` and ``labeled`` at once: the
            # other delivery inserted the row first, and this one now finds it
            fresh, current, known_head = upsert()
        if action == "closed":
            if not fresh:
                return Outcome(202, "ignored", "an older close of a pull request since reopened")
            self._cancel_superseded(repo, number, keep=None)
            return Outcome(202, "ignored", "pull request closed")
        if not repo.watches_branch(base_ref):
            return Outcome(202, "ignored", "base branch is not watched")
        if action == "labeled":
            return self._labeled(repo, delivery, number, head_sha, current, fork, payload, signed)
        if action not in PR_RUN_ACTIONS:
            return Outcome(202, "ignored", f"pull_request action {action!r} is not handled")
        if not current:
            return Outcome(
                202,
                "ignored",
                f"an older event: the head is now {known_head[:12]}, not {head_sha[:12]}",
            )
        if pr.get("draft") is True and repo.skip_drafts:
            return Outcome(202, "ignored", "draft pull request")
        if fork and author not in repo.allow_users and not self._approved(repo, number, head_sha):
            return self._await_approval(repo, number, head_sha, action, pr)
        return self._plan_pull_request(repo, number, head_sha, base_sha, base_ref)

    def _approved(self, repo: WatchedRepo, number: int, sha: str) -> bool:
        """Whether a signed, still-valid ``labeled`` delivery approved ``sha`` of this PR."""
        with self.factory() as session:
            who = approval.approver(
                session,
                full_name=repo.full_name,
                number=number,
                sha=sha,
                label=repo.approval_label,
                secrets=self.secrets.allowed_for(repo.full_name),
                may_approve=lambda user: self._may_approve(repo, user),
            )
        return who is not None

    def _labeled(
        self,
        repo: WatchedRepo,
        delivery: str,
        number: int,
        head_sha: str,
        current: bool,
        fork: bool,
        payload: dict[str, Any],
        signed: Signed | None,
    ) -> Outcome:
        label = _str(payload, "label", "name")
        if label != repo.approval_label:
            return Outcome(202, "ignored", "label is not the approval label")
        if not fork:
            return Outcome(202, "ignored", "approval is only needed for pull requests from forks")
        if self._approved(repo, number, head_sha):
            return Outcome(202, "ignored", "this head commit is already approved")
        sender = _login(payload, "sender", "login")
        if not self._may_approve(repo, sender):
            return Outcome(202, "ignored", f"label added by {sender}, who lacks write access")
        if signed is None:
            return Outcome(202, "ignored", "an approval needs the signed delivery to keep")
        with self.factory() as session, session.begin():
            kept = approval.record(
                session,
                delivery=delivery,
                full_name=repo.full_name,
                number=number,
                sha=head_sha,
                sender=sender,
                body=signed.body,
                signature=signed.signature,
            )
            row = session.scalars(
                select(PullRequest).where(
                    PullRequest.full_name == repo.full_name, PullRequest.number == number
                )
            ).one()
            if current:
                row.approved_sha, row.approved_by = head_sha, sender  # for people, never read
            base_sha, base_ref = row.base_sha, row.base_ref
        if not kept:
            return Outcome(413, "invalid", "labeled delivery too large to keep as an approval")
        if not current:
            # A late delivery for an older head: that head is approved, but it is not
            # the PR's head any more, and the current head's runs must stay.
            return Outcome(
                202, "ignored", f"label was added to {head_sha[:12]}, no longer the head"
            )
        return self._plan_pull_request(repo, number, head_sha, base_sha, base_ref)

    def _may_approve(self, repo: WatchedRepo, user: str) -> bool:
        if user in repo.allow_users:
            return True
        github = self.reporter.github
        if github is None:
            return False  # cannot check: nobody may approve through a label
        try:
            return github.permission(repo.full_name, user) in WRITE_PERMISSIONS
        except GitHubError as exc:
            log.warning("permission of %s on %s unknown: %s", user, repo.full_name, exc)
            return False

    def _await_approval(
        self, repo: WatchedRepo, number: int, head_sha: str, action: str, pr: dict[str, Any]
    ) -> Outcome:
        labels = pr.get("labels")
        names = {
            label["name"]
            for label in (labels if isinstance(labels, list) else [])
            if isinstance(label, dict) and isinstance(label.get("name"), str)
        }
        github = self.reporter.github
        if action == "synchronize" and repo.approval_label in names and github is not None:
            # New commits after an approval: the label must be added again for them.
            try:
                github.remove_label(repo.full_name, number, repo.approval_label)
            except GitHubError as exc:
                log.warning("could not remove label on %s#%s: %s", repo.full_name, number, exc)
        self._cancel_superseded(repo, number, keep=head_sha)
        message = (
            f"waiting for maintainer approval: a user with write access adds the label "
            f"{repo.approval_label}"
        )
        self.reporter.send_statuses(
            repo.full_name, head_sha, repo.device_classes, "pending", message
        )
        return Outcome(202, "awaiting_approval", message)

    def _plan_pull_request(
        self, repo: WatchedRepo, number: int, head_sha: str, base_sha: str, base_ref: str
    ) -> Outcome:
        mirror = self._mirror(repo)
        if not mirror.has_commit(head_sha):
            return self._error(repo, head_sha, f"head {head_sha[:12]} not found after fetching")
        base = base_sha if mirror.has_commit(base_sha) else f"refs/heads/{base_ref}"
        try:
            merge_base = mirror.merge_base(base, head_sha)
        except CommitNotFound as exc:
            return self._error(repo, head_sha, str(exc))
        if merge_base is None:
            return self._error(repo, head_sha, "head and base share no history (no merge-base)")
        with self.factory() as session, session.begin():
            row = session.scalars(
                select(PullRequest).where(
                    PullRequest.full_name == repo.full_name, PullRequest.number == number
                )
            ).one()
            row.merge_base_sha = merge_base
            already = session.scalars(
                select(RunLink.run_id)
                .join(Run, Run.id == RunLink.run_id)
                .where(
                    RunLink.full_name == repo.full_name,
                    RunLink.sha == head_sha,
                    RunLink.role == "candidate",
                    RunLink.pr_number == number,
                    Run.baseline_sha == merge_base,
                    Run.status.not_in(("error", "failed", "cancelled")),
                )
            ).all()
        self._cancel_superseded(repo, number, keep=head_sha)
        if already:
            with self.factory() as session, session.begin():
                for link in session.scalars(select(RunLink).where(RunLink.run_id.in_(already))):
                    link.done = False  # report again: the PR comment may need re-posting
            return Outcome(202, "ignored", "this head commit is already measured", list(already))
        return self._plan(repo, mirror, [head_sha], head_sha, merge_base, "pull_request", number)

    def _cancel_superseded(self, repo: WatchedRepo, number: int, keep: str | None) -> None:
        """Cancel queued candidate runs of older heads of this PR (they cannot merge)."""
        with self.factory() as session, session.begin():
            links = session.scalars(
                select(RunLink).where(
                    RunLink.full_name == repo.full_name,
                    RunLink.pr_number == number,
                    RunLink.role == "candidate",
                    RunLink.done.is_(False),
                    RunLink.sha != (keep or ""),
                )
            ).all()
            ids = [link.run_id for link in links]
        if ids:
            reason = f"superseded by {(keep or 'closing')[:12]} on pull request #{number}"
            cancel.cancel_runs(
                self.factory,
                self.settings,
                ids,
                reason,
                cancel.celery_revoke(self.celery) if self.celery else None,
            )

    # ------------------------------------------------------------------ planning

    def _mirror(self, repo: WatchedRepo) -> Mirror:
        mirror = Mirror(self.settings.data_dir / "mirrors", repo.source)
        mirror.sync()
        return mirror

    def _error(self, repo: WatchedRepo, sha: str, message: str) -> Outcome:
        message = self._public(message)
        self.reporter.send_statuses(repo.full_name, sha, repo.device_classes, "error", message)
        return Outcome(202, "error", message)

    def _public(self, text: str) -> str:
        """``text`` as GitHub may see it (a commit status, a delivery's answer): a watched
        repository's source (a server path, or a URL that may hold a token) named by its
        repository, the server's data folder left out."""
        for repo in self.repos.values():
            for form in (repo.source, public_source(repo.source)):
                if form:
                    text = text.replace(form, repo.full_name)
        return text.replace(str(self.settings.data_dir), "<kernelwatch data>")

    def _plan(
        self,
        repo: WatchedRepo,
        mirror: Mirror,
        targets: list[str],
        head: str,
        baseline: str | None,
        trigger: str,
        pr_number: int | None,
    ) -> Outcome:
        configs = Configs(mirror, served_table(self.settings.repo_configs))
        try:
            # read once here and shared with the planner (each commit's file once)
            config = configs.at(head)
            classes = config.gpus.pick(repo.device_classes)  # [gpus] classes the server offers
            if trigger == "pull_request" and baseline:
                # the base branch's classes are gated whatever the pull request's file says
                base_classes = configs.at(baseline).gpus.pick(repo.device_classes)
                classes = [c for c in repo.device_classes if c in {*classes, *base_classes}]
        except ConfigError as exc:
            said = self._public(str(exc))
            for sha in targets:
                self.reporter.send_statuses(repo.full_name, sha, repo.device_classes, "error", said)
            return Outcome(202, "config_error", said)
        suites = list(repo.suites or ())
        with self.factory() as session, session.begin():
            get_or_create_repository(session, repo.full_name, mirror.source)
        planned: list[tuple[str, PlannedRun]] = []
        paired = trigger == "pull_request" and repo.pr_mode == "paired"
        options = RunOptions.parse(repo.run_options()).with_(
            github=GithubOrigin(repository=repo.full_name, event=trigger, pr=pr_number),
            pr=pr_number,  # how jobs.cancel recognises a PR's runs
            paired=paired,  # the merge-base is built and measured in the same run
        )
        try:
            for dc in classes:
                req = RunRequest(
                    source=repo.source,
                    commits=list(targets),
                    baseline=baseline,
                    suites=suites,
                    device_class=dc,
                    trigger=trigger,
                    measure_baseline=not paired,
                    options=options,
                    base_rules=trigger == "pull_request",
                    config_errors="record",
                )
                try:
                    batch = plan(self.factory, self.settings, self.celery, req, configs)
                except BrokerUnavailable as exc:  # committed, sent later: link, then 503
                    self._link(repo, exc.planned, trigger, pr_number)
                    raise
                self._link(repo, batch, trigger, pr_number)
                planned += [(dc, p) for p in batch]
        except CommitNotFound as exc:
            return self._error(repo, head, str(exc))
        except KernelwatchError as exc:
            if isinstance(exc, SourceError | InfrastructureError):
                raise
            return self._error(repo, head, str(exc))
        ids = [p.id for _, p in planned]
        for sha in dict.fromkeys(p.commit for _, p in planned if p.commit and not p.is_baseline):
            try:
                self.reporter.report_commit(repo.full_name, sha)  # pending: queued
            except GitHubError as exc:
                log.warning("status for %s@%s not sent: %s", repo.full_name, sha[:12], exc)
        return Outcome(202, "planned", f"{len(ids)} runs planned", ids)

    def _link(
        self, repo: WatchedRepo, planned: list[PlannedRun], event: str, pr_number: int | None
    ) -> None:
        with self.factory() as session, session.begin():
            for p in planned:
                # A request that joined an existing run (jobs/planning/dedup.py) is linked already.
                if session.scalar(select(RunLink.id).where(RunLink.run_id == p.id)) is not None:
                    continue
                session.add(
                    RunLink(
                        run_id=p.id,
                        full_name=repo.full_name,
                        sha=p.commit or "",
                        role="baseline" if p.is_baseline else "candidate",
                        event=event,
                        pr_number=pr_number,
                        done=p.is_baseline,
                    )
                )


__all__ = ["Outcome", "PayloadError", "Signed", "WebhookHandler", "repository_of"]
