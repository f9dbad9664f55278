"""Turning "measure these commits" into run rows and queued messages.

Resolves revisions through the repository mirror, records commits with their
parents and first-parent depth (their place in the branch's history, so plots and
change points follow git's order, not the order commits happened to be planned in),
chooses each run's baseline (first parent, or an explicit one), adds a run for a
baseline that has none, commits, and only then enqueues.

Every run to send is noted in the outbox (``db/outbox.py``) in the same
transaction; the note is removed once the broker took the message. When the broker
is down the runs stay committed with their note, :class:`BrokerUnavailable` is
raised (the webhook answers 503), and the reconciler or a redelivered request that
joins the run sends it later: a planned run is never left without a message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from celery import Celery
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db import outbox
from kernelwatch.db.config import Settings
from kernelwatch.db.models import Commit, Repository, Run
from kernelwatch.db.run_options import RunOptions
from kernelwatch.db.store import get_or_create_repository, latest_run_for, runs_of, upsert_commit
from kernelwatch.jobs.errors import (
    CommitNotFound,
    ConfigError,
    InfrastructureError,
    KernelwatchError,
)
from kernelwatch.jobs.library import libspec, served
from kernelwatch.jobs.library.mirror import Mirror, git, repository_name
from kernelwatch.jobs.planning import dedup
from kernelwatch.jobs.planning.broker import enqueue_run
from kernelwatch.jobs.planning.queues import queue_for
from kernelwatch.jobs.planning.resolve import SELECTORS, Configs, Resolved, resolve
from kernelwatch.kernels.catalog import run_gpus


@dataclass
class RunRequest:
    source: str
    commits: list[str] = field(default_factory=list)
    range: str | None = None
    baseline: str | None = None
    suites: list[str] = field(default_factory=lambda: ["basic"])
    device_class: str = "cpu"
    trigger: str = "manual"
    measure_baseline: bool = True
    # Each planned run's options; a mapping (the CLI's) is validated into RunOptions here.
    options: RunOptions | Mapping[str, Any] = field(default_factory=RunOptions)
    # Released versions (``name==version``), compared in the order given, exactly as
    # commits are: each version's baseline is the one before it (or ``baseline``).
    versions: list[str] = field(default_factory=list)
    # A pull request: judged by its baseline's (merge-base's) .kernelwatch.toml, which its
    # own file may only tighten (jobs/planning/resolve.py).
    base_rules: bool = False
    # A commit whose .kernelwatch.toml is bad: "raise" refuses the whole request before
    # anything is queued (kernelwatch run of one commit); "record" plans that commit as
    # an ``error`` run with the file's message and the others as usual (webhooks,
    # bisection steps, kernelwatch run of a range or several commits).
    config_errors: str = "raise"
    # The repository's name when the planner creates its row (None: from the source).
    name: str | None = None

    def __post_init__(self) -> None:
        self.options = RunOptions.parse(self.options)  # an unknown key fails here

    @property
    def run_options(self) -> RunOptions:
        return RunOptions.parse(self.options)


@dataclass
class PlannedRun:
    id: int
    commit: str | None
    status: str
    is_baseline: bool = False


def plan(
    factory: sessionmaker[Session],
    settings: Settings,
    app: Celery | None,
    req: RunRequest,
    configs: Configs | None = None,
) -> list[PlannedRun]:
    """Create and enqueue runs for ``req``. Errors are recorded as error runs, then raised.

    Each run's configuration is resolved here, once, and stored on it
    (``resolve.py``); ``configs`` lets a caller that planned other device classes of the
    same request (or read the head's file already) share the reads.
    """
    try:
        mirror = (
            configs.mirror
            if configs is not None
            else Mirror(settings.data_dir / "mirrors", req.source)
        )
        mirror.sync()
        configs = configs or Configs(mirror, served.table(settings.repo_configs))
        targets = [mirror.resolve(c) for c in req.commits]
        range_base: str | None = None
        if req.range:
            range_base = mirror.resolve(req.range.split("..", 1)[0])
            in_range = mirror.range(req.range)
            if not in_range:  # ``main..old``: a reversed range is a mistake, not "nothing"
                raise CommitNotFound(
                    f"range {req.range} has no commits (A..B is every commit after A up to "
                    "B: is it reversed?)"
                )
            targets += in_range
        explicit_baseline = mirror.resolve(req.baseline) if req.baseline else None
        infos = {sha: mirror.info(sha) for sha in dict.fromkeys(targets)}
        baselines: dict[str, str | None] = {
            sha: explicit_baseline or (info.parents[0] if info.parents else None)
            for sha, info in infos.items()
        }
        # every target's configuration before anything is written: a bad file is refused
        # (or recorded) before a single run is queued
        resolved = {sha: _resolve(configs, settings, req, sha, baselines[sha]) for sha in infos}
    except KernelwatchError as exc:
        _record_error(factory, req, str(exc))
        raise

    planned: list[PlannedRun] = []
    to_enqueue: list[tuple[int, str]] = []
    with factory() as session, session.begin():
        name = req.name or repository_name(mirror.source)
        repo = get_or_create_repository(session, name, mirror.source)
        seen: set[str] = set()
        for sha, info in infos.items():
            upsert_commit(
                session,
                repo,
                sha,
                info.parents,
                info.message,
                info.author,
                info.committed_at,
                generation=first_parent_depth(mirror, sha),
            )
        # Baselines that are not measured yet get a run of their own, measured first.
        wanted_baselines = {b for b in baselines.values() if b and b not in baselines}
        if range_base:
            wanted_baselines.add(range_base)
        for b in sorted(wanted_baselines, key=lambda s: _order(mirror, s)):
            if not req.measure_baseline:
                break
            needed = sorted(
                {
                    s
                    for sha, r in resolved.items()
                    if baselines[sha] == b and isinstance(r, Resolved)
                    for s in r.suites
                }  # fmt: skip
            ) or list(req.suites)
            existing = covering_run(
                session, repo.id, b, req.device_class, needed, req.run_options.bench_args
            )
            if existing is not None:
                if outbox.is_pending(session, existing.id):  # its first send failed
                    to_enqueue.append((existing.id, existing.queue))
                continue
            info = mirror.info(b)
            upsert_commit(
                session,
                repo,
                b,
                info.parents,
                info.message,
                info.author,
                info.committed_at,
                generation=first_parent_depth(mirror, b),
            )
            # the baseline measures as its own commit says (a bad file there: an error run)
            base_req = replace(req, config_errors="record", base_rules=False)
            run = _new_run(
                session, repo, b, None, req, _resolve(configs, settings, base_req, b, None)
            )
            planned.append(PlannedRun(run.id, b, run.status, is_baseline=True))
            if run.status == "queued":
                to_enqueue.append((run.id, run.queue))
            seen.add(b)
        for sha in infos:
            if sha in seen:
                continue
            seen.add(sha)
            snapshot = resolved[sha]
            if isinstance(snapshot, Resolved):
                joined = dedup.find_joinable(
                    session,
                    repo.id,
                    sha,
                    snapshot.suites,
                    req.device_class,
                    snapshot.options,
                    baselines[sha],
                )
                if joined is not None:  # the same measurement is already queued or running
                    # Re-send when the request outranks the run, or when its first send
                    # never reached the broker (a webhook redelivered after a 503).
                    if dedup.join(joined, req.trigger) or outbox.is_pending(session, joined.id):
                        to_enqueue.append((joined.id, joined.queue))
                    planned.append(PlannedRun(joined.id, sha, joined.status))
                    continue
            run = _new_run(session, repo, sha, baselines[sha], req, snapshot)
            planned.append(PlannedRun(run.id, sha, run.status))
            if run.status == "queued":
                to_enqueue.append((run.id, run.queue))
        _note_sends(session, app, to_enqueue, req.trigger)
    _send_planned(factory, app, to_enqueue, req.trigger, planned)
    return planned


def _resolve(
    configs: Configs, settings: Settings, req: RunRequest, sha: str, baseline: str | None
) -> Resolved | ConfigError:
    """The snapshot of ``req``'s run of ``sha``; a bad file raises, or is returned to be
    recorded as that commit's error run (``RunRequest.config_errors``)."""
    try:
        return resolve(
            configs,
            sha,
            req.run_options,
            req.suites,
            baseline=baseline,
            base_rules=req.base_rules,
            default_threshold=settings.regression_threshold,
            default_confidence=settings.confidence,
        )
    except ConfigError as exc:
        if req.config_errors != "record":
            raise
        return exc


def covering_run(
    session: Session,
    repository_id: int,
    sha: str,
    device_class: str,
    suites: list[str],
    bench_args: list[str],
) -> Run | None:
    """A run of ``sha`` that measures (or will measure) at least what a baseline of these
    suites and this case selection needs: no bisection step (it measures what its search
    follows), no failed or errored run, its suites a superset, and either every case or
    the same selection. None: the baseline needs a run of its own."""
    wanted = _selection(bench_args)
    q = runs_of(repository_id, sha, device_class).where(
        Run.status.not_in(("cancelled", "error", "failed"))
    )
    for run in session.scalars(q):
        if run.options.bisection_id is not None or not set(suites) <= set(run.suites):
            continue
        mine = _selection(run.options.bench_args)
        if not mine or mine == wanted:
            return run
    return None


def _selection(args: list[str]) -> list[str]:
    """The ``--kernel``/``--case`` arguments of a runner command line, in order."""
    return [f"{args[i]}={args[i + 1]}" for i in range(len(args) - 1) if args[i] in SELECTORS]


def plan_versions(
    factory: sessionmaker[Session], settings: Settings, app: Celery | None, req: RunRequest
) -> list[PlannedRun]:
    """Runs for released versions of a library; each version is stored as a pseudo-commit
    (``version:name==x.y``) whose parent is the previous version, so trends, baselines and
    the dashboard treat a version history like a commit history."""
    try:
        specs = [libspec.parse_version_spec(v) for v in req.versions]
        baseline = libspec.parse_version_spec(req.baseline) if req.baseline else None
        libspec.parse_index(req.run_options.index_url, req.run_options.find_links)
    except KernelwatchError as exc:
        _record_error(factory, req, str(exc))
        raise
    name = specs[0].name if specs else req.source
    planned: list[PlannedRun] = []
    to_enqueue: list[tuple[int, str]] = []
    with factory() as session, session.begin():
        repo = get_or_create_repository(session, name, f"package:{name}")
        previous = version_sha(baseline.key) if baseline else None
        order = ([baseline] if baseline else []) + specs
        for spec in order:
            sha = version_sha(spec.key)
            upsert_commit(session, repo, sha, [previous] if previous else [], spec.key)
            is_base = spec is baseline
            existing = latest_run_for(session, repo.id, sha, req.device_class, req.suites)
            if is_base and existing is not None and existing.status not in ("error", "failed"):
                previous = sha
                continue
            # a released version has no .kernelwatch.toml: the request is the whole snapshot
            snapshot = Resolved(list(req.suites), req.run_options)
            run = _new_run(session, repo, sha, None if is_base else previous, req, snapshot)
            run.version_spec = spec.key
            planned.append(PlannedRun(run.id, sha, run.status, is_baseline=is_base))
            to_enqueue.append((run.id, run.queue))
            previous = sha
        _note_sends(session, app, to_enqueue, req.trigger)
    _send_planned(factory, app, to_enqueue, req.trigger, planned)
    return planned


class BrokerUnavailable(InfrastructureError):
    """The runs are committed but the broker refused their messages; they are sent later.

    ``planned``: the runs of the request, committed all the same (a webhook still
    links them to the commit, so their statuses are reported once they ran).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.planned: list[PlannedRun] = []


def _send_planned(
    factory: sessionmaker[Session],
    app: Celery | None,
    sends: list[tuple[int, str]],
    trigger: str,
    planned: list[PlannedRun],
) -> None:
    try:
        send_noted(factory, app, sends, trigger)
    except BrokerUnavailable as exc:
        exc.planned = planned
        raise


def _note_sends(
    session: Session, app: Celery | None, sends: list[tuple[int, str]], trigger: str
) -> None:
    if app is not None:  # without a broker nobody sends: nothing to note
        for run_id, queue in sends:
            outbox.add(session, run_id, queue, trigger)


def send_noted(
    factory: sessionmaker[Session], app: Celery | None, sends: list[tuple[int, str]], trigger: str
) -> None:
    """Send committed runs and clear their outbox notes; BrokerUnavailable if any failed."""
    if app is None or not sends:
        return
    done: list[int] = []
    failure: Exception | None = None
    for run_id, queue in sends:
        try:
            enqueue_run(app, run_id, queue, trigger)
        except Exception as exc:  # kombu/redis raise several types for "broker down"
            failure = exc
            break
        done.append(run_id)
    with factory() as session, session.begin():
        outbox.sent(session, done)
    if failure is not None:
        raise BrokerUnavailable(
            f"broker unreachable ({type(failure).__name__}: {failure}); "
            f"{len(sends) - len(done)} planned runs will be sent when it is back"
        ) from failure


def first_parent_depth(mirror: Mirror, sha: str) -> int:
    """How many commits the first-parent chain of ``sha`` has (itself included).

    A commit's place in its branch's history, from git alone: the same for every
    planner and every order of planning, unlike a counter of insertions.
    """
    out = git("--git-dir", str(mirror.path), "rev-list", "--count", "--first-parent", sha)
    return int(out.strip())


def version_sha(key: str) -> str:
    """The pseudo-commit id of a released version (fits the 64-character sha column)."""
    text = f"version:{key}"
    return text if len(text) <= 64 else "version:" + hashlib.sha256(key.encode()).hexdigest()[:56]


def _new_run(
    session: Session,
    repo: Repository,
    sha: str,
    baseline: str | None,
    req: RunRequest,
    snapshot: Resolved | ConfigError,
) -> Run:
    """The run of ``sha`` with its resolved snapshot, ``queued``; with a bad file, an
    ``error`` run that says so and is never queued."""
    commit = session.scalars(
        select(Commit).where(Commit.repository_id == repo.id, Commit.sha == sha)
    ).one()
    suites = snapshot.suites if isinstance(snapshot, Resolved) else list(req.suites)
    run = Run(
        repository_id=repo.id,
        commit_id=commit.id,
        suites=suites,
        trigger=req.trigger,
        status="queued",
        baseline_sha=baseline,
        device_class=req.device_class,
        queue=queue_for(req.device_class, run_gpus(suites)),
        options=snapshot.options if isinstance(snapshot, Resolved) else req.run_options,
    )
    if isinstance(snapshot, ConfigError):
        run.status, run.verdict, run.error = "error", "error", str(snapshot)
        run.finished = datetime.now(UTC)
    session.add(run)
    session.flush()
    return run


def _order(mirror: Mirror, sha: str) -> int:
    return int(mirror.info(sha).committed_at.timestamp())


def _record_error(factory: sessionmaker[Session], req: RunRequest, message: str) -> None:
    """A request that cannot even be planned is recorded, with its reason, on its repository.

    Only on a repository already known: a source that never resolved (a mistyped path,
    a directory that is not git) must not leave a repository row behind (issue 18); the
    caller raises the error to whoever asked, so it is not lost.
    """
    with factory() as session, session.begin():
        local = str(Path(req.source).expanduser().resolve()) if "://" not in req.source else ""
        repo = session.scalars(
            select(Repository).where(Repository.source.in_({req.source, local})).limit(1)
        ).first()
        if repo is None:
            return
        run = Run(
            repository_id=repo.id,
            suites=list(req.suites),
            trigger=req.trigger,
            status="error",
            verdict="error",
            device_class=req.device_class,
            queue=queue_for(req.device_class, run_gpus(req.suites)),
            error=message,
            options=req.run_options.with_(requested=req.commits or [req.range]),
        )
        session.add(run)
