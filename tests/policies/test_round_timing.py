"""round_timing: how far each stage's timed averaging rounds were from the modelled."""

from __future__ import annotations

import pytest

from server.policies.round_timing import ROUNDS_KEPT, RoundTimes


def test_a_stage_never_timed_has_no_scale() -> None:
    assert RoundTimes(3).scales() == [None, None, None]
    assert RoundTimes(3).measured_s() == [None, None, None]


def test_the_scale_is_the_median_of_the_last_rounds() -> None:
    times = RoundTimes(2)
    for measured in (3.0, 90.0, 4.0):  # one round slowed by a busy host
        times.timed(1, modelled_s=100.0, measured_s=measured)
    assert times.scales() == [None, pytest.approx(0.04)]
    assert times.measured_s() == [None, 4.0]


def test_rounds_took_what_they_took_whatever_the_model_said_of_each() -> None:
    # The model jumps thirtyfold when a member with a far lower reading joins; the rounds do not.
    times = RoundTimes(1)
    for modelled, measured in ((100.0, 3.0), (100.0, 4.0), (3000.0, 7.0)):
        times.timed(0, modelled_s=modelled, measured_s=measured)
    assert times.measured_s() == [4.0]
    assert times.scales() == [pytest.approx(0.03)]


def test_only_the_last_rounds_count() -> None:
    times = RoundTimes(1)
    for measured in [1.0] * ROUNDS_KEPT + [5.0] * ROUNDS_KEPT:
        times.timed(0, modelled_s=1.0, measured_s=measured)
    assert times.scales() == [pytest.approx(5.0)]
    assert times.measured_s() == [5.0]


@pytest.mark.parametrize(
    ("modelled_s", "measured_s"),
    [
        pytest.param(0.0, 2.0, id="no upload measured or one member: the model sizes nothing"),
        pytest.param(3.0, 0.0, id="a round that took no time"),
    ],
)
def test_rounds_the_model_cannot_be_compared_with_are_not_booked(
    modelled_s: float, measured_s: float
) -> None:
    times = RoundTimes(1)
    times.timed(0, modelled_s=modelled_s, measured_s=measured_s)
    assert times.scales() == [None]
    assert times.measured_s() == [None]
