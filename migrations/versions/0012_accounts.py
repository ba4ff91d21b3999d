"""Accounts: single-use invitation and password-reset links.

Revision ID: 0012_accounts
Revises: 0011_verifier_tokens
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_accounts"
down_revision = "0011_verifier_tokens"
branch_labels = None
depends_on = None

TZ_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "invitations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", TZ_DATETIME, nullable=False),
        sa.Column("expires_at", TZ_DATETIME, nullable=False),
        sa.Column("used_at", TZ_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_invitations"),
        sa.UniqueConstraint("token_hash", name="uq_invitations_token_hash"),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_invitations_user_id_users", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name="fk_invitations_created_by_users", ondelete="SET NULL"
        ),
        sa.CheckConstraint("purpose IN ('invite', 'reset')", name="ck_invitations_purpose"),
        sa.CheckConstraint("role IN ('owner', 'admin')", name="ck_invitations_role"),
    )
    op.create_index("ix_invitations_user_id", "invitations", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_invitations_user_id", table_name="invitations")
    op.drop_table("invitations")
