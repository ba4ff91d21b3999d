"""Initial schema: accounts, runs, join tokens, peers, assignments, steps, metrics, events.

Revision ID: 0001_initial
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None

TZ_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", TZ_DATETIME, nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_users"),
        sa.UniqueConstraint("username", name="uq_users_username"),
        sa.CheckConstraint("role IN ('owner', 'admin')", name="ck_users_role"),
    )
    op.create_table(
        "auth_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", TZ_DATETIME, nullable=False),
        sa.Column("expires_at", TZ_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_auth_sessions"),
        sa.UniqueConstraint("token_hash", name="uq_auth_sessions_token_hash"),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_auth_sessions_user_id_users", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_auth_sessions_user_id", "auth_sessions", ["user_id"])

    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("model_preset", sa.String(32), nullable=False),
        sa.Column("dataset", sa.String(1000), nullable=False),
        sa.Column("num_stages", sa.Integer(), nullable=False),
        sa.Column("target_batch_size", sa.Integer(), nullable=False),
        sa.Column("microbatch_size", sa.Integer(), nullable=False),
        sa.Column("seq_len", sa.Integer(), nullable=False),
        sa.Column("optimizer", sa.String(16), nullable=False),
        sa.Column("learning_rate", sa.Double(), nullable=False),
        sa.Column("warmup_steps", sa.Integer(), nullable=False),
        sa.Column("weight_decay", sa.Double(), nullable=False),
        sa.Column("compression", sa.String(16), nullable=False),
        sa.Column("max_steps", sa.Integer(), nullable=True),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("rebalance", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("current_step", sa.Integer(), nullable=False),
        sa.Column("next_sample", sa.BigInteger(), nullable=False),
        sa.Column("data_key", sa.String(64), nullable=False),
        sa.Column("created_at", TZ_DATETIME, nullable=False),
        sa.Column("updated_at", TZ_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name="fk_runs_owner_id_users"),
        sa.CheckConstraint("status IN ('active', 'paused', 'archived', 'finished')", name="ck_runs_status"),
        sa.CheckConstraint("compression IN ('none', 'float16', 'int8')", name="ck_runs_compression"),
        sa.CheckConstraint("optimizer IN ('adamw', 'sgd')", name="ck_runs_optimizer"),
    )
    op.create_index("ix_runs_owner_id", "runs", ["owner_id"])

    op.create_table(
        "join_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("label", sa.String(100), nullable=False),
        sa.Column("created_at", TZ_DATETIME, nullable=False),
        sa.Column("revoked_at", TZ_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_join_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_join_tokens_token_hash"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_join_tokens_run_id_runs", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_join_tokens_run_id", "join_tokens", ["run_id"])

    op.create_table(
        "peers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("address", sa.String(200), nullable=False),
        sa.Column("device", sa.String(16), nullable=False),
        sa.Column("device_name", sa.String(200), nullable=False),
        sa.Column("throughput", sa.Double(), nullable=False),
        sa.Column("queue_length", sa.Integer(), nullable=False),
        sa.Column("samples_done", sa.BigInteger(), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=True),
        sa.Column("requested_stage", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("credential_hash", sa.String(64), nullable=False),
        sa.Column("join_token_id", sa.Integer(), nullable=True),
        sa.Column("last_heartbeat", TZ_DATETIME, nullable=True),
        sa.Column("joined_at", TZ_DATETIME, nullable=False),
        sa.Column("left_at", TZ_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_peers"),
        sa.UniqueConstraint("credential_hash", name="uq_peers_credential_hash"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_peers_run_id_runs", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["join_token_id"],
            ["join_tokens.id"],
            name="fk_peers_join_token_id_join_tokens",
            ondelete="SET NULL",
        ),
        sa.CheckConstraint(
            "state IN ('joining', 'active', 'lost', 'left', 'kicked', 'banned')", name="ck_peers_state"
        ),
    )
    op.create_index("ix_peers_run_id", "peers", ["run_id"])
    op.create_index("ix_peers_join_token_id", "peers", ["join_token_id"])

    op.create_table(
        "stage_assignments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("peer_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(200), nullable=False),
        sa.Column("created_at", TZ_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_stage_assignments"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_stage_assignments_run_id_runs", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["peer_id"], ["peers.id"], name="fk_stage_assignments_peer_id_peers", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_stage_assignments_run_id", "stage_assignments", ["run_id"])
    op.create_index("ix_stage_assignments_peer_id", "stage_assignments", ["peer_id"])

    op.create_table(
        "steps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("loss", sa.Double(), nullable=True),
        sa.Column("samples_sent", sa.Integer(), nullable=False),
        sa.Column("samples_lost", sa.Integer(), nullable=False),
        sa.Column("samples_counted", sa.JSON(), nullable=False),
        sa.Column("duration_s", sa.Double(), nullable=False),
        sa.Column("created_at", TZ_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_steps"),
        sa.UniqueConstraint("run_id", "step", name="uq_steps_run_id_step"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_steps_run_id_runs", ondelete="CASCADE"),
    )

    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("created_at", TZ_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_metrics"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_metrics_run_id_runs", ondelete="CASCADE"),
    )
    op.create_index("ix_metrics_run_id_name", "metrics", ["run_id", "name"])

    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("peer_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("created_at", TZ_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_events_run_id_runs", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["peer_id"], ["peers.id"], name="fk_events_peer_id_peers", ondelete="SET NULL"
        ),
    )
    op.create_index("ix_events_run_id", "events", ["run_id"])
    op.create_index("ix_events_peer_id", "events", ["peer_id"])


def downgrade() -> None:
    # Children before parents, so foreign keys never dangle.
    for table in ("events", "metrics", "steps", "stage_assignments", "peers", "join_tokens", "runs"):
        op.drop_table(table)
    op.drop_table("auth_sessions")
    op.drop_table("users")
