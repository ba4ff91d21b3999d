"""A first stage refuses token ids outside its run's vocabulary, whatever the preset's token size."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from peer.frame_auth import FrameSigner, SenderVerifier
from peer.frame_headers import ErrorReply, ForwardCall, ForwardReply
from peer.frames import assemble_call, encode_payload, open_reply
from peer.model import build_stage
from peer.stage_server import StageServer
from peer.stage_worker import StageWorker
from swarmhub.presets import get_preset
from swarmhub.tickets import issue_ticket, run_ticket_key, run_ticket_public_key
from swarmhub.wire import RunSpec

torch.set_num_threads(1)

RUN, TRAINER, SERVER = 3, 9, 4
RUN_SECRET = "the run's data key"
LIMIT = 1 << 24
SEQ, SAMPLES = 8, 2


def signer_for(peer_id: int) -> FrameSigner:
    signer = FrameSigner()
    key = run_ticket_key(RUN_SECRET)
    signer.take(issue_ticket(key, run_id=RUN, peer_id=peer_id, public_key=signer.public_key, now=time.time()))
    return signer


def first_stage_server(preset_name: str) -> StageServer:
    preset = get_preset(preset_name)
    run = RunSpec(
        run_id=RUN,
        name="t",
        model_preset=preset_name,
        dataset="python-stdlib",
        num_stages=2,
        target_batch_size=4,
        microbatch_size=SAMPLES,
        seq_len=SEQ,
        optimizer="adamw",
        learning_rate=1e-3,
        warmup_steps=0,
        weight_decay=0.0,
        compression="none",
    )
    server = StageServer(
        peer_id=SERVER,
        run=run,
        signer=signer_for(SERVER),
        d_model=preset.d_model,
        slowdown=1.0,
        max_bytes=LIMIT,
    )
    server.verifier.trust(run_ticket_public_key(RUN_SECRET))
    server.verifier.observe(time.time(), [])
    server.worker = StageWorker(
        build_stage(preset, 0, run.num_stages, run.seed), run, step=0, device=torch.device("cpu")
    )
    return server


def forward(server: StageServer, top_id: int, microbatch_id: str) -> ErrorReply | ForwardReply:
    """A forward call whose ids run up to `top_id`; the server's (checked, signed) reply."""
    ids = torch.zeros(SAMPLES, SEQ, dtype=torch.int64)
    ids[-1, -1] = top_id
    header = ForwardCall(
        run_id=RUN,
        sender=TRAINER,
        stage=0,
        step=0,
        microbatch_id=microbatch_id,
        samples=SAMPLES,
        timeout_s=0.0,
    )
    data, sent = assemble_call(header, encode_payload({"x": ids}), signer_for(TRAINER), SERVER)
    verifier = SenderVerifier(run_id=RUN, peer_id=TRAINER)
    verifier.trust(run_ticket_public_key(RUN_SECRET))
    verifier.observe(time.time(), [])
    reply, _ = open_reply(asyncio.run(server.handle(data)), max_bytes=LIMIT, verifier=verifier, call=sent)
    assert isinstance(reply, (ErrorReply, ForwardReply)), reply
    return reply


@pytest.mark.parametrize(("preset", "vocab"), [("tiny", 256), ("swarm-ref", 65536)])
def test_ids_up_to_the_vocabulary_pass_and_beyond_it_are_refused(preset: str, vocab: int) -> None:
    server = first_stage_server(preset)
    try:
        assert isinstance(forward(server, vocab - 1, "last id"), ForwardReply)
        refused = forward(server, vocab, "one past")
        assert isinstance(refused, ErrorReply)
        assert f"x holds token ids outside 0..{vocab - 1}" in refused.error
    finally:
        server.close()
