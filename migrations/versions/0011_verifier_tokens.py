"""Join tokens for trusted verifier peers; peers remember whether they are one.

Revision ID: 0011_verifier_tokens
Revises: 0010_spot_checks
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_verifier_tokens"
down_revision = "0010_spot_checks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("join_tokens") as batch:
        batch.add_column(sa.Column("verifier", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("peers") as batch:
        batch.add_column(sa.Column("trusted", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("peers") as batch:
        batch.drop_column("trusted")
    with op.batch_alter_table("join_tokens") as batch:
        batch.drop_column("verifier")
