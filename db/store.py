"""Data access used by several parts: get-or-create rows, idempotent result writes.

Functions take an explicit session and never commit: the caller owns the
transaction. Result records arrive typed (``kernels/record.py:ResultRecord``,
validated by whoever read them off the wire) and are stored whole in
``results.record`` beside the columns that queries need.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Case, Commit, CommitParent, Repository, Result, Run
from kernelwatch.kernels.record import (
    SCHEMA_VERSION,
    ResultRecord,
    case_id,
    case_label,
    telemetry_of,
)


def source_suffix(source: str) -> str:
    """Four digits from sha256 of ``source``: the same in every process.

    Python's ``hash()`` of a string is salted per process, so a second demo (a new
    process, the same throwaway path) used to find the name taken by its own
    earlier repository under another suffix and create ``tinykern-7847`` next to
    ``tinykern-0312``.
    """
    return f"{int(hashlib.sha256(source.encode()).hexdigest()[:8], 16) % 10_000:04d}"


def public_source(source: str) -> str:
    """``source`` (or a text holding it) as a message or a page may show it: URLs
    without their user and password.

    A server's source URL may carry a token (``https://x-access-token:TOKEN@host/…``);
    messages about a fetch or a missing commit reach logs, the command line and, through
    the webhook handler, GitHub's commit statuses; the dashboard shows the source too.
    Not ``db.config.masked``: that keeps the user of one database URL, and a git token
    is often the user (``https://TOKEN@host/…``); this cuts it from any URL in a text.
    """
    return _USERINFO.sub("", source)


# a URL's ``user[:password]@`` after its ``//``, wherever it stands in a text
_USERINFO = re.compile(r"(?<=//)[^/@\s]+@")


def get_or_create_repository(session: Session, name: str, source: str) -> Repository:
    """The repository of ``source``; a name another source holds gets a stable suffix."""
    repo = session.scalars(select(Repository).where(Repository.source == source)).first()
    if repo is not None:
        return repo
    taken = session.scalars(select(Repository).where(Repository.name == name)).first()
    if taken is not None:
        name = f"{name}-{source_suffix(source)}"
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
    *,
    generation: int | None = None,
) -> Commit:
    """The commit row of ``sha``, created if new.

    ``Commit.sequence`` orders a repository's commits on the x axis of trends and for
    change-point detection. ``generation`` is the commit's first-parent depth from git
    (``git rev-list --count --first-parent``): the planner passes it, so the order is
    git's whatever order commits are planned in (a target before its baseline), and a
    row stored earlier with an insertion number is corrected. Without it (released
    versions, imports) the commit goes after the newest one stored, as given.
    """
    commit = session.scalars(
        select(Commit).where(Commit.repository_id == repo.id, Commit.sha == sha)
    ).first()
    if commit is not None:
        if generation is not None and commit.sequence != generation:
            commit.sequence = generation
        return commit
    if generation is None:
        seq = session.scalar(
            select(func.max(Commit.sequence)).where(Commit.repository_id == repo.id)
        )
        generation = (seq or 0) + 1
    commit = Commit(
        repository_id=repo.id,
        sha=sha,
        message=message,
        author=author,
        committed_at=committed_at,
        sequence=generation,
        parents=[CommitParent(position=i, parent_sha=p) for i, p in enumerate(parents)],
    )
    session.add(commit)
    session.flush()
    return commit


def get_or_create_case(session: Session, record: ResultRecord) -> Case:
    """The shared row of ``record``'s case, made from the first record of it, and made
    again from the first whose kernel, backend and parameters hash to its id.

    Case rows are shared by every repository, and the code under test writes its own
    records (and markers, which become error records): a hostile library could file a
    record under another library's case id with parameters of its choosing, and that
    label is what the victim's threshold patterns, PR comment and dashboard read (an
    audit, 2026-12-05). A record that hashes to its id cannot be forged (that would be a
    second preimage), so the first such record sets the row right for good. The suite
    is not in the hash and stays the first record's.
    """
    case = session.get(Case, record.case_id)
    params = json_safe(record.params)
    if case is None:
        case = Case(
            id=record.case_id,
            suite=record.suite,
            kernel=record.kernel,
            backend=record.backend,
            params=params,
            label=case_label(record.params),
        )
        session.add(case)
        session.flush()
    elif (case.kernel, case.backend, case.params) != (record.kernel, record.backend, params) and (
        case_id(record.kernel, record.backend, record.params) == record.case_id
    ):
        case.kernel, case.backend, case.params = record.kernel, record.backend, params
        case.label = case_label(record.params)
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


def store_record(session: Session, run: Run, record: ResultRecord) -> Result | None:
    """Store one result record; a case already stored for this run is left as is.

    Returns the new row, or None when the record was a duplicate (re-delivery).
    A record of another schema is refused (``ValueError``): the columns below are
    this schema's reading of it.
    """
    if record.schema != SCHEMA_VERSION:
        raise ValueError(f"unsupported result schema {record.schema!r}; not stored")
    get_or_create_case(session, record)
    exists = session.scalar(
        select(Result.id).where(Result.run_id == run.id, Result.case_id == record.case_id)
    )
    if exists is not None:
        return None
    timing, thr = record.timing, record.throughput
    data = record.to_dict()
    data["telemetry"] = telemetry_of(data)  # every stored record states it (paired too)
    result = Result(
        run_id=run.id,
        case_id=record.case_id,
        status=record.status,
        median_s=_finite(timing.median) if timing else None,
        ci_low_s=_finite(timing.ci_low) if timing else None,
        ci_high_s=_finite(timing.ci_high) if timing else None,
        n_samples=timing.n if timing else 0,
        samples=json_safe(list(timing.samples)) if timing else [],
        tflops=_finite(thr.tflops) if thr else None,
        gbps=_finite(thr.gbps) if thr else None,
        reliable=bool(record.device.get("reliable", True)),
        device_name=str(record.device.get("name", "")),
        error=data["error"],  # capped, and no NUL: what PostgreSQL can hold
        log_tail=data["log_tail"],
        record=json_safe(data),
    )
    session.add(result)
    session.flush()
    return result


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def stored_case_ids(session: Session, run_id: int) -> set[str]:
    return set(session.scalars(select(Result.case_id).where(Result.run_id == run_id)))


def runs_of(repository_id: int, sha: str, device_class: str) -> Select[Run]:
    """The runs of commit ``sha`` on one device class, newest first (callers add filters)."""
    return (
        select(Run)
        .join(Commit, Run.commit_id == Commit.id)
        .where(
            Run.repository_id == repository_id,
            Commit.sha == sha,
            Run.device_class == device_class,
        )
        .order_by(Run.id.desc())
    )


def latest_run_for(
    session: Session,
    repository_id: int,
    sha: str,
    device_class: str,
    suites: list[str],
    exclude_id: int | None = None,
) -> Run | None:
    """The newest run of ``sha`` with the same device class and suites (any state)."""
    q = runs_of(repository_id, sha, device_class).where(Run.status != "cancelled")
    for run in session.scalars(q):
        if run.id != exclude_id and sorted(run.suites) == sorted(suites):
            return run
    return None
