"""How large a part of a butterfly round each member owns (`peer/butterfly.py`).

In a butterfly of K members, the owner of a share w of the stage's gradients (of B bytes) takes the
K-1 others' contributions to it and sends its sum back to each of them: (K-1)wB each way. It also
sends the rest of its own sum, (1-w)B, and takes the rest of the sum back. So a member moves
(1 + (K-2)w)B each way. With equal parts (w = 1/K), that is nearly 2B for everyone, and the member
on the slowest link paces the round. With its share in proportion to its rate r (of R, the members'
rates summed), a member moves B/r + (K-2)B/R seconds' worth: the slowest member's own sum and
little more.

The simulator showed the cost at 1,000 spot peers: every stage had members on 12.5 MB/s broadband
among datacenter ones, and the head stage's 479 MB round took 71 s of a 290 s step with equal
parts, 42 s in proportion (docs/benchmarks.md, issue 14).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

PART_WEIGHT_UNIT = 1000.0
"""Bytes/s per unit of weight: weights are integers (every member cuts the same parts from them,
bit for bit), and a kilobyte a second is finer than any measured link."""
MOST_PART_WEIGHT = 1 << 40
"""Far above any link (a petabyte a second), so a reading cannot overflow a member's arithmetic."""


def part_weights(rates: Sequence[float | None]) -> list[int] | None:
    """Each member's weight in the round's parts, from the rates its pushes are given time for
    (`averaging.pushing_rate`, bytes/s; None: not measured), in the members' order. A member not
    measured is weighted at the measured members' median rate. None: equal parts, since nothing is
    measured or every member weighs the same."""
    measured = [r for r in rates if r is not None and r > 0]
    if not measured:
        return None
    typical = statistics.median(measured)
    weights = [_weight(r if r is not None and r > 0 else typical) for r in rates]
    if len(set(weights)) <= 1:
        return None
    return weights


def _weight(rate: float) -> int:
    return min(MOST_PART_WEIGHT, max(1, round(rate / PART_WEIGHT_UNIT)))
