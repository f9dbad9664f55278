"""bisections and their steps

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 10:00:00

``bisections`` holds a search for the first bad commit of a range (``db/bisect.py``):
the first-parent commit list, the case pattern, status, culprit and effect, the
device seconds spent and the budget; ``bisection_steps`` its steps, each an ordinary
run (paired, marked with ``RunOptions.bisection_id``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "bisections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repository_id", sa.Integer(), nullable=False),
        sa.Column("good_sha", sa.String(length=64), nullable=False),
        sa.Column("bad_sha", sa.String(length=64), nullable=False),
        sa.Column("commits", JSON, nullable=False),
        sa.Column("case_pattern", sa.Text(), nullable=False),
        sa.Column("device_class", sa.String(length=32), nullable=False),
        sa.Column("suites", JSON, nullable=False),
        sa.Column("bench_args", JSON, nullable=False),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("origin_run_id", sa.Integer(), nullable=True),
        sa.Column("establish", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("culprit_sha", sa.String(length=64), nullable=True),
        sa.Column("culprit_parent", sa.String(length=64), nullable=True),
        sa.Column("culprit_ratio", sa.Float(), nullable=True),
        sa.Column("culprit_ci_low", sa.Float(), nullable=True),
        sa.Column("culprit_ci_high", sa.Float(), nullable=True),
        sa.Column("culprit_verdict", sa.String(length=16), nullable=True),
        sa.Column("culprits", JSON, nullable=False),
        sa.Column("gpu_seconds", sa.Float(), nullable=False),
        sa.Column("budget_s", sa.Float(), nullable=True),
        sa.Column("full_name", sa.String(length=255), nullable=True),
        sa.Column("comment_sent", sa.Boolean(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["origin_run_id"], ["runs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("bisections", schema=None) as batch_op:
        batch_op.create_index(
            "ix_bisections_range", ["repository_id", "good_sha", "bad_sha"], unique=False
        )
    op.create_table(
        "bisection_steps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("bisection_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("sha", sa.String(length=64), nullable=False),
        sa.Column("against_sha", sa.String(length=64), nullable=False),
        sa.Column("purpose", sa.String(length=16), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(length=8), nullable=True),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["bisection_id"], ["bisections.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("bisection_steps")
    with op.batch_alter_table("bisections", schema=None) as batch_op:
        batch_op.drop_index("ix_bisections_range")
    op.drop_table("bisections")
