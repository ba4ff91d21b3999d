"""What the coordinator does about a silent peer: probe it after a few missed heartbeats, lose it at
the heartbeat timeout."""

from __future__ import annotations

import pytest

from server.policies.silence import SUSPECT_AFTER_HEARTBEATS, Silence, silence, suspect_after_s


@pytest.mark.parametrize(
    ("silent_s", "interval_s", "timeout_s", "probed", "reachable", "expected"),
    [
        (0.5, 1.0, 15.0, False, True, Silence.HEARD),
        (2.9, 1.0, 15.0, False, True, Silence.HEARD),  # two late heartbeats are ordinary
        (3.0, 1.0, 15.0, False, True, Silence.HEARD),
        (3.1, 1.0, 15.0, False, True, Silence.PROBE),
        (3.1, 1.0, 15.0, True, True, Silence.HEARD),  # probed once per silence
        (14.0, 1.0, 15.0, True, True, Silence.HEARD),
        (15.1, 1.0, 15.0, True, True, Silence.LOST),
        (15.1, 1.0, 15.0, False, True, Silence.LOST),
        (3.1, 1.0, 15.0, False, False, Silence.HEARD),  # cannot be probed: the timeout decides
        (15.1, 1.0, 15.0, False, False, Silence.LOST),
        # A large swarm's longer interval (5 s) with a 60 s timeout: suspect after 15 s.
        (14.0, 5.0, 60.0, False, True, Silence.HEARD),
        (16.0, 5.0, 60.0, False, True, Silence.PROBE),
        # A timeout of exactly three intervals (the least the settings allow): no room for a probe.
        (3.0, 1.0, 3.0, False, True, Silence.HEARD),
        (3.1, 1.0, 3.0, False, True, Silence.LOST),
    ],
)
def test_a_silent_peer_is_probed_after_a_few_intervals_and_lost_at_the_timeout(
    silent_s: float, interval_s: float, timeout_s: float, probed: bool, reachable: bool, expected: Silence
) -> None:
    verdict = silence(
        silent_s=silent_s,
        heartbeat_interval_s=interval_s,
        heartbeat_timeout_s=timeout_s,
        probed=probed,
        reachable=reachable,
    )
    assert verdict == expected


@pytest.mark.parametrize(
    ("silent_s", "gap_s", "expected"),
    [
        (3.6, 0.5, Silence.PROBE),  # ticks every 0.5 s: suspicion half a tick later
        (3.4, 0.5, Silence.HEARD),
        # The coordinator stalled 6 s: every peer looks silent, none is probed for it...
        (6.5, 6.0, Silence.HEARD),
        (9.1, 6.0, Silence.PROBE),
        # ...and the timeout still holds.
        (15.1, 20.0, Silence.LOST),
    ],
)
def test_the_coordinators_own_gap_between_ticks_is_not_the_peers_silence(
    silent_s: float, gap_s: float, expected: Silence
) -> None:
    verdict = silence(
        silent_s=silent_s,
        heartbeat_interval_s=1.0,
        heartbeat_timeout_s=15.0,
        probed=False,
        reachable=True,
        coordinator_gap_s=gap_s,
    )
    assert verdict == expected


def test_suspicion_is_a_number_of_intervals() -> None:
    assert suspect_after_s(2.0) == SUSPECT_AFTER_HEARTBEATS * 2.0
