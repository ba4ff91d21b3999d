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

from dataclasses import dataclass
from enum import StrEnum

from server.policies.averaging import AveragingRound
from server.policies.step_book import StepBook
from server.policies.step_time import split_step_time
from server.swarm import decisions as do
from server.swarm.members import Member
from swarmhub.presets import get_preset
from swarmhub.schedule import clip_scale, learning_rate
from swarmhub.status import RunStatus
from swarmhub.wire import (
    ActivationCacheTally,
    ApplyStep,
    CheckpointRequest,
    Message,
    RunSpec,
    RunStatusChanged,
    StepBarrier,
    StepCommitted,
    SwarmView,
)

JOIN_HOLD_S = 15.0
"""How long a step's averaging waits for peers still loading a stage. Without the wait a joiner
could chase the run forever when steps are quicker than copying a stage."""
RECORD_RETRY_S = 5.0
"""A step write that was not confirmed (a database hiccup) is asked for again this often."""


class Phase(StrEnum):
    COLLECTING = "collecting"
    AVERAGING = "averaging"
    RECORDING = "recording"
    APPLYING = "applying"


@dataclass(frozen=True, kw_only=True)
class MachineSettings:
    heartbeat_timeout_s: float
    checkpoint_every_steps: int
    averaging_deadline_s: float
    """The least time an averaging round gets before it goes on without the members holding it up."""


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
        self.rounds: dict[int, AveragingRound] = {}
        self.round_started: dict[int, float] = {}
        self.noop_groups: dict[int, frozenset[int]] = {}
        """Stages whose round passed its deadline with nobody to blame: these members take an empty step."""
        self.pending_apply: set[int] = set()
        self.step_started = now
        self.barrier_at = now
        self.averaged_at: float | None = None
        """When the previous step's rounds completed; None until one did since the machine started."""
        self.cache_seen: dict[int, ActivationCacheTally] = {}
        """Each peer's last activation-cache running totals, so a step books only what is new."""
        self.view_sent = -1e9
        self.checkpoint_wanted = False
        self._recording: tuple[do.RecordStep, dict[int, ApplyStep]] | None = None
        self._record_asked = 0.0
        self._out: list[do.Decision] = []

    def ready(self, stage: int | None = None) -> list[Member]:
        return [m for m in self.members.values() if m.ready and (stage is None or m.stage == stage)]

    def _step_opened(self, now: float) -> None:
        """What the machine does once a new step is open (assign peers that waited, rebalance)."""
        raise NotImplementedError

    def _maybe_barrier(self, now: float) -> None:
        if self.phase != Phase.COLLECTING or not self.book.ready_for_barrier():
            return
        if any(m.loading and now - m.assigned_at < JOIN_HOLD_S for m in self.members.values()):
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

    def _restart_round(self, stage: int, without: frozenset[int], now: float) -> None:
        """A new attempt at the stage's round without these members (lost, or holding it up)."""
        self.rounds[stage] = self.rounds[stage].without(*without)
        self.round_started[stage] = now
        self._send_barrier(stage)

    def _send_barrier(self, stage: int) -> None:
        round_ = self.rounds[stage]
        group = [self.members[p].endpoint() for p in sorted(round_.group) if p in self.members]
        barrier = StepBarrier(step=self.book.step, attempt=round_.attempt, stage=stage, group=group)
        self._out.append(do.Send(peer_ids=tuple(e.peer_id for e in group), message=barrier))

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
            serving_peers=len(book.served_compute),
        )
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
            time_waiting_s=times.waiting_s,
            time_averaging_s=times.averaging_s,
            time_coordinator_s=times.coordinator_s,
            cache_hits=book.cache_hits,
            cache_misses=book.cache_misses,
            learning_rate=rate,
            grad_scale=scale,
            attempts=tuple(self.rounds[s].attempt for s in stages),
            finished=spec.max_steps is not None and book.step + 1 >= spec.max_steps,
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
        silence never stalls the run: first those that did not report, else those others blame;
        with nobody to blame the stage takes an empty step (its samples recorded lost)."""
        if self.phase != Phase.AVERAGING:
            return
        for stage, round_ in list(self.rounds.items()):
            limit = max(self.settings.averaging_deadline_s, self._transfer_allowance_s(len(round_.group)))
            if round_.complete() or now - self.round_started[stage] < limit:
                continue
            reported = frozenset(round_.reports)
            drop = round_.group - reported if reported else round_.group & blamed
            if drop and drop != round_.group:
                for peer_id in drop:
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

    def _transfer_allowance_s(self, members: int) -> float:
        """Twice what a peer allows itself to push a stage's float32 gradients to its group."""
        preset = get_preset(self.spec.model_preset)
        stage_bytes = 4 * preset.parameter_count / self.spec.num_stages
        return 2 * (10.0 + stage_bytes * members / 5e6)

    # ---- output helpers -------------------------------------------------------------------------

    def _send(self, member: Member, message: Message) -> None:
        self._out.append(do.Send(peer_ids=(member.peer_id,), message=message))

    def _broadcast(self, message: Message) -> None:
        self._out.append(do.Send(peer_ids=tuple(self.members), message=message))

    def _send_view(self, now: float) -> None:
        self.view_sent = now
        self._broadcast(SwarmView(step=self.book.step, peers=[m.endpoint() for m in self.ready()]))

    def _event(self, kind: str, message: str, member: Member | None, **data: object) -> None:
        self._out.append(
            do.RecordEvent(
                kind=kind, message=message, peer_id=member.peer_id if member else None, data=dict(data)
            )
        )
