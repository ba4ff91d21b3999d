"""Login throttling, and sessions that end when idle.

Revision ID: 0007_front_door
Revises: 0006_datasets
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_front_door"
down_revision = "0006_datasets"
branch_labels = None
depends_on = None

TZ_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "login_throttle",
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_failure_at", TZ_DATETIME, nullable=False),
        sa.Column("locked_until", TZ_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("key", name="pk_login_throttle"),
    )
    # Added empty, filled from created_at, then made required: SQLite cannot add a column whose
    # default is the current time.
    with op.batch_alter_table("auth_sessions") as batch:
        batch.add_column(sa.Column("last_seen_at", TZ_DATETIME, nullable=True))
    op.execute("UPDATE auth_sessions SET last_seen_at = created_at")
    with op.batch_alter_table("auth_sessions") as batch:
        batch.alter_column("last_seen_at", existing_type=TZ_DATETIME, nullable=False)
        batch.create_index("ix_auth_sessions_last_seen_at", ["last_seen_at"])


def downgrade() -> None:
    with op.batch_alter_table("auth_sessions") as batch:
        batch.drop_index("ix_auth_sessions_last_seen_at")
        batch.drop_column("last_seen_at")
    op.drop_table("login_throttle")
