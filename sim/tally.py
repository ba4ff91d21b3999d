"""What the coordinator would have decided and sent: counts per kind, and the seconds its policies
took (measured on this machine while the simulator called them)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class CoordinatorTally:
    def __init__(self) -> None:
        self.received: Counter[str] = Counter()
        """Messages from peers, by type."""
        self.sent: Counter[str] = Counter()
        """Messages to peers, by type (a broadcast counts once per recipient)."""
        self.view_endpoints = 0
        """Peer endpoints carried by all SwarmView messages sent: their size grows with the swarm."""
        self.decisions: Counter[str] = Counter()
        self.decision_s: Counter[str] = Counter()

    def timed(self, kind: str, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call a policy, counting the decision and the time it took."""
        started = time.perf_counter()
        result = call(*args, **kwargs)
        self.decision_s[kind] += time.perf_counter() - started
        self.decisions[kind] += 1
        return result

    def summary(self, duration_s: float) -> dict[str, Any]:
        per_s = 1.0 / duration_s if duration_s > 0 else 0.0
        return {
            "messages_received_per_s": round(sum(self.received.values()) * per_s, 3),
            "messages_sent_per_s": round(sum(self.sent.values()) * per_s, 3),
            "view_endpoints_per_s": round(self.view_endpoints * per_s, 3),
            "received": dict(sorted(self.received.items())),
            "sent": dict(sorted(self.sent.items())),
            "decisions": dict(sorted(self.decisions.items())),
            "decision_seconds": {k: round(v, 6) for k, v in sorted(self.decision_s.items())},
            "decision_seconds_per_simulated_s": round(sum(self.decision_s.values()) * per_s, 6),
        }
