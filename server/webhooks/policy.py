"""The pure rules of webhook delivery: which events a webhook wants, and when to try again."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

WEBHOOK_KINDS = ("run_stalled", "run_recovered", "run_finished", "checkpoint")
"""The event kinds a webhook may ask for (events written through `server.services.events`)."""

WebhookKind = Literal["run_stalled", "run_recovered", "run_finished", "checkpoint"]


def wants(kinds: Collection[str], kind: str) -> bool:
    """Whether a webhook asking for `kinds` is sent an event of `kind`."""
    return kind in WEBHOOK_KINDS and kind in kinds


def backoff_s(attempts: int, *, base_s: float, cap_s: float) -> float:
    """The wait after the `attempts`-th failed attempt: base, 2 x base, 4 x base, ... never above cap."""
    if attempts < 1:
        raise ValueError("the wait follows a failed attempt: attempts >= 1")
    # The exponent is bounded before it is used: 2.0**attempts overflows a float past ~1024.
    doublings = min(attempts - 1, 64)
    return min(cap_s, base_s * 2.0**doublings)


def succeeded(status_code: int | None) -> bool:
    """A 2xx answer delivers; anything else (3xx included: redirects are not followed) is a failure."""
    return status_code is not None and 200 <= status_code < 300


@dataclass(frozen=True)
class Outcome:
    state: Literal["pending", "delivered", "failed"]
    next_attempt_at: datetime | None


def after_attempt(
    attempts: int, *, delivered: bool, now: datetime, max_attempts: int, base_s: float, cap_s: float
) -> Outcome:
    """Where a delivery stands after its `attempts`-th attempt."""
    if delivered:
        return Outcome("delivered", None)
    if attempts >= max_attempts:
        return Outcome("failed", None)
    return Outcome("pending", now + timedelta(seconds=backoff_s(attempts, base_s=base_s, cap_s=cap_s)))
