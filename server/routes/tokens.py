"""Join tokens of a run: issue (plaintext shown once), list, revoke."""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from server.auth import CurrentUser
from server.deps import FeedDep, RunId, SessionDep, TokenId
from server.publish import commit_and_publish
from server.schemas import ErrorOut, TokenCreate, TokenIssued, TokenOut
from server.services import runs, tokens

router = APIRouter(
    prefix="/api/runs/{run_id}/tokens",
    tags=["tokens"],
    responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}},
)


def join_command(base_url: str, token: str) -> str:
    return f"swarmhub-peer join {base_url.rstrip('/')} --token {token}"


@router.post("", status_code=status.HTTP_201_CREATED, responses={409: {"model": ErrorOut}})
def issue_token(
    request: Request,
    run_id: RunId,
    caller: CurrentUser,
    session: SessionDep,
    feed: FeedDep,
    body: TokenCreate | None = None,
) -> TokenIssued:
    run = runs.get_run_for(session, caller.user, run_id)
    token, plaintext = tokens.issue_token(session, run, label=body.label if body else "")
    commit_and_publish(session, feed)
    return TokenIssued(
        **TokenOut.model_validate(token).model_dump(),
        token=plaintext,
        join_command=join_command(str(request.base_url), plaintext),
    )


@router.get("")
def list_tokens(run_id: RunId, caller: CurrentUser, session: SessionDep) -> list[TokenOut]:
    runs.get_run_for(session, caller.user, run_id)
    return [TokenOut.model_validate(t) for t in tokens.list_tokens(session, run_id)]


@router.delete("/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_token(
    run_id: RunId, token_id: TokenId, caller: CurrentUser, session: SessionDep, feed: FeedDep
) -> None:
    runs.get_run_for(session, caller.user, run_id)
    tokens.revoke_token(session, tokens.get_token(session, run_id, token_id))
    commit_and_publish(session, feed)
