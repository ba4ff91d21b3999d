"""How long each stage's averaging rounds took, against what the link readings predicted.

`averaging_pace` models a round as (K - 1) x sum bytes / the slowest member's upload reading, and the
readings are trainers' calls' bytes over their time on the wire: they can be far from what a push
gets. In a real 8-peer run on loopback (`bench.efficiency`, swarm-ref preset, compute slowed 10x)
the readings were near 0.5 MB/s, so the head stage's round was modelled at ~118 s while its pushes
took 3.2 s of an ~88 s step, and the pace rule moved a member off it that the rate plan had just
moved there (5 moves, 0.50 of ideal, against 2 moves and 0.63 before the pace rule). The coordinator
times every round that completes at its first attempt, so the policies scale each stage's modelled
rounds by how far the model was off there (`scales`), and a stage whose rounds were never timed is
not moved for averaging. Pure bookkeeping, no clock: the caller passes the seconds.
"""

from __future__ import annotations

import statistics
from collections import deque

ROUNDS_KEPT = 3
"""Timed rounds a stage's scale is the median of: one round slowed by a busy host does not move
anybody, and a change of the swarm shows within a few steps."""


class RoundTimes:
    """Each stage's last `ROUNDS_KEPT` rounds, as (measured, modelled) seconds."""

    def __init__(self, num_stages: int) -> None:
        self.rounds: list[deque[tuple[float, float]]] = [deque(maxlen=ROUNDS_KEPT) for _ in range(num_stages)]

    def timed(self, stage: int, *, modelled_s: float, measured_s: float) -> None:
        """Book a round that completed at its first attempt. Nothing to learn from a round the
        model cannot size (no upload measured, a single member) or one that took no time."""
        if modelled_s > 0 and measured_s > 0:
            self.rounds[stage].append((measured_s, modelled_s))

    def measured_s(self) -> list[float | None]:
        """Per stage, how long its timed rounds took (median of the kept rounds); None: no round of
        the stage was timed. The scale corrects the model for the readings it was timed against, and
        a reading that changes (a member joining with a lower one) changes the model by itself: in a
        real swarm-ref run the scaled model put the head stage's round at ~100 s one decision after a
        member joined it, just after steps had averaged in 3-7 s of 60-80 s, and a member was moved
        off it for averaging."""
        return [statistics.median(m for m, _ in kept) if kept else None for kept in self.rounds]

    def scales(self) -> list[float | None]:
        """Per stage, measured / modelled round seconds (median of the kept rounds); None: no round
        of the stage was timed."""
        return [statistics.median(m / p for m, p in kept) if kept else None for kept in self.rounds]
