"""Steps record each stage's update (learning rate, clipping factor, averaging attempt).

A coordinator restarted after recording a step but before every peer applied it re-sends that
update to the peers still holding the step's averaged gradient.

Revision ID: 0004_step_updates
Revises: 0003_corpus_fingerprint
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_step_updates"
down_revision = "0003_corpus_fingerprint"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        batch.add_column(sa.Column("learning_rate", sa.Double(), nullable=True))
        batch.add_column(sa.Column("grad_scale", sa.Double(), nullable=True))
        batch.add_column(sa.Column("attempts", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        batch.drop_column("attempts")
        batch.drop_column("grad_scale")
        batch.drop_column("learning_rate")
