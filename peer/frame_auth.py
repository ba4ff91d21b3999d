"""Who sent a data-plane frame: the sender signs it, the receiver checks the signature and its ticket.

Every call frame carries the sender's ticket (`swarmhub/tickets.py`), the peer it is addressed to
and a counter, and the frame's signature (in its prefix, `peer/frames.py`) covers the whole header
and payload. The receiver accepts a call only if the run's ticket key signed the ticket, the ticket
names the frame's sender and this run and has not expired on the coordinator's clock, the sender
was not revoked, the frame is addressed to this peer, the ticket's key signed the frame, and the
counter was not seen before (a window per sender: a replayed or re-addressed frame is refused).
Memory per sender is bounded (`REPLAY_WINDOW` counters, `MAX_SENDERS` senders remembered).

Replies are signed the same way by the peer that answers, under its own ticket, addressed back to the
caller with the call's counter, and their signature also covers the signature of the call they answer:
a caller accepts a reply only from the peer it dialled, for this very call (`check_reply`). Only a call
that authenticated gets a signed answer, so nobody can make a peer sign replies to calls of its choosing.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from swarmhub.tickets import MAX_TRANSFER_GRACE_S, load_public_key, public_hex, ticket_signed_by
from swarmhub.wire import Ticket

from .frame_headers import ErrorReply, FrameHeader

SIGNATURE_BYTES = 64
REPLAY_WINDOW = 1024
"""Counters a receiver remembers per sender: frames from one sender to one receiver may overtake each
other by at most this many (they are numbered per receiver, so only that pair's concurrency counts)."""
MAX_SENDERS = 4096
MAX_TICKETS = 4096
SLOW_SENDER_BYTES_PER_S = 0.5e6
"""A call's ticket may have expired up to its frame's bytes at this rate before it arrived: it was
current when the frame left, and a large frame on a slow link (a stage's state, or gradient sums
sharing an upload) may arrive after its ticket's `TICKET_LIFETIME_S` are up. The rate is the slowest
link averaging waits for (`server.policies.averaging.SLOWEST_LINK_WAITED_FOR`)."""


def transfer_grace_s(nbytes: int) -> float:
    """How long past its ticket's expiry a call of `nbytes` may arrive."""
    return min(nbytes / SLOW_SENDER_BYTES_PER_S, MAX_TRANSFER_GRACE_S)


class AuthError(ValueError):
    """A frame whose sender could not be authenticated; the message says why."""


def signed_message(
    header_bytes: bytes | memoryview, payload_digest: bytes, answers: bytes | None = None
) -> bytes:
    """What a frame's signature covers: its header, byte for byte, and its payload's digest; for a
    reply, also the signature of the call it `answers` (and another domain: a call's signature never
    passes for a reply's, nor the other way round)."""
    if answers is None:
        return b"swarmhub-frame-v1\0" + hashlib.sha256(header_bytes).digest() + payload_digest
    return b"swarmhub-reply-v1\0" + answers + hashlib.sha256(header_bytes).digest() + payload_digest


def payload_digest(payload: bytes | memoryview) -> bytes:
    return hashlib.sha256(payload).digest()


@dataclass(frozen=True)
class SentCall:
    """What a caller remembers of a call it sent, to know its reply: the peer dialled, the call's
    counter and signature."""

    receiver: int
    counter: int
    signature: bytes
    made_at: float = field(default_factory=time.time)
    """When it was signed (this machine's clock): a reply counts as current if the answering peer's
    ticket was current then (`SenderVerifier.check_reply`)."""


class FrameSigner:
    """This peer's frame-signing key, its current ticket, and a counter per receiver."""

    def __init__(self) -> None:
        self._key = Ed25519PrivateKey.generate()
        self.public_key = public_hex(self._key)
        self.ticket: Ticket | None = None
        self._counters: dict[int, int] = {}

    def take(self, ticket: Ticket) -> None:
        if ticket.public_key != self.public_key:
            raise AuthError("the coordinator issued a ticket for another key")
        self.ticket = ticket

    def envelope(self, receiver: int) -> dict[str, object]:
        """The header fields that bind a frame to this sender's ticket, `receiver` and a fresh counter."""
        counter = self._counters.get(receiver, 0) + 1
        self._counters[receiver] = counter
        return {"ticket": self.ticket, "receiver": receiver, "counter": counter}

    def reply_envelope(self, caller: int, counter: int) -> dict[str, object]:
        """The header fields of a reply: this peer's ticket, addressed back to `caller`, with the
        counter of the call it answers."""
        return {"ticket": self.ticket, "receiver": caller, "counter": counter}

    def sign(self, header_bytes: bytes, digest: bytes, answers: bytes | None = None) -> bytes:
        return self._key.sign(signed_message(header_bytes, digest, answers))


class _ReplayWindow:
    def __init__(self) -> None:
        self.high = 0
        self.seen: set[int] = set()

    def accept(self, counter: int) -> bool:
        if counter <= self.high - REPLAY_WINDOW or counter in self.seen:
            return False
        self.seen.add(counter)
        if counter > self.high:
            self.high = counter
            if len(self.seen) > 2 * REPLAY_WINDOW:
                self.seen = {c for c in self.seen if c > self.high - REPLAY_WINDOW}
        return True


class SenderVerifier:
    """Which frames come from an admitted, unrevoked peer of this run: calls this peer serves
    (`check`) and replies to calls it made (`check_reply`)."""

    def __init__(self, *, run_id: int, peer_id: int) -> None:
        self.run_id = run_id
        self.peer_id = peer_id
        self._coordinator_key: Ed25519PublicKey | None = None
        self._clock_offset = 0.0
        self._revoked: frozenset[int] = frozenset()
        self._tickets: OrderedDict[tuple[int, int, str, int, str], Ed25519PublicKey] = OrderedDict()
        """Ticket -> the sender key it vouches for: each ticket is verified once."""
        self._windows: OrderedDict[tuple[int, str], _ReplayWindow] = OrderedDict()

    def trust(self, coordinator_key: str) -> None:
        """The run's public ticket key, from Welcome."""
        key = load_public_key(coordinator_key)
        if (
            self._coordinator_key is None
            or key.public_bytes_raw() != self._coordinator_key.public_bytes_raw()
        ):
            self._tickets.clear()
        self._coordinator_key = key

    def observe(self, coordinator_time: float, revoked: Iterable[int]) -> None:
        """A ticket message: the coordinator's clock now, and who is revoked."""
        self._clock_offset = coordinator_time - time.time()
        self._revoked = frozenset(revoked)

    def now(self) -> float:
        return time.time() + self._clock_offset

    def check(
        self, header: FrameHeader, signature: bytes, header_bytes: memoryview, payload: memoryview
    ) -> None:
        """Raise AuthError unless `header` (as `header_bytes`) and `payload` come from its sender."""
        if self._coordinator_key is None:
            raise AuthError("this peer has not been admitted to the run yet; it cannot check callers")
        if header.ticket is None:
            raise AuthError(f"frame from peer {header.sender} carries no ticket")
        if header.receiver != self.peer_id:
            raise AuthError(f"frame is addressed to peer {header.receiver}, this is peer {self.peer_id}")
        sent_by = self.now() - transfer_grace_s(len(header_bytes) + len(payload))
        sender_key = self._ticketed_key(header, sent_by)
        try:
            sender_key.verify(signature, signed_message(header_bytes, payload_digest(payload)))
        except InvalidSignature:
            raise AuthError(f"frame signature does not match peer {header.sender}'s key") from None
        window_key = (header.sender, header.ticket.public_key)
        window = self._windows.pop(window_key, None) or _ReplayWindow()
        self._windows[window_key] = window
        while len(self._windows) > MAX_SENDERS:
            self._windows.popitem(last=False)
        if not window.accept(header.counter):
            raise AuthError(
                f"frame {header.counter} from peer {header.sender} was already received (a replay)"
            )

    def check_reply(
        self,
        header: FrameHeader,
        signature: bytes,
        header_bytes: memoryview,
        payload: memoryview,
        call: SentCall,
    ) -> None:
        """Raise AuthError unless `header` and `payload` are the answer of the peer `call` went to,
        under its valid ticket, to that very call. The error names the dialled peer: its failure."""
        peer = call.receiver
        if self._coordinator_key is None:
            raise AuthError("this peer has not been admitted to the run yet; it cannot check replies")
        if header.ticket is None:
            claimed = (
                f" (it claims, unverified: {header.error[:200]!r})" if isinstance(header, ErrorReply) else ""
            )
            raise AuthError(f"reply of peer {peer} is not signed{claimed}")
        if header.sender != peer:
            raise AuthError(f"reply says it is from peer {header.sender}, but the call went to peer {peer}")
        if (header.receiver, header.counter) != (self.peer_id, call.counter):
            raise AuthError(
                f"reply of peer {peer} answers call {header.counter} of peer {header.receiver}, "
                f"not call {call.counter} of peer {self.peer_id}"
            )
        # Current when the call was made: the reply may queue behind the answering peer's other
        # uploads (a slow server's own gradient pushes) for longer than a ticket lives.
        sender_key = self._ticketed_key(header, call.made_at + self._clock_offset)
        try:
            sender_key.verify(
                signature, signed_message(header_bytes, payload_digest(payload), call.signature)
            )
        except InvalidSignature:
            raise AuthError(
                f"reply signature does not match peer {peer}'s key and the call it answers"
            ) from None

    def check_evidence(
        self,
        header: FrameHeader,
        signature: bytes,
        header_bytes: memoryview,
        payload: memoryview,
        answers: bytes | None = None,
    ) -> None:
        """Raise AuthError unless `header`'s sender signed this frame of another pair of peers (a reply:
        as the answer to the call whose signature is `answers`) under a ticket this run's coordinator
        issued to it. Expiry and revocation do not matter here: what a peer signed stays its word."""
        if self._coordinator_key is None:
            raise AuthError("this peer has not been admitted to the run yet; it cannot check evidence")
        ticket = header.ticket
        if ticket is None:
            raise AuthError(f"frame of peer {header.sender} carries no ticket")
        if ticket.run_id != self.run_id or ticket.peer_id != header.sender:
            raise AuthError(
                f"frame of peer {header.sender} carries the ticket of peer {ticket.peer_id}"
                f" of run {ticket.run_id}"
            )
        try:
            self._sender_key(ticket).verify(
                signature, signed_message(header_bytes, payload_digest(payload), answers)
            )
        except InvalidSignature:
            raise AuthError(f"frame signature does not match peer {header.sender}'s key") from None

    def _ticketed_key(self, header: FrameHeader, current_at: float) -> Ed25519PublicKey:
        """The key `header`'s ticket vouches for, if the ticket is this run's, names the frame's sender,
        was issued by the coordinator, was current at `current_at` (the coordinator's clock) and its
        peer is not revoked."""
        ticket = header.ticket
        assert ticket is not None
        if ticket.run_id != self.run_id:
            raise AuthError(f"ticket is for run {ticket.run_id}, this peer serves run {self.run_id}")
        if ticket.peer_id != header.sender:
            raise AuthError(
                f"ticket is for peer {ticket.peer_id}, but the frame says it is from {header.sender}"
            )
        sender_key = self._sender_key(ticket)
        if ticket.expires_at <= current_at:
            raise AuthError(f"ticket of peer {header.sender} has expired")
        if header.sender in self._revoked:
            raise AuthError(f"peer {header.sender} was removed from the run; its ticket is revoked")
        return sender_key

    def _sender_key(self, ticket: Ticket) -> Ed25519PublicKey:
        # Keyed by every field: a signature presented with other fields is verified afresh (and fails).
        cache_key = (ticket.run_id, ticket.peer_id, ticket.public_key, ticket.expires_at, ticket.signature)
        key = self._tickets.get(cache_key)
        if key is not None:
            self._tickets.move_to_end(cache_key)
            return key
        assert self._coordinator_key is not None
        if not ticket_signed_by(ticket, self._coordinator_key):
            raise AuthError(f"ticket of peer {ticket.peer_id} was not issued by this run's coordinator")
        key = load_public_key(ticket.public_key)
        self._tickets[cache_key] = key
        while len(self._tickets) > MAX_TICKETS:
            self._tickets.popitem(last=False)
        return key
