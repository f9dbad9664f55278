"""A dataset manifest: many record files imported as runs with one command.

``kernelwatch import docs/data/h200-dataset.toml`` loads every result-record file
measured on the H200 (``docs/data/``) so that a machine without a GPU shows real
trends on the dashboard. Each file's repository, commit, parent, device class,
card and measurement date live in the manifest, beside the files, instead of in a
README's shell lines that drift. The manifest names commits without records of
their own too (the baseline side of a paired file), with their real commit dates,
so trends are ordered as the repository's history is.

Checks that can fail: every file must validate as result records (the importer's
``read_records``), a file's records must have been measured on the card the
manifest names (where a record carries its GPU's UUID), and a parent must be a
commit of the manifest. Importing a manifest twice adds nothing: a run already
imported from the same file for the same commit is left as it is.

What this module does not do: parse records or judge runs (``importer.py`` and
``jobs/judging``), or decide what is in the dataset (the manifest does).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Commit, Run
from kernelwatch.db.store import upsert_commit
from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.planning.importer import (
    ImportRequest,
    import_records,
    import_repository,
    read_records,
)


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetCommit(_Table):
    """``[[commit]]``: a commit of a repository, stored before any run refers to it.

    committed: the commit's own date (the x axis of trends); parent: its first parent
    as far as the dataset knows it.
    """

    repo: str
    sha: str
    committed: date | datetime | None = None
    parent: str | None = None
    message: str = ""


class DatasetRun(_Table):
    """``[[run]]``: one JSON-lines file of result records, imported as one run.

    file: relative to the manifest. commit: a sha or a label; parent: the commit the
    run is compared with. card: the GPU's UUID (``GPU-…``) the records were measured
    on; measured: when (UTC). command: the command line that wrote the file (the
    driver's sub-command with its arguments, ``python -m benchmarks.gpu …``, or the
    one-off script of the days before the driver, named as such). note: what the
    file is, stored as the commit message when the manifest does not list the
    commit itself.
    """

    file: str
    repo: str
    commit: str
    device_class: str
    card: str
    measured: date | datetime
    command: str
    parent: str | None = None
    note: str = ""

    @model_validator(mode="after")
    def _relative(self) -> DatasetRun:
        path = Path(self.file)
        if path.is_absolute() or ".." in path.parts:
            raise ValueError(f"file {self.file!r} must be relative to the manifest, inside it")
        if not self.command.strip():
            raise ValueError(f"run {self.file}: command must name what made the file")
        return self


class Manifest(_Table):
    """The whole manifest: ``title``, ``[[commit]]`` tables, then ``[[run]]`` tables."""

    title: str = ""
    commit: tuple[DatasetCommit, ...] = ()
    run: tuple[DatasetRun, ...] = ()

    @model_validator(mode="after")
    def _parents_known(self) -> Manifest:
        known = {(c.repo, c.sha) for c in self.commit} | {(r.repo, r.commit) for r in self.run}
        for r in self.run:
            if r.parent is not None and (r.repo, r.parent) not in known:
                raise ValueError(
                    f"run {r.file}: parent {r.parent!r} is not a commit of the manifest"
                )
        return self


@dataclass(frozen=True)
class ImportedRun:
    """One manifest row after the import: its run id, and whether it was new."""

    file: str
    run_id: int
    created: bool


def load_manifest(path: Path) -> Manifest:
    """The manifest at ``path``, validated; every error names the file."""
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read dataset manifest {path}: {exc}") from exc
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: not a dataset manifest: {exc}") from exc


def check_cards(manifest: Manifest, root: Path) -> None:
    """Every record that names its GPU names the card its manifest row says."""
    for row in manifest.run:
        for number, record in enumerate(read_records(root / row.file), 1):
            uuid = record.device.get("uuid")
            if uuid and uuid != row.card:
                raise ConfigError(
                    f"{row.file}: record {number} was measured on {uuid}, "
                    f"the manifest says {row.card}"
                )


def import_dataset(
    factory: sessionmaker[Session], settings: Settings, path: Path
) -> list[ImportedRun]:
    """Import every run of the manifest at ``path`` in manifest order."""
    manifest = load_manifest(path)
    root = path.parent
    check_cards(manifest, root)
    with factory() as session, session.begin():
        for c in manifest.commit:
            repo = import_repository(session, c.repo)
            upsert_commit(
                session,
                repo,
                c.sha,
                [c.parent] if c.parent else [],
                message=c.message,
                committed_at=_utc(c.committed) if c.committed is not None else None,
            )
    done = []
    for row in manifest.run:
        existing = _imported(factory, row)
        if existing is not None:
            done.append(ImportedRun(row.file, existing, created=False))
            continue
        req = ImportRequest(
            path=root / row.file,
            repository=row.repo,
            commit=row.commit,
            device_class=row.device_class,
            parent=row.parent,
            message=row.note,
            measured_at=_utc(row.measured),
        )
        done.append(ImportedRun(row.file, import_records(factory, settings, req), created=True))
    return done


def _imported(factory: sessionmaker[Session], row: DatasetRun) -> int | None:
    """The run an earlier import of this row made, if any."""
    with factory() as session:
        for run in session.scalars(
            select(Run)
            .join(Commit, Run.commit_id == Commit.id)
            .where(
                Commit.sha == row.commit,
                Run.trigger == "import",
                Run.device_class == row.device_class,
            )
        ):
            source = run.options.imported_from
            if (
                run.repository.name == row.repo
                and source
                and Path(source).name == Path(row.file).name
            ):
                return run.id
    return None


def _utc(value: date | datetime) -> datetime:
    if not isinstance(value, datetime):
        value = datetime.combine(value, time(), UTC)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


__all__ = [
    "DatasetCommit",
    "DatasetRun",
    "ImportedRun",
    "Manifest",
    "check_cards",
    "import_dataset",
    "load_manifest",
]
