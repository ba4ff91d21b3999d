"""A run's health and its stages' colours from plain inputs: the table of what an owner is told."""

from __future__ import annotations

import pytest

from server.policies.health import (
    HealthInputs,
    HealthWatch,
    RunState,
    StageColor,
    StageInput,
    run_health,
    stage_health,
)
from swarmhub.status import RunStatus


def stage(
    ready: int = 2, *, loading: int = 0, rate: float = 10.0, last_ready: float | None = 100.0
) -> StageInput:
    return StageInput(ready=ready, loading=loading, rate=rate, last_ready=last_ready)


def inputs(
    *stages: StageInput,
    status: RunStatus = RunStatus.ACTIVE,
    peers: int = 4,
    now: float = 100.0,
    last_progress: float = 99.0,
    whole_since: float | None = 50.0,
) -> HealthInputs:
    return HealthInputs(
        now=now,
        status=status,
        stages=stages or (stage(), stage()),
        peers=peers,
        last_progress=last_progress,
        whole_since=whole_since,
        stall_after_s=60.0,
    )


@pytest.mark.parametrize(
    ("given", "state", "reason", "since"),
    [
        (inputs(), RunState.TRAINING, "every stage has a live peer", None),
        (inputs(status=RunStatus.PAUSED), RunState.PAUSED, "paused by its owner", None),
        (inputs(status=RunStatus.FINISHED), RunState.FINISHED, "reached its last step", None),
        (inputs(status=RunStatus.ARCHIVED), RunState.ARCHIVED, "archived by its owner", None),
        # Nobody has come yet (or since the coordinator started): waiting, not stalled.
        (
            inputs(stage(0, last_ready=None), stage(0, last_ready=None), peers=0, whole_since=None),
            RunState.WAITING,
            "no peer has joined yet",
            None,
        ),
        (
            inputs(stage(1), stage(0, loading=1, last_ready=None), peers=2, whole_since=None),
            RunState.WAITING,
            "stage 1 is loading its state",
            None,
        ),
        (
            inputs(stage(1), stage(0, last_ready=None), peers=1, whole_since=None),
            RunState.WAITING,
            "stage 1 has no peer yet",
            None,
        ),
        # Stage 1's only peer went at 80: stalled since then, with the stage named.
        (
            inputs(stage(2), stage(0, last_ready=80.0), whole_since=None),
            RunState.STALLED,
            "stage 1 has no live peer",
            80.0,
        ),
        (
            inputs(stage(2), stage(0, loading=1, last_ready=80.0), whole_since=None),
            RunState.STALLED,
            "stage 1 has no live peer; 1 peer loading its state",
            80.0,
        ),
        # Two stages empty: the stall began with the first to empty.
        (
            inputs(stage(0, last_ready=90.0), stage(0, last_ready=70.0), stage(1), peers=1, whole_since=None),
            RunState.STALLED,
            "stage 1 has no live peer (and 1 more stage)",
            70.0,
        ),
        # Every peer gone after training: stalled, not waiting.
        (
            inputs(stage(0, last_ready=85.0), stage(0, last_ready=85.0), peers=0, whole_since=None),
            RunState.STALLED,
            "stage 0 has no live peer (and 1 more stage)",
            85.0,
        ),
        # A whole swarm that finishes nothing for longer than stall_after_s.
        (
            inputs(now=200.0, last_progress=130.0, whole_since=50.0),
            RunState.STALLED,
            "no work has finished lately although every stage has a live peer",
            130.0,
        ),
        (inputs(now=200.0, last_progress=140.0), RunState.TRAINING, "every stage has a live peer", None),
        # The swarm just became whole again: work is expected from then, not from the last progress.
        (
            inputs(now=200.0, last_progress=100.0, whole_since=190.0),
            RunState.TRAINING,
            "every stage has a live peer",
            None,
        ),
        # No stage known and nobody here (a run no peer has connected to since the coordinator started).
        (
            HealthInputs(
                now=0.0,
                status=RunStatus.ACTIVE,
                stages=(),
                peers=0,
                last_progress=0.0,
                whole_since=None,
                stall_after_s=60.0,
            ),
            RunState.WAITING,
            "no peer has joined yet",
            None,
        ),
        # Paused wins over an empty stage: nothing is expected to train.
        (
            inputs(stage(2), stage(0, last_ready=80.0), status=RunStatus.PAUSED),
            RunState.PAUSED,
            "paused by its owner",
            None,
        ),
    ],
)
def test_run_health(given: HealthInputs, state: RunState, reason: str, since: float | None) -> None:
    health = run_health(given)
    assert (health.state, health.reason, health.since) == (state, reason, since)
    assert health.training == (state == RunState.TRAINING)
    assert len(health.stages) == len(given.stages)


@pytest.mark.parametrize(
    ("stages", "colors"),
    [
        ((stage(2), stage(3)), [StageColor.GREEN, StageColor.GREEN]),
        ((stage(2), stage(1)), [StageColor.GREEN, StageColor.AMBER]),
        ((stage(2), stage(0)), [StageColor.GREEN, StageColor.RED]),
        ((stage(0, loading=1), stage(2)), [StageColor.RED, StageColor.GREEN]),
        # The bottleneck: far below the median stage's rate.
        (
            (stage(2, rate=10.0), stage(2, rate=10.0), stage(2, rate=4.0)),
            [StageColor.GREEN] * 2 + [StageColor.AMBER],
        ),
        ((stage(2, rate=10.0), stage(2, rate=10.0), stage(2, rate=6.0)), [StageColor.GREEN] * 3),
        # An idle swarm (no rate anywhere) is not a bottleneck anywhere.
        ((stage(2, rate=0.0), stage(2, rate=0.0)), [StageColor.GREEN] * 2),
    ],
)
def test_stage_colors(stages: tuple[StageInput, ...], colors: list[StageColor]) -> None:
    assert [s.color for s in stage_health(stages)] == colors


def test_stage_reasons_say_why() -> None:
    red, amber, green = stage_health((stage(0, loading=1), stage(1), stage(3)))
    assert red.reason == "no live peer; 1 loading its state"
    assert amber.reason == "one live peer: losing it stalls the run"
    assert green.reason == "3 live peers"
    assert [s.stage for s in (red, amber, green)] == [0, 1, 2]


def test_watch_keeps_when_each_stage_last_had_a_peer_and_when_the_swarm_became_whole() -> None:
    watch = HealthWatch(started=10.0)
    assert (watch.last_progress, watch.last_ready, watch.whole_since) == (10.0, {}, None)
    watch.observe(11.0, [1, 0])
    assert (watch.last_ready, watch.whole_since) == ({0: 11.0}, None)
    watch.observe(12.0, [1, 2])
    watch.observe(13.0, [1, 2])
    assert (watch.last_ready, watch.whole_since) == ({0: 13.0, 1: 13.0}, 12.0)
    watch.observe(14.0, [1, 0])
    assert (watch.last_ready, watch.whole_since) == ({0: 14.0, 1: 13.0}, None)
    watch.progressed(15.0)
    watch.progressed(14.5)  # out of order: the latest stands
    assert watch.last_progress == 15.0


def test_key_ignores_rates_but_not_colors() -> None:
    base = run_health(inputs(stage(2, rate=10.0), stage(2, rate=11.0)))
    faster = run_health(inputs(stage(2, rate=12.0), stage(2, rate=11.5)))
    one_down = run_health(inputs(stage(2), stage(1)))
    assert base.key() == faster.key()
    assert base.key() != one_down.key()
