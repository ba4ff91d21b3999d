"""Datasets the coordinator holds; runs name one by id instead of a path on the peers' machines.

Revision ID: 0006_datasets
Revises: 0005_peer_reachability
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_datasets"
down_revision = "0005_peer_reachability"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("shards", sa.Integer(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_datasets_owner_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
        sa.UniqueConstraint("owner_id", "digest", name=op.f("uq_datasets_owner_id_digest")),
    )
    op.create_index(op.f("ix_datasets_digest"), "datasets", ["digest"])
    op.create_index(op.f("ix_datasets_owner_id"), "datasets", ["owner_id"])
    # A path named a file on each participant's machine; no such run may train on. Those runs
    # fall back to the bundled corpus, which every coordinator holds.
    op.execute(
        "UPDATE runs SET dataset = 'python-stdlib' WHERE dataset <> 'python-stdlib' AND dataset LIKE '%/%'"
    )
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("corpus_fingerprint")


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("corpus_fingerprint", sa.String(64), nullable=True))
    op.drop_index(op.f("ix_datasets_owner_id"), table_name="datasets")
    op.drop_index(op.f("ix_datasets_digest"), table_name="datasets")
    op.drop_table("datasets")
