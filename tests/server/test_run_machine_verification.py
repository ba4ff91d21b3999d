"""Verified computation in the run's state machine: spot-check mismatches refereed by a third peer,
the cost of spot checks booked per step, and contributions out of proportion to their samples."""

from __future__ import annotations

import dataclasses

import pytest

from server.policies.arbitration import CASE_TTL_S, MAX_OPEN_CASES_PER_REPORTER
from server.policies.averaging import PatternRule
from server.policies.part_check import PartReport
from server.swarm import decisions as do
from server.swarm import inputs as on
from server.swarm.membership import FAULTY_CLOSE_CODE
from server.swarm.verification import REJECTIONS_TO_BAN
from swarmhub.status import PeerState
from swarmhub.wire import (
    Arbitrate,
    ArbitrationVerdict,
    AveragingDone,
    CheckParts,
    CheckTally,
    ContributionNorm,
    Heartbeat,
    PartsChecked,
    SpotCheckMismatch,
    StepBarrier,
    WorkGrant,
    WorkRequest,
)
from tests.policies.test_part_check import honest_reports, with_change
from tests.server.test_run_machine import Swarm, keep_alive, new_swarm, of, sent

TRAINER = 1
CHECKED, CHECKER = 2, 3


def stage_of(*peers: int) -> Swarm:
    """One stage served by `peers`, all ready, and peer 1 a trainer only (the coordinator cannot reach
    it) that was granted a microbatch: it had reason to call every peer of the stage."""
    swarm = new_swarm(stages=1)
    swarm.join(TRAINER, probe_problem="ConnectionRefusedError")
    for peer_id in peers:
        swarm.join(peer_id)
        swarm.ready(peer_id)
    assert isinstance(sent(swarm.say(TRAINER, WorkRequest()), TRAINER)[0], WorkGrant)
    return swarm


def mismatch(case: int = 7, checked: int = CHECKED, checker: int = CHECKER) -> SpotCheckMismatch:
    return SpotCheckMismatch(
        case=case,
        step=0,
        stage=0,
        microbatch_id="mb-1",
        kind="forward",
        checked=checked,
        checker=checker,
        checked_digest="a" * 64,
        checker_digest="b" * 64,
        discrepancy=0.5,
        tolerance=0.01,
    )


def verdict(case_id: int, *, checked: bool, checker: bool, valid: bool = True) -> ArbitrationVerdict:
    return ArbitrationVerdict(
        case_id=case_id,
        valid=valid,
        agrees_with_checked=checked,
        agrees_with_checker=checker,
        discrepancy_checked=0.0 if checked else 0.5,
        discrepancy_checker=0.0 if checker else 0.5,
        tolerance=0.01,
    )


def kinds(decisions: list[do.Decision]) -> list[str]:
    return [e.kind for e in of(decisions, do.RecordEvent)]


# ---- a mismatch is refereed ----------------------------------------------------------------------


def test_a_mismatch_names_the_stages_third_peer_as_referee_to_the_reporter():
    swarm = stage_of(2, 3, 4)
    out = swarm.say(TRAINER, mismatch(case=7))
    (arbitrate,) = sent(out, TRAINER, Arbitrate)
    assert (arbitrate.case, arbitrate.case_id, arbitrate.referee.peer_id) == (7, 1, 4)
    assert arbitrate.referee.address == "127.0.0.1:9004"
    assert kinds(out) == ["spot_check_mismatch"]
    # Only the reporter holds the evidence: nobody else is told anything.
    assert {d.peer_ids for d in of(out, do.Send)} == {(TRAINER,)}
    assert swarm.machine.cases[1].referee == 4


@pytest.mark.parametrize(
    ("checked", "checker", "banned"),
    [(False, True, CHECKED), (True, False, CHECKER)],
)
def test_the_peer_the_referee_disagrees_with_is_banned(checked, checker, banned):
    swarm = stage_of(2, 3, 4)
    swarm.say(TRAINER, mismatch())
    out = swarm.say(4, verdict(1, checked=checked, checker=checker))
    (close,) = of(out, do.Close)
    assert (close.peer_id, close.code) == (banned, FAULTY_CLOSE_CODE) and close.reason.startswith("banned: ")
    (departure,) = of(out, do.RecordDeparture)
    assert (departure.peer_id, departure.state, departure.stage) == (banned, PeerState.BANNED, 0)
    (event,) = [e for e in of(out, do.RecordEvent) if e.kind == "peer_faulty"]
    assert event.peer_id == banned and event.data["referee"] == 4 and event.data["reporter"] == TRAINER
    assert banned not in swarm.machine.members
    assert swarm.machine.cases == {}
    # The others stay, unharmed.
    assert {2, 3, 4} - {banned} <= set(swarm.machine.members)
    assert all(m.strikes == 0 for m in swarm.machine.members.values())


@pytest.mark.parametrize("role", ["reporter", "checked", "checker", "bystander"])
def test_a_verdict_from_anyone_but_the_referee_is_a_strike(role):
    swarm = stage_of(2, 3, 4, 5)
    swarm.say(TRAINER, mismatch())
    referee = swarm.machine.cases[1].referee
    assert referee in (4, 5)
    sender = {"reporter": TRAINER, "checked": CHECKED, "checker": CHECKER, "bystander": 9 - referee}[role]
    out = swarm.say(sender, verdict(1, checked=False, checker=True))
    assert of(out, do.Close) == [] and of(out, do.RecordDeparture) == []
    assert kinds(out) == ["peer_misbehaving"] and swarm.machine.members[sender].strikes == 1
    assert set(swarm.machine.members) == {1, 2, 3, 4, 5}
    # The case still waits for its referee.
    assert of(swarm.say(referee, verdict(1, checked=False, checker=True)), do.Close)[0].peer_id == CHECKED


def test_a_verdict_on_a_case_that_does_not_exist_is_a_strike():
    swarm = stage_of(2, 3, 4)
    out = swarm.say(4, verdict(99, checked=False, checker=True))
    assert kinds(out) == ["peer_misbehaving"] and of(out, do.Close) == []


def test_an_unfounded_mismatch_counts_against_its_reporter():
    swarm = stage_of(2, 3, 4)
    swarm.say(TRAINER, mismatch())
    out = swarm.say(4, verdict(1, checked=True, checker=True))
    assert kinds(out) == ["peer_misbehaving", "spot_check_unfounded"]
    assert of(out, do.RecordEvent)[0].peer_id == TRAINER
    assert swarm.machine.members[TRAINER].strikes == 1
    assert of(out, do.Close) == [] and swarm.machine.cases == {}


@pytest.mark.parametrize(
    ("checked", "checker", "valid"),
    [(False, False, True), (True, False, False), (False, False, False)],
)
def test_an_unresolved_verdict_harms_nobody(checked, checker, valid):
    swarm = stage_of(2, 3, 4)
    swarm.say(TRAINER, mismatch())
    out = swarm.say(4, verdict(1, checked=checked, checker=checker, valid=valid))
    assert kinds(out) == ["spot_check_unresolved"]
    assert of(out, do.Close) == [] and swarm.machine.cases == {}
    assert all(m.strikes == 0 for m in swarm.machine.members.values())


def test_a_two_peer_stage_waits_for_a_third_peer_to_referee():
    swarm = stage_of(2, 3)
    out = swarm.say(TRAINER, mismatch())
    assert kinds(out) == ["spot_check_mismatch"] and sent(out, TRAINER, Arbitrate) == []
    assert sent(swarm.feed(on.Tick(now=swarm.now)), TRAINER, Arbitrate) == []
    swarm.join(4, stage=0)
    assert sent(swarm.ready(4), TRAINER, Arbitrate) == []  # named on the next tick
    (arbitrate,) = sent(swarm.feed(on.Tick(now=swarm.now)), TRAINER, Arbitrate)
    assert (arbitrate.case_id, arbitrate.referee.peer_id) == (1, 4)
    assert sent(swarm.feed(on.Tick(now=swarm.now)), TRAINER, Arbitrate) == []  # once
    assert of(swarm.say(4, verdict(1, checked=False, checker=True)), do.Close)[0].peer_id == CHECKED


@pytest.mark.parametrize(("peers", "why"), [((2, 3), "no third peer"), ((2, 3, 4), "never answered")])
def test_a_case_nobody_settles_expires(peers, why):
    swarm = stage_of(*peers)
    swarm.say(TRAINER, mismatch())
    swarm.now += CASE_TTL_S - 1
    keep_alive(swarm)
    assert "spot_check_unresolved" not in kinds(swarm.feed(on.Tick(now=swarm.now)))
    swarm.now += 2
    keep_alive(swarm)
    out = swarm.feed(on.Tick(now=swarm.now))
    (event,) = [e for e in of(out, do.RecordEvent) if e.kind == "spot_check_unresolved"]
    assert why in event.message and event.data == {"case_id": 1, "stage": 0}
    assert swarm.machine.cases == {}
    # A late verdict on it is one the referee was no longer asked for.
    assert kinds(swarm.say(peers[-1], verdict(1, checked=False, checker=True))) == ["peer_misbehaving"]


def test_a_mismatch_between_peers_the_reporter_had_no_reason_to_call_is_a_strike():
    swarm = new_swarm(stages=1)
    for peer_id in (1, 2, 3, 4):
        swarm.join(peer_id, probe_problem="no answer" if peer_id == 1 else None)
        if peer_id != 1:
            swarm.ready(peer_id)
    out = swarm.say(TRAINER, mismatch())  # never granted a microbatch
    assert kinds(out) == ["peer_misbehaving"] and sent(out, TRAINER, Arbitrate) == []
    assert swarm.machine.cases == {}


def test_a_mismatch_naming_a_peer_not_on_the_stage_is_ignored():
    swarm = stage_of(2, 3, 4)
    for checked, checker in ((2, 9), (2, 2), (9, 3)):
        assert swarm.say(TRAINER, mismatch(checked=checked, checker=checker)) == []
    assert swarm.machine.cases == {}


def test_a_reporter_may_have_only_so_many_cases_open():
    swarm = stage_of(2, 3, 4)
    for case in range(MAX_OPEN_CASES_PER_REPORTER):
        assert len(sent(swarm.say(TRAINER, mismatch(case=case)), TRAINER, Arbitrate)) == 1
    out = swarm.say(TRAINER, mismatch(case=99))
    assert kinds(out) == ["peer_misbehaving"] and sent(out, TRAINER, Arbitrate) == []
    assert len(swarm.machine.cases) == MAX_OPEN_CASES_PER_REPORTER


def test_a_banned_peers_other_cases_are_closed_with_it():
    swarm = stage_of(2, 3, 4, 5)
    swarm.say(TRAINER, mismatch(case=1, checked=2, checker=3))
    swarm.say(TRAINER, mismatch(case=2, checked=4, checker=2))
    first = swarm.machine.cases[1].referee
    assert of(swarm.say(first, verdict(1, checked=False, checker=True)), do.Close)[0].peer_id == 2
    assert swarm.machine.cases == {}


# ---- what spot checks cost ------------------------------------------------------------------------


def heartbeat(calls: int, nbytes: int, seconds: float) -> Heartbeat:
    return Heartbeat(
        throughput=10.0,
        queue_length=0,
        samples_done=0,
        spot_checks=CheckTally(calls=calls, bytes=nbytes, seconds=seconds),
    )


def test_running_check_tallies_add_up_into_the_step_record():
    swarm = new_swarm()
    for peer_id in (1, 2):
        swarm.join(peer_id)
        swarm.ready(peer_id)
    swarm.say(1, heartbeat(2, 100, 0.5))
    swarm.say(1, heartbeat(5, 300, 1.5))  # running totals: 3 more calls
    swarm.say(1, heartbeat(5, 300, 1.5))  # nothing new
    swarm.say(2, heartbeat(1, 40, 0.25))
    swarm.say(1, heartbeat(1, 10, 0.125))  # restarted: counted from zero, nothing taken back
    record = swarm.whole_step()
    assert (record.check_calls, record.check_bytes, record.check_seconds) == (5 + 1 + 1, 300 + 40 + 10, 1.875)
    # The next step books only what was spent while it was open.
    swarm.say(1, heartbeat(1, 10, 0.125))
    swarm.say(2, heartbeat(4, 100, 1.0))
    record = swarm.whole_step()
    assert (record.check_calls, record.check_bytes, record.check_seconds) == (3, 60, 0.75)


# ---- contributions out of proportion --------------------------------------------------------------


def test_a_contribution_fifty_times_its_samples_is_rejected_and_the_round_restarted_without_it():
    """Stage 0: peers 2, 3, 4, each accumulating one microbatch; stage 1: peer 5, which trains. Peer 4's
    sum, as 2 and 3 decode it, is 50x per sample what theirs are (it claims an honest one itself)."""
    swarm = new_swarm(target=12)
    for peer_id, stage in ((2, 0), (3, 0), (4, 0), (5, 1)):
        swarm.join(peer_id, stage=stage)
        swarm.ready(peer_id)
    ids = swarm.train(5)
    assert len(ids) == 3
    share = dict(zip((2, 3, 4), ids, strict=True))
    honest = 16.0  # (4 samples x norm 1 per sample) squared

    def seen_by(member: int) -> list[ContributionNorm]:
        return [
            ContributionNorm(
                peer_id=p, norm_sq=honest * 50**2 if p == 4 and member != 4 else honest, counted=[share[p]]
            )
            for p in (2, 3, 4)
        ]

    def done(member: int, attempt: int, group: list[int], **kw) -> AveragingDone:
        return AveragingDone(
            step=0,
            attempt=attempt,
            stage=0,
            contributors=group,
            counted=[share[p] for p in group],
            grad_sum_norm_sq=1.0,
            **kw,
        )

    out = swarm.say(
        5, AveragingDone(step=0, attempt=0, stage=1, contributors=[5], counted=ids, grad_sum_norm_sq=1.0)
    )
    for member in (2, 3, 4):
        out += swarm.say(member, done(member, 0, [2, 3, 4], contributions=seen_by(member)))
    # Left out of the step, not banned: one such round can befall an honest member.
    assert of(out, do.Close) == [] and of(out, do.RecordDeparture) == []
    (event,) = [e for e in of(out, do.RecordEvent) if e.kind == "contribution_rejected"]
    assert event.peer_id == 4 and event.data["rejected_in_a_row"] == 1
    assert event.data["samples"] == 4 and event.data["norm"] == pytest.approx(200.0)
    assert "50x" in event.message
    assert not swarm.machine.members[4].ready
    assert of(out, do.RecordStep) == []
    (barrier,) = [m for d in of(out, do.Send) if isinstance(m := d.message, StepBarrier)]
    assert (barrier.stage, barrier.attempt, [p.peer_id for p in barrier.group]) == (0, 1, [2, 3])

    out = []
    for member in (2, 3):
        out += swarm.say(member, done(member, 1, [2, 3], contributions=seen_by(member)[:2]))
    (record,) = of(out, do.RecordStep)
    assert record.attempts == (1, 0)
    assert record.samples_sent == record.samples_done == 12
    assert record.samples_counted == (8, 12)
    # Books balance per stage: stage 0 lost the rejected peer's microbatch, stage 1 nothing.
    assert [record.samples_sent - counted for counted in record.samples_counted] == [4, 0]
    assert record.samples_lost == 4


def test_honest_contributions_of_different_sizes_pass():
    swarm = new_swarm(stages=1, target=12)
    for peer_id in (1, 2, 3):
        swarm.join(peer_id)
        swarm.ready(peer_id)
    ids = swarm.train(1)
    # 1 counts two microbatches (8 samples), 2 one, 3 none of its own but an honest zero.
    counted = {1: ids[:2], 2: ids[2:], 3: []}
    norms = {1: 64.0, 2: 16.0, 3: 0.0}
    contributions = [ContributionNorm(peer_id=p, norm_sq=norms[p], counted=counted[p]) for p in (1, 2, 3)]
    out = []
    for member in (1, 2, 3):
        out += swarm.say(
            member,
            AveragingDone(
                step=0,
                attempt=0,
                stage=0,
                contributors=[1, 2, 3],
                counted=ids,
                grad_sum_norm_sq=1.0,
                contributions=contributions,
            ),
        )
    assert of(out, do.Close) == []
    (record,) = of(out, do.RecordStep)
    assert record.samples_counted == (12,) and record.attempts == (0,)


def averaged(
    swarm: Swarm, shares: dict[int, list[str]], norms_sq: dict[int, float], attempt: int = 0
) -> list[do.Decision]:
    """Stage 0's members report `attempt`, each seeing every contribution as `norms_sq` says."""
    group = sorted(shares)
    contributions = [ContributionNorm(peer_id=p, norm_sq=norms_sq[p], counted=shares[p]) for p in group]
    out: list[do.Decision] = []
    for member in group:
        out += swarm.say(
            member,
            AveragingDone(
                step=swarm.machine.book.step,
                attempt=attempt,
                stage=0,
                contributors=group,
                counted=[i for p in group for i in shares[p]],
                grad_sum_norm_sq=1.0,
                contributions=contributions,
            ),
        )
    return out


@pytest.mark.parametrize("after_an_accepted_step", [True, False])
def test_two_members_are_judged_against_the_stages_accepted_rounds(after_an_accepted_step):
    """Two members cannot outvote each other; a 50x contribution is caught only once the stage has
    accepted rounds to compare with."""
    swarm = new_swarm(stages=1, target=12)
    for peer_id in (1, 2, 3):
        swarm.join(peer_id)
        swarm.ready(peer_id)
    if after_an_accepted_step:
        ids = swarm.train(1)
        out = averaged(swarm, {1: ids[:1], 2: ids[1:2], 3: ids[2:]}, {1: 16.0, 2: 16.0, 3: 16.0})
        (record,) = of(out, do.RecordStep)
        swarm.feed(on.StepRecorded(now=swarm.now, step=record.step))
        swarm.apply_all()
    swarm.feed(on.PeerLeft(now=swarm.now, peer_id=3, state=PeerState.LEFT, reason="bye"))
    ids = swarm.train(1)
    out = averaged(swarm, {1: ids[:2], 2: ids[2:]}, {1: 64.0, 2: 16.0 * 50**2})
    if after_an_accepted_step:
        assert of(out, do.Close) == []
        assert [e.peer_id for e in of(out, do.RecordEvent) if e.kind == "contribution_rejected"] == [2]
        assert of(out, do.RecordStep) == [] and swarm.machine.rounds[0].group == {1}
    else:
        assert of(out, do.Close) == []
        assert len(of(out, do.RecordStep)) == 1


@pytest.mark.parametrize(
    "outcomes",
    [
        # Rejected, accepted (the count starts again), then rejected three times: banned at the third.
        ("rejected", "accepted", "rejected", "rejected", "banned"),
        # A scaled liar just back from copying its stage may be routed no work for a step: its empty
        # contribution is not judged and does not start the count again (a real swarm of 40 steps
        # let such a liar go unbanned: rejected, empty, rejected, rejected, ...).
        ("rejected", "empty", "rejected", "banned"),
    ],
)
def test_a_member_rejected_three_rounds_in_a_row_is_banned_and_only_an_accepted_round_resets_the_count(
    outcomes: tuple[str, ...],
):
    swarm = new_swarm(stages=1, target=12)
    for peer_id in (1, 2, 3):
        swarm.join(peer_id)
        swarm.ready(peer_id)
    scaled = {1: 16.0, 2: 16.0, 3: 16.0 * 50**2}
    honest = {1: 16.0, 2: 16.0, 3: 16.0}
    for outcome in outcomes:
        ids = swarm.train(1)
        if outcome == "empty":
            shares, norms = {1: ids[:1], 2: ids[1:], 3: []}, {1: 16.0, 2: 16.0, 3: 0.0}
        else:
            shares = {1: ids[:1], 2: ids[1:2], 3: ids[2:]}
            norms = honest if outcome == "accepted" else scaled
        out = averaged(swarm, shares, norms)
        kinds = [e.kind for e in of(out, do.RecordEvent)]
        if outcome == "banned":
            (close,) = of(out, do.Close)
            assert (close.peer_id, close.code) == (3, FAULTY_CLOSE_CODE)
            (departure,) = of(out, do.RecordDeparture)
            assert departure.state == PeerState.BANNED
            (event,) = [e for e in of(out, do.RecordEvent) if e.kind == "peer_faulty"]
            assert (
                event.data["finding"] == "out_of_proportion" and "rejected 3 rounds in a row" in event.message
            )
            return
        assert of(out, do.Close) == []
        if outcome == "rejected":
            assert kinds.count("contribution_rejected") == 1
            out = averaged(swarm, {1: shares[1], 2: shares[2]}, norms, attempt=1)
        (record,) = of(out, do.RecordStep)
        swarm.feed(on.StepRecorded(now=swarm.now, step=record.step))
        swarm.apply_all()
        if outcome == "rejected":
            # Assigned again at the boundary: it copies the stage and is ready for the next step.
            swarm.ready(3, origin="copied")


def test_a_butterfly_round_judges_each_contribution_by_the_sum_of_its_parts():
    """Stage 0: peers 2, 3, 4 in a butterfly (the threshold set to 2 members); stage 1: peer 5, which
    trains. Each member reports every sender's part of its own third of the gradients. Peer 4's parts
    add up to 50x per sample: the figure judged is its whole contribution's (norm 200), not one
    part's (115, as the all-to-all reading of one view would take it)."""
    swarm = new_swarm(target=12, patterns=PatternRule(butterfly_from=2))
    for peer_id, stage in ((2, 0), (3, 0), (4, 0), (5, 1)):
        swarm.join(peer_id, stage=stage)
        swarm.ready(peer_id)
    ids = swarm.train(5)
    share = dict(zip((2, 3, 4), ids, strict=True))
    honest = 16.0  # (4 samples x norm 1 per sample) squared, over three parts

    def parts_seen(group: list[int]) -> dict[int, float]:
        """Every member's figure of each sender's part of its own 1/K of the gradients."""
        return {p: (honest * 50**2 if p == 4 else honest) / len(group) for p in group}

    out = swarm.say(
        5, AveragingDone(step=0, attempt=0, stage=1, contributors=[5], counted=ids, grad_sum_norm_sq=1.0)
    )
    assert swarm.machine.rounds[0].pattern == "butterfly"
    out += averaged(swarm, {p: [share[p]] for p in (2, 3, 4)}, parts_seen([2, 3, 4]))
    (event,) = [e for e in of(out, do.RecordEvent) if e.kind == "contribution_rejected"]
    assert event.peer_id == 4 and event.data["norm"] == pytest.approx(200.0) and "50x" in event.message
    # A rejected round is not checked: it is retried without the member at once.
    assert checks_sent(out) == []
    (barrier,) = [m for d in of(out, do.Send) if isinstance(m := d.message, StepBarrier)]
    assert (barrier.attempt, [p.peer_id for p in barrier.group], barrier.pattern) == (1, [2, 3], "butterfly")
    out = averaged(swarm, {p: [share[p]] for p in (2, 3)}, parts_seen([2, 3]), attempt=1)
    # The step waits for the part check of the butterfly round.
    assert of(out, do.RecordStep) == []
    ((peers, check),) = checks_sent(out)
    assert (peers, check.stage, check.attempt) == ((2, 3), 0, 1)
    out = answer_check(swarm, check, [2, 3])
    (record,) = of(out, do.RecordStep)
    assert record.samples_counted == (8, 12)


def checks_sent(out: list[do.Decision]) -> list[tuple[tuple[int, ...], CheckParts]]:
    return [(d.peer_ids, m) for d in of(out, do.Send) if isinstance(m := d.message, CheckParts)]


def answer_check(
    swarm: Swarm, check: CheckParts, members: list[int], reports: dict[int, PartReport] | None = None
) -> list[do.Decision]:
    """Each of `members` answers the part check (honestly, unless `reports` says otherwise)."""
    group = sorted(swarm.machine.rounds[check.stage].group)
    reports = reports or honest_reports(group)
    out = []
    for member in members:
        report = reports[member]
        out += swarm.say(
            member,
            PartsChecked(
                step=check.step, attempt=check.attempt, stage=check.stage, **dataclasses.asdict(report)
            ),
        )
    return out


def butterfly_stage(*members: int) -> tuple[Swarm, CheckParts]:
    """Stage 0 of `members` in a butterfly, stage 1 of peer 9, which trains; every member of stage 0
    reported its round, honestly: the part check is out."""
    swarm = new_swarm(target=4 * len(members), patterns=PatternRule(butterfly_from=2))
    for peer_id, stage in [*((m, 0) for m in members), (9, 1)]:
        swarm.join(peer_id, stage=stage)
        swarm.ready(peer_id)
    out = swarm.average(swarm.train(9))
    assert of(out, do.RecordStep) == []
    ((peers, check),) = checks_sent(out)
    assert peers == tuple(sorted(members)) and check.stage == 0
    return swarm, check


def test_a_clean_part_check_lets_the_step_be_recorded():
    swarm, check = butterfly_stage(2, 3, 4, 5)
    out = answer_check(swarm, check, [2, 3, 4])
    assert of(out, do.RecordStep) == []
    (record,) = of(answer_check(swarm, check, [5]), do.RecordStep)
    assert record.attempts == (0, 0)


def test_an_owner_convicted_by_the_part_check_is_banned_and_the_round_retried_without_it():
    swarm, check = butterfly_stage(2, 3, 4, 5)
    reports = honest_reports([2, 3, 4, 5])
    # Owner 4 (part 2) sent everyone a wrong sum of its part: all hold it so.
    reports = {m: dataclasses.replace(r, held=with_change(r.held, 2, 1.0)) for m, r in reports.items()}
    out = answer_check(swarm, check, [2, 3, 4, 5], reports)
    (close,) = of(out, do.Close)
    assert close.peer_id == 4 and close.code == FAULTY_CLOSE_CODE
    (event,) = [e for e in of(out, do.RecordEvent) if e.kind == "peer_faulty"]
    assert event.data["finding"] == "part_sum" and "part 2" in event.message
    assert of(out, do.RecordStep) == []
    (barrier,) = [m for d in of(out, do.Send) if isinstance(m := d.message, StepBarrier) and m.stage == 0]
    assert (barrier.attempt, [p.peer_id for p in barrier.group]) == (1, [2, 3, 5])


def disputing(sender: int, owner_rank: int, members: list[int]) -> dict[int, PartReport]:
    """Honest reports but `sender`'s figure of what it sent to the owner of part `owner_rank`."""
    reports = honest_reports(members)
    reports[sender] = dataclasses.replace(
        reports[sender], sent=with_change(reports[sender].sent, owner_rank, 0.5)
    )
    return reports


def test_a_disputed_pair_is_left_out_and_the_round_retried_without_both():
    swarm, check = butterfly_stage(2, 3, 4, 5)
    out = answer_check(swarm, check, [2, 3, 4, 5], disputing(2, 1, [2, 3, 4, 5]))
    assert of(out, do.Close) == [] and of(out, do.RecordStep) == []
    events = [e for e in of(out, do.RecordEvent) if e.kind == "parts_disputed"]
    assert sorted(e.peer_id for e in events) == [2, 3]
    assert "[3]" in events[0].message and events[0].data["disputed_in_a_row"] == 1
    assert not swarm.machine.members[2].ready and not swarm.machine.members[3].ready
    (barrier,) = [m for d in of(out, do.Send) if isinstance(m := d.message, StepBarrier) and m.stage == 0]
    assert [p.peer_id for p in barrier.group] == [4, 5]


def test_a_member_disputed_in_its_third_round_in_a_row_is_banned_and_a_clean_check_starts_the_count_again():
    swarm, check = butterfly_stage(2, 3, 4, 5)
    swarm.machine.members[2].disputed_rounds = REJECTIONS_TO_BAN - 1
    swarm.machine.members[3].disputed_rounds = 1
    out = answer_check(swarm, check, [2, 3, 4, 5], disputing(2, 1, [2, 3, 4, 5]))
    (close,) = of(out, do.Close)
    assert close.peer_id == 2
    (event,) = [e for e in of(out, do.RecordEvent) if e.kind == "peer_faulty"]
    assert event.data["finding"] == "part_dispute"
    assert swarm.machine.members[3].disputed_rounds == 2
    swarm, check = butterfly_stage(2, 3, 4)
    swarm.machine.members[3].disputed_rounds = 2
    answer_check(swarm, check, [2, 3, 4])
    assert swarm.machine.members[3].disputed_rounds == 0


def test_a_member_lost_during_the_part_check_is_not_waited_for():
    swarm, check = butterfly_stage(2, 3, 4, 5)
    answer_check(swarm, check, [2, 3, 4])
    out = swarm.feed(on.PeerLeft(now=swarm.now, peer_id=5, state=PeerState.LOST, reason="gone"))
    (record,) = of(out, do.RecordStep)
    assert record.attempts == (0, 0)


def test_a_member_that_never_answers_the_part_check_is_gone_on_without_at_the_deadline():
    swarm, check = butterfly_stage(2, 3, 4, 5)
    answer_check(swarm, check, [2, 3, 4])
    swarm.now += swarm.machine.averaging_limit_s(0) + 1
    keep_alive(swarm)
    out = swarm.feed(on.Tick(now=swarm.now))
    (barrier,) = [m for d in of(out, do.Send) if isinstance(m := d.message, StepBarrier) and m.stage == 0]
    assert (barrier.attempt, [p.peer_id for p in barrier.group]) == (1, [2, 3, 4])
