"""the cards' timer self-tests

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08 10:00:00

``card_selftests``: one row per card and night of the A/A timer self-test
(``db/selftest.py``): the card (GPU UUID or ``cpu:<host>``), its class, the noise
figures and the A/A interval, and whether the rule flagged it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "card_selftests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("card", sa.String(length=255), nullable=False),
        sa.Column("device_class", sa.String(length=32), nullable=False),
        sa.Column("gpu_name", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("worker", sa.String(length=255), nullable=False),
        sa.Column("kernel", sa.String(length=64), nullable=False),
        sa.Column("cv", sa.Float(), nullable=True),
        sa.Column("sample_cv", sa.Float(), nullable=True),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("ci_low", sa.Float(), nullable=True),
        sa.Column("ci_high", sa.Float(), nullable=True),
        sa.Column("median_s", sa.Float(), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("baseline_cv", sa.Float(), nullable=True),
        sa.Column("flagged", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("detail", JSON, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_card_selftests_card_created", "card_selftests", ["card", "created"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_card_selftests_card_created", table_name="card_selftests")
    op.drop_table("card_selftests")
