"""When a stage's gradient averaging round is complete and consistent."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

NORM_RTOL = 1e-6
NORM_ATOL = 1e-12
"""Members add the same decoded contributions in the same order, so their sums are bit-identical
and their float64 norms agree far inside this tolerance."""


@dataclass(kw_only=True)
class AveragingRound:
    """One attempt at averaging one stage's gradients among `group` (peer ids).

    A round completes when every member reports the same contributors, namely the whole group.
    If a member is lost the coordinator starts a new attempt without it: members keep their
    local gradients until they apply a step, so a retry loses only the departed peer's share.
    """

    stage: int
    attempt: int
    group: frozenset[int]
    reports: dict[int, tuple[frozenset[int], frozenset[str]]] = field(default_factory=dict)
    norms_sq: dict[int, float] = field(default_factory=dict)

    def report(
        self, peer_id: int, attempt: int, contributors: list[int], counted: list[str], norm_sq: float = 0.0
    ) -> None:
        if attempt != self.attempt or peer_id not in self.group:
            return
        self.reports[peer_id] = (frozenset(contributors), frozenset(counted))
        self.norms_sq[peer_id] = norm_sq

    def grad_sum_norm_sq(self) -> float:
        """Squared norm of the stage's summed gradient, as its members agree on it.

        After averaging every member holds the same sum (added in the same order), so honest
        figures agree to rounding. With three or more members the median is the agreed value and
        a liar cannot move it; with two, neither is a majority and the smaller figure is used: a
        member can then only make clipping laxer, never shrink the whole swarm's step."""
        values = sorted(self.norms_sq.values())
        if not values:
            return 0.0
        return values[0] if len(values) <= 2 else statistics.median(values)

    def disagreeing(self) -> frozenset[int]:
        """Members whose reported norm differs from the agreed one beyond rounding; with fewer than
        three members there is no majority to disagree with."""
        if len(self.norms_sq) < 3:
            return frozenset()
        agreed = self.grad_sum_norm_sq()
        return frozenset(
            peer_id
            for peer_id, value in self.norms_sq.items()
            if not math.isclose(value, agreed, rel_tol=NORM_RTOL, abs_tol=NORM_ATOL)
        )

    def complete(self) -> bool:
        return set(self.reports) == set(self.group) and all(c == self.group for c, _ in self.reports.values())

    def inconsistent(self) -> bool:
        """Some member averaged over a different set of peers than the group: the attempt is void."""
        return any(c != self.group for c, _ in self.reports.values())

    def counted(self) -> list[str]:
        ids: set[str] = set()
        for _, counted in self.reports.values():
            ids |= counted
        return sorted(ids)

    def without(self, *peer_ids: int) -> AveragingRound:
        """The next attempt, without these members (lost, or holding the round up)."""
        return AveragingRound(stage=self.stage, attempt=self.attempt + 1, group=self.group - set(peer_ids))
