"""worker heartbeats

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 12:20:00

``worker_heartbeats``: one row per worker process (kernelwatch.db.fleet).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "worker_heartbeats",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("queues", sa.String(length=255), nullable=False),
        sa.Column("device_class", sa.String(length=32), nullable=False),
        sa.Column("gpu_name", sa.String(length=255), nullable=False),
        sa.Column("gpu_uuid", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("current_run_id", sa.Integer(), nullable=True),
        sa.Column("sm_mhz", sa.Integer(), nullable=True),
        sa.Column(
            "versions",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("started", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["current_run_id"], ["runs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("worker_heartbeats")
