"""Runs and what happened in them. Owners see their own runs, admins every run."""

from __future__ import annotations

from typing import Annotated

from anyio import from_thread
from fastapi import APIRouter, Query, status

from server.auth import CurrentUser
from server.datasets.service import check_usable
from server.deps import MAX_ID, FeedDep, LiveDep, RunId, SessionDep
from server.frames import run_frame
from server.live import LiveSwarm
from server.publish import commit_and_publish
from server.schemas import (
    AssignmentOut,
    ErrorOut,
    EventOut,
    LossPoint,
    MetricOut,
    PeerOut,
    RunCreate,
    RunDetail,
    RunLabelsUpdate,
    RunOut,
    StepOut,
)
from server.services import events, peers, runs, steps

router = APIRouter(
    prefix="/api/runs", tags=["runs"], responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}}
)

Limit = Annotated[int, Query(ge=1, le=1000)]


def _health(live: LiveSwarm) -> runs.HealthOf:
    return lambda run: live.health(run.id, run.status)


@router.post("", status_code=status.HTTP_201_CREATED)
def create_run(
    body: RunCreate, caller: CurrentUser, session: SessionDep, feed: FeedDep, live: LiveDep
) -> RunDetail:
    check_usable(session, caller.user, body.dataset)
    run = runs.create_run(session, caller.user, body)
    commit_and_publish(session, feed)
    return runs.run_detail(session, run, health=_health(live))


@router.get("")
def list_runs(
    caller: CurrentUser,
    session: SessionDep,
    live: LiveDep,
    archived: Annotated[bool, Query(description="Include archived runs")] = False,
) -> list[RunDetail]:
    """The caller's runs (an admin's: every run), newest first, with peer counts, latest loss and health."""
    return runs.visible_run_details(session, caller.user, health=_health(live), archived=archived)


@router.get("/{run_id}")
def get_run(run_id: RunId, caller: CurrentUser, session: SessionDep, live: LiveDep) -> RunDetail:
    """The run with its health now: only `health.state` "training" means samples are trained."""
    run = runs.get_run_for(session, caller.user, run_id)
    return runs.run_detail(session, run, health=_health(live))


def _change_status(
    live: LiveDep, run_id: int, action: str, caller: CurrentUser, session: SessionDep, feed: FeedDep
) -> RunOut:
    run = runs.change_status(session, runs.get_run_for(session, caller.user, run_id), action, by=caller.user)
    commit_and_publish(session, feed, (run.id, run_frame(run)))
    # Routes run in a worker thread; the live swarm lives on the event loop.
    from_thread.run(live.run_status_changed, run.id, run.status)
    return RunOut.model_validate(run)


@router.post("/{run_id}/pause", responses={409: {"model": ErrorOut}})
def pause_run(
    live: LiveDep, run_id: RunId, caller: CurrentUser, session: SessionDep, feed: FeedDep
) -> RunOut:
    return _change_status(live, run_id, "pause", caller, session, feed)


@router.post("/{run_id}/resume", responses={409: {"model": ErrorOut}})
def resume_run(
    live: LiveDep, run_id: RunId, caller: CurrentUser, session: SessionDep, feed: FeedDep
) -> RunOut:
    return _change_status(live, run_id, "resume", caller, session, feed)


@router.post("/{run_id}/archive", responses={409: {"model": ErrorOut}})
def archive_run(
    live: LiveDep, run_id: RunId, caller: CurrentUser, session: SessionDep, feed: FeedDep
) -> RunOut:
    return _change_status(live, run_id, "archive", caller, session, feed)


@router.patch("/{run_id}/labels", responses={403: {"model": ErrorOut}})
def update_labels(
    run_id: RunId,
    body: RunLabelsUpdate,
    caller: CurrentUser,
    session: SessionDep,
    feed: FeedDep,
    live: LiveDep,
) -> RunDetail:
    """Set the run's tags, notes or archived flag (its owner only)."""
    run = runs.update_labels(session, runs.get_run_for(session, caller.user, run_id), body, by=caller.user)
    commit_and_publish(session, feed, (run.id, run_frame(run)))
    return runs.run_detail(session, run, health=_health(live))


@router.get("/{run_id}/loss-curve")
def loss_curve(
    run_id: RunId,
    caller: CurrentUser,
    session: SessionDep,
    points: Annotated[int, Query(ge=2, le=2000, description="How many steps to sample")] = 200,
) -> list[LossPoint]:
    """The loss at about `points` evenly spaced steps, oldest first (steps without a loss are skipped)."""
    return runs.loss_curve(session, runs.get_run_for(session, caller.user, run_id), points=points)


@router.get("/{run_id}/steps")
def list_steps(
    run_id: RunId,
    caller: CurrentUser,
    session: SessionDep,
    after: Annotated[int, Query(ge=-1, le=MAX_ID, description="Only steps numbered above this")] = -1,
    limit: Limit = 100,
) -> list[StepOut]:
    runs.get_run_for(session, caller.user, run_id)
    return [StepOut.model_validate(s) for s in steps.list_steps(session, run_id, after=after, limit=limit)]


@router.get("/{run_id}/metrics")
def list_metrics(
    run_id: RunId,
    caller: CurrentUser,
    session: SessionDep,
    name: Annotated[str | None, Query(max_length=64)] = None,
    after_step: Annotated[int, Query(ge=-1, le=MAX_ID, description="Only metrics of steps above this")] = -1,
    limit: Limit = 100,
) -> list[MetricOut]:
    runs.get_run_for(session, caller.user, run_id)
    rows = steps.list_metrics(session, run_id, name=name, after_step=after_step, limit=limit)
    return [MetricOut.model_validate(m) for m in rows]


@router.get("/{run_id}/peers")
def list_run_peers(
    run_id: RunId,
    caller: CurrentUser,
    session: SessionDep,
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Only peers with an id above this")] = 0,
    limit: Limit = 1000,
) -> list[PeerOut]:
    runs.get_run_for(session, caller.user, run_id)
    return [PeerOut.model_validate(p) for p in peers.list_peers(session, run_id, after=after, limit=limit)]


@router.get("/{run_id}/events")
def list_events(
    run_id: RunId,
    caller: CurrentUser,
    session: SessionDep,
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Only events with an id above this")] = 0,
    limit: Limit = 100,
) -> list[EventOut]:
    runs.get_run_for(session, caller.user, run_id)
    return [EventOut.model_validate(e) for e in events.list_events(session, run_id, after=after, limit=limit)]


@router.get("/{run_id}/assignments")
def list_assignments(run_id: RunId, caller: CurrentUser, session: SessionDep) -> list[AssignmentOut]:
    runs.get_run_for(session, caller.user, run_id)
    return [AssignmentOut.model_validate(a) for a in peers.list_assignments(session, run_id)]
