"""signed approvals, PR head event time, pending sends

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 09:00:00

``github_approvals`` keeps the signed ``labeled`` delivery that approved a fork's
head commit (body and signature, re-verified whenever approval is decided), and
``github_pull_requests.head_event_at`` the ``updated_at`` of the event that last
moved a pull request's head, so a late, older delivery cannot move it back.
``run_pending_sends`` is the planner's outbox: runs committed whose message the
broker has not taken yet (``db/outbox.py``), re-sent by the reconciler.
Commit order needs no column: ``commits.sequence`` now holds the first-parent
depth from git (``db/store.py:upsert_commit``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "github_approvals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.String(length=64), nullable=False),
        sa.Column("full_name", sa.String(length=255), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("sha", sa.String(length=64), nullable=False),
        sa.Column("approved_by", sa.String(length=255), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("signature", sa.String(length=80), nullable=False),
        sa.Column("received", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("delivery_id"),
    )
    with op.batch_alter_table("github_approvals", schema=None) as batch_op:
        batch_op.create_index(
            "ix_github_approvals_pr", ["full_name", "number", "sha"], unique=False
        )
    op.create_table(
        "run_pending_sends",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("queue", sa.String(length=64), nullable=False),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id"),
    )
    with op.batch_alter_table("github_pull_requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("head_event_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_table("run_pending_sends")
    with op.batch_alter_table("github_pull_requests", schema=None) as batch_op:
        batch_op.drop_column("head_event_at")
    with op.batch_alter_table("github_approvals", schema=None) as batch_op:
        batch_op.drop_index("ix_github_approvals_pr")
    op.drop_table("github_approvals")
