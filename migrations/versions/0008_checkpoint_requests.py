"""Checkpoint requests: which peer the coordinator asked for which stage at which step.

Revision ID: 0008_checkpoint_requests
Revises: 0007_front_door
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_checkpoint_requests"
down_revision = "0007_front_door"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "checkpoint_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("peer_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_checkpoint_requests"),
        sa.UniqueConstraint(
            "run_id", "step", "stage", "peer_id", name="uq_checkpoint_requests_run_id_step_stage_peer_id"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_checkpoint_requests_run_id_runs", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["peer_id"], ["peers.id"], name="fk_checkpoint_requests_peer_id_peers", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_checkpoint_requests_peer_id", "checkpoint_requests", ["peer_id"])


def downgrade() -> None:
    op.drop_index("ix_checkpoint_requests_peer_id", table_name="checkpoint_requests")
    op.drop_table("checkpoint_requests")
