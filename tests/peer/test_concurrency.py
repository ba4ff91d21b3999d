"""Microbatches in flight per trainer: a multiple of the pipeline's knee (Little's law over the
measured rates), shared by trainers."""

from __future__ import annotations

import pytest

from peer.concurrency import MAX_IN_FLIGHT, MIN_IN_FLIGHT, chain_seconds, microbatches_in_flight


@pytest.mark.parametrize(
    ("stage_rates", "chain_s", "trainers", "stages", "serving", "expected"),
    [
        # Nothing measured yet: one per stage, at least the floor.
        ([], None, 1, 2, 0, 2),
        ([], None, 1, 6, 6, 6),
        ([10.0, 0.0], 1.0, 1, 2, 2, 2),
        # 8 samples/s x 1 s / 4 = 2 in flight at the knee, plus 5 queued per serving peer but one.
        ([8.0, 16.0], 1.0, 1, 2, 2, 7),
        ([8.0, 16.0], 1.0, 1, 2, 3, 12),
        # Shared by the trainers: 12 over 3, or over 60 (the floor).
        ([8.0, 16.0], 1.0, 3, 2, 3, 4),
        ([8.0, 16.0], 1.0, 60, 2, 3, MIN_IN_FLIGHT),
        # A deep, fast pipeline is capped: activations of every microbatch in flight are held.
        ([400.0] * 8, 4.0, 1, 8, 16, MAX_IN_FLIGHT),
    ],
)
def test_in_flight_is_the_knee_plus_a_queue_per_serving_peer(
    stage_rates: list[float],
    chain_s: float | None,
    trainers: int,
    stages: int,
    serving: int,
    expected: int,
) -> None:
    got = microbatches_in_flight(
        stage_rates=stage_rates,
        round_trip_s=chain_s,
        microbatch_size=4,
        trainers=trainers,
        num_stages=stages,
        serving_peers=serving,
    )
    assert got == expected


def test_the_chain_is_each_stages_compute_at_its_mean_peer_rate() -> None:
    # Stage 0: peers at 4 and 12 samples/s (mean 8): 2 samples take 0.25 s; stage 1: 0.5 s.
    assert chain_seconds([[4.0, 12.0], [4.0]], 2) == pytest.approx(0.75)
    # A peer that has measured nothing yet does not count; a stage with none leaves it unknown.
    assert chain_seconds([[4.0, 0.0], [4.0]], 2) == pytest.approx(1.0)
    assert chain_seconds([[4.0], [0.0]], 2) is None
    assert chain_seconds([], 2) is None


def test_a_balanced_swarm_keeps_its_stations_busy_by_mean_value_analysis() -> None:
    """8 peers on 4 stages, all at 8 samples/s, 8 trainers, microbatches of 2: the knee is one
    microbatch per serving peer (8); with the queues, 43 in flight (6 per trainer, 48), which keeps a
    closed network of 8 stations busy over 85% of the time even with exponential call times."""
    peer_rates = [[8.0, 8.0]] * 4
    chain = chain_seconds(peer_rates, 2)
    assert chain == pytest.approx(1.0)
    per_trainer = microbatches_in_flight(
        stage_rates=[sum(r) for r in peer_rates],
        round_trip_s=chain,
        microbatch_size=2,
        trainers=8,
        num_stages=4,
        serving_peers=8,
    )
    assert per_trainer == 6
    total, stations = 8 * per_trainer, 8
    assert total / (total + stations - 1) > 0.85
