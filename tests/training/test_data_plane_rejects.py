"""A peer's data-plane server refuses hostile input and keeps serving the swarm.

A real coordinator and two real peers (one per stage) train; the test then talks to the last
stage's data-plane port directly with `websockets`, sending garbage, broken frames, forged
credentials, and authenticated frames that are still malformed. Each gets an error frame saying
what was wrong (or, for an oversized or text message, a clean close with the right code); the peer
stays up, nothing it was sent reaches the books, and training goes on.
"""

from __future__ import annotations

import math
import random
import sqlite3
import struct
from typing import Any

import pytest
import torch
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from peer.frames import PREFIX_SIZE, decode_frame, encode_frame, make_credential
from peer.model import config_for
from peer.runtime import max_frame_bytes
from swarmhub.local_swarm import LocalSwarm
from swarmhub.wire import RunSpec
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
    return header.kind, header.error or ""


def _close_code(address: str, data: bytes | str) -> int | None:
    """Send one message on a fresh connection; the close code the peer answered it with."""
    with connect(f"ws://{address}", max_size=None, compression=None) as ws:
        try:
            ws.send(data)
            reply = ws.recv(timeout=60)
        except ConnectionClosed as exc:
            return exc.rcvd.code if exc.rcvd is not None else None
        raise AssertionError(f"the peer answered instead of closing: {reply[:200]!r}")


def _attack(address: str, spec: RunSpec, data_key: str, sender: int, step: int) -> dict[str, Any]:
    d_model = config_for(spec.model_preset).d_model
    mb, seq = spec.microbatch_size, spec.seq_len
    credential = make_credential(data_key, sender)
    x = torch.zeros(mb, seq, d_model)
    targets = torch.zeros(mb, seq, dtype=torch.int64)

    def frame(**overrides: Any) -> bytes:
        fields: dict[str, Any] = {
            "kind": "forward_backward",
            "run_id": spec.run_id,
            "stage": spec.num_stages - 1,
            "microbatch_id": "probe",
            "sender": sender,
            "credential": credential,
            "step": step,
            "tensors": {"x": x, "targets": targets},
            "codec": "none",
            "info": {"samples": mb, "timeout_s": 60.0},
        }
        fields.update(overrides)
        return encode_frame(**fields)

    valid = frame()
    # NaN cannot be encoded (encode_frame refuses it): patch the first float32 of x in the payload.
    payload_at = len(valid) - (x.numel() * 4 + targets.numel() * 8)
    with_nan = bytearray(valid)
    with_nan[payload_at : payload_at + 4] = struct.pack("<f", math.nan)

    cases: dict[str, bytes] = {
        "random bytes": random.Random(0).randbytes(4096),
        "bad magic": b"XXXX" + valid[4:],
        "truncated header": valid[: PREFIX_SIZE + 20],
        "truncated payload": valid[:-1000],
        "forged credential": frame(credential=make_credential("not-the-run-key", sender)),
        "credential of another peer": frame(credential=make_credential(data_key, sender + 1000)),
        "another run": frame(run_id=spec.run_id + 1),
        # Authenticated, but malformed:
        "wrong tensor shape": frame(tensors={"x": torch.zeros(mb, seq, d_model // 2), "targets": targets}),
        "NaN in an activation": bytes(with_nan),
        "missing tensor": frame(tensors={"x": x}),
        "tokens out of vocabulary": frame(tensors={"x": x, "targets": targets + 1_000_000}),
        "too many samples": frame(info={"samples": mb + 1, "timeout_s": 60.0}),
        "a step this stage does not hold": frame(step=step + 1000),
        "a kind peers do not serve": frame(kind="result"),
    }
    replies: dict[str, tuple[str, str]] = {}
    # All on one connection: a refused frame does not cost the connection either.
    with connect(f"ws://{address}", max_size=None, compression=None) as ws:
        for name, data in cases.items():
            replies[name] = _ask(ws, data)
        # Still serving real requests on the same connection: the stage's state, authenticated.
        fetch = encode_frame(
            kind="fetch_state",
            run_id=spec.run_id,
            stage=spec.num_stages - 1,
            microbatch_id="",
            sender=sender,
            credential=credential,
            step=step,
        )
        ws.send(fetch)
        state_reply = ws.recv(timeout=60)
    assert isinstance(state_reply, bytes)
    state_header, state = decode_frame(state_reply, max_bytes=REPLY_LIMIT)
    return {
        "replies": replies,
        "state": (state_header.kind, sorted(state)[:3], len(state)),
        "oversized": _close_code(address, b"\0" * (max_frame_bytes(spec) + 1)),
        "text": _close_code(address, "hello, stage"),
    }


EXPECTED = {
    "random bytes": "bad magic",
    "bad magic": "bad magic",
    "truncated header": "truncated",
    "truncated payload": "payload is",
    "forged credential": "is not valid for this run",
    "credential of another peer": "is not valid for this run",
    "another run": "for run {run_id_plus_1}",
    "wrong tensor shape": "x has shape",
    "NaN in an activation": "NaN or Inf",
    "missing tensor": "lacks tensor 'targets'",
    "tokens out of vocabulary": "outside 0..",
    "too many samples": "samples must be an integer",
    "a step this stage does not hold": "call is for step {step_plus_1000}",
    "a kind peers do not serve": "does not serve 'result'",
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
        with sqlite3.connect(swarm.workdir / "swarmhub.sqlite") as db:
            (data_key,) = db.execute("SELECT data_key FROM runs WHERE id = ?", (run_id,)).fetchone()
        step = swarm.run_detail(run_id)["current_step"]

        result = _attack(target["address"], spec, data_key, sender["id"], step)

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
    assert kind == "result" and count > 0 and all(n.startswith("model.") for n in names), result["state"]
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
