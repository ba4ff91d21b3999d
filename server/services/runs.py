"""Runs: creation, visibility, the status state machine, and the RunSpec peers receive."""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.errors import Conflict, NotFound
from server.models import PEER_STATES, Peer, Run, User, utcnow
from server.schemas import RunCreate, RunDetail, RunOut
from server.services.events import record_event
from server.services.steps import latest_loss
from swarmhub.presets import get_preset
from swarmhub.wire import RunSpec

# action -> (statuses it may start from, status it leads to, event kind)
TRANSITIONS: dict[str, tuple[frozenset[str], str, str]] = {
    "pause": (frozenset({"active"}), "paused", "run_paused"),
    "resume": (frozenset({"paused"}), "active", "run_resumed"),
    "archive": (frozenset({"active", "paused", "finished"}), "archived", "run_archived"),
}
JOINABLE_STATUSES = frozenset({"active", "paused"})


def create_run(session: Session, owner: User, params: RunCreate) -> Run:
    run = Run(owner_id=owner.id, status="active", data_key=secrets.token_urlsafe(32), **params.model_dump())
    session.add(run)
    session.flush()
    record_event(
        session, run_id=run.id, kind="run_created", message=f"run {run.name!r} created by {owner.username}"
    )
    return run


def visible_runs(session: Session, user: User) -> list[Run]:
    query = sa.select(Run).order_by(Run.id.desc())
    if user.role != "admin":
        query = query.where(Run.owner_id == user.id)
    return list(session.scalars(query))


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
    run.updated_at = utcnow()
    session.flush()
    record_event(session, run_id=run.id, kind=kind, message=f"run {target} by {by.username}")
    return run


def peer_counts(session: Session, run_id: int) -> dict[str, int]:
    counts = dict.fromkeys(PEER_STATES, 0)
    rows = session.execute(
        sa.select(Peer.state, sa.func.count()).where(Peer.run_id == run_id).group_by(Peer.state)
    )
    for state, count in rows:
        counts[state] = count
    return counts


def run_counts_by_status(session: Session) -> dict[str, int]:
    return {
        status: count
        for status, count in session.execute(sa.select(Run.status, sa.func.count()).group_by(Run.status))
    }


def run_detail(session: Session, run: Run) -> RunDetail:
    return RunDetail(
        **RunOut.model_validate(run).model_dump(),
        parameter_count=get_preset(run.model_preset).parameter_count,
        peer_counts=peer_counts(session, run.id),
        latest_loss=latest_loss(session, run.id),
    )


def run_spec(run: Run) -> RunSpec:
    """What a peer needs to train this run (sent on registration and in the control channel's Welcome)."""
    return RunSpec(
        run_id=run.id,
        name=run.name,
        model_preset=run.model_preset,
        dataset=run.dataset,
        num_stages=run.num_stages,
        target_batch_size=run.target_batch_size,
        microbatch_size=run.microbatch_size,
        seq_len=run.seq_len,
        optimizer=run.optimizer,
        learning_rate=run.learning_rate,
        warmup_steps=run.warmup_steps,
        weight_decay=run.weight_decay,
        compression=run.compression,
        max_steps=run.max_steps,
        seed=run.seed,
    )
