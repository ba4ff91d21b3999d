"""Checkpoints: who may upload or read them, recording uploads, completeness, and retention.

A step's checkpoint is complete when every stage of the run has a file for it. The `checkpoints`
table is the truth; each step's manifest.json mirrors it for someone reading the directory.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.checkpoints import CheckpointStore
from server.errors import Conflict, Forbidden, NotFound, Unauthorized, Unprocessable
from server.models import Checkpoint, Peer, Run
from server.services.events import record_event
from server.services.peers import authenticate_peer


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
        raise Unauthorized("invalid peer id or credential (or the peer was kicked or banned)")
    if peer.run_id != run_id:
        raise Forbidden(f"peer {peer_id} does not belong to run {run_id}")
    return peer


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
    temp: Path,
    size: int,
    sha256: str,
    keep: int,
) -> tuple[StepCheckpoint, list[int]]:
    """Move the checked upload into place and record it; returns the step and the steps to prune.

    Call with `store.lock` held and commit before deleting the pruned steps' files; records a
    'checkpoint' event when this upload completes the step.
    """
    check_upload(session, run, step, stage, keep=keep)
    existing = session.scalar(
        sa.select(Checkpoint).where(
            Checkpoint.run_id == run.id, Checkpoint.step == step, Checkpoint.stage == stage
        )
    )
    was_complete = step_is_complete(session, run, step)
    relative = store.install(temp, run.id, step, stage)
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
            message=f"checkpoint of step {step} complete ({run.num_stages} stages, {total} bytes)",
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
    """Delete the rows of every step older than the `keep` newest complete ones; returns those steps."""
    oldest = _oldest_retained(session, run, keep)
    if oldest is None:
        return []
    doomed = sorted(
        set(
            session.scalars(
                sa.select(Checkpoint.step).where(Checkpoint.run_id == run.id, Checkpoint.step < oldest)
            )
        )
    )
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
