"""The peers' control channel: `/ws/peer`, one websocket per peer, JSON frames of `swarmhub.wire`.

The first frame must be a Hello with the peer's id and credential; anything else, or a bad
credential, closes the channel with 1008 and a reason. After that, frames go to the live swarm in
order; the coordinator's own frames go out through a queue so a slow peer never stalls the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketDisconnected, WebSocketState

from server.live import LiveSwarm, PeerRejected
from swarmhub.status import PeerState
from swarmhub.wire import Goodbye, Hello, PeerToCoordinator

router = APIRouter()
log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 10.0
POLICY_VIOLATION = 1008


@router.websocket("/ws/peer")
async def peer_channel(websocket: WebSocket) -> None:
    await websocket.accept()
    live: LiveSwarm = websocket.app.state.live
    try:
        raw = await asyncio.wait_for(_receive_text(websocket), HELLO_TIMEOUT_S)
        hello = PeerToCoordinator.validate_json(raw)
    except TimeoutError:
        await websocket.close(POLICY_VIOLATION, "no hello within 10 seconds")
        return
    except ValueError as exc:  # a pydantic ValidationError, or a binary frame
        await websocket.close(POLICY_VIOLATION, f"first frame must be a valid hello: {_short(exc)}")
        return
    except WebSocketDisconnect:
        return
    if not isinstance(hello, Hello):
        await websocket.close(POLICY_VIOLATION, "first frame must be a hello")
        return

    outbox: asyncio.Queue[str | tuple[int, str]] = asyncio.Queue()
    try:
        link = await live.attach(
            hello, outbox.put_nowait, lambda code, reason: outbox.put_nowait((code, reason))
        )
    except PeerRejected as exc:
        await websocket.close(POLICY_VIOLATION, _reason(str(exc)))
        return
    writer = asyncio.create_task(_write(websocket, outbox))
    state, reason = PeerState.LOST, "channel closed"
    try:
        while True:
            try:
                message = PeerToCoordinator.validate_json(await _receive_text(websocket))
            except ValueError as exc:
                if websocket.application_state == WebSocketState.CONNECTED:
                    await websocket.close(POLICY_VIOLATION, f"invalid frame: {_short(exc)}")
                reason = "sent an invalid frame"
                break
            if isinstance(message, Goodbye):
                state, reason = PeerState.LEFT, "said goodbye"
                break
            await live.handle(link, message)
    except (WebSocketDisconnect, WebSocketDisconnected):
        # The second: the writer found the socket gone first (a send to a closed peer).
        pass
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
        await live.detach(link, state=state, reason=reason)


async def _receive_text(websocket: WebSocket) -> str:
    """The peer's next frame; a binary one is a ValueError, the peer's disconnect WebSocketDisconnect.

    Unlike `websocket.receive_text()`, this goes on reading after the coordinator has closed its side
    (kick, replacement, heartbeat timeout): a frame the peer sent before it saw the close is not an
    error, and the handler ends when the peer's disconnect arrives.
    """
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
    if message.get("text") is None:
        raise ValueError("frames are JSON text, not binary")
    return message["text"]


async def _write(websocket: WebSocket, outbox: asyncio.Queue[str | tuple[int, str]]) -> None:
    while True:
        item = await outbox.get()
        if websocket.application_state != WebSocketState.CONNECTED:
            return
        try:
            if isinstance(item, tuple):
                code, reason = item
                await websocket.close(code, _reason(reason))
                return
            await websocket.send_text(item)
        except (RuntimeError, WebSocketDisconnect, OSError):
            return


def _reason(text: str) -> str:
    """A websocket close reason is at most 123 bytes of UTF-8."""
    return text.encode()[:123].decode(errors="ignore")


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:100] if str(exc) else type(exc).__name__
