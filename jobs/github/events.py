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
  ``pending`` status says so.
- ``.kernelwatch.toml`` is read at the commit under test; a parse error becomes an
  ``error`` status with the parser's message, and nothing is planned.

Payload fields are data, never code: shas must be 40 hex digits, repository names
match GitHub's alphabet, branch names are only compared with patterns. No shell is
used anywhere; git gets argument lists (:mod:`kernelwatch.jobs.library.mirror`).
"""

from __future__ import annotations

import logging
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.github import PullRequest, RunLink, WebhookDelivery
from kernelwatch.db.models import Run
from kernelwatch.db.store import get_or_create_repository
from kernelwatch.jobs.errors import (
    CommitNotFound,
    ConfigError,
    InfrastructureError,
    KernelwatchError,
    SourceError,
)
from kernelwatch.jobs.github.client import GitHubError, check_full_name
from kernelwatch.jobs.github.reporter import Reporter
from kernelwatch.jobs.github.watched import WatchedRepo
from kernelwatch.jobs.library import repoconfig
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.jobs.planning import cancel
from kernelwatch.jobs.planning.plan import PlannedRun, RunRequest, plan

log = logging.getLogger(__name__)

ZERO_SHA = "0" * 40
PR_RUN_ACTIONS = ("opened", "synchronize", "reopened", "ready_for_review")
WRITE_PERMISSIONS = ("admin", "maintain", "write")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$")


class PayloadError(ValueError):
    """The payload lacks a field kernelwatch needs, or a field has the wrong shape."""


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


def _str(data: Any, *path: str) -> str:
    value = _get(data, *path)
    if not isinstance(value, str):
        raise PayloadError(f"{'.'.join(path)} must be a string")
    return value


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

    # ------------------------------------------------------------------ entry

    def handle(self, event: str, delivery: str, payload: dict[str, Any]) -> Outcome:
        full_name = repository_of(payload)
        if full_name is not None:
            try:
                check_full_name(full_name)
            except GitHubError:
                return Outcome(400, "invalid", "repository.full_name is not a repository name")
        action = payload.get("action")
        action = action[:64] if isinstance(action, str) else ""
        if not self.claim(delivery, event, action, full_name or ""):
            return Outcome(200, "duplicate", f"delivery {delivery} was already received")
        try:
            outcome = self._dispatch(event, action, full_name, payload)
        except PayloadError as exc:
            outcome = Outcome(400, "invalid", str(exc))
        except (SourceError, InfrastructureError) as exc:
            # Our side (fetch, broker): let GitHub's redelivery try again.
            self.release(delivery)
            return Outcome(503, "error", str(exc))
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
        self, event: str, action: str, full_name: str | None, payload: dict[str, Any]
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
        return self._pull_request(repo, action, payload)

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
                    )
                )
            )
        targets = [t for t in targets if t not in measured]
        if not targets:
            return Outcome(202, "ignored", "every pushed commit is already measured")
        return self._plan(repo, mirror, targets, after, None, "push", None)

    # ------------------------------------------------------------------ pull request

    def _pull_request(self, repo: WatchedRepo, action: str, payload: dict[str, Any]) -> Outcome:
        pr = _get(payload, "pull_request")
        number = _get(payload, "number")
        if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
            raise PayloadError("number must be a positive integer")
        head_sha = _sha(pr, "head", "sha")
        base_sha = _sha(pr, "base", "sha")
        base_ref = _str(pr, "base", "ref")
        head_ref = _str(pr, "head", "ref")
        head_repo_data = _get(pr, "head").get("repo")
        head_repo = ""
        if isinstance(head_repo_data, dict) and isinstance(head_repo_data.get("full_name"), str):
            head_repo = head_repo_data["full_name"]
        fork = head_repo != repo.full_name  # a deleted fork (repo null) is a fork too
        author = _login(pr, "user", "login")
        state = "closed" if action == "closed" else "open"
        with self.factory() as session, session.begin():
            row = session.scalars(
                select(PullRequest).where(
                    PullRequest.full_name == repo.full_name, PullRequest.number == number
                )
            ).first()
            if row is None:
                row = PullRequest(full_name=repo.full_name, number=number)
                session.add(row)
            row.head_sha, row.head_ref, row.head_repo = head_sha, head_ref[:255], head_repo[:255]
            row.base_ref, row.base_sha = base_ref[:255], base_sha
            row.fork, row.author, row.state = fork, author, state
            approved = row.approved_sha == head_sha
        if action == "closed":
            self._cancel_superseded(repo, number, keep=None)
            return Outcome(202, "ignored", "pull request closed")
        if not repo.watches_branch(base_ref):
            return Outcome(202, "ignored", "base branch is not watched")
        if action == "labeled":
            return self._labeled(repo, number, head_sha, fork, approved, payload)
        if action not in PR_RUN_ACTIONS:
            return Outcome(202, "ignored", f"pull_request action {action!r} is not handled")
        if pr.get("draft") is True and repo.skip_drafts:
            return Outcome(202, "ignored", "draft pull request")
        if fork and not approved and author not in repo.allow_users:
            return self._await_approval(repo, number, head_sha, action, pr)
        return self._plan_pull_request(repo, number, head_sha, base_sha, base_ref)

    def _labeled(
        self,
        repo: WatchedRepo,
        number: int,
        head_sha: str,
        fork: bool,
        approved: bool,
        payload: dict[str, Any],
    ) -> Outcome:
        label = _str(payload, "label", "name")
        if label != repo.approval_label:
            return Outcome(202, "ignored", "label is not the approval label")
        if not fork:
            return Outcome(202, "ignored", "approval is only needed for pull requests from forks")
        if approved:
            return Outcome(202, "ignored", "this head commit is already approved")
        sender = _login(payload, "sender", "login")
        if not self._may_approve(repo, sender):
            return Outcome(202, "ignored", f"label added by {sender}, who lacks write access")
        with self.factory() as session, session.begin():
            row = session.scalars(
                select(PullRequest).where(
                    PullRequest.full_name == repo.full_name, PullRequest.number == number
                )
            ).one()
            row.approved_sha, row.approved_by = head_sha, sender
            base_sha, base_ref = row.base_sha, row.base_ref
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
        names = (
            {lb.get("name") for lb in labels if isinstance(lb, dict)}
            if isinstance(labels, list)
            else set()
        )
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
        self.reporter.send_statuses(repo.full_name, sha, repo.device_classes, "error", message)
        return Outcome(202, "error", message)

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
        text = mirror.read_file(head, ".kernelwatch.toml")
        try:
            config = repoconfig.parse(text)
            classes = self._device_classes(repo, text)
        except ConfigError as exc:
            for sha in targets:
                self.reporter.send_statuses(
                    repo.full_name, sha, repo.device_classes, "error", str(exc)
                )
            return Outcome(202, "config_error", str(exc))
        suites = list(repo.suites or config.suites)
        with self.factory() as session, session.begin():
            get_or_create_repository(session, repo.full_name, mirror.source)
        planned: list[tuple[str, PlannedRun]] = []
        options = {
            **repo.run_options(),
            "github": {"repository": repo.full_name, "event": trigger, "pr": pr_number},
        }
        paired = trigger == "pull_request" and repo.pr_mode == "paired"
        if pr_number is not None:
            options["pr"] = pr_number  # how jobs.cancel recognises a PR's runs
        if paired:
            options["paired"] = True  # the merge-base is built and measured in the same run
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
                    options=dict(options),
                )
                batch = plan(self.factory, self.settings, self.celery, req)
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

    @staticmethod
    def _device_classes(repo: WatchedRepo, text: str | None) -> list[str]:
        """Classes the repository asks for (``[gpus] classes``) that the server offers."""
        if text is None:
            return list(repo.device_classes)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:  # already caught by repoconfig.parse
            raise ConfigError(f".kernelwatch.toml: {exc}") from exc
        gpus = data.get("gpus", {})
        wanted = gpus.get("classes") if isinstance(gpus, dict) else None
        if wanted is None:
            return list(repo.device_classes)
        if not isinstance(wanted, list) or not all(isinstance(c, str) for c in wanted):
            raise ConfigError(".kernelwatch.toml: gpus.classes must be a list of strings")
        offered = [c for c in wanted if c in repo.device_classes]
        return offered or list(repo.device_classes)


__all__ = ["Outcome", "PayloadError", "WebhookHandler", "repository_of"]
