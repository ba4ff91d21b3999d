"""A run's coordination logic as a pure state machine: `RunMachine.handle(input) -> decisions`.

Layers: `step_cycle.StepCycle` (the phases of a step) <- `membership.Membership` (who serves what)
<- `verification.Verification` (who computes wrong) <- `RunMachine` (the one entry point, peer
messages, the clock).
No I/O and no clock: inputs carry `now`, decisions are returned for the shell to carry out.
"""

from __future__ import annotations

from server.swarm import decisions as do
from server.swarm import inputs as on
from server.swarm.members import Member
from server.swarm.step_cycle import Phase
from server.swarm.verification import Verification
from swarmhub.status import PeerState, RunStatus
from swarmhub.wire import (
    ArbitrationVerdict,
    AveragingDone,
    Heartbeat,
    Kicked,
    Message,
    MicrobatchDone,
    MicrobatchFailed,
    NoWork,
    PeerUnreachable,
    RunStatusChanged,
    SpotCheckMismatch,
    StageLoadFailed,
    StageReady,
    StepApplied,
    WorkGrant,
    WorkRequest,
)

SWARM_VIEW_REFRESH_S = 10.0
"""Swarm views carry throughputs for routing; membership changes are sent at once, and a refresh this
often keeps rates current without sending every peer the whole swarm on every heartbeat."""
STAGE_RETRY_S = 5.0
"""A peer that could not load its stage is assigned it again (with the sources live then) this often."""


class RunMachine(Verification):
    """A run's whole coordination logic: the one entry point, peer messages and the clock, over
    `Verification` (spot checks and contribution checks), `Membership` (who serves what) and
    `StepCycle` (the phases of the step)."""

    # ---- the one entry point --------------------------------------------------------------------

    def handle(self, event: on.Input) -> list[do.Decision]:
        self._out = []
        match event:
            case on.PeerJoined():
                self._join(event)
            case on.ProbeResult():
                self._probed(event)
            case on.PeerLeft():
                member = self.members.get(event.peer_id)
                if member is not None:
                    self._forget(member, event.now)
                    self._depart(member, event.state, event.reason)
            case on.PeerSaid():
                member = self.members.get(event.peer_id)
                if member is not None:
                    member.last_seen = event.now
                    self._said(member, event.message, event.now)
            case on.Tick():
                self._tick(event.now)
            case on.StepRecorded():
                self._recorded(event.step, event.now)
            case on.StatusSet():
                self.status = event.status
                self._broadcast(RunStatusChanged(status=event.status))
            case on.CheckpointWanted():
                if self.status != RunStatus.ACTIVE:
                    self._request_checkpoint()
                else:
                    self.checkpoint_wanted = True
            case on.PeerRemoved():
                member = self.members.get(event.peer_id)
                if member is not None:
                    self._send(member, Kicked(reason=event.reason))
                    self._out.append(
                        do.Close(peer_id=member.peer_id, code=1008, reason=f"removed: {event.reason}")
                    )
                    self._forget(member, event.now)
        return self._out

    # ---- peer messages --------------------------------------------------------------------------

    def _said(self, member: Member, message: Message, now: float) -> None:
        book = self.book
        match message:
            case Heartbeat():
                member.throughput = message.throughput
                member.queue_length = message.queue_length
                member.samples_done = message.samples_done
                member.links = message.links
                self._count_checks(member, message.spot_checks)
                self._count_cache(member.peer_id, message.activation_cache)
            case WorkRequest():
                self._send(member, self._grant(member, now))
            case MicrobatchDone():
                if self._owns_grant(member, message.step, message.microbatch_id, now):
                    for call in message.served:
                        server = self.members.get(call.peer_id)
                        if server is not None and server is not member:
                            server.observe(member.peer_id, call.samples / call.seconds)
                    book.complete(
                        message.microbatch_id,
                        message.loss,
                        wire_bytes=message.bytes_sent,
                        retries=message.retries,
                        served=message.served,
                    )
                    self._maybe_barrier(now)
            case MicrobatchFailed():
                if self._owns_grant(member, message.step, message.microbatch_id, now):
                    book.fail(message.microbatch_id)
                    self._maybe_barrier(now)
            case StageReady():
                self._stage_ready(member, message, now)
            case StageLoadFailed():
                if message.stage == member.stage and not member.ready and member.waiting_reason is None:
                    # Assigned again on a later tick, with the sources live then; never started afresh.
                    member.load_failed_at = now
                    self._event(
                        "stage_load_failed",
                        f"{member.name} could not load stage {message.stage}: {message.reason}",
                        member,
                        stage=message.stage,
                        step=message.step,
                    )
            case AveragingDone():
                round_ = self.rounds.get(message.stage)
                if self.phase == Phase.AVERAGING and message.step == book.step and round_ is not None:
                    round_.report(
                        member.peer_id,
                        message.attempt,
                        message.contributors,
                        message.counted,
                        message.grad_sum_norm_sq,
                    )
                    self._check_norms(message.stage, now)
                    if member.peer_id in self.members:
                        self._averaging_reported(member, message, now)
                    self._maybe_record(now)
            case StepApplied():
                if self.phase == Phase.APPLYING and message.step == book.step:
                    self.pending_apply.discard(member.peer_id)
                    self._maybe_open_next(now)
            case PeerUnreachable():
                self._unreachable(member, message, now)
            case SpotCheckMismatch():
                self._mismatch(member, message, now)
            case ArbitrationVerdict():
                self._verdict(member, message, now)

    def _owns_grant(self, member: Member, step: int, microbatch_id: str, now: float) -> bool:
        """Only the trainer a microbatch was granted to may report it; reporting another's counts
        against the reporter. A report for a grant already closed (late, repeated) is just ignored."""
        grant = self.book.outstanding.get(microbatch_id) if step == self.book.step else None
        if grant is None:
            return False
        if grant.trainer_id != member.peer_id:
            self._strike(
                member, f"reported microbatch {microbatch_id}, granted to peer {grant.trainer_id}", now
            )
            return False
        return True

    def _grant(self, member: Member, now: float) -> WorkGrant | NoWork:
        step = self.book.step
        if self.status != RunStatus.ACTIVE:
            return NoWork(step=step, reason=f"run is {self.status}")
        if self.phase != Phase.COLLECTING:
            return NoWork(step=step, reason=f"step {step} is {self.phase}")
        empty = [s for s in range(self.spec.num_stages) if not self.ready(s)]
        if empty:
            return NoWork(step=step, reason=f"stage {empty[0]} has no ready peer")
        grant = self.book.grant(member.peer_id)
        if grant is None:
            return NoWork(step=step, reason=f"step {step} has all its microbatches")
        member.last_granted = now
        return WorkGrant(
            step=step,
            microbatch_id=grant.microbatch_id,
            first_sample=grant.first_sample,
            samples=grant.samples,
        )

    # ---- time -----------------------------------------------------------------------------------

    def _tick(self, now: float) -> None:
        timeout = self.settings.heartbeat_timeout_s
        for member in list(self.members.values()):
            if member.peer_id in self.members and now - member.last_seen > timeout:
                self._out.append(do.Close(peer_id=member.peer_id, code=1001, reason="heartbeat timeout"))
                self._forget(member, now)
                self._depart(member, PeerState.LOST, f"no heartbeat for {timeout:g}s")
        if now - self.view_sent >= SWARM_VIEW_REFRESH_S:
            self._send_view(now)
        self._retry_record(now)
        self._expire_rounds(now, self.blame.named(now))
        self._expire_cases(now)
        for member in list(self.members.values()):
            failed = member.load_failed_at
            if failed is not None and member.stage is not None and now - failed >= STAGE_RETRY_S:
                self._assign(member, member.stage, "loading its stage failed; trying again", now)
        self._maybe_barrier(now)
        self._maybe_rebalance(now)

    def _step_opened(self, now: float) -> None:
        for member in list(self.members.values()):
            if member.waiting_reason is not None and member.stage is not None:
                self._assign(member, member.stage, member.waiting_reason, now)
        self._maybe_rebalance(now)
