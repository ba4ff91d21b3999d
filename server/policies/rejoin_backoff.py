"""How long a peer evicted because others could not reach it waits before it serves a stage again.

Such a peer still heartbeats, so it reconnects at once, and the coordinator's probe at its rejoin
is one small call that a choked upload still answers. Seated again at once, it was routed to and
held its stage's averaging round again: in a machine test a peer with a 5 kB/s upload made every
other step ~13 s longer, and one step 61 s. Each eviction doubles the wait; a peer not evicted for
`FORGET_AFTER_S` starts again from the first wait. It trains meanwhile, if it has a trainer.
"""

from __future__ import annotations

from dataclasses import dataclass

FIRST_WAIT_S = 30.0
MAX_WAIT_S = 15 * 60.0
FORGET_AFTER_S = 3600.0


@dataclass(frozen=True)
class Evictions:
    count: int
    """Evictions in a row, none more than `FORGET_AFTER_S` after the one before."""
    last_at: float


def record_eviction(previous: Evictions | None, now: float) -> Evictions:
    if previous is None or now - previous.last_at > FORGET_AFTER_S:
        return Evictions(count=1, last_at=now)
    return Evictions(count=previous.count + 1, last_at=now)


def wait_s(evictions: int) -> float:
    """The wait after the `evictions`-th eviction in a row."""
    if evictions <= 0:
        return 0.0
    return min(MAX_WAIT_S, FIRST_WAIT_S * 2.0 ** min(evictions - 1, 30))


def serves_again_at(record: Evictions | None) -> float:
    """When the peer may serve a stage again; -inf if it never was evicted."""
    if record is None:
        return float("-inf")
    return record.last_at + wait_s(record.count)
