"""split_step_time: the five parts of a step's time from its moments and its served compute and
network time; busiest_stage: how busy the busiest stage's peers were, and how evenly."""

from __future__ import annotations

import pytest

from server.policies.step_time import StageBusy, busiest_stage, split_step_time


@pytest.mark.parametrize(
    ("previous", "opened", "barrier", "averaged", "compute", "network", "peers", "expected"),
    [
        # The first step since the coordinator started: nothing before its opening.
        (None, 10.0, 14.0, 15.0, 3.0, 0.0, 2, (1.5, 0.0, 2.5, 1.0, 0.0)),
        (8.0, 10.0, 14.0, 15.0, 3.0, 0.0, 2, (1.5, 0.0, 2.5, 1.0, 2.0)),
        # Network time is a mean over the same serving peers as compute; waiting is what is left.
        (8.0, 10.0, 14.0, 15.0, 3.0, 2.0, 2, (1.5, 1.0, 1.5, 1.0, 2.0)),
        # No serving peer reported (a one-peer run's own calls still count; here nobody served).
        (8.0, 10.0, 14.0, 15.0, 0.0, 0.0, 0, (0.0, 0.0, 4.0, 1.0, 2.0)),
        # Busier than the step was long (a peer's clock, or calls of an earlier step): capped, and
        # compute first, so no network is left.
        (8.0, 10.0, 14.0, 15.0, 20.0, 2.0, 2, (4.0, 0.0, 0.0, 1.0, 2.0)),
        # Network capped at what compute left of collecting.
        (8.0, 10.0, 14.0, 15.0, 4.0, 10.0, 2, (2.0, 2.0, 0.0, 1.0, 2.0)),
        # Only network (compute unreported): it may take all of collecting, no more.
        (8.0, 10.0, 14.0, 15.0, 0.0, 9.0, 1, (0.0, 4.0, 0.0, 1.0, 2.0)),
        # Averaging with nothing to wait for.
        (9.0, 10.0, 11.0, 11.0, 1.0, 0.0, 1, (1.0, 0.0, 0.0, 0.0, 1.0)),
    ],
)
def test_the_parts_of_a_step(
    previous: float | None,
    opened: float,
    barrier: float,
    averaged: float,
    compute: float,
    network: float,
    peers: int,
    expected: tuple[float, float, float, float, float],
) -> None:
    split = split_step_time(
        previous_averaged=previous,
        opened=opened,
        barrier=barrier,
        averaged=averaged,
        compute_s=compute,
        network_s=network,
        serving_peers=peers,
    )
    parts = (split.compute_s, split.network_s, split.waiting_s, split.averaging_s, split.coordinator_s)
    assert parts == pytest.approx(expected)
    assert min(parts) >= 0
    assert split.total_s == pytest.approx(averaged - (opened if previous is None else previous))


def busy(stage: int, mean: float, least: float, most: float) -> StageBusy:
    return StageBusy(stage=stage, mean_share=mean, least_share=least, most_share=most)


@pytest.mark.parametrize(
    ("compute", "stage_of", "collecting", "expected"),
    [
        # Stage 1's two peers computed 60 and 20 of 80 s: on average half of it, one 3x the other.
        ({1: 10.0, 2: 60.0, 3: 20.0}, {1: 0, 2: 1, 3: 1}, 80.0, busy(1, 0.5, 0.25, 0.75)),
        # A ready peer that served nothing was idle: it counts, at 0.
        ({1: 30.0, 2: 60.0}, {1: 0, 2: 1, 3: 1}, 80.0, busy(0, 0.375, 0.375, 0.375)),
        ({1: 10.0, 2: 60.0}, {1: 0, 2: 1, 3: 1}, 80.0, busy(1, 0.375, 0.0, 0.75)),
        # A peer that served and then left (not ready now) is not counted; ties go to the lower stage.
        ({1: 40.0, 2: 40.0, 9: 80.0}, {1: 0, 2: 1}, 80.0, busy(0, 0.5, 0.5, 0.5)),
        # Busier than the step was long (calls of an earlier step, a peer's clock): capped at all of it.
        ({1: 100.0, 2: 10.0}, {1: 0, 2: 1}, 80.0, busy(0, 1.0, 1.0, 1.0)),
        # Nothing computed, or nothing collected: nothing to say.
        ({}, {1: 0, 2: 1}, 80.0, None),
        ({1: 10.0}, {1: 0}, 0.0, None),
    ],
)
def test_the_busiest_stage_and_how_evenly_its_peers_were_busy(
    compute: dict[int, float], stage_of: dict[int, int], collecting: float, expected: StageBusy | None
) -> None:
    assert busiest_stage(compute, stage_of, collecting) == expected
