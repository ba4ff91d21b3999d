"""When a stage's gradient averaging round is complete and consistent."""

from __future__ import annotations

from dataclasses import dataclass, field


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
        """Squared norm of the stage's summed gradient. Members sum the same contributions, in
        their own order, so their figures differ only by rounding; the mean is as good as any."""
        return sum(self.norms_sq.values()) / len(self.norms_sq) if self.norms_sq else 0.0

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

    def without(self, peer_id: int) -> AveragingRound:
        return AveragingRound(stage=self.stage, attempt=self.attempt + 1, group=self.group - {peer_id})
