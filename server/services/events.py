"""The run's journal: what happened, for the dashboard and for post-mortems."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.models import Event
from server.webhooks.service import enqueue_deliveries

RECORDED_EVENTS = "swarmhub.recorded_events"
"""Key in Session.info listing the events of the open transaction, for `commit_and_publish`."""


def record_event(
    session: Session,
    *,
    run_id: int | None,
    kind: str,
    message: str,
    peer_id: int | None = None,
    data: dict[str, Any] | None = None,
) -> Event:
    """Add an event; `server.publish.commit_and_publish` sends it to dashboards after the commit, and
    the run's webhooks that want its kind are owed it in this same transaction (`server.webhooks`)."""
    event = Event(run_id=run_id, peer_id=peer_id, kind=kind, message=message, data=data or {})
    session.add(event)
    session.flush()
    session.info.setdefault(RECORDED_EVENTS, []).append(event)
    enqueue_deliveries(session, event)
    return event


def list_events(session: Session, run_id: int, *, after: int = 0, limit: int = 100) -> list[Event]:
    """Events with id > after, oldest first (poll with the last id seen)."""
    return list(
        session.scalars(
            sa.select(Event).where(Event.run_id == run_id, Event.id > after).order_by(Event.id).limit(limit)
        )
    )


def recent_events(session: Session, run_id: int, *, limit: int) -> list[Event]:
    """The last `limit` events, oldest first."""
    newest = session.scalars(
        sa.select(Event).where(Event.run_id == run_id).order_by(Event.id.desc()).limit(limit)
    )
    return list(reversed(newest.all()))
