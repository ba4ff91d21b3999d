"""One connected peer as the run's state machine sees it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from server.policies.join_hold import holds_the_step
from server.policies.rate_estimate import RateEstimate
from swarmhub.wire import CheckTally, PeerEndpoint

OBSERVATIONS_KEPT = 64
MIN_OBSERVATIONS = 4
CLAIM_SLACK = 8.0
"""A claim may exceed the trainers' timings by this factor; a claim far above what the peer serves
is capped to it. A timing includes the network and the queue the call waited in, and trainers keep
several calls queued at every peer (`peer/concurrency.py`), so the figure taken is the quickest
tenth of the timings (`OBSERVED_QUANTILE`): the least queued, nearest the peer's own rate.

At a bottleneck stage even the quickest calls wait behind a dozen others, and an honest peer's claim
was capped to a fraction of its rate: in an emulated 3-stage run the last stage's fast peer claimed
5.7 samples/s, trainers timed its calls at 0.34-0.42, and it counted at 2.7. Its stage looked the
weakest, a peer was moved there, the next bottleneck's queues capped its peers in turn, and a peer
was moved back. A busy peer's pace is what it got through over time, however long each call waited:
so the figure taken is the larger of the quickest timings and the work the timed calls did over the
span in which trainers reported them (`Member.served_pace`). A peer that serves less than it claims
is capped by both."""
OBSERVED_QUANTILE = 0.9


@dataclass(frozen=True)
class Timing:
    """One stage call of this peer as a trainer reported it."""

    trainer: int
    samples_per_s: float
    """The call's samples over the seconds the trainer waited for it."""
    work: float
    """Samples of forward and backward compute the call stood for: its samples, or half of them for
    a call of a stage that serves a sample in two calls (a forward, then a backward)."""
    at: float
    """When the trainer's report came in (the machine's clock)."""


@dataclass(kw_only=True)
class Member:
    peer_id: int
    name: str
    address: str
    stage: int | None = None
    ready: bool = False
    """Holds its stage's state as of the current step and may be routed to."""
    waiting_reason: str | None = None
    """Its (re)assignment waits for the step boundary: assigned during averaging it would copy state
    that is about to change."""
    throughput: float = 0.0
    queue_length: int = 0
    samples_done: int = 0
    links: dict[int, float] = field(default_factory=dict)
    """Its last heartbeat's measured link rates: peer id -> bytes per second."""
    inbound_link: float | None = None
    """The best rate any member measured to it (bytes/s; `rebalance.inbound_link_rates`), as of the
    last refresh of the grant cap; None until someone measured it."""
    rounds_held_up: int = 0
    """Averaging rounds in which others gave up waiting for its contribution, over all its channels
    in this run (`policies.averaging.pushing_rate`: each halves the link rate its pushes are given
    time for)."""
    last_seen: float = 0.0
    probed_silence: float | None = None
    """Its `last_seen` when the coordinator last probed it for its silence (`policies.silence`): one
    probe per silence."""
    connected_at: float = 0.0
    """When its channel was admitted (the machine's clock): its uptime counts from there."""
    assigned_at: float = 0.0
    rate: RateEstimate = field(default_factory=RateEstimate)
    """Its smoothed rate on its current stage (what rebalancing decides on), read from the heartbeats
    it sent while serving there; started afresh whenever it is assigned a stage."""
    rate_samples_done: int = 0
    """Its `samples_done` at the last reading."""
    fingerprint: str = ""
    """SHA-256 of its data-plane certificate, which callers pin (empty: plain ws)."""
    reachable: bool = True
    """The coordinator reached its data plane when it joined. A peer that cannot be reached is a
    trainer only: it never serves a stage."""
    last_granted: float = -1e9
    """When it was last granted a microbatch: only an active trainer has reason to call stage peers."""
    offered_sources: frozenset[int] = frozenset()
    """Peers it was told to copy its stage from, the last time it was assigned one."""
    observed: deque[Timing] = field(default_factory=lambda: deque(maxlen=OBSERVATIONS_KEPT))
    """Its recent calls as trainers timed them."""
    trusted: bool = False
    """The owner's own peer (verifier token): preferred as referee, and brought to a stage of two whose
    peers disagree."""
    rejected_rounds: int = 0
    """Averaging rounds in a row whose contribution from it was out of proportion and left out."""
    disputed_rounds: int = 0
    """Butterfly rounds in a row left out of because its part check disagreed with another member's
    (`part_check`: one of the two lies, which one cannot be told)."""
    strikes: int = 0
    """Reports the coordinator could not accept (another's microbatch, reports it had no reason to make)."""
    check_tally: CheckTally = field(default_factory=CheckTally)
    """Its trainer's spot-check totals as of its last heartbeat."""
    load_failed_at: float | None = None
    """When it last reported that it could not load its stage from any source offered."""
    copies_behind: int = 0
    """Its copies of its stage in a row that arrived after the step they were for had moved on
    (`policies.join_hold`: steps no longer wait for its copies)."""

    def take_reading(self) -> None:
        """Count its latest heartbeat's rate as a reading of its rate on its stage, once it has served
        samples there since the last reading (an idle peer's rate says nothing new)."""
        if self.ready and self.samples_done > self.rate_samples_done:
            self.rate = self.rate.observe(self.effective_throughput)
            self.rate_samples_done = self.samples_done

    def restart_rate(self) -> None:
        """A new stage (or a new copy of it): its rate there is measured afresh."""
        self.rate = RateEstimate()
        self.rate_samples_done = self.samples_done

    def observe(
        self, trainer: int, samples: int, seconds: float, *, calls_per_sample: int, now: float
    ) -> None:
        """A call of `samples` samples that `trainer` waited `seconds` for, reported at `now`; the
        peer's stage serves a sample in `calls_per_sample` calls."""
        self.observed.append(
            Timing(trainer=trainer, samples_per_s=samples / seconds, work=samples / calls_per_sample, at=now)
        )

    @property
    def served_pace(self) -> float:
        """Samples/s of compute the timed calls add up to over the span they were reported in (the
        first report opens the span, its work is before it): at least the pace of a peer kept busy,
        however long each call queued. 0 over no span."""
        if len(self.observed) < 2:
            return 0.0
        span = self.observed[-1].at - self.observed[0].at
        if span <= 0.0:
            return 0.0
        return (sum(t.work for t in self.observed) - self.observed[0].work) / span

    @property
    def effective_throughput(self) -> float:
        """What routing, state sources, checkpoint uploads and rebalancing go by: its own claim,
        capped by what trainers saw it serve once several have timed it. A high quantile of their
        timings resists a lying trainer (talking a peer down takes most of the timings); the slack
        covers the network and queueing in a timing."""
        if len(self.observed) < MIN_OBSERVATIONS or len({t.trainer for t in self.observed}) < 2:
            return self.throughput
        rates = sorted(t.samples_per_s for t in self.observed)
        served = max(rates[int(OBSERVED_QUANTILE * (len(rates) - 1))], self.served_pace)
        return min(self.throughput, CLAIM_SLACK * served)

    def endpoint(self) -> PeerEndpoint:
        return PeerEndpoint(
            peer_id=self.peer_id,
            address=self.address,
            stage=self.stage,
            throughput=self.effective_throughput,
            queue_length=self.queue_length,
            fingerprint=self.fingerprint,
        )

    @property
    def loading(self) -> bool:
        """Assigned a stage and copying its state (not waiting for the boundary)."""
        return (
            self.stage is not None
            and not self.ready
            and self.waiting_reason is None
            and self.load_failed_at is None
        )

    def holds_step(self, now: float) -> bool:
        """Copying its stage, and recently enough that the step's averaging waits for it."""
        return self.loading and holds_the_step(now - self.assigned_at, self.copies_behind)
