"""A new attempt at a step's round does not push sums again to members that already hold them
(`peer.averaging.Deliveries`, `GradientInbox`): two real stage servers on loopback, a third member
that is gone, and the coordinator's side of the channel recorded."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import torch

from peer.averaging import Averager, Deliveries, GradientInbox
from peer.frame_auth import FrameSigner
from peer.stage_server import StageServer
from peer.transport import FramePool, FrameServer, UploadPacer
from swarmhub.presets import get_preset
from swarmhub.resources import FrameLimits, frame_limits
from swarmhub.wire import AveragingDone, Message, PeerEndpoint, PeerUnreachable, RunSpec, StepBarrier
from tests.peer.test_stage_server_checks import (
    LIMIT,
    TRAINER,
    call,
    inputs_for,
    run_spec,
    signer_for,
    stage_call,
    stage_server,
)

A, B, GONE = 4, 5, 6


def endpoint(peer_id: int, address: str) -> PeerEndpoint:
    return PeerEndpoint(peer_id=peer_id, address=address, stage=0)


def test_deliveries_name_who_still_needs_the_sum() -> None:
    members = [endpoint(p, f"127.0.0.1:{p}") for p in (1, 2, 3)]
    deliveries = Deliveries()
    assert deliveries.still_to_push(0, b"sum", members) == members
    deliveries.acknowledged(0, b"sum", 2)
    assert [m.peer_id for m in deliveries.still_to_push(0, b"sum", members)] == [1, 3]
    # Another step, or a sum that changed (thrown away and accumulated again), goes to everyone.
    assert deliveries.still_to_push(1, b"sum", members) == members
    assert deliveries.still_to_push(0, b"other", members) == members
    deliveries.acknowledged(0, b"other", 3)
    assert [m.peer_id for m in deliveries.still_to_push(0, b"other", members)] == [1, 2]
    deliveries.drop_through(0)
    assert deliveries.still_to_push(0, b"other", members) == members


def test_a_sum_received_in_one_attempt_serves_the_next_until_forgotten() -> None:
    async def scenario() -> None:
        inbox = GradientInbox()
        await inbox.put(7, 0, 2, torch.ones(3), ["mb"])
        got = await asyncio.wait_for(inbox.wait_for(7, {2}), 1.0)
        assert torch.equal(got[2].grads, torch.ones(3)) and got[2].counted == ["mb"]
        # A later attempt's push (the same sum) replaces it; an older one arriving late does not.
        await inbox.put(7, 2, 2, torch.full((3,), 2.0), ["mb"])
        await inbox.put(7, 1, 2, torch.zeros(3), ["mb"])
        assert torch.equal((await inbox.wait_for(7, {2}))[2].grads, torch.full((3,), 2.0))
        inbox.clear()
        assert inbox.senders(7) == set()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(inbox.wait_for(7, {2}), 0.05)

    asyncio.run(scenario())


@dataclass
class RecordedControl:
    """The coordinator's end of the peer's channel: what the peer told it."""

    sent: list[Message] = field(default_factory=list)

    async def send(self, message: Message) -> None:
        self.sent.append(message)


@dataclass
class Member:
    """What `Averager` uses of a joined peer: a real stage server behind a real loopback endpoint, a
    real frame pool, and its signer."""

    server: StageServer
    run: RunSpec
    signer: FrameSigner
    frame_limits: FrameLimits
    pool: FramePool
    control: RecordedControl
    frame_server: FrameServer | None = None

    @property
    def peer_id(self) -> int:
        return self.server.peer_id


@pytest.fixture
def gone_address() -> Iterator[str]:
    """An address nobody listens on: the member that died."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = f"127.0.0.1:{listener.getsockname()[1]}"
    yield address


def test_a_restarted_attempt_reuses_the_sums_the_members_already_exchanged(gone_address: str) -> None:
    run = run_spec().model_copy(update={"num_stages": 2})
    limits = frame_limits(
        get_preset(run.model_preset), num_stages=2, microbatch_size=4, seq_len=run.seq_len, optimizer="adamw"
    )
    servers = {p: stage_server(p, 0, run) for p in (A, B)}
    pushes_received = {A: 0, B: 0}
    for p, server in servers.items():
        # Each member trains a different microbatch: their sums differ.
        call(
            server,
            signer_for(TRAINER),
            stage_call("backward", 0, f"mb-{p}", check=False),
            inputs_for(0, "backward"),
        )
        put = server.inbox.put

        async def counted_put(*args: object, _put=put, _p=p) -> None:  # type: ignore[no-untyped-def]
            pushes_received[_p] += 1
            await _put(*args)

        server.inbox.put = counted_put  # type: ignore[method-assign]
    expected = servers[A].worker.flat_gradients() + servers[B].worker.flat_gradients()  # type: ignore[union-attr]

    async def scenario() -> dict[int, RecordedControl]:
        members: dict[int, Member] = {}
        addresses: dict[int, str] = {}
        for p, server in servers.items():
            listener = socket.create_server(("127.0.0.1", 0))
            addresses[p] = f"127.0.0.1:{listener.getsockname()[1]}"
            frame_server = FrameServer(
                server.handle, max_bytes=LIMIT, pacer=UploadPacer(None), answer_text=lambda _: None
            )
            await frame_server.start(listener)
            members[p] = Member(
                server=server,
                run=run,
                signer=server.signer,
                frame_limits=limits,
                pool=FramePool(max_bytes=limits.largest, pacer=UploadPacer(None)),
                control=RecordedControl(),
                frame_server=frame_server,
            )
        averagers = {p: Averager(m) for p, m in members.items()}  # type: ignore[arg-type]
        group = [endpoint(A, addresses[A]), endpoint(B, addresses[B]), endpoint(GONE, gone_address)]

        async def attempt(number: int, listed: list[PeerEndpoint]) -> None:
            barrier = StepBarrier(step=0, attempt=number, stage=0, group=listed, push_timeout_s=5.0)
            for m in members.values():
                m.pool.learn(listed)  # as `MessageRouter` does with a barrier's group
            await asyncio.gather(*(averagers[p].average(barrier) for p in (A, B)))

        try:
            # The first attempt: each pushes to the other and fails to reach the gone member.
            await attempt(0, group)
            assert pushes_received == {A: 1, B: 1}
            for m in members.values():
                # The gone member is named; so may the other be, if its push had not arrived when
                # this one's push to the gone member was refused.
                assert all(isinstance(x, PeerUnreachable) for x in m.control.sent)
                assert GONE in {x.peer_id for x in m.control.sent}  # type: ignore[attr-defined]
                m.control.sent.clear()
            # The coordinator goes on without it: nothing is pushed again, and both report the sum.
            await attempt(1, group[:2])
            assert pushes_received == {A: 1, B: 1}
            # Forgotten (the coordinator restarted): the next attempt pushes again.
            for averager in averagers.values():
                averager.forget_sums()
            await attempt(2, group[:2])
            assert pushes_received == {A: 2, B: 2}
        finally:
            for m in members.values():
                await m.pool.close()
                assert m.frame_server is not None
                await m.frame_server.stop()
        return {p: m.control for p, m in members.items()}

    try:
        controls = asyncio.run(scenario())
    finally:
        for server in servers.values():
            server.close()
    expected_norm_sq = float(torch.linalg.vector_norm(expected, dtype=torch.float64)) ** 2
    for control in controls.values():
        reports = [m for m in control.sent if isinstance(m, AveragingDone)]
        assert [r.attempt for r in reports] == [1, 2]
        assert len(control.sent) == 2
        for report in reports:
            assert report.contributors == [A, B]
            assert report.counted == ["mb-4", "mb-5"]
            assert report.grad_sum_norm_sq == pytest.approx(expected_norm_sq, rel=1e-6)
