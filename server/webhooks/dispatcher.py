"""Sends webhook deliveries from the coordinator's event loop without ever waiting on a receiver
where a run or a request would wait.

The database holds what is owed (`WebhookDelivery` rows written in the event's own transaction), so
the dispatcher keeps nothing a restart would lose: at start it sends whatever is due, and afterwards
it wakes when a commit added deliveries, when a send finished, or when the next retry falls due.
Each send is its own task, at most `webhook_concurrency` at once; its result is written as it ends.
A delivery in flight when the coordinator stopped is sent again after the restart (receivers dedupe
by delivery id).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

import httpx
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from server.models import utcnow
from server.webhooks import service
from server.webhooks.policy import succeeded
from swarmhub.settings import ServerSettings
from swarmhub.webhook_signing import DELIVERY_HEADER, EVENT_HEADER, signed_headers

log = logging.getLogger(__name__)
T = TypeVar("T")

POLL_S = 30.0
"""The longest the dispatcher sleeps: deliveries written by another process (no commit hook of ours
runs there) are found within this."""
USER_AGENT = "SwarmHub-Webhooks/1"


class WebhookDispatcher:
    def __init__(self, session_factory: sessionmaker[Session], settings: ServerSettings) -> None:
        self._session_factory = session_factory
        self._settings = settings
        self._sending: dict[int, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        # Redirects are not followed: a 3xx is a failed attempt, the owner registers the final URL.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self._settings.webhook_timeout_s), follow_redirects=False
        )
        sa.event.listen(self._session_factory, "after_commit", self._after_commit)
        self._task = asyncio.create_task(self._dispatch_forever())

    async def stop(self) -> None:
        sa.event.remove(self._session_factory, "after_commit", self._after_commit)
        tasks = [task for task in (self._task, *self._sending.values()) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._client.aclose()

    def _after_commit(self, session: Session) -> None:
        # Runs in whichever thread committed (a request's, a live-swarm write's).
        if session.info.pop(service.DELIVERIES_ADDED, False) and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    async def _dispatch_forever(self) -> None:
        while True:
            self._wake.clear()
            try:
                wait_s = await self._send_due()
            except Exception:
                # A database hiccup must not end the loop; the next round tries again.
                log.exception("sending due webhook deliveries failed")
                wait_s = POLL_S
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait_s)

    async def _send_due(self) -> float:
        """Start sending what is due; returns how long to sleep unless woken."""
        free = self._settings.webhook_concurrency - len(self._sending)
        if free > 0:
            sending = sorted(self._sending)
            due = await self._db(lambda s: service.due_deliveries(s, utcnow(), exclude=sending, limit=free))
            for outgoing in due:
                self._sending[outgoing.delivery_id] = asyncio.create_task(self._deliver(outgoing))
        if len(self._sending) >= self._settings.webhook_concurrency:
            return POLL_S  # a finished send wakes the loop
        sending = sorted(self._sending)
        next_at = await self._db(lambda s: service.next_attempt_at(s, exclude=sending))
        if next_at is None:
            return POLL_S
        return max(0.0, min(POLL_S, (next_at - utcnow()).total_seconds()))

    async def _deliver(self, outgoing: service.Outgoing) -> None:
        status_code: int | None = None
        error = ""
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            DELIVERY_HEADER: str(outgoing.delivery_id),
            EVENT_HEADER: outgoing.kind,
            **signed_headers(outgoing.secret, int(time.time()), outgoing.body),
        }
        try:
            # Streamed and closed unread: a receiver's answer body is never held in memory.
            async with self._client.stream(
                "POST", outgoing.url, content=outgoing.body, headers=headers
            ) as answer:
                status_code = answer.status_code
                if not succeeded(status_code):
                    error = f"HTTP {status_code} {answer.reason_phrase}".strip()
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        try:
            await self._db(
                lambda s: service.record_attempt(
                    s,
                    outgoing.delivery_id,
                    status_code=status_code,
                    error=error,
                    delivered=succeeded(status_code),
                    settings=self._settings,
                ),
                commit=True,
            )
        except Exception:
            # Still pending in the database: sent again when next due (receivers dedupe by delivery id).
            log.exception("recording webhook delivery %d failed", outgoing.delivery_id)
        finally:
            del self._sending[outgoing.delivery_id]
            self._wake.set()

    async def _db(self, fn: Callable[[Session], T], *, commit: bool = False) -> T:
        def work() -> T:
            with self._session_factory() as session:
                result = fn(session)
                if commit:
                    session.commit()
                return result

        return await asyncio.to_thread(work)
