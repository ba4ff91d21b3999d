"""A stage call's time as the trainer reports it: the serving peer says how long the call was inside
it (`server_s`), and the trainer books the rest of its wait as the network's.

A real trainer calls a real StageServer, over a real frame server on loopback whose replies are
paced like a slow upload, and in process."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Coroutine

from peer.data import SampleSource
from peer.frame_headers import ForwardCall, ForwardReply
from peer.stage_server import StageServer
from peer.trainer import Trainer
from peer.transport import FramePool, FrameServer, UploadPacer
from swarmhub.presets import get_preset
from swarmhub.stage_cost import stage_bytes_per_sample
from swarmhub.wire import PeerEndpoint, WorkGrant
from tests.peer.test_stage_server_checks import (
    CHECKED,
    LIMIT,
    SAMPLES,
    SEQ,
    TRAINER,
    inputs_for,
    run_spec,
    signer_for,
    stage_server,
    verifier_of,
)

UPLOAD_MBPS = 0.5
GRANT = WorkGrant(step=0, microbatch_id="m1", first_sample=0, samples=SAMPLES)


def trainer(
    peer_id: int, pool: FramePool, server: StageServer, address: str, *, local: bool, throughput: float = 10.0
) -> Trainer:
    async def no_work() -> None:
        return None

    async def report(_message: object) -> bool:
        return True

    t = Trainer(
        run=server.run,
        peer_id=peer_id,
        signer=signer_for(peer_id),
        verifier=verifier_of(peer_id),
        samples=SampleSource(bytes(range(256)) * 4, SEQ, 0, token_bytes=1),
        pool=pool,
        request_work=no_work,
        report=report,
        call_timeout_s=60.0,
        max_frame_bytes=LIMIT,
        concurrency=1,
        serve_local=server.serve_local if local else None,
    )
    swarm = [PeerEndpoint(peer_id=server.peer_id, address=address, stage=0, throughput=throughput)]
    pool.learn(swarm)
    t.update_swarm(swarm)
    return t


async def forward(t: Trainer) -> ForwardReply:
    reply, out, _ = await t._call(
        0, ForwardCall, ForwardReply, GRANT, inputs_for(0, "forward"), [0], expect="y"
    )
    assert out["y"].shape == (SAMPLES, SEQ, 64)
    return reply


@contextlib.asynccontextmanager
async def served_on_loopback(
    server: StageServer, upload_mbps: float | None
) -> AsyncIterator[tuple[str, FramePool]]:
    """`server` behind a real frame server on loopback whose replies are paced at `upload_mbps`, and
    a frame pool to call it with."""
    listener = socket.create_server(("127.0.0.1", 0))
    frames = FrameServer(
        server.handle, max_bytes=LIMIT, pacer=UploadPacer(upload_mbps), answer_text=lambda _text: None
    )
    await frames.start(listener)
    pool = FramePool(max_bytes=LIMIT, pacer=UploadPacer(None))
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}", pool
    finally:
        await pool.close()
        await frames.stop()


def run_against(server: StageServer, scenario: Callable[[], Coroutine[None, None, None]]) -> None:
    try:
        asyncio.run(scenario())
    finally:
        server.close()


def test_the_trainer_books_its_wait_less_the_servers_time_as_network() -> None:
    server = stage_server(CHECKED, 0, run_spec())

    async def scenario() -> None:
        # The serving peer uploads its replies at UPLOAD_MBPS: on the wire, after each reply was ready.
        async with served_on_loopback(server, UPLOAD_MBPS) as (address, pool):
            remote = trainer(TRAINER, pool, server, address, local=False)
            reply = await forward(remote)
            (served,) = remote._served[GRANT.microbatch_id]
            assert 0 < reply.compute_s <= reply.server_s
            assert served.compute_seconds == reply.compute_s
            # The reply's bytes took at least this long to upload, none of it inside the server.
            paced_s = SAMPLES * SEQ * 64 * 4 * 8 / (UPLOAD_MBPS * 1e6)
            assert served.network_seconds >= 0.9 * paced_s
            assert served.network_seconds + reply.server_s <= served.seconds + 1e-6

            # The trainer's own peer: served in process, nothing on a network.
            local = trainer(CHECKED, pool, server, address, local=True)
            reply = await forward(local)
            (served,) = local._served[GRANT.microbatch_id]
            assert 0 < reply.compute_s <= reply.server_s <= served.seconds
            assert served.network_seconds < 0.01

    run_against(server, scenario)


def test_the_peer_picked_for_a_first_stage_forward_is_charged_the_samples_whole_traffic() -> None:
    # The call carries token ids only, but the peer returns activations and later takes their
    # gradient (the kept backward): a router that charged the call and a reply its size took a
    # first-stage peer on a slow link for a fast one, and calls queued there in the simulator.
    server = stage_server(CHECKED, 0, run_spec())
    charged: list[int] = []

    async def scenario() -> None:
        async with served_on_loopback(server, None) as (address, pool):
            t = trainer(TRAINER, pool, server, address, local=False)
            router = t.routers[0]
            choose = router.choose

            def recording(samples: int, now: float, exclude: frozenset[int] = frozenset(), nbytes: int = 0):
                charged.append(nbytes)
                return choose(samples, now, exclude, nbytes)

            router.choose = recording  # type: ignore[method-assign]
            await forward(t)

    run_against(server, scenario)
    spec = server.run
    d_model = get_preset(spec.model_preset).d_model
    whole = stage_bytes_per_sample(spec.num_stages, spec.seq_len, d_model, spec.compression)
    # The first choice is the call's (a spot check may pick a checker after it).
    assert charged[0] == int(whole[0] * SAMPLES)
    # At least the float32 activations it returns and their gradient: far more than the token ids.
    assert charged[0] >= 2 * SAMPLES * spec.seq_len * d_model * 4


def test_a_link_reads_the_wire_not_the_serving_peers_compute_or_queue() -> None:
    # The serving peer's compute is slowed 20x and the trainer believes it fast: the call spends
    # nearly all its time inside the server. Estimating that time from the peer's rate left it on
    # the link, which read a few hundred KB/s on loopback under a swarm's load.
    server = stage_server(CHECKED, 0, run_spec())
    server.slowdown = 20.0

    async def scenario() -> None:
        async with served_on_loopback(server, None) as (address, pool):
            remote = trainer(TRAINER, pool, server, address, local=False, throughput=1e6)
            reply = await forward(remote)
            (served,) = remote._served[GRANT.microbatch_id]
            assert reply.server_s > 0.5 * served.seconds
            reading = pool.links.rate(CHECKED)
            assert reading is not None
            assert reading > 2 * (pool.bytes_sent + pool.bytes_received) / served.seconds

    run_against(server, scenario)
