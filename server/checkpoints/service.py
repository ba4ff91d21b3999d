"""Checkpoints: who may upload or read them, recording uploads, completeness, and retention.

A step's checkpoint is complete when every stage of the run has a file for it. The `checkpoints`
table is the truth; each step's manifest.json mirrors it for someone reading the directory.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from fastapi import status
from sqlalchemy.orm import Session

from server.checkpoints.store import CheckpointStore
from server.errors import Conflict, Forbidden, NotFound, ServiceError, Unauthorized, Unprocessable
from server.models import Checkpoint, JoinToken, Peer, RequestedCheckpoint, Run, Step
from server.services.events import record_event
from server.services.peers import authenticate_peer
from swarmhub.status import PeerState
from swarmhub.units import format_bytes
from swarmhub.wire import CheckpointRequest


class QuotaExceeded(ServiceError):
    status_code = status.HTTP_413_CONTENT_TOO_LARGE


@dataclass(frozen=True)
class StepCheckpoint:
    run_id: int
    step: int
    num_stages: int
    rows: list[Checkpoint]

    @property
    def complete(self) -> bool:
        return {row.stage for row in self.rows} >= set(range(self.num_stages))


def peer_for_run(session: Session, run_id: int, peer_id: int, credential: str) -> Peer:
    """The authenticated peer, which must belong to this run."""
    peer = authenticate_peer(session, peer_id, credential)
    if peer is None:
        raise Unauthorized(
            "invalid peer id or credential (or the peer was kicked or banned, or its join token revoked)"
        )
    if peer.run_id != run_id:
        raise Forbidden(f"peer {peer_id} does not belong to run {run_id}")
    if peer.state in (PeerState.LOST, PeerState.LEFT):
        raise Forbidden(
            f"peer {peer_id} is {peer.state}; only a peer serving the run reads or writes its checkpoints"
        )
    token = session.get(JoinToken, peer.join_token_id)
    if token is None or token.revoked_at is not None:
        raise Unauthorized(f"the join token of peer {peer_id} was revoked")
    return peer


def record_requests(
    session: Session, run_id: int, peer_ids: Iterable[int], request: CheckpointRequest
) -> list[Any]:
    """The coordinator is asking these peers for a stage as of a step: from now on they may upload it."""
    step, stage = request.step, request.stage
    for peer_id in peer_ids:
        asked = sa.select(RequestedCheckpoint.id).where(
            RequestedCheckpoint.run_id == run_id,
            RequestedCheckpoint.peer_id == peer_id,
            RequestedCheckpoint.step == step,
            RequestedCheckpoint.stage == stage,
        )
        if session.scalar(asked) is None:
            session.add(RequestedCheckpoint(run_id=run_id, peer_id=peer_id, step=step, stage=stage))
    return []  # nothing for the dashboard


def check_asked(session: Session, run: Run, peer: Peer, step: int, stage: int) -> None:
    """Raise unless the coordinator asked `peer` for this stage at this step and it is not stored yet:
    a peer cannot plant a stage it does not serve, a step nobody asked for, or replace a stored file."""
    asked = set(
        session.scalars(
            sa.select(RequestedCheckpoint.stage).where(
                RequestedCheckpoint.run_id == run.id,
                RequestedCheckpoint.peer_id == peer.id,
                RequestedCheckpoint.step == step,
            )
        )
    )
    if not asked:
        raise Forbidden(f"the coordinator did not ask peer {peer.id} for a checkpoint of step {step}")
    if stage not in asked:
        raise Forbidden(
            f"peer {peer.id} was asked for stage {', '.join(map(str, sorted(asked)))} of step {step},"
            f" not stage {stage}"
        )
    stored = sa.select(Checkpoint.id).where(
        Checkpoint.run_id == run.id, Checkpoint.step == step, Checkpoint.stage == stage
    )
    if session.scalar(stored) is not None:
        raise Conflict(f"stage {stage} of step {step} is already stored; checkpoints are never overwritten")


def get_run(session: Session, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    return run


def steps(session: Session, run: Run) -> list[StepCheckpoint]:
    """Every step that has at least one stage file, newest first."""
    rows = session.scalars(
        sa.select(Checkpoint).where(Checkpoint.run_id == run.id).order_by(Checkpoint.step, Checkpoint.stage)
    )
    by_step: dict[int, list[Checkpoint]] = defaultdict(list)
    for row in rows:
        by_step[row.step].append(row)
    return [
        StepCheckpoint(run.id, step, run.num_stages, by_step[step]) for step in sorted(by_step, reverse=True)
    ]


def loss_at(session: Session, run: Run, step: int) -> float | None:
    """The loss of the newest committed step up to `step`: what the checkpoint's weights reached."""
    return session.scalar(
        sa.select(Step.loss)
        .where(Step.run_id == run.id, Step.step <= step, Step.loss.is_not(None))
        .order_by(Step.step.desc())
        .limit(1)
    )


def step_checkpoint(session: Session, run: Run, step: int) -> StepCheckpoint:
    rows = list(
        session.scalars(
            sa.select(Checkpoint)
            .where(Checkpoint.run_id == run.id, Checkpoint.step == step)
            .order_by(Checkpoint.stage)
        )
    )
    if not rows:
        raise NotFound(f"run {run.id} has no checkpoint at step {step}")
    return StepCheckpoint(run.id, step, run.num_stages, rows)


def latest_complete(session: Session, run: Run) -> StepCheckpoint:
    for candidate in steps(session, run):
        if candidate.complete:
            return candidate
    raise NotFound(f"run {run.id} has no complete checkpoint yet")


def stage_row(session: Session, run: Run, step: int, stage: int) -> Checkpoint:
    row = session.scalar(
        sa.select(Checkpoint).where(
            Checkpoint.run_id == run.id, Checkpoint.step == step, Checkpoint.stage == stage
        )
    )
    if row is None:
        raise NotFound(f"run {run.id} has no checkpoint of stage {stage} at step {step}")
    return row


def _oldest_retained(session: Session, run: Run, keep: int) -> int | None:
    """The oldest step retention keeps once `keep` complete steps exist; None while fewer do."""
    complete = [s.step for s in steps(session, run) if s.complete]
    return complete[keep - 1] if len(complete) >= keep else None


def quota_left(session: Session, run: Run, step: int, stage: int, *, quota: int) -> int | None:
    """Bytes an upload of (step, stage) may take under the run's quota (a re-upload frees what it
    replaces); None when there is no quota. Raises when nothing is left."""
    if quota == 0:
        return None
    used = session.scalar(
        sa.select(sa.func.coalesce(sa.func.sum(Checkpoint.bytes), 0)).where(
            Checkpoint.run_id == run.id, sa.not_(sa.and_(Checkpoint.step == step, Checkpoint.stage == stage))
        )
    )
    left = quota - int(used or 0)
    if left <= 0:
        raise QuotaExceeded(
            f"run {run.id}'s checkpoints already take {used} bytes of its {quota}-byte quota"
            " (checkpoint_quota_bytes; it must hold checkpoint_keep + 1 steps)"
        )
    return left


def check_upload(session: Session, run: Run, step: int, stage: int, *, keep: int) -> None:
    """Raise unless a stage file for (step, stage) may be stored now."""
    if stage >= run.num_stages:
        raise Unprocessable(f"stage must be below {run.num_stages}, the run's number of stages")
    if step > run.current_step:
        raise Conflict(f"step {step} is ahead of the run, which is at step {run.current_step}")
    oldest = _oldest_retained(session, run, keep)
    if oldest is not None and step < oldest:
        raise Conflict(f"step {step} is older than every retained checkpoint (oldest kept: step {oldest})")


def record_upload(
    session: Session,
    store: CheckpointStore,
    *,
    run: Run,
    peer: Peer,
    step: int,
    stage: int,
    size: int,
    sha256: str,
    keep: int,
    quota: int,
) -> tuple[StepCheckpoint, list[int]]:
    """Record a checked upload; returns the step and the steps to prune.

    Call with `store.lock` held; commit, then install the file, then delete the pruned steps' files.
    Records a 'checkpoint' event when this upload completes the step.
    """
    check_upload(session, run, step, stage, keep=keep)
    check_asked(session, run, peer, step, stage)
    left = quota_left(session, run, step, stage, quota=quota)
    if left is not None and size > left:
        raise QuotaExceeded(f"a {size}-byte stage file would take run {run.id} past its checkpoint quota")
    existing = session.scalar(
        sa.select(Checkpoint).where(
            Checkpoint.run_id == run.id, Checkpoint.step == step, Checkpoint.stage == stage
        )
    )
    was_complete = step_is_complete(session, run, step)
    relative = store.relative_path(run.id, step, stage)
    if existing is None:
        session.add(
            Checkpoint(run_id=run.id, step=step, stage=stage, path=relative, bytes=size, sha256=sha256)
        )
    else:
        existing.path, existing.bytes, existing.sha256 = relative, size, sha256
    session.flush()
    current = step_checkpoint(session, run, step)
    pruned: list[int] = []
    if current.complete and not was_complete:
        total = sum(row.bytes for row in current.rows)
        record_event(
            session,
            run_id=run.id,
            peer_id=peer.id,
            kind="checkpoint",
            message=f"checkpoint of step {step} complete ({run.num_stages} stages, {format_bytes(total)})",
            data={"step": step, "num_stages": run.num_stages, "bytes": total},
        )
        pruned = _prune(session, run, keep)
    return current, pruned


def step_is_complete(session: Session, run: Run, step: int) -> bool:
    stages = session.scalars(
        sa.select(Checkpoint.stage).where(Checkpoint.run_id == run.id, Checkpoint.step == step)
    )
    return set(stages) >= set(range(run.num_stages))


def _prune(session: Session, run: Run, keep: int) -> list[int]:
    """Delete the rows of every step older than the `keep` newest complete ones, and of incomplete
    steps older than the newest complete one (nothing would resume from them); returns those steps."""
    held = steps(session, run)
    complete = [s.step for s in held if s.complete]
    if not complete:
        return []
    oldest = complete[keep - 1] if len(complete) >= keep else -1
    doomed = sorted(s.step for s in held if s.step < oldest or (s.step < complete[0] and not s.complete))
    if doomed:
        session.execute(sa.delete(Checkpoint).where(Checkpoint.run_id == run.id, Checkpoint.step.in_(doomed)))
    return doomed


def manifest(run: Run, checkpoint: StepCheckpoint) -> dict[str, Any]:
    return {
        "run_id": run.id,
        "step": checkpoint.step,
        "num_stages": run.num_stages,
        "model_preset": run.model_preset,
        "complete": checkpoint.complete,
        "stages": {
            str(row.stage): {
                "file": Path(row.path).name,
                "bytes": row.bytes,
                "sha256": row.sha256,
                "created_at": row.created_at.isoformat(),
            }
            for row in checkpoint.rows
        },
    }
