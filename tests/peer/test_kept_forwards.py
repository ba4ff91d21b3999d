"""Forwards kept for their backward: the same gradients as recomputing, a bound on memory, a clear
answer when gone, and spot checks that still reach the referee with the input."""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

from peer.activation_store import ActivationStore, KeptForward
from peer.faults import Fault
from peer.frame_auth import FrameSigner
from peer.frame_headers import ArbitrateCall, ArbitrateReply, BackwardCall, ErrorReply, ForwardCall
from peer.frames import assemble_call, encode_payload, open_reply
from peer.model import build_stage
from peer.spot_checks import Evidence
from peer.stage_server import StageServer
from peer.stage_worker import NOT_KEPT, NotKept, StageError, StageWorker
from swarmhub.presets import get_preset
from swarmhub.wire import ArbitrationVerdict, RunSpec
from tests.peer.test_stage_server_checks import (
    CHECKED,
    CHECKER,
    LIMIT,
    REFEREE,
    RUN,
    SAMPLES,
    TRAINER,
    inputs_for,
    run_spec,
    signer_for,
    stage_server,
    verifier_of,
)

THREE_STAGES = run_spec().model_copy(update={"num_stages": 3})


def entry(step: int, nbytes: int) -> KeptForward:
    t = torch.zeros(1)
    return KeptForward(step=step, inputs=t, output=t, nbytes=nbytes)


def test_store_evicts_oldest_first_within_its_bound() -> None:
    store = ActivationStore(limit_bytes=100)
    assert store.keep("a", entry(0, 40)) and store.keep("b", entry(0, 40))
    assert store.keep("c", entry(0, 40))
    tally = store.tally()
    assert (tally.entries, tally.bytes, tally.evictions, tally.limit_bytes) == (2, 80, 1, 100)
    assert store.take("a", 0) is None
    assert store.take("b", 0) is not None and store.take("c", 0) is not None
    assert (store.hits, store.misses, store.tally().bytes) == (2, 1, 0)


def test_store_refuses_what_alone_exceeds_the_bound_and_another_steps_entry() -> None:
    store = ActivationStore(limit_bytes=10)
    assert not store.keep("big", entry(0, 11))
    assert store.keep("m", entry(0, 5))
    assert store.take("m", 1) is None
    assert store.tally().entries == 0


def worker(stage: int, run: RunSpec, limit: int = 1 << 30) -> StageWorker:
    module = build_stage(get_preset(run.model_preset), stage, run.num_stages, run.seed)
    return StageWorker(module, run, step=0, device=torch.device("cpu"), kept=ActivationStore(limit))


@pytest.mark.parametrize("stage", [0, 1])
def test_a_kept_backward_computes_exactly_what_a_recomputing_one_does(stage: int) -> None:
    kept, recomputing = worker(stage, THREE_STAGES), worker(stage, THREE_STAGES)
    tensors = inputs_for(stage, "backward")
    y_kept = kept.forward(0, tensors["x"], keep="m1")
    y_plain = recomputing.forward(0, tensors["x"])
    assert torch.equal(y_kept, y_plain)
    assert kept.kept.tally().entries == 1 and kept.kept.tally().bytes > 0
    grad_kept = kept.backward_kept(0, "m1", SAMPLES, tensors["grad"])
    grad_plain = recomputing.backward(0, "m1", SAMPLES, tensors["x"], tensors["grad"])
    if stage == 0:
        assert grad_kept is None and grad_plain is None
    else:
        assert grad_kept is not None and grad_plain is not None and torch.equal(grad_kept, grad_plain)
    assert torch.equal(kept.flat_gradients(), recomputing.flat_gradients())
    assert kept.kept.tally().entries == 0


def test_nothing_is_kept_across_a_step_or_without_room() -> None:
    w = worker(1, THREE_STAGES)
    tensors = inputs_for(1, "backward")
    w.forward(0, tensors["x"], keep="m1")
    w.apply_step(torch.zeros(w.parameter_count), samples=0, learning_rate=1e-3, grad_scale=1.0)
    with pytest.raises(NotKept, match=NOT_KEPT):
        w.backward_kept(1, "m1", SAMPLES, tensors["grad"])
    tight = worker(1, THREE_STAGES, limit=1024)
    tight.forward(0, tensors["x"], keep="m1")
    assert tight.kept.tally().entries == 0
    with pytest.raises(NotKept):
        tight.backward_kept(0, "m1", SAMPLES, tensors["grad"])


def server(peer_id: int, stage: int, fault: Fault | None = None) -> StageServer:
    s = stage_server(peer_id, stage, THREE_STAGES, fault)
    s.kept.limit_bytes = 1 << 30
    assert s.worker is not None
    s.worker.kept = s.kept
    return s


def header(kind: type[ForwardCall] | type[BackwardCall], microbatch_id: str = "m1", **fields: bool):
    return kind(
        run_id=RUN,
        sender=TRAINER,
        stage=1,
        step=0,
        microbatch_id=microbatch_id,
        samples=SAMPLES,
        timeout_s=0.0,
        **fields,
    )


def exchange(s: StageServer, call, tensors: dict[str, torch.Tensor], trainer: FrameSigner):
    """The trainer's signed call to `s`, the reply and its tensors."""
    data, sent = assemble_call(call, encode_payload(tensors, s.run.compression), trainer, s.peer_id)
    reply, out = open_reply(
        asyncio.run(s.handle(data)), max_bytes=LIMIT, verifier=verifier_of(TRAINER), call=sent
    )
    return data, reply, out


def test_a_server_answers_a_cached_backward_from_its_kept_forward_and_says_when_it_has_none() -> None:
    keeper, other = server(CHECKED, 1), server(CHECKER, 1)
    tensors = inputs_for(1, "backward")
    # Tickets expire: each test signs with a fresh one.
    trainer = signer_for(TRAINER)
    try:
        _, reply, _ = exchange(keeper, header(BackwardCall, cached=True), {"grad": tensors["grad"]}, trainer)
        assert isinstance(reply, ErrorReply) and reply.error.startswith(NOT_KEPT)
        _, reply, _ = exchange(
            keeper, header(ForwardCall, check=True, keep=True), {"x": tensors["x"]}, trainer
        )
        assert keeper.kept.tally().entries == 0, "a spot check keeps nothing"
        exchange(keeper, header(ForwardCall, keep=True), {"x": tensors["x"]}, trainer)
        _, reply, kept_out = exchange(
            keeper, header(BackwardCall, cached=True), {"grad": tensors["grad"]}, trainer
        )
        _, _, full_out = exchange(other, header(BackwardCall), tensors, trainer)
        assert reply.kind == "backward_reply" and reply.compute_s > 0
        assert torch.equal(kept_out["grad_x"], full_out["grad_x"])
        assert keeper.kept.tally().hits == 1 and keeper.kept.tally().misses == 1
        assert keeper.compute_seconds > 0
    finally:
        keeper.close()
        other.close()


def test_the_referee_judges_a_cached_backward_from_the_forward_that_carried_its_input() -> None:
    liar = server(CHECKED, 1, Fault(kind="noise", amount=1.0, rng=random.Random(0)))
    honest, referee = server(CHECKER, 1), server(REFEREE, 1)
    verdicts: list[ArbitrationVerdict] = []

    async def report(verdict: ArbitrationVerdict) -> None:
        verdicts.append(verdict)

    referee.report = report
    tensors = inputs_for(1, "backward")
    trainer = signer_for(TRAINER)
    try:
        forward_frame, _, _ = exchange(liar, header(ForwardCall, keep=True), {"x": tensors["x"]}, trainer)
        checked_call, _ = assemble_call(
            header(BackwardCall, cached=True), encode_payload({"grad": tensors["grad"]}), trainer, CHECKED
        )
        checked_reply = asyncio.run(liar.handle(checked_call))
        data, _ = assemble_call(header(BackwardCall, check=True), encode_payload(tensors), trainer, CHECKER)
        checker_reply = asyncio.run(honest.handle(data))

        def arbitrate(forward: bytes) -> object:
            evidence = Evidence(
                call_checked=checked_call,
                reply_checked=checked_reply,
                call_checker=data,
                reply_checker=checker_reply,
                forward_checked=forward,
            )
            call = ArbitrateCall(
                run_id=RUN, sender=TRAINER, stage=1, step=0, case_id=7, checked=CHECKED, checker=CHECKER
            )
            frame, arb_sent = assemble_call(call, encode_payload(evidence.tensors()), trainer, REFEREE)
            reply, _ = open_reply(
                asyncio.run(referee.handle(frame)),
                max_bytes=LIMIT,
                verifier=verifier_of(TRAINER),
                call=arb_sent,
            )
            return reply

        reply = arbitrate(forward_frame)
        assert isinstance(reply, ArbitrateReply)
        assert (reply.agrees_with_checked, reply.agrees_with_checker) == (False, True)
        other_forward, _, _ = exchange(
            liar, header(ForwardCall, "m2", keep=True), {"x": tensors["x"]}, trainer
        )
        assert isinstance(arbitrate(other_forward), ErrorReply)
        assert [v.valid for v in verdicts] == [True, False]
    finally:
        for s in (liar, honest, referee):
            s.close()


def test_a_call_served_in_process_answers_what_the_same_call_over_frames_does() -> None:
    """The trainer's calls to its own peer skip the frames, not the stage: the same outputs, the same
    keeping and counting, and the same refusals (raised instead of framed)."""
    local, remote = server(CHECKED, 1), server(CHECKER, 1)
    tensors = inputs_for(1, "backward")
    trainer = signer_for(TRAINER)
    try:
        with pytest.raises(NotKept):
            asyncio.run(local.serve_local(header(BackwardCall, cached=True), {"grad": tensors["grad"]}))
        reply, y = asyncio.run(local.serve_local(header(ForwardCall, keep=True), {"x": tensors["x"]}))
        _, framed_reply, framed_y = exchange(
            remote, header(ForwardCall, keep=True), {"x": tensors["x"]}, trainer
        )
        assert reply.kind == framed_reply.kind == "forward_reply" and reply.sender == CHECKED
        assert torch.equal(y["y"], framed_y["y"])
        reply, grads = asyncio.run(
            local.serve_local(header(BackwardCall, cached=True), {"grad": tensors["grad"]})
        )
        _, _, framed_grads = exchange(
            remote, header(BackwardCall, cached=True), {"grad": tensors["grad"]}, trainer
        )
        assert reply.kind == "backward_reply" and reply.compute_s > 0
        assert torch.equal(grads["grad_x"], framed_grads["grad_x"])
        assert local.samples_done == remote.samples_done == 2 * SAMPLES
        assert local.kept.tally().hits == 1
        assert local.worker is not None and remote.worker is not None
        assert torch.equal(local.worker.flat_gradients(), remote.worker.flat_gradients())
        assert local.worker.accumulated == remote.worker.accumulated == {"m1": SAMPLES}
        wrong_stage = header(ForwardCall).model_copy(update={"stage": 2})
        with pytest.raises(StageError, match="serves stage 1"):
            asyncio.run(local.serve_local(wrong_stage, {"x": tensors["x"]}))
    finally:
        local.close()
        remote.close()
