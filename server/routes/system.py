"""Liveness and Prometheus metrics."""

from __future__ import annotations

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Request, Response, status
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from server.deps import SessionDep
from server.schemas import ErrorOut, HealthOut
from server.services.runs import run_counts_by_status

router = APIRouter(tags=["system"])


@router.get("/healthz", responses={503: {"model": ErrorOut}})
def healthz(session: SessionDep) -> HealthOut:
    try:
        session.execute(sa.select(1))
    except SQLAlchemyError as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "database unreachable") from exc
    return HealthOut(status="ok")


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(request: Request, session: SessionDep) -> Response:
    state = request.app.state
    state.metrics.set_run_counts(run_counts_by_status(session))
    state.metrics.peers_connected.set(state.live.connected_peer_count())
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
