"""learning_rate: linear warm-up from above zero, then constant or cosine decay to a floor."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmhub.schedule import MIN_LR_FRACTION, learning_rate

PEAK = 3e-4


@pytest.mark.parametrize(
    ("step", "warmup_steps", "max_steps", "expected_fraction"),
    [
        # Warm-up: peak * (step + 1) / (warmup + 1).
        (0, 4, None, 1 / 5),
        (1, 4, None, 2 / 5),
        (2, 4, None, 3 / 5),
        (3, 4, None, 4 / 5),
        (4, 4, None, 1.0),
        (0, 1, None, 1 / 2),
        (1, 1, None, 1.0),
        # No end: constant peak after warm-up, forever.
        (5, 4, None, 1.0),
        (10**6, 4, None, 1.0),
        # No warm-up: the very first step is at the peak.
        (0, 0, None, 1.0),
        (7, 0, None, 1.0),
        (0, 0, 100, 1.0),
        # Cosine from peak (at warmup) to MIN_LR_FRACTION * peak (at max_steps).
        (50, 0, 100, MIN_LR_FRACTION + 0.5 * (1 - MIN_LR_FRACTION)),
        (25, 0, 100, MIN_LR_FRACTION + 0.5 * (1 - MIN_LR_FRACTION) * (1 + math.cos(math.pi / 4))),
        (100, 0, 100, MIN_LR_FRACTION),
        (10, 10, 110, 1.0),
        (60, 10, 110, MIN_LR_FRACTION + 0.5 * (1 - MIN_LR_FRACTION)),
        (110, 10, 110, MIN_LR_FRACTION),
        # Past the end it stays at the floor.
        (111, 10, 110, MIN_LR_FRACTION),
        (10**6, 10, 110, MIN_LR_FRACTION),
        # An end at or before the warm-up's end: no decay, peak after warm-up.
        (10, 10, 10, 1.0),
        (50, 10, 5, 1.0),
        (3, 10, 5, 4 / 11),
    ],
)
def test_table(step: int, warmup_steps: int, max_steps: int | None, expected_fraction: float) -> None:
    rate = learning_rate(step, peak=PEAK, warmup_steps=warmup_steps, max_steps=max_steps)
    assert rate == pytest.approx(PEAK * expected_fraction, rel=1e-12)


@pytest.mark.parametrize("step", [-1, -2, -1000])
@pytest.mark.parametrize("max_steps", [None, 100])
def test_negative_step_is_an_error(step: int, max_steps: int | None) -> None:
    with pytest.raises(ValueError, match="step"):
        learning_rate(step, peak=PEAK, warmup_steps=10, max_steps=max_steps)


@pytest.mark.parametrize("warmup_steps", [1, 2, 10, 1000])
def test_warmup_starts_above_zero_and_rises_linearly_to_the_peak(warmup_steps: int) -> None:
    rates = [
        learning_rate(s, peak=PEAK, warmup_steps=warmup_steps, max_steps=None)
        for s in range(warmup_steps + 1)
    ]
    assert rates[0] > 0
    increments = [b - a for a, b in itertools.pairwise(rates)]
    # Equal increments, the last one landing exactly on the peak.
    assert increments == pytest.approx([PEAK / (warmup_steps + 1)] * warmup_steps, rel=1e-9)
    assert all(r < PEAK for r in rates[:-1])
    assert rates[-1] == pytest.approx(PEAK)


@pytest.mark.parametrize(("warmup_steps", "max_steps"), [(0, 1), (0, 10), (5, 6), (10, 100), (100, 1000)])
def test_decay_is_monotone_from_peak_to_floor(warmup_steps: int, max_steps: int) -> None:
    rates = [
        learning_rate(s, peak=PEAK, warmup_steps=warmup_steps, max_steps=max_steps)
        for s in range(warmup_steps, max_steps + 5)
    ]
    assert rates[0] == pytest.approx(PEAK)
    assert all(b <= a for a, b in itertools.pairwise(rates))
    assert rates[max_steps - warmup_steps] == pytest.approx(PEAK * MIN_LR_FRACTION)
    assert min(rates) == pytest.approx(PEAK * MIN_LR_FRACTION)


@settings(max_examples=300, database=None, deadline=None)
@given(
    step=st.integers(min_value=0, max_value=10**7),
    peak=st.floats(min_value=1e-8, max_value=10.0),
    warmup_steps=st.integers(min_value=0, max_value=10**5),
    max_steps=st.none() | st.integers(min_value=1, max_value=10**6),
)
def test_rate_is_positive_and_bounded(
    step: int, peak: float, warmup_steps: int, max_steps: int | None
) -> None:
    """The wire schema demands a positive rate: it is never zero or negative, never above the peak,
    and never below the floor once warm-up is over."""
    rate = learning_rate(step, peak=peak, warmup_steps=warmup_steps, max_steps=max_steps)
    assert 0 < rate <= peak * (1 + 1e-12)
    if step >= warmup_steps:
        assert rate >= peak * MIN_LR_FRACTION * (1 - 1e-12)
