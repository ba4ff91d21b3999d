"""The control-plane wire schema: every message that crosses between a peer and the coordinator.

Defined once, imported by both `server/` and `peer/`. Frames are JSON objects with a `type`
field; `PeerToCoordinator` and `CoordinatorToPeer` parse any of them. Unknown fields are ignored so
that peers and coordinators of neighbouring versions can talk. Tensors never travel here: they go
peer to peer over the data plane (`peer/frames.py`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from swarmhub.run_settings import CompressionName as CompressionName
from swarmhub.run_settings import OptimizerName as OptimizerName
from swarmhub.run_settings import RunSettings
from swarmhub.status import RunStatus

DeviceName = Literal["cpu", "cuda"]
HOST_OPTIONAL_PORT = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+)(:\d{1,5})?$"
FINGERPRINT = r"^([0-9a-f]{64})?$"
FRAME_KEY = r"^([0-9a-f]{64})?$"
"""An Ed25519 public key (hex) a peer signs its data-plane frames with; empty: none."""


# Every number a peer reports is finite and bounded here, at the wire: one absurd figure (Infinity, NaN,
# 1e23) must not break the dashboard's JSON, the database's integer columns or a step's arithmetic.
DATA_PLANE_VERSION = 2
"""The data-plane protocol this code speaks. Data-plane headers refuse fields they do not know
(`peer.frame_headers`), so peers of different versions cannot call each other: the coordinator
registers only peers of its own version. Bump it with any change to a data-plane header or frame.
Version 1: peers from before the number was sent (their replies carry no `server_s`)."""
FAULTY_CLOSE_CODE = 4001
"""Control-channel close code for a peer removed for computing or reporting wrong results: final,
its credential opens no channel again."""
MAX_INT = 2**31 - 1
StepNumber = Annotated[int, Field(ge=0, le=MAX_INT)]
Attempt = Annotated[int, Field(ge=0, le=10_000)]
StageIndex = Annotated[int, Field(ge=0, le=63)]
PeerId = Annotated[int, Field(ge=1, le=MAX_INT)]
Count = Annotated[int, Field(ge=0, le=MAX_INT)]
SamplesPerSecond = Annotated[float, Field(ge=0, le=1e7)]
QueueLength = Annotated[int, Field(ge=0, le=100_000)]
BytesPerSecond = Annotated[float, Field(ge=0, le=1e12)]
Loss = Annotated[float, Field(ge=0, le=1e4)]
"""Cross-entropy of a byte-level model: ln(256) ~ 5.5 at random; anything near the bound is a lie or a bug."""
NormSquared = Annotated[float, Field(ge=0, le=1e30)]
MicrobatchId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
Reason = Annotated[str, Field(max_length=500)]
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""SHA-256 of a frame's payload, hex."""
CallKind = Literal["forward", "backward", "forward_backward"]
AveragingPattern = Literal["all_to_all", "butterfly"]
"""How a stage's members exchange their sums (`server.policies.averaging.averaging_pattern`):
all_to_all, each member pushes its whole sum to the K-1 others and adds them itself; butterfly, a
reduce-scatter and all-gather, each member sums one K-th of the stage's gradients and sends it back."""
Discrepancy = Annotated[float, Field(ge=0, le=1e30)]
"""How far two results of one stage call are apart: relative L2 distance of their tensors (and of
the loss), `peer/spot_checks.py`."""


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class RunSpec(Message, RunSettings):
    """What a peer needs to know about a run to train it: its id and its settings."""

    run_id: int


class PeerEndpoint(Message):
    """A peer as others see it: where to call it and how fast it is."""

    peer_id: int
    address: str
    """host:port of the peer's data-plane server."""
    stage: int | None
    throughput: float = 0.0
    """Samples per second the peer measured for its stage (EMA)."""
    queue_length: int = 0
    fingerprint: str = Field(default="", pattern=FINGERPRINT)
    """SHA-256 (hex) of its data-plane certificate: callers use TLS and accept only that key (empty:
    plain ws)."""


class Ticket(BaseModel):
    """The coordinator's signed word that `peer_id` of `run_id` signs its data-plane frames with
    `public_key` until `expires_at` (unix seconds, the coordinator's clock); `swarmhub/tickets.py`.
    Strict: it also travels inside data-plane frame headers, which are parsed strictly."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    run_id: Annotated[int, Field(ge=0, le=2**53)]
    peer_id: Annotated[int, Field(ge=0, le=2**53)]
    public_key: str = Field(pattern=r"^[0-9a-f]{64}$")
    expires_at: Annotated[int, Field(ge=0, le=2**40)]
    signature: str = Field(pattern=r"^[0-9a-f]{128}$")


# ---- peer -> coordinator -------------------------------------------------------------------


class Hello(Message):
    """First frame on the control channel; anything else first closes it with 1008."""

    type: Literal["hello"] = "hello"
    peer_id: PeerId
    credential: str = Field(max_length=200)
    frame_key: str = Field(default="", pattern=FRAME_KEY)
    """The key this peer signs data-plane frames with; the coordinator issues tickets for it."""
    throughput: SamplesPerSecond = 0.0
    """Samples per second from the peer's start-up benchmark on the run's model."""


class CheckTally(Message):
    """Running totals of a trainer's spot checks: the second calls it sent and what they cost."""

    calls: Count = 0
    bytes: int = Field(default=0, ge=0, le=2**62)
    """Data-plane bytes of the check calls, both ways."""
    seconds: float = Field(default=0.0, ge=0, le=1e9, allow_inf_nan=False)
    """Wall time the check calls took (the checking peers' compute and the transfers)."""
    largest_agreeing: Discrepancy = 0.0
    """The largest discrepancy among checks whose results agreed: the honest noise the tolerance must
    stay above (the check's margin is the tolerance over this)."""


class ActivationCacheTally(Message):
    """A stage server's store of forward activations kept for the matching backward call."""

    entries: Count = 0
    bytes: int = Field(default=0, ge=0, le=2**62)
    limit_bytes: int = Field(default=0, ge=0, le=2**62)
    """The memory bound this peer keeps the store within (`--activation-cache-mb`)."""
    hits: Count = 0
    """Backward calls served from a kept forward (running total)."""
    misses: Count = 0
    """Backward calls that asked for a kept forward this peer no longer had (running total)."""
    evictions: Count = 0


class Heartbeat(Message):
    type: Literal["heartbeat"] = "heartbeat"
    throughput: SamplesPerSecond
    queue_length: QueueLength
    samples_done: Count
    """Samples this peer's stage has processed since it joined."""
    links: dict[PeerId, BytesPerSecond] = Field(default_factory=dict, max_length=256)
    """Data-plane rates this peer measured to other peers (peer id -> bytes per second), recent ones."""
    spot_checks: CheckTally = Field(default_factory=CheckTally)
    """What this peer's trainer spent on spot checks since it joined (running totals)."""
    compute_seconds: float = Field(default=0.0, ge=0, le=1e12, allow_inf_nan=False)
    """Seconds this peer's stage server spent computing calls since it joined (running total)."""
    activation_cache: ActivationCacheTally = Field(default_factory=ActivationCacheTally)


class WorkRequest(Message):
    """The peer's trainer asks for a microbatch to drive through the pipeline."""

    type: Literal["work_request"] = "work_request"


class ServedCall(Message):
    """One stage call of a microbatch as its trainer saw it: who served it and how long it took."""

    peer_id: PeerId
    samples: int = Field(ge=1, le=MAX_INT)
    seconds: float = Field(gt=0, le=3600)
    compute_seconds: float = Field(default=0.0, ge=0, le=3600, allow_inf_nan=False)
    """Of `seconds`, what the serving peer says it spent computing."""
    network_seconds: float = Field(default=0.0, ge=0, le=3600, allow_inf_nan=False)
    """Of `seconds`, the network's: the trainer's wait less the time the call spent inside the serving
    peer (its reply's `server_s`), so transfers and the trainer's own framing; ~0 for a call served
    in process. The rest of `seconds` beyond compute is queueing and framing at the serving peer."""


class MicrobatchDone(Message):
    type: Literal["microbatch_done"] = "microbatch_done"
    step: StepNumber
    microbatch_id: MicrobatchId
    samples: int = Field(ge=1, le=MAX_INT)
    loss: Loss
    retries: int = Field(default=0, ge=0, le=10_000)
    bytes_sent: Count = 0
    """Data-plane bytes the trainer sent and received for this microbatch (all stages, both ways)."""
    served: list[ServedCall] = Field(default_factory=list, max_length=256)
    """Every successful stage call, so the coordinator learns what each peer really serves."""


class MicrobatchFailed(Message):
    type: Literal["microbatch_failed"] = "microbatch_failed"
    step: StepNumber
    microbatch_id: MicrobatchId
    reason: Reason


class ContributionNorm(Message):
    """One member's gradient sum as another member received it: its squared norm and what it counts."""

    peer_id: PeerId
    norm_sq: NormSquared
    counted: list[MicrobatchId] = Field(max_length=1_000_000)


class AveragingDone(Message):
    """A stage peer has averaged its gradients with its group and is ready to apply them."""

    type: Literal["averaging_done"] = "averaging_done"
    step: StepNumber
    attempt: Attempt
    stage: StageIndex
    contributors: list[PeerId] = Field(max_length=4096)
    """Peer ids whose gradients went into the average."""
    counted: list[MicrobatchId] = Field(max_length=1_000_000)
    """Microbatch ids accumulated on this stage, over all contributors (each once)."""
    grad_sum_norm_sq: NormSquared
    """Squared L2 norm of the stage's summed (not yet divided) gradient, for clipping by global norm."""
    contributions: list[ContributionNorm] = Field(default_factory=list, max_length=4096)
    """Each contributor's sum as this member decoded it: the coordinator rejects a contribution out of
    all proportion to the samples it counts before the step is applied. In a butterfly round, each
    contributor's part of the gradients this member summed: squared norms of disjoint parts add up to
    the whole's."""


Projection = Annotated[float, Field(ge=-1e30, le=1e30, allow_inf_nan=False)]
Projections = Annotated[list[Projection], Field(max_length=4096)]
NormsSquared = Annotated[list[NormSquared], Field(max_length=4096)]


class PartsChecked(Message):
    """A butterfly round's member projects what it handled onto the `CheckParts` vector
    (`server.policies.part_check.PartReport`: each list over the round's members by peer id)."""

    type: Literal["parts_checked"] = "parts_checked"
    step: StepNumber
    attempt: Attempt
    stage: StageIndex
    sent: Projections
    sent_norms_sq: NormsSquared
    received: Projections
    held: Projections
    held_norms_sq: NormsSquared


class StepApplied(Message):
    type: Literal["step_applied"] = "step_applied"
    step: StepNumber
    stage: StageIndex


class StageReady(Message):
    """The peer holds its stage's parameters as of the start of `step` and can serve calls."""

    type: Literal["stage_ready"] = "stage_ready"
    stage: StageIndex
    step: StepNumber
    origin: Literal["kept", "copied", "checkpoint", "initialized"]
    """Where its parameters came from: its own (a rejoin), a live peer, a checkpoint, or a fresh
    initialization (at step 0 the normal start; later it means the stage's training was lost)."""


class StageLoadFailed(Message):
    """The peer could not load its assigned stage from any source offered; it stays unassigned."""

    type: Literal["stage_load_failed"] = "stage_load_failed"
    stage: StageIndex
    step: StepNumber
    reason: Reason


class PeerUnreachable(Message):
    """A trainer could not reach another peer's data plane (not a refusal: no answer at all)."""

    type: Literal["peer_unreachable"] = "peer_unreachable"
    peer_id: PeerId
    reason: Reason


class SpotCheckMismatch(Message):
    """A trainer sent one stage call to two peers of the stage and their results disagree beyond the
    codec's tolerance. It keeps both signed exchanges as evidence for the referee the coordinator names."""

    type: Literal["spot_check_mismatch"] = "spot_check_mismatch"
    case: Count
    """The trainer's number for this mismatch; `Arbitrate` names it back."""
    step: StepNumber
    stage: StageIndex
    microbatch_id: MicrobatchId
    kind: CallKind
    checked: PeerId
    """The peer the call was routed to."""
    checker: PeerId
    """The second peer, which computed the call again without accumulating its gradients."""
    checked_digest: Digest
    checker_digest: Digest
    discrepancy: Discrepancy
    tolerance: Discrepancy


class ArbitrationVerdict(Message):
    """A referee's finding on a mismatch: it checked both signed exchanges, computed the call itself
    and compared its result with each."""

    type: Literal["arbitration_verdict"] = "arbitration_verdict"
    case_id: Count
    valid: bool
    """False when the evidence did not hold (bad signatures, different inputs) or could not be computed
    (the stage moved on); `detail` says which."""
    agrees_with_checked: bool = False
    agrees_with_checker: bool = False
    discrepancy_checked: Discrepancy = 0.0
    discrepancy_checker: Discrepancy = 0.0
    tolerance: Discrepancy = 0.0
    detail: Reason = ""


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
    | PartsChecked
    | StepApplied
    | StageReady
    | StageLoadFailed
    | PeerUnreachable
    | SpotCheckMismatch
    | ArbitrationVerdict
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
    """The run's public ticket key (hex Ed25519): the peer accepts a data-plane frame only with a ticket
    it signed (`swarmhub/tickets.py`). Never the run's secret."""
    heartbeat_interval_s: float = Field(default=1.0, gt=0, le=60)
    """How often the coordinator wants a heartbeat from this peer."""


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
    apply: ApplyStep | None = None
    """The recorded update of step `step - 1` for this stage. A peer whose state is at `step - 1`
    and still holds that step's averaged gradient (its coordinator went down before telling it to
    apply) applies it instead of copying the stage."""
    corroborate: bool = False
    """With two or more sources, copy the state from one and check it against a second's: honest
    members of a stage hold bit-identical states. Asked of trusted referees (verifier tokens), so a
    party to a dispute cannot hand its referee wrong weights."""


MAX_VIEW_PEERS = 64 * 32
"""Endpoints one swarm view may list: every stage (`StageIndex`) at most
`server.policies.view_sample.PEERS_PER_STAGE`."""


class StageTotal(Message):
    """All of one stage's ready peers, of which a swarm view may list only a sample."""

    peers: Count
    measured: Count
    """How many of them have measured a rate (throughput above 0)."""
    rate: Annotated[float, Field(ge=0, le=1e12)]
    """Their throughputs summed (samples per second)."""

    @classmethod
    def of(cls, endpoints: Iterable[PeerEndpoint]) -> StageTotal:
        """The totals of a stage whose ready peers are `endpoints`."""
        rates = [e.throughput for e in endpoints]
        return cls(peers=len(rates), measured=sum(1 for r in rates if r > 0), rate=sum(rates))


class SwarmView(Message):
    """The run's ready peers as one member sees them, pushed whenever they change and periodically:
    each stage's peers whole up to `PEERS_PER_STAGE`, else a sample of that many dealt to this
    member's group (`server/policies/view_sample.py`), and every stage's totals."""

    type: Literal["swarm"] = "swarm"
    step: int
    peers: list[PeerEndpoint] = Field(max_length=MAX_VIEW_PEERS)
    stages: list[StageTotal] = Field(default_factory=list, max_length=64)
    """Per stage, in stage order. Empty (a coordinator from before samples): `peers` is the whole
    swarm."""
    omits_recipient: bool = False
    """The recipient is ready to serve its stage, but `peers` (a sample of that stage) leaves it out:
    its trainer routes to itself all the same. A stage listed whole lists the recipient iff ready."""


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
    push_timeout_s: float | None = Field(default=None, gt=0)
    """How long members give the exchange before giving up on a member
    (`server.policies.averaging.push_allowance_s`): longer than a peer assumes on its own when a
    member's link was measured slower. None: the peer's own allowance."""
    pattern: AveragingPattern = "all_to_all"
    part_weights: list[Annotated[int, Field(ge=1, le=1 << 40)]] | None = None
    """Butterfly: each member's weight in the parts, in the order of `group`
    (`server.policies.butterfly_parts`): a member owns a part of the stage's gradients in proportion
    to it. None: equal parts."""

    @model_validator(mode="after")
    def _a_weight_per_member(self) -> StepBarrier:
        if self.part_weights is not None:
            if self.pattern != "butterfly":
                raise ValueError("only a butterfly round has parts to weigh")
            if len(self.part_weights) != len(self.group):
                raise ValueError(f"{len(self.part_weights)} part weights for {len(self.group)} members")
        return self


class CheckParts(Message):
    """Every member of a butterfly round reported: project what you sent, received and hold onto
    the vector `seed` draws (`peer/butterfly.py` `projection_vector`) and answer `PartsChecked`."""

    type: Literal["check_parts"] = "check_parts"
    step: int
    attempt: int
    stage: int
    seed: int = Field(ge=0, lt=2**63)


class ApplyStep(Message):
    """Every peer of the stage averaged over the same contributors: take the optimizer step."""

    type: Literal["apply_step"] = "apply_step"
    step: int
    stage: int
    attempt: int = Field(default=0, ge=0)
    """The averaging attempt whose sum this update applies (a member of an older attempt holds
    another sum)."""
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
    status: RunStatus


class Reachability(Message):
    """What the coordinator found when it dialled the peer's announced data-plane address."""

    type: Literal["reachability"] = "reachability"
    reachable: bool
    address: str
    detail: str
    """Plain words for the participant, e.g. why the port could not be reached and what to do."""


class Arbitrate(Message):
    """Send the evidence of mismatch `case` to `referee`, a third peer of the stage the coordinator
    chose; the referee reports its `ArbitrationVerdict` for `case_id` to the coordinator."""

    type: Literal["arbitrate"] = "arbitrate"
    case: int
    case_id: int
    referee: PeerEndpoint


class Kicked(Message):
    """The coordinator removed this peer (admin kick or ban); it must stop."""

    type: Literal["kicked"] = "kicked"
    reason: str


class DataPlaneTicket(Message):
    """This peer's current ticket, renewed every few seconds while its channel is admitted, and the
    peers of the run whose tickets were revoked (kicked, banned, token revoked) and not yet expired."""

    type: Literal["data_plane_ticket"] = "data_plane_ticket"
    ticket: Ticket
    coordinator_time: float
    """The coordinator's unix time when it sent this: peers judge expiry on the coordinator's clock."""
    revoked: list[int] = Field(default_factory=list, max_length=100_000)


CoordinatorToPeerMessage = Annotated[
    Welcome
    | StageAssignment
    | SwarmView
    | WorkGrant
    | NoWork
    | StepBarrier
    | CheckParts
    | ApplyStep
    | StepCommitted
    | CheckpointRequest
    | RunStatusChanged
    | Reachability
    | Arbitrate
    | Kicked
    | DataPlaneTicket,
    Field(discriminator="type"),
]
CoordinatorToPeer: TypeAdapter[CoordinatorToPeerMessage] = TypeAdapter(CoordinatorToPeerMessage)


# ---- peer registration (REST, before the control channel opens) ----------------------------


class PeerRegistration(Message):
    join_token: str = Field(min_length=8, max_length=200)
    listen_port: int = Field(ge=1, le=65535)
    """Port of the peer's data-plane server, which binds every interface."""
    announce: str | None = Field(default=None, min_length=1, max_length=255, pattern=HOST_OPTIONAL_PORT)
    """host[:port] other peers should dial (a port forward, a container's service name). Without it the
    coordinator records the address it sees the registration come from, with `listen_port`."""
    tls_fingerprint: str = Field(default="", pattern=FINGERPRINT)
    """SHA-256 (hex) of the data-plane certificate the peer generated; empty: a plain ws data plane."""
    device: DeviceName
    device_name: str = Field(default="", max_length=200)
    throughput: SamplesPerSecond
    """Samples per second from the peer's own start-up benchmark."""
    requested_stage: int | None = Field(default=None, ge=0)
    name: str = Field(default="", max_length=100)
    data_plane_version: int = Field(default=1, ge=1, le=MAX_INT)
    """`DATA_PLANE_VERSION` of the peer's code; absent from peers that predate it (version 1)."""


class PeerRegistered(Message):
    peer_id: int
    credential: str
    """Secret for the control channel's Hello; also the peer's data-plane credential."""
    run: RunSpec
    control_url_path: str = "/ws/peer"
    address: str
    """The data-plane address the coordinator recorded for this peer: what the others will dial."""
    contribution_token: str = ""
    """The key to this peer's contribution page (`#/contribution/<token>` on the coordinator's
    dashboard), which the peer prints for its participant; empty from a coordinator without one."""
