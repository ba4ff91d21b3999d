"""The ideal rate of an emulated swarm: bottleneck capacities, the best whole-peer placement."""

from __future__ import annotations

import itertools

import pytest

from bench.ideal import (
    best_placement,
    even_placement,
    fixed_pipeline_samples,
    placement_rate,
    stage_capacities,
)


@pytest.mark.parametrize(
    ("stage_seconds", "slowdowns", "placement", "capacities"),
    [
        # two peers of speed 1 on a 0.1 s/sample stage: 20 samples/s
        ([0.1, 0.1], [1, 1, 1, 1], (0, 1, 0, 1), [20.0, 20.0]),
        # a 4x slower peer adds a quarter of a peer
        ([0.1, 0.1], [1, 1, 1, 4], (0, 1, 0, 1), [20.0, 12.5]),
        # a stage twice as heavy halves what the same peers give
        ([0.1, 0.2], [2, 2], (0, 1), [5.0, 2.5]),
        # a stage nobody serves has no capacity
        ([0.1, 0.1], [1, 1], (0, 0), [20.0, 0.0]),
    ],
)
def test_stage_capacities_and_fixed_rate(
    stage_seconds: list[float], slowdowns: list[float], placement: tuple[int, ...], capacities: list[float]
) -> None:
    assert stage_capacities(stage_seconds, slowdowns, placement) == pytest.approx(capacities)
    assert placement_rate(stage_seconds, slowdowns, placement) == pytest.approx(min(capacities))


@pytest.mark.parametrize(
    ("stage_seconds", "slowdowns", "rate"),
    [
        # homogeneous: peers split evenly
        ([0.1, 0.1], [8] * 8, 5.0),
        # one 4x slower peer on equal stages: some stage gets one fast peer and the slow one at best
        ([0.1] * 4, [1] * 7 + [4], 12.5),
        # a last stage 5x heavier wants most peers: 1 + 1 + 1 + 5 of 8 peers -> min(10, 10, 10, 10)
        ([0.1, 0.1, 0.1, 0.5], [1] * 8, 10.0),
        # three speeds: {1, 1, 0.5} and {1, 0.5, 0.5, 0.25, 0.25} both give 2.5 peer-speeds
        ([0.1, 0.1], [1, 1, 1, 2, 2, 2, 4, 4], 25.0),
        # one peer per stage: nothing to choose
        ([0.2, 0.1], [1, 1], 5.0),
    ],
)
def test_best_placement_rate(stage_seconds: list[float], slowdowns: list[float], rate: float) -> None:
    ideal = best_placement(stage_seconds, slowdowns)
    assert ideal.rate == pytest.approx(rate)
    assert placement_rate(stage_seconds, slowdowns, ideal.placement) == pytest.approx(ideal.rate)


@pytest.mark.parametrize(
    ("stage_seconds", "slowdowns"),
    [([0.1, 0.3, 0.2], [1, 2, 2, 3, 5, 1]), ([0.05, 0.4], [1, 1, 4, 4, 2]), ([0.1] * 3, [3, 1, 2])],
)
def test_best_placement_matches_brute_force(stage_seconds: list[float], slowdowns: list[float]) -> None:
    stages = range(len(stage_seconds))
    brute = max(
        placement_rate(stage_seconds, slowdowns, p) for p in itertools.product(stages, repeat=len(slowdowns))
    )
    assert best_placement(stage_seconds, slowdowns).rate == pytest.approx(brute)


def test_even_placement_and_the_room_it_leaves() -> None:
    assert even_placement(8, 2) == (0, 1, 0, 1, 0, 1, 0, 1)
    assert even_placement(5, 3) == (0, 1, 2, 0, 1)
    # three speeds placed evenly by count: stage 1 gets {1, 0.5, 0.5, 0.25} = 2.25 peer-speeds
    slowdowns = [1, 1, 1, 2, 2, 2, 4, 4]
    assert placement_rate([0.1, 0.1], slowdowns, even_placement(8, 2)) == pytest.approx(22.5)
    assert best_placement([0.1, 0.1], slowdowns).rate == pytest.approx(25.0)


@pytest.mark.parametrize(
    ("stage_seconds", "slowdowns", "message"),
    [
        ([0.1, 0.1, 0.1], [1, 1], "cannot serve"),
        ([0.1, 0.0], [1, 1], "positive seconds"),
        ([0.1], [0], "slowdown"),
    ],
)
def test_best_placement_refuses(stage_seconds: list[float], slowdowns: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        best_placement(stage_seconds, slowdowns)


def test_fixed_placement_refuses_a_mismatch() -> None:
    with pytest.raises(ValueError, match="names 1 peers"):
        placement_rate([0.1], [1, 1], (0,))
    with pytest.raises(ValueError, match="out of range"):
        placement_rate([0.1], [1], (1,))


@pytest.mark.parametrize(
    ("deaths_s", "restart_s", "checkpoint_every_s", "samples"),
    [
        # no death: the whole duration at the rate
        ([], 5.0, 10.0, 1000.0),
        # a death at 35 s keeps 3 checkpoints (30 s), restarts 5 s, trains 40..100 s
        ([35.0], 5.0, 10.0, 300.0 + 600.0),
        # a death right after a checkpoint loses nothing but the restart
        ([30.0], 5.0, 10.0, 300.0 + 650.0),
        # a second death during the restart starts it over: resumes at 42 s
        ([35.0, 37.0], 5.0, 10.0, 300.0 + 580.0),
        # deaths closer together than a checkpoint interval keep nothing between them
        ([8.0, 16.0, 24.0], 1.0, 10.0, 750.0),
        # a death after the end changes nothing
        ([150.0], 5.0, 10.0, 1000.0),
    ],
)
def test_fixed_pipeline_samples(
    deaths_s: list[float], restart_s: float, checkpoint_every_s: float, samples: float
) -> None:
    kept = fixed_pipeline_samples(
        rate=10.0,
        duration_s=100.0,
        deaths_s=deaths_s,
        restart_s=restart_s,
        checkpoint_every_s=checkpoint_every_s,
    )
    assert kept == pytest.approx(samples)
