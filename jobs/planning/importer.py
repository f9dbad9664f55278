"""``kernelwatch import``: result records measured elsewhere, stored as a run.

For GPU hosts that cannot reach the database (air-gapped clusters run
``kernelwatch bench`` and carry the JSON lines out), and for the example
dataset measured on the H200 (``docs/data/``), which a machine without a GPU
can load to browse real numbers in the dashboard. Records are validated
against the result schema before anything is written; the run is judged
against ``--parent``'s run like any other. A file whose name ends in ``.gz`` is
read through gzip (the committed dataset keeps its larger record files so, which
keeps every GPU call's copy of the tree small).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Commit, Repository, Run
from kernelwatch.db.run_options import RunOptions
from kernelwatch.db.store import get_or_create_repository, store_record, upsert_commit
from kernelwatch.jobs.cli.gate_remote import is_sha
from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.judging.analysis import analyze_ready
from kernelwatch.kernels.record import ResultRecord


@dataclass(frozen=True)
class ImportRequest:
    path: Path
    repository: str
    commit: str  # a sha or any label (e.g. "h200-2026-11-29")
    device_class: str
    parent: str | None = None  # the commit (label) to compare with
    message: str = ""
    # when the records were measured (the run's times); None: now. A dataset measured
    # days ago keeps its dates on the dashboard instead of all reading "today".
    measured_at: datetime | None = None


def record_lines(path: Path) -> list[str]:
    """The lines of a JSON-lines file, gunzipped when its name ends in ``.gz``."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read().splitlines()
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, EOFError, ValueError) as exc:  # a truncated gzip is an EOFError
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def read_records(path: Path) -> list[ResultRecord]:
    """The records of a JSON-lines file, each checked against the result schema."""
    lines = record_lines(path)
    records = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = ResultRecord.from_dict(json.loads(line))
        except ValueError as exc:  # RecordError and JSONDecodeError are ValueErrors
            raise ConfigError(f"{path}:{number}: not a result record: {exc}") from exc
        if record.case_id in seen:
            # ``bench --out`` appends: two runs into one file are two runs, not one with
            # every case twice (a run holds one result per case)
            raise ConfigError(
                f"{path}:{number}: case {record.case_id} ({record.kernel}) again, first on "
                f"line {seen[record.case_id]}: one file is one run; split it, or keep one"
            )
        seen[record.case_id] = number
        records.append(record)
    if not records:
        raise ConfigError(f"{path}: no records")
    return records


def import_repository(session: Session, name: str) -> Repository:
    """The repository ``--repo NAME`` means: the one stored under that name (a library
    ``kernelwatch run`` measures here, whose records were taken on another machine), else
    the one whose source it is, else a new one. ``get_or_create_repository`` alone looks
    by source only: ``--repo tinykern`` for the records of the stored ``tinykern`` made a
    ``tinykern-6069`` beside it, and ``gate --repo tinykern`` never saw them (an audit)."""
    named = session.scalars(select(Repository).where(Repository.name == name)).first()
    return named if named is not None else get_or_create_repository(session, name, name)


def stored_sha(session: Session, repo: Repository, commit: str) -> str:
    """``commit`` as stored: the full sha of the one commit of ``repo`` a 7+ digit prefix
    names, else ``commit`` as given (a full sha, a new commit, a label); a prefix of several
    is refused. A prefix stored as a commit of its own beside its full sha made ``gate
    --sha PREFIX`` ambiguous."""
    if len(commit) >= 40 or not is_sha(commit):
        return commit
    found = session.scalars(
        select(Commit.sha)
        .where(Commit.repository_id == repo.id, Commit.sha.startswith(commit.lower()))
        .limit(2)
    ).all()
    if len(found) > 1:
        raise ConfigError(f"commit {commit} is ambiguous in {repo.name}: give more of its sha")
    return found[0] if found else commit


def judged_at(records: list[ResultRecord]) -> float | None:
    """The minimum effect a paired run's cases were decided at, when they share one.

    A paired record keeps the threshold its own measurement stopped at (a recipe's
    ``[thresholds]``, say 3 % for FlashAttention's builds). Imported, the run is judged
    at that threshold again, not the service default, so it reads as the gate that
    measured it read. Cases at different thresholds leave the default in force.
    """
    found = {r.paired.min_effect for r in records if r.paired is not None and r.paired.ratio}
    found.discard(None)
    return found.pop() if len(found) == 1 else None


def import_records(factory: sessionmaker[Session], settings: Settings, req: ImportRequest) -> int:
    """Store the records as one finished run of ``req.commit``; returns the run id."""
    records = read_records(req.path)
    suites = sorted({r.suite for r in records})
    now = req.measured_at or datetime.now(UTC)
    # Records of ``bench-paired`` carry their verdict measured interleaved with the
    # baseline; judging them against another run's samples would throw that away.
    paired = all(r.paired is not None for r in records)
    threshold = judged_at(records) if paired else None
    with factory() as session, session.begin():
        repo = import_repository(session, req.repository)
        sha = stored_sha(session, repo, req.commit)
        parent = None if req.parent is None else stored_sha(session, repo, req.parent)
        if parent is not None:
            exists = session.scalar(
                select(Commit.id).where(Commit.repository_id == repo.id, Commit.sha == parent)
            )
            if exists is None:
                raise ConfigError(f"parent {req.parent!r} is not a commit of {req.repository}")
        commit = upsert_commit(
            session,
            repo,
            sha,
            [parent] if parent else [],
            message=req.message or f"imported from {req.path.name}",
            committed_at=now,
        )
        run = Run(
            repository_id=repo.id,
            commit_id=commit.id,
            suites=suites,
            trigger="import",
            status="succeeded",
            device_class=req.device_class,
            queue="import",
            worker="import",
            baseline_sha=parent,
            options=RunOptions(
                imported_from=str(req.path),
                records=len(records),
                paired=paired,
                note=req.message or None,
                regression_threshold=threshold,
            ),
            created=now,
            started=now,
            finished=now,
        )
        session.add(run)
        session.flush()
        for record in records:
            store_record(session, run, record)
        session.flush()
        session.refresh(run)
        analyze_ready(session, run, settings)
        return run.id
