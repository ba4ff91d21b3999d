"""Peers: registration with a join token, admin removal, and listings."""

from __future__ import annotations

import hmac
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.errors import Conflict, Forbidden, NotFound, Unauthorized, Unprocessable
from server.models import Peer, Run, StageAssignment, User, utcnow
from server.security import new_token, token_hash
from server.services.events import record_event
from server.services.runs import JOINABLE_STATUSES
from server.services.tokens import find_usable_token
from swarmhub.wire import PeerRegistration

GONE_STATES = frozenset({"left", "kicked", "banned"})


def register_peer(session: Session, registration: PeerRegistration) -> tuple[Peer, str, Run]:
    """A new peer in state 'joining' with no stage yet; returns it, its plaintext credential and run."""
    token = find_usable_token(session, registration.join_token)
    if token is None:
        raise Unauthorized("invalid or revoked join token")
    run = session.get_one(Run, token.run_id)
    if run.status not in JOINABLE_STATUSES:
        raise Conflict(f"run {run.id} is {run.status}; it accepts no new peers")
    if registration.requested_stage is not None and registration.requested_stage >= run.num_stages:
        raise Unprocessable(f"requested_stage must be below {run.num_stages}, the run's number of stages")
    if registration.name and _name_is_banned(session, run.id, registration.name):
        raise Forbidden(f"peer name {registration.name!r} is banned from run {run.id}")
    credential = new_token()
    peer = Peer(
        run_id=run.id,
        name=registration.name,
        address=registration.address,
        device=registration.device,
        device_name=registration.device_name,
        throughput=registration.throughput,
        requested_stage=registration.requested_stage,
        state="joining",
        credential_hash=token_hash(credential),
        join_token_id=token.id,
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


def _name_is_banned(session: Session, run_id: int, name: str) -> bool:
    query = (
        sa.select(Peer.id).where(Peer.run_id == run_id, Peer.name == name, Peer.state == "banned").limit(1)
    )
    return session.scalar(query) is not None


def authenticate_peer(session: Session, peer_id: int, credential: str) -> Peer | None:
    """The peer whose registration returned this credential, unless it was kicked or banned."""
    peer = session.get(Peer, peer_id)
    if peer is None or not hmac.compare_digest(peer.credential_hash, token_hash(credential)):
        return None
    if peer.state in {"kicked", "banned"}:
        return None
    return peer


def get_peer(session: Session, peer_id: int) -> Peer:
    peer = session.get(Peer, peer_id)
    if peer is None:
        raise NotFound(f"peer {peer_id} not found")
    return peer


def remove_peer(
    session: Session, peer: Peer, *, state: Literal["kicked", "banned"], reason: str, by: User
) -> Peer:
    """An admin kicks (may rejoin with a token) or bans (its name may not rejoin this run) a peer."""
    if peer.state == "banned" or (state == "kicked" and peer.state in GONE_STATES):
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
