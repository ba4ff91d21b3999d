"""The emulated uplink: sends take turns, and a reply whose caller gave up is dropped at its turn."""

from __future__ import annotations

import asyncio
import socket

import pytest

from peer.transport import PACE_SLICE_S, FramePool, FrameServer, TransportError, UploadPacer
from swarmhub.wire import PeerEndpoint


class RecordingPacer(UploadPacer):
    """The real pacer, noting each send's size and whether it went out."""

    def __init__(self, mbps: float) -> None:
        super().__init__(mbps)
        self.outcomes: list[tuple[int, bool]] = []

    async def pace(self, nbytes: int, wanted=None) -> bool:
        sent = await super().pace(nbytes, wanted)
        self.outcomes.append((nbytes, sent))
        return sent


def test_sends_take_turns_and_one_nobody_waits_for_is_dropped_at_its_turn() -> None:
    async def scenario() -> list[tuple[str, bool]]:
        pacer = UploadPacer(8.0)  # 1 MB/s: 50 kB hold the link for 50 ms
        waiting = {"a": True, "b": True, "c": True}
        done: list[tuple[str, bool]] = []

        async def send(name: str) -> None:
            done.append((name, await pacer.pace(50_000, lambda: waiting[name])))

        first = asyncio.create_task(send("a"))
        await asyncio.sleep(0)  # a holds the link
        rest = [asyncio.create_task(send(name)) for name in ("b", "c")]
        await asyncio.sleep(0)
        waiting["b"] = False  # b's receiver goes while a is on the link
        await asyncio.gather(first, *rest)
        return done

    assert asyncio.run(scenario()) == [("a", True), ("b", False), ("c", True)]


def test_a_send_whose_receiver_goes_while_on_the_link_gives_the_link_up() -> None:
    """A 1 GB send at 1 MB/s would hold the link for 1000 s; its receiver goes after its first
    slice, and the send behind it goes out without waiting for the rest."""

    async def scenario() -> list[tuple[str, bool]]:
        pacer = UploadPacer(8.0)
        receiver_there = [True]
        done: list[tuple[str, bool]] = []

        async def send(name: str, nbytes: int, wanted) -> None:
            done.append((name, await pacer.pace(nbytes, wanted)))

        huge = asyncio.create_task(send("huge", 10**9, lambda: receiver_there[0]))
        await asyncio.sleep(0)
        small = asyncio.create_task(send("small", 50_000, lambda: True))
        await asyncio.sleep(PACE_SLICE_S / 2)
        receiver_there[0] = False
        # A guard against a hang, not a timing: held whole, the huge send would take 1000 s.
        await asyncio.wait_for(asyncio.gather(huge, small), timeout=60)
        return done

    assert asyncio.run(scenario()) == [("huge", False), ("small", True)]


def test_a_cancelled_send_gives_the_link_up() -> None:
    async def scenario() -> bool:
        pacer = UploadPacer(8.0)
        huge = asyncio.create_task(pacer.pace(10**9))
        await asyncio.sleep(0)
        huge.cancel()
        return await asyncio.wait_for(pacer.pace(50_000), timeout=60)

    assert asyncio.run(scenario()) is True


def test_a_call_that_cannot_get_onto_the_link_in_time_fails_and_frees_it() -> None:
    """At 8 kB/s a 1 MB call needs 125 s of upload; with 0.5 s to live it fails, and a small call
    after it goes out at once rather than behind the rest of the big one."""

    async def scenario() -> bytes:
        listener = socket.create_server(("127.0.0.1", 0))
        address = f"127.0.0.1:{listener.getsockname()[1]}"

        async def echo(frame: bytes) -> bytes:
            return frame

        server = FrameServer(echo, max_bytes=1 << 22, pacer=UploadPacer(None), answer_text=lambda _: None)
        await server.start(listener)
        pool = FramePool(max_bytes=1 << 22, pacer=UploadPacer(0.064))
        pool.learn([PeerEndpoint(peer_id=7, address=address, stage=0)])
        try:
            with pytest.raises(TransportError, match="TimeoutError"):
                await pool.request(address, b"b" * 1_000_000, 0.5)
            return await pool.request(address, b"s" * 100, 60.0)
        finally:
            await pool.close()
            await server.stop()

    assert asyncio.run(scenario()) == b"s" * 100


def test_an_unpaced_link_sends_everything() -> None:
    assert asyncio.run(UploadPacer(None).pace(10**9, lambda: False)) is True


def test_a_server_drops_the_reply_of_a_caller_that_gave_up_and_serves_the_next() -> None:
    """The slow server's uplink is busy with one reply (200 kB at 0.4 Mbit/s: 4 s); a second caller
    gives up after 2.5 s, so when its reply's turn comes nobody reads it and it is not sent. The
    second caller dials a connection of its own within its timeout: at 0.3 s, a loaded CI machine
    once gave up before its frame reached the server, whose pacer then never saw a second reply."""

    async def scenario() -> tuple[list[tuple[int, bool]], bytes]:
        listener = socket.create_server(("127.0.0.1", 0))
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        first_in, second_in = asyncio.Event(), asyncio.Event()

        async def echo(frame: bytes) -> bytes:
            (second_in if frame.startswith(b"i") else first_in).set()
            return frame

        pacer = RecordingPacer(0.4)
        server = FrameServer(echo, max_bytes=1 << 22, pacer=pacer, answer_text=lambda _: None)
        await server.start(listener)
        pool = FramePool(max_bytes=1 << 22, pacer=UploadPacer(None))
        pool.learn([PeerEndpoint(peer_id=7, address=address, stage=0)])
        try:
            patient = asyncio.create_task(pool.request(address, b"p" * 200_000, 60.0))
            await first_in.wait()
            impatient = asyncio.create_task(pool.request(address, b"i" * 100_000, 2.5))
            await asyncio.wait_for(second_in.wait(), 2.5)
            with pytest.raises(TransportError):
                await impatient
            reply = await patient
            # The dropped reply's turn comes once the patient one is through; wait for it.
            async with asyncio.timeout(10.0):
                while len(pacer.outcomes) < 2:
                    await asyncio.sleep(0.05)
            return pacer.outcomes, reply
        finally:
            await pool.close()
            await server.stop()

    outcomes, reply = asyncio.run(scenario())
    assert reply == b"p" * 200_000
    assert outcomes == [(200_000, True), (100_000, False)]
