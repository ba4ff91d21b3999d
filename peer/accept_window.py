"""Which stage calls a peer still computes when its compute thread reaches them, by how long they
waited for it.

A trainer gives up on a call after its timeout and tries another peer (`Trainer._call`); the call's
header carries that timeout. A peer cannot take back a reply it sent, so it decides as the call
starts: a call that waited too long is refused, not computed.
"""

from __future__ import annotations

ACCEPT_FRACTION = 0.8
"""A call that accumulates gradients is computed only if it starts within this share of the caller's
timeout: a caller that gave up and retried elsewhere must not find its samples counted twice. A call
that waited longer is refused, never answered: its caller may still be waiting and would take the
answer as served, while no peer of the stage holds the gradient (the step would count it lost)."""


def computes(*, accumulates: bool, waited_s: float, timeout_s: float) -> bool:
    """Whether a call that waited `waited_s` for the compute thread is computed, under its caller's
    `timeout_s` (0: the caller did not say, no window).

    A call that accumulates must start within `ACCEPT_FRACTION` of the timeout. A forward only within
    the timeout itself: past it, its caller has given up and its reply would be dropped. Computed all
    the same, such forwards held the thread from the calls still waited on. At 1,000 simulated spot
    peers, stage 0's one broadband peer was still computing the forwards of a step's opening ten
    minutes after their callers had left (docs/benchmarks.md, issue 14)."""
    if timeout_s <= 0:
        return True
    return waited_s < (ACCEPT_FRACTION if accumulates else 1.0) * timeout_s
