"""A peer's data-plane server refuses hostile input and keeps serving the swarm.

A real coordinator and two real peers (one per stage) train; the test then talks to the last
stage's data-plane port directly with `websockets`, sending garbage, broken frames, forged
tickets, frames posing as another peer, tampered, unsigned, misaddressed and replayed frames, and
authenticated frames that are still malformed. Each gets an error frame saying what was wrong (or,
for an oversized or text message, a clean close with the right code); the peer stays up, nothing
it was sent reaches the books, and training goes on.
"""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import pytest
import torch
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from launch.local_swarm import LocalSwarm
from peer.frame_headers import ErrorReply, FetchState, ForwardBackwardCall, LossReply
from peer.frames import PREFIX_SIZE, assemble, decode_frame, encode_frame, encode_payload
from peer.joined import run_frame_limits
from swarmhub.presets import get_preset
from swarmhub.wire import RunSpec
from tests.ticket_helpers import minted_signer, run_data_key
from tests.training.swarm_helpers import DEMO_RUN, WAIT_S, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPLY_LIMIT = 1 << 26


def _run_spec(detail: dict[str, Any]) -> RunSpec:
    fields = {name: detail[name] for name in RunSpec.model_fields if name != "run_id"}
    return RunSpec(run_id=detail["id"], **fields)


def _ask(ws: ClientConnection, data: bytes) -> tuple[str, str]:
    """Send one message; the reply must be a well-formed frame: its kind and error message."""
    ws.send(data)
    reply = ws.recv(timeout=60)
    assert isinstance(reply, bytes), reply
    header, _ = decode_frame(reply, max_bytes=REPLY_LIMIT)
    return header.kind, header.error if isinstance(header, ErrorReply) else ""


def _close_code(address: str, data: bytes | str) -> int | None:
    """Send one message on a fresh connection; the close code the peer answered it with."""
    with connect(f"ws://{address}", max_size=None, compression=None) as ws:
        try:
            ws.send(data)
            reply = ws.recv(timeout=60)
        except ConnectionClosed as exc:
            return exc.rcvd.code if exc.rcvd is not None else None
        raise AssertionError(f"the peer answered instead of closing: {reply[:200]!r}")


def _attack(
    address: str, spec: RunSpec, data_key: str, sender: int, receiver: int, step: int
) -> dict[str, Any]:
    d_model = get_preset(spec.model_preset).d_model
    mb, seq = spec.microbatch_size, spec.seq_len
    signer = minted_signer(data_key, spec.run_id, sender)
    x = torch.zeros(mb, seq, d_model)
    targets = torch.zeros(mb, seq, dtype=torch.int64)

    def frame(
        tensors: dict[str, torch.Tensor] | None = None,
        signed_by: Any = signer,
        to: int = receiver,
        **overrides: Any,
    ) -> bytes:
        fields: dict[str, Any] = {
            "run_id": spec.run_id,
            "sender": sender,
            "stage": spec.num_stages - 1,
            "step": step,
            "microbatch_id": "probe",
            "samples": mb,
            "timeout_s": 60.0,
        }
        header = ForwardBackwardCall(**{**fields, **overrides})
        tensors = {"x": x, "targets": targets} if tensors is None else tensors
        return encode_frame(header, tensors, signer=signed_by, receiver=to)

    valid = frame()
    # NaN cannot be encoded (encode_frame refuses it): patch the first float32 of x, then sign.
    payload = encode_payload({"x": x, "targets": targets})
    payload.blobs[0] = struct.pack("<f", math.nan) + payload.blobs[0][4:]
    with_nan = assemble(
        ForwardBackwardCall(
            run_id=spec.run_id,
            sender=sender,
            stage=spec.num_stages - 1,
            step=step,
            microbatch_id="probe",
            samples=mb,
            timeout_s=60.0,
        ),
        payload,
        signer,
        receiver,
    )
    tampered = bytearray(frame())
    tampered[-1] ^= 0x01
    stale_step = frame(step=step + 1000)

    cases: dict[str, bytes] = {
        "random bytes": random.Random(0).randbytes(4096),
        "bad magic": b"XXXX" + valid[4:],
        "truncated header": valid[: PREFIX_SIZE + 20],
        "truncated payload": valid[:-1000],
        "forged ticket": frame(signed_by=minted_signer("not-the-run-key", spec.run_id, sender)),
        "posing as another peer": frame(sender=sender + 1000),
        "tampered payload": bytes(tampered),
        "unsigned": encode_frame(
            ForwardBackwardCall.model_validate(
                {
                    "run_id": spec.run_id,
                    "sender": sender,
                    "stage": spec.num_stages - 1,
                    "step": step,
                    "microbatch_id": "probe",
                    "samples": mb,
                    "timeout_s": 60.0,
                }
            ),
            {"x": x, "targets": targets},
        ),
        "addressed to another peer": frame(to=sender),
        "another run": frame(run_id=spec.run_id + 1),
        # Authenticated, but malformed:
        "wrong tensor shape": frame(tensors={"x": torch.zeros(mb, seq, d_model // 2), "targets": targets}),
        "NaN in an activation": bytes(with_nan),
        "missing tensor": frame(tensors={"x": x}),
        "tokens out of vocabulary": frame(tensors={"x": x, "targets": targets + 1_000_000}),
        "too many samples": frame(samples=mb + 1),
        "a step this stage does not hold": stale_step,
        "a replay": stale_step,
        "a kind peers do not serve": encode_frame(
            LossReply(run_id=spec.run_id, sender=sender, loss=1.0), signer=signer, receiver=receiver
        ),
    }
    replies: dict[str, tuple[str, str]] = {}
    # All on one connection: a refused frame does not cost the connection either.
    with connect(f"ws://{address}", max_size=None, compression=None) as ws:
        for name, data in cases.items():
            replies[name] = _ask(ws, data)
        # Still serving real requests on the same connection: the stage's state, authenticated.
        fetch = encode_frame(
            FetchState(run_id=spec.run_id, sender=sender, stage=spec.num_stages - 1, step=step),
            signer=signer,
            receiver=receiver,
        )
        ws.send(fetch)
        state_reply = ws.recv(timeout=60)
    assert isinstance(state_reply, bytes)
    state_header, state = decode_frame(state_reply, max_bytes=REPLY_LIMIT)
    return {
        "replies": replies,
        "state": (state_header.kind, sorted(state)[:3], len(state)),
        "oversized": _close_code(address, b"\0" * (run_frame_limits(spec).served + 1)),
        "text": _close_code(address, "hello, stage"),
    }


EXPECTED = {
    "random bytes": "bad magic",
    "bad magic": "bad magic",
    "truncated header": "truncated",
    "truncated payload": "payload is",
    "forged ticket": "was not issued by this run's coordinator",
    "posing as another peer": "but the frame says it is from",
    "tampered payload": "frame signature does not match",
    "unsigned": "carries no ticket",
    "addressed to another peer": "is addressed to peer",
    "another run": "for run {run_id_plus_1}",
    "wrong tensor shape": "x has shape",
    "NaN in an activation": "NaN or Inf",
    "missing tensor": "lacks tensor 'targets'",
    "tokens out of vocabulary": "outside 0..",
    "too many samples": "samples must be in 1..",
    "a step this stage does not hold": "call is for step {step_plus_1000}",
    "a replay": "was already received (a replay)",
    "a kind peers do not serve": "does not serve 'forward_backward_reply'",
}


def test_malformed_and_forged_frames_are_refused_and_training_goes_on() -> None:
    swarm = LocalSwarm()
    try:
        swarm.start()
        run = swarm.create_run(name="hostile input", **DEMO_RUN)
        run_id = run["id"]
        for _ in range(2):
            swarm.start_peer()
        try:
            swarm.wait_for_steps(run_id, 3, timeout_s=WAIT_S)
        except (TimeoutError, RuntimeError) as exc:
            raise AssertionError(f"{exc}\n{swarm.logs()}") from None
        spec = _run_spec(swarm.run_detail(run_id))

        def one_per_stage() -> list[dict[str, Any]] | None:
            ps = [p for p in swarm.peer_rows(run_id) if p["state"] == "active"]
            return ps if sorted(p["stage"] for p in ps) == list(range(spec.num_stages)) else None

        peers = wait_until("one active peer per stage", one_per_stage)
        target = next(p for p in peers if p["stage"] == spec.num_stages - 1)
        sender = next(p for p in peers if p["id"] != target["id"])
        data_key = run_data_key(swarm.workdir / "swarmhub.sqlite", run_id)
        step = swarm.run_detail(run_id)["current_step"]

        result = _attack(target["address"], spec, data_key, sender["id"], target["id"], step)

        committed = len(swarm.steps(run_id))
        steps = swarm.wait_for_steps(run_id, committed + 5, timeout_s=WAIT_S)
        alive = [p.alive() for p in swarm.peers]
        final_peers = {p["id"]: p for p in swarm.peer_rows(run_id)}
    finally:
        swarm.stop()

    for name, expected in EXPECTED.items():
        kind, error = result["replies"][name]
        expected = expected.replace("{run_id_plus_1}", str(run_id + 1))
        expected = expected.replace("{step_plus_1000}", str(step + 1000))
        assert kind == "error", (name, kind, error)
        assert expected in error, (name, error)
    kind, names, count = result["state"]
    assert kind == "fetch_state_reply", result["state"]
    assert count > 0 and all(n.startswith("model.") for n in names), result["state"]
    assert result["oversized"] == 1009  # message too big
    assert result["text"] == 1003  # unsupported data: the data plane speaks binary frames

    assert all(alive), alive
    assert final_peers[target["id"]]["state"] == "active"
    # The swarm trained on, and none of the probes reached the books.
    assert len(steps) >= committed + 5
    for row in steps:
        assert row["samples_sent"] == DEMO_RUN["target_batch_size"], row
        assert row["samples_counted"] == [DEMO_RUN["target_batch_size"]] * DEMO_RUN["num_stages"], row
        assert row["samples_lost"] == 0, row
    assert all(math.isfinite(row["loss"]) for row in steps)
