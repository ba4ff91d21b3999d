"""Request and response bodies of the webhook routes (the secret leaves only in `WebhookCreated`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, HttpUrl, UrlConstraints, field_validator

from server.schemas import Body, Out
from server.webhooks.policy import WEBHOOK_KINDS, WebhookKind

WebhookUrl = Annotated[HttpUrl, UrlConstraints(max_length=2000, allowed_schemes=["http", "https"])]


class WebhookCreate(Body):
    url: WebhookUrl
    """Where the coordinator POSTs the signed JSON (http or https)."""
    kinds: list[WebhookKind] = Field(default_factory=lambda: list(WEBHOOK_KINDS), min_length=1)
    """The event kinds to send; all four by default."""

    @field_validator("kinds")
    @classmethod
    def _distinct(cls, kinds: list[WebhookKind]) -> list[WebhookKind]:
        return [kind for kind in WEBHOOK_KINDS if kind in kinds]


class WebhookUpdate(Body):
    enabled: bool
    """False stops sending and cancels what it still owed; true sends the events that come after."""


class WebhookOut(Out):
    id: int
    run_id: int
    url: str
    kinds: list[WebhookKind]
    enabled: bool
    created_by: int | None
    created_at: datetime


class WebhookCreated(WebhookOut):
    secret: str
    """Shown once: the key of the HMAC-SHA256 signature each delivery carries (docs/operations.md)."""


class DeliveryOut(Out):
    id: int
    webhook_id: int
    event_id: int
    event_kind: str
    event_message: str
    state: Literal["pending", "delivered", "failed", "cancelled"]
    """pending (sent again at next_attempt_at), delivered, failed (gave up) or cancelled."""
    attempts: int
    status_code: int | None
    error: str
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    created_at: datetime
