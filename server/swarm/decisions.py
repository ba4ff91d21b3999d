"""What a run's state machine decides: messages to send, channels to close, rows to write.

The shell (`server.live`) carries decisions out in the order given. Rows are written through the
service modules; a step is recorded (`RecordStep`) before any peer is told to apply it, and the
machine hears back (`inputs.StepRecorded`) before it sends the `ApplyStep`s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from server.policies.health import RunHealth
from server.policies.ledger import PeerCredit
from server.policies.step_time import StageBusy
from swarmhub.status import PeerState
from swarmhub.wire import ApplyStep, Message, PeerEndpoint


@dataclass(frozen=True, kw_only=True)
class Send:
    peer_ids: tuple[int, ...]
    message: Message


@dataclass(frozen=True, kw_only=True)
class Close:
    """Close a peer's control channel with a websocket close code and reason."""

    peer_id: int
    code: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class AssignStage:
    """Write the assignment (peer row, history row, event), then send the peer its StageAssignment.

    With no `state_sources` after step 0 the shell names the latest complete checkpoint, if any.
    """

    peer_id: int
    stage: int
    step: int
    reason: str
    state_sources: tuple[PeerEndpoint, ...]
    apply: ApplyStep | None
    """The recorded update of step - 1 for this stage, for a peer still holding its averaged gradient."""
    corroborate: bool = False
    """Check the copied state against a second source's before serving (`StageAssignment.corroborate`)."""


@dataclass(frozen=True, kw_only=True)
class RecordEvent:
    kind: str
    message: str
    peer_id: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RecordDeparture:
    """The peer's channel is gone: `state` is 'left' or 'lost' (kicks are written by the route)."""

    peer_id: int
    state: PeerState
    reason: str
    stage: int | None


@dataclass(frozen=True, kw_only=True)
class ProbePeer:
    """Dial the peer's data plane and report back (`inputs.ProbeResult`)."""

    peer_id: int
    address: str


@dataclass(frozen=True, kw_only=True)
class RecordReachability:
    """Write what the coordinator's probe found (and, for an unreachable peer, that it has no stage)."""

    peer_id: int
    reachable: bool
    detail: str


@dataclass(frozen=True, kw_only=True)
class RecordStep:
    """Commit a step durably: its row, metrics, the run's cursor, and each stage's update."""

    step: int
    loss: float | None
    samples_sent: int
    samples_done: int
    samples_lost: int
    samples_counted: tuple[int, ...]
    duration_s: float
    next_sample: int
    wire_bytes: int
    retries: int
    check_calls: int
    check_bytes: int
    check_seconds: float
    check_largest_agreeing: float
    time_compute_s: float
    time_network_s: float
    time_waiting_s: float
    time_averaging_s: float
    time_coordinator_s: float
    """Where the step's time went; the five add up to one whole step (`server.policies.step_time`)."""
    stage_busy: StageBusy | None
    """How busy the busiest stage's peers were while the step collected (`step_time.busiest_stage`)."""
    cache_hits: int
    cache_misses: int
    """Activation-cache hits and misses the stage servers reported while the step was open."""
    learning_rate: float
    grad_scale: float
    attempts: tuple[int, ...]
    finished: bool
    credits: tuple[PeerCredit, ...] = ()
    """Each peer's contribution to the step, added to its ledger in the step's own write."""


@dataclass(frozen=True, kw_only=True)
class HealthChanged:
    """The run's health changed (state, reason or a stage's colour): keep it for the API, tell dashboards."""

    health: RunHealth
    now: float
    """The machine's clock when it was computed, to turn `health`'s times into clock times."""


Decision = (
    Send
    | Close
    | AssignStage
    | RecordEvent
    | RecordDeparture
    | ProbePeer
    | RecordReachability
    | RecordStep
    | HealthChanged
)
