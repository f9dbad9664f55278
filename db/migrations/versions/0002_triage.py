"""triage events and dashboard indexes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 12:00:00

``triage_events`` is the audit trail of regression triage (kernelwatch.db.triage).
The indexes serve the dashboard's access paths:

- ``ix_runs_repo_device_id``: a repository's newest runs (run list filtered by
  repository, the cases measured recently for the trend selectors).
- ``ix_runs_worker_started``: the fleet view (runs per worker, last activity).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "triage_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("regression_id", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=False),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("who", sa.String(length=255), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["regression_id"], ["regressions.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("triage_events", schema=None) as batch_op:
        batch_op.create_index(
            "ix_triage_events_regression", ["regression_id", "created"], unique=False
        )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_runs_repo_device_id", ["repository_id", "device_class", "id"], unique=False
        )
        batch_op.create_index("ix_runs_worker_started", ["worker", "started"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_worker_started")
        batch_op.drop_index("ix_runs_repo_device_id")
    with op.batch_alter_table("triage_events", schema=None) as batch_op:
        batch_op.drop_index("ix_triage_events_regression")
    op.drop_table("triage_events")
