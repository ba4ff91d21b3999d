"""Whether the owners of a butterfly round's parts summed them honestly.

In a butterfly (`peer/butterfly.py`) member j alone sums part j of every contribution and sends the
sum to all: it could send a wrong one, the same to everyone, and the members' agreement on the norm
of what they hold would not show it. So once every member has reported, the coordinator draws a
random vector r (a seed no member knew while it sent its parts) and each member projects onto r
what it handled (`PartReport`): each part of its own sum as it sent it, each sender's contribution
to its own part as it received it, and each summed part it holds. A projection is linear, so:

- the projection a sender reports of its part j and the one owner j reports of what it received
  from that sender are of the same decoded bytes and must be equal (else the two disagree about
  what passed between them, and one of them lies: a dispute, which this cannot settle);
- the projections owner j reports of what it received must add up to the projection of part j as
  everyone holds it (the median of the members' figures, which one liar cannot move among three or
  more), up to float32 summation and, with a lossy codec, the codec's error on the summed part.
  If they do not, owner j's own figures convict it: what it received does not sum to what it sent.

A lie a projection cannot see is one along a direction orthogonal to r: r is drawn after the parts
were sent and summed, so a lie of norm e shifts the projection by e times a standard normal, and
one past `SIGMAS` times the tolerance is missed with probability about 1e-9.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

SUMMATION_ERROR = 1e-4
"""Relative error of a float32 sum of a round's contributions (at most K x 2^-24 per element for K
contributions; under 1e-4 of the contributions' norms for rounds of up to a thousand members), as a
share of the sum of their norms."""
SIGMAS = 6.0
"""A projection of an error of norm e onto a standard normal vector is e times a standard normal:
honest figures stay within this many times the error's norm."""
SAME_BYTES = 1e-9
"""Relative difference two projections of the same float32 part onto the same vector may show
(float64 dots in the same order; the margin is for another machine's BLAS)."""


@dataclass(frozen=True, kw_only=True)
class PartReport:
    """One member's projections, each a list over the round's members in peer-id order."""

    sent: list[float]
    """Of each part of its own sum as it sent it (its own part as it kept it)."""
    sent_norms_sq: list[float]
    """Squared norms of the same parts."""
    received: list[float]
    """Of each sender's contribution to this member's own part, as decoded."""
    held: list[float]
    """Of each summed part as this member holds it."""
    held_norms_sq: list[float]


@dataclass(frozen=True, kw_only=True)
class PartVerdict:
    convicted: dict[int, str]
    """Owner -> why its own figures convict it of a wrong sum (or of a malformed report)."""
    disputes: frozenset[tuple[int, int]]
    """(Sender, owner) pairs whose figures of the same part disagree: one of the two lies."""

    @property
    def clean(self) -> bool:
        return not self.convicted and not self.disputes


def judge_parts(order: list[int], reports: dict[int, PartReport], codec_error: float) -> PartVerdict:
    """The verdict on a round whose members, in peer-id `order` (part j is `order[j]`'s), reported
    these projections (members that did not report are left out of every check they would be part
    of); `codec_error`: the run's codec's relative L2 error on a tensor it encodes (0: lossless)."""
    k = len(order)
    convicted = {
        member: f"its part check lists {_lengths(r)} figures for {k} parts"
        for member, r in reports.items()
        if set(_lengths(r)) != {k}
    }
    valid = {member: r for member, r in reports.items() if member not in convicted}
    disputes: set[tuple[int, int]] = set()
    if not valid:
        return PartVerdict(convicted=convicted, disputes=frozenset())
    for j, owner in enumerate(order):
        held = statistics.median(r.held[j] for r in valid.values())
        held_norm = math.sqrt(statistics.median(r.held_norms_sq[j] for r in valid.values()))
        mine = valid.get(owner)
        if mine is None:
            continue
        for i, sender in enumerate(order):
            theirs = valid.get(sender)
            if sender == owner or theirs is None:
                continue
            a, b = theirs.sent[j], mine.received[i]
            if abs(a - b) > SAME_BYTES * (abs(a) + abs(b)) + SAME_BYTES * math.sqrt(theirs.sent_norms_sq[j]):
                disputes.add((sender, owner))
        contributions = sum(
            math.sqrt(valid[sender].sent_norms_sq[j]) if sender in valid else 0.0 for sender in order
        )
        bound = SIGMAS * (SUMMATION_ERROR * contributions + codec_error * held_norm)
        summed = math.fsum(mine.received)
        if abs(summed - held) > bound:
            convicted[owner] = (
                f"its part {j} of the stage's gradients projects to {held:.6g} where what it received "
                f"adds up to {summed:.6g} (bound {bound:.3g})"
            )
    return PartVerdict(convicted=convicted, disputes=frozenset(disputes))


def _lengths(report: PartReport) -> tuple[int, ...]:
    lists = (report.sent, report.sent_norms_sq, report.received, report.held, report.held_norms_sq)
    return tuple(len(figures) for figures in lists)
