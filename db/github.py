"""GitHub state: deliveries seen, pull requests, which runs answer which commit, statuses sent.

The webhook layer writes these rows; the reporter reads them to know where a
finished run's verdict must go (a commit status per GPU class, one PR comment).

- :class:`WebhookDelivery`: one row per verified ``X-GitHub-Delivery`` id, unique,
  so a redelivered or replayed event is recognised and never planned twice.
- :class:`PullRequest`: the last known head, base and merge-base of a pull request,
  whether it comes from a fork and who approved which head commit, and the id of
  kernelwatch's comment on it (updated in place).
- :class:`RunLink`: a run planned because of an event: the repository's GitHub name,
  the commit the status belongs to, its role (``candidate`` runs get statuses,
  ``baseline`` runs are measured for comparison only), ``done`` once reported final.
- :class:`CommitStatus`: the last status sent per (repository, commit, context), so an
  unchanged state is not sent again.
- :class:`Approval`: the signed ``labeled`` delivery that approved a fork's head
  commit, kept byte for byte with its ``X-Hub-Signature-256``. Approval is decided by
  re-verifying that signature (code that can write rows cannot sign), never by a
  field of this or any other row (see docs/github.md).

Functions take an explicit session and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from kernelwatch.db.models import Base
from kernelwatch.db.types import JSONType, datetime_now, datetime_opt, int_pk, long_text, utcnow

LINK_ROLES = ("candidate", "baseline")
STATUS_STATES = ("pending", "success", "failure", "error")


class WebhookDelivery(Base):
    """A verified delivery; ``outcome`` says what became of it."""

    __tablename__ = "github_deliveries"

    id: Mapped[int_pk]
    delivery_id: Mapped[str] = mapped_column(String(64), unique=True)
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64), default="")
    full_name: Mapped[str] = mapped_column(String(255), default="")
    # processing | planned | ignored | awaiting_approval | config_error | error | pong
    outcome: Mapped[str] = mapped_column(String(32), default="processing")
    detail: Mapped[long_text]
    run_ids: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    received: Mapped[datetime_now]


class PullRequest(Base):
    """The last known state of one pull request of a watched repository."""

    __tablename__ = "github_pull_requests"
    __table_args__ = (UniqueConstraint("full_name", "number"),)

    id: Mapped[int_pk]
    full_name: Mapped[str] = mapped_column(String(255))
    number: Mapped[int] = mapped_column(Integer)
    head_sha: Mapped[str] = mapped_column(String(64))
    head_ref: Mapped[str] = mapped_column(String(255), default="")
    head_repo: Mapped[str] = mapped_column(String(255), default="")
    base_ref: Mapped[str] = mapped_column(String(255), default="")
    base_sha: Mapped[str] = mapped_column(String(64), default="")
    merge_base_sha: Mapped[str | None] = mapped_column(String(64))
    fork: Mapped[bool] = mapped_column(Boolean, default=False)
    author: Mapped[str] = mapped_column(String(255), default="")
    state: Mapped[str] = mapped_column(String(16), default="open")
    # ``pull_request.updated_at`` of the event that last moved the head: an older
    # delivery arriving late cannot move it back.
    head_event_at: Mapped[datetime_opt]
    # Shown to people only; approval is decided from Approval rows' signatures.
    approved_sha: Mapped[str | None] = mapped_column(String(64))
    approved_by: Mapped[str | None] = mapped_column(String(255))
    # GitHub comment ids outgrow 32 bits.
    comment_id: Mapped[int | None] = mapped_column(BigInteger)
    comment_body: Mapped[long_text]
    updated: Mapped[datetime_now] = mapped_column(onupdate=utcnow)


class RunLink(Base):
    """A run planned for a GitHub event, and whether its final state was reported."""

    __tablename__ = "github_run_links"
    __table_args__ = (
        Index("ix_github_run_links_done", "done", "full_name", "sha"),
        Index("ix_github_run_links_commit", "full_name", "sha"),
    )

    id: Mapped[int_pk]
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    full_name: Mapped[str] = mapped_column(String(255))
    sha: Mapped[str] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16), default="candidate")
    event: Mapped[str] = mapped_column(String(32), default="push")
    pr_number: Mapped[int | None] = mapped_column(Integer)
    done: Mapped[bool] = mapped_column(Boolean, default=False)
    created: Mapped[datetime_now]


class CommitStatus(Base):
    """The last commit status sent for one context of one commit."""

    __tablename__ = "github_commit_statuses"
    __table_args__ = (UniqueConstraint("full_name", "sha", "context"),)

    id: Mapped[int_pk]
    full_name: Mapped[str] = mapped_column(String(255))
    sha: Mapped[str] = mapped_column(String(64))
    context: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16))
    description: Mapped[str] = mapped_column(String(255), default="")
    target_url: Mapped[long_text]
    sent: Mapped[datetime_now] = mapped_column(onupdate=utcnow)


class Approval(Base):
    """A signed ``labeled`` delivery that approved one head commit of a fork's PR.

    ``body`` and ``signature`` are what GitHub sent; the other columns only find the
    row. Whoever reads an approval re-verifies the signature and the body's fields.
    """

    __tablename__ = "github_approvals"
    __table_args__ = (Index("ix_github_approvals_pr", "full_name", "number", "sha"),)

    id: Mapped[int_pk]
    delivery_id: Mapped[str] = mapped_column(String(64), unique=True)
    full_name: Mapped[str] = mapped_column(String(255))
    number: Mapped[int] = mapped_column(Integer)
    sha: Mapped[str] = mapped_column(String(64))
    approved_by: Mapped[str] = mapped_column(String(255))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    signature: Mapped[str] = mapped_column(String(80))
    received: Mapped[datetime_now]


__all__ = [
    "LINK_ROLES",
    "Approval",
    "STATUS_STATES",
    "CommitStatus",
    "PullRequest",
    "RunLink",
    "WebhookDelivery",
]
