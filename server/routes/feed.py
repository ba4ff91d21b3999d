"""The dashboard feed: a websocket per run, a snapshot first, then live frames."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from starlette.concurrency import run_in_threadpool
from starlette.status import WS_1008_POLICY_VIOLATION

from server.auth import SESSION_COOKIE
from server.deps import RunId
from server.errors import NotFound
from server.models import Run
from server.schemas import EventOut, PeerOut, PingFrame, SnapshotFrame, StepOut
from server.services import accounts, events, peers, runs, steps

router = APIRouter()

KEEPALIVE_S = 20.0
SNAPSHOT_STEPS = 200
SNAPSHOT_EVENTS = 100


def _cross_site(websocket: WebSocket) -> bool:
    """Browsers attach cookies to websockets opened by any page; only our own origin may use them."""
    origin = websocket.headers.get("origin")
    return origin is not None and urlsplit(origin).netloc != websocket.headers.get("host")


def _authorize(websocket: WebSocket, run_id: int) -> str | None:
    """None if the caller may watch the run, else the reason to refuse."""
    query_token = websocket.query_params.get("token")
    cookie_token = websocket.cookies.get(SESSION_COOKIE)
    if query_token is None and cookie_token is not None and _cross_site(websocket):
        return "cross-site websocket refused"
    token = query_token or cookie_token
    if not token:
        return "not logged in"
    with websocket.app.state.session_factory() as session:
        found = accounts.find_session(session, token)
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
            run=runs.run_detail(session, run),
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
    refusal = await run_in_threadpool(_authorize, websocket, run_id)
    if refusal is not None:
        await websocket.close(code=WS_1008_POLICY_VIOLATION, reason=refusal)
        return
    # Subscribe before the snapshot, so nothing that happens in between is missed.
    async with websocket.app.state.feed.subscribe(run_id) as subscription:
        disconnected = asyncio.create_task(_until_disconnect(websocket))
        try:
            await websocket.send_json(await run_in_threadpool(_snapshot, websocket, run_id))
            while not disconnected.done():
                frame = asyncio.create_task(subscription.get())
                done, _ = await asyncio.wait(
                    {frame, disconnected}, timeout=KEEPALIVE_S, return_when=asyncio.FIRST_COMPLETED
                )
                if frame in done:
                    await websocket.send_json(frame.result())
                else:
                    frame.cancel()
                    if not done:
                        await websocket.send_json(PingFrame().model_dump())
        except WebSocketDisconnect:
            pass  # the dashboard went away mid-send: the normal way a feed ends
        finally:
            disconnected.cancel()
            if disconnected.done() and not disconnected.cancelled():
                disconnected.exception()  # retrieved so asyncio does not log it as lost
