"""Stage checkpoints: one row per (run, step, stage) file in the checkpoint directory.

Revision ID: 0002_checkpoints
Revises: 0001_initial
Create Date: 2025-01-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_checkpoints"
down_revision = "0001_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(1000), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_checkpoints"),
        sa.UniqueConstraint("run_id", "step", "stage", name="uq_checkpoints_run_id_step_stage"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_checkpoints_run_id_runs", ondelete="CASCADE"
        ),
    )


def downgrade() -> None:
    op.drop_table("checkpoints")
