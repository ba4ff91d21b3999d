"""Spot checks: one stage call computed by two peers of the stage, their results compared.

A trainer sends a random share of its stage calls (the run's `spot_check_fraction`) to a second peer
as well, marked as a check so that peer accumulates nothing; the checked peer sees an ordinary call
and cannot tell. Results that disagree beyond the codec's tolerance are a mismatch: the trainer keeps
the four signed frames (two calls, two replies) as evidence, reports the mismatch, and sends the
evidence to the referee the coordinator names, a third peer of the stage. The referee checks every
signature (so nobody can put words in another peer's mouth, `peer/frame_auth.py`) and that both
calls carried the same inputs, computes the call itself and says which result it agrees with.

A backward sent to the peer that kept its forward carries no input (`peer/activation_store.py`), so a
check of it also keeps that signed forward call: the referee takes the input from it. The checked
peer still sees an ordinary cached backward and cannot tell it is checked.

Nothing here does I/O: the trainer (`peer/trainer.py`) and the stage server (`peer/stage_server.py`)
use these parts; the coordinator decides (`server/swarm/verification.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from swarmhub.run_settings import CODEC_ERROR

from .compression import codec_for
from .frame_auth import AuthError, SenderVerifier
from .frame_headers import (
    ArbitrateCall,
    BackwardCall,
    BackwardReply,
    ForwardCall,
    ForwardReply,
    LossReply,
    Reply,
    StageCall,
)
from .frames import FrameError, FrameLimit, OpenedFrame, decode_payload, open_frame

KERNEL_TOLERANCE = 1e-3
"""Relative L2 distance two honest devices may reach on one float32 call: different kernels, thread
counts and summation orders (a GPU's TF32 matmuls among them) stay well inside it."""
EVIDENCE_TENSORS = ("call_checked", "reply_checked", "call_checker", "reply_checker")
KEPT_FORWARD = "forward_checked"
"""The optional fifth evidence frame: the forward call whose kept graph the checked backward used."""


def through_codec(tensors: dict[str, Tensor], codec: str) -> dict[str, Tensor]:
    """`tensors` as their receiver decodes them after `codec`: a referee compares like with like."""
    out = {}
    for name, t in tensors.items():
        c = codec_for(t.dtype, codec)
        out[name] = c.decode(c.encode(t), tuple(t.shape), t.dtype)
    return out


def tolerance(codec: str) -> float:
    """The largest discrepancy two honest results of one call can have under `codec`."""
    return KERNEL_TOLERANCE + 2 * CODEC_ERROR[codec]


@dataclass(frozen=True, kw_only=True)
class Result:
    """What a stage call answered: its tensors (as decoded from the reply) and, last stage, the loss."""

    tensors: dict[str, Tensor]
    loss: float | None = None


def result_of(reply: Reply, tensors: dict[str, Tensor]) -> Result:
    return Result(tensors=tensors, loss=reply.loss if isinstance(reply, LossReply) else None)


def comparable(result: Result) -> bool:
    """Whether a result has anything to compare: the first stage's backward answers nothing (its
    gradients stay in the peer, checked at averaging instead)."""
    return bool(result.tensors) or result.loss is not None


def discrepancy(a: Result, b: Result) -> float:
    """Relative L2 distance of two results of one call, the largest over their tensors and the loss;
    infinite when they do not even have the same tensors."""
    if set(a.tensors) != set(b.tensors) or (a.loss is None) != (b.loss is None):
        return math.inf
    worst = 0.0
    for name, x in a.tensors.items():
        y = b.tensors[name]
        if x.shape != y.shape:
            return math.inf
        x64, y64 = x.double(), y.double()
        scale = max(float(x64.norm()), float(y64.norm()), 1e-12)
        worst = max(worst, float((x64 - y64).norm()) / scale)
    if a.loss is not None and b.loss is not None:
        worst = max(worst, abs(a.loss - b.loss) / max(abs(a.loss), abs(b.loss), 1e-6))
    return worst


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """The four signed frames of a mismatch, as the trainer sent and received them."""

    call_checked: bytes
    reply_checked: bytes
    call_checker: bytes
    reply_checker: bytes
    forward_checked: bytes = b""
    """For a cached backward: the forward call to the same peer, which carried the input."""

    def tensors(self) -> dict[str, Tensor]:
        names = (*EVIDENCE_TENSORS, KEPT_FORWARD) if self.forward_checked else EVIDENCE_TENSORS
        return {name: torch.frombuffer(bytearray(getattr(self, name)), dtype=torch.uint8) for name in names}


@dataclass(frozen=True, kw_only=True)
class Disputed:
    """A mismatch as a referee sees it after checking the evidence: the call (as sent to the checked
    peer, made whole if it was a cached backward), its inputs, and the two results."""

    call: StageCall
    inputs: dict[str, Tensor]
    checked: Result
    checker: Result


def open_evidence(
    header: ArbitrateCall, tensors: dict[str, Tensor], verifier: SenderVerifier, max_bytes: FrameLimit
) -> Disputed:
    """Raise FrameError or AuthError unless the evidence holds: the arbitration's caller sent both calls,
    to the checked and the checker peer, with the same inputs for the same microbatch and step; each
    reply is signed by the peer called, as the answer to that very call."""
    missing = [name for name in EVIDENCE_TENSORS if name not in tensors]
    if missing:
        raise FrameError(f"arbitration evidence lacks {missing}")
    checked_call, checked_reply = _exchange(tensors, "checked", header.checked, header, verifier, max_bytes)
    checker_call, checker_reply = _exchange(tensors, "checker", header.checker, header, verifier, max_bytes)
    a, b = checked_call.header, checker_call.header
    assert isinstance(a, StageCall) and isinstance(b, StageCall)  # checked by _exchange
    if (a.kind, a.stage, a.step, a.microbatch_id, a.samples) != (
        b.kind,
        b.stage,
        b.step,
        b.microbatch_id,
        b.samples,
    ):
        raise FrameError("the two calls of the evidence are not the same call")
    if (a.stage, a.step) != (header.stage, header.step):
        raise FrameError(f"evidence is for stage {a.stage} step {a.step}, not the arbitration's")
    if isinstance(a, BackwardCall) and a.cached:
        if KEPT_FORWARD not in tensors:
            raise FrameError("evidence of a cached backward lacks the forward call that kept its input")
        a, inputs = _made_whole(a, checked_call, tensors[KEPT_FORWARD], verifier, max_bytes)
        theirs = decode_payload(b, checker_call.payload)
        if set(inputs) != set(theirs) or not all(torch.equal(inputs[k], theirs[k]) for k in inputs):
            raise FrameError("the two calls of the evidence carried different inputs")
    else:
        if bytes(checked_call.payload) != bytes(checker_call.payload):
            raise FrameError("the two calls of the evidence carried different inputs")
        inputs = decode_payload(a, checked_call.payload)
    return Disputed(call=a, inputs=inputs, checked=_result(checked_reply), checker=_result(checker_reply))


def _made_whole(
    backward: BackwardCall,
    call: OpenedFrame,
    forward_tensor: Tensor,
    verifier: SenderVerifier,
    max_bytes: FrameLimit,
) -> tuple[BackwardCall, dict[str, Tensor]]:
    """A cached backward as the full call it stands for: the input from the signed forward call that
    the same caller sent the same peer for the same microbatch, the gradient from the backward."""
    forward = open_frame(_raw(forward_tensor), max_bytes=max_bytes)
    f = forward.header
    if not isinstance(f, ForwardCall) or not f.keep:
        raise FrameError("the kept-forward evidence is not a forward call that asked to keep its graph")
    if (f.sender, f.receiver) != (backward.sender, backward.receiver):
        raise AuthError("the kept-forward evidence went between other peers than the backward")
    if (f.stage, f.step, f.microbatch_id, f.samples) != (
        backward.stage,
        backward.step,
        backward.microbatch_id,
        backward.samples,
    ):
        raise FrameError("the kept-forward evidence is for another microbatch than the backward")
    verifier.check_evidence(f, forward.signature, forward.header_bytes, forward.payload)
    x = decode_payload(f, forward.payload).get("x")
    grad = decode_payload(backward, call.payload).get("grad")
    if x is None or grad is None:
        raise FrameError("the kept-forward evidence lacks the input or the backward its gradient")
    return backward.model_copy(update={"cached": False}), {"x": x, "grad": grad}


def _exchange(
    tensors: dict[str, Tensor],
    role: str,
    peer_id: int,
    header: ArbitrateCall,
    verifier: SenderVerifier,
    max_bytes: FrameLimit,
) -> tuple[OpenedFrame, OpenedFrame]:
    call = open_frame(_raw(tensors[f"call_{role}"]), max_bytes=max_bytes)
    reply = open_frame(_raw(tensors[f"reply_{role}"]), max_bytes=max_bytes)
    c, r = call.header, reply.header
    if not isinstance(c, StageCall):
        raise FrameError(f"evidence call_{role} is a {c.kind} frame, not a stage call")
    if c.sender != header.sender or c.receiver != peer_id:
        raise AuthError(
            f"evidence call_{role} went from peer {c.sender} to {c.receiver}, not to peer {peer_id}"
        )
    if not isinstance(r, ForwardReply | BackwardReply | LossReply):
        raise FrameError(f"evidence reply_{role} is a {r.kind} frame, not a stage call's result")
    if (r.sender, r.receiver, r.counter) != (c.receiver, c.sender, c.counter):
        raise AuthError(f"evidence reply_{role} does not answer call_{role}")
    verifier.check_evidence(c, call.signature, call.header_bytes, call.payload)
    verifier.check_evidence(r, reply.signature, reply.header_bytes, reply.payload, answers=call.signature)
    return call, reply


def _raw(t: Tensor) -> bytes:
    if t.dtype != torch.uint8 or t.dim() != 1:
        raise FrameError("evidence frames travel as flat uint8 tensors")
    return t.numpy().tobytes()


def _result(reply: OpenedFrame) -> Result:
    header = reply.header
    assert isinstance(header, ForwardReply | BackwardReply | LossReply)
    return result_of(header, decode_payload(header, reply.payload))
