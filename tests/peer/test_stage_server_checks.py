"""Spot checks served by a real StageServer: a check accumulates nothing, a referee finds the liar."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
import torch

from peer.faults import Fault
from peer.frame_auth import FrameSigner, SenderVerifier
from peer.frame_headers import (
    ArbitrateCall,
    ArbitrateReply,
    BackwardCall,
    ErrorReply,
    ForwardBackwardCall,
    ForwardCall,
    StageCall,
)
from peer.frames import assemble_call, encode_payload, open_reply
from peer.model import build_stage
from peer.spot_checks import Evidence, tolerance
from peer.stage_server import StageServer
from peer.stage_worker import StageWorker
from swarmhub.presets import get_preset
from swarmhub.tickets import issue_ticket, run_ticket_key, run_ticket_public_key
from swarmhub.wire import ArbitrationVerdict, CompressionName, RunSpec
from tests.run_specs import run_spec as any_run

torch.set_num_threads(1)

RUN, TRAINER, CHECKED, CHECKER, REFEREE = 3, 9, 4, 5, 6
RUN_SECRET = "the run's data key, known only to the coordinator"
LIMIT = 1 << 22
SEQ, SAMPLES, D_MODEL, SEED = 16, 2, 64, 1
VOCAB_SIZE = get_preset("tiny").vocab_size


def run_spec(compression: CompressionName = "none") -> RunSpec:
    return any_run(run_id=RUN, seq_len=SEQ, compression=compression, seed=SEED)


def signer_for(peer_id: int) -> FrameSigner:
    signer = FrameSigner()
    signer.take(
        issue_ticket(
            run_ticket_key(RUN_SECRET),
            run_id=RUN,
            peer_id=peer_id,
            public_key=signer.public_key,
            now=time.time(),
        )
    )
    return signer


def verifier_of(peer_id: int) -> SenderVerifier:
    v = SenderVerifier(run_id=RUN, peer_id=peer_id)
    v.trust(run_ticket_public_key(RUN_SECRET))
    v.observe(time.time(), [])
    return v


def stage_server(peer_id: int, stage: int, run: RunSpec, fault: Fault | None = None) -> StageServer:
    server = StageServer(
        peer_id=peer_id,
        run=run,
        signer=signer_for(peer_id),
        d_model=D_MODEL,
        slowdown=1.0,
        max_bytes=LIMIT,
        fault=fault,
    )
    server.verifier.trust(run_ticket_public_key(RUN_SECRET))
    server.verifier.observe(time.time(), [])
    # Every peer of a stage starts from the run's seeded weights: honest peers compute the same.
    module = build_stage(get_preset(run.model_preset), stage, run.num_stages, run.seed)
    server.worker = StageWorker(module, run, step=0, device=torch.device("cpu"))
    return server


def inputs_for(stage: int, kind: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    x = (
        torch.randint(0, VOCAB_SIZE, (SAMPLES, SEQ), generator=g)
        if stage == 0
        else torch.randn(SAMPLES, SEQ, D_MODEL, generator=g)
    )
    if kind == "backward":
        return {"x": x, "grad": torch.randn(SAMPLES, SEQ, D_MODEL, generator=g)}
    if kind == "forward_backward":
        return {"x": x, "targets": torch.randint(0, VOCAB_SIZE, (SAMPLES, SEQ), generator=g)}
    return {"x": x}


CALLS: dict[str, type[StageCall]] = {
    "forward": ForwardCall,
    "backward": BackwardCall,
    "forward_backward": ForwardBackwardCall,
}


def stage_call(kind: str, stage: int, microbatch_id: str, *, check: bool) -> StageCall:
    # timeout_s=0: no deadline, so whether a call is accumulated never depends on how long it took.
    return CALLS[kind](
        run_id=RUN,
        sender=TRAINER,
        stage=stage,
        step=0,
        microbatch_id=microbatch_id,
        samples=SAMPLES,
        timeout_s=0.0,
        check=check,
    )


def call(
    server: StageServer, trainer: FrameSigner, header: StageCall, tensors: dict[str, torch.Tensor]
) -> tuple[bytes, bytes]:
    """The trainer's signed call to `server` and the server's raw answer (checked to be its signed reply)."""
    data, sent = assemble_call(
        header, encode_payload(tensors, server.run.compression), trainer, server.peer_id
    )
    answer = asyncio.run(server.handle(data))
    reply, _ = open_reply(answer, max_bytes=LIMIT, verifier=verifier_of(TRAINER), call=sent)
    assert not isinstance(reply, ErrorReply), reply.error
    return data, answer


@pytest.mark.parametrize(("kind", "stage"), [("backward", 0), ("forward_backward", 1)])
def test_a_check_accumulates_nothing_while_an_ordinary_call_does(kind: str, stage: int) -> None:
    server = stage_server(CHECKER, stage, run_spec())
    trainer = signer_for(TRAINER)
    worker = server.worker
    assert worker is not None
    try:
        call(server, trainer, stage_call(kind, stage, "m1", check=True), inputs_for(stage, kind))
        assert worker.accumulated == {}
        assert server.samples_done == 0
        assert not worker.flat_gradients().any()
        call(server, trainer, stage_call(kind, stage, "m1", check=False), inputs_for(stage, kind))
        assert worker.accumulated == {"m1": SAMPLES}
        assert server.samples_done == SAMPLES
        assert worker.flat_gradients().any()
    finally:
        server.close()


@pytest.mark.parametrize("compression", ["none", "int8"])
def test_the_referee_agrees_with_the_honest_peer(compression: CompressionName) -> None:
    run = run_spec(compression)
    torch.manual_seed(0)
    liar = stage_server(CHECKED, 0, run, Fault(kind="noise", amount=1.0, rng=random.Random(0)))
    honest = stage_server(CHECKER, 0, run)
    referee = stage_server(REFEREE, 0, run)
    verdicts: list[ArbitrationVerdict] = []

    async def report(verdict: ArbitrationVerdict) -> None:
        verdicts.append(verdict)

    referee.report = report
    trainer = signer_for(TRAINER)
    inputs = inputs_for(0, "forward")
    try:
        call_checked, reply_checked = call(liar, trainer, stage_call("forward", 0, "m1", check=False), inputs)
        call_checker, reply_checker = call(
            honest, trainer, stage_call("forward", 0, "m1", check=True), inputs
        )
        evidence = Evidence(
            call_checked=call_checked,
            reply_checked=reply_checked,
            call_checker=call_checker,
            reply_checker=reply_checker,
        )
        header = ArbitrateCall(
            run_id=RUN, sender=TRAINER, stage=0, step=0, case_id=17, checked=CHECKED, checker=CHECKER
        )
        data, sent = assemble_call(header, encode_payload(evidence.tensors()), trainer, REFEREE)
        reply, _ = open_reply(
            asyncio.run(referee.handle(data)), max_bytes=LIMIT, verifier=verifier_of(TRAINER), call=sent
        )
        assert isinstance(reply, ArbitrateReply), reply
        assert (reply.agrees_with_checked, reply.agrees_with_checker) == (False, True)
        [verdict] = verdicts
        assert verdict.valid and verdict.case_id == 17
        assert (verdict.agrees_with_checked, verdict.agrees_with_checker) == (False, True)
        assert verdict.tolerance == tolerance(compression)
        assert verdict.discrepancy_checked > 10 * verdict.tolerance
        assert verdict.discrepancy_checker <= verdict.tolerance
        # A referee's own check accumulates nothing either.
        assert referee.worker is not None and referee.worker.accumulated == {}
        assert referee.samples_done == 0
    finally:
        for server in (liar, honest, referee):
            server.close()


def test_evidence_that_does_not_hold_is_reported_invalid() -> None:
    run = run_spec()
    honest = stage_server(CHECKER, 0, run)
    other = stage_server(CHECKED, 0, run)
    referee = stage_server(REFEREE, 0, run)
    verdicts: list[ArbitrationVerdict] = []

    async def report(verdict: ArbitrationVerdict) -> None:
        verdicts.append(verdict)

    referee.report = report
    trainer = signer_for(TRAINER)
    try:
        inputs = inputs_for(0, "forward")
        call_checked, reply_checked = call(
            other, trainer, stage_call("forward", 0, "m1", check=False), inputs
        )
        shifted = {"x": (inputs["x"] + 1) % VOCAB_SIZE}
        call_checker, reply_checker = call(
            honest, trainer, stage_call("forward", 0, "m1", check=True), shifted
        )
        evidence = Evidence(
            call_checked=call_checked,
            reply_checked=reply_checked,
            call_checker=call_checker,
            reply_checker=reply_checker,
        )
        header = ArbitrateCall(
            run_id=RUN, sender=TRAINER, stage=0, step=0, case_id=18, checked=CHECKED, checker=CHECKER
        )
        data, sent = assemble_call(header, encode_payload(evidence.tensors()), trainer, REFEREE)
        reply, _ = open_reply(
            asyncio.run(referee.handle(data)), max_bytes=LIMIT, verifier=verifier_of(TRAINER), call=sent
        )
        assert isinstance(reply, ErrorReply) and "different inputs" in reply.error
        [verdict] = verdicts
        assert not verdict.valid and verdict.case_id == 18 and "different inputs" in verdict.detail
    finally:
        for server in (honest, other, referee):
            server.close()
