"""Microbatches in flight per trainer: Little's law over the measured pipeline, shared by trainers."""

from __future__ import annotations

import pytest

from peer.concurrency import MAX_IN_FLIGHT, MIN_IN_FLIGHT, RoundTrips, microbatches_in_flight


@pytest.mark.parametrize(
    ("stage_rates", "round_trip_s", "microbatch", "trainers", "stages", "expected"),
    [
        # Nothing measured yet: one per stage, at least the floor.
        ([], None, 4, 1, 2, 2),
        ([], None, 4, 1, 6, 6),
        ([10.0, 0.0], 1.0, 4, 1, 2, 2),
        # 40 samples/s x 1 s / 4 = 10 in flight swarm-wide, x1.5 headroom, over 1, 3 or 60 trainers.
        ([40.0, 80.0], 1.0, 4, 1, 2, 15),
        ([40.0, 80.0], 1.0, 4, 3, 2, 5),
        ([40.0, 80.0], 1.0, 4, 60, 2, MIN_IN_FLIGHT),
        # A deep, fast pipeline is capped: activations of every microbatch in flight are held.
        ([400.0] * 8, 4.0, 4, 1, 8, MAX_IN_FLIGHT),
    ],
)
def test_in_flight_follows_the_bottleneck_rate_and_round_trip(
    stage_rates: list[float],
    round_trip_s: float | None,
    microbatch: int,
    trainers: int,
    stages: int,
    expected: int,
) -> None:
    got = microbatches_in_flight(
        stage_rates=stage_rates,
        round_trip_s=round_trip_s,
        microbatch_size=microbatch,
        trainers=trainers,
        num_stages=stages,
    )
    assert got == expected


def test_round_trip_is_the_unloaded_one_not_the_queued_one() -> None:
    trips = RoundTrips(window=10)
    assert trips.unloaded() is None
    for seconds in (1.0, 1.1, 0.0, float("nan"), 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0):
        trips.add(seconds)
    # Queueing grew the later trips; the low quantile still reads the unloaded ~1 s.
    assert trips.unloaded() == pytest.approx(1.1)
