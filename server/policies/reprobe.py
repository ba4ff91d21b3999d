"""When the coordinator dials again a peer whose data plane it could not reach.

A peer the coordinator cannot reach when it joins trains only. That verdict comes from one probe,
and the peer's situation can change while it stays connected: its owner reads the message that
says the port is closed and opens or forwards it, or the probe missed a peer that was there (its
answer was later than the probe waits, on a machine whose cores were all busy). So a peer the
coordinator could not reach is probed again, first soon and then less and less often, and seated
once it answers. A port that stays closed costs one failed dial per `REPROBE_MAX_S` at most.
"""

from __future__ import annotations

REPROBE_FIRST_S = 15.0
"""Wait before the first probe again: long enough for a peer's busy start (loading torch, its
benchmark) to be over, short enough that a swarm of two does not stall for long on one missed probe."""
REPROBE_MAX_S = 300.0


def reprobe_after_s(failed_probes: int) -> float:
    """Seconds until the next probe of a peer whose last `failed_probes` probes in a row failed:
    doubling from `REPROBE_FIRST_S` up to `REPROBE_MAX_S`."""
    if failed_probes < 1:
        raise ValueError(f"a peer is probed again only after a failed probe, got {failed_probes}")
    return min(REPROBE_MAX_S, REPROBE_FIRST_S * 2 ** min(failed_probes - 1, 16))
