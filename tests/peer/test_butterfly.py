"""The butterfly exchange (`peer/butterfly.py`): its parts, and real stage servers on loopback that
average in it, with the coordinator's side of each channel recorded."""

from __future__ import annotations

import asyncio
import itertools
import socket

import pytest
import torch

from peer.averaging import Averager, norm_sq, sum_contributions
from peer.butterfly import Part, PartInbox, assemble_parts, part_bounds, reduce_part
from peer.faults import Fault
from peer.frame_headers import ErrorReply, PushGrads
from peer.frames import assemble_call, encode_payload, open_frame
from peer.stage_server import StageServer
from peer.transport import FramePool, FrameServer, UploadPacer
from server.policies.part_check import PartReport, judge_parts
from swarmhub.presets import get_preset
from swarmhub.resources import frame_limits
from swarmhub.run_settings import CODEC_ERROR
from swarmhub.wire import (
    AveragingDone,
    CheckParts,
    CompressionName,
    PartsChecked,
    PeerEndpoint,
    PeerUnreachable,
    StepBarrier,
)
from tests.peer.test_averaging_attempts import Member, RecordedControl, endpoint
from tests.peer.test_stage_server_checks import (
    LIMIT,
    TRAINER,
    call,
    inputs_for,
    run_spec,
    signer_for,
    stage_call,
)
from tests.peer.test_stage_server_checks import stage_server as make_stage_server


@pytest.mark.parametrize(
    ("length", "weights", "sizes"),
    [
        pytest.param(10, [1], [10], id="one part"),
        pytest.param(12, [1, 1, 1, 1], [3, 3, 3, 3], id="equal"),
        pytest.param(10, [1, 1, 1], [3, 3, 4], id="equal, the rest to the last"),
        pytest.param(7, [1] * 7, [1] * 7, id="one element each"),
        pytest.param(3, [1] * 5, [1, 1, 1, 0, 0], id="fewer elements than parts"),
        pytest.param(111, [10, 1], [100, 11], id="a slow link owns a tenth as much"),
        pytest.param(12, [1000, 1], [10, 2], id="never less than one element"),
        pytest.param(1_000_003, [125_000] * 21 + [12_500] * 9, None, id="datacenter and broadband"),
    ],
)
def test_parts_cover_the_gradients_in_order_in_proportion_to_their_weights(
    length: int, weights: list[int], sizes: list[int] | None
) -> None:
    bounds = part_bounds(length, weights)
    assert bounds[0][0] == 0 and bounds[-1][1] == length
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    got = [end - start for start, end in bounds]
    if sizes is not None:
        assert got == sizes
    spare = max(0, length - len(weights))
    for size, weight in zip(got, weights, strict=True):
        # One element each, then the rest by weight, each part within an element of its share.
        assert abs(size - min(1, length) - spare * weight / sum(weights)) <= 1


@pytest.mark.parametrize("weights", [[], [1, 0], [2, -1]])
def test_parts_need_positive_weights(weights: list[int]) -> None:
    with pytest.raises(ValueError, match="positive"):
        part_bounds(10, weights)


@pytest.mark.parametrize(
    "fields",
    [
        {"part": 3, "parts": 3, "bounds": (0, 1)},
        {"part": 1, "parts": 3},
        {"part": 1, "parts": 3, "bounds": (5, 4)},
        {"parts": 2},
        {"reduced": True},
        {"bounds": (0, 4)},
    ],
)
def test_a_push_header_names_a_part_of_its_parts_or_none(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        PushGrads(run_id=1, sender=2, stage=0, step=0, attempt=0, counted=[], **fields)  # type: ignore[arg-type]


def test_reduced_parts_put_together_are_the_all_to_all_sum_bit_for_bit() -> None:
    gen = torch.Generator().manual_seed(3)
    grads = {sender: torch.randn(1001, generator=gen) * sender for sender in (2, 9, 5, 4)}
    reduced = {}
    for j, (start, end) in enumerate(part_bounds(1001, [3, 1, 40, 7])):
        reduced[j] = reduce_part({s: g[start:end] for s, g in grads.items()})
    assert torch.equal(assemble_parts(reduced), sum_contributions(grads))


def test_the_inbox_keeps_each_senders_newest_attempt_and_waits_for_the_right_part() -> None:
    async def scenario() -> None:
        inbox = PartInbox()
        one = torch.ones(2)
        bounds = [(0, 2), (2, 5), (5, 6)]
        await inbox.put(
            3, 7, Part(attempt=1, part=0, parts=3, bounds=(0, 2), grads=one, counted=["a"]), reduced=False
        )
        # An older attempt arriving late does not replace it; a part cut for another round is not it,
        # nor one cut by other weights.
        await inbox.put(
            3, 7, Part(attempt=0, part=0, parts=3, bounds=(0, 2), grads=one, counted=[]), reduced=False
        )
        await inbox.put(
            3, 8, Part(attempt=1, part=0, parts=2, bounds=(0, 2), grads=one, counted=[]), reduced=False
        )
        await inbox.put(
            3, 9, Part(attempt=1, part=0, parts=3, bounds=(0, 3), grads=one, counted=[]), reduced=False
        )
        assert inbox.arrived(3, 1, {7: 0, 8: 0, 9: 0}, reduced=False, bounds=bounds) == {7}
        assert inbox.arrived(3, 1, {7: 0}, reduced=True, bounds=bounds) == set()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(inbox.wait_for(3, 1, {7: 0, 8: 0}, reduced=False, bounds=bounds), 0.05)
        got = await asyncio.wait_for(inbox.wait_for(3, 1, {7: 0}, reduced=False, bounds=bounds), 1.0)
        assert got[7].counted == ["a"]
        inbox.drop_through(3)
        assert inbox.arrived(3, 1, {7: 0}, reduced=False, bounds=bounds) == set()

    asyncio.run(scenario())


async def _serve(
    servers: dict[int, StageServer], codec: CompressionName
) -> tuple[dict[int, Member], dict[int, str]]:
    run = run_spec(codec).model_copy(update={"num_stages": 2})
    limits = frame_limits(
        get_preset(run.model_preset), num_stages=2, microbatch_size=4, seq_len=run.seq_len, optimizer="adamw"
    )
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
    return members, addresses


async def _close(members: dict[int, Member]) -> None:
    for m in members.values():
        await m.pool.close()
        assert m.frame_server is not None
        await m.frame_server.stop()


def _trained_servers(
    ids: tuple[int, ...], codec: CompressionName, faults: dict[int, Fault] | None = None
) -> dict[int, StageServer]:
    run = run_spec(codec).model_copy(update={"num_stages": 2})
    servers = {p: make_stage_server(p, 0, run, (faults or {}).get(p)) for p in ids}
    for p, server in servers.items():
        # Each member trains a different microbatch: their sums differ.
        call(
            server,
            signer_for(TRAINER),
            stage_call("backward", 0, f"mb-{p}", check=False),
            inputs_for(0, "backward"),
        )
    return servers


def _average(
    servers: dict[int, StageServer],
    codec: CompressionName,
    listed: list[int],
    gone: str | None = None,
    weights: list[int] | None = None,
) -> dict[int, tuple[RecordedControl, torch.Tensor | None]]:
    """Every live member of `servers` averages one butterfly round among `listed` (and a member at
    `gone` that nobody answers for, if given); each member's recorded channel and the sum it holds."""

    async def scenario() -> dict[int, tuple[RecordedControl, torch.Tensor | None]]:
        members, addresses = await _serve(servers, codec)
        averagers = {p: Averager(m) for p, m in members.items()}  # type: ignore[arg-type]
        group = [endpoint(p, addresses[p]) for p in listed]
        if gone is not None:
            group.append(PeerEndpoint(peer_id=99, address=gone, stage=0))
        barrier = StepBarrier(
            step=0,
            attempt=0,
            stage=0,
            group=group,
            push_timeout_s=3.0,
            pattern="butterfly",
            part_weights=weights,
        )
        try:
            for m in members.values():
                m.pool.learn(group)
            await asyncio.gather(*(averagers[p].average(barrier) for p in listed))
            check = CheckParts(step=0, attempt=0, stage=0, seed=12345)
            await asyncio.gather(*(averagers[p].check_parts(check) for p in listed))
        finally:
            await _close(members)
        held = {p: a._pending_sum.get(0) for p, a in averagers.items()}
        return {p: (members[p].control, None if held[p] is None else held[p][1]) for p in listed}

    try:
        return asyncio.run(scenario())
    finally:
        for server in servers.values():
            server.close()


@pytest.mark.parametrize(
    ("codec", "weights"),
    [
        pytest.param("none", None, id="equal parts"),
        pytest.param("int8", None, id="equal parts, int8"),
        # The barrier lists members in its own order, not by peer id: peer 4 owns the smallest part.
        pytest.param("none", [30, 1, 10], id="weighted parts"),
        pytest.param("int8", [30, 1, 10], id="weighted parts, int8"),
    ],
)
def test_members_of_a_butterfly_round_hold_the_same_sum_and_report_its_parts(
    codec: CompressionName, weights: list[int] | None
) -> None:
    ids = (4, 5, 6)
    servers = _trained_servers(ids, codec)
    own = {p: s.worker.flat_gradients().clone() for p, s in servers.items()}  # type: ignore[union-attr]
    outcome = _average(servers, codec, [6, 4, 5] if weights else list(ids), weights=weights)
    sums = [held for _, held in outcome.values()]
    assert all(s is not None and torch.equal(s, sums[0]) for s in sums), "members hold different bits"
    total = sums[0]
    assert total is not None
    if codec == "none":
        assert torch.equal(total, sum_contributions(own))
    else:
        # Two lossy hops (each part, then each reduced part): near the exact sum, not equal to it.
        exact = sum_contributions(own)
        assert float(torch.linalg.vector_norm(total - exact) / torch.linalg.vector_norm(exact)) < 0.05
    reports = {
        p: [m for m in control.sent if isinstance(m, AveragingDone)] for p, (control, _) in outcome.items()
    }
    assert all(len(r) == 1 for r in reports.values())
    done = {p: r[0] for p, r in reports.items()}
    for report in done.values():
        assert report.contributors == list(ids)
        assert report.counted == ["mb-4", "mb-5", "mb-6"]
        assert report.grad_sum_norm_sq == done[4].grad_sum_norm_sq == pytest.approx(norm_sq(total), rel=1e-9)
    if weights and codec == "none":
        # By peer id the weights are 1, 10, 30: each owner reports the norms of the senders' pieces of
        # the part it summed, and they are the norms of the part cut by those weights.
        bounds = part_bounds(total.numel(), [1, 10, 30])
        assert bounds[0][1] - bounds[0][0] < total.numel() / 30
        for rank, owner in enumerate(ids):
            start, end = bounds[rank]
            for c in done[owner].contributions:
                assert c.norm_sq == pytest.approx(norm_sq(own[c.peer_id][start:end]), rel=1e-9)
    # The part check passes on what honest members handled.
    checks = _part_reports(outcome)
    assert judge_parts(list(ids), checks, CODEC_ERROR[codec]).clean
    # Each member reports every sender's part of its own: the parts' squared norms add up to the whole's.
    for sender in ids:
        parts = [c.norm_sq for report in done.values() for c in report.contributions if c.peer_id == sender]
        assert len(parts) == len(ids)
        if codec == "none":
            assert sum(parts) == pytest.approx(norm_sq(own[sender]), rel=1e-9)
        counted = {tuple(c.counted) for r in done.values() for c in r.contributions if c.peer_id == sender}
        assert counted == {(f"mb-{sender}",)}


def test_a_member_gone_from_a_butterfly_round_is_the_one_named(unused_address: str) -> None:
    ids = (4, 5)
    outcome = _average(_trained_servers(ids, "none"), "none", list(ids), gone=unused_address)
    for control, held in outcome.values():
        assert held is None, "a round with a member missing holds no sum"
        named = [m for m in control.sent if isinstance(m, PeerUnreachable)]
        # The live members' parts came in; only the gone one's own part is missing.
        assert [m.peer_id for m in named] == [99]
        assert not [m for m in control.sent if isinstance(m, AveragingDone)]


@pytest.fixture
def unused_address() -> str:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        return f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize(
    ("fields", "size", "error"),
    [
        pytest.param(
            {"part": 1, "parts": 3, "bounds": (0, 3)}, 7, "grads has shape", id="a part cut for another size"
        ),
        pytest.param(
            {"part": 1, "parts": 3, "bounds": (0, 10**12)}, 7, "lies outside", id="a part beyond the stage"
        ),
        pytest.param(
            {"part": 3, "parts": 3, "bounds": (0, 7)}, 7, "part 3 of 3", id="a part outside its round"
        ),
        pytest.param({"part": 1, "parts": 3}, 7, "has no bounds", id="a part without bounds"),
        pytest.param({"parts": 3}, 7, "a whole sum has no parts", id="parts without a part"),
    ],
)
def test_a_malformed_part_is_refused_and_nothing_is_kept(
    fields: dict[str, object], size: int, error: str
) -> None:
    run = run_spec("none").model_copy(update={"num_stages": 2})
    server = make_stage_server(4, 0, run)
    try:
        header = {
            "run_id": run.run_id,
            "sender": 5,
            "stage": 0,
            "step": 0,
            "attempt": 0,
            "counted": [],
            **fields,
        }
        # What a hostile member would send: any header, whatever the honest sender's model allows.
        push = PushGrads.model_construct(**header)
        frame, _ = assemble_call(push, encode_payload({"grads": torch.zeros(size)}, "none"), signer_for(5), 4)
        reply = open_frame(asyncio.run(server.handle(frame)), max_bytes=LIMIT).header
        assert isinstance(reply, ErrorReply) and error in reply.error
        assert server.parts.arrived(0, 0, {5: 1}, reduced=False, bounds=[(0, 3), (3, 7), (7, 9)]) == set()
    finally:
        server.close()


def _part_reports(outcome: dict[int, tuple[RecordedControl, torch.Tensor | None]]) -> dict[int, PartReport]:
    reports = {}
    for p, (control, _) in outcome.items():
        (checked,) = [m for m in control.sent if isinstance(m, PartsChecked)]
        reports[p] = PartReport(**checked.model_dump(include=set(PartReport.__dataclass_fields__)))
    return reports


@pytest.mark.parametrize("codec", ["none", "int8"])
def test_an_owner_that_sends_everyone_a_wrong_sum_of_its_part_is_convicted_by_the_part_check(
    codec: CompressionName,
) -> None:
    """Peer 5 (`--fault part:1.5`) sums its part and sends everyone one and a half times it: the
    members agree on what they hold (the norms match), and only the part check tells."""
    ids = (4, 5, 6)
    outcome = _average(_trained_servers(ids, codec, {5: Fault(kind="part", amount=1.5)}), codec, list(ids))
    reports = [m for control, _ in outcome.values() for m in control.sent if isinstance(m, AveragingDone)]
    assert len({r.grad_sum_norm_sq for r in reports}) == 1
    verdict = judge_parts(list(ids), _part_reports(outcome), CODEC_ERROR[codec])
    assert verdict.convicted.keys() == {5} and not verdict.disputes
