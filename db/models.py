"""The schema: repositories, commits, runs, cases, results, regressions.

A *run* measures one commit (or released version) of one repository with some
suites on one device class. Its *results* are one row per case, holding the full
result record (raw samples included) plus the columns queries need, and the
baseline result each was compared with. A *regression* row is one problem worth a
human's attention (a case that got slower with confidence, lost accuracy or broke)
in one repository, GPU class and culprit range; every run that saw it again (a
re-run, a bisection step, a re-measure, the history's change point) is *evidence*
attached to that one row (:class:`RegressionEvidence`), never a row of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, validates

from kernelwatch.db.run_options import RunOptions, RunOptionsType
from kernelwatch.db.types import (
    JSONType,
    datetime_now,
    datetime_opt,
    int_pk,
    json_dict,
    long_text,
    sha,
    short_text,
)
from kernelwatch.kernels.verdict import CaseVerdict, RunVerdict

RUN_STATES = ("queued", "running", "succeeded", "failed", "error", "cancelled")
FINAL_STATES = ("succeeded", "failed", "error", "cancelled")
# The words are defined once, in the rule's module; the database stores what it defines.
CASE_VERDICTS = tuple(v.value for v in CaseVerdict)
RUN_VERDICTS = tuple(v.value for v in RunVerdict)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONType, list[Any]: JSONType}


class Repository(Base):
    """A kernel library we watch: a git URL or local path."""

    __tablename__ = "repositories"

    id: Mapped[int_pk]
    name: Mapped[short_text] = mapped_column(unique=True)
    source: Mapped[str] = mapped_column(Text)
    default_branch: Mapped[str] = mapped_column(String(255), default="main")
    created: Mapped[datetime_now]

    commits: Mapped[list[Commit]] = relationship(back_populates="repository")


class Commit(Base):
    """A commit of a repository; parents kept by sha (they may not be measured)."""

    __tablename__ = "commits"
    __table_args__ = (UniqueConstraint("repository_id", "sha"),)

    id: Mapped[int_pk]
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    sha: Mapped[sha]
    message: Mapped[long_text]
    author: Mapped[str] = mapped_column(String(255), default="")
    committed_at: Mapped[datetime_opt]
    # Position in the repository's first-parent order, for plotting x in commit order.
    sequence: Mapped[int | None] = mapped_column(Integer)

    repository: Mapped[Repository] = relationship(back_populates="commits")
    parents: Mapped[list[CommitParent]] = relationship(
        order_by="CommitParent.position", cascade="all, delete-orphan"
    )

    @property
    def first_parent(self) -> str | None:
        return self.parents[0].parent_sha if self.parents else None


class CommitParent(Base):
    __tablename__ = "commit_parents"

    commit_id: Mapped[int] = mapped_column(
        ForeignKey("commits.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    parent_sha: Mapped[sha]


class Run(Base):
    """One measurement job: a commit or version, suites, a device class; a lifecycle.

    status: queued → running → succeeded | failed | error (| cancelled).
    ``failed`` means the job ran but the library could not be built or installed;
    ``error`` means kernelwatch could not do the job (bad source, missing commit).
    verdict: pass | fail | neutral | error once analysed (``kernels/verdict.py``).
    """

    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_repo_commit", "repository_id", "commit_id"),
        Index("ix_runs_status_created", "status", "created"),
        # dashboard access paths (migration 0002)
        Index("ix_runs_repo_device_id", "repository_id", "device_class", "id"),
        Index("ix_runs_worker_started", "worker", "started"),
    )

    id: Mapped[int_pk]
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    commit_id: Mapped[int | None] = mapped_column(ForeignKey("commits.id", ondelete="CASCADE"))
    version_spec: Mapped[str | None] = mapped_column(String(255))
    suites: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    trigger: Mapped[str] = mapped_column(String(32), default="manual")
    status: Mapped[str] = mapped_column(String(16), default="queued")
    verdict: Mapped[str | None] = mapped_column(String(16))
    baseline_sha: Mapped[str | None] = mapped_column(String(64))
    baseline_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    device_class: Mapped[str] = mapped_column(String(32), default="cpu")
    queue: Mapped[str] = mapped_column(String(64), default="cpu")
    worker: Mapped[str | None] = mapped_column(String(255))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # what the run was asked to do and noted on the way (db/run_options.py); JSON column
    options: Mapped[RunOptions] = mapped_column(RunOptionsType, default=RunOptions)
    created: Mapped[datetime_now]
    started: Mapped[datetime_opt]
    finished: Mapped[datetime_opt]
    error: Mapped[long_text]
    build_log: Mapped[long_text]

    repository: Mapped[Repository] = relationship()
    commit: Mapped[Commit | None] = relationship()
    results: Mapped[list[Result]] = relationship(back_populates="run", cascade="all, delete-orphan")

    @validates("options")
    def _typed_options(self, _key: str, value: RunOptions | Mapping[str, Any]) -> RunOptions:
        """Whatever is assigned is checked here: an unknown key fails at its writer."""
        return RunOptions.parse(value)


class Case(Base):
    """The stored row of a case id: kernel + backend + canonical params, by their stable hash.

    Not ``kernels.suite.CaseSpec`` (a case of a suite, with the callables that run
    it); its ``params`` are a ``kernels.record.CaseParams``.
    """

    __tablename__ = "cases"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    suite: Mapped[short_text]
    kernel: Mapped[short_text]
    backend: Mapped[short_text]
    params: Mapped[json_dict]
    label: Mapped[str] = mapped_column(Text, default="")


class Result(Base):
    """One case's outcome in one run: the full record plus the columns queries need.

    Unique per (run, case): a re-delivered task cannot store a case twice.
    """

    __tablename__ = "results"
    __table_args__ = (
        UniqueConstraint("run_id", "case_id"),
        Index("ix_results_case", "case_id", "run_id"),
    )

    id: Mapped[int_pk]
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    case_id: Mapped[str] = mapped_column(ForeignKey("cases.id"))
    status: Mapped[str] = mapped_column(String(16))
    median_s: Mapped[float | None] = mapped_column(Float)
    ci_low_s: Mapped[float | None] = mapped_column(Float)
    ci_high_s: Mapped[float | None] = mapped_column(Float)
    n_samples: Mapped[int] = mapped_column(Integer, default=0)
    samples: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    tflops: Mapped[float | None] = mapped_column(Float)
    gbps: Mapped[float | None] = mapped_column(Float)
    reliable: Mapped[bool] = mapped_column(Boolean, default=True)
    device_name: Mapped[str] = mapped_column(String(255), default="")
    error: Mapped[long_text]
    log_tail: Mapped[long_text]
    record: Mapped[json_dict]
    # Comparison with the baseline run, filled by analysis.
    verdict: Mapped[str | None] = mapped_column(String(16))
    ratio: Mapped[float | None] = mapped_column(Float)
    ratio_ci_low: Mapped[float | None] = mapped_column(Float)
    ratio_ci_high: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    # The result of the baseline commit this case was compared with (chosen per case,
    # ``jobs/judging/baselines.py``); None for a paired case (both sides in this record)
    # or a case with nothing to compare with.
    baseline_result_id: Mapped[int | None] = mapped_column(
        ForeignKey("results.id", ondelete="SET NULL")
    )
    created: Mapped[datetime_now]

    run: Mapped[Run] = relationship(back_populates="results")
    case: Mapped[Case] = relationship()


class Regression(Base):
    """One problem: a case of a repository that got slower, lost accuracy or broke on one
    GPU class, somewhere in the culprit range ``good_sha..bad_sha``.

    ``run_id`` is the run that first found it; every later finding of the same problem
    (a re-run of the commit, a bisection step or confirmation inside the range, the
    history's change point) attaches as :class:`RegressionEvidence` and narrows the range
    to where all of them agree (``jobs/judging/problems.py``). ``on_history``: the range
    lies on the branch's first-parent line (sequences comparable), not a pull request's.
    ``kind``: regression | less_accurate | broken | changepoint (the worst seen).
    """

    __tablename__ = "regressions"
    __table_args__ = (
        UniqueConstraint("run_id", "case_id"),
        Index("ix_regressions_state_created", "state", "created"),
        Index("ix_regressions_problem", "repository_id", "device_class", "case_id"),
    )

    id: Mapped[int_pk]
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    baseline_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    case_id: Mapped[str] = mapped_column(ForeignKey("cases.id"))
    kind: Mapped[str] = mapped_column(String(16))  # regression | less_accurate | broken | ...
    ratio: Mapped[float | None] = mapped_column(Float)
    ratio_ci_low: Mapped[float | None] = mapped_column(Float)
    ratio_ci_high: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    detail: Mapped[long_text]
    state: Mapped[str] = mapped_column(String(16), default="open")
    created: Mapped[datetime_now]
    # the problem's key: repository, GPU class, case and culprit range (migration 0007)
    repository_id: Mapped[int | None] = mapped_column(
        ForeignKey("repositories.id", ondelete="CASCADE")
    )
    device_class: Mapped[str | None] = mapped_column(String(32))
    good_sha: Mapped[str | None] = mapped_column(String(64))
    bad_sha: Mapped[str | None] = mapped_column(String(64))
    good_sequence: Mapped[int | None] = mapped_column(Integer)
    bad_sequence: Mapped[int | None] = mapped_column(Integer)
    on_history: Mapped[bool] = mapped_column(Boolean, default=False)

    run: Mapped[Run] = relationship(foreign_keys=[run_id])
    case: Mapped[Case] = relationship()
    evidence: Mapped[list[RegressionEvidence]] = relationship(
        back_populates="regression",
        cascade="all, delete-orphan",
        order_by="RegressionEvidence.id",
    )


class RegressionEvidence(Base):
    """One run's finding of a problem: its verdict, ratio and interval, and what kind of
    run saw it (``source``: gate | manual | bisection | history)."""

    __tablename__ = "regression_evidence"
    __table_args__ = (
        UniqueConstraint("regression_id", "run_id", "kind"),
        Index("ix_regression_evidence_run", "run_id"),
    )

    id: Mapped[int_pk]
    regression_id: Mapped[int] = mapped_column(ForeignKey("regressions.id", ondelete="CASCADE"))
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(String(16), default="gate")
    good_sha: Mapped[str | None] = mapped_column(String(64))
    bad_sha: Mapped[str | None] = mapped_column(String(64))
    ratio: Mapped[float | None] = mapped_column(Float)
    ratio_ci_low: Mapped[float | None] = mapped_column(Float)
    ratio_ci_high: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    detail: Mapped[long_text]
    created: Mapped[datetime_now]

    regression: Mapped[Regression] = relationship(back_populates="evidence")
    run: Mapped[Run] = relationship()


__all__ = [
    "Base",
    "Case",
    "Commit",
    "CommitParent",
    "Regression",
    "RegressionEvidence",
    "Repository",
    "Result",
    "Run",
    "RUN_STATES",
    "FINAL_STATES",
    "CASE_VERDICTS",
    "RUN_VERDICTS",
    "datetime",
]
