"""Peer registration (authenticated by a join token); owners (of their runs) and admins kick and ban."""

from __future__ import annotations

from typing import Literal

from anyio import from_thread
from fastapi import APIRouter, Request, status

from server.auth import AdminUser, Caller, CurrentUser
from server.deps import FeedDep, LiveDep, PeerId, SessionDep
from server.frames import peer_frame
from server.ledger.service import open_account
from server.publish import commit_and_publish
from server.schemas import ErrorOut, PeerAction, PeerOut
from server.services import peers, runs
from server.services.runs import run_spec
from swarmhub.status import PeerState
from swarmhub.wire import PeerRegistered, PeerRegistration

router = APIRouter(tags=["peers"])


@router.post(
    "/api/peers/register",
    status_code=status.HTTP_201_CREATED,
    responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}, 409: {"model": ErrorOut}},
)
def register_peer(
    request: Request, body: PeerRegistration, session: SessionDep, feed: FeedDep
) -> PeerRegistered:
    seen_from = request.client.host if request.client is not None else "127.0.0.1"
    peer, credential, run = peers.register_peer(session, body, seen_from)
    view_token = open_account(session, peer)
    commit_and_publish(session, feed, (run.id, peer_frame(peer)))
    return PeerRegistered(
        peer_id=peer.id,
        credential=credential,
        run=run_spec(run),
        address=peer.address,
        contribution_token=view_token,
    )


def _remove(
    live: LiveDep,
    peer_id: int,
    state: Literal[PeerState.KICKED, PeerState.BANNED],
    body: PeerAction | None,
    caller: Caller,
    session: SessionDep,
    feed: FeedDep,
) -> PeerOut:
    reason = body.reason if body else ""
    peer = peers.get_peer(session, peer_id)
    # A peer of someone else's run is reported missing, as the run itself would be.
    runs.get_run_for(session, caller.user, peer.run_id)
    peer = peers.remove_peer(session, peer, state=state, reason=reason, by=caller.user)
    commit_and_publish(session, feed, (peer.run_id, peer_frame(peer)))
    # Routes run in a worker thread; the live swarm lives on the event loop.
    who = "an admin" if caller.is_admin else "the run's owner"
    from_thread.run(live.kick_peer, peer.id, reason or f"{state} by {who}")
    return PeerOut.model_validate(peer)


_ADMIN_RESPONSES = {
    401: {"model": ErrorOut},
    403: {"model": ErrorOut},
    404: {"model": ErrorOut},
    409: {"model": ErrorOut},
}


@router.post("/api/peers/{peer_id}/kick", responses=_ADMIN_RESPONSES)
def kick_peer(
    live: LiveDep,
    peer_id: PeerId,
    caller: CurrentUser,
    session: SessionDep,
    feed: FeedDep,
    body: PeerAction | None = None,
) -> PeerOut:
    return _remove(live, peer_id, PeerState.KICKED, body, caller, session, feed)


@router.post("/api/peers/{peer_id}/ban", responses=_ADMIN_RESPONSES)
def ban_peer(
    live: LiveDep,
    peer_id: PeerId,
    caller: CurrentUser,
    session: SessionDep,
    feed: FeedDep,
    body: PeerAction | None = None,
) -> PeerOut:
    return _remove(live, peer_id, PeerState.BANNED, body, caller, session, feed)


@router.get(
    "/api/admin/peers", tags=["admin"], responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}}
)
def list_all_peers(_admin: AdminUser, session: SessionDep) -> list[PeerOut]:
    return [PeerOut.model_validate(p) for p in peers.list_all_peers(session)]
