"""A bisection's state: the range, the steps taken, the culprit, the device time spent.

All of a bisection lives here, so any process can advance it and none has to stay
up for it (``jobs/planning/bisect_driver.py``): a worker restart loses nothing, the
steps are ordinary runs (paired runs of a step commit against a good build, with
``RunOptions.bisection_id`` set so they never decide a commit's gate result).

``commits`` is the first-parent list ``[good, ..., bad]`` read from git once when
the bisection starts; steps refer to commits by sha and the search (``jobs/planning/
bisect.py``) by index into it, so the answer never depends on the mirror again.

Status: ``running`` → ``found`` | ``not_found`` (nothing blamable, or the budget ran
out: ``reason`` says which) | ``cancelled`` | ``error``. This module stores and
finds; it decides nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, Float, ForeignKey, Index, Integer, String, Text, select
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship

from kernelwatch.db.models import Base, Repository
from kernelwatch.db.types import JSONType, datetime_now, datetime_opt, int_pk, long_text, sha

STATES = ("running", "found", "not_found", "cancelled", "error")
ACTIVE = "running"
# Device seconds a bisection may spend unless it is given a budget: a long evening of
# one GPU, far more than the 8 or so steps of a gate's suite take.
DEFAULT_BUDGET_S = 4 * 3600.0


class Bisection(Base):
    """One search for the first bad commit between ``good_sha`` and ``bad_sha``.

    case_pattern: comma-separated ``fnmatch`` patterns over kernel, ``kernel label``
      and case id; only matching cases judge a step ("" is every case).
    bench_args: the steps' runner arguments (``--kernel``, ``--pairs``, ``--budget``).
    culprit_*: the first confirmed culprit with its effect against its parent
      (ratio and interval of the confirmation run); ``culprits`` every one, oldest
      first, when a range held several steps.
    gpu_seconds / budget_s: device seconds the steps' runs held, and the limit.
    full_name: the GitHub repository to comment on (``owner/name``), if any;
      ``comment_sent``: the reporter posted the culprit comment.
    """

    __tablename__ = "bisections"
    __table_args__ = (Index("ix_bisections_range", "repository_id", "good_sha", "bad_sha"),)

    id: Mapped[int_pk]
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    good_sha: Mapped[sha]
    bad_sha: Mapped[sha]
    commits: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    case_pattern: Mapped[str] = mapped_column(Text, default="")
    device_class: Mapped[str] = mapped_column(String(32), default="cpu")
    suites: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    bench_args: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    trigger: Mapped[str] = mapped_column(String(32), default="manual")
    origin_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    establish: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(16), default=ACTIVE)
    reason: Mapped[long_text]
    culprit_sha: Mapped[str | None] = mapped_column(String(64))
    culprit_parent: Mapped[str | None] = mapped_column(String(64))
    culprit_ratio: Mapped[float | None] = mapped_column(Float)
    culprit_ci_low: Mapped[float | None] = mapped_column(Float)
    culprit_ci_high: Mapped[float | None] = mapped_column(Float)
    culprit_verdict: Mapped[str | None] = mapped_column(String(16))
    culprits: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    budget_s: Mapped[float | None] = mapped_column(Float)
    full_name: Mapped[str | None] = mapped_column(String(255))
    comment_sent: Mapped[bool] = mapped_column(Boolean, default=False)
    created: Mapped[datetime_now]
    finished: Mapped[datetime_opt]

    repository: Mapped[Repository] = relationship()
    steps: Mapped[list[BisectionStep]] = relationship(
        order_by="BisectionStep.position", cascade="all, delete-orphan"
    )

    def culprit(self) -> dict[str, Any] | None:
        """The culprit as ``kernelwatch bisect --json`` prints it (design.md)."""
        if self.culprit_sha is None:
            return None
        interval = (
            [self.culprit_ci_low, self.culprit_ci_high]
            if self.culprit_ci_low is not None and self.culprit_ci_high is not None
            else None
        )
        return {
            "sha": self.culprit_sha,
            "parent": self.culprit_parent,
            "ratio": self.culprit_ratio,
            "interval": interval,
            "verdict": self.culprit_verdict,
        }


class BisectionStep(Base):
    """One step: ``sha`` measured in paired mode against ``against_sha`` by run ``run_id``.

    purpose: establish | search | confirm | residual (``jobs/planning/bisect.py``).
    outcome: good | bad | skip once the run ended (None while it runs); ``verdict``
    the word shown for it (the worst matching case verdict, or the run's state when
    it did not build); ``seconds`` the device time its run held.
    """

    __tablename__ = "bisection_steps"

    id: Mapped[int_pk]
    bisection_id: Mapped[int] = mapped_column(ForeignKey("bisections.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    sha: Mapped[str] = mapped_column(String(64))  # the alias ``sha`` would be shadowed
    against_sha: Mapped[str] = mapped_column(String(64))
    purpose: Mapped[str] = mapped_column(String(16))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    outcome: Mapped[str | None] = mapped_column(String(8))
    verdict: Mapped[str | None] = mapped_column(String(16))
    seconds: Mapped[float] = mapped_column(Float, default=0.0)

    @property
    def skipped(self) -> bool:
        return self.outcome == "skip"


def active_for_range(
    session: Session,
    repository_id: int,
    good: str,
    bad: str,
    device_class: str,
    case_pattern: str,
) -> Bisection | None:
    """A running bisection of the same range, which a second request joins."""
    return session.scalars(
        select(Bisection)
        .where(
            Bisection.repository_id == repository_id,
            Bisection.good_sha == good,
            Bisection.bad_sha == bad,
            Bisection.device_class == device_class,
            Bisection.case_pattern == case_pattern,
            Bisection.status == ACTIVE,
        )
        .order_by(Bisection.id)
    ).first()


def active_ids(session: Session) -> list[int]:
    return list(
        session.scalars(
            select(Bisection.id).where(Bisection.status == ACTIVE).order_by(Bisection.id)
        )
    )


def of_run(session: Session, run_id: int) -> Bisection | None:
    """The bisection whose step ``run_id`` is (``kernelwatch show`` names it)."""
    return session.scalars(
        select(Bisection)
        .join(BisectionStep, BisectionStep.bisection_id == Bisection.id)
        .where(BisectionStep.run_id == run_id)
        .limit(1)
    ).first()


__all__ = [
    "ACTIVE",
    "DEFAULT_BUDGET_S",
    "STATES",
    "Bisection",
    "BisectionStep",
    "active_for_range",
    "active_ids",
    "of_run",
]
