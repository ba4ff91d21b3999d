"""Trusted verifier peers in the run's state machine: preferred as referees, and brought to a stage of
two whose peers disagree, where they check the state they copy against both parties' before they
referee."""

from __future__ import annotations

import pytest

from server.policies.arbitration import CASE_TTL_S, MAX_OPEN_CASES_PER_REPORTER
from server.swarm import decisions as do
from server.swarm import inputs as on
from swarmhub.wire import Arbitrate, SpotCheckMismatch, StageReady, WorkGrant, WorkRequest
from tests.server.test_run_machine import Swarm, keep_alive, new_swarm, of, sent
from tests.server.test_run_machine_verification import CHECKED, CHECKER, TRAINER, kinds, mismatch, verdict


def join(
    swarm: Swarm, peer_id: int, *, stage: int | None = None, trusted: bool = False, reachable: bool = True
) -> list[do.Decision]:
    return swarm.feed(
        on.PeerJoined(
            now=swarm.now,
            peer_id=peer_id,
            name=f"p{peer_id}",
            address=f"127.0.0.1:{9000 + peer_id}",
            throughput=10.0,
            stage=stage,
            requested_stage=None,
            probe_problem=None if reachable else "ConnectionRefusedError",
            trusted=trusted,
        )
    )


def swarm_of(stages: dict[int, dict[int, bool]], *, step_first: bool = False) -> Swarm:
    """`stages`: stage -> {peer: trusted}, every peer ready; peer 1 trains only and was granted a
    microbatch, so it had reason to call every stage peer. `step_first`: one whole step is taken
    before the grant, so stage state is copied from live peers."""
    swarm = new_swarm(stages=len(stages))
    join(swarm, TRAINER, reachable=False)
    for stage, peers in stages.items():
        for peer_id, trusted in peers.items():
            join(swarm, peer_id, stage=stage, trusted=trusted)
            swarm.ready(peer_id)
    if step_first:
        swarm.whole_step()
    assert isinstance(sent(swarm.say(TRAINER, WorkRequest()), TRAINER)[0], WorkGrant)
    return swarm


def tick(swarm: Swarm) -> list[do.Decision]:
    return swarm.feed(on.Tick(now=swarm.now))


def assignments(decisions: list[do.Decision]) -> list[do.AssignStage]:
    return of(decisions, do.AssignStage)


# ---- a trusted peer of the stage referees first -----------------------------------------------------


@pytest.mark.parametrize("trusted", [4, 5, 6])
def test_a_trusted_ready_peer_of_the_stage_is_the_referee_every_time(trusted):
    swarm = swarm_of({0: {2: False, 3: False, 4: trusted == 4, 5: trusted == 5, 6: trusted == 6}})
    for case in range(MAX_OPEN_CASES_PER_REPORTER):
        (arbitrate,) = sent(swarm.say(TRAINER, mismatch(case=case)), TRAINER, Arbitrate)
        assert arbitrate.referee.peer_id == trusted
    assert {c.referee for c in swarm.machine.cases.values()} == {trusted}


def test_untrusted_referees_are_drawn_when_the_only_trusted_peer_is_a_party():
    swarm = swarm_of({0: {CHECKED: True, CHECKER: False, 4: False, 5: False}})
    for case in range(MAX_OPEN_CASES_PER_REPORTER):
        (arbitrate,) = sent(swarm.say(TRAINER, mismatch(case=case)), TRAINER, Arbitrate)
        assert arbitrate.referee.peer_id in (4, 5)


def test_a_trusted_peer_that_is_not_ready_yet_does_not_referee():
    swarm = swarm_of({0: {2: False, 3: False, 4: False}})
    join(swarm, 5, stage=0, trusted=True)  # loading
    (arbitrate,) = sent(swarm.say(TRAINER, mismatch()), TRAINER, Arbitrate)
    assert arbitrate.referee.peer_id == 4


# ---- a trusted peer is brought to a stage of two ----------------------------------------------------


def test_a_stage_of_two_gets_a_trusted_peer_from_a_stage_that_can_spare_it():
    swarm = swarm_of({0: {2: False, 3: False}, 1: {4: True, 5: False}}, step_first=True)
    out = swarm.say(TRAINER, mismatch())
    assert kinds(out) == ["spot_check_mismatch", "spot_check_referee"]
    referee_event = of(out, do.RecordEvent)[1]
    assert referee_event.peer_id == 4 and referee_event.data == {"case_id": 1, "stage": 0}
    (assign,) = assignments(out)
    assert (assign.peer_id, assign.stage, assign.step, assign.corroborate) == (4, 0, 1, True)
    # It can copy the stage only from the two parties, and must find their states identical.
    assert {s.peer_id for s in assign.state_sources} == {CHECKED, CHECKER}
    assert sent(out, TRAINER, Arbitrate) == []
    assert swarm.machine.cases[1].recruited == 4 and swarm.machine.cases[1].referee is None
    # Its own stage keeps a peer.
    assert [m.peer_id for m in swarm.machine.ready(1)] == [5]

    # Loading: no second assignment, no referee yet.
    out = tick(swarm)
    assert assignments(out) == [] and sent(out, TRAINER, Arbitrate) == []
    assert "spot_check_referee" not in kinds(out)

    assert sent(swarm.ready(4), TRAINER, Arbitrate) == []  # named on the next tick
    (arbitrate,) = sent(tick(swarm), TRAINER, Arbitrate)
    assert (arbitrate.case, arbitrate.case_id, arbitrate.referee.peer_id) == (7, 1, 4)
    assert arbitrate.referee.address == "127.0.0.1:9004"
    assert sent(tick(swarm), TRAINER, Arbitrate) == []  # once
    (close,) = of(swarm.say(4, verdict(1, checked=False, checker=True)), do.Close)
    assert close.peer_id == CHECKED


def test_a_recruited_verifier_ready_for_an_old_step_is_not_named():
    swarm = swarm_of({0: {2: False, 3: False}, 1: {4: True, 5: False}}, step_first=True)
    swarm.say(TRAINER, mismatch())
    out = swarm.say(4, StageReady(stage=0, step=0, origin="copied"))
    # Told to copy again, not trusted with a stale state.
    (assign,) = assignments(out)
    assert (assign.peer_id, assign.stage, assign.corroborate) == (4, 0, True)
    assert sent(tick(swarm), TRAINER, Arbitrate) == []
    assert swarm.machine.cases[1].referee is None


def test_the_only_ready_peer_of_its_stage_is_not_taken_from_it():
    swarm = swarm_of({0: {2: False, 3: False}, 1: {4: True}})
    out = swarm.say(TRAINER, mismatch())
    assert kinds(out) == ["spot_check_mismatch"] and assignments(out) == []
    out = tick(swarm)
    assert assignments(out) == [] and "spot_check_referee" not in kinds(out)
    assert swarm.machine.members[4].stage == 1
    # Once its stage has another ready peer, the next tick brings it.
    join(swarm, 5, stage=1)
    swarm.ready(5)
    out = tick(swarm)
    assert kinds(out) == ["spot_check_referee"]
    assert [(a.peer_id, a.stage, a.corroborate) for a in assignments(out)] == [(4, 0, True)]


@pytest.mark.parametrize("why", ["untrusted", "unreachable", "the reporter"])
def test_no_peer_but_an_uninvolved_reachable_trusted_one_is_recruited(why):
    if why == "unreachable":
        swarm = swarm_of({0: {2: False, 3: False}, 1: {4: False, 5: False}})
        join(swarm, 6, trusted=True, reachable=False)
    else:
        swarm = swarm_of({0: {2: False, 3: False}, 1: {4: why == "the reporter", 5: False, 6: False}})
    reporter = TRAINER
    if why == "the reporter":
        # Trusted peer 4 trains too, and reports the mismatch on stage 0 itself.
        reporter = 4
        assert isinstance(sent(swarm.say(reporter, WorkRequest()), reporter)[0], WorkGrant)
    out = swarm.say(reporter, mismatch())
    for _ in range(3):
        out += tick(swarm)
    assert assignments(out) == [] and "spot_check_referee" not in kinds(out)
    assert swarm.machine.cases[1].recruited is None
    assert [m.peer_id for m in swarm.machine.ready(0)] == [CHECKED, CHECKER]


def stage_one_mismatch(case: int) -> SpotCheckMismatch:
    return mismatch(case=case, checked=4, checker=5).model_copy(update={"stage": 1})


def test_one_verifier_wanted_by_two_stages_of_two_is_not_passed_back_and_forth():
    swarm = swarm_of({0: {2: False, 3: False}, 1: {4: False, 5: False}, 2: {6: True, 7: False}})
    out = swarm.say(TRAINER, mismatch(case=1))
    out += swarm.say(TRAINER, stage_one_mismatch(case=2))
    assert len(assignments(out)) >= 1
    # Whichever case has it, the verifier must be left to load one stage: ticks move it no more.
    for _ in range(3):
        out = tick(swarm)
        assert assignments(out) == [], [(a.peer_id, a.stage) for a in assignments(out)]


def test_a_named_referee_is_not_recruited_away_from_its_case():
    swarm = swarm_of({0: {2: False, 3: False}, 1: {4: False, 5: False}, 2: {6: True, 7: False}})
    swarm.say(TRAINER, mismatch(case=1))
    swarm.ready(6)
    (arbitrate,) = sent(tick(swarm), TRAINER, Arbitrate)
    assert arbitrate.referee.peer_id == 6 and swarm.machine.cases[1].referee == 6
    out = swarm.say(TRAINER, stage_one_mismatch(case=2))
    assert [a.peer_id for a in assignments(out)] == []
    assert swarm.machine.members[6].stage == 0


def test_a_case_with_nobody_to_bring_expires_unresolved():
    swarm = swarm_of({0: {2: False, 3: False}, 1: {4: False, 5: False}})
    swarm.say(TRAINER, mismatch())
    swarm.now += CASE_TTL_S + 1
    keep_alive(swarm)
    out = tick(swarm)
    (event,) = [e for e in of(out, do.RecordEvent) if e.kind == "spot_check_unresolved"]
    assert "no third peer" in event.message and swarm.machine.cases == {}
    assert assignments(out) == []


# ---- corroboration is asked of trusted peers only ---------------------------------------------------


def test_only_a_trusted_peers_assignments_ask_it_to_corroborate():
    swarm = new_swarm(stages=2)
    ordinary = assignments(join(swarm, 2))
    verifier = assignments(join(swarm, 3, trusted=True))
    assert [(a.peer_id, a.corroborate) for a in ordinary] == [(2, False)]
    assert [(a.peer_id, a.corroborate) for a in verifier] == [(3, True)]
