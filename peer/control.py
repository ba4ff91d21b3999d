"""The peer's control channel to the coordinator: one websocket, reconnected with capped backoff."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable

from pydantic import ValidationError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from swarmhub.wire import FAULTY_CLOSE_CODE, CoordinatorToPeer, CoordinatorToPeerMessage, Hello, Message

from .retry import backoff_delays

log = logging.getLogger(__name__)

POLICY_VIOLATION = 1008
"""Close code the coordinator uses for a channel it refuses (bad credential, kicked, run over)."""
FINAL_CLOSE_CODES = {POLICY_VIOLATION: "refused", FAULTY_CLOSE_CODE: "removed as faulty"}
"""Closes that end this peer's part: reconnecting would only be refused again."""


class Rejected(RuntimeError):
    """The coordinator closed the channel on purpose (bad credential, kicked, run gone): do not retry."""


def control_url(coordinator_url: str, path: str) -> str:
    base = coordinator_url.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base.removeprefix("https://") + path
    return "ws://" + base.removeprefix("http://") + path


class ControlChannel:
    """Keeps a channel open, says Hello on every (re)connect and hands each frame to the `on_message`
    that `run` is given (the router of those messages needs the channel to answer on)."""

    def __init__(
        self,
        url: str,
        hello: Callable[[], Hello],
        on_disconnect: Callable[[], None],
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`ssl_context` verifies a wss coordinator (None: the system's trust store)."""
        self._url = url
        self._ssl_context = ssl_context
        self._hello = hello
        self._on_disconnect = on_disconnect
        self._connection: ClientConnection | None = None
        self._connected = asyncio.Event()
        self._closing = False
        """This peer is leaving (stopped, kicked, run over): a closed channel is not lost, nor reopened."""

    async def run(self, on_message: Callable[[CoordinatorToPeerMessage], Awaitable[None]]) -> None:
        """Until cancelled or rejected: connect, serve, reconnect after a drop."""
        delays = backoff_delays()
        delay = next(delays)
        while True:
            try:
                async with connect(
                    self._url,
                    ssl=self._ssl_context if self._url.startswith("wss://") else None,
                    open_timeout=10,
                    ping_interval=10,
                    ping_timeout=20,
                ) as connection:
                    await connection.send(self._hello().model_dump_json())
                    self._connection = connection
                    self._connected.set()
                    delays = backoff_delays()
                    delay = next(delays)
                    async for raw in connection:
                        try:
                            message = CoordinatorToPeer.validate_json(raw)
                        except ValidationError as exc:
                            log.warning("ignoring a control frame the peer does not understand: %s", exc)
                            continue
                        await on_message(message)
                    _raise_if_final(connection.close_code, connection.close_reason)
            except InvalidStatus as exc:
                if exc.response.status_code in (401, 403, 404):
                    raise Rejected(
                        f"coordinator refused the channel: HTTP {exc.response.status_code}"
                    ) from exc
                log.warning("control channel refused (%s); retrying in %.1fs", exc, delay)
            except ConnectionClosed as exc:
                # A refusal arrives as an error close: the iteration above raises it.
                if exc.rcvd is not None:
                    _raise_if_final(exc.rcvd.code, exc.rcvd.reason)
                if self._closing:
                    return
                log.warning("control channel lost (%s); reconnecting in %.1fs", exc, delay)
            except (OSError, TimeoutError, InvalidHandshake) as exc:
                if self._closing:
                    return
                log.warning("control channel lost (%s); reconnecting in %.1fs", exc, delay)
            finally:
                if self._connection is not None:
                    self._connection = None
                    self._connected.clear()
                    self._on_disconnect()
            if self._closing:
                return
            await asyncio.sleep(delay)
            delay = next(delays)

    async def send(self, message: Message) -> bool:
        """Send if connected; False if the channel is down (the caller decides whether that matters)."""
        connection = self._connection
        if connection is None:
            return False
        try:
            await connection.send(message.model_dump_json())
        except ConnectionClosed:
            return False
        return True

    async def wait_connected(self) -> None:
        await self._connected.wait()

    async def close(self) -> None:
        self._closing = True
        if self._connection is not None:
            await self._connection.close()


def _raise_if_final(code: int | None, reason: str | None) -> None:
    if code in FINAL_CLOSE_CODES:
        raise Rejected(f"coordinator closed the channel ({FINAL_CLOSE_CODES[code]}): {reason}")
