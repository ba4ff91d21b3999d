"""The contribution ledger over REST: a run's totals for its owner (JSON and CSV), and a
participant's own view behind the link its peer printed."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Response
from fastapi import Path as PathParam

from server.auth import CurrentUser
from server.deps import RunId, SessionDep
from server.ledger import service
from server.ledger.schemas import OwnContribution, RunLedger
from server.schemas import ErrorOut
from server.services import runs

router = APIRouter(tags=["ledger"], responses={404: {"model": ErrorOut}})

ViewToken = Annotated[str, PathParam(min_length=16, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]


@router.get("/api/runs/{run_id}/ledger", responses={401: {"model": ErrorOut}})
def get_run_ledger(run_id: RunId, caller: CurrentUser, session: SessionDep) -> RunLedger:
    """What each peer and each participant (join token) contributed, most first."""
    return service.run_ledger(session, runs.get_run_for(session, caller.user, run_id))


@router.get(
    "/api/runs/{run_id}/ledger.csv",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}}}, 401: {"model": ErrorOut}},
)
def export_run_ledger(run_id: RunId, caller: CurrentUser, session: SessionDep) -> Response:
    """The per-peer ledger as CSV, one row per peer with its participant."""
    ledger = service.run_ledger(session, runs.get_run_for(session, caller.user, run_id))
    return Response(
        service.ledger_csv(ledger),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="run-{run_id}-ledger.csv"'},
    )


@router.get("/api/contributions/{token}")
def get_own_contribution(token: ViewToken, session: SessionDep) -> OwnContribution:
    """A participant's own view: no account needed, the link is the key."""
    return service.own_contribution(session, token)
