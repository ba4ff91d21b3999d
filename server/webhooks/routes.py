"""A run's webhooks: register (the signing secret shown once), list, turn on or off, delete, and
read the delivery log. Only the run's owner and admins reach them (others' runs are not found)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Path, Query, status

from server.auth import CurrentUser
from server.deps import MAX_ID, FeedDep, RunId, SessionDep
from server.publish import commit_and_publish
from server.schemas import ErrorOut
from server.services import runs
from server.services.events import record_event
from server.webhooks import service
from server.webhooks.schemas import DeliveryOut, WebhookCreate, WebhookCreated, WebhookOut, WebhookUpdate

router = APIRouter(
    prefix="/api/runs/{run_id}/webhooks",
    tags=["webhooks"],
    responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}},
)

WebhookId = Annotated[int, Path(ge=1, le=MAX_ID)]


def _where(url: str) -> str:
    # Events name the host only: a webhook URL often carries a secret in its path or query.
    return urlsplit(url).netloc


@router.post("", status_code=status.HTTP_201_CREATED, responses={409: {"model": ErrorOut}})
def create_webhook(
    run_id: RunId, body: WebhookCreate, caller: CurrentUser, session: SessionDep, feed: FeedDep
) -> WebhookCreated:
    run = runs.get_run_for(session, caller.user, run_id)
    hook = service.create_webhook(session, run, url=str(body.url), kinds=body.kinds, by=caller.user)
    record_event(
        session,
        run_id=run.id,
        kind="webhook_added",
        message=f"webhook {hook.id} to {_where(hook.url)} added by {caller.user.username}",
        data={"webhook_id": hook.id, "kinds": hook.kinds},
    )
    commit_and_publish(session, feed)
    return WebhookCreated.model_validate(hook)


@router.get("")
def list_webhooks(run_id: RunId, caller: CurrentUser, session: SessionDep) -> list[WebhookOut]:
    runs.get_run_for(session, caller.user, run_id)
    return [WebhookOut.model_validate(h) for h in service.list_webhooks(session, run_id)]


@router.get("/deliveries")
def list_webhook_deliveries(
    run_id: RunId,
    caller: CurrentUser,
    session: SessionDep,
    webhook_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="Only this webhook's")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[DeliveryOut]:
    """The delivery log, newest first."""
    runs.get_run_for(session, caller.user, run_id)
    found = service.list_deliveries(session, run_id, webhook_id=webhook_id, limit=limit)
    return [_delivery_out(logged) for logged in found]


def _delivery_out(logged: service.LoggedDelivery) -> DeliveryOut:
    delivery, event = logged.delivery, logged.event
    return DeliveryOut(
        id=delivery.id,
        webhook_id=delivery.webhook_id,
        event_id=event.id,
        event_kind=event.kind,
        event_message=event.message,
        state=delivery.state,
        attempts=delivery.attempts,
        status_code=delivery.status_code,
        error=delivery.error,
        next_attempt_at=delivery.next_attempt_at,
        delivered_at=delivery.delivered_at,
        created_at=delivery.created_at,
    )


@router.patch("/{webhook_id}")
def update_webhook(
    run_id: RunId, webhook_id: WebhookId, body: WebhookUpdate, caller: CurrentUser, session: SessionDep
) -> WebhookOut:
    runs.get_run_for(session, caller.user, run_id)
    hook = service.set_enabled(session, service.get_webhook(session, run_id, webhook_id), body.enabled)
    session.commit()
    return WebhookOut.model_validate(hook)


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_webhook(
    run_id: RunId, webhook_id: WebhookId, caller: CurrentUser, session: SessionDep, feed: FeedDep
) -> None:
    runs.get_run_for(session, caller.user, run_id)
    hook = service.get_webhook(session, run_id, webhook_id)
    where = _where(hook.url)
    service.delete_webhook(session, hook)
    record_event(
        session,
        run_id=run_id,
        kind="webhook_removed",
        message=f"webhook {webhook_id} to {where} removed by {caller.user.username}",
        data={"webhook_id": webhook_id},
    )
    commit_and_publish(session, feed)
