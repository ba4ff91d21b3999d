"""The typed header of each data-plane frame kind: one definition for the sender and the receiver.

Every header carries the envelope (run, sender, its ticket, receiver and counter, the tensor list);
each kind adds its own fields and nothing else. A header is parsed strictly: an unknown kind, a
field of another kind, a missing field, a value of the wrong JSON type or out of its bounds is refused, so the
receiver never meets a value it has to second-guess.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from swarmhub.wire import Ticket

DTypeName = Literal["float32", "float16", "bfloat16", "int64", "uint8"]

# Bounds that no honest frame comes near; they keep a hostile header from carrying huge values.
MAX_ID = 2**53
"""Ids, steps and counts: any integer JSON carries exactly."""
MAX_NAME_CHARS = 256
MAX_TENSOR_RANK = 8
MAX_SAMPLES = 1 << 20
MAX_TIMEOUT_S = 24 * 3600.0
MAX_ERROR_CHARS = 4000

Id = Annotated[int, Field(ge=0, le=MAX_ID)]
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]


class _Model(BaseModel):
    # strict: "5" is not an int and 1.0 is not a step; NaN as a JSON constant: a diverged loss must
    # still reach the trainer, which reports it.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, ser_json_inf_nan="constants")


class TensorMeta(_Model):
    name: Name
    shape: list[int] = Field(max_length=MAX_TENSOR_RANK)
    dtype: DTypeName
    codec: Annotated[str, Field(max_length=32)]
    nbytes: int = Field(ge=0)


class _Envelope(_Model):
    run_id: Id
    sender: Id
    """Peer id of the sender; a call's ticket must name it (`peer/frame_auth.py`)."""
    ticket: Ticket | None = None
    """The coordinator's ticket for the sender's frame-signing key; replies leave it out."""
    receiver: Id = 0
    """The peer a call is addressed to: a frame sent to one peer is refused by any other."""
    counter: Id = 0
    """Numbers the sender's calls to `receiver`; a number seen before is a replay."""
    tensors: list[TensorMeta] = []
    """Filled by `encode_frame` from the tensors it sends, in payload order."""

    @property
    def payload_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


class _StageCall(_Envelope):
    """A pipeline call on one microbatch: the stage's input (and target or output gradient) in."""

    stage: Id
    step: Id
    microbatch_id: Name
    samples: int = Field(ge=1, le=MAX_SAMPLES)
    timeout_s: float = Field(ge=0.0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    """How long the caller waits; a call that finished too late for it is not accumulated."""
    check: bool = False
    """A spot check: compute and answer, accumulate nothing (the call went to another peer too).
    Only the checking peer sees this; the checked peer's call is an ordinary one."""


class ForwardCall(_StageCall):
    kind: Literal["forward"] = "forward"
    keep: bool = False
    """Keep what this microbatch's backward needs (within the peer's memory bound), so the backward
    sent back to this peer need not carry the input nor recompute the forward."""


class BackwardCall(_StageCall):
    kind: Literal["backward"] = "backward"
    cached: bool = False
    """The input is not sent: use the forward this peer kept for the microbatch. A peer that no
    longer has it answers an error with `NOT_KEPT`, and the caller sends the full call."""


class ForwardBackwardCall(_StageCall):
    """The last stage's call: forward, loss against the targets, backward, in one."""

    kind: Literal["forward_backward"] = "forward_backward"


MAX_PARTS = 4096
"""Members of one averaging round at most (as many as an `AveragingDone` lists)."""


class PushGrads(_Envelope):
    """A member's accumulated gradient sum for a step's averaging attempt, or in a butterfly round
    one part of it (`peer/butterfly.py`)."""

    kind: Literal["push_grads"] = "push_grads"
    stage: Id
    step: Id
    attempt: Id
    counted: list[Name]
    """The microbatch ids in the sum (the sender's own, also in a part of it; none in a reduced part)."""
    part: Annotated[int, Field(ge=0, lt=MAX_PARTS)] | None = None
    """Butterfly: which of `parts` contiguous parts of the stage's flat gradients this is (the rank,
    by peer id, of the member that sums it). None: the whole sum (all-to-all)."""
    parts: int = Field(default=1, ge=1, le=MAX_PARTS)
    bounds: tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]] | None = None
    """Butterfly: [start, end) of the part in the stage's flat gradients, as the round's weights cut
    them (`peer.butterfly.part_bounds`); the receiver holds it to the cut of its own barrier."""
    reduced: bool = False
    """Butterfly: the part summed over the whole group by the member it belongs to (the all-gather),
    rather than one sender's own."""

    @model_validator(mode="after")
    def _a_part_of_the_parts(self) -> PushGrads:
        if self.part is None:
            if self.parts != 1 or self.reduced or self.bounds is not None:
                raise ValueError("a whole sum has no parts")
        elif self.part >= self.parts:
            raise ValueError(f"part {self.part} of {self.parts}")
        elif self.bounds is None or self.bounds[0] > self.bounds[1]:
            raise ValueError(f"part {self.part} of {self.parts} has no bounds [start, end)")
        return self


class FetchState(_Envelope):
    """Ask a peer of `stage` for its parameters and optimizer state (a stage copy)."""

    kind: Literal["fetch_state"] = "fetch_state"
    stage: Id
    step: Id


class ArbitrateCall(_Envelope):
    """Evidence of a spot-check mismatch for a referee of `stage`: the caller's two signed calls and
    the two signed replies, as uint8 tensors `call_checked`, `reply_checked`, `call_checker`,
    `reply_checker` (`peer/spot_checks.py`)."""

    kind: Literal["arbitrate"] = "arbitrate"
    stage: Id
    step: Id
    case_id: Id
    checked: Id
    checker: Id


class _StageReply(_Envelope):
    compute_s: float = Field(default=0.0, ge=0.0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    """Seconds the serving peer computed this call (emulated slowness included, queueing not)."""
    server_s: float = Field(default=0.0, ge=0.0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    """Seconds the call spent inside the serving peer, from its frame fully received to its reply
    ready (queueing, decoding and encoding included): the caller's round trip less this is the
    network's. 0 from a peer that does not say."""
    queued: Id = 0
    """Calls waiting at the serving peer as it answered: current load for the caller's routing. A
    swarm view's queue lengths are seconds old, and trainers acting on the same old figure all send
    their calls to the same peer, which then has the queue while the one it had runs dry."""


class ForwardReply(_StageReply):
    kind: Literal["forward_reply"] = "forward_reply"


class BackwardReply(_StageReply):
    kind: Literal["backward_reply"] = "backward_reply"


class LossReply(_StageReply):
    """The reply to a forward_backward call."""

    kind: Literal["forward_backward_reply"] = "forward_backward_reply"
    loss: float


class GradsAck(_Envelope):
    kind: Literal["push_grads_reply"] = "push_grads_reply"


class StateReply(_Envelope):
    kind: Literal["fetch_state_reply"] = "fetch_state_reply"
    step: Id
    """The step the sent state is at."""


class ArbitrateReply(_Envelope):
    """The referee's verdict, as it also reports it to the coordinator."""

    kind: Literal["arbitrate_reply"] = "arbitrate_reply"
    agrees_with_checked: bool
    agrees_with_checker: bool


class ErrorReply(_Envelope):
    """The answer to any frame that was refused or failed; `error` says why."""

    kind: Literal["error"] = "error"
    error: Annotated[str, Field(max_length=MAX_ERROR_CHARS)]


StageCall = ForwardCall | BackwardCall | ForwardBackwardCall
Call = StageCall | PushGrads | FetchState | ArbitrateCall
Reply = ForwardReply | BackwardReply | LossReply | GradsAck | StateReply | ArbitrateReply | ErrorReply
FrameHeader = Call | Reply

HEADERS: TypeAdapter[FrameHeader] = TypeAdapter(Annotated[FrameHeader, Field(discriminator="kind")])
