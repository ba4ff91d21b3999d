"""A trainer under sampled swarm views: a peer left out of its sample of a large stage is most likely
live, so the kept backward of a forward it served still goes to it and its connections stay; a peer
missing from a stage listed whole is gone. The stages' totals, not the sample, size the pipeline.
A ready peer left out of its own stage's sample still routes to itself.

A real trainer calls a real StageServer over a real frame server on loopback."""

from __future__ import annotations

import asyncio
import socket

import pytest

from peer.frame_headers import ForwardCall, ForwardReply
from peer.transport import FramePool, FrameServer, UploadPacer
from swarmhub.wire import PeerEndpoint, StageTotal
from tests.peer.test_call_timing import GRANT, trainer
from tests.peer.test_stage_server_checks import CHECKED, LIMIT, TRAINER, inputs_for, run_spec, stage_server

OTHER = PeerEndpoint(peer_id=77, address="127.0.0.1:1", stage=1, throughput=5.0)


def test_a_kept_backward_reaches_its_keeper_after_a_view_leaves_it_out_of_the_sample() -> None:
    server = stage_server(CHECKED, 0, run_spec())
    assert server.worker is not None
    server.worker.kept.limit_bytes = 1 << 30

    async def scenario() -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        frames = FrameServer(
            server.handle, max_bytes=LIMIT, pacer=UploadPacer(None), answer_text=lambda _: None
        )
        await frames.start(listener)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        pool = FramePool(max_bytes=LIMIT, pacer=UploadPacer(None))
        try:
            t = trainer(TRAINER, pool, server, address, local=False)
            inputs = inputs_for(0, "backward")
            _, _, kept = await t._call(
                0, ForwardCall, ForwardReply, GRANT, {"x": inputs["x"]}, [0], expect="y", keep=True
            )
            assert (kept.peer, kept.address) == (CHECKED, address)

            # 40 peers serve stage 0; this trainer's next sample lists others, not the keeper.
            t.update_swarm([OTHER], [StageTotal(peers=40, measured=40, rate=400.0), StageTotal.of([OTHER])])
            assert CHECKED not in t.addresses
            assert [c.state.name for c in pool._idle[address]] == ["OPEN"]  # not cut off
            assert (t._stage_rates, t._serving_peers) == ([400.0, 5.0], 41)
            await t._backward(0, GRANT, inputs["x"], inputs["grad"], kept, [0])
            assert (t.stats.kept_backwards, t.stats.full_backwards) == (1, 0)

            # Listed again, then missing from a view that lists stage 0 whole: it left, and its
            # connections are dropped (calls on them fail at once and go elsewhere).
            keeper = PeerEndpoint(peer_id=CHECKED, address=address, stage=0, throughput=10.0)
            t.update_swarm([keeper, OTHER])
            t.update_swarm([OTHER], [StageTotal(peers=0, measured=0, rate=0.0), StageTotal.of([OTHER])])
            assert address not in pool._idle
        finally:
            await pool.close()
            await frames.stop()

    try:
        asyncio.run(scenario())
    finally:
        server.close()


def test_a_view_without_totals_is_the_whole_swarm() -> None:
    """A coordinator from before samples lists every ready peer and no totals."""
    server = stage_server(CHECKED, 0, run_spec())
    try:
        t = trainer(
            TRAINER, FramePool(max_bytes=LIMIT, pacer=UploadPacer(None)), server, "127.0.0.1:2", local=False
        )
        t.update_swarm(
            [PeerEndpoint(peer_id=CHECKED, address="127.0.0.1:2", stage=0, throughput=10.0), OTHER]
        )
        assert (t._stage_rates, t._serving_peers, t._trainers) == ([10.0, 5.0], 2, 2)
        assert t._chain_s == pytest.approx(4 / 10.0 + 4 / 5.0)
    finally:
        server.close()


def test_a_trainer_left_out_of_its_own_stages_sample_still_routes_its_calls_to_itself() -> None:
    """The coordinator deals a few samples for all members (`server/policies/view_sample.py`) and no
    longer puts a member in its own: a ready peer its sample leaves out is told so, and its trainer
    counts itself in (`own`), its calls served in process."""
    server = stage_server(CHECKED, 0, run_spec())

    async def scenario() -> None:
        pool = FramePool(max_bytes=LIMIT, pacer=UploadPacer(None))
        try:
            t = trainer(CHECKED, pool, server, "127.0.0.1:2", local=True)
            # Stage 0 has 40 ready peers; this sample lists one, not this peer (nor anything that answers).
            far = PeerEndpoint(peer_id=88, address="127.0.0.1:1", stage=0, throughput=10.0)
            totals = [StageTotal(peers=40, measured=40, rate=400.0), StageTotal.of([OTHER])]
            t.update_swarm([far, OTHER], totals)
            assert t.routers[0].peers() == [88]  # not told it is ready: not a candidate

            own = PeerEndpoint(peer_id=CHECKED, address="127.0.0.1:2", stage=0, throughput=10.0)
            t.update_swarm([far, OTHER], totals, own=own)
            assert t.routers[0].peers() == sorted([88, CHECKED])
            assert (t._stage_rates, t._serving_peers) == ([400.0, 5.0], 41)  # the totals count it once
            for _ in range(3):
                _, out, kept = await t._call(
                    0, ForwardCall, ForwardReply, GRANT, inputs_for(0, "forward"), [0]
                )
                assert (kept.peer, kept.address) == (CHECKED, "")  # served in process
                assert "y" in out
            assert [s.peer_id for s in t._served[GRANT.microbatch_id]] == [CHECKED] * 3
        finally:
            await pool.close()

    try:
        asyncio.run(scenario())
    finally:
        server.close()
