"""How long a step waits for a copy: a while for a first one, not at all for a peer whose last copy
arrived behind (it chases the run, and waiting for it held every step and every decision), and a
while in all however many copies begin while it waits."""

from __future__ import annotations

import pytest

from server.policies.join_hold import (
    EMPTY_STAGE_WAIT_S,
    JOIN_HOLD_S,
    barrier_waits,
    holds_the_step,
    join_hold_s,
    waits_for_loader,
)


@pytest.mark.parametrize(
    ("copying_for_s", "arrived_behind", "holds"),
    [
        (0.0, 0, True),
        (JOIN_HOLD_S - 0.1, 0, True),
        (JOIN_HOLD_S, 0, False),
        (0.0, 1, False),
        (JOIN_HOLD_S - 0.1, 1, False),
        (0.0, 10_000, False),
    ],
)
def test_a_copy_holds_the_step_only_while_new_and_only_if_the_last_one_was_in_time(
    copying_for_s, arrived_behind, holds
):
    assert holds_the_step(copying_for_s, arrived_behind) is holds


def test_a_negative_count_is_refused():
    with pytest.raises(ValueError, match="counts copies"):
        join_hold_s(-1)


@pytest.mark.parametrize(
    ("step_waited_s", "copies_held", "waits"),
    [
        (0.0, True, True),
        (JOIN_HOLD_S - 0.1, True, True),
        # Copies begun while it waited hold it no longer: a large swarm begins one every second.
        (JOIN_HOLD_S, True, False),
        (10 * JOIN_HOLD_S, True, False),
        (0.0, False, False),
    ],
)
def test_a_step_waits_for_copies_a_while_in_all(step_waited_s, copies_held, waits):
    assert barrier_waits(step_waited_s, copies_held) is waits


@pytest.mark.parametrize(
    ("loading_for_s", "waits"),
    [
        (0.0, True),
        (JOIN_HOLD_S, True),
        (EMPTY_STAGE_WAIT_S - 0.1, True),
        (EMPTY_STAGE_WAIT_S, False),
        (1e6, False),
    ],
)
def test_an_empty_stage_waits_for_its_loader_longer_than_a_step_waits_for_a_copy(
    loading_for_s: float, waits: bool
) -> None:
    assert waits_for_loader(loading_for_s) is waits
