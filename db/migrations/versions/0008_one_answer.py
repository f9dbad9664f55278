"""one answer per commit: per-case baselines, one regression row per problem

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 10:00:00

``results.baseline_result_id``: the baseline result each case was compared with,
chosen per case (a run of the baseline commit that measured it). ``regressions``
gains its problem key (repository, GPU class, culprit range ``good_sha..bad_sha`` with
their first-parent sequences, ``on_history``) and ``regression_evidence`` holds every
run that found the same problem again. Existing rows are filled from their run: each
becomes a problem with itself as its one piece of evidence.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("baseline_result_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            "fk_results_baseline_result", "results", ["baseline_result_id"], ["id"],
            ondelete="SET NULL",
        )  # fmt: skip
    with op.batch_alter_table("regressions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("repository_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("device_class", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("good_sha", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("bad_sha", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("good_sequence", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("bad_sequence", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("on_history", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.create_foreign_key(
            "fk_regressions_repository", "repositories", ["repository_id"], ["id"],
            ondelete="CASCADE",
        )  # fmt: skip
        batch_op.create_index(
            "ix_regressions_problem", ["repository_id", "device_class", "case_id"], unique=False
        )
    op.create_table(
        "regression_evidence",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("regression_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("good_sha", sa.String(length=64), nullable=True),
        sa.Column("bad_sha", sa.String(length=64), nullable=True),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("ratio_ci_low", sa.Float(), nullable=True),
        sa.Column("ratio_ci_high", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["regression_id"], ["regressions.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("regression_id", "run_id", "kind"),
    )
    with op.batch_alter_table("regression_evidence", schema=None) as batch_op:
        batch_op.create_index("ix_regression_evidence_run", ["run_id"], unique=False)
    _backfill()


def _backfill() -> None:
    """Every existing row becomes a problem keyed from its run, with itself as evidence."""
    op.execute(
        """
        UPDATE regressions SET
          repository_id = (SELECT runs.repository_id FROM runs WHERE runs.id = regressions.run_id),
          device_class = (SELECT runs.device_class FROM runs WHERE runs.id = regressions.run_id),
          bad_sha = (SELECT commits.sha FROM runs JOIN commits ON commits.id = runs.commit_id
                     WHERE runs.id = regressions.run_id),
          bad_sequence = (SELECT commits.sequence FROM runs
                          JOIN commits ON commits.id = runs.commit_id
                          WHERE runs.id = regressions.run_id),
          good_sha = (SELECT runs.baseline_sha FROM runs WHERE runs.id = regressions.run_id)
        """
    )
    op.execute(
        """
        INSERT INTO regression_evidence
          (regression_id, run_id, kind, source, good_sha, bad_sha, ratio, ratio_ci_low,
           ratio_ci_high, p_value, detail, created)
        SELECT id, run_id, kind, 'gate', good_sha, bad_sha, ratio, ratio_ci_low,
               ratio_ci_high, p_value, detail, created
        FROM regressions
        """
    )


def downgrade() -> None:
    with op.batch_alter_table("regression_evidence", schema=None) as batch_op:
        batch_op.drop_index("ix_regression_evidence_run")
    op.drop_table("regression_evidence")
    with op.batch_alter_table("regressions", schema=None) as batch_op:
        batch_op.drop_index("ix_regressions_problem")
        batch_op.drop_constraint("fk_regressions_repository", type_="foreignkey")
        for column in (
            "on_history",
            "bad_sequence",
            "good_sequence",
            "bad_sha",
            "good_sha",
            "device_class",
            "repository_id",
        ):
            batch_op.drop_column(column)
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_constraint("fk_results_baseline_result", type_="foreignkey")
        batch_op.drop_column("baseline_result_id")
