"""Data access used by several parts: get-or-create rows, idempotent result writes.

Functions take an explicit session and never commit: the caller owns the
transaction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Case, Commit, CommitParent, Repository, Result, Run


def get_or_create_repository(session: Session, name: str, source: str) -> Repository:
    repo = session.scalars(select(Repository).where(Repository.source == source)).first()
    if repo is not None:
        return repo
    taken = session.scalars(select(Repository).where(Repository.name == name)).first()
    if taken is not None:
        name = f"{name}-{abs(hash(source)) % 10_000:04d}"
    repo = Repository(name=name, source=source)
    session.add(repo)
    session.flush()
    return repo


def upsert_commit(
    session: Session,
    repo: Repository,
    sha: str,
    parents: Iterable[str],
    message: str = "",
    author: str = "",
    committed_at: datetime | None = None,
) -> Commit:
    commit = session.scalars(
        select(Commit).where(Commit.repository_id == repo.id, Commit.sha == sha)
    ).first()
    if commit is not None:
        return commit
    seq = session.scalar(select(func.max(Commit.sequence)).where(Commit.repository_id == repo.id))
    commit = Commit(
        repository_id=repo.id,
        sha=sha,
        message=message,
        author=author,
        committed_at=committed_at,
        sequence=(seq or 0) + 1,
        parents=[CommitParent(position=i, parent_sha=p) for i, p in enumerate(parents)],
    )
    session.add(commit)
    session.flush()
    return commit


def get_or_create_case(session: Session, record: dict[str, Any]) -> Case:
    case = session.get(Case, record["case_id"])
    if case is None:
        params = record.get("params", {})
        label = ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
        case = Case(
            id=record["case_id"],
            suite=record["suite"],
            kernel=record["kernel"],
            backend=record["backend"],
            params=params,
            label=label,
        )
        session.add(case)
        session.flush()
    return case


def json_safe(value: Any) -> Any:
    """NaN and infinities as None, recursively.

    A kernel that writes NaN makes its correctness errors NaN; JSON has no NaN and
    PostgreSQL's JSONB rejects the token, which would turn a recorded failure into
    a lost one. Plain floats in columns keep their value where finite.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def store_record(session: Session, run: Run, record: dict[str, Any]) -> Result | None:
    """Store one result record; a case already stored for this run is left as is.

    Returns the new row, or None when the record was a duplicate (re-delivery).
    """
    record = json_safe(record)
    get_or_create_case(session, record)
    exists = session.scalar(
        select(Result.id).where(Result.run_id == run.id, Result.case_id == record["case_id"])
    )
    if exists is not None:
        return None
    timing = record.get("timing") or {}
    thr = record.get("throughput") or {}
    device = record.get("device") or {}
    result = Result(
        run_id=run.id,
        case_id=record["case_id"],
        status=record["status"],
        median_s=timing.get("median"),
        ci_low_s=timing.get("ci_low"),
        ci_high_s=timing.get("ci_high"),
        n_samples=int(timing.get("n", 0)),
        samples=list(timing.get("samples", [])),
        tflops=thr.get("tflops"),
        gbps=thr.get("gbps"),
        reliable=bool(device.get("reliable", True)),
        device_name=str(device.get("name", "")),
        error=record.get("error", "") or "",
        log_tail=record.get("log_tail", "") or "",
        record=record,
    )
    session.add(result)
    session.flush()
    return result


def stored_case_ids(session: Session, run_id: int) -> set[str]:
    return set(session.scalars(select(Result.case_id).where(Result.run_id == run_id)))


def latest_run_for(
    session: Session,
    repository_id: int,
    sha: str,
    device_class: str,
    suites: list[str],
    exclude_id: int | None = None,
) -> Run | None:
    """The newest run of ``sha`` with the same device class and suites (any state)."""
    q = (
        select(Run)
        .join(Commit, Run.commit_id == Commit.id)
        .where(
            Run.repository_id == repository_id,
            Commit.sha == sha,
            Run.device_class == device_class,
            Run.status != "cancelled",
        )
        .order_by(Run.id.desc())
    )
    for run in session.scalars(q):
        if run.id != exclude_id and sorted(run.suites) == sorted(suites):
            return run
    return None
