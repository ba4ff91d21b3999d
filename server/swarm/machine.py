"""A run's coordination logic as a pure state machine: `RunMachine.handle(input) -> decisions`.

Layers: `step_cycle.StepCycle` (the phases of a step) <- `membership.Membership` (who serves what)
<- `verification.Verification` (who computes wrong) <- `RunMachine` (the one entry point, peer
messages, the clock).
No I/O and no clock: inputs carry `now`, decisions are returned for the shell to carry out.
"""

from __future__ import annotations

from typing import Any

from server.policies.health import HealthInputs, HealthWatch, RunHealth, RunState, StageInput, run_health
from server.policies.silence import Silence, silence
from server.swarm import decisions as do
from server.swarm import inputs as on
from server.swarm.members import Member
from server.swarm.step_cycle import VIEW_GAP_S, Phase
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
    PartsChecked,
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
STALL_AFTER_HEARTBEAT_TIMEOUTS = 4
"""A whole swarm that finishes no work for this many heartbeat timeouts (and at least an averaging
deadline, the longest a healthy step may sit in averaging) counts as stalled."""


class RunMachine(Verification):
    """A run's whole coordination logic: the one entry point, peer messages and the clock, over
    `Verification` (spot checks and contribution checks), `Membership` (who serves what) and
    `StepCycle` (the phases of the step)."""

    def __init__(self, *, now: float, **kwargs: Any) -> None:
        super().__init__(now=now, **kwargs)
        self.watch = HealthWatch(started=now)
        self.last_tick = now
        self.health: RunHealth | None = None
        """As last decided (`do.HealthChanged`); computed on every tick."""
        self.stalled_since: float | None = None
        """When the open stall began (recorded as `run_stalled`, not yet `run_recovered`)."""

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
                if event.status == RunStatus.ACTIVE:
                    self.watch.progressed(event.now)  # resumed: work is expected from now on
                self._check_health(event.now)
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
                    # Whatever the owner kicked it for, its share of a finished average is not kept.
                    self._forget(member, event.now, distrusted=True)
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
                member.take_reading()
                self._count_checks(member, message.spot_checks)
                self._count_cache(member.peer_id, message.activation_cache)
                self._count_claims(member.peer_id, message.samples_done, message.compute_seconds)
            case WorkRequest():
                self._send(member, self._grant(member, now))
            case MicrobatchDone():
                if self._owns_grant(member, message.step, message.microbatch_id, now):
                    last = self.spec.num_stages - 1
                    for call in message.served:
                        server = self.members.get(call.peer_id)
                        if server is not None and server is not member:
                            server.observe(
                                member.peer_id,
                                call.samples,
                                call.seconds,
                                calls_per_sample=1 if server.stage == last else 2,
                                now=now,
                            )
                    self.watch.progressed(now)
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
                    self.watch.progressed(now)
                    round_.report(
                        member.peer_id,
                        message.attempt,
                        message.contributors,
                        message.counted,
                        message.grad_sum_norm_sq,
                    )
                    self._round_completed(message.stage, now)
                    self._check_norms(message.stage, now)
                    if member.peer_id in self.members:
                        self._averaging_reported(member, message, now)
                    self._maybe_check_parts(message.stage)
                    self._maybe_record(now)
            case PartsChecked():
                self.watch.progressed(now)
                self._parts_checked(member, message, now)
            case StepApplied():
                if self.phase == Phase.APPLYING and message.step == book.step:
                    self.watch.progressed(now)
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
        empty = self.unserved_stages()
        if empty:
            return NoWork(step=step, reason=f"stage {empty[0]} has no ready peer")
        if self.grant_cap is not None and len(self.book.outstanding) >= self.grant_cap:
            return NoWork(
                step=step,
                reason=f"{self.grant_cap} microbatches in flight, as many as the stages serve in time",
            )
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
        gap, self.last_tick = max(0.0, now - self.last_tick), now
        for member in list(self.members.values()):
            if member.peer_id not in self.members:
                continue
            verdict = silence(
                silent_s=now - member.last_seen,
                heartbeat_interval_s=self.settings.heartbeat_interval_s,
                heartbeat_timeout_s=timeout,
                probed=member.probed_silence == member.last_seen,
                reachable=member.reachable,
                coordinator_gap_s=gap,
            )
            if verdict == Silence.LOST:
                self._out.append(do.Close(peer_id=member.peer_id, code=1001, reason="heartbeat timeout"))
                self._forget(member, now)
                self._depart(member, PeerState.LOST, f"no heartbeat for {timeout:g}s")
            elif verdict == Silence.PROBE:
                member.probed_silence = member.last_seen
                self._out.append(do.ProbePeer(peer_id=member.peer_id, address=member.address))
        since_view = now - self.view_sent
        if since_view >= SWARM_VIEW_REFRESH_S or (self.view_due and since_view >= VIEW_GAP_S):
            self._send_view(now)
        self._retry_record(now)
        self._expire_rounds(now, self.blame.named(now))
        self._expire_cases(now)
        for member in list(self.members.values()):
            failed = member.load_failed_at
            if failed is not None and member.stage is not None and now - failed >= STAGE_RETRY_S:
                self._assign(member, member.stage, "loading its stage failed; trying again", now)
        self._seat_benched(now)
        self._reprobe(now)
        self._maybe_barrier(now)
        self._maybe_rebalance(now)
        self._check_health(now)

    # ---- health ---------------------------------------------------------------------------------

    def _check_health(self, now: float) -> None:
        """Compute the run's health; on a change tell the shell, and record a stall and its end."""
        stages = self.spec.num_stages
        ready, loading, rate = [0] * stages, [0] * stages, [0.0] * stages
        for member in self.members.values():
            if member.stage is None or member.stage >= stages:
                continue
            if member.ready:
                ready[member.stage] += 1
                rate[member.stage] += member.effective_throughput
            elif member.loading:
                loading[member.stage] += 1
        self.watch.observe(now, ready)
        timeout = self.settings.heartbeat_timeout_s
        health = run_health(
            HealthInputs(
                now=now,
                status=self.status,
                stages=tuple(
                    StageInput(
                        ready=ready[s],
                        loading=loading[s],
                        rate=rate[s],
                        last_ready=self.watch.last_ready.get(s),
                    )
                    for s in range(stages)
                ),
                peers=len(self.members),
                last_progress=self.watch.last_progress,
                whole_since=self.watch.whole_since,
                stall_after_s=max(
                    self.settings.averaging_deadline_s,
                    *(self.averaging_limit_s(s) for s in self.rounds),
                    STALL_AFTER_HEARTBEAT_TIMEOUTS * timeout,
                ),
            )
        )
        if self.health is not None and self.health.key() == health.key():
            return
        self.health = health
        if health.state == RunState.STALLED and self.stalled_since is None:
            self.stalled_since = health.since if health.since is not None else now
            self._event("run_stalled", f"stalled: {health.reason}", None, reason=health.reason)
        elif health.training and self.stalled_since is not None:
            stalled_for = now - self.stalled_since
            self.stalled_since = None
            self._event(
                "run_recovered",
                f"training again after {stalled_for:.0f}s stalled",
                None,
                stalled_s=round(stalled_for, 1),
            )
        self._out.append(do.HealthChanged(health=health, now=now))

    def _step_opened(self, now: float) -> None:
        for member in list(self.members.values()):
            if member.waiting_reason is not None and member.stage is not None:
                self._assign(member, member.stage, member.waiting_reason, now)
        self._maybe_rebalance(now)
