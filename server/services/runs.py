"""Runs: creation, visibility, the status state machine, and the RunSpec peers receive."""

from __future__ import annotations

import secrets
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.errors import Conflict, Forbidden, NotFound
from server.models import Peer, Run, Step, User, fill_run_settings, run_settings, utcnow
from server.schemas import LossPoint, RunDetail, RunHealthOut, RunLabelsUpdate, RunOut
from server.services.events import record_event
from server.services.steps import latest_loss
from swarmhub.presets import get_preset
from swarmhub.run_settings import RunSettings
from swarmhub.status import PeerState, RunStatus
from swarmhub.wire import RunSpec

HealthOf = Callable[[Run], RunHealthOut]
"""A run's health now, from the live swarm (`LiveSwarm.health`)."""

# action -> (statuses it may start from, status it leads to, event kind)
TRANSITIONS: dict[str, tuple[frozenset[RunStatus], RunStatus, str]] = {
    "pause": (frozenset({RunStatus.ACTIVE}), RunStatus.PAUSED, "run_paused"),
    "resume": (frozenset({RunStatus.PAUSED}), RunStatus.ACTIVE, "run_resumed"),
    "archive": (
        frozenset({RunStatus.ACTIVE, RunStatus.PAUSED, RunStatus.FINISHED}),
        RunStatus.ARCHIVED,
        "run_archived",
    ),
}
JOINABLE_STATUSES = frozenset({RunStatus.ACTIVE, RunStatus.PAUSED})


def create_run(session: Session, owner: User, settings: RunSettings) -> Run:
    run = Run(owner_id=owner.id, status=RunStatus.ACTIVE, data_key=secrets.token_urlsafe(32))
    fill_run_settings(run, settings)
    session.add(run)
    session.flush()
    record_event(
        session, run_id=run.id, kind="run_created", message=f"run {run.name!r} created by {owner.username}"
    )
    return run


def _visible(query: sa.Select, user: User) -> sa.Select:
    return query if user.role == "admin" else query.where(Run.owner_id == user.id)


def visible_runs(session: Session, user: User, *, archived: bool = True) -> list[Run]:
    query = _visible(sa.select(Run), user)
    if not archived:
        query = query.where(Run.archived.is_(False))
    return list(session.scalars(query.order_by(Run.id.desc())))


def visible_run_details(
    session: Session, user: User, *, health: HealthOf, archived: bool = False
) -> list[RunDetail]:
    """The runs this user may see, newest first, with peer counts, latest losses and health.

    Three queries whatever the number of runs: the runs, peer counts grouped by run and state, and
    each run's newest step with a loss. The grouped queries select their runs with the same filter
    (as a subquery), so an admin's list of thousands of runs binds no list of ids."""
    listed = visible_runs(session, user, archived=archived)
    if not listed:
        return []
    run_ids = _visible(sa.select(Run.id), user).scalar_subquery()
    counts = {run.id: dict.fromkeys(PeerState, 0) for run in listed}
    for run_id, state, count in session.execute(
        sa.select(Peer.run_id, Peer.state, sa.func.count())
        .where(Peer.run_id.in_(run_ids))
        .group_by(Peer.run_id, Peer.state)
    ):
        if run_id in counts:  # a run created since the first query is not listed
            counts[run_id][state] = count
    newest = (
        sa.select(Step.run_id, sa.func.max(Step.step).label("step"))
        .where(Step.run_id.in_(run_ids), Step.loss.is_not(None))
        .group_by(Step.run_id)
        .subquery()
    )
    losses: dict[int, float | None] = {
        run_id: loss
        for run_id, loss in session.execute(
            sa.select(Step.run_id, Step.loss).join(
                newest, sa.and_(Step.run_id == newest.c.run_id, Step.step == newest.c.step)
            )
        )
    }
    return [
        _detail(run, peer_counts=counts[run.id], latest_loss=losses.get(run.id), health=health(run))
        for run in listed
    ]


def get_run_for(session: Session, user: User, run_id: int) -> Run:
    """The run if this user may see it; others' runs are reported missing, not forbidden."""
    run = session.get(Run, run_id)
    if run is None or (user.role != "admin" and run.owner_id != user.id):
        raise NotFound(f"run {run_id} not found")
    return run


def change_status(session: Session, run: Run, action: str, *, by: User) -> Run:
    sources, target, kind = TRANSITIONS[action]
    if run.status not in sources:
        raise Conflict(f"cannot {action} a run that is {run.status}")
    run.status = target
    if target == RunStatus.ARCHIVED:
        run.archived = True
    run.updated_at = utcnow()
    session.flush()
    record_event(session, run_id=run.id, kind=kind, message=f"run {target} by {by.username}")
    return run


def update_labels(session: Session, run: Run, labels: RunLabelsUpdate, *, by: User) -> Run:
    """Tags, notes and archiving are the owner's alone: an admin sees them but does not rewrite them."""
    if run.owner_id != by.id:
        raise Forbidden("only the run's owner edits its tags, notes and archiving")
    if labels.tags is not None:
        run.tags = list(dict.fromkeys(labels.tags))
    if labels.notes is not None:
        run.notes = labels.notes
    if labels.archived is not None and labels.archived != run.archived:
        run.archived = labels.archived
        kind = "run_filed" if labels.archived else "run_unfiled"
        verb = "archived" if labels.archived else "unarchived"
        record_event(session, run_id=run.id, kind=kind, message=f"run {verb} (list only) by {by.username}")
    run.updated_at = utcnow()
    session.flush()
    return run


def loss_curve(session: Session, run: Run, *, points: int) -> list[LossPoint]:
    """About `points` losses spread evenly over the run's steps, oldest first: one query whatever the
    run's length (a sparkline or an overlay needs the shape, not every step)."""
    last = run.current_step
    if last <= 0:
        return []
    count = min(points, last)
    picks = sorted({round(i * (last - 1) / max(count - 1, 1)) for i in range(count)})
    rows = session.execute(
        sa.select(Step.step, Step.loss)
        .where(Step.run_id == run.id, Step.step.in_(picks), Step.loss.is_not(None))
        .order_by(Step.step)
    )
    return [LossPoint(step=step, loss=loss) for step, loss in rows]


def peer_counts(session: Session, run_id: int) -> dict[PeerState, int]:
    counts = dict.fromkeys(PeerState, 0)
    rows = session.execute(
        sa.select(Peer.state, sa.func.count()).where(Peer.run_id == run_id).group_by(Peer.state)
    )
    for state, count in rows:
        counts[state] = count
    return counts


def run_counts_by_status(session: Session) -> dict[RunStatus, int]:
    return {
        status: count
        for status, count in session.execute(sa.select(Run.status, sa.func.count()).group_by(Run.status))
    }


def _detail(
    run: Run, *, peer_counts: dict[PeerState, int], latest_loss: float | None, health: RunHealthOut
) -> RunDetail:
    return RunDetail(
        **RunOut.model_validate(run).model_dump(),
        parameter_count=get_preset(run.model_preset).parameter_count,
        peer_counts=peer_counts,
        latest_loss=latest_loss,
        health=health,
    )


def run_detail(session: Session, run: Run, *, health: HealthOf) -> RunDetail:
    return _detail(
        run,
        peer_counts=peer_counts(session, run.id),
        latest_loss=latest_loss(session, run.id),
        health=health(run),
    )


def run_spec(run: Run) -> RunSpec:
    """What a peer needs to train this run (sent on registration and in the control channel's Welcome)."""
    return RunSpec(run_id=run.id, **dict(run_settings(run)))
