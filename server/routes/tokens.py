"""Join tokens of a run: issue (plaintext shown once), list, revoke."""

from __future__ import annotations

from anyio import from_thread
from fastapi import APIRouter, status

from server.auth import CurrentUser
from server.deps import FeedDep, LiveDep, RunId, SessionDep, SettingsDep, TokenId
from server.frames import peer_frame
from server.publish import commit_and_publish
from server.schemas import ErrorOut, TokenCreate, TokenIssued, TokenOut
from server.services import peers, runs, tokens

router = APIRouter(
    prefix="/api/runs/{run_id}/tokens",
    tags=["tokens"],
    responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}},
)


def join_command(coordinator_url: str, token: str) -> str:
    """The one line a participant runs. It names the coordinator's own join URL (its `public_url`),
    never the Host header of whoever asked: an owner on the coordinator's machine would otherwise
    hand out a loopback URL no other machine can use."""
    return f"swarmhub-peer join {coordinator_url.rstrip('/')} --token {token}"


@router.post("", status_code=status.HTTP_201_CREATED, responses={409: {"model": ErrorOut}})
def issue_token(
    run_id: RunId,
    caller: CurrentUser,
    session: SessionDep,
    feed: FeedDep,
    settings: SettingsDep,
    body: TokenCreate | None = None,
) -> TokenIssued:
    run = runs.get_run_for(session, caller.user, run_id)
    body = body or TokenCreate()
    token, plaintext = tokens.issue_token(
        session, run, label=body.label, max_peers=body.max_peers, verifier=body.verifier
    )
    commit_and_publish(session, feed)
    return TokenIssued(
        **TokenOut.model_validate(token).model_dump(),
        token=plaintext,
        join_command=join_command(settings.join_url(), plaintext),
    )


@router.get("")
def list_tokens(run_id: RunId, caller: CurrentUser, session: SessionDep) -> list[TokenOut]:
    runs.get_run_for(session, caller.user, run_id)
    return [TokenOut.model_validate(t) for t in tokens.list_tokens(session, run_id)]


@router.delete("/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_token(
    run_id: RunId, token_id: TokenId, caller: CurrentUser, session: SessionDep, feed: FeedDep, live: LiveDep
) -> None:
    """Revoke: the token registers no more peers, and the peers it registered are cut off (kicked,
    their data-plane tickets revoked) and may not reconnect."""
    runs.get_run_for(session, caller.user, run_id)
    token = tokens.get_token(session, run_id, token_id)
    tokens.revoke_token(session, token)
    removed = peers.cut_off_token_peers(session, token, by=caller.user)
    commit_and_publish(session, feed, *((run_id, peer_frame(peer)) for peer in removed))
    for peer in removed:
        # Routes run in a worker thread; the live swarm lives on the event loop.
        from_thread.run(live.kick_peer, peer.id, f"join token {token.id} revoked")
