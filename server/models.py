"""The coordinator's tables. Change them only together with a new revision in migrations/versions."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, TypeVar, get_args

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, column_property, mapped_column

from swarmhub.run_settings import CompressionName, OptimizerName, RunSettings
from swarmhub.status import PeerState, RunStatus

# Explicit constraint names keep migrations identical on SQLite and PostgreSQL, and let later
# revisions drop or alter constraints by name.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

USER_ROLES = ("owner", "admin")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both databases (SQLite keeps no zone, so we restore it)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


E = TypeVar("E", bound=StrEnum)


class StrEnumColumn(sa.TypeDecorator[E]):
    """A string column holding an enum's values; rows give back enum members, not plain strings."""

    impl = sa.String(16)
    cache_ok = True

    def __init__(self, enum: type[E]) -> None:
        super().__init__()
        self.enum = enum

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        # Through the enum, so a misspelt state fails here rather than at the CHECK constraint.
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        return None if value is None else self.enum(value)


def _one_of(column: str, values: tuple[str, ...]) -> sa.CheckConstraint:
    allowed = ", ".join(f"'{v}'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({allowed})", name=column)


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        float: sa.Double(),
        dict[str, Any]: sa.JSON(),
        RunStatus: StrEnumColumn(RunStatus),
        PeerState: StrEnumColumn(PeerState),
    }


class User(Base):
    __tablename__ = "users"
    __table_args__ = (_one_of("role", USER_ROLES),)

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(sa.String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(sa.String(255))
    role: Mapped[str] = mapped_column(sa.String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    disabled: Mapped[bool] = mapped_column(default=False)


class AuthSession(Base):
    """A browser or API login; the token itself is never stored, only its sha256."""

    __tablename__ = "auth_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    user_id: Mapped[int] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    csrf_token: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    """Last use, to within a minute: a session idle for `session_idle_minutes` has ended."""


INVITATION_PURPOSES = ("invite", "reset")


class Invitation(Base):
    """A single-use link an admin hands out: 'invite' makes a new account, 'reset' sets a new
    password for `user_id`. Only the token's sha256 is stored."""

    __tablename__ = "invitations"
    __table_args__ = (_one_of("purpose", INVITATION_PURPOSES), _one_of("role", USER_ROLES))

    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    purpose: Mapped[str] = mapped_column(sa.String(16))
    role: Mapped[str] = mapped_column(sa.String(16))
    """The role an invited account gets (a reset keeps the user's own)."""
    user_id: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    """The account a reset link is for; None for an invitation."""
    created_by: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]


class LoginThrottle(Base):
    """Failed logins per account name and per client address; in the database, so the backoff
    holds across restarts and across coordinator workers."""

    __tablename__ = "login_throttle"

    key: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    """'user:<username>' or 'addr:<client address>'."""
    failures: Mapped[int] = mapped_column(default=0)
    last_failure_at: Mapped[datetime]
    locked_until: Mapped[datetime | None]


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        _one_of("status", tuple(RunStatus)),
        _one_of("compression", get_args(CompressionName)),
        _one_of("optimizer", get_args(OptimizerName)),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(sa.ForeignKey("users.id"), index=True)
    owner_name: Mapped[str] = column_property(
        sa.select(User.username).where(User.id == owner_id).correlate_except(User).scalar_subquery()
    )
    """Read with the row, so every run the API returns names its owner (a query, not a column)."""
    # The owner's settings, one column per RunSettings field (swarmhub/run_settings.py documents
    # them); tests/server/test_run_settings.py fails when a field has no matching column.
    name: Mapped[str] = mapped_column(sa.String(200))
    model_preset: Mapped[str] = mapped_column(sa.String(32))
    dataset: Mapped[str] = mapped_column(sa.String(1000))
    num_stages: Mapped[int]
    target_batch_size: Mapped[int]
    microbatch_size: Mapped[int]
    seq_len: Mapped[int]
    optimizer: Mapped[str] = mapped_column(sa.String(16))
    learning_rate: Mapped[float]
    warmup_steps: Mapped[int]
    weight_decay: Mapped[float]
    compression: Mapped[str] = mapped_column(sa.String(16))
    max_steps: Mapped[int | None]
    seed: Mapped[int]
    rebalance: Mapped[bool]
    spot_check_fraction: Mapped[float]
    status: Mapped[RunStatus] = mapped_column(default=RunStatus.ACTIVE)
    current_step: Mapped[int] = mapped_column(default=0)
    next_sample: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    """Global data cursor: the first sample index not yet granted to any trainer."""
    data_key: Mapped[str] = mapped_column(sa.String(64))
    """Secret peers use to check each other's data-plane credentials; never leaves via REST."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    # The owner's bookkeeping, not settings: peers never see them and they change nothing in training.
    tags: Mapped[list[str]] = mapped_column(sa.JSON, default=list)
    notes: Mapped[str] = mapped_column(sa.Text, default="")
    archived: Mapped[bool] = mapped_column(default=False)
    """Filed away: left out of the runs list unless asked for. Independent of the status (archiving
    from the list can be undone; the 'archive' status action ends a run for good and files it too)."""


def run_settings(run: Run) -> RunSettings:
    """The settings a run was created with, read back from its row."""
    return RunSettings.model_validate({name: getattr(run, name) for name in RunSettings.model_fields})


def fill_run_settings(run: Run, settings: RunSettings) -> None:
    """Write every setting into the row's columns (RunCreate and other subclasses included)."""
    for name in RunSettings.model_fields:
        setattr(run, name, getattr(settings, name))


DEFAULT_PEERS_PER_TOKEN = 32


class JoinToken(Base):
    __tablename__ = "join_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    label: Mapped[str] = mapped_column(sa.String(100), default="")
    max_peers: Mapped[int] = mapped_column(default=DEFAULT_PEERS_PER_TOKEN)
    """How many peers this token may register; one token cannot mint an unbounded swarm."""
    verifier: Mapped[bool] = mapped_column(default=False)
    """Its peers are the owner's own, trusted to referee spot-check disputes
    (`server/swarm/verification.py`)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]


class Peer(Base):
    __tablename__ = "peers"
    __table_args__ = (_one_of("state", tuple(PeerState)),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(sa.String(100))
    address: Mapped[str] = mapped_column(sa.String(270))
    """host:port other peers dial: the peer's `announce`, else where its registration came from."""
    tls_fingerprint: Mapped[str] = mapped_column(sa.String(64), default="")
    """SHA-256 (hex) of its data-plane certificate; empty for a plain ws data plane."""
    reachable: Mapped[bool | None]
    """What the coordinator's last probe of its data plane found (None: not probed yet)."""
    trusted: Mapped[bool] = mapped_column(default=False)
    """Registered with a verifier token: a referee whose word settles a dispute of two peers."""
    link_rates: Mapped[dict[str, float] | None] = mapped_column(sa.JSON)
    """Data-plane rates it measured to other peers (peer id -> bytes/s), from its heartbeats."""
    device: Mapped[str] = mapped_column(sa.String(16))
    device_name: Mapped[str] = mapped_column(sa.String(200), default="")
    throughput: Mapped[float] = mapped_column(default=0.0)
    queue_length: Mapped[int] = mapped_column(default=0)
    samples_done: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    stage: Mapped[int | None]
    requested_stage: Mapped[int | None]
    """The stage the participant asked for with --stage; None lets the coordinator choose."""
    state: Mapped[PeerState] = mapped_column(default=PeerState.JOINING)
    credential_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    join_token_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("join_tokens.id", ondelete="SET NULL"), index=True
    )
    last_heartbeat: Mapped[datetime | None]
    joined_at: Mapped[datetime] = mapped_column(default=utcnow)
    left_at: Mapped[datetime | None]


class StageAssignment(Base):
    """History of which stage each peer served from which step (the live view is peers.stage)."""

    __tablename__ = "stage_assignments"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    peer_id: Mapped[int] = mapped_column(sa.ForeignKey("peers.id", ondelete="CASCADE"), index=True)
    stage: Mapped[int]
    step: Mapped[int]
    reason: Mapped[str] = mapped_column(sa.String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Step(Base):
    """One committed global step; samples_counted[stage] + samples_lost balance samples_sent."""

    __tablename__ = "steps"
    __table_args__ = (sa.UniqueConstraint("run_id", "step"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int]
    loss: Mapped[float | None]
    samples_sent: Mapped[int]
    samples_lost: Mapped[int]
    samples_counted: Mapped[list[int]] = mapped_column(sa.JSON)
    duration_s: Mapped[float]
    learning_rate: Mapped[float | None]
    grad_scale: Mapped[float | None]
    attempts: Mapped[list[int] | None] = mapped_column(sa.JSON)
    """Each stage's averaging attempt; with the two above, the update peers apply (None before 0004)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Metric(Base):
    __tablename__ = "metrics"
    __table_args__ = (sa.Index(None, "run_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int | None]
    name: Mapped[str] = mapped_column(sa.String(100))
    value: Mapped[float]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Event(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int | None] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    peer_id: Mapped[int | None] = mapped_column(sa.ForeignKey("peers.id", ondelete="SET NULL"), index=True)
    kind: Mapped[str] = mapped_column(sa.String(32))
    message: Mapped[str] = mapped_column(sa.Text)
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Checkpoint(Base):
    """One stage's saved state at one step; the file lives under settings.checkpoint_dir at `path`."""

    __tablename__ = "checkpoints"
    __table_args__ = (sa.UniqueConstraint("run_id", "step", "stage"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int]
    stage: Mapped[int]
    path: Mapped[str] = mapped_column(sa.String(1000))
    """Relative to the checkpoint directory: run-<id>/step-<n>/stage-<s>.safetensors."""
    bytes: Mapped[int] = mapped_column(sa.BigInteger)
    sha256: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RequestedCheckpoint(Base):
    """The coordinator asked `peer_id` to upload `stage` as of `step`: the only uploads it accepts."""

    __tablename__ = "checkpoint_requests"
    __table_args__ = (sa.UniqueConstraint("run_id", "step", "stage", "peer_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    peer_id: Mapped[int] = mapped_column(sa.ForeignKey("peers.id", ondelete="CASCADE"), index=True)
    step: Mapped[int]
    stage: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Dataset(Base):
    """An owner's dataset: its manifest and shards live under settings.dataset_dir.

    `digest` is the dataset's id (the sha256 of its manifest); two owners who upload the same bytes
    each get a row with the same digest, and runs name the digest."""

    __tablename__ = "datasets"
    __table_args__ = (sa.UniqueConstraint("owner_id", "digest"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    digest: Mapped[str] = mapped_column(sa.String(64), index=True)
    owner_id: Mapped[int] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(sa.String(200))
    bytes: Mapped[int] = mapped_column(sa.BigInteger)
    shards: Mapped[int]
    files: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


WEBHOOK_DELIVERY_STATES = ("pending", "delivered", "failed", "cancelled")


class RunWebhook(Base):
    """An owner's URL that gets a signed POST for some kinds of a run's events (`server/webhooks`)."""

    __tablename__ = "run_webhooks"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(sa.String(2000))
    secret: Mapped[str] = mapped_column(sa.String(64))
    """The HMAC key deliveries are signed with: kept in the clear (signing needs it), shown to the
    owner once when the webhook is created, never again through the API."""
    kinds: Mapped[list[str]] = mapped_column(sa.JSON)
    """The event kinds it is sent (a subset of `server.webhooks.policy.WEBHOOK_KINDS`)."""
    enabled: Mapped[bool] = mapped_column(default=True)
    created_by: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id", ondelete="SET NULL"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookDelivery(Base):
    """One event owed to one webhook, and how sending it went. Written in the event's transaction,
    so a coordinator that stops before sending finds it pending when it starts again."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        _one_of("state", WEBHOOK_DELIVERY_STATES),
        sa.UniqueConstraint("webhook_id", "event_id"),
        sa.Index(None, "state", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    webhook_id: Mapped[int] = mapped_column(sa.ForeignKey("run_webhooks.id", ondelete="CASCADE"))
    event_id: Mapped[int] = mapped_column(sa.ForeignKey("events.id", ondelete="CASCADE"), index=True)
    state: Mapped[str] = mapped_column(sa.String(16), default="pending")
    attempts: Mapped[int] = mapped_column(default=0)
    status_code: Mapped[int | None]
    """The HTTP status of the last attempt (None: no answer, see `error`)."""
    error: Mapped[str] = mapped_column(sa.String(500), default="")
    """Why the last attempt failed; empty once delivered."""
    next_attempt_at: Mapped[datetime | None]
    """When the dispatcher tries again; None once delivered, failed for good or cancelled."""
    delivered_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class PeerLedger(Base):
    """A peer's contribution to its run, totals over every step recorded (`server/services/ledger.py`):
    each committed step adds its credits in the step's own transaction, so the totals survive a
    restart and a step retried is not counted twice. The participant is the peer's join token."""

    __tablename__ = "peer_ledger"

    peer_id: Mapped[int] = mapped_column(sa.ForeignKey("peers.id", ondelete="CASCADE"), primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    view_token_hash: Mapped[str | None] = mapped_column(sa.String(64), unique=True)
    """sha256 of the link the peer prints for its participant's own view (None: issued before it)."""
    samples_trained: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    calls_served: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    samples_served: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    compute_s: Mapped[float] = mapped_column(default=0.0)
    bytes_moved: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    uptime_s: Mapped[float] = mapped_column(default=0.0)
    failures: Mapped[int] = mapped_column(default=0)
    steps: Mapped[int] = mapped_column(default=0)
    """Steps it was credited in."""
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
