"""Peer registration (authenticated by a join token) and admin control over peers."""

from __future__ import annotations

from typing import Literal

from anyio import from_thread
from fastapi import APIRouter, Request, status

from server.auth import AdminUser
from server.deps import FeedDep, PeerId, SessionDep
from server.frames import peer_frame
from server.publish import commit_and_publish
from server.schemas import ErrorOut, PeerAction, PeerOut
from server.services import peers
from server.services.runs import run_spec
from swarmhub.wire import PeerRegistered, PeerRegistration

router = APIRouter(tags=["peers"])


@router.post(
    "/api/peers/register",
    status_code=status.HTTP_201_CREATED,
    responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}, 409: {"model": ErrorOut}},
)
def register_peer(body: PeerRegistration, session: SessionDep, feed: FeedDep) -> PeerRegistered:
    peer, credential, run = peers.register_peer(session, body)
    commit_and_publish(session, feed, (run.id, peer_frame(peer)))
    return PeerRegistered(peer_id=peer.id, credential=credential, run=run_spec(run))


def _remove(
    request: Request,
    peer_id: int,
    state: Literal["kicked", "banned"],
    body: PeerAction | None,
    admin: AdminUser,
    session: SessionDep,
    feed: FeedDep,
) -> PeerOut:
    reason = body.reason if body else ""
    peer = peers.remove_peer(
        session, peers.get_peer(session, peer_id), state=state, reason=reason, by=admin.user
    )
    commit_and_publish(session, feed, (peer.run_id, peer_frame(peer)))
    # Routes run in a worker thread; the live swarm lives on the event loop.
    from_thread.run(request.app.state.live.kick_peer, peer.id, reason or f"{state} by an admin")
    return PeerOut.model_validate(peer)


_ADMIN_RESPONSES = {
    401: {"model": ErrorOut},
    403: {"model": ErrorOut},
    404: {"model": ErrorOut},
    409: {"model": ErrorOut},
}


@router.post("/api/peers/{peer_id}/kick", responses=_ADMIN_RESPONSES)
def kick_peer(
    request: Request,
    peer_id: PeerId,
    admin: AdminUser,
    session: SessionDep,
    feed: FeedDep,
    body: PeerAction | None = None,
) -> PeerOut:
    return _remove(request, peer_id, "kicked", body, admin, session, feed)


@router.post("/api/peers/{peer_id}/ban", responses=_ADMIN_RESPONSES)
def ban_peer(
    request: Request,
    peer_id: PeerId,
    admin: AdminUser,
    session: SessionDep,
    feed: FeedDep,
    body: PeerAction | None = None,
) -> PeerOut:
    return _remove(request, peer_id, "banned", body, admin, session, feed)


@router.get(
    "/api/admin/peers", tags=["admin"], responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}}
)
def list_all_peers(_admin: AdminUser, session: SessionDep) -> list[PeerOut]:
    return [PeerOut.model_validate(p) for p in peers.list_all_peers(session)]
