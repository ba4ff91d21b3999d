"""A stage state copied between peers shows a bar up to the size its frame declares."""

from __future__ import annotations

import asyncio
import io
import socket

import pytest
import torch

from peer.console import Console
from peer.frame_headers import FetchState, StateReply
from peer.frames import PREFIX_SIZE, FrameError, declared_size, encode_frame
from peer.progress import format_size
from peer.state_copy import ArrivalBar, fetch_state
from peer.transport import FramePool, FrameServer, UploadPacer
from swarmhub.presets import get_preset
from swarmhub.resources import frame_limits
from swarmhub.wire import PeerEndpoint
from tests.peer.test_stage_server_checks import LIMIT, RUN, run_spec, signer_for, stage_server, verifier_of

SOURCE, JOINER = 5, 8


def state_frame(elements: int) -> bytes:
    return encode_frame(StateReply(run_id=RUN, sender=SOURCE, step=3), {"w": torch.ones(elements)})


def test_the_declared_size_is_known_once_prefix_and_header_are_in() -> None:
    frame = state_frame(1000)
    header_end = PREFIX_SIZE + int.from_bytes(frame[4:8], "big")
    assert declared_size(frame[: PREFIX_SIZE - 1], max_bytes=LIMIT) is None
    assert declared_size(frame[: header_end - 1], max_bytes=LIMIT) is None
    assert declared_size(frame[:header_end], max_bytes=LIMIT) == len(frame) == header_end + 4000
    with pytest.raises(FrameError, match="over the 100-byte limit"):
        declared_size(frame[:header_end], max_bytes=100)
    with pytest.raises(FrameError, match="bad magic"):
        declared_size(b"HTTP" + frame[4:header_end], max_bytes=LIMIT)


def test_a_frame_seen_in_fragments_fills_its_bar_and_one_seen_whole_shows_none() -> None:
    shown = io.StringIO()
    frame = state_frame(25_000)
    bar = ArrivalBar(Console("p", shown), "copying", LIMIT)
    for start in range(0, len(frame), 10_000):
        bar.received(frame[start : start + 10_000])
    bar.finish()
    lines = shown.getvalue().splitlines()
    assert all(line.startswith("[p] copying [") for line in lines)
    whole = format_size(len(frame))
    assert f"100%  {whole} / {whole}" in lines[-1]

    quiet = io.StringIO()
    small = ArrivalBar(Console("p", quiet), "copying", LIMIT)
    small.received(state_frame(10))
    small.finish()
    assert quiet.getvalue() == ""


def test_a_state_copied_from_a_real_peer_shows_its_bar_up_to_the_whole_frame() -> None:
    """A real stage server behind a loopback data-plane endpoint, its state fetched by a real pool:
    the bar counts the reply's bytes as they arrive, to the size the frame declared."""
    run = run_spec().model_copy(update={"num_stages": 1})
    limits = frame_limits(
        get_preset(run.model_preset), num_stages=1, microbatch_size=4, seq_len=run.seq_len, optimizer="adamw"
    )
    source = stage_server(SOURCE, 0, run)
    worker = source.worker
    assert worker is not None
    # A stage that has trained a step holds its optimizer's moments too: a state of ~3 MB.
    worker.apply_step(torch.full((worker.parameter_count,), 1e-3), 1, learning_rate=1e-3, grad_scale=1.0)
    shown = io.StringIO()

    async def scenario() -> tuple[tuple[int, dict[str, torch.Tensor]] | str, int]:
        listener = socket.create_server(("127.0.0.1", 0))
        endpoint = PeerEndpoint(peer_id=SOURCE, address=f"127.0.0.1:{listener.getsockname()[1]}", stage=0)
        # Paced at 80 Mbit/s: the state takes a moment to arrive, as over a real link.
        server = FrameServer(
            source.handle, max_bytes=LIMIT, pacer=UploadPacer(80.0), answer_text=lambda _: None
        )
        await server.start(listener)
        pool = FramePool(max_bytes=limits.largest, pacer=UploadPacer(None))
        pool.learn([endpoint])
        try:
            fetched = await fetch_state(
                pool,
                endpoint,
                FetchState(run_id=RUN, sender=JOINER, stage=0, step=1),
                signer=signer_for(JOINER),
                verifier=verifier_of(JOINER),
                limits=limits,
                console=Console("joiner", shown),
            )
            return fetched, pool.bytes_received
        finally:
            await pool.close()
            await server.stop()

    try:
        fetched, received = asyncio.run(scenario())
        assert not isinstance(fetched, str), fetched
        step, tensors = fetched
        expected = worker.export_state()
    finally:
        source.close()
    assert step == 1 and tensors.keys() == expected.keys()
    assert all(torch.equal(tensors[name], expected[name]) for name in expected)

    lines = shown.getvalue().splitlines()
    assert len(lines) >= 2, lines  # seen arriving, not only once it was all there
    assert all(line.startswith("[joiner] copying stage 0's state from peer 5 [") for line in lines)
    shares = [int(line.split("]")[2].split("%")[0]) for line in lines]
    assert shares == sorted(shares) and shares[-1] == 100
    whole = format_size(received)
    assert f"100%  {whole} / {whole}" in lines[-1] and lines[-1].endswith("/s")
