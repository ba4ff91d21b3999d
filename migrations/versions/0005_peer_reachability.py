"""Peers on other hosts: their data-plane certificate, what the coordinator's probe found, their link rates.

Revision ID: 0005_peer_reachability
Revises: 0004_step_updates
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_peer_reachability"
down_revision = "0004_step_updates"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("peers") as batch:
        batch.alter_column("address", existing_type=sa.String(200), type_=sa.String(270))
        batch.add_column(sa.Column("tls_fingerprint", sa.String(64), nullable=False, server_default=""))
        batch.add_column(sa.Column("reachable", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("link_rates", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("peers") as batch:
        batch.drop_column("link_rates")
        batch.drop_column("reachable")
        batch.drop_column("tls_fingerprint")
        batch.alter_column("address", existing_type=sa.String(270), type_=sa.String(200))
