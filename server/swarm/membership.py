"""Who serves what: joins and reachability, stage assignments, departures, blame, rebalancing.

The middle layer of a run's state machine (`StepCycle` <- `Membership` <- `RunMachine`). Peers
that join or fall behind while a step is averaging wait for the step boundary before they are
(re)assigned, so a peer is assigned once per real change of the swarm, never in a loop. A peer
the coordinator cannot reach trains only, and a stage is loaded from a live peer or a checkpoint
whenever one exists: a failed load is retried, never replaced by a fresh initialization.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from server.policies.averaging import pushing_rate
from server.policies.averaging_pace import RoundBudget, StepAveraging, slower_upload, step_s
from server.policies.grant_pacing import served_rate
from server.policies.rate_estimate import RateEstimate
from server.policies.rebalance import (
    COPY_SOURCES,
    PeerLoad,
    choose_moves,
    inbound_link_rates,
)
from server.policies.rejoin_backoff import Evictions, record_eviction, serves_again_at
from server.policies.reprobe import reprobe_after_s
from server.policies.stage_choice import choose_stage
from server.policies.step_book import StepBook
from server.swarm import decisions as do
from server.swarm import inputs as on
from server.swarm.blame import REPORT_WINDOW_S, Blame, Verdict
from server.swarm.members import Member
from server.swarm.step_cycle import MachineSettings, Phase, StepCycle
from swarmhub.presets import get_preset
from swarmhub.stage_cost import (
    stage_bytes_per_sample,
    stage_flops,
    stage_state_bytes,
)
from swarmhub.status import PeerState, RunStatus
from swarmhub.wire import (
    FAULTY_CLOSE_CODE,
    ApplyStep,
    PeerUnreachable,
    Reachability,
    RunSpec,
    RunStatusChanged,
    StageReady,
    Welcome,
)

UNREACHABLE_CLOSE_CODE = 4000
STRIKE_LIMIT = 25
"""Reports the coordinator cannot accept before their sender is removed: a few happen to honest peers
(a report racing a reassignment), a stream of them is a peer trying its luck."""
REBALANCE_INTERVAL_S = 30.0
"""Rebalancing decides at most this often (except to fill an empty stage): the horizon a move must
pay for its copy within, time for a moved peer's rate to settle, and a bound on what planning over
thousands of peers costs the coordinator."""
STAGE_LOAD_REFRESH_S = 1.0
"""A joiner's stage is chosen by the stages' served rates as summed at most this long ago, plus the
joiners assigned since: summing over every member at every join makes a join storm of thousands
quadratic. Rates move slower than that; a departure or a move has them summed again at once."""
STATE_SOURCES = COPY_SOURCES
"""Peers offered to copy a stage's state from, tried in turn (the first may be slow or gone)."""


@dataclass(kw_only=True)
class StageLoad:
    """Per stage, the rate its members serve at and how many there are, as of `at`, and how long
    its averaging round may grow (`RoundBudget`)."""

    at: float
    rates: list[float]
    counts: list[int]
    rounds: RoundBudget


@dataclass(frozen=True, kw_only=True)
class Benched:
    """A member whose wait after an eviction (`policies.rejoin_backoff`) is not over: seated at the
    first tick from `until` by the stage it rejoined with, or the one it asked for."""

    until: float
    stage: int | None
    requested: int | None


@dataclass(kw_only=True)
class Unreached:
    """A member whose data plane the coordinator could not reach (it trains only), probed again at
    `reprobe_at` (`policies.reprobe`) and seated, by the stage it joined with or asked for, once a
    probe reaches it."""

    failed_probes: int
    reprobe_at: float
    probing: bool = False
    stage: int | None
    requested: int | None


class Membership(StepCycle):
    def __init__(
        self,
        *,
        spec: RunSpec,
        status: RunStatus,
        data_key: str,
        book: StepBook,
        rebalance: bool,
        settings: MachineSettings,
        last_apply: dict[int, ApplyStep],
        now: float,
    ) -> None:
        super().__init__(
            spec=spec, status=status, book=book, settings=settings, last_apply=last_apply, now=now
        )
        self.data_key = data_key
        self.view_seed = int.from_bytes(hashlib.blake2b(data_key.encode(), digest_size=8).digest(), "big")
        self.rebalance = rebalance
        self.last_decision = -1e9
        """When rebalancing was last decided (whether or not it moved a peer)."""
        self.blame = Blame()
        self.stage_load: StageLoad | None = None
        """What joiners' stages were last chosen by; None once a departure or a move changed it."""
        self.evictions: dict[int, Evictions] = {}
        """Peer id -> its evictions as unreachable, which delay its next stage (`rejoin_backoff`)."""
        self.benched: dict[int, Benched] = {}
        """Peer id -> the member waiting out its `evictions` before it is seated: only these are
        looked at each tick, not every member."""
        self.unreached: dict[int, Unreached] = {}
        """Peer id -> the member the coordinator could not reach, to be probed again."""

    def _join(self, event: on.PeerJoined) -> None:
        old = self.members.get(event.peer_id)
        if old is not None:
            # A second channel of a connected peer (the shell closed the first): a rejoin.
            self._forget(old, event.now)
        member = Member(
            peer_id=event.peer_id,
            name=event.name,
            address=event.address,
            throughput=event.throughput,
            last_seen=event.now,
            connected_at=event.now,
            fingerprint=event.fingerprint,
            trusted=event.trusted,
            rounds_held_up=self.held_up_before.pop(event.peer_id, 0),
        )
        self.members[member.peer_id] = member
        self._send(
            member,
            Welcome(
                peer_id=member.peer_id,
                run=self.spec,
                step=self.book.step,
                data_key=self.data_key,
                heartbeat_interval_s=self.settings.heartbeat_interval_s,
            ),
        )
        self._send(member, RunStatusChanged(status=self.status))
        # A wait left by an earlier channel ends with it: this join decides afresh.
        self.benched.pop(member.peer_id, None)
        self.unreached.pop(member.peer_id, None)
        back_at = serves_again_at(self.evictions.get(member.peer_id))
        if back_at > event.now:
            self.benched[member.peer_id] = Benched(
                until=back_at, stage=event.stage, requested=event.requested_stage
            )
        if event.probe_problem is not None:
            self.unreached[member.peer_id] = Unreached(
                failed_probes=1,
                reprobe_at=event.now + reprobe_after_s(1),
                stage=event.stage,
                requested=event.requested_stage,
            )
        if not self._reachability(member, event.probe_problem, benched_s=back_at - event.now):
            return
        self._seat(member, event.stage, event.requested_stage, event.now)

    def _reprobe(self, now: float) -> None:
        """Dial again the members the coordinator could not reach whose time has come."""
        for peer_id, unreached in self.unreached.items():
            member = self.members.get(peer_id)
            if member is not None and not unreached.probing and now >= unreached.reprobe_at:
                unreached.probing = True
                self._out.append(do.ProbePeer(peer_id=peer_id, address=member.address))

    def _reprobed(self, member: Member, unreached: Unreached, result: on.ProbeResult) -> None:
        """A member that trained only answered a probe again, or did not."""
        if result.problem is not None:
            unreached.failed_probes += 1
            unreached.reprobe_at = result.now + reprobe_after_s(unreached.failed_probes)
            unreached.probing = False
            return
        del self.unreached[member.peer_id]
        bench = self.benched.get(member.peer_id)
        benched_s = bench.until - result.now if bench is not None else 0.0
        if self._reachability(member, None, benched_s=benched_s):
            self.benched.pop(member.peer_id, None)
            self._seat(member, unreached.stage, unreached.requested, result.now)

    def _seat_benched(self, now: float) -> None:
        """Seat the members whose wait after an eviction (`policies.rejoin_backoff`) is over."""
        for peer_id, bench in list(self.benched.items()):
            member = self.members.get(peer_id)
            if member is None:
                del self.benched[peer_id]
            elif now >= bench.until and member.reachable:
                del self.benched[peer_id]
                self._seat(member, bench.stage, bench.requested, now)

    def _seat(self, member: Member, stage: int | None, requested: int | None, now: float) -> None:
        """Give a (re)joined member the stage it served before, else the weakest one."""
        if stage is not None:
            self._assign(member, stage, "rejoined its stage", now)
            return
        load = self._current_stage_load(now)
        # A joiner's upload is not measured yet: it adds a push at its stage's pace.
        stage = choose_stage(load.rates, load.counts, requested, admits=lambda s: load.rounds.admits(s, None))
        self._assign(member, stage, "joined", now)
        # `_assign` drops the stage load (a move or a rejoin changes it unseen); this joiner is added.
        load.rates[stage] += served_rate(
            member.effective_throughput, member.inbound_link, self._bytes_per_sample()[stage]
        )
        load.counts[stage] += 1
        load.rounds.join(stage, None)
        self.stage_load = load

    def _current_stage_load(self, now: float) -> StageLoad:
        """The stages' served rates as a joiner's stage is chosen by, summed again if older than
        `STAGE_LOAD_REFRESH_S`. Each member counts at what it serves: a peer whose links carry less
        than it computes weakens its stage, and a stage of such peers is the one a joiner should
        strengthen."""
        if self.stage_load is not None and now - self.stage_load.at < STAGE_LOAD_REFRESH_S:
            return self.stage_load
        per_sample = self._bytes_per_sample()
        rates, counts = [0.0] * self.spec.num_stages, [0] * self.spec.num_stages
        # A round budget keeps each stage's count and slowest upload only: tallied in this pass
        # rather than from an `Uplink` per member (this runs about once a second in a large swarm).
        slowest: list[float | None] = [None] * self.spec.num_stages
        for m in self.members.values():
            if m.stage is not None:
                rates[m.stage] += served_rate(m.effective_throughput, m.inbound_link, per_sample[m.stage])
                counts[m.stage] += 1
                upload = pushing_rate(m.inbound_link, m.rounds_held_up)
                slowest[m.stage] = slower_upload(slowest[m.stage], upload)
        collect_s = step_s(self.spec.target_batch_size, min(rates, default=0.0), 0.0)
        return StageLoad(
            at=now,
            rates=rates,
            counts=counts,
            rounds=RoundBudget(
                counts,
                slowest,
                self._push_bytes(),
                collect_s,
                self.round_times.scales(),
                self.settings.patterns,
            ),
        )

    def _reachability(self, member: Member, problem: str | None, *, benched_s: float) -> bool:
        """Tell the peer what the probe of its data plane found; True if it may serve a stage now."""
        port = member.address.rsplit(":", 1)[-1]
        if problem is None and benched_s > 0:
            detail = (
                f"your data plane at {member.address} is reachable from the coordinator, but other peers"
                f" could not reach it lately: this peer serves a stage again in {benched_s:.0f}s"
                " (it trains meanwhile, if it has a trainer)"
            )
        elif problem is None:
            detail = f"your data plane at {member.address} is reachable from the coordinator"
        else:
            detail = (
                f"your port {port} is not reachable from the coordinator at {member.address} ({problem}): "
                "open it (or forward it and pass --announce host:port) to serve a stage; "
                "until then this peer trains only"
            )
        member.reachable = problem is None
        self._send(member, Reachability(reachable=member.reachable, address=member.address, detail=detail))
        self._out.append(
            do.RecordReachability(peer_id=member.peer_id, reachable=member.reachable, detail=detail)
        )
        return member.reachable and benched_s <= 0

    def _assign(self, member: Member, stage: int, reason: str, now: float) -> None:
        """Give `member` a stage; it becomes routable once it reports StageReady for the current step."""
        self.stage_load = None
        self._place(member, stage)
        member.ready = False
        member.restart_rate()
        member.load_failed_at = None
        member.offered_sources = frozenset()
        if self.phase != Phase.COLLECTING:
            member.waiting_reason = reason
            return
        member.waiting_reason = None
        member.assigned_at = now
        step = self.book.step
        # Peers already offered to another loading peer come last, so movers copy in parallel.
        # Sources are always peers of the loader's own stage: only this stage's loaders can hold them.
        loaders = [m for m in self.staged[stage].values() if m.loading and m is not member]
        busy = {p for m in loaders for p in m.offered_sources}
        ranked = sorted(self.ready(stage), key=lambda m: (m.peer_id in busy, -m.effective_throughput))
        sources = ranked[:STATE_SOURCES] if step > 0 else []
        member.offered_sources = frozenset(m.peer_id for m in sources)
        apply = self.last_apply.get(stage)
        self._out.append(
            do.AssignStage(
                peer_id=member.peer_id,
                stage=stage,
                step=step,
                reason=reason,
                state_sources=tuple(m.endpoint() for m in sources),
                apply=apply if apply is not None and apply.step == step - 1 else None,
                # A trusted referee must not take a party's word for the stage's weights.
                corroborate=member.trusted,
            )
        )

    def _forget(self, member: Member, now: float, *, distrusted: bool = False) -> None:
        """Route around a departed peer at once: its work failed, and its averaging round is tried
        again without it, unless the round already completed (the others apply the sum they agreed
        on) and the peer is not `distrusted` (removed as faulty: nothing of it is kept)."""
        del self.members[member.peer_id]
        self.unreached.pop(member.peer_id, None)
        self._unplace(member)
        self.stage_load = None
        if member.rounds_held_up:
            self.held_up_before[member.peer_id] = member.rounds_held_up
        self.blame.forget(member.peer_id)
        self.book.fail_trainer(member.peer_id)
        if self.phase == Phase.AVERAGING:
            for stage, round_ in list(self.rounds.items()):
                if round_.restarts_without(member.peer_id, distrusted=distrusted):
                    self._restart_round(stage, frozenset({member.peer_id}), now)
                elif member.peer_id in round_.group and round_.awaits_check():
                    # Its part check is not waited for: the others' figures are judged without it.
                    self._maybe_judge_parts(stage, now)
            self._maybe_record(now)
        elif self.phase == Phase.APPLYING:
            self.pending_apply.discard(member.peer_id)
            self._maybe_open_next(now)
        elif self.phase == Phase.COLLECTING:
            self._maybe_barrier(now)
            self._maybe_rebalance(now)
        self._view_changed(now)

    def _depart(self, member: Member, state: str, reason: str) -> None:
        self._out.append(
            do.RecordDeparture(peer_id=member.peer_id, state=state, reason=reason, stage=member.stage)
        )

    def _stage_ready(self, member: Member, message: StageReady, now: float) -> None:
        if message.stage != member.stage or member.waiting_reason is not None:
            return  # the answer to an assignment that a newer one replaced
        step = self.book.step
        if self.phase != Phase.COLLECTING:
            # Whatever it loaded predates the update being applied now: copy again at the boundary.
            member.waiting_reason = "state was behind; copying again"
            member.copies_behind += 1
            return
        if message.step != step:
            behind = message.step < step
            member.copies_behind += behind
            self._assign(
                member, message.stage, f"state was {'behind' if behind else 'ahead'}; copying again", now
            )
            return
        member.ready = True
        member.copies_behind = 0
        if message.origin == "checkpoint":
            self._event(
                "stage_restored",
                f"{member.name} restored stage {message.stage} from the latest checkpoint",
                member,
                stage=message.stage,
                step=step,
            )
        elif message.origin == "initialized" and step > 0:
            self._event(
                "stage_reinitialized",
                f"stage {message.stage} had no live peer or checkpoint to copy from at step {step}; "
                f"{member.name} starts it from a fresh initialization",
                member,
                stage=message.stage,
                step=step,
            )
        self._view_changed(now)
        self._maybe_barrier(now)
        self._maybe_rebalance(now)

    def _had_reason_to_call(self, reporter: Member, target: Member, now: float) -> bool:
        """A report counts only from a peer that had reason to call the target: a trainer granted work
        lately (or still holding a microbatch: a call times out long after its grant) while the target
        served a stage, a member of the target's averaging group, or a joiner the target was offered
        to as a state source."""
        if target.stage is not None and (
            now - reporter.last_granted <= REPORT_WINDOW_S or self.book.holds_outstanding(reporter.peer_id)
        ):
            return True
        round_ = self.rounds.get(target.stage) if target.stage is not None else None
        if (
            self.phase == Phase.AVERAGING
            and round_ is not None
            and {reporter.peer_id, target.peer_id} <= round_.group
        ):
            return True
        return target.peer_id in reporter.offered_sources

    def _strike(self, member: Member, why: str, now: float) -> None:
        """Count a report the coordinator could not accept against its sender; too many remove it."""
        member.strikes += 1
        if member.strikes == 1:
            self._event("peer_misbehaving", f"{member.name}: {why}", member, strikes=1)
        if member.strikes >= STRIKE_LIMIT:
            self._remove_faulty(
                member, f"sent {member.strikes} reports the coordinator could not accept ({why})", now
            )

    def _unreachable(self, reporter: Member, message: PeerUnreachable, now: float) -> None:
        target = self.members.get(message.peer_id)
        if target is None or target is reporter:
            return
        if not self._had_reason_to_call(reporter, target, now):
            self._strike(
                reporter, f"reported peer {target.peer_id} unreachable without reason to call it", now
            )
            return
        round_ = self.rounds.get(target.stage) if target.stage is not None else None
        # Kept with the round whatever the blame verdict: a probe that reaches a slow uploader clears
        # the blame, not the fact that its gradients came too late.
        if (
            self.phase == Phase.AVERAGING
            and round_ is not None
            and round_.missed(reporter.peer_id, target.peer_id)
        ):
            target.rounds_held_up += 1
        verdict = self.blame.report(
            target=target.peer_id,
            reporter=reporter.peer_id,
            reporter_reachable=reporter.reachable,
            others=len(self.members) - 1,
            now=now,
        )
        if verdict == Verdict.PROBE:
            self._out.append(do.ProbePeer(peer_id=target.peer_id, address=target.address))
        elif verdict == Verdict.EVICT:
            reporters = len(self.blame.reports.get(target.peer_id, {}))
            self._evict_unreachable(target, f"{reporters} peers could not reach it: {message.reason}", now)

    def _probed(self, result: on.ProbeResult) -> None:
        target = self.members.get(result.peer_id)
        if target is None:
            return
        unreached = self.unreached.get(target.peer_id)
        if unreached is not None:
            self._reprobed(target, unreached, result)
            return
        if result.problem is None:
            self.blame.cleared(target.peer_id)
        elif target.probed_silence == target.last_seen:
            self._evict_unreachable(
                target,
                f"no heartbeat for {result.now - target.last_seen:.0f}s, and the coordinator could not reach"
                f" it: {result.problem}",
                result.now,
            )
        elif target.peer_id in self.blame.reports:
            self._evict_unreachable(
                target, f"reported, and the coordinator could not reach it: {result.problem}", result.now
            )

    def _evict_unreachable(self, target: Member, reason: str, now: float) -> None:
        """Close its channel: it reconnects, and the probe at its rejoin decides whether it serves a stage."""
        self._out.append(
            do.Close(
                peer_id=target.peer_id,
                code=UNREACHABLE_CLOSE_CODE,
                reason="other peers cannot reach your data plane",
            )
        )
        self.evictions[target.peer_id] = record_eviction(self.evictions.get(target.peer_id), now)
        self._forget(target, now)
        self._depart(target, PeerState.LOST, reason)

    def _remove_faulty(self, target: Member, reason: str, now: float) -> None:
        """A peer whose reports contradict what its stage agrees on is removed for good (kicked: its
        credential no longer opens a channel); a retried round goes on without its share."""
        self._out.append(
            do.Close(peer_id=target.peer_id, code=FAULTY_CLOSE_CODE, reason=f"removed: {reason}")
        )
        self._forget(target, now, distrusted=True)
        self._depart(target, PeerState.KICKED, f"faulty: {reason}")

    def _check_norms(self, stage: int, now: float) -> None:
        """Once a round is complete, members whose gradient norm disagrees with the agreed one are faulty."""
        round_ = self.rounds[stage]
        if not round_.reported_all():
            return
        for peer_id in sorted(round_.disagreeing()):
            member = self.members.get(peer_id)
            if member is not None:
                reported = round_.norms_sq[peer_id]
                self._remove_faulty(
                    member,
                    f"reported a gradient norm of {reported:.6g} where stage {stage} agrees on "
                    f"{round_.grad_sum_norm_sq():.6g}",
                    now,
                )

    def _maybe_rebalance(self, now: float) -> None:
        """Make the moves the policy finds worth their cost, at a moment they lose nothing.

        A peer moved in the middle of a step would take its share of the step's gradients with it
        (counted lost on its old stage), so moves are decided only while the step has granted no
        sample yet: at the step boundary, right after the last step was averaged and applied. The
        exception is a stage left without a peer: the pipeline is stalled, and the empty stage has
        lost more of the step than a donor could. Not sooner than `REBALANCE_INTERVAL_S` after the
        last decision. A decision at a step boundary does not wait for copies under way
        (`policies.join_hold`); one for an empty stage does, since a copy may be filling it, and
        waits longer for a peer loading that very stage (`join_hold.waits_for_loader`).
        """
        if not self.rebalance or self.status != RunStatus.ACTIVE or self.phase != Phase.COLLECTING:
            return
        stage_empty = bool(self.unserved_stages())
        if not stage_empty and (self.book.samples_sent or now - self.last_decision < REBALANCE_INTERVAL_S):
            return
        if stage_empty and (self._a_copy_holds(now) or self._an_empty_stage_loads(now)):
            return  # a copy under way may be the one that fills it
        self.last_decision = now
        links = inbound_link_rates({m.peer_id: m.links for m in self.members.values()})
        spec = self.spec
        preset = get_preset(spec.model_preset)
        plan = choose_moves(
            [
                PeerLoad.measured(
                    peer_id=m.peer_id,
                    stage=m.stage,
                    # Ready but not read yet: its claim, as one unsettled reading.
                    rate=m.rate if m.rate.count else RateEstimate().observe(m.effective_throughput),
                    queue_length=m.queue_length,
                    link_rate=links.get(m.peer_id),
                    upload=pushing_rate(m.inbound_link, m.rounds_held_up),
                )
                for m in self.ready()
                if m.stage is not None
            ],
            spec.num_stages,
            horizon_s=REBALANCE_INTERVAL_S,
            stage_costs=stage_flops(preset, spec.num_stages, spec.seq_len),
            state_bytes=stage_state_bytes(preset, spec.num_stages),
            bytes_per_sample=stage_bytes_per_sample(
                spec.num_stages, spec.seq_len, preset.d_model, spec.compression
            ),
            averaging=StepAveraging(
                gradient_bytes=self._push_bytes(),
                batch_size=spec.target_batch_size,
                round_scale=self.round_times.scales(),
                round_measured_s=self.round_times.measured_s(),
                patterns=self.settings.patterns,
            ),
        )
        if plan is None:
            return
        # Every mover leaves its stage before any is offered sources: a peer trading places with
        # another must not be offered as the source of the stage it is leaving.
        for move in plan.moves:
            self.members[move.peer_id].ready = False
        for move in plan.moves:
            member = self.members[move.peer_id]
            self._event(
                "rebalance",
                f"{member.name}: stage {move.from_stage} -> {move.to_stage}; {plan.reason(move)}",
                member,
                from_stage=move.from_stage,
                to_stage=move.to_stage,
                rate_before=plan.rate_before,
                rate_after_estimated=plan.rate_after,
                expected_gain_samples=plan.gain,
                copy_s=move.copy_s,
                horizon_s=plan.horizon_s,
                planned_placement=list(plan.planned),
                planned_rate=plan.planned_rate,
                moves=len(plan.moves),
                fills_empty=move.fills_empty,
                step=self.book.step,
            )
            self._assign(member, move.to_stage, "rebalanced", now)
        # At once: the movers stop serving their old stage now, and moves never come in storms.
        self._send_view(now)
