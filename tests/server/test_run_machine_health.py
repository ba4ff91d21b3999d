"""The run's machine keeps its health: told to the shell on every change, a stall and its end recorded."""

from __future__ import annotations

from server.policies.health import RunState, StageColor
from server.swarm import decisions as do
from server.swarm import inputs as on
from swarmhub.status import PeerState, RunStatus
from tests.server.test_run_machine import Swarm, new_swarm, of, two_by_one


def tick(swarm: Swarm, seconds: float = 0.5) -> list[do.Decision]:
    swarm.now += seconds
    return swarm.feed(on.Tick(now=swarm.now))


def health_of(decisions: list[do.Decision]) -> do.HealthChanged | None:
    changes = of(decisions, do.HealthChanged)
    return changes[-1] if changes else None


def events(decisions: list[do.Decision]) -> list[tuple[str, str]]:
    return [(d.kind, d.message) for d in of(decisions, do.RecordEvent) if d.kind.startswith("run_")]


def test_a_new_run_waits_for_peers_then_trains() -> None:
    swarm = new_swarm()
    changed = health_of(tick(swarm))
    assert changed is not None and changed.health.state == RunState.WAITING
    assert changed.health.reason == "no peer has joined yet"
    swarm.join(1)
    swarm.join(2)
    swarm.ready(1)
    assert health_of(tick(swarm)).health.reason == "stage 1 is loading its state"
    swarm.ready(2)
    out = tick(swarm)
    assert health_of(out).health.state == RunState.TRAINING
    assert events(out) == []  # waiting is not a stall
    assert health_of(tick(swarm)) is None  # nothing changed: nothing told


def test_losing_a_stages_only_peer_stalls_the_run_and_its_return_recovers_it() -> None:
    swarm = two_by_one()
    tick(swarm)
    lost_at = swarm.now
    swarm.feed(on.PeerLeft(now=swarm.now + 0.2, peer_id=2, state=PeerState.LOST, reason="channel closed"))
    out = tick(swarm)
    stalled = health_of(out).health
    assert (stalled.state, stalled.reason, stalled.since) == (
        RunState.STALLED,
        "stage 1 has no live peer",
        lost_at,
    )
    assert [s.color for s in stalled.stages] == [StageColor.AMBER, StageColor.RED]
    assert events(out) == [("run_stalled", "stalled: stage 1 has no live peer")]
    assert events(tick(swarm)) == []  # recorded once

    swarm.now += 9.5
    swarm.join(2, stage=1)
    swarm.ready(2)
    out = tick(swarm)
    assert health_of(out).health.state == RunState.TRAINING
    assert events(out) == [("run_recovered", "training again after 11s stalled")]


def test_pausing_is_told_at_once_and_resuming_expects_work_from_then() -> None:
    swarm = two_by_one()
    tick(swarm)
    paused = health_of(swarm.feed(on.StatusSet(now=swarm.now, status=RunStatus.PAUSED)))
    assert paused is not None and paused.health.state == RunState.PAUSED
    # Long paused: resuming is not a stall, although nothing has finished for minutes.
    swarm.now += 600.0
    for peer_id in (1, 2):
        swarm.machine.members[peer_id].last_seen = swarm.now
    resumed = health_of(swarm.feed(on.StatusSet(now=swarm.now, status=RunStatus.ACTIVE)))
    assert resumed is not None and resumed.health.state == RunState.TRAINING


def test_a_whole_swarm_that_finishes_nothing_stalls() -> None:
    swarm = two_by_one()
    swarm.whole_step()
    tick(swarm)
    stall_after = swarm.machine.settings.averaging_deadline_s
    out: list[do.Decision] = []
    for _ in range(int(stall_after) + 2):
        for member in swarm.machine.members.values():
            member.last_seen = swarm.now  # alive, heartbeating, but no work finishes
        out += tick(swarm, 1.0)
    assert health_of(out).health.state == RunState.STALLED
    assert [kind for kind, _ in events(out)] == ["run_stalled"]
    swarm.whole_step()
    assert events(tick(swarm))[0][0] == "run_recovered"


def test_kicking_a_stages_only_peer_stalls_the_run() -> None:
    swarm = two_by_one()
    tick(swarm)
    swarm.feed(on.PeerRemoved(now=swarm.now, peer_id=2, reason="kicked by admin"))
    out = tick(swarm)
    assert health_of(out).health.reason == "stage 1 has no live peer"
    assert events(out) == [("run_stalled", "stalled: stage 1 has no live peer")]
