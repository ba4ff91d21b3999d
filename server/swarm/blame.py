"""Who to believe when a peer says it cannot reach another: blame that weighs who can reach whom.

A report that peer B did not answer says as much about the reporter's links as about B. So:
- a reporter that the coordinator could not reach itself, or that others are reporting, is not
  believed (an unreachable peer must not evict the healthy peers it cannot reach);
- two distinct believed reporters within a window are a verdict (several views agree);
- a single believed report is a reason for the coordinator to probe B itself, at most once per
  interval per target; only that probe's failure evicts B on one report's word.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

REPORT_WINDOW_S = 30.0
REPORTERS_FOR_VERDICT = 2
PROBE_INTERVAL_S = 10.0
"""A target is probed at most this often, however many reports arrive."""
REPORTS_PER_REPORTER = 10
"""Reports one peer may make within the window; past that it is flooding, and is not heard."""


class Verdict(Enum):
    IGNORE = "ignore"
    """Not believed, or already being checked."""
    PROBE = "probe"
    """Believed, but one view: the coordinator dials the target itself."""
    EVICT = "evict"
    """Enough believed views agree."""


@dataclass
class Blame:
    reports: dict[int, dict[int, float]] = field(default_factory=dict)
    """Target -> {reporter: when} of believed reports within the window."""
    probed: dict[int, float] = field(default_factory=dict)
    """Target -> when a probe of it was last asked for."""
    sent: dict[int, list[float]] = field(default_factory=dict)
    """Reporter -> when it made its recent reports."""

    def _recent(self, target: int, now: float) -> dict[int, float]:
        reports = self.reports.get(target, {})
        for reporter, when in list(reports.items()):
            if now - when > REPORT_WINDOW_S:
                del reports[reporter]
        return reports

    def suspected(self, peer_id: int, now: float) -> bool:
        return bool(self._recent(peer_id, now))

    def report(
        self, *, target: int, reporter: int, reporter_reachable: bool, others: int, now: float
    ) -> Verdict:
        """`others`: how many connected peers besides the target could report it at all."""
        if not reporter_reachable or self.suspected(reporter, now):
            return Verdict.IGNORE
        recent = [when for when in self.sent.get(reporter, []) if now - when <= REPORT_WINDOW_S]
        self.sent[reporter] = [*recent, now]
        if len(recent) >= REPORTS_PER_REPORTER:
            return Verdict.IGNORE
        reports = self._recent(target, now)
        reports[reporter] = now
        self.reports[target] = reports
        if len(reports) >= min(REPORTERS_FOR_VERDICT, others) and len(reports) >= 2:
            return Verdict.EVICT
        if now - self.probed.get(target, -1e9) < PROBE_INTERVAL_S:
            return Verdict.IGNORE
        self.probed[target] = now
        return Verdict.PROBE

    def named(self, now: float) -> set[int]:
        """Peers with believed reports against them right now."""
        return {target for target in list(self.reports) if self._recent(target, now)}

    def forget(self, peer_id: int) -> None:
        self.reports.pop(peer_id, None)
        self.probed.pop(peer_id, None)
        self.sent.pop(peer_id, None)
        for reports in self.reports.values():
            reports.pop(peer_id, None)

    def cleared(self, target: int) -> None:
        """The coordinator reached the target itself: the reports were about the reporters' links."""
        self.reports.pop(target, None)
