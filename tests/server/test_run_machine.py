"""The run's state machine alone: inputs in, decisions out, no processes, no database, no clock."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from server.policies.averaging import ALL_TO_ALL_ALWAYS, PatternRule, push_allowance_s
from server.policies.grant_pacing import outstanding_cap
from server.policies.join_hold import JOIN_HOLD_S
from server.policies.rejoin_backoff import FIRST_WAIT_S
from server.policies.reprobe import REPROBE_FIRST_S, REPROBE_MAX_S, reprobe_after_s
from server.policies.step_book import StepBook
from server.swarm import decisions as do
from server.swarm import inputs as on
from server.swarm.machine import SWARM_VIEW_REFRESH_S, RunMachine
from server.swarm.members import CLAIM_SLACK
from server.swarm.membership import STRIKE_LIMIT
from server.swarm.step_cycle import RECORD_RETRY_S, VIEW_GAP_S, MachineSettings, Phase
from swarmhub.presets import get_preset
from swarmhub.stage_cost import stage_bytes_per_sample
from swarmhub.status import PeerState
from swarmhub.wire import (
    ApplyStep,
    AveragingDone,
    CheckpointRequest,
    Heartbeat,
    Kicked,
    Message,
    MicrobatchDone,
    NoWork,
    PeerUnreachable,
    Reachability,
    RunSpec,
    RunStatusChanged,
    ServedCall,
    StageLoadFailed,
    StageReady,
    StepApplied,
    StepBarrier,
    StepCommitted,
    SwarmView,
    Welcome,
    WorkGrant,
    WorkRequest,
)

TIMEOUT_S = 15.0
DEADLINE_S = 60.0


def spec(*, stages: int = 2, max_steps: int | None = None, preset: str = "tiny") -> RunSpec:
    return RunSpec(
        run_id=1,
        name="t",
        model_preset=preset,
        dataset="python-stdlib",
        num_stages=stages,
        target_batch_size=8,
        microbatch_size=4,
        seq_len=32,
        optimizer="adamw",
        learning_rate=1e-3,
        warmup_steps=0,
        weight_decay=0.0,
        compression="none",
        max_steps=max_steps,
    )


@dataclass
class Swarm:
    """A machine plus the decisions it has made, with shorthands for what peers say."""

    machine: RunMachine
    now: float = 100.0
    log: list[do.Decision] = field(default_factory=list)

    def feed(self, event: on.Input) -> list[do.Decision]:
        out = self.machine.handle(event)
        self.log.extend(out)
        return out

    def say(self, peer_id: int, message: Message) -> list[do.Decision]:
        return self.feed(on.PeerSaid(now=self.now, peer_id=peer_id, message=message))

    def join(
        self,
        peer_id: int,
        *,
        stage: int | None = None,
        throughput: float = 10.0,
        probe_problem: str | None = None,
    ) -> list[do.Decision]:
        return self.feed(
            on.PeerJoined(
                now=self.now,
                peer_id=peer_id,
                name=f"p{peer_id}",
                address=f"127.0.0.1:{9000 + peer_id}",
                throughput=throughput,
                stage=stage,
                requested_stage=None,
                probe_problem=probe_problem,
            )
        )

    def ready(self, peer_id: int, *, origin: str = "initialized") -> list[do.Decision]:
        member = self.machine.members[peer_id]
        assert member.stage is not None
        return self.say(peer_id, StageReady(stage=member.stage, step=self.machine.book.step, origin=origin))

    def train(self, trainer: int) -> list[str]:
        """Grant and finish microbatches until the step has its samples; their ids."""
        ids = []
        while True:
            (reply,) = sent(self.say(trainer, WorkRequest()), trainer)
            if isinstance(reply, NoWork):
                return ids
            assert isinstance(reply, WorkGrant)
            ids.append(reply.microbatch_id)
            self.say(
                trainer,
                MicrobatchDone(
                    step=reply.step, microbatch_id=reply.microbatch_id, samples=reply.samples, loss=2.0
                ),
            )

    def average(self, counted: list[str]) -> list[do.Decision]:
        """Every member of every round reports the same average."""
        out: list[do.Decision] = []
        for stage, round_ in list(self.machine.rounds.items()):
            for peer_id in sorted(round_.group):
                out += self.say(
                    peer_id,
                    AveragingDone(
                        step=self.machine.book.step,
                        attempt=round_.attempt,
                        stage=stage,
                        contributors=sorted(round_.group),
                        counted=counted,
                        grad_sum_norm_sq=1.0,
                    ),
                )
        return out

    def apply_all(self) -> list[do.Decision]:
        out: list[do.Decision] = []
        for peer_id in sorted(self.machine.pending_apply):
            out += self.say(
                peer_id,
                StepApplied(step=self.machine.book.step, stage=self.machine.members[peer_id].stage or 0),
            )
        return out

    def whole_step(self, trainer: int = 1) -> do.RecordStep:
        ids = self.train(trainer)
        (record,) = of(self.average(ids), do.RecordStep)
        self.feed(on.StepRecorded(now=self.now, step=record.step))
        self.apply_all()
        return record


def of(decisions: list[do.Decision], kind: type) -> list:
    return [d for d in decisions if isinstance(d, kind)]


def sent(decisions: list[do.Decision], peer_id: int, kind: type | None = None) -> list[Message]:
    return [
        d.message
        for d in of(decisions, do.Send)
        if peer_id in d.peer_ids and (kind is None or isinstance(d.message, kind))
    ]


def new_swarm(
    *,
    stages: int = 2,
    max_steps: int | None = None,
    last_apply: dict | None = None,
    step: int = 0,
    target: int = 8,
    preset: str = "tiny",
    patterns: PatternRule = PatternRule(),
) -> Swarm:
    machine = RunMachine(
        spec=spec(stages=stages, max_steps=max_steps, preset=preset),
        status="active",
        data_key="k",
        book=StepBook(step=step, target_batch_size=target, microbatch_size=4, next_sample=0),
        rebalance=False,
        settings=MachineSettings(
            heartbeat_timeout_s=TIMEOUT_S,
            heartbeat_interval_s=1.0,
            checkpoint_every_steps=1000,
            averaging_deadline_s=DEADLINE_S,
            patterns=patterns,
        ),
        last_apply=last_apply or {},
        now=100.0,
    )
    return Swarm(machine)


def two_by_one() -> Swarm:
    """Peers 1 (stage 0) and 2 (stage 1), both ready."""
    swarm = new_swarm()
    swarm.join(1)
    swarm.join(2)
    swarm.ready(1)
    swarm.ready(2)
    return swarm


# ---- joining --------------------------------------------------------------------------------------


def test_a_joiner_is_welcomed_and_assigned_the_emptiest_stage():
    swarm = new_swarm()
    first = swarm.join(1)
    assert [type(m) for m in sent(first, 1)] == [Welcome, RunStatusChanged, Reachability]
    assert sent(first, 1, Reachability)[0].reachable
    (assign,) = of(first, do.AssignStage)
    assert (assign.peer_id, assign.stage, assign.step, assign.state_sources, assign.apply) == (
        1,
        0,
        0,
        (),
        None,
    )
    (second,) = of(swarm.join(2), do.AssignStage)
    assert second.stage == 1


@pytest.mark.parametrize(
    ("link_to_first", "expected_stage"),
    [
        (None, 1),  # nobody measured peer 1's link: compute decides, stage 1 (20/s) is the weaker
        (1e9, 1),  # a link that carries far more than it computes changes nothing
        # Peer 1 computes 50/s but its link carries a fraction of a sample a second, so stage 0
        # serves least; a joiner there, though, would take peer 1's gradient sum at that rate, for
        # far longer than the stage collects: the averaging budget passes over stage 0.
        (2000.0, 1),
    ],
)
def test_a_joiner_strengthens_the_stage_that_serves_least_links_included(link_to_first, expected_stage):
    swarm = new_swarm()
    swarm.join(1, throughput=50.0)  # stage 0
    swarm.join(2, throughput=20.0)  # stage 1
    for peer_id in (1, 2):
        swarm.ready(peer_id)
    links = {} if link_to_first is None else {1: link_to_first}
    swarm.say(2, Heartbeat(throughput=20.0, queue_length=0, samples_done=0, links=links))
    swarm.say(1, Heartbeat(throughput=50.0, queue_length=0, samples_done=0, links={2: 1e9}))
    swarm.now += SWARM_VIEW_REFRESH_S  # the next view refreshes what links carry
    swarm.feed(on.Tick(now=swarm.now))
    (assign,) = of(swarm.join(3, throughput=10.0), do.AssignStage)
    assert assign.stage == expected_stage


def test_joiners_arriving_together_spread_over_the_stages():
    # Within STAGE_LOAD_REFRESH_S the stages' rates are not summed again: each joiner assigned since
    # counts on its stage, so a storm does not pile onto the stage that was weakest at its start.
    swarm = new_swarm(stages=4)
    stages = [of(swarm.join(peer_id), do.AssignStage)[0].stage for peer_id in range(1, 13)]
    assert sorted(stages) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_a_joiner_right_after_a_departure_fills_the_stage_it_left():
    swarm = new_swarm()
    for peer_id in (1, 2, 3, 4):
        swarm.join(peer_id)  # stages 0, 1, 0, 1
    swarm.feed(on.PeerLeft(now=swarm.now, peer_id=2, state=PeerState.LEFT, reason="goodbye"))
    (assign,) = of(swarm.join(5), do.AssignStage)
    assert assign.stage == 1


def test_a_rejoin_keeps_the_remembered_stage():
    swarm = new_swarm()
    (assign,) = of(swarm.join(7, stage=1), do.AssignStage)
    assert (assign.stage, assign.reason) == (1, "rejoined its stage")


def test_each_stages_members_are_indexed_through_joins_rejoins_and_departures():
    # Grants, joins and readies ask which of a stage's peers are ready through `staged`, not by
    # passing over every member: it must say what the members themselves say.
    swarm = new_swarm(stages=3)
    for peer_id in range(1, 7):
        swarm.join(peer_id)
    swarm.join(7, stage=2)
    swarm.join(1, stage=2)  # a second channel of peer 1 rejoins onto another stage
    swarm.feed(on.PeerLeft(now=swarm.now, peer_id=3, state=PeerState.LEFT, reason="goodbye"))
    machine = swarm.machine
    assert machine.unserved_stages() == [0, 1, 2]
    for peer_id in sorted(machine.members):
        swarm.ready(peer_id)
    by_stage: dict[int | None, set[int]] = {}
    for member in machine.members.values():
        by_stage.setdefault(member.stage, set()).add(member.peer_id)
    assert {stage: set(members) for stage, members in machine.staged.items() if members} == by_stage
    assert {stage: {m.peer_id for m in machine.ready(stage)} for stage in range(3)} == by_stage
    assert machine.unserved_stages() == []


def test_after_step_zero_joiners_copy_from_the_fastest_ready_peers():
    swarm = new_swarm(step=5)
    swarm.join(1, throughput=5.0)
    swarm.join(2)
    swarm.ready(1)
    swarm.ready(2)
    swarm.join(3, stage=0, throughput=1.0)
    swarm.machine.members[1].throughput = 5.0
    (assign,) = of(swarm.join(4, stage=0), do.AssignStage)
    assert [e.peer_id for e in assign.state_sources] == [1]  # 3 is still loading: not a source


# ---- one whole step -------------------------------------------------------------------------------


def test_a_step_is_recorded_before_any_update_is_sent():
    swarm = two_by_one()
    ids = swarm.train(1)
    assert len(ids) == 2 and swarm.machine.phase == Phase.AVERAGING
    barriers = of(swarm.log, do.Send)
    assert {m.stage for d in barriers if isinstance(m := d.message, StepBarrier)} == {0, 1}
    out = swarm.average(ids)
    (record,) = of(out, do.RecordStep)
    assert not [d for d in out if isinstance(d, do.Send) and isinstance(d.message, ApplyStep)]
    assert (record.step, record.samples_sent, record.samples_counted, record.samples_lost) == (
        0,
        8,
        (8, 8),
        0,
    )
    assert swarm.machine.phase == Phase.RECORDING
    # Peers asking for work meanwhile get none, and a confirmation of another step changes nothing.
    assert sent(swarm.say(1, WorkRequest()), 1) == [NoWork(step=0, reason="step 0 is recording")]
    assert swarm.feed(on.StepRecorded(now=swarm.now, step=3)) == []
    applied = swarm.feed(on.StepRecorded(now=swarm.now, step=0))
    assert sent(applied, 1, ApplyStep)[0].stage == 0 and sent(applied, 2, ApplyStep)[0].stage == 1
    assert swarm.machine.phase == Phase.APPLYING
    opened = swarm.apply_all()
    assert sent(opened, 1, StepCommitted) == [StepCommitted(step=0, loss=2.0, next_step=1)]
    assert (swarm.machine.phase, swarm.machine.book.step, swarm.machine.book.next_sample) == (
        Phase.COLLECTING,
        1,
        8,
    )


def test_an_unconfirmed_step_write_is_asked_for_again_and_nothing_is_applied_meanwhile():
    swarm = two_by_one()
    (record,) = of(swarm.average(swarm.train(1)), do.RecordStep)
    swarm.now += RECORD_RETRY_S / 2
    assert of(swarm.feed(on.Tick(now=swarm.now)), do.RecordStep) == []
    swarm.now += RECORD_RETRY_S
    again = swarm.feed(on.Tick(now=swarm.now))
    assert of(again, do.RecordStep) == [record]
    assert not sent(again, 1, ApplyStep)


def test_the_last_step_finishes_the_run():
    swarm = new_swarm(max_steps=1)
    swarm.join(1)
    swarm.join(2)
    swarm.ready(1)
    swarm.ready(2)
    record = swarm.whole_step()
    assert record.finished
    assert RunStatusChanged(status="finished") in sent(swarm.log, 2)
    assert swarm.machine.status == "finished"
    assert sent(swarm.log, 1, CheckpointRequest) == [CheckpointRequest(step=1, stage=0)]


def test_only_the_trainer_granted_a_microbatch_may_report_it():
    swarm = two_by_one()
    (grant,) = sent(swarm.say(1, WorkRequest()), 1)
    assert isinstance(grant, WorkGrant)
    swarm.say(2, MicrobatchDone(step=0, microbatch_id=grant.microbatch_id, samples=4, loss=1.0))
    assert grant.microbatch_id in swarm.machine.book.outstanding


# ---- losing members -------------------------------------------------------------------------------


def test_a_member_lost_while_averaging_restarts_its_stage_round_without_it():
    swarm = new_swarm()
    for peer_id in (1, 2, 3):
        swarm.join(peer_id)
    for peer_id in (1, 2, 3):
        swarm.ready(peer_id)
    assert swarm.machine.members[3].stage == 0
    ids = swarm.train(1)
    out = swarm.feed(on.PeerLeft(now=swarm.now, peer_id=3, state="lost", reason="gone"))
    (barrier,) = sent(out, 1, StepBarrier)
    assert (barrier.attempt, [p.peer_id for p in barrier.group]) == (1, [1])
    assert of(out, do.RecordDeparture) == [
        do.RecordDeparture(peer_id=3, state="lost", reason="gone", stage=0)
    ]
    (record,) = of(swarm.average(ids), do.RecordStep)
    assert record.attempts == (1, 0)


def test_a_member_lost_after_its_stages_round_completed_does_not_restart_it():
    # Peers 1 and 3 on stage 0, 2 on stage 1: stage 0 averages, then 3 dies while stage 1 has not.
    swarm = new_swarm()
    for peer_id in (1, 2, 3):
        swarm.join(peer_id)
    for peer_id in (1, 2, 3):
        swarm.ready(peer_id)
    ids = swarm.train(1)
    for peer_id in (1, 3):
        swarm.say(
            peer_id,
            AveragingDone(step=0, attempt=0, stage=0, contributors=[1, 3], counted=ids, grad_sum_norm_sq=1.0),
        )
    out = swarm.feed(on.PeerLeft(now=swarm.now, peer_id=3, state="lost", reason="gone"))
    assert sent(out, 1, StepBarrier) == []
    assert swarm.machine.rounds[0].attempt == 0
    out = swarm.say(
        2, AveragingDone(step=0, attempt=0, stage=1, contributors=[2], counted=ids, grad_sum_norm_sq=1.0)
    )
    (record,) = of(out, do.RecordStep)
    assert record.attempts == (0, 0) and record.samples_counted == (8, 8)
    out = swarm.feed(on.StepRecorded(now=swarm.now, step=0))
    assert sorted(p for d in of(out, do.Send) if isinstance(d.message, ApplyStep) for p in d.peer_ids) == [
        1,
        2,
    ]


def test_a_member_lost_while_applying_does_not_hold_the_next_step():
    swarm = two_by_one()
    swarm.average(swarm.train(1))
    swarm.feed(on.StepRecorded(now=swarm.now, step=0))
    swarm.say(1, StepApplied(step=0, stage=0))
    assert swarm.machine.phase == Phase.APPLYING
    swarm.feed(on.PeerLeft(now=swarm.now, peer_id=2, state="lost", reason="gone"))
    assert (swarm.machine.phase, swarm.machine.book.step) == (Phase.COLLECTING, 1)


def test_a_silent_member_is_closed_and_recorded_lost():
    swarm = two_by_one()
    swarm.now += TIMEOUT_S / 2
    swarm.say(1, Heartbeat(throughput=3.0, queue_length=0, samples_done=0))
    swarm.now += TIMEOUT_S / 2 + 1
    out = swarm.feed(on.Tick(now=swarm.now))
    assert of(out, do.Close) == [do.Close(peer_id=2, code=1001, reason="heartbeat timeout")]
    assert [d.peer_id for d in of(out, do.RecordDeparture)] == [2]
    assert list(swarm.machine.members) == [1]


# ---- a silent death is found by probing, before the heartbeat timeout ------------------------------


def silent_for(swarm: Swarm, peer_id: int, seconds: float) -> list[do.Decision]:
    """`seconds` pass in ticks of a second; every member but `peer_id` keeps sending heartbeats."""
    out: list[do.Decision] = []
    for _ in range(round(seconds)):
        swarm.now += 1.0
        for other in list(swarm.machine.members):
            if other != peer_id:
                swarm.say(other, Heartbeat(throughput=10.0, queue_length=0, samples_done=0))
        out += swarm.feed(on.Tick(now=swarm.now))
    return out


def test_a_silent_member_whose_data_plane_does_not_answer_is_lost_before_the_timeout():
    swarm = two_by_one()
    # 1 s heartbeats, ticks a second apart: probed once three missed are past the last tick's gap.
    out = silent_for(swarm, 2, 5)
    assert of(out, do.ProbePeer) == [do.ProbePeer(peer_id=2, address="127.0.0.1:9002")]
    out = swarm.feed(on.ProbeResult(now=swarm.now, peer_id=2, problem="no answer within 5s"))
    assert [d.peer_id for d in of(out, do.Close)] == [2]
    (departure,) = of(out, do.RecordDeparture)
    assert departure.peer_id == 2 and departure.reason.startswith("no heartbeat for 5s")
    assert list(swarm.machine.members) == [1]
    assert swarm.now - 100.0 < TIMEOUT_S


def test_a_silent_member_whose_data_plane_answers_is_left_to_the_timeout():
    swarm = two_by_one()
    silent_for(swarm, 2, 5)
    assert swarm.feed(on.ProbeResult(now=swarm.now, peer_id=2, problem=None)) == []
    out = silent_for(swarm, 2, TIMEOUT_S - 5)
    assert of(out, do.ProbePeer) == []  # one probe per silence
    assert 2 in swarm.machine.members
    out = silent_for(swarm, 2, 1)
    assert of(out, do.Close) == [do.Close(peer_id=2, code=1001, reason="heartbeat timeout")]


def test_a_member_heard_again_is_not_lost_to_its_silences_probe_and_is_probed_at_its_next_silence():
    swarm = two_by_one()
    silent_for(swarm, 2, 5)
    swarm.say(2, Heartbeat(throughput=10.0, queue_length=0, samples_done=0))
    assert swarm.feed(on.ProbeResult(now=swarm.now, peer_id=2, problem="no answer within 5s")) == []
    assert 2 in swarm.machine.members
    out = silent_for(swarm, 2, 5)
    assert of(out, do.ProbePeer) == [do.ProbePeer(peer_id=2, address="127.0.0.1:9002")]


def test_a_coordinator_that_stalled_probes_nobody_for_the_silence_it_caused():
    swarm = two_by_one()
    swarm.feed(on.Tick(now=swarm.now))
    swarm.now += 6.0  # no tick, no heartbeat read for 6 s
    out = swarm.feed(on.Tick(now=swarm.now))
    assert of(out, do.ProbePeer) == []
    assert sorted(swarm.machine.members) == [1, 2]


def test_a_member_the_coordinator_cannot_reach_is_never_probed():
    swarm = two_by_one()
    swarm.join(3, probe_problem="ConnectionRefusedError")
    out = silent_for(swarm, 3, TIMEOUT_S - 1)
    assert of(out, do.ProbePeer) == []
    assert 3 in swarm.machine.members
    out = silent_for(swarm, 3, 2)
    assert [d.peer_id for d in of(out, do.RecordDeparture)] == [3]


def test_a_member_the_coordinator_could_not_reach_is_probed_again_and_seated_once_it_answers():
    swarm = new_swarm()
    swarm.join(1, probe_problem="no answer within 5s")
    swarm.join(2)  # stage 0: peer 1 trains only
    assert swarm.machine.members[1].stage is None
    failures = 0
    probed_at = []
    for _ in range(round(REPROBE_FIRST_S * 7)):
        swarm.now += 1.0
        for peer in (1, 2):
            swarm.say(peer, Heartbeat(throughput=10.0, queue_length=0, samples_done=0))
        for probe in of(swarm.feed(on.Tick(now=swarm.now)), do.ProbePeer):
            assert probe.peer_id == 1
            probed_at.append(swarm.now)
            failures += 1
            out = swarm.feed(on.ProbeResult(now=swarm.now, peer_id=1, problem="ConnectionRefusedError"))
            assert out == []  # told once that its port is closed, not at every probe
    # Probed again after 15 s, 30 s and 60 s, not once a tick.
    assert [t - probed_at[0] for t in probed_at] == [0.0, 30.0, 90.0]
    assert failures == 3
    assert swarm.machine.members[1].stage is None
    while not (of(swarm.feed(on.Tick(now=swarm.now)), do.ProbePeer)):
        swarm.now += 1.0
    out = swarm.feed(on.ProbeResult(now=swarm.now, peer_id=1, problem=None))
    (notice,) = sent(out, 1, Reachability)
    assert notice.reachable
    (assign,) = of(out, do.AssignStage)
    assert (assign.peer_id, assign.stage) == (1, 1)
    assert of(swarm.feed(on.Tick(now=swarm.now + REPROBE_MAX_S)), do.ProbePeer) == []


@pytest.mark.parametrize(
    ("failed_probes", "wait_s"),
    [
        (1, REPROBE_FIRST_S),
        (2, 2 * REPROBE_FIRST_S),
        (3, 4 * REPROBE_FIRST_S),
        (10, REPROBE_MAX_S),
        (10**6, REPROBE_MAX_S),
    ],
)
def test_reprobes_back_off_to_a_ceiling(failed_probes, wait_s):
    assert reprobe_after_s(failed_probes) == wait_s


def test_reprobes_count_failed_probes():
    with pytest.raises(ValueError, match="failed probe"):
        reprobe_after_s(0)


def working_swarm(members: int) -> Swarm:
    """`members` peers (odd ids on stage 0, even on stage 1), all ready, each granted a microbatch:
    every one of them has reason to call the stage peers."""
    swarm = new_swarm(target=4 * members)
    for peer_id in range(1, members + 1):
        swarm.join(peer_id)
    for peer_id in range(1, members + 1):
        swarm.ready(peer_id)
    for peer_id in range(1, members + 1):
        assert isinstance(sent(swarm.say(peer_id, WorkRequest()), peer_id)[0], WorkGrant)
    return swarm


@pytest.mark.parametrize(
    ("members", "reporters", "expected"),
    [
        (3, [2], "probe"),  # one report is one view: the coordinator dials the target itself
        (3, [2, 2], "probe"),  # the same reporter twice is still one view (probed once)
        (3, [2, 3], "evict"),  # two views agree
        (2, [2], "probe"),  # with one other peer, its word alone never evicts
    ],
)
def test_unreachable_reports_are_weighed(members, reporters, expected):
    swarm = working_swarm(members)
    out = []
    for reporter in reporters:
        out += swarm.say(reporter, PeerUnreachable(peer_id=1, reason="no answer"))
    # The first believed report always asks for one probe; only agreeing views evict.
    assert [d.peer_id for d in of(out, do.ProbePeer)] == [1]
    assert bool(of(out, do.Close)) is (expected == "evict")
    assert (1 in swarm.machine.members) is (expected != "evict")


def test_the_coordinators_probe_decides_a_single_report():
    swarm = working_swarm(2)
    swarm.say(2, PeerUnreachable(peer_id=1, reason="no answer"))
    assert swarm.feed(on.ProbeResult(now=swarm.now, peer_id=1, problem=None)) == []
    assert 1 in swarm.machine.members
    swarm.now += 11
    assert len(of(swarm.say(2, PeerUnreachable(peer_id=1, reason="no answer")), do.ProbePeer)) == 1
    out = swarm.feed(on.ProbeResult(now=swarm.now, peer_id=1, problem="ConnectionRefusedError"))
    assert [d.peer_id for d in of(out, do.Close)] == [1] and 1 not in swarm.machine.members
    assert "could not reach it" in of(out, do.RecordDeparture)[0].reason


def evict_as_unreachable(swarm: Swarm, target: int, reporters: tuple[int, int]) -> None:
    for reporter in reporters:
        out = swarm.say(reporter, PeerUnreachable(peer_id=target, reason="no answer"))
    assert [d.peer_id for d in of(out, do.Close)] == [target]


def seated_after(swarm: Swarm, seconds: float) -> list[do.AssignStage]:
    """Ticks `seconds` on, every peer heartbeating; the stages assigned at that tick."""
    swarm.now += seconds
    keep_alive(swarm)
    return of(swarm.feed(on.Tick(now=swarm.now)), do.AssignStage)


def test_a_peer_evicted_as_unreachable_waits_longer_each_time_before_it_serves_again():
    """It still heartbeats, so it reconnects at once, and the probe at its rejoin reaches it (a choked
    upload answers one small call): seated at once it was routed to and held its stage's round again."""
    swarm = working_swarm(3)  # peers 1 and 3 on stage 0
    evict_as_unreachable(swarm, 1, (2, 3))
    out = swarm.join(1, stage=0)
    assert of(out, do.AssignStage) == []
    (notice,) = sent(out, 1, Reachability)
    assert notice.reachable and f"serves a stage again in {FIRST_WAIT_S:.0f}s" in notice.detail
    assert seated_after(swarm, FIRST_WAIT_S - 1) == []
    (assign,) = seated_after(swarm, 1)
    assert (assign.peer_id, assign.stage, assign.reason) == (1, 0, "rejoined its stage")
    swarm.ready(1)

    evict_as_unreachable(swarm, 1, (2, 3))
    assert of(swarm.join(1, stage=0), do.AssignStage) == []
    assert seated_after(swarm, 2 * FIRST_WAIT_S - 1) == []
    assert [a.peer_id for a in seated_after(swarm, 1)] == [1]
    # Another peer that rejoins (it was never evicted) is seated at once.
    swarm.feed(on.PeerLeft(now=swarm.now, peer_id=3, state=PeerState.LOST, reason="heartbeat"))
    assert [a.peer_id for a in of(swarm.join(3, stage=0), do.AssignStage)] == [3]


def test_a_benched_peer_that_reconnects_after_its_wait_is_seated_once():
    swarm = working_swarm(3)
    evict_as_unreachable(swarm, 1, (2, 3))
    assert of(swarm.join(1, stage=0), do.AssignStage) == []
    swarm.now += FIRST_WAIT_S
    # Its channel closes and it reconnects before a tick seated it: the new channel is seated, and
    # the wait the old one left does not seat it a second time at the next tick.
    swarm.feed(on.PeerLeft(now=swarm.now, peer_id=1, state=PeerState.LOST, reason="channel closed"))
    assert [a.peer_id for a in of(swarm.join(1, stage=0), do.AssignStage)] == [1]
    assert seated_after(swarm, 1) == []


def test_an_unreachable_or_blamed_reporter_is_not_believed():
    swarm = new_swarm(target=12)
    swarm.join(1)
    swarm.join(2)
    swarm.join(3, probe_problem="no answer within 5s")  # trains only
    swarm.ready(1)
    swarm.ready(2)
    for peer_id in (1, 2, 3):
        assert isinstance(sent(swarm.say(peer_id, WorkRequest()), peer_id)[0], WorkGrant)
    # It had reason to call peer 1, but nobody can reach it: its view does not count (and is no offence).
    assert swarm.say(3, PeerUnreachable(peer_id=1, reason="x")) == []
    # 2 is blamed by 1; while that stands, 2's word against 1 counts for nothing.
    swarm.say(1, PeerUnreachable(peer_id=2, reason="x"))
    assert swarm.say(2, PeerUnreachable(peer_id=1, reason="x")) == []


def test_a_report_without_reason_to_call_counts_against_the_reporter():
    swarm = new_swarm()
    swarm.join(1)
    swarm.ready(1)
    swarm.join(2)  # never granted work, never offered peer 1 as a source
    out = swarm.say(2, PeerUnreachable(peer_id=1, reason="made up"))
    assert of(out, do.ProbePeer) == [] and of(out, do.Close) == []
    assert [e.kind for e in of(out, do.RecordEvent)] == ["peer_misbehaving"]
    for _ in range(STRIKE_LIMIT - 2):
        assert swarm.say(2, PeerUnreachable(peer_id=1, reason="made up")) == []
    removed = swarm.say(2, PeerUnreachable(peer_id=1, reason="made up"))
    assert [d.peer_id for d in of(removed, do.Close)] == [2]
    assert of(removed, do.RecordDeparture)[0].state == "kicked"
    assert 1 in swarm.machine.members


def test_reporting_another_trainers_microbatch_is_refused_and_counted():
    swarm = two_by_one()
    (grant,) = sent(swarm.say(1, WorkRequest()), 1)
    out = swarm.say(2, MicrobatchDone(step=0, microbatch_id=grant.microbatch_id, samples=4, loss=0.1))
    assert [e.kind for e in of(out, do.RecordEvent)] == ["peer_misbehaving"]
    assert grant.microbatch_id in swarm.machine.book.outstanding
    assert swarm.machine.members[2].strikes == 1


def test_a_flood_of_reports_is_not_heard():
    swarm = working_swarm(3)
    swarm.feed(on.ProbeResult(now=swarm.now, peer_id=1, problem=None))
    probes = []
    for target in (1, 2) * 10:
        probes += of(swarm.say(3, PeerUnreachable(peer_id=target, reason="x")), do.ProbePeer)
        swarm.now += 0.1
    assert len(probes) <= 2  # one per target at most, and nothing past the flood limit


@pytest.mark.parametrize(
    ("norms", "faulty", "agreed"),
    [
        ({1: 4.0, 3: 4.0, 5: 4.0}, [], 4.0),
        ({1: 4.0, 3: 4.0, 5: 1e29}, [5], 4.0),  # one member's huge norm no longer shrinks every stage's step
        ({1: 0.0, 3: 4.0, 5: 4.0}, [1], 4.0),
        ({1: 4.0, 3: 1e29}, [], 4.0),  # two: no majority; the smaller can only loosen clipping
    ],
)
def test_members_norms_must_agree(norms, faulty, agreed):
    swarm = new_swarm(stages=1)
    for peer_id in norms:
        swarm.join(peer_id)
        swarm.ready(peer_id)
    ids = swarm.train(next(iter(norms)))
    out = []
    for peer_id, norm in norms.items():
        done = AveragingDone(
            step=0, attempt=0, stage=0, contributors=sorted(norms), counted=ids, grad_sum_norm_sq=norm
        )
        out += swarm.say(peer_id, done)
    removed = [d.peer_id for d in of(out, do.Close)]
    assert removed == faulty
    assert all(d.state == "kicked" and "faulty" in d.reason for d in of(out, do.RecordDeparture))
    if not faulty:
        (record,) = of(out, do.RecordStep)
        assert record.grad_scale == pytest.approx(min(1.0, 1.0 / (agreed**0.5 / 8)))
    else:
        assert swarm.machine.rounds[0].attempt == 1 and of(out, do.RecordStep) == []


# ---- peers that cannot be reached train only ------------------------------------------------------


def test_a_peer_the_coordinator_cannot_reach_trains_only():
    swarm = two_by_one()
    out = swarm.join(3, probe_problem="ConnectionRefusedError")
    (notice,) = sent(out, 3, Reachability)
    assert not notice.reachable and "not reachable" in notice.detail and "9003" in notice.detail
    assert of(out, do.AssignStage) == []
    assert of(out, do.RecordReachability) == [
        do.RecordReachability(peer_id=3, reachable=False, detail=notice.detail)
    ]
    assert swarm.machine.members[3].stage is None
    # It still draws microbatches, driven through the others' stages, and they count.
    record = swarm.whole_step(trainer=3)
    assert record.samples_counted == (8, 8)
    # And it is never placed by a step boundary.
    assert swarm.machine.members[3].stage is None


# ---- averaging has a deadline -------------------------------------------------------------------


def three_on_stage_zero(preset: str = "tiny", patterns: PatternRule = PatternRule()) -> Swarm:
    swarm = new_swarm(stages=1, preset=preset, patterns=patterns)
    for peer_id in (1, 2, 3):
        swarm.join(peer_id)
        swarm.ready(peer_id)
    return swarm


def keep_alive(swarm: Swarm) -> None:
    for peer_id in list(swarm.machine.members):
        swarm.say(peer_id, Heartbeat(throughput=10.0, queue_length=0, samples_done=0))


def test_a_round_past_its_deadline_goes_on_without_the_members_that_did_not_report():
    swarm = three_on_stage_zero()
    ids = swarm.train(1)
    for peer_id in (1, 2):
        swarm.say(
            peer_id,
            AveragingDone(
                step=0, attempt=0, stage=0, contributors=[1, 2, 3], counted=ids, grad_sum_norm_sq=1.0
            ),
        )
    swarm.now += DEADLINE_S - 1
    keep_alive(swarm)
    swarm.feed(on.Tick(now=swarm.now))
    assert swarm.machine.rounds[0].attempt == 0
    swarm.now += 2
    keep_alive(swarm)
    out = swarm.feed(on.Tick(now=swarm.now))
    (barrier,) = [m for d in of(out, do.Send) if isinstance(m := d.message, StepBarrier)]
    assert (barrier.attempt, [p.peer_id for p in barrier.group]) == (1, [1, 2])
    assert [e.kind for e in of(out, do.RecordEvent)] == ["averaging_deadline"]
    assert swarm.machine.members[3].waiting_reason is not None  # copies the stage again at the boundary
    assert len(of(swarm.average(ids), do.RecordStep)) == 1
    swarm.feed(on.StepRecorded(now=swarm.now, step=0))
    opened = swarm.apply_all()
    assert [d.peer_id for d in of(opened, do.AssignStage)] == [3]


def test_a_stalled_round_with_nobody_to_blame_takes_an_empty_step():
    swarm = three_on_stage_zero()
    swarm.train(1)
    swarm.now += DEADLINE_S + 1
    keep_alive(swarm)
    out = swarm.feed(on.Tick(now=swarm.now))
    (record,) = of(out, do.RecordStep)
    assert record.samples_counted == (0,) and record.samples_lost == record.samples_sent
    applied = swarm.feed(on.StepRecorded(now=swarm.now, step=0))
    updates = [m for d in of(applied, do.Send) if isinstance(m := d.message, ApplyStep)]
    assert [u.samples for u in updates] == [0] and set(of(applied, do.Send)[0].peer_ids) == {1, 2, 3}
    swarm.apply_all()
    assert swarm.machine.book.step == 1 and all(m.ready for m in swarm.machine.members.values())


def test_blamed_members_are_dropped_when_nobody_reported():
    swarm = three_on_stage_zero()
    swarm.train(1)
    swarm.now += DEADLINE_S - 5
    keep_alive(swarm)
    swarm.say(1, PeerUnreachable(peer_id=3, reason="no gradients"))
    swarm.feed(on.ProbeResult(now=swarm.now, peer_id=3, problem=None))  # reachable: not evicted
    swarm.say(2, PeerUnreachable(peer_id=3, reason="no gradients"))
    swarm.now += 6
    keep_alive(swarm)
    out = swarm.feed(on.Tick(now=swarm.now))
    barriers = [m for d in of(out, do.Send) if isinstance(m := d.message, StepBarrier)]
    assert barriers and [p.peer_id for p in barriers[0].group] == [1, 2]


def test_a_slow_uploader_missed_by_one_member_costs_only_its_share_not_the_stage():
    """The validation run: one member of a stage uploads slowly. Its pushes go out one after another,
    so one member gets its gradients in time and the other gives up; the slow one is reachable, so
    the coordinator's probe clears the blame. Nobody reports a sum. The round still goes on without
    the member that was missed, and the stage loses that member's share, not all its samples."""
    swarm = three_on_stage_zero()
    ids = swarm.train(1)
    swarm.now += 20
    keep_alive(swarm)
    out = swarm.say(2, PeerUnreachable(peer_id=3, reason="no gradients for step 0 within 36s"))
    assert len(of(out, do.ProbePeer)) == 1
    swarm.feed(on.ProbeResult(now=swarm.now, peer_id=3, problem=None))  # reachable, only slow
    swarm.now += DEADLINE_S
    keep_alive(swarm)
    out = swarm.feed(on.Tick(now=swarm.now))
    assert of(out, do.RecordStep) == []  # before: an empty step, every sample of the stage lost
    (barrier,) = [m for d in of(out, do.Send) if isinstance(m := d.message, StepBarrier)]
    assert (barrier.attempt, [p.peer_id for p in barrier.group]) == (1, [1, 2])
    (event,) = of(out, do.RecordEvent)
    assert (event.kind, event.data["dropped"]) == ("averaging_deadline", [3])
    # Peer 3 held one of the two microbatches: only that one is lost.
    (record,) = of(swarm.average(ids[:1]), do.RecordStep)
    assert record.samples_counted == (4,) and record.samples_lost == 4 and record.attempts == (1,)


def barriers_in(decisions: list[do.Decision]) -> list[StepBarrier]:
    return [m for d in of(decisions, do.Send) if isinstance(m := d.message, StepBarrier)]


def measure_link_of_3(swarm: Swarm, rate: float) -> None:
    """Peers 1 and 2 report peer 3's link at `rate` bytes/s, taken in at the next view's refresh."""
    swarm.now += SWARM_VIEW_REFRESH_S
    keep_alive(swarm)
    for reporter in (1, 2):
        swarm.say(reporter, Heartbeat(throughput=10.0, queue_length=0, samples_done=0, links={3: rate}))
    swarm.feed(on.Tick(now=swarm.now))


def test_a_small_round_measured_slow_goes_in_a_butterfly():
    # Three members under the size threshold, one measured at 1 MB/s: all-to-all would send each
    # two of the one stage's 26 MB float32 sums against 4/3 in a butterfly, 17.5 s longer.
    swarm = three_on_stage_zero(preset="small")
    gradient_bytes = 4 * get_preset("small").parameter_count
    swarm.feed(on.Tick(now=swarm.now))
    swarm.train(1)
    (fast,) = barriers_in(swarm.log)
    assert fast.pattern == "all_to_all"  # nothing measured: nothing says all-to-all costs the step
    swarm = three_on_stage_zero(preset="small")
    slow = 1e6
    measure_link_of_3(swarm, slow)
    swarm.train(1)
    (barrier,) = barriers_in(swarm.log)
    assert barrier.pattern == "butterfly"
    assert barrier.push_timeout_s == push_allowance_s(gradient_bytes, 3, slow, "butterfly")
    # Only peer 3 is measured: the others are taken at its rate, and the parts stay equal.
    assert fast.part_weights is None and barrier.part_weights is None


def test_a_butterfly_member_on_a_slow_link_owns_a_part_in_proportion_to_it():
    swarm = three_on_stage_zero(preset="small")
    swarm.now += SWARM_VIEW_REFRESH_S
    keep_alive(swarm)
    swarm.say(1, Heartbeat(throughput=10.0, queue_length=0, samples_done=0, links={2: 1e8, 3: 1e6}))
    swarm.say(2, Heartbeat(throughput=10.0, queue_length=0, samples_done=0, links={1: 1e8, 3: 1e6}))
    swarm.feed(on.Tick(now=swarm.now))
    swarm.train(1)
    (barrier,) = barriers_in(swarm.log)
    assert barrier.pattern == "butterfly"
    assert [p.peer_id for p in barrier.group] == [1, 2, 3]
    assert barrier.part_weights == [100_000, 100_000, 1_000]


def test_a_member_measured_slow_is_given_the_time_its_link_needs_then_dropped_then_more_time():
    # All-to-all, as this allowance is sized (a 3-member round this slow goes in a butterfly by
    # default: `test_a_small_round_measured_slow_goes_in_a_butterfly`).
    swarm = three_on_stage_zero(preset="small", patterns=ALL_TO_ALL_ALWAYS)
    slow = 1e6  # bytes/s both ways: slower than peers assume, not choked
    measure_link_of_3(swarm, slow)
    ids = swarm.train(1)
    (barrier,) = barriers_in(swarm.log)
    gradient_bytes = 4 * get_preset("small").parameter_count
    allowance = push_allowance_s(gradient_bytes, 3, slow)
    assert barrier.push_timeout_s == allowance > push_allowance_s(gradient_bytes, 3, None)
    assert 2 * allowance > DEADLINE_S
    # Past the run's deadline the round still waits: the slow member's pushes are on their way.
    swarm.now += DEADLINE_S + 1
    keep_alive(swarm)
    swarm.say(2, PeerUnreachable(peer_id=3, reason="no gradients for step 0"))
    swarm.feed(on.ProbeResult(now=swarm.now, peer_id=3, problem=None))
    assert barriers_in(swarm.feed(on.Tick(now=swarm.now))) == []
    # Past twice its allowance it goes on without it.
    swarm.now += 2 * allowance - DEADLINE_S
    keep_alive(swarm)
    (again,) = barriers_in(swarm.feed(on.Tick(now=swarm.now)))
    assert (again.attempt, [p.peer_id for p in again.group]) == (1, [1, 2])
    assert again.push_timeout_s == push_allowance_s(gradient_bytes, 2, None)
    (record,) = of(swarm.average(ids), do.RecordStep)
    # Back in the next step, its pushes are given time for half the rate measured: the reading is of
    # calls both ways, and its upload alone proved slower.
    swarm.feed(on.StepRecorded(now=swarm.now, step=record.step))
    swarm.apply_all()
    swarm.ready(3, origin="copied")
    measure_link_of_3(swarm, slow)
    swarm.train(1)
    (back,) = barriers_in(swarm.log)[-1:]
    assert sorted(p.peer_id for p in back.group) == [1, 2, 3]
    assert back.push_timeout_s == push_allowance_s(gradient_bytes, 3, slow / 2) > allowance
    # Evicted as unreachable, it reconnects: a new channel, the time it was found to need kept.
    swarm.join(3)
    assert swarm.machine.members[3].rounds_held_up == 1


# ---- loading a stage never falls back to a fresh start --------------------------------------------


def test_a_failed_stage_load_is_assigned_again_not_started_afresh():
    swarm = new_swarm(step=3)
    swarm.join(1)
    swarm.ready(1)
    assert len(of(swarm.join(2, stage=0), do.AssignStage)) == 1
    failed = swarm.say(2, StageLoadFailed(stage=0, step=3, reason="no offered peer gave its state"))
    assert [e.kind for e in of(failed, do.RecordEvent)] == ["stage_load_failed"]
    swarm.now += 1
    keep_alive(swarm)
    assert of(swarm.feed(on.Tick(now=swarm.now)), do.AssignStage) == []
    swarm.now += 5
    keep_alive(swarm)
    (again,) = of(swarm.feed(on.Tick(now=swarm.now)), do.AssignStage)
    assert (again.peer_id, again.stage, [e.peer_id for e in again.state_sources]) == (2, 0, [1])


def test_a_kicked_peer_is_told_and_closed():
    swarm = two_by_one()
    out = swarm.feed(on.PeerRemoved(now=swarm.now, peer_id=2, reason="too slow"))
    assert sent(out, 2, Kicked) == [Kicked(reason="too slow")]
    assert of(out, do.Close) == [do.Close(peer_id=2, code=1008, reason="removed: too slow")]
    assert sent(swarm.say(1, WorkRequest()), 1) == [NoWork(step=0, reason="stage 1 has no ready peer")]


# ---- joins during a step: one assignment per real change ------------------------------------------


def test_a_peer_joining_while_a_step_averages_is_assigned_once_at_the_boundary():
    swarm = two_by_one()
    swarm.train(1)
    assert of(swarm.join(3), do.AssignStage) == []
    # However often it says it is ready meanwhile, it is not re-assigned (this looped every ~12 ms).
    for _ in range(50):
        assert of(swarm.say(3, StageReady(stage=0, step=0, origin="copied")), do.AssignStage) == []
    swarm.average(list(swarm.machine.book.done))
    swarm.feed(on.StepRecorded(now=swarm.now, step=0))
    opened = swarm.apply_all()
    (assign,) = of(opened, do.AssignStage)
    assert (assign.peer_id, assign.step, assign.reason) == (3, 1, "joined")
    assert [s.peer_id for s in assign.state_sources] == [1]


def test_a_peer_ready_at_the_current_step_is_never_reassigned():
    swarm = two_by_one()
    before = len(of(swarm.log, do.AssignStage))
    for _ in range(20):
        swarm.ready(1)
    assert len(of(swarm.log, do.AssignStage)) == before


def test_a_peer_behind_while_collecting_copies_again_once():
    swarm = new_swarm(step=4)
    swarm.join(1)
    out = swarm.say(1, StageReady(stage=0, step=2, origin="kept"))
    (assign,) = of(out, do.AssignStage)
    assert assign.reason == "state was behind; copying again"


def test_a_loading_peer_holds_the_barrier_for_a_while_only():
    swarm = two_by_one()
    swarm.join(3)  # assigned stage 0, loading
    ids = swarm.train(1)
    assert len(ids) == 2 and swarm.machine.phase == Phase.COLLECTING
    swarm.now += JOIN_HOLD_S - 1
    for peer_id in (1, 2, 3):
        swarm.say(peer_id, Heartbeat(throughput=10.0, queue_length=0, samples_done=0))
    swarm.feed(on.Tick(now=swarm.now))
    assert swarm.machine.phase == Phase.COLLECTING
    swarm.now += 2
    swarm.feed(on.Tick(now=swarm.now))
    assert swarm.machine.phase == Phase.AVERAGING
    assert 3 not in swarm.machine.rounds[0].group


def test_copies_begun_one_after_another_hold_the_barrier_for_a_while_in_all():
    """A swarm of thousands begins a copy every second or so: each one held the barrier for its own
    hold, so the step never averaged (the simulator's 10,000 peers: one step in two hours)."""
    swarm = two_by_one()
    swarm.join(3)
    swarm.train(1)
    batch_in = swarm.now
    joiner = 4
    while swarm.machine.phase == Phase.COLLECTING:
        swarm.join(joiner)  # each copy begins while the last one is under way
        joiner += 1
        swarm.now += 1
        for peer_id in (1, 2):
            swarm.say(peer_id, Heartbeat(throughput=10.0, queue_length=0, samples_done=0))
        swarm.feed(on.Tick(now=swarm.now))
        assert swarm.now - batch_in <= JOIN_HOLD_S, "the barrier waits for copies for ever"
    assert swarm.machine.phase == Phase.AVERAGING
    assert swarm.now - batch_in == JOIN_HOLD_S
    assert swarm.machine.rounds[0].group == frozenset({1})


def test_a_copy_that_arrived_behind_is_not_waited_for_again():
    """A joiner whose copy takes longer than a step collects plus the hold copies again every step;
    waiting for each copy held every step for the hold (the simulator found one doing so for hours
    in a swarm of 100). Its first copy is waited for, the next ones are not, and serving resets it."""
    swarm = two_by_one()
    swarm.join(3)
    waits = []
    for arrived_behind in range(3):
        assert swarm.machine.members[3].copies_behind == arrived_behind
        ids = swarm.train(1)
        waited = 0.0
        while swarm.machine.phase == Phase.COLLECTING:
            swarm.now += 1
            waited += 1
            for peer_id in (1, 2, 3):
                swarm.say(peer_id, Heartbeat(throughput=10.0, queue_length=0, samples_done=0))
            swarm.feed(on.Tick(now=swarm.now))
            assert waited < 10 * JOIN_HOLD_S, "the barrier waits for the copy for ever"
        waits.append(waited)
        assert 3 not in swarm.machine.rounds[0].group
        # The copy arrives while the step averages: behind.
        swarm.say(3, StageReady(stage=0, step=swarm.machine.book.step, origin="copied"))
        (record,) = of(swarm.average(ids), do.RecordStep)
        swarm.feed(on.StepRecorded(now=swarm.now, step=record.step))
        (assign,) = of(swarm.apply_all(), do.AssignStage)
        assert (assign.peer_id, assign.reason) == (3, "state was behind; copying again")
    # The first barrier waits the hold; the others go at the step's last microbatch.
    assert waits == [JOIN_HOLD_S, 0.0, 0.0]
    swarm.ready(3)
    assert swarm.machine.members[3].ready and swarm.machine.members[3].copies_behind == 0


# ---- grant pacing ---------------------------------------------------------------------------------


def test_grants_stop_at_what_the_slowest_stage_serves_within_the_call_timeout():
    # Two stages of one peer at 0.8 samples/s, microbatches of 4: the pipeline holds 2 (a 10 s trip
    # at 0.8 samples/s) and the slower stage serves 6 more in half the call timeout; the step has
    # 1,000 microbatches that trainers would otherwise take all at once.
    swarm = new_swarm(target=4000)
    for peer_id in (1, 2):
        swarm.join(peer_id, throughput=0.8)
        swarm.ready(peer_id)
    swarm.now += VIEW_GAP_S
    swarm.feed(on.Tick(now=swarm.now))
    assert swarm.machine.grant_cap == 8
    grants = [sent(swarm.say(1 + n % 2, WorkRequest()), 1 + n % 2)[0] for n in range(8)]
    assert all(isinstance(g, WorkGrant) for g in grants)
    assert sent(swarm.say(1, WorkRequest()), 1) == [
        NoWork(step=0, reason="8 microbatches in flight, as many as the stages serve in time")
    ]
    done = grants[0]
    assert isinstance(done, WorkGrant)
    swarm.say(1, MicrobatchDone(step=0, microbatch_id=done.microbatch_id, samples=done.samples, loss=2.0))
    assert isinstance(sent(swarm.say(1, WorkRequest()), 1)[0], WorkGrant)


def test_grants_are_bounded_from_the_ready_that_serves_the_last_stage_while_its_view_is_held_back():
    # The second ready comes within VIEW_GAP_S of the first's view: the view waits for a tick, but
    # the cap must not, or every request until then is granted (at 1,000 simulated peers the whole
    # opening batch went to stage 0's one ready peer).
    swarm = new_swarm(target=4000)
    for peer_id in (1, 2):
        swarm.join(peer_id, throughput=0.8)
        swarm.ready(peer_id)
    assert swarm.machine.view_due
    assert swarm.machine.grant_cap == 8
    grants = [sent(swarm.say(1 + n % 2, WorkRequest()), 1 + n % 2)[0] for n in range(8)]
    assert all(isinstance(g, WorkGrant) for g in grants)
    assert sent(swarm.say(2, WorkRequest()), 2) == [
        NoWork(step=0, reason="8 microbatches in flight, as many as the stages serve in time")
    ]


def test_grant_pacing_counts_a_peer_at_what_its_link_carries():
    swarm = new_swarm(target=4000)
    for peer_id in (1, 2):
        swarm.join(peer_id, throughput=50.0)
        swarm.ready(peer_id)
    swarm.now += VIEW_GAP_S
    swarm.feed(on.Tick(now=swarm.now))
    unlinked = swarm.machine.grant_cap
    # Each measured the other's link at 2 KB/s: far below what 50 samples/s would move.
    per_sample = stage_bytes_per_sample(2, 32, get_preset("tiny").d_model, "none")
    for peer_id, other in ((1, 2), (2, 1)):
        swarm.say(peer_id, Heartbeat(throughput=50.0, queue_length=0, samples_done=0, links={other: 2000.0}))
    swarm.now += SWARM_VIEW_REFRESH_S
    swarm.feed(on.Tick(now=swarm.now))
    served = [2000.0 / per_sample[0], 2000.0 / per_sample[1]]
    assert swarm.machine.grant_cap == outstanding_cap(served, [1, 1], 4)
    assert unlinked is not None and swarm.machine.grant_cap is not None
    assert swarm.machine.grant_cap < unlinked


# ---- pauses and restarts --------------------------------------------------------------------------


def test_a_paused_run_grants_nothing_until_resumed():
    swarm = two_by_one()
    out = swarm.feed(on.StatusSet(now=swarm.now, status="paused"))
    assert RunStatusChanged(status="paused") in sent(out, 1)
    assert sent(swarm.say(1, WorkRequest()), 1) == [NoWork(step=0, reason="run is paused")]
    swarm.feed(on.StatusSet(now=swarm.now, status="active"))
    assert isinstance(sent(swarm.say(1, WorkRequest()), 1)[0], WorkGrant)


def test_a_checkpoint_asked_for_while_training_is_taken_at_the_next_boundary():
    swarm = two_by_one()
    assert of(swarm.feed(on.CheckpointWanted(now=swarm.now)), do.Send) == []
    swarm.whole_step()
    assert sent(swarm.log, 1, CheckpointRequest) == [CheckpointRequest(step=1, stage=0)]
    assert sent(swarm.log, 2, CheckpointRequest) == [CheckpointRequest(step=1, stage=1)]


def test_after_a_restart_peers_behind_by_the_recorded_step_are_sent_its_update():
    update = ApplyStep(step=6, stage=1, attempt=2, learning_rate=0.01, samples=8, grad_scale=0.5)
    swarm = new_swarm(step=7, last_apply={1: update})
    (assign,) = of(swarm.join(2, stage=1), do.AssignStage)
    assert assign.apply == update
    (other,) = of(swarm.join(1, stage=0), do.AssignStage)
    assert other.apply is None


def test_a_restarted_machine_does_not_send_a_stale_update():
    update = ApplyStep(step=3, stage=0, learning_rate=0.01, samples=8, grad_scale=1.0)
    swarm = new_swarm(step=7, last_apply={0: update})
    (assign,) = of(swarm.join(1, stage=0), do.AssignStage)
    assert assign.apply is None


def test_the_recorded_update_is_offered_to_peers_that_join_the_next_step():
    swarm = two_by_one()
    swarm.whole_step()
    (assign,) = of(swarm.join(3, stage=1), do.AssignStage)
    assert assign.apply is not None and (assign.apply.step, assign.apply.stage) == (0, 1)


# ---- throughput the swarm observed, not what a peer claims ---------------------------------------


def served_by(swarm: Swarm, trainer: int, peer: int, seconds: float) -> None:
    """`trainer` finishes a microbatch whose stage call `peer` served in `seconds`."""
    (grant,) = sent(swarm.say(trainer, WorkRequest()), trainer)
    assert isinstance(grant, WorkGrant)
    done = MicrobatchDone(
        step=grant.step,
        microbatch_id=grant.microbatch_id,
        samples=grant.samples,
        loss=1.0,
        served=[ServedCall(peer_id=peer, samples=grant.samples, seconds=seconds)],
    )
    swarm.say(trainer, done)


def test_a_claim_far_above_what_trainers_saw_served_is_capped():
    swarm = new_swarm(target=1000)
    swarm.join(1, throughput=10.0)
    swarm.join(2, throughput=10.0)
    swarm.join(3, throughput=1e6)  # claims to be very fast; serves stage 0 like peer 1
    assert swarm.machine.members[3].stage == 0
    for peer_id in (1, 2, 3):
        swarm.ready(peer_id)
        swarm.say(
            peer_id, Heartbeat(throughput=1e6 if peer_id == 3 else 10.0, queue_length=0, samples_done=0)
        )
    liar = swarm.machine.members[3]
    assert liar.effective_throughput == 1e6  # nobody has timed it yet: its word stands
    for trainer in (1, 2) * 3:
        served_by(swarm, trainer, 3, seconds=1.0)  # 4 samples in 1 s
    assert liar.effective_throughput == pytest.approx(CLAIM_SLACK * 4.0)
    # Routing weights, state sources and checkpoint uploads now go by that figure.
    view = sent(swarm.feed(on.Tick(now=swarm.now + 11)), 1, SwarmView)[-1]
    assert next(p.throughput for p in view.peers if p.peer_id == 3) == pytest.approx(CLAIM_SLACK * 4.0)


def test_an_honest_peer_whose_calls_wait_in_its_queue_keeps_its_claim():
    """Trainers keep calls queued at every peer: most timings include several calls' wait. The
    quickest of them is the peer's own pace, and its claim stands."""
    swarm = new_swarm(target=1000)
    for peer_id in (1, 2, 3):
        swarm.join(peer_id, throughput=4.0)
        swarm.ready(peer_id)
    # 4 samples a call at 4 samples/s: 1 s computing, behind 0 to 6 queued calls.
    for waited in (6, 5, 0, 6, 4, 1, 5, 6):
        served_by(swarm, 2 if waited % 2 else 3, 1, seconds=1.0 + waited)
    assert swarm.machine.members[1].effective_throughput == 4.0


def test_a_busy_peer_at_a_bottleneck_keeps_its_claim_however_long_its_calls_queue():
    """Every call waits behind 31 others, so even the quickest timing (4 samples in 16 s) is 1/32 of
    the peer's pace and the quickest-tenth rule alone capped it to half its claim; the calls it got
    through over time are its pace."""
    swarm = new_swarm(target=1000)
    for peer_id in (1, 2, 3):
        swarm.join(peer_id, throughput=4.0)
        swarm.ready(peer_id)
    assert swarm.machine.members[1].stage == 0  # of 2 stages: a sample is a forward and a backward call
    # 4 samples a call at 4 samples/s, a forward and a backward: a call every 0.5 s, each waited 16 s.
    for call in range(16):
        swarm.now += 0.5
        served_by(swarm, 2 if call % 2 else 3, 1, seconds=16.0)
    peer = swarm.machine.members[1]
    assert peer.served_pace == pytest.approx(4.0)
    assert peer.effective_throughput == 4.0


def test_a_peer_that_serves_at_a_fraction_of_its_claim_is_capped_by_its_pace_too():
    swarm = new_swarm(target=1000)
    for peer_id in (1, 2, 3):
        swarm.join(peer_id, throughput=1e6 if peer_id == 1 else 4.0)
        swarm.ready(peer_id)
    # Kept busy by queued calls, it gets through 4 samples (two calls' worth of work) every 2 s.
    for call in range(16):
        swarm.now += 1.0
        served_by(swarm, 2 if call % 2 else 3, 1, seconds=10.0)
    peer = swarm.machine.members[1]
    assert peer.served_pace == pytest.approx(2.0)
    assert peer.effective_throughput == pytest.approx(CLAIM_SLACK * 2.0)


def test_one_trainer_alone_cannot_talk_a_peer_down():
    swarm = new_swarm(target=1000)
    for peer_id in (1, 2, 3):
        swarm.join(peer_id, throughput=10.0)
        swarm.ready(peer_id)
    for _ in range(6):
        served_by(swarm, 2, 1, seconds=100.0)  # one trainer says peer 1 is glacial
    assert swarm.machine.members[1].effective_throughput == 10.0
    # and a trainer's timing of itself is not taken
    for _ in range(6):
        served_by(swarm, 1, 1, seconds=100.0)
    assert swarm.machine.members[1].effective_throughput == 10.0
