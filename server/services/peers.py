"""Peers: registration with a join token, admin removal, and listings."""

from __future__ import annotations

import hmac
import ipaddress
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.errors import Conflict, Forbidden, NotFound, Unauthorized, Unprocessable
from server.models import JoinToken, Peer, Run, StageAssignment, User, utcnow
from server.security import new_token, token_hash
from server.services.events import record_event
from server.services.runs import JOINABLE_STATUSES
from server.services.tokens import find_usable_token
from swarmhub.status import PeerState
from swarmhub.wire import DATA_PLANE_VERSION, PeerRegistration

GONE_STATES = frozenset({PeerState.LEFT, PeerState.KICKED, PeerState.BANNED})
REMOVED_STATES = frozenset({PeerState.KICKED, PeerState.BANNED})
METADATA_SERVICES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
"""Cloud instance-metadata endpoints (AWS, GCP, Azure share the IPv4 one; AWS's IPv6 one): a peer
that dialled one of these on another participant's machine could leak that machine's credentials."""
METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "instance-data", "instance-data.ec2.internal"}
)


def implausible_host(host: str) -> str | None:
    """Why no peer should be told to dial `host`, or None when it is a plausible peer address.

    Loopback stays allowed: local runs and tests put every peer on one machine."""
    if host.lower().rstrip(".") in METADATA_NAMES:
        return "a cloud metadata-service name"
    try:
        ip = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return None  # a host name: peers resolve it like any other
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in METADATA_SERVICES:
        return "a cloud metadata-service address"
    if ip.is_unspecified:
        return "the unspecified address, which names no machine"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip == ipaddress.IPv4Address("255.255.255.255"):
        return "broadcast"
    return None


def announced_address(registration: PeerRegistration, seen_from: str) -> str:
    """Where other peers dial this one: its own `announce`, else the address its registration came from."""
    if registration.announce is None:
        host, port = seen_from, str(registration.listen_port)
    elif registration.announce.startswith("["):
        host, _, rest = registration.announce[1:].partition("]")
        port = rest.removeprefix(":") or str(registration.listen_port)
    else:
        host, _, port = registration.announce.partition(":")
        port = port or str(registration.listen_port)
    why = implausible_host(host)
    if why is not None:
        raise Unprocessable(
            f"refusing data-plane address {host!r}: it is {why}; announce an address other peers can dial"
            " (--announce host[:port])"
        )
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def register_peer(session: Session, registration: PeerRegistration, seen_from: str) -> tuple[Peer, str, Run]:
    """A new peer in state 'joining' with no stage yet; returns it, its plaintext credential and run.

    `seen_from` is the host the registration request came from (the peer's public side of a NAT)."""
    token = find_usable_token(session, registration.join_token)
    if token is None:
        raise Unauthorized("invalid or revoked join token")
    if registration.data_plane_version != DATA_PLANE_VERSION:
        # Checked before the run's state: a participant learns at once that no retry will help.
        raise Conflict(
            f"this peer speaks data-plane version {registration.data_plane_version} and this swarm"
            f" {DATA_PLANE_VERSION}: peers of different versions cannot call each other. Install the peer"
            " package this coordinator serves (the run page's pip install line) and join again"
        )
    run = session.get_one(Run, token.run_id)
    if run.status not in JOINABLE_STATUSES:
        raise Conflict(f"run {run.id} is {run.status}; it accepts no new peers")
    if registration.requested_stage is not None and registration.requested_stage >= run.num_stages:
        raise Unprocessable(f"requested_stage must be below {run.num_stages}, the run's number of stages")
    minted = session.scalar(sa.select(sa.func.count(Peer.id)).where(Peer.join_token_id == token.id)) or 0
    if minted >= token.max_peers:
        raise Conflict(
            f"this join token has registered its {token.max_peers} peers; ask the run's owner for another"
        )
    if _identity_is_banned(session, run.id, token.id, registration.tls_fingerprint):
        raise Forbidden(f"a peer of this join token or data-plane key is banned from run {run.id}")
    credential = new_token()
    peer = Peer(
        run_id=run.id,
        name=registration.name,
        address=announced_address(registration, seen_from),
        tls_fingerprint=registration.tls_fingerprint,
        device=registration.device,
        device_name=registration.device_name,
        throughput=registration.throughput,
        requested_stage=registration.requested_stage,
        state=PeerState.JOINING,
        credential_hash=token_hash(credential),
        join_token_id=token.id,
        trusted=token.verifier,
    )
    session.add(peer)
    session.flush()
    if not peer.name:
        peer.name = f"peer-{peer.id}"
    record_event(
        session,
        run_id=run.id,
        peer_id=peer.id,
        kind="peer_registered",
        message=f"{peer.name} registered from {peer.address} ({peer.device})",
        data={"requested_stage": registration.requested_stage, "throughput": registration.throughput},
    )
    return peer, credential, run


def _identity_is_banned(session: Session, run_id: int, token_id: int, fingerprint: str) -> bool:
    """A peer's identity is the join token that minted it plus its data-plane key (the certificate
    fingerprint, when it has one); a display name is no identity. A ban holds for both: the token
    mints no more peers of the run, and the key registers under no other token of it."""
    same_identity = Peer.join_token_id == token_id
    if fingerprint:
        same_identity = sa.or_(same_identity, Peer.tls_fingerprint == fingerprint)
    query = (
        sa.select(Peer.id)
        .where(Peer.run_id == run_id, Peer.state == PeerState.BANNED, same_identity)
        .limit(1)
    )
    return session.scalar(query) is not None


def authenticate_peer(session: Session, peer_id: int, credential: str) -> Peer | None:
    """The peer whose registration returned this credential, unless it was kicked or banned or the
    join token that minted it was revoked since."""
    peer = session.get(Peer, peer_id)
    if peer is None or not hmac.compare_digest(peer.credential_hash, token_hash(credential)):
        return None
    if peer.state in REMOVED_STATES:
        return None
    if peer.join_token_id is not None:
        token = session.get(JoinToken, peer.join_token_id)
        if token is None or token.revoked_at is not None:
            return None
    return peer


def cut_off_token_peers(session: Session, token: JoinToken, *, by: User) -> list[Peer]:
    """The token was revoked: its peers still in the run are kicked (they may not reconnect)."""
    query = sa.select(Peer).where(Peer.join_token_id == token.id, Peer.state.not_in(GONE_STATES))
    return [
        remove_peer(session, peer, state=PeerState.KICKED, reason=f"join token {token.id} revoked", by=by)
        for peer in session.scalars(query)
    ]


def get_peer(session: Session, peer_id: int) -> Peer:
    peer = session.get(Peer, peer_id)
    if peer is None:
        raise NotFound(f"peer {peer_id} not found")
    return peer


def remove_peer(
    session: Session, peer: Peer, *, state: Literal[PeerState.KICKED, PeerState.BANNED], reason: str, by: User
) -> Peer:
    """An owner or admin kicks (may rejoin with a token) or bans (its identity may not rejoin the run,
    `_identity_is_banned`) a peer."""
    if peer.state == PeerState.BANNED or (state == PeerState.KICKED and peer.state in GONE_STATES):
        raise Conflict(f"peer {peer.id} is already {peer.state}")
    peer.state = state
    if peer.left_at is None:
        peer.left_at = utcnow()
    session.flush()
    record_event(
        session,
        run_id=peer.run_id,
        peer_id=peer.id,
        kind=f"peer_{state}",
        message=f"{peer.name} {state} by {by.username}" + (f": {reason}" if reason else ""),
        data={"reason": reason},
    )
    return peer


def list_peers(session: Session, run_id: int, *, after: int = 0, limit: int | None = None) -> list[Peer]:
    """Peers of a run by id; pages with `after` (the last id seen) so a big swarm is not one response."""
    query = sa.select(Peer).where(Peer.run_id == run_id, Peer.id > after).order_by(Peer.id).limit(limit)
    return list(session.scalars(query))


def list_all_peers(session: Session) -> list[Peer]:
    return list(session.scalars(sa.select(Peer).order_by(Peer.id.desc())))


def list_assignments(session: Session, run_id: int) -> list[StageAssignment]:
    query = sa.select(StageAssignment).where(StageAssignment.run_id == run_id).order_by(StageAssignment.id)
    return list(session.scalars(query))
