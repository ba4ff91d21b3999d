"""Reports of unreachable peers from trainers whose calls timed out long after their grant."""

from __future__ import annotations

from server.swarm import decisions as do
from server.swarm.blame import REPORT_WINDOW_S
from swarmhub.wire import MicrobatchFailed, PeerUnreachable
from tests.server.test_run_machine import of, working_swarm

CALL_TIMEOUT_S = 60.0
"""The trainers' default call timeout (`PeerSettings.call_timeout_s`): longer than the report window."""


def test_a_call_that_timed_out_long_after_its_grant_is_reported_with_reason():
    """Issue 13: trainers whose calls queued at an overloaded peer timed out a call timeout after
    their grant, and were counted as misbehaving for reporting it."""
    assert CALL_TIMEOUT_S > REPORT_WINDOW_S
    swarm = working_swarm(3)  # every peer holds a microbatch granted now
    swarm.now += CALL_TIMEOUT_S
    out = swarm.say(2, PeerUnreachable(peer_id=1, reason=f"no answer within {CALL_TIMEOUT_S:g}s"))
    assert [e.kind for e in of(out, do.RecordEvent)] == []
    assert [d.peer_id for d in of(out, do.ProbePeer)] == [1]
    assert swarm.machine.members[2].strikes == 0


def test_a_trainer_with_nothing_in_flight_and_no_grant_lately_has_no_reason():
    swarm = working_swarm(3)
    for microbatch_id, grant in list(swarm.machine.book.outstanding.items()):
        if grant.trainer_id == 2:
            swarm.say(2, MicrobatchFailed(step=0, microbatch_id=microbatch_id, reason="gave up"))
    swarm.now += REPORT_WINDOW_S + 1
    out = swarm.say(2, PeerUnreachable(peer_id=1, reason="made up"))
    assert [e.kind for e in of(out, do.RecordEvent)] == ["peer_misbehaving"]
    assert of(out, do.ProbePeer) == []
