"""What the coordinator does about a peer whose heartbeats stopped.

A peer that dies silently (a spot instance taken back, a cable pulled) closes nothing: only its
heartbeats stop. Waiting the whole heartbeat timeout (15 s by default) holds every call waiting on
it and, at a step's end, the barrier and its stage's averaging round. A few missed heartbeats are
enough to suspect it, but not to condemn it: a heartbeat can be late behind a busy control channel.
So a suspect is probed: the coordinator dials its data plane, as it does when trainers report it
unreachable. A peer whose data plane does not answer is gone now; one that answers is left to the
heartbeat timeout. A peer the coordinator could never reach (it trains only) cannot be probed and
gets the whole timeout.
"""

from __future__ import annotations

from enum import StrEnum

SUSPECT_AFTER_HEARTBEATS = 3
"""Heartbeat intervals of silence after which a peer is probed: one late or lost heartbeat is
ordinary, three in a row rarely are (and the settings keep the timeout at three intervals or more)."""


class Silence(StrEnum):
    HEARD = "heard"
    """Nothing to do."""
    PROBE = "probe"
    """Dial its data plane now; what the probe finds decides."""
    LOST = "lost"
    """Past the heartbeat timeout: gone."""


def suspect_after_s(heartbeat_interval_s: float) -> float:
    return SUSPECT_AFTER_HEARTBEATS * heartbeat_interval_s


def silence(
    *,
    silent_s: float,
    heartbeat_interval_s: float,
    heartbeat_timeout_s: float,
    probed: bool,
    reachable: bool,
    coordinator_gap_s: float = 0.0,
) -> Silence:
    """What to do about a peer last heard `silent_s` ago (`probed`: already probed in this silence;
    `reachable`: the coordinator reached its data plane when it joined; `coordinator_gap_s`: how long
    the coordinator itself went without a tick before this one). A coordinator that stalled has not
    read the heartbeats that came meanwhile: every peer would look silent, and a probe of each would
    pile onto the stall, so the gap does not count toward suspicion."""
    if silent_s > heartbeat_timeout_s:
        return Silence.LOST
    if reachable and not probed and silent_s - coordinator_gap_s > suspect_after_s(heartbeat_interval_s):
        return Silence.PROBE
    return Silence.HEARD
