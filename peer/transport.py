"""Moving framed bytes between peers over websockets: a server, a client pool, a bandwidth cap.

Binary websocket messages, one request and one response per exchange on a connection. Frames are
opaque here (`peer/frames.py` gives them meaning); this module only moves them, bounds their size
and, when asked, paces uploads to emulate a slow link.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

Handler = Callable[[bytes], Awaitable[bytes]]


class TransportError(ConnectionError):
    """The other peer could not be reached, hung up, or answered too late."""


class UploadPacer:
    """Sleeps so that bytes sent through it average at most `mbps` megabits per second."""

    def __init__(self, mbps: float | None) -> None:
        self._bytes_per_s = mbps * 1e6 / 8 if mbps else None
        self._free_at = 0.0
        self._lock = asyncio.Lock()

    async def pace(self, nbytes: int) -> None:
        if self._bytes_per_s is None:
            return
        async with self._lock:
            now = time.monotonic()
            start = max(now, self._free_at)
            self._free_at = start + nbytes / self._bytes_per_s
            delay = self._free_at - now
        await asyncio.sleep(delay)


class FrameServer:
    """Serves `handler` on host:port; each binary message is a request, the return value its reply."""

    def __init__(self, handler: Handler, *, max_bytes: int, pacer: UploadPacer) -> None:
        self._handler = handler
        self._max_bytes = max_bytes
        self._pacer = pacer
        self._server: Server | None = None

    async def start(self, listener: socket.socket) -> None:
        """Serve on an already bound socket, so its address can be registered before serving starts."""
        self._server = await serve(
            self._serve_connection,
            sock=listener,
            max_size=self._max_bytes,
            compression=None,
            ping_interval=20,
        )

    async def _serve_connection(self, connection: ServerConnection) -> None:
        with suppress(ConnectionClosed):
            async for message in connection:
                if isinstance(message, str):
                    await connection.close(1003, "data plane messages are binary frames")
                    return
                reply = await self._handler(message)
                await self._pacer.pace(len(reply))
                await connection.send(reply)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class FramePool:
    """Client side: reuses idle connections per address, one request in flight per connection."""

    def __init__(self, *, max_bytes: int, pacer: UploadPacer) -> None:
        self._max_bytes = max_bytes
        self._pacer = pacer
        self._idle: dict[str, list[ClientConnection]] = {}
        self._busy: dict[str, set[ClientConnection]] = {}
        self.bytes_sent = 0
        self.bytes_received = 0

    async def request(self, address: str, frame: bytes, timeout: float) -> bytes:
        connection = await self._acquire(address, timeout)
        busy = self._busy.setdefault(address, set())
        busy.add(connection)
        try:
            await self._pacer.pace(len(frame))
            async with asyncio.timeout(timeout):
                await connection.send(frame)
                reply = await connection.recv()
        except (TimeoutError, ConnectionClosed, OSError) as exc:
            connection.transport.abort()
            raise TransportError(f"peer at {address}: {type(exc).__name__}: {exc}") from exc
        finally:
            busy.discard(connection)
        if isinstance(reply, str):
            await connection.close()
            raise TransportError(f"peer at {address} answered with text, not a frame")
        self.bytes_sent += len(frame)
        self.bytes_received += len(reply)
        self._idle.setdefault(address, []).append(connection)
        return reply

    async def _acquire(self, address: str, timeout: float) -> ClientConnection:
        idle = self._idle.get(address, [])
        while idle:
            connection = idle.pop()
            if connection.state.name == "OPEN":
                return connection
        try:
            return await connect(
                f"ws://{address}",
                max_size=self._max_bytes,
                compression=None,
                open_timeout=min(timeout, 10.0),
                ping_interval=20,
            )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            raise TransportError(f"cannot connect to peer at {address}: {exc}") from exc

    def abandon(self, address: str) -> None:
        """Drop every connection to a peer that is gone: requests waiting on it fail at once
        (and are retried elsewhere) instead of waiting out their timeout on a silent peer."""
        for connection in [*self._idle.pop(address, []), *self._busy.get(address, ())]:
            connection.transport.abort()

    async def close(self) -> None:
        for address in list(self._idle):
            for connection in self._idle.pop(address):
                await connection.close()
