"""The phases of a run's global step, the half of `RunMachine` that moves the step along.

A global step goes through four phases:
- COLLECTING: microbatches are granted and reported done; peers join, load stages and move.
- AVERAGING: each stage's ready peers average their gradients (one round per stage; a member that
  is lost restarts its stage's round without it).
- RECORDING: the step, its books and each stage's update are being written to the database. Nothing
  is applied before that write is confirmed (`StepRecorded`), so a coordinator that dies at any point
  never leaves a peer ahead of the database: a step recorded is never undone, and no update is
  applied that the database does not hold.
- APPLYING: members apply the recorded update; when all have (or are gone) the next step opens.

Each step's record says where its time went (`server.policies.step_time`): the moments it opened,
reached its barrier and was averaged are kept here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from server.policies.averaging import (
    AveragingRound,
    PatternRule,
    averaging_pattern,
    push_allowance_s,
    pushing_rate,
    round_limit_s,
)
from server.policies.averaging_pace import round_s
from server.policies.butterfly_parts import part_weights
from server.policies.grant_pacing import outstanding_cap, served_rate
from server.policies.join_hold import barrier_waits, waits_for_loader
from server.policies.ledger import FinishedMicrobatch, PeerCredit, Pending, Tally, claim_since, credit_step
from server.policies.rebalance import inbound_link_rates
from server.policies.round_timing import RoundTimes
from server.policies.step_book import StepBook
from server.policies.step_time import busiest_stage, split_step_time
from server.policies.view_sample import deal_stages, view_groups, view_sample
from server.swarm import decisions as do
from server.swarm.members import Member
from swarmhub.presets import get_preset
from swarmhub.schedule import clip_scale, learning_rate
from swarmhub.stage_cost import stage_bytes_per_sample, stage_parameters, stage_push_bytes
from swarmhub.status import RunStatus
from swarmhub.wire import (
    ActivationCacheTally,
    ApplyStep,
    CheckpointRequest,
    Message,
    RunSpec,
    RunStatusChanged,
    StageTotal,
    StepBarrier,
    StepCommitted,
    SwarmView,
)

RECORD_RETRY_S = 5.0
"""A step write that was not confirmed (a database hiccup) is asked for again this often."""
GRANT_CAP_REFRESH_S = 10.0
"""The grant cap is recomputed with a swarm view at most this often (it reads every member's links);
rates and links change slower than that."""
VIEW_GAP_S = 0.5
"""Views go out at most this often while peers come and go; the tick sends one held back. In a join
storm each peer that turns ready would otherwise send every member a view: N^2 frames for N joins."""


class Phase(StrEnum):
    COLLECTING = "collecting"
    AVERAGING = "averaging"
    RECORDING = "recording"
    APPLYING = "applying"


@dataclass(frozen=True, kw_only=True)
class MachineSettings:
    heartbeat_timeout_s: float
    heartbeat_interval_s: float
    """What peers are told to keep to when they connect."""
    checkpoint_every_steps: int
    averaging_deadline_s: float
    """The least time an averaging round gets before it goes on without the members holding it up."""
    patterns: PatternRule = field(default_factory=PatternRule)
    """Which rounds average in a butterfly (`averaging_pattern`)."""


class StepCycle:
    """Step state and the transitions between phases; decisions go to `self._out`."""

    def __init__(
        self,
        *,
        spec: RunSpec,
        status: RunStatus,
        book: StepBook,
        settings: MachineSettings,
        last_apply: dict[int, ApplyStep],
        now: float,
    ) -> None:
        self.spec = spec
        self.status = status
        self.book = book
        self.settings = settings
        self.last_apply = last_apply
        """Each stage's update of the last recorded step, re-sent to peers still holding its gradient."""
        self.phase = Phase.COLLECTING
        self.members: dict[int, Member] = {}
        self.staged: dict[int, dict[int, Member]] = {}
        """Stage -> the members assigned to it (peer id -> member), ready or not: what the questions
        asked at every grant, join and ready read (which of a stage's peers are ready, which stages
        have none) instead of every member of a swarm of thousands. Kept by `_place`, the one place
        a member's stage changes, and `_unplace`."""
        self.rounds: dict[int, AveragingRound] = {}
        self.round_started: dict[int, float] = {}
        self.round_modelled: dict[int, float] = {}
        """Each stage's round of this step as the link readings size it at the barrier."""
        self.round_times = RoundTimes(spec.num_stages)
        """How long rounds that completed at their first attempt took against `round_modelled`: the
        policies size rounds by it (`round_timing`)."""
        self.push_allowance: dict[int, float] = {}
        """Each round's push allowance as its barrier said (`push_allowance_s`)."""
        self.held_up_before: dict[int, int] = {}
        """Peer id -> `Member.rounds_held_up` of a departed member: an evicted slow uploader that
        reconnects is given the time it was found to need, not its reading's again."""
        self.noop_groups: dict[int, frozenset[int]] = {}
        """Stages whose round passed its deadline with nobody to blame: these members take an empty step."""
        self.pending_apply: set[int] = set()
        self.step_started = now
        self.barrier_at = now
        self.batch_in_at: tuple[int, float] | None = None
        """(step, when its batch was first complete): the start of its wait at the barrier."""
        self.averaged_at: float | None = None
        """When the previous step's rounds completed; None until one did since the machine started."""
        self.cache_seen: dict[int, ActivationCacheTally] = {}
        """Each peer's last activation-cache running totals, so a step books only what is new."""
        self.claims_seen: dict[int, Tally] = {}
        """Each peer's last heartbeat running totals of samples served and compute seconds."""
        self.pending: dict[int, Pending] = {}
        """What serving peers claimed and trainers received from them, not matched yet (the ledger)."""
        self.view_sent = -1e9
        self.view_due = False
        """The swarm changed since the last view, which went out less than `VIEW_GAP_S` before."""
        self.views_sent = 0
        """Turns the order of a stage too large for every peer to be listed (`view_sample.deal_stage`)."""
        self.view_seed = 0
        """Seeds the order stages' peers are dealt in (`view_sample.deal_stage`); the run's own."""
        self.grant_cap: int | None = None
        """Most microbatches outstanding at once (`grant_pacing`), as of `grant_cap_at`."""
        self.grant_cap_at = -1e9
        self.checkpoint_wanted = False
        self._recording: tuple[do.RecordStep, dict[int, ApplyStep]] | None = None
        self._record_asked = 0.0
        self._out: list[do.Decision] = []

    def ready(self, stage: int | None = None) -> list[Member]:
        if stage is None:
            return [m for m in self.members.values() if m.ready]
        return [m for m in self.staged.get(stage, {}).values() if m.ready]

    def unserved_stages(self) -> list[int]:
        """Stages with no ready peer (asked at every grant and ready): a stage's search stops at its
        first ready peer, usually the first it looks at."""
        return [
            s
            for s in range(self.spec.num_stages)
            if not any(m.ready for m in self.staged.get(s, {}).values())
        ]

    def _place(self, member: Member, stage: int) -> None:
        self._unplace(member)
        member.stage = stage
        self.staged.setdefault(stage, {})[member.peer_id] = member

    def _unplace(self, member: Member) -> None:
        if member.stage is not None:
            self.staged.get(member.stage, {}).pop(member.peer_id, None)

    def _step_opened(self, now: float) -> None:
        """What the machine does once a new step is open (assign peers that waited, rebalance)."""
        raise NotImplementedError

    def _maybe_barrier(self, now: float) -> None:
        if self.phase != Phase.COLLECTING or not self.book.ready_for_barrier():
            return
        if self.batch_in_at is None or self.batch_in_at[0] != self.book.step:
            self.batch_in_at = (self.book.step, now)
        if barrier_waits(now - self.batch_in_at[1], self._a_copy_holds(now)):
            return  # checked again when the joiner is ready, and on every tick
        self.phase = Phase.AVERAGING
        self.barrier_at = now
        self.rounds = {
            stage: AveragingRound(
                stage=stage, attempt=0, group=frozenset(m.peer_id for m in self.ready(stage))
            )
            for stage in range(self.spec.num_stages)
        }
        self.round_started = dict.fromkeys(self.rounds, now)
        self.noop_groups = {}
        for stage in self.rounds:
            self._send_barrier(stage)
        self._maybe_record(now)

    def _maybe_judge_parts(self, stage: int, now: float) -> None:
        """Judge a butterfly round's part check once every live member answered it (`Verification`,
        which can ban an owner its own figures convict)."""

    def _round_completed(self, stage: int, now: float) -> None:
        """Time a round that completed at its first attempt (a retried one waited out a deadline,
        which says nothing of how long pushes take), once."""
        round_ = self.rounds.get(stage)
        if round_ is None or round_.attempt != 0 or not round_.complete() or stage not in self.round_modelled:
            return
        self.round_times.timed(
            stage, modelled_s=self.round_modelled.pop(stage), measured_s=now - self.round_started[stage]
        )

    def _a_copy_holds(self, now: float) -> bool:
        """Whether any member's copy of its stage is young enough to be waited for (`join_hold`)."""
        return any(m.holds_step(now) for m in self.members.values())

    def _an_empty_stage_loads(self, now: float) -> bool:
        """Whether a member is loading a stage that has no ready peer, recently enough to be waited
        for (`join_hold.waits_for_loader`)."""
        empty = set(self.unserved_stages())
        return any(
            m.loading and m.stage in empty and waits_for_loader(now - m.assigned_at)
            for m in self.members.values()
        )

    def _restart_round(self, stage: int, without: frozenset[int], now: float) -> None:
        """A new attempt at the stage's round without these members (lost, or holding it up)."""
        self.rounds[stage] = self.rounds[stage].without(*without)
        self.round_started[stage] = now
        self._send_barrier(stage)

    def _send_barrier(self, stage: int) -> None:
        round_ = self.rounds[stage]
        members = [self.members[p] for p in sorted(round_.group) if p in self.members]
        rates = [pushing_rate(m.inbound_link, m.rounds_held_up) for m in members]
        slowest = min((r for r in rates if r is not None), default=None)
        patterns = self.settings.patterns
        pushed = self._push_bytes()[stage]
        round_.pattern = averaging_pattern(len(members), pushed, slowest, patterns)
        allowance = push_allowance_s(self._stage_gradient_bytes(), len(members), slowest, round_.pattern)
        if round_.attempt == 0:
            self.round_modelled[stage] = round_s(len(members), pushed, slowest, patterns)
        self.push_allowance[stage] = allowance
        barrier = StepBarrier(
            step=self.book.step,
            attempt=round_.attempt,
            stage=stage,
            group=[m.endpoint() for m in members],
            push_timeout_s=allowance,
            pattern=round_.pattern,
            part_weights=part_weights(rates) if round_.pattern == "butterfly" else None,
        )
        self._out.append(do.Send(peer_ids=tuple(m.peer_id for m in members), message=barrier))

    def _maybe_record(self, now: float) -> None:
        if self.phase != Phase.AVERAGING or not all(r.complete() for r in self.rounds.values()):
            return
        self.phase = Phase.RECORDING
        spec, book = self.spec, self.book
        rate = learning_rate(
            book.step, peak=spec.learning_rate, warmup_steps=spec.warmup_steps, max_steps=spec.max_steps
        )
        stages = range(spec.num_stages)
        samples = {s: book.samples_of(self.rounds[s].counted()) for s in stages}
        scale = clip_scale(
            [self.rounds[s].grad_sum_norm_sq() / samples[s] ** 2 for s in stages if samples[s]]
        )
        summary = book.summarize([self.rounds[s].counted() for s in stages])
        times = split_step_time(
            previous_averaged=self.averaged_at,
            opened=self.step_started,
            barrier=self.barrier_at,
            averaged=now,
            compute_s=sum(book.served_compute.values()),
            network_s=sum(book.served_network.values()),
            serving_peers=len(book.served_compute),
        )
        stage_busy = busiest_stage(
            book.served_compute,
            {m.peer_id: m.stage for m in self.ready() if m.stage is not None},
            self.barrier_at - self.step_started,
        )
        credits = self._credits(now)
        self.averaged_at = now
        applies = {
            s: ApplyStep(
                step=book.step,
                stage=s,
                attempt=self.rounds[s].attempt,
                learning_rate=rate,
                samples=samples[s],
                grad_scale=scale,
            )
            for s in stages
        }
        record = do.RecordStep(
            step=book.step,
            loss=summary.loss,
            samples_sent=summary.samples_sent,
            samples_done=summary.samples_done,
            samples_lost=summary.samples_lost,
            samples_counted=tuple(t.counted for t in summary.stage_tallies),
            duration_s=now - self.step_started,
            next_sample=book.next_sample,
            wire_bytes=book.wire_bytes,
            retries=book.retries,
            check_calls=book.check_calls,
            check_bytes=book.check_bytes,
            check_seconds=book.check_seconds,
            check_largest_agreeing=book.check_largest_agreeing,
            time_compute_s=times.compute_s,
            time_network_s=times.network_s,
            time_waiting_s=times.waiting_s,
            time_averaging_s=times.averaging_s,
            time_coordinator_s=times.coordinator_s,
            stage_busy=stage_busy,
            cache_hits=book.cache_hits,
            cache_misses=book.cache_misses,
            learning_rate=rate,
            grad_scale=scale,
            attempts=tuple(self.rounds[s].attempt for s in stages),
            finished=spec.max_steps is not None and book.step + 1 >= spec.max_steps,
            credits=credits,
        )
        self._recording = (record, applies)
        self._record_asked = now
        self._out.append(record)

    def _recorded(self, step: int, now: float) -> None:
        if self.phase != Phase.RECORDING or self._recording is None or step != self.book.step:
            return
        _, applies = self._recording
        self.phase = Phase.APPLYING
        self.last_apply = applies
        self.pending_apply = set()
        for stage, message in applies.items():
            recipients = self.rounds[stage].group | self.noop_groups.get(stage, frozenset())
            members = tuple(p for p in sorted(recipients) if p in self.members)
            self._out.append(do.Send(peer_ids=members, message=message))
            self.pending_apply.update(members)
        self._maybe_open_next(now)

    def _maybe_open_next(self, now: float) -> None:
        if self.phase != Phase.APPLYING or self.pending_apply or self._recording is None:
            return
        record, _ = self._recording
        self._recording = None
        self.book = self.book.next_book()
        self.phase = Phase.COLLECTING
        self.rounds = {}
        self.step_started = now
        self._broadcast(StepCommitted(step=record.step, loss=record.loss, next_step=self.book.step))
        if (
            record.finished
            or self.checkpoint_wanted
            or self.book.step % self.settings.checkpoint_every_steps == 0
        ):
            self._request_checkpoint()
        if record.finished:
            self.status = RunStatus.FINISHED
            self._broadcast(RunStatusChanged(status=RunStatus.FINISHED))
            return
        self._step_opened(now)

    def _credits(self, now: float) -> tuple[PeerCredit, ...]:
        """Each peer's contribution to the step being recorded (`server.policies.ledger`); the
        window for uptime runs from the previous step's averaging (or this step's start) to now."""
        book = self.book
        failed: dict[int, int] = {}
        for grant in book.failed.values():
            failed[grant.trainer_id] = failed.get(grant.trainer_id, 0) + 1
        since = self.step_started if self.averaged_at is None else self.averaged_at
        result = credit_step(
            finished=[
                FinishedMicrobatch(
                    microbatch_id=mb,
                    trainer_id=grant.trainer_id,
                    samples=grant.samples,
                    bytes_moved=book.reports.get(mb, (0, ()))[0],
                    served=book.reports.get(mb, (0, ()))[1],
                )
                for mb, grant in book.done.items()
            ],
            counted_per_stage=[frozenset(self.rounds[s].counted()) for s in range(self.spec.num_stages)],
            failed_by_trainer=failed,
            pending=self.pending,
            uptime_s={p: now - max(since, m.connected_at) for p, m in self.members.items()},
        )
        # Figures of peers that are gone can no longer be matched.
        self.pending = {p: c for p, c in result.pending.items() if p in self.members}
        return result.credits

    def _count_claims(self, peer_id: int, samples_total: int, compute_total_s: float) -> None:
        """Book a heartbeat's serving claims new since the peer's last one."""
        new, self.claims_seen[peer_id] = claim_since(
            self.claims_seen.get(peer_id), samples_total, compute_total_s
        )
        self.pending[peer_id] = self.pending.get(peer_id, Pending()).claim(new)

    def _count_cache(self, peer_id: int, tally: ActivationCacheTally) -> None:
        """Book a heartbeat's activation-cache hits and misses new since the peer's last one."""
        before = self.cache_seen.get(peer_id, ActivationCacheTally())
        if tally.hits < before.hits or tally.misses < before.misses:
            before = ActivationCacheTally()  # the peer restarted: its totals began again
        self.book.add_cache(tally.hits - before.hits, tally.misses - before.misses)
        self.cache_seen[peer_id] = tally

    def _request_checkpoint(self) -> None:
        """Ask the fastest ready peer of each stage to upload its state as of the step just opened."""
        self.checkpoint_wanted = False
        for stage in range(self.spec.num_stages):
            holders = sorted(self.ready(stage), key=lambda m: -m.effective_throughput)
            if holders:
                self._send(holders[0], CheckpointRequest(step=self.book.step, stage=stage))

    def _retry_record(self, now: float) -> None:
        """Ask again for a step write that was not confirmed; nothing is applied meanwhile."""
        if (
            self.phase == Phase.RECORDING
            and self._recording is not None
            and now - self._record_asked >= RECORD_RETRY_S
        ):
            self._record_asked = now
            self._out.append(self._recording[0])

    def _expire_rounds(self, now: float, blamed: set[int]) -> None:
        """Rounds past their deadline go on without the members holding them up, so one peer's
        silence never stalls the run: first those that did not report, else those whose
        contributions others gave up waiting for (`AveragingRound.holding_up`; a slow uploader is
        reachable, so a probe clears the blame against it, but it still held the round up), else
        those others blame; with nobody to blame the stage takes an empty step (its samples lost)."""
        if self.phase != Phase.AVERAGING:
            return
        for stage, round_ in list(self.rounds.items()):
            limit = self.averaging_limit_s(stage)
            if round_.complete() or now - self.round_started[stage] < limit:
                continue
            drop = round_.going_on_without(blamed)
            if drop and drop != round_.group:
                for peer_id in drop:
                    if not round_.was_missed(peer_id):  # a missed member was counted at the report
                        self.members[peer_id].rounds_held_up += 1
                    self.members[peer_id].ready = False
                    self.members[peer_id].waiting_reason = "missed the step's averaging; copying again"
                self._event(
                    "averaging_deadline",
                    f"stage {stage}: averaging passed its {limit:.0f}s deadline; going on without peers "
                    f"{sorted(drop)}",
                    None,
                    stage=stage,
                    step=self.book.step,
                    dropped=sorted(drop),
                )
                self._restart_round(stage, drop, now)
            else:
                self.noop_groups[stage] = round_.group
                self.rounds[stage] = round_.without(*round_.group)
                self._event(
                    "averaging_deadline",
                    f"stage {stage}: averaging passed its {limit:.0f}s deadline with nobody to blame; "
                    "the stage takes an empty step",
                    None,
                    stage=stage,
                    step=self.book.step,
                    dropped=[],
                )
        self._maybe_record(now)

    def averaging_limit_s(self, stage: int) -> float:
        """How long the stage's round may take before it goes on without the members holding it up."""
        return round_limit_s(self.settings.averaging_deadline_s, self.push_allowance.get(stage, 0.0))

    def _push_bytes(self) -> list[float]:
        """Each stage's gradient sum as members push it (the run's codec)."""
        spec = self.spec
        preset = get_preset(spec.model_preset)
        return stage_push_bytes(stage_parameters(preset, spec.num_stages), spec.compression)

    def _stage_gradient_bytes(self) -> float:
        """A stage's float32 gradient sum, what each member pushes to each other."""
        return 4 * get_preset(self.spec.model_preset).parameter_count / self.spec.num_stages

    # ---- output helpers -------------------------------------------------------------------------

    def _send(self, member: Member, message: Message) -> None:
        self._out.append(do.Send(peer_ids=(member.peer_id,), message=message))

    def _broadcast(self, message: Message) -> None:
        self._out.append(do.Send(peer_ids=tuple(self.members), message=message))

    def _view_changed(self, now: float) -> None:
        """Who serves what changed: a view now, or at the first tick `VIEW_GAP_S` after the last.

        A grant cap of None bounds nothing: it was set while a stage had no ready peer, when nothing
        is granted anyway. It is set again at once, not with the view held back, or the requests of
        the next `VIEW_GAP_S` are all granted. The simulator had the same hole until its next
        reading (up to 5 s): at 1,000 spot peers it granted the first step's whole batch in it, and
        stage 0's one ready peer (a T4 on broadband) took 938 forwards in its first 10 s, which it
        was still computing ten minutes after their callers had given up (docs/benchmarks.md,
        issue 14)."""
        if now - self.view_sent >= VIEW_GAP_S:
            self._send_view(now)
            return
        self.view_due = True
        if self.grant_cap is None:
            self._set_grant_cap(self.ready(), now)

    def _send_view(self, now: float) -> None:
        self.view_sent = now
        self.view_due = False
        ready = self.ready()
        # Reading every member's links costs far more than the view: not at every join of a storm.
        if self.grant_cap is None or now - self.grant_cap_at >= GRANT_CAP_REFRESH_S:
            self._set_grant_cap(ready, now)
        self.views_sent += 1
        endpoints = {m.peer_id: m.endpoint() for m in ready}
        stages: list[list[int]] = [[] for _ in range(self.spec.num_stages)]
        for m in ready:
            if m.stage is not None:
                stages[m.stage].append(m.peer_id)
        totals = [StageTotal.of(endpoints[i] for i in ids) for ids in stages]
        decks = deal_stages(stages, seed=self.view_seed, refresh=self.views_sent)
        groups = view_groups(decks)
        samples = [view_sample(decks, group, groups) for group in range(groups)]
        listed = [frozenset(sample) for sample in samples]
        # A group's members share its message, or two: a ready member its sample leaves out is told
        # so (its trainer counts itself in). A swarm of small stages gets one broadcast.
        recipients: dict[tuple[int, bool], list[int]] = {}
        for m in self.members.values():
            group = m.peer_id % groups
            omitted = m.ready and m.stage is not None and m.peer_id not in listed[group]
            recipients.setdefault((group, omitted), []).append(m.peer_id)
        peers = [[endpoints[i] for i in sample] for sample in samples]
        for (group, omitted), peer_ids in recipients.items():
            view = SwarmView(step=self.book.step, peers=peers[group], stages=totals, omits_recipient=omitted)
            self._out.append(do.Send(peer_ids=tuple(peer_ids), message=view))

    def _set_grant_cap(self, ready: list[Member], now: float) -> None:
        self.grant_cap = self._grant_cap(ready)
        self.grant_cap_at = now

    def _grant_cap(self, ready: list[Member]) -> int | None:
        """`outstanding_cap` for the ready peers at the rates they serve (their links included);
        refreshes every member's `inbound_link` on the way."""
        links = inbound_link_rates({m.peer_id: m.links for m in self.members.values()})
        for m in self.members.values():
            m.inbound_link = links.get(m.peer_id)
        per_sample = self._bytes_per_sample()
        rates = [0.0] * self.spec.num_stages
        peers = [0] * self.spec.num_stages
        for m in ready:
            if m.stage is not None:
                rates[m.stage] += served_rate(m.effective_throughput, m.inbound_link, per_sample[m.stage])
                peers[m.stage] += 1
        return outstanding_cap(rates, peers, self.spec.microbatch_size)

    def _bytes_per_sample(self) -> list[float]:
        spec = self.spec
        return stage_bytes_per_sample(
            spec.num_stages, spec.seq_len, get_preset(spec.model_preset).d_model, spec.compression
        )

    def _event(self, kind: str, message: str, member: Member | None, **data: object) -> None:
        self._out.append(
            do.RecordEvent(
                kind=kind, message=message, peer_id=member.peer_id if member else None, data=dict(data)
            )
        )
