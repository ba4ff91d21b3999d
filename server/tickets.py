"""The coordinator's ticket desk: data-plane tickets for admitted peers, and revocations.

A peer's ticket (`swarmhub/tickets.py`) is issued when its control channel is admitted and renewed
every `TICKET_RENEW_S` while the channel stays admitted; nothing else renews it. A kicked or banned
peer, or one whose join token was revoked, loses its channel, so its last ticket expires within
`TICKET_LIFETIME_S`; its id is also pushed to the run's peers at once as revoked, and repeated with
every renewal until that ticket has expired. Part of the live swarm's shell (`server/live.py`):
one call when a channel is admitted, one when a peer is removed, and the renewal loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from swarmhub.tickets import (
    REVOCATION_MEMORY_S,
    TICKET_LIFETIME_S,
    TICKET_RENEW_S,
    issue_ticket,
    run_ticket_key,
)
from swarmhub.wire import DataPlaneTicket


class Channel(Protocol):
    """What the desk needs of an admitted control channel (`server.live.PeerLink`)."""

    peer_id: int
    run_id: int
    send: Callable[[str], None]


@dataclass(kw_only=True)
class _Holder:
    run_id: int
    frame_key: str
    ticket_expires_at: float = 0.0


class TicketDesk:
    def __init__(self, links: Mapping[int, Channel]) -> None:
        """`links`: the live swarm's admitted channels by peer id (read, never changed, here)."""
        self._links = links
        self._run_keys: dict[int, Ed25519PrivateKey] = {}
        self._holders: dict[int, _Holder] = {}
        """Peers that were issued a ticket that may not have expired yet."""
        self._revoked: dict[int, dict[int, float]] = {}
        """Run -> peer id -> when it was revoked (unix time)."""

    def admit(self, link: Channel, frame_key: str, data_key: str) -> None:
        """A channel was admitted: issue its peer's first ticket (if it named a frame key)."""
        if link.run_id not in self._run_keys:
            self._run_keys[link.run_id] = run_ticket_key(data_key)
        if frame_key:
            self._holders[link.peer_id] = _Holder(run_id=link.run_id, frame_key=frame_key)
        else:
            self._holders.pop(link.peer_id, None)
        self._send(link, time.time())

    def revoke(self, peer_id: int) -> None:
        """The peer was removed: tell its run's other peers now; its ticket is never renewed."""
        holder = self._holders.pop(peer_id, None)
        if holder is None:
            return
        now = time.time()
        self._revoked.setdefault(holder.run_id, {})[peer_id] = now
        for link in list(self._links.values()):
            if link.run_id == holder.run_id and link.peer_id != peer_id:
                self._send(link, now)

    async def renew_forever(self) -> None:
        while True:
            await asyncio.sleep(TICKET_RENEW_S)
            self.renew()

    def renew(self) -> None:
        now = time.time()
        for run_id, revoked in list(self._revoked.items()):
            for peer_id in [p for p, at in revoked.items() if at < now - REVOCATION_MEMORY_S]:
                del revoked[peer_id]
            if not revoked:
                del self._revoked[run_id]
        for peer_id in [
            p for p, h in self._holders.items() if p not in self._links and h.ticket_expires_at < now
        ]:
            del self._holders[peer_id]
        for link in list(self._links.values()):
            self._send(link, now)

    def _send(self, link: Channel, now: float) -> None:
        """A renewed ticket with the run's revocations; nothing to a peer that named no frame key
        (it has no use for either)."""
        holder = self._holders.get(link.peer_id)
        if holder is None or holder.run_id != link.run_id or link.run_id not in self._run_keys:
            return
        ticket = issue_ticket(
            self._run_keys[link.run_id],
            run_id=link.run_id,
            peer_id=link.peer_id,
            public_key=holder.frame_key,
            now=now,
        )
        holder.ticket_expires_at = now + TICKET_LIFETIME_S + 1
        message = DataPlaneTicket(
            ticket=ticket, coordinator_time=now, revoked=sorted(self._revoked.get(link.run_id, {}))
        )
        link.send(message.model_dump_json())
