"""Runs choose the share of stage calls spot-checked against a second peer.

Revision ID: 0010_spot_checks
Revises: 0009_token_peer_limit
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_spot_checks"
down_revision = "0009_token_peer_limit"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("spot_check_fraction", sa.Double(), nullable=False, server_default="0.02"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("spot_check_fraction")
