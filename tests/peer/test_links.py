"""Link measurement: the meter's smoothing and bounds, and the pool measuring a real (paced) link."""

from __future__ import annotations

import asyncio
import socket

import pytest

from peer.links import MIN_TRANSFER_SHARE, LinkMeter
from peer.transport import FramePool, FrameServer, UploadPacer
from swarmhub.wire import PeerEndpoint


@pytest.mark.parametrize(
    ("nbytes", "seconds", "held_s", "rate"),
    [
        (1_000_000, 1.0, 0.0, 1_000_000),
        (1_000_000, 1.0, 0.5, 2_000_000),  # the peer's compute and queue are not link time
        (1_000_000, 1.0, 5.0, 1_000_000 / MIN_TRANSFER_SHARE),  # a peer that says it held it longer
    ],
)
def test_one_sample_sets_the_rate(nbytes: int, seconds: float, held_s: float, rate: float) -> None:
    meter = LinkMeter()
    meter.observe(4, nbytes, seconds, now=0.0, held_s=held_s)
    assert meter.rate(4) == pytest.approx(rate)


def test_samples_are_smoothed() -> None:
    meter = LinkMeter(smoothing=0.5)
    meter.observe(1, 100, 1.0, now=0.0)
    meter.observe(1, 300, 1.0, now=1.0)
    assert meter.rate(1) == pytest.approx(200)


def test_empty_exchanges_measure_nothing() -> None:
    meter = LinkMeter()
    meter.observe(1, 0, 1.0, now=0.0)
    meter.observe(2, 10, 0.0, now=0.0)
    assert meter.rates() == {}


def test_bounded_keeping_the_most_recently_measured() -> None:
    meter = LinkMeter(capacity=3)
    for peer, now in ((1, 0.0), (2, 1.0), (3, 2.0), (1, 3.0), (4, 4.0)):
        meter.observe(peer, 100, 1.0, now=now)
    assert sorted(meter.rates()) == [1, 3, 4]


def test_only_recent_links_are_reported() -> None:
    meter = LinkMeter()
    meter.observe(1, 100, 1.0, now=0.0)
    meter.observe(2, 100, 1.0, now=50.0)
    assert sorted(meter.rates(now=70.0, max_age_s=30.0)) == [2]
    meter.forget(2)
    assert meter.rates() == {1: 100.0}


async def _echo(frame: bytes) -> bytes:
    return frame


def test_pool_measures_a_paced_link_no_faster_than_its_pace() -> None:
    """The server paces its replies at 8 Mbit/s (1 MB/s); every exchange takes at least the replies'
    bytes over that rate, so the measured rate can never exceed twice it (request + reply bytes)."""

    async def scenario() -> tuple[float | None, float | None, int]:
        listener = socket.create_server(("127.0.0.1", 0))
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        server = FrameServer(_echo, max_bytes=1 << 22, pacer=UploadPacer(8.0), answer_text=lambda _: None)
        await server.start(listener)
        pool = FramePool(max_bytes=1 << 22, pacer=UploadPacer(None))
        pool.learn([PeerEndpoint(peer_id=7, address=address, stage=0)])
        try:
            for _ in range(3):
                await pool.request(address, b"x" * 200_000, 30.0, peer_id=7)
            await pool.request(address, b"y" * 1000, 30.0)
            return pool.links.rate(7), pool.links.rate(8), len(pool.links.rates())
        finally:
            await pool.close()
            await server.stop()

    rate, unmeasured, known = asyncio.run(scenario())
    assert rate is not None and 0 < rate <= 2 * 1e6
    assert unmeasured is None
    assert known == 1  # a request without a peer id measures nothing
