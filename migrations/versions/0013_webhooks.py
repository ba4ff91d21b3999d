"""Run webhooks and their delivery log.

Revision ID: 0013_webhooks
Revises: 0012_accounts
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_webhooks"
down_revision = "0012_accounts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_webhooks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(2000), nullable=False),
        sa.Column("secret", sa.String(64), nullable=False),
        sa.Column("kinds", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_run_webhooks"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_run_webhooks_run_id_runs", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name="fk_run_webhooks_created_by_users", ondelete="SET NULL"
        ),
    )
    op.create_index("ix_run_webhooks_run_id", "run_webhooks", ["run_id"])
    op.create_index("ix_run_webhooks_created_by", "run_webhooks", ["created_by"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("webhook_id", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(500), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
        sa.UniqueConstraint("webhook_id", "event_id", name="uq_webhook_deliveries_webhook_id_event_id"),
        sa.CheckConstraint(
            "state IN ('pending', 'delivered', 'failed', 'cancelled')", name="ck_webhook_deliveries_state"
        ),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["run_webhooks.id"],
            name="fk_webhook_deliveries_webhook_id_run_webhooks",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["event_id"], ["events.id"], name="fk_webhook_deliveries_event_id_events", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_webhook_deliveries_event_id", "webhook_deliveries", ["event_id"])
    op.create_index(
        "ix_webhook_deliveries_state_next_attempt_at", "webhook_deliveries", ["state", "next_attempt_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_state_next_attempt_at", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_event_id", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_run_webhooks_created_by", table_name="run_webhooks")
    op.drop_index("ix_run_webhooks_run_id", table_name="run_webhooks")
    op.drop_table("run_webhooks")
