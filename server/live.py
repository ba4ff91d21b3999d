"""Live swarm state held by the coordinator process (work in progress: filled in by the training core)."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from swarmhub.settings import ServerSettings


class LiveSwarm:
    """Connected peers and the step in progress of every active run.

    The database is the source of truth; this object holds only what a restart can rebuild:
    open control channels and the microbatches granted for the current step.
    """

    def __init__(self, session_factory: sessionmaker[Session], settings: ServerSettings) -> None:
        self._session_factory = session_factory
        self._settings = settings

    async def start(self) -> None:
        """Start background tasks (heartbeat timeouts, periodic swarm views)."""

    async def stop(self) -> None:
        """Stop background tasks and close every peer channel."""

    def connected_peer_count(self) -> int:
        return 0

    async def kick_peer(self, peer_id: int, reason: str) -> None:
        """Tell a connected peer to stop and close its channel; the caller has updated the database."""

    async def run_status_changed(self, run_id: int, status: str) -> None:
        """A run was paused, resumed or archived; tell its peers."""
