"""Data-plane tickets: the coordinator's signed word that a peer of a run holds a frame-signing key.

A peer generates an Ed25519 key pair at start and names its public half in `Hello.frame_key`. While
its control channel is admitted, the coordinator signs a short-lived ticket binding (run, peer id,
that key, expiry) with the run's ticket key and renews it every few seconds; a peer signs every
data-plane frame it sends with its own key and attaches the ticket. Receivers check the ticket with
the run's public ticket key (`Welcome.data_key`) and the frame with the key the ticket names, so a
peer can speak only as itself, and a peer the coordinator stopped renewing (kicked, banned, its
token revoked, gone) is cut off when its last ticket expires, or at once when a revocation arrives.

The run's ticket key is derived from the run's secret `data_key`, which never leaves the
coordinator: it survives a coordinator restart without a new column, and a ticket of one run
verifies under no other run's key. Torch-free: the coordinator imports this.
"""

from __future__ import annotations

import hashlib

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from swarmhub.wire import Ticket

TICKET_LIFETIME_S = 60
"""How long a ticket is good for: the longest a removed peer can still be heard by a peer that missed
the revocation (it is pushed at once and repeated with every renewal meanwhile). Not shorter: a frame
carries the ticket current when it was signed, and a slow uploader's gradient pushes to the others
of its stage share its upload (at 5 Mbit/s a stage's sum takes ~16 s, and the last of K-1 concurrent
pushes arrives (K-1) times that after it was signed; 20 s refused every round of such a peer)."""
TICKET_RENEW_S = 5.0
"""Tickets are renewed this often, so a control channel blip shorter than the lifetime costs nothing."""
MAX_TRANSFER_GRACE_S = 60.0
"""The longest a call may arrive after its ticket expired (`peer.frame_auth.transfer_grace_s`: a
large frame on a slow link), however large: a peer that missed a revocation hears a removed peer at
most this much longer than its last ticket's lifetime."""
REVOCATION_MEMORY_S = TICKET_LIFETIME_S + MAX_TRANSFER_GRACE_S + 10
"""Revocations are repeated to a run's peers this long: after that the revoked ticket has expired,
and so has the grace a large frame signed under it gets in transit."""


def run_ticket_key(data_key: str) -> Ed25519PrivateKey:
    """The run's ticket-signing key, derived from its secret data key (domain-separated)."""
    seed = hashlib.sha256(b"swarmhub-ticket-key-v1\0" + data_key.encode()).digest()
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_hex(key: Ed25519PrivateKey) -> str:
    return key.public_key().public_bytes_raw().hex()


def run_ticket_public_key(data_key: str) -> str:
    """What peers verify tickets with (hex); sent to them as `Welcome.data_key`."""
    return public_hex(run_ticket_key(data_key))


def _ticket_message(run_id: int, peer_id: int, public_key: str, expires_at: int) -> bytes:
    return f"swarmhub-ticket-v1:{run_id}:{peer_id}:{public_key}:{expires_at}".encode()


def issue_ticket(key: Ed25519PrivateKey, *, run_id: int, peer_id: int, public_key: str, now: float) -> Ticket:
    expires_at = int(now) + TICKET_LIFETIME_S
    signature = key.sign(_ticket_message(run_id, peer_id, public_key, expires_at))
    return Ticket(
        run_id=run_id,
        peer_id=peer_id,
        public_key=public_key,
        expires_at=expires_at,
        signature=signature.hex(),
    )


def load_public_key(hex_key: str) -> Ed25519PublicKey:
    """Raises ValueError for anything that is not a 32-byte hex key."""
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(hex_key))


def ticket_signed_by(ticket: Ticket, coordinator_key: Ed25519PublicKey) -> bool:
    """Whether the run's ticket key signed exactly these fields (expiry is checked by the caller)."""
    try:
        coordinator_key.verify(
            bytes.fromhex(ticket.signature),
            _ticket_message(ticket.run_id, ticket.peer_id, ticket.public_key, ticket.expires_at),
        )
    except (InvalidSignature, ValueError):
        return False
    return True
