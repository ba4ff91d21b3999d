"""Contribution ledger per peer.

Revision ID: 0014_ledger
Revises: 0013_webhooks
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_ledger"
down_revision = "0013_webhooks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "peer_ledger",
        sa.Column("peer_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("view_token_hash", sa.String(64), nullable=True),
        sa.Column("samples_trained", sa.BigInteger(), nullable=False),
        sa.Column("calls_served", sa.BigInteger(), nullable=False),
        sa.Column("samples_served", sa.BigInteger(), nullable=False),
        sa.Column("compute_s", sa.Double(), nullable=False),
        sa.Column("bytes_moved", sa.BigInteger(), nullable=False),
        sa.Column("uptime_s", sa.Double(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("peer_id", name="pk_peer_ledger"),
        sa.UniqueConstraint("view_token_hash", name="uq_peer_ledger_view_token_hash"),
        sa.ForeignKeyConstraint(
            ["peer_id"], ["peers.id"], name="fk_peer_ledger_peer_id_peers", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_peer_ledger_run_id_runs", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_peer_ledger_run_id", "peer_ledger", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_peer_ledger_run_id", table_name="peer_ledger")
    op.drop_table("peer_ledger")
