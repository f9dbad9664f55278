"""Turning "measure these commits" into run rows and queued messages.

Resolves revisions through the repository mirror, records commits with their
parents, chooses each run's baseline (first parent, or an explicit one), adds a
run for a baseline that has none, commits, and only then enqueues.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Commit, Repository, Run
from kernelwatch.db.store import get_or_create_repository, latest_run_for, upsert_commit
from kernelwatch.jobs.errors import KernelwatchError
from kernelwatch.jobs.library import libspec
from kernelwatch.jobs.library.mirror import Mirror, repository_name
from kernelwatch.jobs.planning import dedup
from kernelwatch.jobs.planning.broker import enqueue_run
from kernelwatch.jobs.planning.queues import queue_for


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
    options: dict[str, Any] = field(default_factory=dict)
    # Released versions (``name==version``), compared in the order given, exactly as
    # commits are: each version's baseline is the one before it (or ``baseline``).
    versions: list[str] = field(default_factory=list)


@dataclass
class PlannedRun:
    id: int
    commit: str | None
    status: str
    is_baseline: bool = False


def plan(
    factory: sessionmaker[Session], settings: Settings, app: Celery | None, req: RunRequest
) -> list[PlannedRun]:
    """Create and enqueue runs for ``req``. Errors are recorded as error runs, then raised."""
    try:
        mirror = Mirror(settings.data_dir / "mirrors", req.source)
        mirror.sync()
        targets = [mirror.resolve(c) for c in req.commits]
        range_base: str | None = None
        if req.range:
            range_base = mirror.resolve(req.range.split("..", 1)[0])
            targets += mirror.range(req.range)
        explicit_baseline = mirror.resolve(req.baseline) if req.baseline else None
    except KernelwatchError as exc:
        _record_error(factory, req, str(exc))
        raise

    planned: list[PlannedRun] = []
    to_enqueue: list[tuple[int, str]] = []
    with factory() as session, session.begin():
        repo = get_or_create_repository(session, repository_name(mirror.source), mirror.source)
        seen: set[str] = set()
        baselines: dict[str, str | None] = {}
        for sha in targets:
            info = mirror.info(sha)
            upsert_commit(
                session, repo, sha, info.parents, info.message, info.author, info.committed_at
            )
            baselines[sha] = explicit_baseline or (info.parents[0] if info.parents else None)
        # Baselines that are not measured yet get a run of their own, measured first.
        wanted_baselines = {b for b in baselines.values() if b and b not in baselines}
        if range_base:
            wanted_baselines.add(range_base)
        for b in sorted(wanted_baselines, key=lambda s: _order(mirror, s)):
            if not req.measure_baseline:
                break
            existing = latest_run_for(session, repo.id, b, req.device_class, req.suites)
            if existing is not None and existing.status not in ("error", "failed"):
                continue
            info = mirror.info(b)
            upsert_commit(
                session, repo, b, info.parents, info.message, info.author, info.committed_at
            )
            run = _new_run(session, repo, b, None, req)
            planned.append(PlannedRun(run.id, b, run.status, is_baseline=True))
            to_enqueue.append((run.id, run.queue))
            seen.add(b)
        for sha in targets:
            if sha in seen:
                continue
            seen.add(sha)
            joined = dedup.find_joinable(
                session, repo.id, sha, req.suites, req.device_class, req.options, baselines[sha]
            )
            if joined is not None:  # the same measurement is already queued or running
                if dedup.join(joined, req.trigger):
                    to_enqueue.append((joined.id, joined.queue))
                planned.append(PlannedRun(joined.id, sha, joined.status))
                continue
            run = _new_run(session, repo, sha, baselines[sha], req)
            planned.append(PlannedRun(run.id, sha, run.status))
            to_enqueue.append((run.id, run.queue))
    if app is not None:
        for run_id, queue in to_enqueue:
            enqueue_run(app, run_id, queue, req.trigger)
    return planned


def plan_versions(
    factory: sessionmaker[Session], settings: Settings, app: Celery | None, req: RunRequest
) -> list[PlannedRun]:
    """Runs for released versions of a library; each version is stored as a pseudo-commit
    (``version:name==x.y``) whose parent is the previous version, so trends, baselines and
    the dashboard treat a version history like a commit history."""
    try:
        specs = [libspec.parse_version_spec(v) for v in req.versions]
        baseline = libspec.parse_version_spec(req.baseline) if req.baseline else None
        libspec.parse_index(req.options.get("index_url"), req.options.get("find_links"))
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
            run = _new_run(session, repo, sha, None if is_base else previous, req)
            run.version_spec = spec.key
            planned.append(PlannedRun(run.id, sha, run.status, is_baseline=is_base))
            to_enqueue.append((run.id, run.queue))
            previous = sha
    if app is not None:
        for run_id, queue in to_enqueue:
            enqueue_run(app, run_id, queue, req.trigger)
    return planned


def version_sha(key: str) -> str:
    """The pseudo-commit id of a released version (fits the 64-character sha column)."""
    text = f"version:{key}"
    return text if len(text) <= 64 else "version:" + hashlib.sha256(key.encode()).hexdigest()[:56]


def _new_run(
    session: Session, repo: Repository, sha: str, baseline: str | None, req: RunRequest
) -> Run:
    from sqlalchemy import select

    commit = session.scalars(
        select(Commit).where(Commit.repository_id == repo.id, Commit.sha == sha)
    ).one()
    run = Run(
        repository_id=repo.id,
        commit_id=commit.id,
        suites=list(req.suites),
        trigger=req.trigger,
        status="queued",
        baseline_sha=baseline,
        device_class=req.device_class,
        queue=queue_for(req.device_class),
        options=dict(req.options),
    )
    session.add(run)
    session.flush()
    return run


def _order(mirror: Mirror, sha: str) -> int:
    return int(mirror.info(sha).committed_at.timestamp())


def _record_error(factory: sessionmaker[Session], req: RunRequest, message: str) -> None:
    """A request that cannot even be planned is still recorded, with its reason."""
    with factory() as session, session.begin():
        name = repository_name(req.source) or "unknown"
        repo = get_or_create_repository(session, name, req.source)
        run = Run(
            repository_id=repo.id,
            suites=list(req.suites),
            trigger=req.trigger,
            status="error",
            verdict="error",
            device_class=req.device_class,
            queue=queue_for(req.device_class),
            error=message,
            options={**req.options, "requested": req.commits or [req.range]},
        )
        session.add(run)
