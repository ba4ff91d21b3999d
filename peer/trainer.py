"""The trainer: drives granted microbatches through the pipeline, one stage peer at a time.

For every stage call it picks a peer of that stage by stochastic wiring (`routing.StageRouter`);
a call that fails, is refused, times out or is answered by anything but the dialled peer's signed reply
to that call is retried on another peer of the same stage. A backward goes first to the peer that
served the microbatch's forward there, carrying only the gradient: that peer kept the forward's graph
(`peer/activation_store.py`). If it is gone or kept nothing, the full call (input and gradient) goes
to any peer of the stage, which recomputes the forward. A share of the calls is also spot-checked on
a second peer of the stage (`peer/spot_checker.py`). A call that the routing sends to this peer's own
stage is served in process (`StageServer.serve_local`): no frame, signature or hash, and never
spot-checked.

How many microbatches are in flight follows the pipeline (`peer/concurrency.py`): a multiple of the
swarm's bottleneck rate times a microbatch's unloaded trip through the stages, shared among the
trainers.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from torch import Tensor

from swarmhub.presets import get_preset
from swarmhub.stage_cost import stage_bytes_per_sample
from swarmhub.wire import (
    MicrobatchDone,
    MicrobatchFailed,
    PeerEndpoint,
    PeerUnreachable,
    RunSpec,
    ServedCall,
    SpotCheckMismatch,
    StageTotal,
    WorkGrant,
)

from .concurrency import chain_seconds, microbatches_in_flight
from .data import SampleSource
from .frame_auth import AuthError, FrameSigner, SenderVerifier
from .frame_headers import (
    BackwardCall,
    BackwardReply,
    ErrorReply,
    ForwardBackwardCall,
    ForwardCall,
    ForwardReply,
    LossReply,
    Reply,
    StageCall,
)
from .frames import FrameError, FrameLimit, Payload, assemble_call, encode_payload, open_reply
from .routing import StageRouter
from .spot_checker import SpotChecker, WholeCall
from .stage_worker import NOT_KEPT, NotKept, StageError
from .transport import FramePool, TransportError, UnlistedAddress

log = logging.getLogger(__name__)

MAX_ATTEMPTS_PER_CALL = 6
MAX_LOSS = 1e4
"""The wire refuses losses beyond this (a byte-level model starts near ln 256): the microbatch failed."""
NO_PEER_WAIT_S = 0.5
NO_PEER_PATIENCE_S = 30.0
"""How long a call waits for any peer of its stage to appear before the microbatch is given up."""

R = TypeVar("R", bound=Reply)
LocalServe = Callable[[StageCall, dict[str, Tensor]], Awaitable[tuple[Reply, dict[str, Tensor]]]]


class CallFailed(RuntimeError):
    pass


class ForwardNotKept(CallFailed):
    """The peer asked for a cached backward no longer holds the forward: not its fault."""


@dataclass(frozen=True, kw_only=True)
class Kept:
    """Where a stage's forward of a microbatch was served, and the signed call that carried its input."""

    peer: int
    frame: bytes
    address: str = ""
    """Where the peer was called (empty: in process). The backward goes there even once the peer is
    left out of this trainer's sample of a large stage (`Trainer.update_swarm`)."""


@dataclass(kw_only=True)
class TrainerStats:
    microbatches_done: int = 0
    microbatches_failed: int = 0
    retries: int = 0
    samples_done: int = 0
    kept_backwards: int = 0
    """Backward calls served from the forward their peer kept (no input sent, nothing recomputed)."""
    full_backwards: int = 0
    """Backward calls that carried the input again (the keeper was gone or had evicted it)."""


class Trainer:
    def __init__(
        self,
        *,
        run: RunSpec,
        peer_id: int,
        signer: FrameSigner,
        verifier: SenderVerifier,
        samples: SampleSource,
        pool: FramePool,
        request_work: Callable[[], Awaitable[WorkGrant | None]],
        report: Callable[
            [MicrobatchDone | MicrobatchFailed | PeerUnreachable | SpotCheckMismatch], Awaitable[bool]
        ],
        call_timeout_s: float,
        max_frame_bytes: FrameLimit,
        concurrency: int | None = None,
        serve_local: LocalServe | None = None,
    ) -> None:
        self.run = run
        self.peer_id = peer_id
        self.signer = signer
        self.verifier = verifier
        """Checks that each reply is the dialled peer's answer to the call it was sent."""
        self.samples = samples
        self.pool = pool
        self.request_work = request_work
        self.report = report
        self.call_timeout_s = call_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.serve_local = serve_local
        """Serves a call to this peer's own stage in process (`StageServer.serve_local`); None: every
        call goes through the data plane."""
        self.fixed_concurrency = concurrency
        """A fixed number of microbatches in flight (tests); None: chosen from the measured pipeline."""
        self.stage_bytes = stage_bytes_per_sample(
            run.num_stages, run.seq_len, get_preset(run.model_preset).d_model, run.compression
        )
        """Data-plane bytes per sample through a peer of each stage, forward and backward: what a
        router charges the peer it picks (`_call`)."""
        self.concurrency = concurrency or microbatches_in_flight(
            stage_rates=[],
            round_trip_s=None,
            microbatch_size=run.microbatch_size,
            trainers=1,
            num_stages=run.num_stages,
            serving_peers=0,
        )
        self._trainers = 1
        self._stage_rates: list[float] = []
        self._chain_s: float | None = None
        self._serving_peers = 0
        self.routers = [StageRouter() for _ in range(run.num_stages)]
        self.addresses: dict[int, str] = {}
        """The peers the latest swarm view listed, which routing and spot checks choose from."""
        self._listed: dict[int, PeerEndpoint] = {}
        self._sampled: set[int] = set()
        """Stages the latest view listed only a sample of: a peer of theirs missing from it may be live."""
        self.checker = SpotChecker(
            run=run,
            peer_id=peer_id,
            signer=signer,
            verifier=verifier,
            pool=pool,
            routers=self.routers,
            addresses=lambda: self.addresses,
            report=report,
            call_timeout_s=call_timeout_s,
            max_frame_bytes=max_frame_bytes,
        )
        self.stats = TrainerStats()
        self._served: dict[str, list[ServedCall]] = {}
        """Per microbatch in flight: its successful stage calls, timed, for the coordinator."""
        self.work_available = asyncio.Event()
        self.work_available.set()

    def update_swarm(
        self, peers: list[PeerEndpoint], stages: Sequence[StageTotal] = (), own: PeerEndpoint | None = None
    ) -> None:
        """Take a swarm view: the peers it lists (a large stage's only a sample of them) and every
        stage's totals (none from a coordinator that lists every peer). `own`: this peer, ready to
        serve its stage, where the view's sample of that stage left it out (`SwarmView.omits_recipient`):
        it is a candidate all the same, its calls served in process."""
        num_stages = self.run.num_stages
        totals = list(stages) or [StageTotal.of(p for p in peers if p.stage == s) for s in range(num_stages)]
        counts = [sum(1 for p in peers if p.stage == s) for s in range(num_stages)]
        sampled = {s for s, total in enumerate(totals[:num_stages]) if total.peers > counts[s]}
        if own is not None and own.stage is not None and all(p.peer_id != own.peer_id for p in peers):
            peers = [*peers, own]
        listed = {p.peer_id: p for p in peers}
        # A peer missing from a stage listed whole is gone: its calls fail at once and are retried
        # elsewhere. One missing from a sample is most likely live (another member's sample lists it),
        # serving this trainer's calls or holding its kept forwards: those go on (`Kept.address`).
        addresses = {p.address for p in peers}
        for peer_id, before in self._listed.items():
            if peer_id not in listed and before.stage not in sampled and before.address not in addresses:
                self.pool.abandon(before.address)
        self._listed = listed
        self._sampled = sampled
        self.addresses = {p.peer_id: p.address for p in peers}
        for stage, router in enumerate(self.routers):
            members = [p for p in peers if p.stage == stage]
            # Queue lengths come from the peers' replies (`observe_queue`): the view's are seconds old.
            router.update_peers({p.peer_id: p.throughput for p in members})
        # The pipeline's figures go by the stages' totals, not by what this trainer was dealt.
        self._stage_rates = [total.rate for total in totals[:num_stages]]
        # `chain_seconds` takes a stage's mean measured rate as one peer's.
        means = [[t.rate / t.measured] if t.measured else [] for t in totals[:num_stages]]
        self._chain_s = chain_seconds(means, self.run.microbatch_size)
        self._serving_peers = sum(total.peers for total in totals)
        self._trainers = max(1, self._serving_peers)
        self._retarget()

    def _retarget(self) -> None:
        if self.fixed_concurrency is not None:
            return
        self.concurrency = microbatches_in_flight(
            stage_rates=self._stage_rates,
            round_trip_s=self._chain_s,
            microbatch_size=self.run.microbatch_size,
            trainers=self._trainers,
            num_stages=self.run.num_stages,
            serving_peers=self._serving_peers,
        )

    async def run_forever(self) -> None:
        """Keep `concurrency` slots driving microbatches; a slot above the target ends after its
        microbatch, and missing ones are started as the target grows."""
        slots: dict[int, asyncio.Task[None]] = {}
        try:
            while True:
                for index in range(self.concurrency):
                    if index not in slots or slots[index].done():
                        if index in slots:
                            slots[index].result()
                        slots[index] = asyncio.ensure_future(self._slot(index))
                await asyncio.sleep(0.5)
        finally:
            for task in slots.values():
                task.cancel()

    async def _slot(self, index: int) -> None:
        while index < self.concurrency:
            await self.work_available.wait()
            grant = await self.request_work()
            if grant is None:
                # The step is full (or the run paused): wait for the coordinator to open the next one.
                self.work_available.clear()
                try:
                    async with asyncio.timeout(2.0):
                        await self.work_available.wait()
                except TimeoutError:
                    self.work_available.set()
                continue
            await self.train_microbatch(grant)

    async def train_microbatch(self, grant: WorkGrant) -> None:
        retries_before = self.stats.retries
        traffic = [0]
        try:
            loss = await self._pipeline(grant, traffic)
            if not math.isfinite(loss) or not 0 <= loss <= MAX_LOSS:
                raise CallFailed(f"the last stage answered a loss of {loss}")
        except CallFailed as exc:
            self._served.pop(grant.microbatch_id, None)
            self.stats.microbatches_failed += 1
            log.warning("microbatch %s failed: %s", grant.microbatch_id, exc)
            await self.report(
                MicrobatchFailed(step=grant.step, microbatch_id=grant.microbatch_id, reason=str(exc)[:500])
            )
            return
        self.stats.microbatches_done += 1
        self.stats.samples_done += grant.samples
        await self.report(
            MicrobatchDone(
                step=grant.step,
                microbatch_id=grant.microbatch_id,
                samples=grant.samples,
                loss=loss,
                retries=self.stats.retries - retries_before,
                bytes_sent=traffic[0],
                served=self._served.pop(grant.microbatch_id, []),
            )
        )

    async def _pipeline(self, grant: WorkGrant, traffic: list[int]) -> float:
        """Loss of the microbatch; `traffic[0]` accumulates the bytes moved for it."""
        inputs, targets = self.samples.batch(grant.first_sample, grant.samples)
        last = self.run.num_stages - 1
        stage_inputs: list[Tensor] = [inputs]
        kept: list[Kept] = []
        for stage in range(last):
            _, out, served = await self._call(
                stage,
                ForwardCall,
                ForwardReply,
                grant,
                {"x": stage_inputs[-1]},
                traffic,
                expect="y",
                keep=True,
            )
            kept.append(served)
            stage_inputs.append(out["y"])
        reply, out, _ = await self._call(
            last,
            ForwardBackwardCall,
            LossReply,
            grant,
            {"x": stage_inputs[last], "targets": targets},
            traffic,
        )
        for stage in range(last - 1, -1, -1):
            grad = out.get("grad_x")
            if grad is None:
                raise CallFailed(f"stage {stage + 1} answered without an input gradient")
            out = await self._backward(stage, grant, stage_inputs[stage], grad, kept[stage], traffic)
        return reply.loss

    async def _backward(
        self, stage: int, grant: WorkGrant, x: Tensor, grad: Tensor, kept: Kept, traffic: list[int]
    ) -> dict[str, Tensor]:
        """The stage's backward: from the kept forward if its peer still has it, else the full call."""
        whole = {"x": x, "grad": grad}
        # The keeper was listed when it served the forward. A later view that leaves it out of a
        # sampled stage says nothing of it: its address came with the forward, and the backward goes
        # there. Only a stage listed whole tells that a peer missing from it left.
        if kept.peer in self.addresses or stage in self._sampled:
            try:
                _, out, _ = await self._call(
                    stage,
                    BackwardCall,
                    BackwardReply,
                    grant,
                    {"grad": grad},
                    traffic,
                    keeper=kept,
                    whole=whole,
                )
                self.stats.kept_backwards += 1
                return out
            except CallFailed as exc:
                log.debug("kept backward of stage %d on peer %d: %s", stage, kept.peer, exc)
        self.stats.full_backwards += 1
        _, out, _ = await self._call(stage, BackwardCall, BackwardReply, grant, whole, traffic)
        return out

    async def _call(
        self,
        stage: int,
        call: type[StageCall],
        reply_kind: type[R],
        grant: WorkGrant,
        tensors: dict[str, Tensor],
        traffic: list[int],
        expect: str | None = None,
        keep: bool = False,
        keeper: Kept | None = None,
        whole: dict[str, Tensor] | None = None,
    ) -> tuple[R, dict[str, Tensor], Kept]:
        """One stage call, retried on other peers of the stage until one answers. With `keeper`, a
        cached backward to that peer only, tried once (`whole`: the full call's tensors, for a check).
        Returns the reply, its tensors, and who served it with the frame it was sent."""
        router = self.routers[stage]
        fields: dict[str, bool] = {"keep": True} if keep else {}
        if keeper is not None:
            fields["cached"] = True
        header = call(
            run_id=self.run.run_id,
            sender=self.peer_id,
            stage=stage,
            step=grant.step,
            microbatch_id=grant.microbatch_id,
            samples=grant.samples,
            timeout_s=self.call_timeout_s,
            **fields,
        )
        kind = header.kind
        # Encoded once; each attempt's frame is addressed to (and signed for) the peer it goes to.
        payload = encode_payload(tensors, self.run.compression)
        checking = self.checker.draw()
        tried: set[int] = set()
        errors: list[str] = []
        waited_since: float | None = None
        attempts = 0
        max_attempts = 1 if keeper is not None else MAX_ATTEMPTS_PER_CALL
        # The peer picked for a forward serves the sample's backward too (kept), so it is charged
        # all the bytes the sample moves through it there. Charging the call and a reply its size
        # counted a first-stage forward at its token ids, not the activations it returns and whose
        # gradient comes back: simulated at 1,000 peers, calls queued on first-stage peers with
        # slow links for a minute or more (p90 80 s against 1.5 s on the next stage).
        exchanged = int(self.stage_bytes[stage] * grant.samples)
        router.update_links(self.pool.links.rates())
        while attempts < max_attempts:
            now = time.monotonic()
            if keeper is not None:
                peer: int | None = keeper.peer
            else:
                exclude = frozenset(tried) if tried and len(tried) < len(router.peers()) else frozenset()
                peer = router.choose(grant.samples, now, exclude, nbytes=exchanged)
            if peer is None or (keeper is None and peer not in self.addresses):
                waited_since = waited_since or now
                if now - waited_since > NO_PEER_PATIENCE_S:
                    raise CallFailed(f"no live peer of stage {stage} for {NO_PEER_PATIENCE_S:.0f}s")
                await asyncio.sleep(NO_PEER_WAIT_S)
                continue
            waited_since = None
            attempts += 1
            local = peer == self.peer_id and self.serve_local is not None
            # Taken now: a view that arrives during the call may no longer list the peer.
            address = "" if local else keeper.address if keeper is not None else self.addresses[peer]
            frame = reply = b""
            started = time.monotonic()
            try:
                if local:
                    answer, out = await self._local_call(header, tensors, keeper)
                else:
                    frame, sent = assemble_call(header, payload, self.signer, receiver=peer)
                    reply, wire_s = await self.pool.timed_request(address, frame, self.call_timeout_s)
                    traffic[0] += len(frame) + len(reply)
                    answer, out = open_reply(
                        reply, max_bytes=self.max_frame_bytes, verifier=self.verifier, call=sent
                    )
                    self._measure_link(peer, len(frame) + len(reply), wire_s, answer)
                if isinstance(answer, ErrorReply):
                    if keeper is not None and answer.error.startswith(NOT_KEPT):
                        raise ForwardNotKept(answer.error)
                    raise CallFailed(answer.error or "refused without a reason")
                if not isinstance(answer, reply_kind):
                    raise CallFailed(f"answered a {kind} call with a {answer.kind} frame")
                if expect is not None and expect not in out:
                    raise CallFailed(f"reply lacks tensor {expect!r}")
            except ForwardNotKept:
                raise
            except (TransportError, FrameError, AuthError, CallFailed) as exc:
                if isinstance(exc, TransportError) and not isinstance(exc, UnlistedAddress):
                    # No answer at all (a refusal would be an error frame): the coordinator decides
                    # from several trainers' reports whether the peer is gone.
                    await self.report(PeerUnreachable(peer_id=peer, reason=str(exc)[:500]))
                router.report_failure(peer, time.monotonic())
                tried.add(peer)
                self.stats.retries += 1
                errors.append(f"peer {peer}: {exc}")
                log.info(
                    "stage %d %s call to peer %d failed (%s); retrying elsewhere", stage, kind, peer, exc
                )
                continue
            router.report_success(peer)
            router.observe_queue(peer, getattr(answer, "queued", 0), time.monotonic())
            # A trainer does not check its own peer: it has no reason to doubt it, and no signed
            # frames of the call to show a referee.
            if checking and not local:
                self.checker.start(
                    header, payload, peer, frame, reply, answer, out, self._whole(header, whole, keeper)
                )
            elapsed = max(time.monotonic() - started, 1e-6)
            compute = min(getattr(answer, "compute_s", 0.0), elapsed, 3600.0)
            # What the call did not spend inside the serving peer; never more than its compute left,
            # so a peer that does not say (server_s 0) or understates cannot make a call's parts
            # add up to more than the call.
            network = elapsed - getattr(answer, "server_s", 0.0)
            served = ServedCall(
                peer_id=peer,
                samples=grant.samples,
                seconds=min(elapsed, 3600.0),
                compute_seconds=compute,
                network_seconds=min(max(network, 0.0), elapsed - compute, 3600.0),
            )
            self._served.setdefault(grant.microbatch_id, []).append(served)
            return answer, out, Kept(peer=peer, frame=frame, address=address)
        raise CallFailed(f"stage {stage} {kind} failed {attempts} times: " + "; ".join(errors[-3:]))

    def _measure_link(self, peer: int, nbytes: int, wire_s: float, answer: Reply) -> None:
        """A call's link reading: its bytes over its time less what the serving peer says it held
        the call (`server_s`: queueing, compute and coding). An estimate of its compute from its
        rate left its queue in: with compute slowed 10x, eight swarm-ref peers' links read near
        0.5 MB/s on loopback."""
        self.pool.links.observe(peer, nbytes, wire_s, time.monotonic(), getattr(answer, "server_s", 0.0))

    async def _local_call(
        self, header: StageCall, tensors: dict[str, Tensor], keeper: Kept | None
    ) -> tuple[Reply, dict[str, Tensor]]:
        """A call to this peer's own stage server, in process; its refusals raise as a remote one's."""
        assert self.serve_local is not None
        try:
            async with asyncio.timeout(self.call_timeout_s):
                return await self.serve_local(header, tensors)
        except NotKept as exc:
            if keeper is not None:
                raise ForwardNotKept(str(exc)) from None
            raise CallFailed(str(exc)) from None
        except (StageError, TimeoutError) as exc:
            raise CallFailed(str(exc) or f"no answer within {self.call_timeout_s:g}s") from None

    def _whole(
        self, header: StageCall, whole: dict[str, Tensor] | None, keeper: Kept | None
    ) -> WholeCall | None:
        """For a check of a cached backward: the full call for the checking peer, and the evidence of
        where the checked peer got the input."""
        if keeper is None or whole is None:
            return None
        full: Payload = encode_payload(whole, self.run.compression)
        return WholeCall(
            header=header.model_copy(update={"cached": False}), payload=full, forward_frame=keeper.frame
        )
