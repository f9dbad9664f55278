"""github webhooks: deliveries, pull requests, run links, commit statuses

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 10:00:00

Tables of kernelwatch.db.github: ``github_deliveries`` (X-GitHub-Delivery dedup),
``github_pull_requests`` (head, merge-base, fork approval, the comment updated in
place), ``github_run_links`` (which runs answer which commit) and
``github_commit_statuses`` (the last status sent per context).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "github_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.String(length=64), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("full_name", sa.String(length=255), nullable=False),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("run_ids", JSON, nullable=False),
        sa.Column("received", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("delivery_id"),
    )
    op.create_table(
        "github_pull_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("full_name", sa.String(length=255), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("head_sha", sa.String(length=64), nullable=False),
        sa.Column("head_ref", sa.String(length=255), nullable=False),
        sa.Column("head_repo", sa.String(length=255), nullable=False),
        sa.Column("base_ref", sa.String(length=255), nullable=False),
        sa.Column("base_sha", sa.String(length=64), nullable=False),
        sa.Column("merge_base_sha", sa.String(length=64), nullable=True),
        sa.Column("fork", sa.Boolean(), nullable=False),
        sa.Column("author", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("approved_sha", sa.String(length=64), nullable=True),
        sa.Column("approved_by", sa.String(length=255), nullable=True),
        sa.Column("comment_id", sa.BigInteger(), nullable=True),
        sa.Column("comment_body", sa.Text(), nullable=False),
        sa.Column("updated", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("full_name", "number"),
    )
    op.create_table(
        "github_run_links",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("full_name", sa.String(length=255), nullable=False),
        sa.Column("sha", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("pr_number", sa.Integer(), nullable=True),
        sa.Column("done", sa.Boolean(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id"),
    )
    with op.batch_alter_table("github_run_links", schema=None) as batch_op:
        batch_op.create_index(
            "ix_github_run_links_done", ["done", "full_name", "sha"], unique=False
        )
        batch_op.create_index("ix_github_run_links_commit", ["full_name", "sha"], unique=False)
    op.create_table(
        "github_commit_statuses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("full_name", sa.String(length=255), nullable=False),
        sa.Column("sha", sa.String(length=64), nullable=False),
        sa.Column("context", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=False),
        sa.Column("target_url", sa.Text(), nullable=False),
        sa.Column("sent", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("full_name", "sha", "context"),
    )


def downgrade() -> None:
    op.drop_table("github_commit_statuses")
    with op.batch_alter_table("github_run_links", schema=None) as batch_op:
        batch_op.drop_index("ix_github_run_links_commit")
        batch_op.drop_index("ix_github_run_links_done")
    op.drop_table("github_run_links")
    op.drop_table("github_pull_requests")
    op.drop_table("github_deliveries")
