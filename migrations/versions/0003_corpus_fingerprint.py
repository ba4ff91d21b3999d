"""Runs remember the fingerprint of their dataset as the first peer read it.

Revision ID: 0003_corpus_fingerprint
Revises: 0002_checkpoints
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_corpus_fingerprint"
down_revision = "0002_checkpoints"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("corpus_fingerprint", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("corpus_fingerprint")
