"""The control-plane wire schema: every message that crosses between a peer and the coordinator.

Defined once, imported by both `server/` and `peer/`. Frames are JSON objects with a `type`
field; `PeerToCoordinator` and `CoordinatorToPeer` parse any of them. Unknown fields are ignored so
that peers and coordinators of neighbouring versions can talk. Tensors never travel here: they go
peer to peer over the data plane (`peer/frames.py`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

OptimizerName = Literal["adamw", "sgd"]
CompressionName = Literal["none", "float16", "int8"]
DeviceName = Literal["cpu", "cuda"]


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class RunSpec(Message):
    """What a peer needs to know about a run to train it."""

    run_id: int
    name: str
    model_preset: str
    dataset: str
    """'python-stdlib' (the bundled default corpus) or a path to a text file or directory."""
    num_stages: int = Field(ge=1, le=64)
    target_batch_size: int = Field(ge=1)
    """Samples per global step, summed over the whole swarm."""
    microbatch_size: int = Field(ge=1)
    seq_len: int = Field(ge=8)
    optimizer: OptimizerName
    learning_rate: float = Field(gt=0)
    warmup_steps: int = Field(ge=0)
    weight_decay: float = Field(ge=0)
    compression: CompressionName
    max_steps: int | None = Field(default=None, ge=1)
    seed: int = 0


class PeerEndpoint(Message):
    """A peer as others see it: where to call it and how fast it is."""

    peer_id: int
    address: str
    """host:port of the peer's data-plane server."""
    stage: int | None
    throughput: float = 0.0
    """Samples per second the peer measured for its stage (EMA)."""
    queue_length: int = 0


# ---- peer -> coordinator -------------------------------------------------------------------


class Hello(Message):
    """First frame on the control channel; anything else first closes it with 1008."""

    type: Literal["hello"] = "hello"
    peer_id: int
    credential: str
    throughput: float = Field(default=0.0, ge=0)
    """Samples per second from the peer's start-up benchmark on the run's model."""
    corpus_fingerprint: str = Field(default="", max_length=64)
    """Digest of the dataset as this peer read it; the run's peers must all read the same bytes."""


class Heartbeat(Message):
    type: Literal["heartbeat"] = "heartbeat"
    throughput: float = Field(ge=0)
    queue_length: int = Field(ge=0)
    samples_done: int = Field(ge=0)
    """Samples this peer's stage has processed since it joined."""


class WorkRequest(Message):
    """The peer's trainer asks for a microbatch to drive through the pipeline."""

    type: Literal["work_request"] = "work_request"


class MicrobatchDone(Message):
    type: Literal["microbatch_done"] = "microbatch_done"
    step: int
    microbatch_id: str
    samples: int = Field(ge=1)
    loss: float
    retries: int = Field(default=0, ge=0)
    bytes_sent: int = Field(default=0, ge=0)
    """Data-plane bytes the trainer sent and received for this microbatch (all stages, both ways)."""


class MicrobatchFailed(Message):
    type: Literal["microbatch_failed"] = "microbatch_failed"
    step: int
    microbatch_id: str
    reason: str


class AveragingDone(Message):
    """A stage peer has averaged its gradients with its group and is ready to apply them."""

    type: Literal["averaging_done"] = "averaging_done"
    step: int
    attempt: int
    stage: int
    contributors: list[int]
    """Peer ids whose gradients went into the average."""
    counted: list[str]
    """Microbatch ids accumulated on this stage, over all contributors (each once)."""
    grad_sum_norm_sq: float = Field(ge=0)
    """Squared L2 norm of the stage's summed (not yet divided) gradient, for clipping by global norm."""


class StepApplied(Message):
    type: Literal["step_applied"] = "step_applied"
    step: int
    stage: int


class StageReady(Message):
    """The peer holds its stage's parameters as of the start of `step` and can serve calls."""

    type: Literal["stage_ready"] = "stage_ready"
    stage: int
    step: int
    origin: Literal["kept", "copied", "checkpoint", "initialized"]
    """Where its parameters came from: its own (a rejoin), a live peer, a checkpoint, or a fresh
    initialization (at step 0 the normal start; later it means the stage's training was lost)."""


class PeerUnreachable(Message):
    """A trainer could not reach another peer's data plane (not a refusal: no answer at all)."""

    type: Literal["peer_unreachable"] = "peer_unreachable"
    peer_id: int
    reason: str = Field(max_length=500)


class Goodbye(Message):
    """The peer leaves on purpose (Ctrl-C); not a failure."""

    type: Literal["goodbye"] = "goodbye"


PeerToCoordinatorMessage = Annotated[
    Hello
    | Heartbeat
    | WorkRequest
    | MicrobatchDone
    | MicrobatchFailed
    | AveragingDone
    | StepApplied
    | StageReady
    | PeerUnreachable
    | Goodbye,
    Field(discriminator="type"),
]
PeerToCoordinator: TypeAdapter[PeerToCoordinatorMessage] = TypeAdapter(PeerToCoordinatorMessage)


# ---- coordinator -> peer -------------------------------------------------------------------


class Welcome(Message):
    type: Literal["welcome"] = "welcome"
    peer_id: int
    run: RunSpec
    step: int
    """The step the run is on now; a peer's parameters must match the end of step - 1."""
    data_key: str
    """Key the peer uses to verify data-plane credentials of other peers of this run."""


class StageAssignment(Message):
    type: Literal["assignment"] = "assignment"
    stage: int
    step: int
    reason: str
    state_sources: list[PeerEndpoint] = []
    """Live peers of the stage to copy parameters and optimizer state from, best first; empty at
    step 0, when every peer's seeded initialization is the state."""
    checkpoint_step: int | None = None
    """Else the step of the stage checkpoint to start from (None: fresh initialization)."""


class SwarmView(Message):
    """Every live peer of the run, pushed whenever it changes and periodically."""

    type: Literal["swarm"] = "swarm"
    step: int
    peers: list[PeerEndpoint]


class WorkGrant(Message):
    type: Literal["work"] = "work"
    step: int
    microbatch_id: str
    first_sample: int = Field(ge=0)
    """Global sample index; the peer maps it to (epoch, position) of its dataset."""
    samples: int = Field(ge=1)


class NoWork(Message):
    """The current step has all the microbatches it needs; wait for StepCommitted."""

    type: Literal["no_work"] = "no_work"
    step: int
    reason: str


class StepBarrier(Message):
    """Average gradients within `group` (the live peers of `stage`), then report AveragingDone."""

    type: Literal["step_barrier"] = "step_barrier"
    step: int
    attempt: int
    stage: int
    group: list[PeerEndpoint]


class ApplyStep(Message):
    """Every peer of the stage averaged over the same contributors: take the optimizer step."""

    type: Literal["apply_step"] = "apply_step"
    step: int
    stage: int
    learning_rate: float
    samples: int = Field(ge=0)
    """This stage's own sample count for the step; the averaged gradient is divided by it."""
    grad_scale: float = Field(gt=0, le=1)
    """Clipping factor from the norm of the whole model's gradient; multiplies every gradient."""


class StepCommitted(Message):
    type: Literal["step_committed"] = "step_committed"
    step: int
    loss: float | None
    next_step: int


class CheckpointRequest(Message):
    """Upload this stage's state as of the start of `step` to the coordinator's checkpoint store."""

    type: Literal["checkpoint_request"] = "checkpoint_request"
    step: int
    stage: int


class RunStatusChanged(Message):
    type: Literal["run_status"] = "run_status"
    status: str


class Kicked(Message):
    """The coordinator removed this peer (admin kick or ban); it must stop."""

    type: Literal["kicked"] = "kicked"
    reason: str


CoordinatorToPeerMessage = Annotated[
    Welcome
    | StageAssignment
    | SwarmView
    | WorkGrant
    | NoWork
    | StepBarrier
    | ApplyStep
    | StepCommitted
    | CheckpointRequest
    | RunStatusChanged
    | Kicked,
    Field(discriminator="type"),
]
CoordinatorToPeer: TypeAdapter[CoordinatorToPeerMessage] = TypeAdapter(CoordinatorToPeerMessage)


# ---- peer registration (REST, before the control channel opens) ----------------------------


class PeerRegistration(Message):
    join_token: str = Field(min_length=8, max_length=200)
    address: str = Field(min_length=3, max_length=200, pattern=r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")
    device: DeviceName
    device_name: str = Field(default="", max_length=200)
    throughput: float = Field(ge=0, le=1e9)
    """Samples per second from the peer's own start-up benchmark."""
    requested_stage: int | None = Field(default=None, ge=0)
    name: str = Field(default="", max_length=100)


class PeerRegistered(Message):
    peer_id: int
    credential: str
    """Secret for the control channel's Hello; also the peer's data-plane credential."""
    run: RunSpec
    control_url_path: str = "/ws/peer"
