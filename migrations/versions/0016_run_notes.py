"""Run tags, notes and archiving.

Revision ID: 0016_run_notes
Revises: 0014_ledger
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_run_notes"
down_revision = "0014_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("tags", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("notes", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("archived", sa.Boolean(), nullable=False, server_default=sa.false()))
    # Runs ended with the 'archive' status action were filed away as well.
    op.execute(sa.text("UPDATE runs SET archived = true WHERE status = 'archived'"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("archived")
        batch.drop_column("notes")
        batch.drop_column("tags")
