"""What the ledger's API returns."""

from __future__ import annotations

from pydantic import BaseModel

from swarmhub.status import PeerState


class Contribution(BaseModel):
    """Totals over every step recorded."""

    samples_trained: int = 0
    """Samples of the microbatches it drove that every stage counted."""
    calls_served: int = 0
    samples_served: int = 0
    """Samples of the stage calls it served, as trainers received them and it claimed them."""
    compute_s: float = 0.0
    bytes_moved: int = 0
    """Data-plane bytes it moved as a trainer (sent and received)."""
    uptime_s: float = 0.0
    failures: int = 0
    """Microbatches it did not finish, and times it was lost."""
    steps: int = 0
    """Steps it was credited in."""


class PeerContribution(Contribution):
    peer_id: int
    peer_name: str
    state: PeerState
    stage: int | None
    participant_id: int | None
    """Its join token's id (None: the token was deleted)."""
    participant: str


class ParticipantContribution(Contribution):
    participant_id: int | None
    participant: str
    """The join token's label, else 'token N'."""
    peers: int


class RunLedger(BaseModel):
    run_id: int
    samples_counted: int
    """Samples every stage counted, over the run's recorded steps: what `samples_trained` adds up to."""
    peers: list[PeerContribution]
    """Most samples trained and served first."""
    participants: list[ParticipantContribution]


class OwnContribution(BaseModel):
    """A participant's own view, reached through the link its peer printed when it registered."""

    run_id: int
    run_name: str
    run_samples_counted: int
    peer: PeerContribution
    participant: ParticipantContribution
    rank: int
    """The participant's place among the run's participants (1: most samples trained and served)."""
    participants: int
