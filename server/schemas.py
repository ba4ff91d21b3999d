"""Request and response bodies of the REST API and the dashboard feed (routes never return ORM rows)."""

from __future__ import annotations

from datetime import datetime
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarmhub.presets import PRESETS
from swarmhub.wire import CompressionName, OptimizerName

UserRole = Literal["owner", "admin"]
RunStatus = Literal["active", "paused", "archived", "finished"]
PeerState = Literal["joining", "active", "lost", "left", "kicked", "banned"]
BUNDLED_DATASET = "python-stdlib"


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


class UserCreate(Body):
    username: str = Field(min_length=3, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    password: str = Field(min_length=8, max_length=1024)
    role: UserRole = "owner"


class UserOut(Out):
    id: int
    username: str
    role: UserRole
    disabled: bool
    created_at: datetime


class LoginResponse(BaseModel):
    token: str
    """Session token for `Authorization: Bearer`; browsers use the cookie instead."""
    csrf_token: str
    expires_at: datetime
    user: UserOut


# ---- runs ----------------------------------------------------------------------------------


class RunCreate(Body):
    name: str = Field(min_length=1, max_length=200)
    model_preset: str = "tiny"
    dataset: str = Field(default=BUNDLED_DATASET, min_length=1, max_length=1000)
    """'python-stdlib' (bundled) or an absolute path on the peers' machines."""
    num_stages: int = Field(default=2, ge=1)
    target_batch_size: int = Field(default=32, ge=1, le=1_000_000)
    microbatch_size: int = Field(default=8, ge=1, le=65_536)
    seq_len: int = Field(default=64, ge=8)
    optimizer: OptimizerName = "adamw"
    learning_rate: float = Field(default=3e-3, gt=0, le=10, allow_inf_nan=False)
    warmup_steps: int = Field(default=10, ge=0, le=1_000_000)
    weight_decay: float = Field(default=0.01, ge=0, le=10, allow_inf_nan=False)
    compression: CompressionName = "none"
    max_steps: int | None = Field(default=None, ge=1, le=100_000_000)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    rebalance: bool = True
    """Move peers toward the bottleneck stage as measured throughputs change."""

    @model_validator(mode="after")
    def _consistent(self) -> RunCreate:
        preset = PRESETS.get(self.model_preset)
        if preset is None:
            raise ValueError(
                f"unknown model_preset {self.model_preset!r}; choose one of {', '.join(PRESETS)}"
            )
        if self.num_stages > preset.n_layer:
            raise ValueError(
                f"num_stages must be at most {preset.n_layer}:"
                f" preset {preset.name!r} has {preset.n_layer} blocks"
            )
        if self.seq_len > preset.max_seq_len:
            raise ValueError(f"seq_len must be at most {preset.max_seq_len} for preset {preset.name!r}")
        if self.target_batch_size % self.microbatch_size:
            raise ValueError("target_batch_size must be a multiple of microbatch_size")
        if self.dataset != BUNDLED_DATASET and not PurePosixPath(self.dataset).is_absolute():
            raise ValueError(f"dataset must be {BUNDLED_DATASET!r} or an absolute path")
        return self


class RunOut(Out):
    id: int
    owner_id: int
    name: str
    model_preset: str
    dataset: str
    num_stages: int
    target_batch_size: int
    microbatch_size: int
    seq_len: int
    optimizer: OptimizerName
    learning_rate: float
    warmup_steps: int
    weight_decay: float
    compression: CompressionName
    max_steps: int | None
    seed: int
    rebalance: bool
    status: RunStatus
    current_step: int
    created_at: datetime
    updated_at: datetime


class RunDetail(RunOut):
    parameter_count: int
    peer_counts: dict[PeerState, int]
    latest_loss: float | None


class PresetOut(Out):
    """A model preset a run can use (swarmhub/presets.py)."""

    name: str
    parameter_count: int
    d_model: int
    n_layer: int
    n_head: int
    max_seq_len: int


# ---- join tokens ---------------------------------------------------------------------------


class TokenCreate(Body):
    label: str = Field(default="", max_length=100)


class TokenOut(Out):
    id: int
    run_id: int
    label: str
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
    stage: int | None
    state: PeerState
    last_heartbeat: datetime | None
    joined_at: datetime
    left_at: datetime | None


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
    """samples_per_s, wire_bytes (data-plane bytes of the step) or retries (stage calls retried)."""
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


class PingFrame(BaseModel):
    """Keepalive while nothing happens; clients ignore it."""

    type: Literal["ping"] = "ping"


FeedFrame = Annotated[
    SnapshotFrame | RunFrame | PeerFrame | StepFrame | EventFrame | PingFrame, Field(discriminator="type")
]
