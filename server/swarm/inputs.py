"""What a run's state machine is told. Every input carries `now` (monotonic seconds) so the
machine never reads a clock and a test can replay any interleaving."""

from __future__ import annotations

from dataclasses import dataclass

from swarmhub.status import PeerState, RunStatus
from swarmhub.wire import PeerToCoordinatorMessage


@dataclass(frozen=True, kw_only=True)
class PeerJoined:
    """A peer's control channel was admitted (the database already says it is active)."""

    now: float
    peer_id: int
    name: str
    address: str
    throughput: float
    stage: int | None
    """The stage the database remembers for it (a rejoin), else None."""
    requested_stage: int | None
    fingerprint: str = ""
    """SHA-256 of its data-plane certificate (empty: plain ws)."""
    probe_problem: str | None
    """What went wrong when the coordinator dialled its data plane; None: it answered."""
    trusted: bool = False
    """Registered with the owner's verifier token: a trusted referee."""


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    """The coordinator dialled a reported peer's data plane (`decisions.ProbePeer`)."""

    now: float
    peer_id: int
    problem: str | None


@dataclass(frozen=True, kw_only=True)
class PeerLeft:
    """A peer's channel closed: `state` 'left' (goodbye) or 'lost' (vanished)."""

    now: float
    peer_id: int
    state: PeerState
    reason: str


@dataclass(frozen=True, kw_only=True)
class PeerSaid:
    now: float
    peer_id: int
    message: PeerToCoordinatorMessage


@dataclass(frozen=True, kw_only=True)
class Tick:
    """The shell's timer: watchdog, periodic views, held barriers, rebalancing, retries."""

    now: float


@dataclass(frozen=True, kw_only=True)
class StepRecorded:
    """The database holds the step now: its update may be applied."""

    now: float
    step: int


@dataclass(frozen=True, kw_only=True)
class StatusSet:
    """An owner paused, resumed or archived the run."""

    now: float
    status: RunStatus


@dataclass(frozen=True, kw_only=True)
class CheckpointWanted:
    now: float


@dataclass(frozen=True, kw_only=True)
class PeerRemoved:
    """An owner or admin kicked or banned the peer (the route wrote that already)."""

    now: float
    peer_id: int
    reason: str


Input = (
    PeerJoined
    | ProbeResult
    | PeerLeft
    | PeerSaid
    | Tick
    | StepRecorded
    | StatusSet
    | CheckpointWanted
    | PeerRemoved
)
