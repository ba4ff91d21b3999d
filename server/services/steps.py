"""Committed global steps and per-step metrics."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.models import Metric, Step


def record_step(
    session: Session,
    *,
    run_id: int,
    step: int,
    loss: float | None,
    samples_sent: int,
    samples_lost: int,
    samples_counted: list[int],
    duration_s: float,
) -> Step:
    row = Step(
        run_id=run_id,
        step=step,
        loss=loss,
        samples_sent=samples_sent,
        samples_lost=samples_lost,
        samples_counted=list(samples_counted),
        duration_s=duration_s,
    )
    session.add(row)
    session.flush()
    return row


def record_metric(
    session: Session, *, run_id: int, name: str, value: float, step: int | None = None
) -> Metric:
    metric = Metric(run_id=run_id, step=step, name=name, value=value)
    session.add(metric)
    session.flush()
    return metric


def list_steps(session: Session, run_id: int, *, after: int = -1, limit: int = 100) -> list[Step]:
    """Steps numbered above `after`, oldest first."""
    return list(
        session.scalars(
            sa.select(Step).where(Step.run_id == run_id, Step.step > after).order_by(Step.step).limit(limit)
        )
    )


def recent_steps(session: Session, run_id: int, *, limit: int) -> list[Step]:
    newest = session.scalars(
        sa.select(Step).where(Step.run_id == run_id).order_by(Step.step.desc()).limit(limit)
    )
    return list(reversed(newest.all()))


def latest_loss(session: Session, run_id: int) -> float | None:
    return session.scalar(
        sa.select(Step.loss)
        .where(Step.run_id == run_id, Step.loss.is_not(None))
        .order_by(Step.step.desc())
        .limit(1)
    )


def list_metrics(
    session: Session, run_id: int, *, name: str | None = None, after_step: int = -1, limit: int = 100
) -> list[Metric]:
    """Per-step metrics of steps numbered above `after_step`, oldest first."""
    query = sa.select(Metric).where(Metric.run_id == run_id, Metric.step > after_step)
    if name is not None:
        query = query.where(Metric.name == name)
    return list(session.scalars(query.order_by(Metric.step, Metric.id).limit(limit)))
