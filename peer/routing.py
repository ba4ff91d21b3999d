"""Stochastic wiring: which peer of a stage serves the next call.

Interleaved weighted round-robin, as in the SWARM reference code: every peer has a virtual
finish time; the next call goes to the peer with the smallest one (random tie-break), which then
advances by microbatch size / that peer's throughput, and calls already queued at a peer (from its
heartbeat) count against it. Fast peers are chosen proportionally more often, slow or busy ones
less, and a peer that fails is banned for a while with capped exponential backoff. Pure: no I/O,
time is passed in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

MIN_THROUGHPUT = 1e-3
"""Floor for a peer that has not measured anything yet, so its share is finite but it is still tried."""


@dataclass(kw_only=True)
class _PeerSlot:
    finish_time: float
    throughput: float
    banned_until: float = 0.0
    queue_length: int = 0
    failures: int = 0
    stale: bool = False
    """Banned since its last choice: its finish time stood still while the others' advanced."""


@dataclass(kw_only=True)
class StageRouter:
    """Routing state of one stage, as seen by one trainer."""

    ban_base_s: float = 1.0
    ban_max_s: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    _slots: dict[int, _PeerSlot] = field(default_factory=dict)

    def update_peers(self, throughputs: dict[int, float], queues: dict[int, int] | None = None) -> None:
        """Set the stage's live peers, their measured throughputs (samples/s) and, if known, how
        many calls each has waiting (from its last heartbeat)."""
        for peer_id in list(self._slots):
            if peer_id not in throughputs:
                del self._slots[peer_id]
        # A new peer enters at the current minimum, so it is tried at once. A banned peer's finish
        # time is stale and does not count: entering there would hand the newcomer every call
        # until it caught up.
        fresh = [s.finish_time for s in self._slots.values() if not s.stale]
        start = min(fresh or [s.finish_time for s in self._slots.values()], default=0.0)
        for peer_id, throughput in throughputs.items():
            slot = self._slots.get(peer_id)
            if slot is None:
                slot = self._slots[peer_id] = _PeerSlot(
                    finish_time=start, throughput=max(throughput, MIN_THROUGHPUT)
                )
            else:
                slot.throughput = max(throughput, MIN_THROUGHPUT)
            slot.queue_length = (queues or {}).get(peer_id, 0)

    def choose(self, samples: int, now: float, exclude: frozenset[int] = frozenset()) -> int | None:
        """The peer for a call of `samples` samples, or None if every peer is banned or excluded."""
        # A peer back from a ban re-enters at the current minimum (as a new one does), not at its
        # stale finish time, which would send it every call until it caught up with the others.
        live = [s for s in self._slots.values() if s.banned_until <= now]
        floor = min((s.finish_time for s in live if not s.stale), default=None)
        for slot in live:
            if slot.stale:
                slot.stale = False
                if floor is not None:
                    slot.finish_time = max(slot.finish_time, floor)
        # Calls other trainers queued at a peer delay this one by about queue x call time.
        candidates = [
            (slot.finish_time + slot.queue_length * samples / slot.throughput, self.rng.random(), peer_id)
            for peer_id, slot in self._slots.items()
            if slot.banned_until <= now and peer_id not in exclude
        ]
        if not candidates:
            return None
        _, _, peer_id = min(candidates)
        slot = self._slots[peer_id]
        slot.finish_time += samples / slot.throughput
        return peer_id

    def report_success(self, peer_id: int) -> None:
        slot = self._slots.get(peer_id)
        if slot is not None:
            slot.failures = 0

    def report_failure(self, peer_id: int, now: float) -> None:
        slot = self._slots.get(peer_id)
        if slot is None:
            return
        slot.failures += 1
        slot.stale = True
        slot.banned_until = now + min(self.ban_max_s, self.ban_base_s * 2 ** (slot.failures - 1))

    def peers(self) -> list[int]:
        return sorted(self._slots)
