"""RateEstimate: a peer's smoothed rate, its bounds, and when it is settled."""

from __future__ import annotations

import math
import random

import pytest

from server.policies.rate_estimate import ALPHA, NOISE_FLOOR, SETTLE_READINGS, RateEstimate, Z


def read(*values: float) -> RateEstimate:
    rate = RateEstimate()
    for value in values:
        rate = rate.observe(value)
    return rate


def test_nothing_read_is_unbounded_and_unsettled() -> None:
    rate = RateEstimate()
    assert (rate.count, rate.settled, rate.lower, rate.upper) == (0, False, 0.0, math.inf)


@pytest.mark.parametrize(
    ("values", "mean"),
    [
        pytest.param([10.0], 10.0, id="one reading"),
        pytest.param([10.0, 20.0], 15.0, id="the first readings are averaged plainly"),
        pytest.param([10.0, 20.0, 30.0], 20.0, id="three"),
    ],
)
def test_first_readings_are_a_plain_average(values: list[float], mean: float) -> None:
    assert read(*values).mean == pytest.approx(mean)


def test_settled_after_enough_readings() -> None:
    assert not read(*[10.0] * (SETTLE_READINGS - 1)).settled
    assert read(*[10.0] * SETTLE_READINGS).settled


@pytest.mark.parametrize("count", [1, 4, 9, 50])
def test_identical_readings_keep_the_noise_floor(count: int) -> None:
    rate = read(*[10.0] * count)
    effective = min(count, (2 - ALPHA) / ALPHA)
    assert rate.margin == pytest.approx(Z * NOISE_FLOOR * 10.0 / math.sqrt(effective))
    assert rate.lower < 10.0 < rate.upper


def test_later_readings_weigh_more_and_the_mean_follows_a_change() -> None:
    rate = read(*[10.0] * 20, *[2.5] * 30)
    assert rate.mean == pytest.approx(2.5, rel=0.02)


def test_noisy_readings_are_bracketed() -> None:
    rng = random.Random(0)
    rate = RateEstimate()
    inside = 0
    for _ in range(500):
        rate = rate.observe(10.0 * rng.uniform(0.8, 1.2))
        inside += rate.lower <= 10.0 <= rate.upper
    assert inside >= 495
    assert rate.margin < 1.5, "a few percent of the rate, not the spread of single readings"


def test_a_wide_spread_widens_the_bounds() -> None:
    steady = read(*[10.0, 10.5] * 10)
    jumpy = read(*[5.0, 15.0] * 10)
    assert jumpy.margin > 3 * steady.margin


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_a_reading_must_be_a_rate(value: float) -> None:
    with pytest.raises(ValueError, match="rate"):
        RateEstimate().observe(value)
