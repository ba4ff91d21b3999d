"""Stochastic wiring: which peer of a stage serves the next call.

Interleaved weighted round-robin, as in the SWARM reference code: every peer has a virtual
finish time; the next call goes to the peer with the smallest one (random tie-break), which then
advances by the time the call holds that peer: the longer of its compute (samples / that peer's
throughput) and its transfer (the call's bytes / the link rate this trainer measured to that peer;
an unmeasured link counts at the median of those measured), see `_call_s`. Calls queued at a
peer, as its last reply to this trainer said, count against it while that reading is fresh
(`_soonest`), each at the longer of its compute and its transfer there. Fast peers are chosen
proportionally more often, slow or busy ones less, and a peer that fails is banned for a while with
capped exponential backoff. Pure: no I/O, time is passed in.
"""

from __future__ import annotations

import random
import statistics
import sys
from dataclasses import dataclass, field

MIN_THROUGHPUT = 1e-3
"""Floor for a peer that has not measured anything yet, so its share is finite but it is still tried."""


@dataclass(kw_only=True)
class _PeerSlot:
    finish_time: float
    throughput: float
    banned_until: float = 0.0
    queue_length: int = 0
    queue_read_at: float = 0.0
    link_rate: float | None = None
    """Bytes per second this trainer measured to the peer, None until measured."""
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
    _median_link: float | None = None
    _median_known: bool = False
    """`_median_link` holds for the stage's current peers and links."""

    def update_peers(self, throughputs: dict[int, float]) -> None:
        """Set the stage's live peers and their measured throughputs (samples/s); each keeps the
        queue `observe_queue` last read."""
        self._median_known = False
        for peer_id in list(self._slots):
            if peer_id not in throughputs:
                del self._slots[peer_id]
        start: float | None = None
        for peer_id, throughput in throughputs.items():
            slot = self._slots.get(peer_id)
            if slot is not None:
                slot.throughput = max(throughput, MIN_THROUGHPUT)
                continue
            if start is None:
                # A new peer enters at the current minimum, so it is tried at once. A banned peer's
                # finish time is stale and does not count: entering there would hand the newcomer
                # every call until it caught up. (Found only when a peer is new: a simulated trainer
                # of 10,000 peers is told its stages' peers far more often than they change.)
                fresh = [s.finish_time for s in self._slots.values() if not s.stale]
                start = min(fresh or [s.finish_time for s in self._slots.values()], default=0.0)
            self._slots[peer_id] = _PeerSlot(finish_time=start, throughput=max(throughput, MIN_THROUGHPUT))

    def observe_queue(self, peer_id: int, queued: int, now: float) -> None:
        """Calls waiting at `peer_id`, as its reply that arrived at `now` said."""
        slot = self._slots.get(peer_id)
        if slot is not None:
            slot.queue_length = queued
            slot.queue_read_at = now

    def update_links(self, rates: dict[int, float]) -> None:
        """Link rates (bytes/s) this trainer measured; peers without one keep theirs."""
        self._median_known = False
        for peer_id, slot in self._slots.items():
            rate = rates.get(peer_id)
            if rate is not None and rate > 0:
                slot.link_rate = rate

    def choose(
        self, samples: int, now: float, exclude: frozenset[int] = frozenset(), nbytes: int = 0
    ) -> int | None:
        """The peer for a call of `samples` samples moving `nbytes` both ways, or None if every
        peer is banned or excluded."""
        # A peer back from a ban re-enters at the current minimum (as a new one does), not at its
        # stale finish time, which would send it every call until it caught up with the others.
        back = [s for s in self._slots.values() if s.stale and s.banned_until <= now]
        if back:
            floor = min(
                (s.finish_time for s in self._slots.values() if s.banned_until <= now and not s.stale),
                default=None,
            )
            for slot in back:
                slot.stale = False
                if floor is not None:
                    slot.finish_time = max(slot.finish_time, floor)
        unmeasured_link = self._unmeasured_link()
        peer_id = _soonest(self._slots, samples, now, exclude, self.rng, nbytes, unmeasured_link)
        if peer_id is None:
            return None
        slot = self._slots[peer_id]
        slot.finish_time += _call_s(slot, samples, nbytes, unmeasured_link)
        return peer_id

    def _unmeasured_link(self) -> float | None:
        """The link rate a peer not measured yet is charged at: the median of those measured, as of
        the last change to the stage's peers or links. Charged no transfer at all, a newcomer looked
        faster than every measured peer by its whole transfer time and took call after call until
        its link was read (simulated, 100 peers dying every 30 minutes on average: 39 samples/s,
        60-80 with this prior, 102 with every link known from the start)."""
        if not self._median_known:
            measured = [s.link_rate for s in self._slots.values() if s.link_rate]
            self._median_link = statistics.median(measured) if measured else None
            self._median_known = True
        return self._median_link

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
        slot.banned_until = now + ban_seconds(slot.failures, self.ban_base_s, self.ban_max_s)

    def failures(self, peer_id: int) -> int:
        """Failures of `peer_id` since its last success (0 for a peer the router does not know)."""
        slot = self._slots.get(peer_id)
        return slot.failures if slot is not None else 0

    def peers(self) -> list[int]:
        return sorted(self._slots)


def ban_seconds(failures: int, base_s: float, max_s: float) -> float:
    """The ban after `failures` failures in a row: `base_s`, doubled for each failure after the
    first, up to `max_s`. A peer that never answers again (a silent death a long run keeps trying)
    fails thousands of times; the doublings stop at the float range, where 2 ** n would overflow,
    and a product past it is inf, which the cap takes back to `max_s`."""
    doublings = min(failures - 1, sys.float_info.max_exp - 1)
    return min(max_s, base_s * 2.0**doublings)


def _soonest(
    slots: dict[int, _PeerSlot],
    samples: int,
    now: float,
    exclude: frozenset[int],
    rng: random.Random,
    nbytes: int = 0,
    unmeasured_link: float | None = None,
) -> int | None:
    """The peer not banned or excluded whose call of `samples` (moving `nbytes`) would finish first:
    its finish time plus the calls it is taken to hold queued now, each delaying the call by the
    longer of its compute there and its bytes over this trainer's reading of the link (or
    `unmeasured_link`); a random number breaks ties. None: no peer.

    A queued call holds the peer for its compute or for its transfer, whichever is longer: a peer
    takes in the next call's bytes while it computes, and its own link carries every trainer's calls.
    Charged compute alone, a queue at a fast device on a slow link looked nearly free: at 10,000
    simulated spot peers whose calls move 10 MB a sample, an A100 on broadband was charged 1/144 s a
    sample for what its link takes 0.8 s over, and such peers held the most calls of a step, some
    queued 15 minutes ahead. Charging only what a slow link adds beyond the stage's fastest reading
    left the data-centre peers' link (0.08 s a sample) uncharged, piled the steps' calls on their
    fast devices instead, and cost 1,000 peers 11-32% (docs/benchmarks.md, issue 14). Where a
    trainer's own link is the slower end, its readings of every peer are alike and each queued call
    is charged that transfer: overstated, but alike at every peer whose compute is shorter. On
    loopback, transfers are far shorter than compute and queues count their compute, as before.

    The queue is the peer's last reading, faded. A reading is as old as this trainer's replies from
    that peer are apart, and at a loaded stage a reply itself waited 12-17 s in the queue
    (swarm-ref's head, docs/benchmarks.md). Taken at face value, a peer that answered long ago
    looked idle beside one that had just answered with its queue, every trainer sent it its next
    calls on that old reading, and four equal peers were busy from 43% to 91% of the same step. So
    a reading fades toward the mean of the stage's readings, halving its difference from it with
    each queued call's time that passes there, in which a queue changes by about one call. A fresh
    reading still steers calls away from a backed-up peer (a slow one, or one held up by its
    upload), which ignoring queues altogether gave up. (Weighting the mean by each reading's
    freshness did no better; both simulated, issue 13.)

    Called for every call a trainer routes, over every peer of the stage: one pass of plain
    arithmetic. `statistics.fmean` and `max` were most of its time at 1,000 simulated peers; at
    10,000, a pass for the queues and another for the candidates took 46 s of a 232 s profile and
    one pass 41 s; comparing fields rather than building a tuple per peer then took a choice among
    85 peers from 63.6 us to 35.7 us (a micro-benchmark).
    """
    if not slots:
        return None
    level = sum(slot.queue_length for slot in slots.values()) / len(slots)
    best: int | None = None
    best_s = best_tie = 0.0
    for peer_id, slot in slots.items():
        if slot.banned_until > now or peer_id in exclude:
            continue
        # `_call_s`, inlined: this loop runs over every peer of the stage for every call routed.
        link = slot.link_rate or unmeasured_link
        queued_call_s = samples / slot.throughput
        if link:
            queued_call_s = max(queued_call_s, nbytes / link)
        elapsed = now - slot.queue_read_at
        calls_since = elapsed / queued_call_s if elapsed > 0.0 else 0.0
        queued = level + (slot.queue_length - level) * 0.5**calls_since
        finish_s = slot.finish_time + queued * queued_call_s
        tie = rng.random()
        # The least (finish, tie, id), compared field by field rather than as tuples built per peer.
        if (
            best is None
            or finish_s < best_s
            or (finish_s == best_s and (tie < best_tie or (tie == best_tie and peer_id < best)))
        ):
            best, best_s, best_tie = peer_id, finish_s, tie
    return best


def _call_s(slot: _PeerSlot, samples: int, nbytes: int, unmeasured_link: float | None) -> float:
    """How long a call holds a peer: the longer of its compute and its transfer over the measured
    link (or `unmeasured_link` until it is measured; none at all while nothing is).

    A trainer keeps many calls in flight, and a peer takes in the next call's bytes while it
    computes, so what a peer can serve is one call per the longer of the two, as `_soonest` already
    charges a queued call. Advanced by their sum, a data-centre T4 of the 1,000 simulated spot peers
    (its compute and its 10.5 MB a sample over its link alike, 0.08 s each) was charged twice its
    time, and broadband peers, whose link is nearly all of their sum, took about 2.3x their share of
    a step's calls: stage 15's broadband T4s (1.2 samples/s through their links) got 20-26 calls of
    a step against about 110 for its data-centre T4s (11.9 samples/s), and such backlogs finished up
    to 13 minutes after the step opened. With the longer of the two, the same 40 simulated minutes
    collected a step in 162-212 s against 201-257 s, with 1,802 retries against 2,558, and committed
    40.0 samples/s against 34.8. Over 2 simulated hours, 1,000 peers reached 0.137 of ideal against
    0.128 (mean of seeds 0-3, higher in 3) and 100 peers 0.235 against 0.217 (seeds 0-9, higher in
    8; docs/benchmarks.md, issue 14)."""
    link = slot.link_rate or unmeasured_link
    transfer = nbytes / link if link else 0.0
    return max(samples / slot.throughput, transfer)
