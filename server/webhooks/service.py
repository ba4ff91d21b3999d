"""Webhooks of a run and their deliveries, in the database. The dispatcher sends what is due."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from server.errors import Conflict, NotFound
from server.models import Event, Run, RunWebhook, User, WebhookDelivery, utcnow
from server.security import new_token
from server.webhooks.policy import WEBHOOK_KINDS, after_attempt, wants
from swarmhub.settings import ServerSettings

DELIVERIES_ADDED = "swarmhub.webhook_deliveries_added"
"""Key in Session.info set when a transaction owes deliveries: the dispatcher wakes after its commit."""
MAX_WEBHOOKS_PER_RUN = 10
"""Each event fans out to every webhook of its run; a bound keeps one event's work small."""
MAX_ERROR_CHARS = 500


def create_webhook(session: Session, run: Run, *, url: str, kinds: Collection[str], by: User) -> RunWebhook:
    count = session.scalar(sa.select(sa.func.count()).where(RunWebhook.run_id == run.id))
    if count is not None and count >= MAX_WEBHOOKS_PER_RUN:
        raise Conflict(f"run {run.id} has {count} webhooks, the most it may have: delete one first")
    hook = RunWebhook(
        run_id=run.id,
        url=url,
        secret=new_token(32),
        kinds=[kind for kind in WEBHOOK_KINDS if kind in kinds],
        enabled=True,
        created_by=by.id,
    )
    session.add(hook)
    session.flush()
    return hook


def list_webhooks(session: Session, run_id: int) -> list[RunWebhook]:
    return list(
        session.scalars(sa.select(RunWebhook).where(RunWebhook.run_id == run_id).order_by(RunWebhook.id))
    )


def get_webhook(session: Session, run_id: int, webhook_id: int) -> RunWebhook:
    hook = session.get(RunWebhook, webhook_id)
    if hook is None or hook.run_id != run_id:
        raise NotFound(f"webhook {webhook_id} of run {run_id} not found")
    return hook


def set_enabled(session: Session, hook: RunWebhook, enabled: bool) -> RunWebhook:
    """Turn a webhook on or off; turning it off cancels what it still owed (stale alerts help no one)."""
    hook.enabled = enabled
    if not enabled:
        session.execute(
            sa.update(WebhookDelivery)
            .where(WebhookDelivery.webhook_id == hook.id, WebhookDelivery.state == "pending")
            .values(state="cancelled", next_attempt_at=None, error="webhook disabled")
        )
    session.flush()
    return hook


def delete_webhook(session: Session, hook: RunWebhook) -> None:
    """Delete it with its delivery log; a send in flight finishes, and its result is dropped."""
    session.delete(hook)
    session.flush()


@dataclass(frozen=True)
class LoggedDelivery:
    delivery: WebhookDelivery
    event: Event


def list_deliveries(
    session: Session, run_id: int, *, webhook_id: int | None = None, limit: int = 100
) -> list[LoggedDelivery]:
    """The run's deliveries with their events, newest first."""
    query = (
        sa.select(WebhookDelivery, Event)
        .join(RunWebhook, RunWebhook.id == WebhookDelivery.webhook_id)
        .join(Event, Event.id == WebhookDelivery.event_id)
        .where(RunWebhook.run_id == run_id)
        .order_by(WebhookDelivery.id.desc())
        .limit(limit)
    )
    if webhook_id is not None:
        query = query.where(WebhookDelivery.webhook_id == webhook_id)
    return [LoggedDelivery(delivery, event) for delivery, event in session.execute(query).tuples()]


def enqueue_deliveries(session: Session, event: Event) -> None:
    """Owe the event to every enabled webhook of its run that wants its kind, in the event's transaction."""
    if event.run_id is None or event.kind not in WEBHOOK_KINDS:
        return
    hooks = session.scalars(
        sa.select(RunWebhook).where(RunWebhook.run_id == event.run_id, RunWebhook.enabled.is_(True))
    )
    now = utcnow()
    added = [
        WebhookDelivery(webhook_id=hook.id, event_id=event.id, next_attempt_at=now)
        for hook in hooks
        if wants(hook.kinds, event.kind)
    ]
    if added:
        session.add_all(added)
        session.flush()
        session.info[DELIVERIES_ADDED] = True


def payload(delivery_id: int, run: Run, event: Event) -> bytes:
    """The JSON body a webhook receives (signed as these exact bytes)."""
    document = {
        "delivery_id": delivery_id,
        "event_id": event.id,
        "run_id": run.id,
        "run_name": run.name,
        "kind": event.kind,
        "message": event.message,
        "data": event.data,
        "timestamp": event.created_at.isoformat(),
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class Outgoing:
    """A delivery ready to send, read out of its session (it crosses to the event loop)."""

    delivery_id: int
    url: str
    secret: str
    kind: str
    body: bytes


def _due(now: datetime, exclude: Collection[int]) -> sa.Select:
    query = sa.select(WebhookDelivery).where(
        WebhookDelivery.state == "pending", WebhookDelivery.next_attempt_at <= now
    )
    return query.where(WebhookDelivery.id.not_in(exclude)) if exclude else query


def due_deliveries(
    session: Session, now: datetime, *, exclude: Collection[int], limit: int
) -> list[Outgoing]:
    """Pending deliveries whose time has come, oldest first, except those being sent already."""
    rows = session.execute(
        _due(now, exclude)
        .add_columns(RunWebhook, Event, Run)
        .join(RunWebhook, RunWebhook.id == WebhookDelivery.webhook_id)
        .join(Event, Event.id == WebhookDelivery.event_id)
        .join(Run, Run.id == RunWebhook.run_id)
        .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
        .limit(limit)
    ).tuples()
    return [
        Outgoing(
            delivery_id=delivery.id,
            url=hook.url,
            secret=hook.secret,
            kind=event.kind,
            body=payload(delivery.id, run, event),
        )
        for delivery, hook, event, run in rows
    ]


def next_attempt_at(session: Session, *, exclude: Collection[int]) -> datetime | None:
    """When the next pending delivery not being sent falls due."""
    query = sa.select(sa.func.min(WebhookDelivery.next_attempt_at)).where(WebhookDelivery.state == "pending")
    if exclude:
        query = query.where(WebhookDelivery.id.not_in(exclude))
    # min() takes its argument's type, so the value comes back as an aware UTC datetime.
    return session.scalar(query)


def record_attempt(
    session: Session,
    delivery_id: int,
    *,
    status_code: int | None,
    error: str,
    delivered: bool,
    settings: ServerSettings,
) -> WebhookDelivery | None:
    """Count an attempt and schedule the next, if any; None when the delivery was deleted meanwhile."""
    delivery = session.get(WebhookDelivery, delivery_id)
    if delivery is None or delivery.state != "pending":
        return None
    now = utcnow()
    delivery.attempts += 1
    delivery.status_code = status_code
    delivery.error = error[:MAX_ERROR_CHARS]
    outcome = after_attempt(
        delivery.attempts,
        delivered=delivered,
        now=now,
        max_attempts=settings.webhook_max_attempts,
        base_s=settings.webhook_backoff_base_s,
        cap_s=settings.webhook_backoff_cap_s,
    )
    delivery.state = outcome.state
    delivery.next_attempt_at = outcome.next_attempt_at
    if delivered:
        delivery.delivered_at = now
    session.flush()
    return delivery
