"""Request and response bodies of the REST API and the dashboard feed (routes never return ORM rows)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from server.models import DEFAULT_PEERS_PER_TOKEN
from server.policies.health import RunState, StageColor
from server.security import MAX_PASSWORD_LENGTH, password_problem
from swarmhub.resources import MAX_ACTIVATION_ELEMENTS
from swarmhub.run_settings import RunSettings
from swarmhub.status import PeerState, RunStatus

UserRole = Literal["owner", "admin"]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class ErrorOut(BaseModel):
    detail: str


# ---- accounts ------------------------------------------------------------------------------


class LoginRequest(Body):
    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=1024)


NewUsername = Annotated[str, Field(min_length=3, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]


class UserCreate(Body):
    username: NewUsername
    password: str = Field(min_length=1, max_length=MAX_PASSWORD_LENGTH)
    """At least 12 characters, not the username; any characters (server.security.password_problem)."""
    role: UserRole = "owner"

    @field_validator("password")
    @classmethod
    def _password_policy(cls, password: str, info: ValidationInfo) -> str:
        problem = password_problem(password, info.data.get("username", ""))
        if problem is not None:
            raise ValueError(problem)
        return password


class PasswordChange(Body):
    current_password: str = Field(min_length=1, max_length=MAX_PASSWORD_LENGTH)
    new_password: str = Field(min_length=1, max_length=MAX_PASSWORD_LENGTH)


class UserUpdate(Body):
    disabled: bool
    """True disables the account and ends its sessions at once; false enables it again."""


class SessionsEnded(BaseModel):
    ended: int
    """How many sessions ended."""


class UserOut(Out):
    id: int
    username: str
    role: UserRole
    disabled: bool
    created_at: datetime


InvitationPurpose = Literal["invite", "reset"]


class InvitationCreate(Body):
    role: UserRole = "owner"
    """The role of the account the invitation makes."""


class InvitationOut(Out):
    """An open link: an invitation (makes an account) or a password reset (for `username`)."""

    id: int
    purpose: InvitationPurpose
    role: UserRole
    username: str | None
    """Whose password a reset link sets; None for an invitation."""
    created_by_name: str | None
    created_at: datetime
    expires_at: datetime


class InvitationIssued(InvitationOut):
    token: str
    """Shown once, never stored: the dashboard's link is `#/invite/<token>`."""


class InvitationToken(Body):
    token: str = Field(min_length=1, max_length=200)


class InvitationInfo(BaseModel):
    """What a link is for, so its page can ask for the right things."""

    purpose: InvitationPurpose
    username: str | None
    expires_at: datetime


class InvitationAccept(Body):
    token: str = Field(min_length=1, max_length=200)
    username: NewUsername | None = None
    """The new account's name; an invitation needs one, a reset ignores it."""
    password: str = Field(min_length=1, max_length=MAX_PASSWORD_LENGTH)


class LoginResponse(BaseModel):
    token: str
    """Session token for `Authorization: Bearer`; browsers use the cookie instead."""
    csrf_token: str
    expires_at: datetime
    user: UserOut


# ---- runs ----------------------------------------------------------------------------------


class RunCreate(Body, RunSettings):
    """A new run: its settings (swarmhub/run_settings.py); unknown fields are refused."""


class RunOut(Out, RunSettings):
    id: int
    owner_id: int
    owner_name: str
    status: RunStatus
    current_step: int
    created_at: datetime
    updated_at: datetime
    tags: list[str]
    notes: str
    archived: bool
    """Left out of `GET /api/runs` unless `archived=true` is asked for."""


Tag = Annotated[str, Field(min_length=1, max_length=40, pattern=r"^[^,\s]([^,]*[^,\s])?$")]


class RunLabelsUpdate(Body):
    """The owner's bookkeeping on a run; fields left out stay as they are."""

    tags: Annotated[list[Tag], Field(max_length=20)] | None = None
    """Short labels (no commas, no surrounding spaces); duplicates are dropped, order kept."""
    notes: str | None = Field(default=None, max_length=10_000)
    archived: bool | None = None


class LossPoint(BaseModel):
    step: int
    loss: float


class StageHealthOut(BaseModel):
    stage: int
    color: StageColor
    """red: no live peer serves it (the pipeline stops there); amber: one peer (no spare) or far
    below the other stages' rate (the bottleneck); green otherwise."""
    ready: int
    """Live peers serving it."""
    loading: int
    """Live peers assigned to it, still copying its state."""
    rate: float
    """Its serving peers' summed observed rate, samples per second."""
    reason: str


class RunHealthOut(BaseModel):
    """What is happening to a run now, from the coordinator's live view of its swarm
    (`server/policies/health.py`). Only `training` means samples are being trained."""

    state: RunState
    reason: str
    """In words, e.g. "stage 1 has no live peer"."""
    since: datetime | None
    """When a stall began (the last moment the stage named had a live peer)."""
    stages: list[StageHealthOut]
    """Each stage's health; empty while no peer has connected since the coordinator started."""


class RunDetail(RunOut):
    parameter_count: int
    peer_counts: dict[PeerState, int]
    latest_loss: float | None
    health: RunHealthOut


class PresetOut(Out):
    """A model preset a run can use (swarmhub/presets.py)."""

    name: str
    parameter_count: int
    d_model: int
    n_layer: int
    n_head: int
    max_seq_len: int
    max_activation_elements: int = MAX_ACTIVATION_ELEMENTS
    """Bound on microbatch_size x seq_len x d_model, one activation tensor between stages."""


# ---- join tokens ---------------------------------------------------------------------------


class TokenCreate(Body):
    label: str = Field(default="", max_length=100)
    max_peers: int = Field(default=DEFAULT_PEERS_PER_TOKEN, ge=1, le=10_000)
    """How many peers this token may register (give each participant their own token)."""
    verifier: bool = False
    """For machines you run yourself: their peers are trusted referees of spot-check disputes, brought
    to a stage whose two peers disagree (a stage of three or more needs none). Never give one away."""


class TokenOut(Out):
    id: int
    run_id: int
    label: str
    max_peers: int
    verifier: bool
    created_at: datetime
    revoked_at: datetime | None


class TokenIssued(TokenOut):
    token: str
    """Shown once; only its hash is stored."""
    join_command: str


# ---- peers, steps, events ------------------------------------------------------------------


class PeerOut(Out):
    id: int
    run_id: int
    name: str
    address: str
    device: str
    device_name: str
    throughput: float
    queue_length: int
    samples_done: int
    link_rates: dict[int, float] = Field(default_factory=dict)
    """Data-plane rates this peer measured to other peers (peer id -> bytes per second), recent ones."""
    stage: int | None
    state: PeerState
    reachable: bool | None
    """Whether the coordinator reached its data plane where it announced it (None: not probed yet).
    A peer that cannot be reached trains only."""
    trusted: bool
    """Registered with a verifier token: the owner's own peer, a trusted referee."""
    last_heartbeat: datetime | None
    joined_at: datetime
    left_at: datetime | None

    @field_validator("link_rates", mode="before")
    @classmethod
    def _no_links_yet(cls, value: object) -> object:
        return {} if value is None else value


class PeerAction(Body):
    reason: str = Field(default="", max_length=500)


class AssignmentOut(Out):
    id: int
    run_id: int
    peer_id: int
    stage: int
    step: int
    reason: str
    created_at: datetime


class StepOut(Out):
    run_id: int
    step: int
    loss: float | None
    samples_sent: int
    samples_lost: int
    samples_counted: list[int]
    """Samples whose gradients each stage accumulated, indexed by stage."""
    duration_s: float
    created_at: datetime


class MetricOut(Out):
    step: int | None
    name: str
    """samples_per_s, wire_bytes (data-plane bytes of the step), retries (stage calls retried), or the
    step's spot checks: spot_check_calls, spot_check_bytes (both ways), spot_check_seconds and
    spot_check_largest_agreeing (the largest discrepancy seen so far between results that agreed);
    where the step's time went, five parts that add up to one whole step (from the previous step's
    averaging to this one's): time_compute_s (the serving peers' mean compute), time_network_s (the
    mean network time of their calls: transfers), time_waiting_s (the rest of collecting: queueing,
    idle, failures), time_averaging_s and time_coordinator_s
    (recording, applying, opening the step); busiest_stage, with busiest_stage_busy_share,
    busiest_stage_least_busy_share and busiest_stage_most_busy_share (the stage whose ready peers
    computed the largest share of the step's collecting, that mean share, and its least and most busy
    peer's); activation_cache_hits and activation_cache_misses (backward calls that found their kept
    forward, or found it gone)."""
    value: float
    created_at: datetime


class EventOut(Out):
    id: int
    run_id: int | None
    peer_id: int | None
    kind: str
    message: str
    data: dict[str, Any]
    created_at: datetime


class HealthOut(BaseModel):
    status: Literal["ok"]


# ---- dashboard feed frames (websocket /ws/runs/{run_id}/feed) ------------------------------


class SnapshotFrame(BaseModel):
    """First frame after connecting: the whole picture, then deltas follow."""

    type: Literal["snapshot"] = "snapshot"
    run: RunDetail
    peers: list[PeerOut]
    steps: list[StepOut]
    """The most recent steps, oldest first."""
    events: list[EventOut]
    """The most recent events, oldest first."""


class RunFrame(BaseModel):
    type: Literal["run"] = "run"
    run: RunOut


class PeerFrame(BaseModel):
    type: Literal["peer"] = "peer"
    peer: PeerOut


class StepFrame(BaseModel):
    type: Literal["step"] = "step"
    step: StepOut


class EventFrame(BaseModel):
    type: Literal["event"] = "event"
    event: EventOut


class HealthFrame(BaseModel):
    """The run's health changed (state, reason, or a stage's colour or peer count)."""

    type: Literal["health"] = "health"
    health: RunHealthOut


class FeedAuth(Body):
    """A feed client without the session cookie (an API client) sends this first."""

    type: Literal["auth"] = "auth"
    token: str = Field(min_length=1, max_length=256)


class PingFrame(BaseModel):
    """Keepalive while nothing happens; clients ignore it."""

    type: Literal["ping"] = "ping"


FeedFrame = Annotated[
    SnapshotFrame | RunFrame | PeerFrame | StepFrame | EventFrame | HealthFrame | PingFrame,
    Field(discriminator="type"),
]
