"""Commit a transaction, then tell dashboards what it changed (never before: a rollback would lie)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from server.feed import FeedHub
from server.frames import event_frame
from server.models import Event
from server.services.events import RECORDED_EVENTS


def commit_and_publish(session: Session, feed: FeedHub, *frames: tuple[int, dict[str, Any]]) -> None:
    """Commit; then publish the given (run_id, frame) pairs and every event recorded in the transaction."""
    events: list[Event] = session.info.pop(RECORDED_EVENTS, [])
    session.commit()
    for run_id, frame in frames:
        feed.publish(run_id, frame)
    for event in events:
        if event.run_id is not None:
            feed.publish(event.run_id, event_frame(event))
