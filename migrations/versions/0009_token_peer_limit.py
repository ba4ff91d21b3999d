"""Join tokens bound how many peers they may register.

Revision ID: 0009_token_peer_limit
Revises: 0008_checkpoint_requests
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_token_peer_limit"
down_revision = "0008_checkpoint_requests"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("join_tokens") as batch:
        batch.add_column(sa.Column("max_peers", sa.Integer(), nullable=False, server_default="32"))


def downgrade() -> None:
    with op.batch_alter_table("join_tokens") as batch:
        batch.drop_column("max_peers")
