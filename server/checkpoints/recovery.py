"""Bring the checkpoint directory back in line with the `checkpoints` table when the coordinator starts.

An upload is received into `.incoming/<random>.part`, fsynced and renamed to
`.incoming/step-<n>-stage-<s>-<sha256>.ready`, recorded and committed, and only then renamed into
place. Whatever a crash or a failed commit left behind is settled here, before any request:

- a `.part` file is an upload that never finished: deleted;
- a `.ready` file whose row was committed (same step, stage and sha256) is installed, finishing the
  rename the coordinator died before; any other `.ready` file never got its row: deleted;
- a row whose file is missing or has another size is deleted (its step is then incomplete);
- step directories without rows, and incomplete steps older than the newest complete one, go.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.checkpoints import service
from server.checkpoints.store import CheckpointStore
from server.models import Checkpoint, Run


@dataclass
class Recovered:
    partial_deleted: int = 0
    installed: int = 0
    rows_dropped: list[tuple[int, int, int]] = field(default_factory=list)
    steps_deleted: list[tuple[int, int]] = field(default_factory=list)


def recover(session: Session, store: CheckpointStore) -> Recovered:
    done = Recovered()
    for run_id, path in list(store.leftovers()):
        parsed = store.parse_ready(path)
        row = None
        if parsed is not None:
            step, stage, _ = parsed
            row = session.scalar(
                sa.select(Checkpoint).where(
                    Checkpoint.run_id == run_id, Checkpoint.step == step, Checkpoint.stage == stage
                )
            )
        if parsed is not None and row is not None and row.sha256 == parsed[2]:
            store.install(path, run_id, parsed[0], parsed[1])
            done.installed += 1
        else:
            path.unlink(missing_ok=True)
            done.partial_deleted += 1

    for row in session.scalars(sa.select(Checkpoint)).all():
        path = store.path(row.path)
        if not path.is_file() or path.stat().st_size != row.bytes:
            done.rows_dropped.append((row.run_id, row.step, row.stage))
            session.delete(row)
    session.flush()

    for run in session.scalars(sa.select(Run)).all():
        held = service.steps(session, run)
        complete = [s.step for s in held if s.complete]
        stale = {s.step for s in held if complete and s.step < complete[0] and not s.complete}
        if stale:
            session.execute(
                sa.delete(Checkpoint).where(Checkpoint.run_id == run.id, Checkpoint.step.in_(stale))
            )
        kept = {s.step for s in held} - stale
        for step in store.stored_steps(run.id):
            if step not in kept:
                done.steps_deleted.append((run.id, step))
    session.commit()
    for run_id, step in done.steps_deleted:
        store.delete_step(run_id, step)
    return done


def recover_with(factory: Callable[[], Session], store: CheckpointStore) -> Recovered:
    with factory() as session:
        return recover(session, store)
