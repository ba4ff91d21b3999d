"""The dashboard feed: a websocket per run, a snapshot first, then live frames."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

import anyio
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.status import WS_1008_POLICY_VIOLATION

from server.auth import SESSION_COOKIE
from server.deps import RunId
from server.errors import NotFound
from server.models import Run
from server.schemas import EventOut, FeedAuth, PeerOut, PingFrame, SnapshotFrame, StepOut
from server.services import accounts, events, peers, runs, steps

router = APIRouter()

KEEPALIVE_S = 20.0
SESSION_CHECK_S = 2.0
"""How often an open feed checks that its session still holds."""
AUTH_TIMEOUT_S = 10.0
"""How long a feed without a session cookie waits for its auth message."""
SNAPSHOT_STEPS = 200
SNAPSHOT_EVENTS = 100


def _cross_site(websocket: WebSocket) -> bool:
    """Browsers attach cookies to websockets opened by any page; only our own origin may use them."""
    origin = websocket.headers.get("origin")
    return origin is not None and urlsplit(origin).netloc != websocket.headers.get("host")


async def _token(websocket: WebSocket) -> str | None:
    """The session token: the cookie (same origin only), else the first message, `{"type": "auth",
    "token": ...}`. Never the URL, which access logs and browser history keep."""
    cookie_token = websocket.cookies.get(SESSION_COOKIE)
    if cookie_token:
        return cookie_token
    try:
        with anyio.fail_after(AUTH_TIMEOUT_S):
            first = await websocket.receive_text()
        return FeedAuth.model_validate_json(first).token
    except (TimeoutError, ValidationError, KeyError, WebSocketDisconnect):
        return None


def _session_refusal(websocket: WebSocket, token: str) -> str | None:
    settings = websocket.app.state.settings
    with websocket.app.state.session_factory() as session:
        if accounts.find_session(session, token, idle_minutes=settings.session_idle_minutes) is None:
            return "session ended: log in again"
    return None


def _authorize(websocket: WebSocket, run_id: int, token: str) -> str | None:
    """None if the caller may watch the run, else the reason to refuse."""
    settings = websocket.app.state.settings
    with websocket.app.state.session_factory() as session:
        found = accounts.find_session(session, token, idle_minutes=settings.session_idle_minutes)
        if found is None:
            return "session expired or invalid"
        try:
            runs.get_run_for(session, found[1], run_id)
        except NotFound as exc:
            return exc.detail
    return None


def _snapshot(websocket: WebSocket, run_id: int) -> dict[str, Any]:
    with websocket.app.state.session_factory() as session:
        run = session.get_one(Run, run_id)
        return SnapshotFrame(
            run=runs.run_detail(
                session, run, health=lambda r: websocket.app.state.live.health(r.id, r.status)
            ),
            peers=[PeerOut.model_validate(p) for p in peers.list_peers(session, run_id)],
            steps=[
                StepOut.model_validate(s) for s in steps.recent_steps(session, run_id, limit=SNAPSHOT_STEPS)
            ],
            events=[
                EventOut.model_validate(e)
                for e in events.recent_events(session, run_id, limit=SNAPSHOT_EVENTS)
            ],
        ).model_dump(mode="json")


async def _until_disconnect(websocket: WebSocket) -> None:
    while (await websocket.receive())["type"] != "websocket.disconnect":
        pass  # dashboards have nothing to say; whatever they send is ignored


@router.websocket("/ws/runs/{run_id}/feed")
async def run_feed(websocket: WebSocket, run_id: RunId) -> None:
    await websocket.accept()
    if websocket.cookies.get(SESSION_COOKIE) and _cross_site(websocket):
        await websocket.close(code=WS_1008_POLICY_VIOLATION, reason="cross-site websocket refused")
        return
    token = await _token(websocket)
    if token is None:
        await websocket.close(code=WS_1008_POLICY_VIOLATION, reason="not logged in")
        return
    refusal = await run_in_threadpool(_authorize, websocket, run_id, token)
    if refusal is not None:
        await websocket.close(code=WS_1008_POLICY_VIOLATION, reason=refusal)
        return
    # Subscribe before the snapshot, so nothing that happens in between is missed.
    async with websocket.app.state.feed.subscribe(run_id) as subscription:
        disconnected = asyncio.create_task(_until_disconnect(websocket))
        try:
            await websocket.send_json(await run_in_threadpool(_snapshot, websocket, run_id))
            next_check = time.monotonic() + SESSION_CHECK_S
            next_ping = time.monotonic() + KEEPALIVE_S
            while not disconnected.done():
                frame = asyncio.create_task(subscription.get())
                done, _ = await asyncio.wait(
                    {frame, disconnected},
                    timeout=min(SESSION_CHECK_S, KEEPALIVE_S),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if frame in done:
                    if subscription.caught_up():
                        await websocket.send_json(frame.result())
                    else:
                        # This frame is older than the snapshot, which replaces the page's state.
                        await websocket.send_json(await run_in_threadpool(_snapshot, websocket, run_id))
                else:
                    frame.cancel()
                if disconnected in done:
                    break
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + SESSION_CHECK_S
                    # Logout, expiry and a disabled account end the feed too, within seconds.
                    if (ended := await run_in_threadpool(_session_refusal, websocket, token)) is not None:
                        await websocket.close(code=WS_1008_POLICY_VIOLATION, reason=ended)
                        break
                if time.monotonic() >= next_ping:
                    next_ping = time.monotonic() + KEEPALIVE_S
                    await websocket.send_json(PingFrame().model_dump())
        except WebSocketDisconnect:
            pass  # the dashboard went away mid-send: the normal way a feed ends
        finally:
            disconnected.cancel()
            if disconnected.done() and not disconnected.cancelled():
                disconnected.exception()  # retrieved so asyncio does not log it as lost
