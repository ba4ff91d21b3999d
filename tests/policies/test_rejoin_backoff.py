"""The wait before a peer evicted as unreachable serves a stage again."""

from __future__ import annotations

import math

import pytest

from server.policies.rejoin_backoff import (
    FIRST_WAIT_S,
    FORGET_AFTER_S,
    MAX_WAIT_S,
    Evictions,
    record_eviction,
    serves_again_at,
    wait_s,
)


@pytest.mark.parametrize(
    ("evictions", "expected"),
    [
        (0, 0.0),
        (1, FIRST_WAIT_S),
        (2, 2 * FIRST_WAIT_S),
        (3, 4 * FIRST_WAIT_S),
        (6, MAX_WAIT_S),
        (500, MAX_WAIT_S),
    ],
)
def test_each_eviction_doubles_the_wait_up_to_the_cap(evictions: int, expected: float) -> None:
    assert wait_s(evictions) == expected


@pytest.mark.parametrize(
    ("previous", "now", "expected"),
    [
        (None, 50.0, Evictions(count=1, last_at=50.0)),  # the first
        (Evictions(count=2, last_at=10.0), 100.0, Evictions(count=3, last_at=100.0)),  # in a row
        (
            Evictions(count=4, last_at=10.0),
            10.0 + FORGET_AFTER_S,
            Evictions(count=5, last_at=10.0 + FORGET_AFTER_S),
        ),
        (
            Evictions(count=4, last_at=10.0),
            11.0 + FORGET_AFTER_S,
            Evictions(count=1, last_at=11.0 + FORGET_AFTER_S),
        ),
    ],
)
def test_an_eviction_counts_on_from_the_last_unless_that_is_forgotten(
    previous: Evictions | None, now: float, expected: Evictions
) -> None:
    assert record_eviction(previous, now) == expected


def test_a_peer_never_evicted_may_serve_at_once() -> None:
    assert serves_again_at(None) == -math.inf
    assert serves_again_at(Evictions(count=2, last_at=100.0)) == 100.0 + 2 * FIRST_WAIT_S
