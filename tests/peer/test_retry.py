"""The peer's retry policy toward the coordinator: capped exponential backoff, and what is final."""

from __future__ import annotations

from itertools import islice

import pytest

from peer.retry import BACKOFF_MAX_S, BACKOFF_START_S, backoff_delays, worth_retrying


def test_delays_double_from_the_start_and_stay_at_the_cap() -> None:
    assert list(islice(backoff_delays(0.5, 10.0), 8)) == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_default_delays_start_small_and_are_capped() -> None:
    delays = list(islice(backoff_delays(), 50))
    assert delays[0] == BACKOFF_START_S
    assert max(delays) == delays[-1] == BACKOFF_MAX_S
    assert delays == sorted(delays)


def test_a_start_above_the_cap_is_capped() -> None:
    assert list(islice(backoff_delays(30.0, 10.0), 2)) == [10.0, 10.0]


@pytest.mark.parametrize("status_code", [500, 502, 503, 504, 408, 429])
def test_a_coordinator_that_may_answer_later_is_retried(status_code: int) -> None:
    assert worth_retrying(status_code)


@pytest.mark.parametrize("status_code", [400, 401, 403, 404, 409, 422])
def test_a_refusal_is_final(status_code: int) -> None:
    assert not worth_retrying(status_code)
