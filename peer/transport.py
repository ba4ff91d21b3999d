"""Moving framed bytes between peers over websockets: a server, a client pool, a bandwidth cap.

Binary websocket messages, one request and one response per exchange on a connection; a large
response goes out in fragments, so its receiver can watch it arrive. Frames are
opaque here (`peer/frames.py` gives them meaning); this module only moves them, bounds their size
and, when asked, paces uploads to emulate a slow link. A peer with a data-plane certificate serves
wss; clients dial an address whose endpoint carried a fingerprint over wss and pin it
(`swarmhub/tls.py`).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import suppress

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.protocol import State
from websockets.typing import Data

from swarmhub.tls import PinMismatch, check_pin, pinned_client_context
from swarmhub.wire import PeerEndpoint

from .links import LinkMeter

Handler = Callable[[bytes], Awaitable[bytes]]

FRAGMENT_MIN_BYTES = 1 << 20
MAX_FRAGMENTS = 100
"""A reply over FRAGMENT_MIN_BYTES goes out in at most this many fragments: a stage state is seen
arriving by the percent (`FramePool.request`'s `on_fragment`), far below what a receiver reassembles
(websockets refuses a message of over 4096 fragments)."""

PACE_SLICE_S = 0.25
"""An emulated send looks again this often whether its receiver still waits: a 1 MB reply on a
choked link lasts minutes, and held whole after its caller gave up it kept every later send (a
state copy's request, the next round's pushes) off the link."""

TRANSFER_BASE_TIMEOUT_S = 10.0
TRANSFER_MIN_BYTES_PER_S = 5e6
"""Stage states and gradient sums are given this much time to move (a slow link, not a choked one)."""


def transfer_timeout_s(nbytes: int) -> float:
    """Long enough to move `nbytes` on a slow link, not forever on a choked one."""
    return TRANSFER_BASE_TIMEOUT_S + nbytes / TRANSFER_MIN_BYTES_PER_S


class TransportError(ConnectionError):
    """The other peer could not be reached, hung up, or answered too late."""


class UnlistedAddress(TransportError):
    """This peer refused to dial an address the coordinator has not listed for its run. The choice
    is ours, not the other peer's failure: it is never reported as the peer being unreachable."""


class UploadPacer:
    """One emulated uplink of `mbps` megabits per second: sends take their turns first come, first
    served, each holding the link for its bytes' time. A send whose receiver has gone by its turn
    is dropped (`wanted`): a real link never carries the bytes of a connection its other end
    aborted, so a caller that gave up must not keep the upload busy for the sends behind it (a slow
    server's gradient pushes queued behind replies nobody would read, and missed their round)."""

    def __init__(self, mbps: float | None) -> None:
        self._bytes_per_s = mbps * 1e6 / 8 if mbps else None
        self._lock = asyncio.Lock()

    async def pace(self, nbytes: int, wanted: Callable[[], bool] | None = None) -> bool:
        """Waits for the link and holds it for `nbytes`; False if the send is no longer `wanted`, at
        its turn or while on the link (whatever was left of it is not sent). A cancelled send
        leaves the link at once, as the bytes of an aborted connection do."""
        if self._bytes_per_s is None:
            return True
        async with self._lock:
            left = nbytes / self._bytes_per_s
            while wanted is None or wanted():
                if left <= 0:
                    return True
                held = min(left, PACE_SLICE_S)
                await asyncio.sleep(held)
                left -= held
            return False


class FrameServer:
    """Serves `handler` on host:port; each binary message is a request, the return value its reply."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_bytes: int,
        pacer: UploadPacer,
        answer_text: Callable[[str], str | None],
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`answer_text` replies to a text frame (the reachability probe), or returns None to refuse it;
        with `ssl_context` (the peer's own certificate) the server speaks only TLS."""
        self._handler = handler
        self._ssl_context = ssl_context
        self._answer_text = answer_text
        self._max_bytes = max_bytes
        self._pacer = pacer
        self._server: Server | None = None

    async def start(self, listener: socket.socket) -> None:
        """Serve on an already bound socket, so its address can be registered before serving starts."""
        self._server = await serve(
            self._serve_connection,
            sock=listener,
            ssl=self._ssl_context,
            max_size=self._max_bytes,
            compression=None,
            ping_interval=20,
        )

    async def _serve_connection(self, connection: ServerConnection) -> None:
        def caller_waits() -> bool:
            return connection.state is State.OPEN

        with suppress(ConnectionClosed):
            async for message in connection:
                if isinstance(message, str):
                    answer = self._answer_text(message)
                    if answer is None:
                        await connection.close(1003, "data plane messages are binary frames")
                        return
                    await connection.send(answer)
                    continue
                reply = await self._handler(message)
                if len(reply) <= FRAGMENT_MIN_BYTES:
                    if await self._pacer.pace(len(reply), caller_waits):
                        await connection.send(reply)
                else:
                    await connection.send(self._paced_fragments(reply, caller_waits))

    async def _paced_fragments(self, reply: bytes, wanted: Callable[[], bool]) -> AsyncIterator[memoryview]:
        # Paced one by one: an emulated slow link shows the bytes trickling in, not all at the end.
        size = max(FRAGMENT_MIN_BYTES, -(-len(reply) // MAX_FRAGMENTS))
        view = memoryview(reply)
        for start in range(0, len(view), size):
            fragment = view[start : start + size]
            if not await self._pacer.pace(len(fragment), wanted):
                return
            yield fragment

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


async def _watched_recv(connection: ClientConnection, on_fragment: Callable[[bytes], None]) -> Data:
    """The next message, each binary fragment shown to `on_fragment` as it arrives."""
    fragments: list[Data] = []
    async for fragment in connection.recv_streaming():
        if isinstance(fragment, bytes):
            on_fragment(fragment)
        fragments.append(fragment)
    if isinstance(fragments[0], str):
        return "".join(str(f) for f in fragments)
    return b"".join(f for f in fragments if isinstance(f, bytes))


class FramePool:
    """Client side: reuses idle connections per address, one request in flight per connection.

    The pool knows each address's certificate fingerprint from the endpoints the coordinator listed
    (`learn`): an address with one is dialled over wss and kept only if its certificate matches;
    one without is dialled over plain ws (local runs). An address the coordinator never listed for
    a peer of this run (swarm view, barrier group, state sources) is never dialled: whoever else
    names one (a hostile peer's frame, a bug) cannot make this peer connect anywhere."""

    def __init__(self, *, max_bytes: int, pacer: UploadPacer) -> None:
        self._max_bytes = max_bytes
        self._pacer = pacer
        self._tls = pinned_client_context()
        self._pins: dict[str, str] = {}
        self._idle: dict[str, list[ClientConnection]] = {}
        self._busy: dict[str, set[ClientConnection]] = {}
        self.bytes_sent = 0
        self.bytes_received = 0
        self.links = LinkMeter()

    async def request(
        self,
        address: str,
        frame: bytes,
        timeout: float,
        *,
        peer_id: int | None = None,
        on_fragment: Callable[[bytes], None] | None = None,
    ) -> bytes:
        """The reply to `frame`. With `peer_id`, the exchange also measures the link to that peer
        (for exchanges the other peer answers at once; a caller told how long the other peer held
        its call measures with `timed_request`); with `on_fragment`, each piece of the reply is
        shown to it as it arrives (it must not raise)."""
        reply, seconds = await self.timed_request(address, frame, timeout, on_fragment=on_fragment)
        if peer_id is not None:
            self.links.observe(peer_id, len(frame) + len(reply), seconds, time.monotonic())
        return reply

    async def timed_request(
        self,
        address: str,
        frame: bytes,
        timeout: float,
        *,
        on_fragment: Callable[[bytes], None] | None = None,
    ) -> tuple[bytes, float]:
        """`request`'s reply, and the seconds the exchange took on its connection (opening one not
        included)."""
        connection = await self._acquire(address, timeout)
        busy = self._busy.setdefault(address, set())
        busy.add(connection)
        # Timed from before the upload pacing: an emulated slow link must read as slow.
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                # Inside the timeout: a call that cannot get its bytes onto the link in time fails
                # like one that is not answered in time, and gives the link up.
                await self._pacer.pace(len(frame))
                await connection.send(frame)
                if on_fragment is None:
                    reply = await connection.recv()
                else:
                    reply = await _watched_recv(connection, on_fragment)
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
        seconds = time.monotonic() - started
        self._idle.setdefault(address, []).append(connection)
        return reply, seconds

    def learn(self, endpoints: Iterable[PeerEndpoint]) -> None:
        """Take the fingerprints of endpoints the coordinator listed; the latest word per address wins."""
        for endpoint in endpoints:
            if self._pins.get(endpoint.address) != endpoint.fingerprint:
                # Another key at this address (the peer restarted): its old connections are not it.
                self.abandon(endpoint.address)
                self._pins[endpoint.address] = endpoint.fingerprint

    async def _acquire(self, address: str, timeout: float) -> ClientConnection:
        idle = self._idle.get(address, [])
        while idle:
            connection = idle.pop()
            if connection.state.name == "OPEN":
                return connection
        if address not in self._pins:
            raise UnlistedAddress(f"refusing to dial {address}: the coordinator did not list it for this run")
        pin = self._pins[address]
        try:
            connection = await connect(
                f"{'wss' if pin else 'ws'}://{address}",
                ssl=self._tls if pin else None,
                max_size=self._max_bytes,
                compression=None,
                open_timeout=min(timeout, 10.0),
                ping_interval=20,
            )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            raise TransportError(f"cannot connect to peer at {address}: {exc}") from exc
        if pin:
            # Checked before any frame (and so any credential) is sent on the connection.
            try:
                check_pin(connection.transport, pin, address=address)
            except PinMismatch as exc:
                connection.transport.abort()
                raise TransportError(str(exc)) from exc
        return connection

    def abandon(self, address: str) -> None:
        """Drop every connection to a peer that is gone: requests waiting on it fail at once
        (and are retried elsewhere) instead of waiting out their timeout on a silent peer."""
        for connection in [*self._idle.pop(address, []), *self._busy.get(address, ())]:
            connection.transport.abort()

    async def close(self) -> None:
        for address in list(self._idle):
            for connection in self._idle.pop(address):
                await connection.close()
