"""Adaptive rebalancing: the placement of peers on stages to aim for, and which moves toward it pay.

Rates. A pipeline's rate is the rate of its slowest stage, and a stage's rate is the sum of its
peers' rates there. A peer's rate on its own stage is a smoothed measurement with a confidence
(`rate_estimate.RateEstimate`: mean, lower and upper bound). Its rate on another stage is that
rate scaled by the two stages' costs (`stage_costs`, FLOPs per sample from `swarmhub.stage_cost`):
in cost units a peer has one speed, whatever stage it serves. Stages' measured means are never used
to scale, they are as noisy as the peers behind them.

Links. A peer's rate is also capped by what its links carry: each sample it processes moves a
stage-dependent number of bytes through it (`swarmhub.stage_cost.stage_bytes_per_sample`:
activations in, out and their gradients back, as the trainers' calls carry them), so a peer whose
links carry L bytes/s serves at most L / bytes-per-sample samples/s there however fast it
computes. L is the best rate any peer measured to it (`inbound_link_rates`, from heartbeats). A
peer nobody measured yet (a joiner nobody called) is capped at the median of the links measured in
the swarm, between the slowest and the fastest of them for its bounds, as a trainer's router
charges it (`peer.routing`); with no link measured at all, nobody is capped. Uncapped, three
unmeasured A100s on broadband (1.2 samples/s through their links, 145 by compute) made a simulated
1,000-peer stage look 570 samples/s strong against 257: the plan took 19 peers from it, it became
the bottleneck at 189, and its two data-centre peers queued ~590 calls each and timed out
thousands of them (docs/benchmarks.md, issue 14).

The plan. From the current placement, peers are moved one at a time into the weakest stage (ties:
the lowest index), each time the peer that leaves the weaker of the two stages involved strongest
(then the donor stage strongest, the shortest queue, the lowest id), as long as both stay above the
weakest stage's old rate: the bottleneck never drops, and several stages that are equally weak are
each given a peer (one peer into one of them alone would gain nothing). A peer moves at most once
in a plan. A stage that received a peer may give another: a slow peer whose stage was given a fast
one can then go where its rate lifts the new bottleneck, an exchange no single move makes. Every
move raises the weakest stage above the old floor and keeps its donor above it, so the plan ends.
It looks at most `PLAN_MOVES` moves ahead; a swarm further from balance gets there over several
decisions.

The decision. Of the plan, a decision makes the first moves, at most one into a stage per
`COPY_SOURCES` peers it has (at least one: a stage's peers serve few copies of their state at a
time, and the next movers go by measured rates), and only as many as pay: over `horizon_s` (until
the next decision) the gained rate, taken pessimistically (`_pessimistic_gain`: each stage of the
planned placement at its lower bound against the current bottleneck at its upper bound, independent
peers' margins adding in quadrature, and a stage against itself through the peers that come and
go only: those that stay are the same in both and their uncertainty cancels), must outweigh what
the copies cost. A mover copies its new stage's state (`state_bytes`) at its measured link rate
and serves nothing meanwhile: its old stage loses it at once (the plan never takes a stage below
the current bottleneck, so the pipeline keeps its rate) and its new one gets it only after the
copy, so the gain counts only for the horizon left after the longest copy. The number of moves
with the largest net gain is made, more moves only if they gain on fewer by themselves (the same
bound, the placement of fewer moves taken as the current one); none if no number gains. Unsettled
peers (a rate of too few readings, such as one that just moved) count with their wide bounds and
are not moved.

Empty stages come first: while a stage has no peer the pipeline is stalled, so each empty stage
gets a peer at once, whatever the cost, from a stage that keeps one (the donor that leaves the
occupied stages strongest; then the shortest queue, then the lowest id). A move never empties a
stage. Every choice is deterministic.

Averaging (with a `StepAveraging`; `averaging_pace`): the plan passes over a candidate whose
joining a stage would lengthen the step's averaging, and before any plan, slow uplinks whose pushes
pace the step's longest round move off its stage when the shorter step pays for their copies.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

from server.policies.averaging_pace import RoundBudget, StepAveraging, Uplink, choose_pace_moves, step_s
from server.policies.rate_estimate import RateEstimate

PLAN_MOVES = 32
"""Moves the plan looks ahead: enough to balance any swarm a decision can act on (one move into
each stage), cheap for thousands of peers."""
COPY_SOURCES = 3
"""Peers a mover is offered to copy its stage from: a decision moves at most one peer into a stage
per three peers there (at least one), so copies do not queue on the same sources."""
DEFAULT_LINK_RATE = 12.5e6
"""Bytes per second a mover is assumed to copy at when no link in the swarm is measured (100 Mbit/s);
with some measured, one nobody measured copies at their median, as its rates are capped."""


@dataclass(frozen=True, kw_only=True)
class PeerLoad:
    peer_id: int
    stage: int
    throughput: float
    """Samples per second on its stage: the smoothed mean."""
    lower: float | None = None
    upper: float | None = None
    """Bounds on `throughput`; None: taken as exact."""
    settled: bool = True
    """Its rate rests on enough readings to move it on; an unsettled peer counts but stays."""
    queue_length: int = 0
    link_rate: float | None = None
    """Bytes per second its links were measured to carry; None: not measured, capped as the module
    docstring says."""
    upload: float | None = None
    """Bytes per second its averaging pushes are given (`averaging.pushing_rate`); None: unknown."""

    @classmethod
    def measured(
        cls,
        *,
        peer_id: int,
        stage: int,
        rate: RateEstimate,
        queue_length: int = 0,
        link_rate: float | None = None,
        upload: float | None = None,
    ) -> PeerLoad:
        return cls(
            peer_id=peer_id,
            stage=stage,
            throughput=rate.mean,
            lower=rate.lower,
            upper=rate.upper,
            settled=rate.settled,
            queue_length=queue_length,
            link_rate=link_rate,
            upload=upload,
        )


def inbound_link_rates(reports: Mapping[int, Mapping[int, float]]) -> dict[int, float]:
    """Reporter id -> (peer id -> bytes/s it measured to that peer), turned into each peer's best
    measured rate: a lower bound on what its links carry. A peer's report about itself is ignored."""
    best: dict[int, float] = {}
    for reporter, links in reports.items():
        for peer_id, rate in links.items():
            if peer_id != reporter and rate > 0:
                best[peer_id] = max(best.get(peer_id, 0.0), rate)
    return best


@dataclass(frozen=True, kw_only=True)
class Move:
    peer_id: int
    from_stage: int
    to_stage: int
    peer_rate: float
    """The moved peer's estimated rate on its new stage."""
    copy_s: float
    """Seconds to copy the new stage's state at the mover's link rate."""
    fills_empty: bool = False
    """The target stage had no peer at all."""
    eases_averaging: bool = False
    """The peer's upload paced the step's longest averaging round (`averaging_pace`)."""


@dataclass(frozen=True, kw_only=True)
class Rebalance:
    """The moves of one decision, and the placement they lead toward."""

    moves: tuple[Move, ...]
    rate_before: float
    rate_after: float
    """Pipeline samples/s before and after these moves (estimated means)."""
    planned: tuple[int, ...]
    """Peers per stage in the whole planned placement (these moves may be only its first)."""
    planned_rate: float
    copy_s: float
    """The longest of the moves' copies (they run in parallel)."""
    gain: float
    """Samples expected to be gained over the horizon, pessimistically and net of the copies; 0 for
    moves that fill an empty stage (made whatever they cost)."""
    horizon_s: float
    step_before_s: float = 0.0
    step_after_s: float = 0.0
    """A move that eases averaging: collecting plus the longest round, before and after."""

    def reason(self, move: Move) -> str:
        if move.eases_averaging:
            return (
                f"stage {move.from_stage}'s averaging round paced the step: a step "
                f"~{self.step_before_s:.0f}s -> ~{self.step_after_s:.0f}s (estimated) by moving it to "
                f"stage {move.to_stage}; "
                f"copying its state takes ~{move.copy_s:.1f}s, {self.gain:.0f} samples gained over "
                f"{self.horizon_s:.0f}s"
            )
        if move.fills_empty:
            return (
                f"stage {move.to_stage} had no peer: pipeline rate {self.rate_before:.1f} -> "
                f"{self.rate_after:.1f} samples/s (estimated) by moving a peer from stage {move.from_stage}"
            )
        return (
            f"stage {move.to_stage} was a bottleneck: pipeline rate {self.rate_before:.1f} -> "
            f"{self.rate_after:.1f} samples/s (estimated) by moving a peer from stage {move.from_stage}; "
            f"copying its state takes ~{move.copy_s:.1f}s, {self.gain:.0f} samples gained over "
            f"{self.horizon_s:.0f}s at worst"
        )


class _Links(NamedTuple):
    """Bytes/s a peer's links are taken to carry for its mean rate and for its bounds."""

    mean: float | None
    lower: float | None
    upper: float | None


def _unmeasured_links(peers: Sequence[PeerLoad]) -> _Links:
    """What a peer nobody measured is taken to carry: the median, slowest and fastest of the links
    measured in the swarm; None (not capped) while none is."""
    measured = [p.link_rate for p in peers if p.link_rate is not None]
    if not measured:
        return _Links(None, None, None)
    return _Links(statistics.median(measured), min(measured), max(measured))


class _Swarm:
    """The rate model: a peer's rate on any stage (mean and bounds), and stage rates of placements.

    Rates are evaluated when asked, not tabulated for every peer on every stage (at thousands of
    peers the table was most of a decision). A stage's rate is summed over its peers in placement
    order, so a placement that differs from the current one in a few peers is re-summed on the
    stages those peers touch only, with the same sums a full pass would give.
    """

    def __init__(
        self,
        peers: Sequence[PeerLoad],
        num_stages: int,
        costs: Sequence[float],
        bytes_per_sample: Sequence[float] | None,
    ) -> None:
        self.peers = {p.peer_id: p for p in peers}
        self.num_stages = num_stages
        self.costs = costs
        self.bytes_per_sample = bytes_per_sample
        self.unmeasured = _unmeasured_links(peers)
        self.placement = {p.peer_id: p.stage for p in peers}
        self.order = {peer_id: i for i, peer_id in enumerate(self.placement)}
        self.members: list[list[int]] = [[] for _ in range(num_stages)]
        for peer_id, stage in self.placement.items():
            self.members[stage].append(peer_id)
        self.own = {peer_id: self.rates(peer_id, stage) for peer_id, stage in self.placement.items()}
        self.current = [self.stage_sums(s, {}) for s in range(num_stages)]

    def cap(self, link_rate: float | None, stage: int) -> float:
        """Samples/s links measured at `link_rate` carry on `stage`."""
        if link_rate is None or self.bytes_per_sample is None:
            return math.inf
        b = self.bytes_per_sample[stage]
        return link_rate / b if b > 0 else math.inf

    def links(self, peer: PeerLoad) -> _Links:
        """What `peer`'s links are taken to carry: as measured, or as an unmeasured one's."""
        if peer.link_rate is None:
            return self.unmeasured
        return _Links(peer.link_rate, peer.link_rate, peer.link_rate)

    def rates(self, peer_id: int, stage: int) -> tuple[float, float, float]:
        """A peer's mean rate on `stage`, and its lower and upper bound there."""
        p = self.peers[peer_id]
        scale, links = self.costs[p.stage] / self.costs[stage], self.links(p)
        low = p.throughput if p.lower is None else min(p.lower, p.throughput)
        high = p.throughput if p.upper is None else max(p.upper, p.throughput)
        return (
            min(p.throughput * scale, self.cap(links.mean, stage)),
            min(low * scale, self.cap(links.lower, stage)),
            min(high * scale, self.cap(links.upper, stage)),
        )

    def rate(self, peer_id: int, stage: int) -> float:
        """A peer's mean rate on `stage`."""
        p = self.peers[peer_id]
        cap = self.cap(self.links(p).mean, stage)
        return min(p.throughput * (self.costs[p.stage] / self.costs[stage]), cap)

    def stage_sums(self, stage: int, moved: Mapping[int, int]) -> tuple[float, float, float]:
        """`stage`'s mean rate and its peers' squared margins below and above, with the peers in
        `moved` on the stages given there instead."""
        members = self.members[stage]
        if moved:
            members = [p for p in members if moved.get(p, stage) == stage]
            incoming = [p for p, s in moved.items() if s == stage and self.placement[p] != stage]
            if incoming:
                members = sorted(members + incoming, key=self.order.__getitem__)
        mean_sum = low_sum = high_sum = 0.0
        for peer_id in members:
            mean, low, high = (
                self.own[peer_id] if self.placement[peer_id] == stage else self.rates(peer_id, stage)
            )
            mean_sum += mean
            low_sum += (low - mean) ** 2
            high_sum += (high - mean) ** 2
        return mean_sum, low_sum, high_sum

    def placed(self, moved: Mapping[int, int]) -> list[tuple[float, float, float]]:
        """`stage_sums` of every stage."""
        touched = set(moved.values()) | {self.placement[p] for p in moved}
        return [
            self.stage_sums(s, moved) if s in touched else self.current[s] for s in range(self.num_stages)
        ]

    def means(self, moved: Mapping[int, int]) -> list[float]:
        return [m for m, _, _ in self.placed(moved)]


def stage_capacities(
    peers: Sequence[PeerLoad], num_stages: int, bytes_per_sample: Sequence[float] | None = None
) -> list[float]:
    """Samples/s each stage serves: its peers' mean rates, each capped by its links."""
    return _Swarm(peers, num_stages, [1.0] * num_stages, bytes_per_sample).means({})


def choose_moves(
    peers: Sequence[PeerLoad],
    num_stages: int,
    *,
    horizon_s: float,
    stage_costs: Sequence[float] | None = None,
    state_bytes: Sequence[float] | None = None,
    bytes_per_sample: Sequence[float] | None = None,
    averaging: StepAveraging | None = None,
) -> Rebalance | None:
    """The moves worth making now, or None.

    `stage_costs`: FLOPs (any unit) per sample of each stage, None: all equal. `state_bytes`: bytes
    a peer copies to join each stage, None: copying is free. `bytes_per_sample`: data-plane bytes
    per sample through a peer of each stage, to cap peers' rates by their measured links.
    `averaging`: each stage's gradient sum and the step's samples, to keep slow uplinks from pacing
    the step's averaging (`averaging_pace`); None: averaging is not weighed.
    """
    for name, values in (
        ("stage_costs", stage_costs),
        ("state_bytes", state_bytes),
        ("bytes_per_sample", bytes_per_sample),
    ):
        if values is not None and len(values) != num_stages:
            raise ValueError(f"{name} has {len(values)} stages, the run has {num_stages}")
    if averaging is not None and len(averaging.gradient_bytes) != num_stages:
        raise ValueError(f"averaging has {len(averaging.gradient_bytes)} stages, the run has {num_stages}")
    if stage_costs is not None and not all(c > 0 for c in stage_costs):
        raise ValueError(f"stage costs must be positive, got {list(stage_costs)}")
    for peer in peers:
        if not 0 <= peer.stage < num_stages:
            raise ValueError(f"peer {peer.peer_id} is on stage {peer.stage}, the run has {num_stages}")
    if num_stages < 2:
        return None
    swarm = _Swarm(peers, num_stages, stage_costs or [1.0] * num_stages, bytes_per_sample)

    def copy_s(peer_id: int, stage: int) -> float:
        if state_bytes is None:
            return 0.0
        # A mover nobody measured copies at the link its rates are counted at (the median measured).
        link = swarm.links(swarm.peers[peer_id]).mean
        return state_bytes[stage] / (link if link else DEFAULT_LINK_RATE)

    counts = [len(members) for members in swarm.members]
    if 0 in counts:
        return _fill_empty(swarm, counts, copy_s, horizon_s)
    budget = None
    if averaging is not None:
        uplinks = [
            Uplink(peer_id=p.peer_id, stage=p.stage, upload=p.upload, rate=p.throughput) for p in peers
        ]
        rate = min(swarm.means({}))
        eased = _ease_averaging(swarm, counts, uplinks, rate, averaging, copy_s, horizon_s)
        if eased is not None:
            return eased
        collect_s = step_s(averaging.batch_size, rate, 0.0)
        budget = RoundBudget.of_uplinks(
            uplinks, averaging.gradient_bytes, collect_s, averaging.round_scale, averaging.patterns
        )
    plan = _plan(swarm, counts, budget)
    if not plan:
        return None
    best: tuple[float, int] | None = None
    after: dict[int, int] = {}
    sums = list(swarm.current)
    best_sums = swarm.current
    incoming = [0] * num_stages
    # Per stage, squared margins of the peers the moves bring (lower) and take away (upper): since
    # the current placement, and since the best plan so far.
    arriving, leaving = [0.0] * num_stages, [0.0] * num_stages
    arriving_since, leaving_since = [0.0] * num_stages, [0.0] * num_stages
    for k, (peer_id, stage) in enumerate(plan, start=1):
        if incoming[stage] >= max(1, counts[stage] // COPY_SOURCES):
            break
        incoming[stage] += 1
        after[peer_id] = stage
        source = swarm.placement[peer_id]
        mean, low, _ = swarm.rates(peer_id, stage)
        own_mean, _, own_high = swarm.own[peer_id]
        arrives, leaves = (mean - low) ** 2, (own_high - own_mean) ** 2
        arriving[stage] += arrives
        arriving_since[stage] += arrives
        leaving[source] += leaves
        leaving_since[source] += leaves
        # Only the two stages the move touches change.
        for s in (source, stage):
            sums[s] = swarm.stage_sums(s, after)
        copy = max(copy_s(p, s) for p, s in plan[:k])
        if copy >= horizon_s:
            continue
        gain = _pessimistic_gain(sums, swarm.current, arriving, leaving) * (horizon_s - copy)
        if gain <= 0 or (best is not None and gain <= best[0]):
            continue
        # The further moves must gain on the shorter plan by themselves: otherwise they only widen
        # its margins (a stage that was not the bottleneck made safer), which is not worth a copy.
        if best is not None and _pessimistic_gain(sums, best_sums, arriving_since, leaving_since) <= 0:
            continue
        best, best_sums = (gain, k), list(sums)
        arriving_since, leaving_since = [0.0] * num_stages, [0.0] * num_stages
    if best is None:
        return None
    gain, k = best
    chosen = plan[:k]
    return Rebalance(
        moves=tuple(
            Move(
                peer_id=p,
                from_stage=swarm.placement[p],
                to_stage=s,
                peer_rate=swarm.rate(p, s),
                copy_s=copy_s(p, s),
            )
            for p, s in chosen
        ),
        rate_before=min(swarm.means({})),
        rate_after=min(swarm.means(dict(chosen))),
        planned=_planned(counts, swarm, dict(plan)),
        planned_rate=min(swarm.means(dict(plan))),
        copy_s=max(copy_s(p, s) for p, s in chosen),
        gain=gain,
        horizon_s=horizon_s,
    )


def _ease_averaging(
    swarm: _Swarm,
    counts: Sequence[int],
    uplinks: Sequence[Uplink],
    rate: float,
    averaging: StepAveraging,
    copy_s: Callable[[int, int], float],
    horizon_s: float,
) -> Rebalance | None:
    """The moves of the members whose uploads pace the step's averaging, if they pay
    (`averaging_pace.choose_pace_moves`); `rate`: the pipeline's now (means)."""
    plan = choose_pace_moves(
        uplinks,
        averaging.gradient_bytes,
        batch_size=averaging.batch_size,
        pipeline_rate=rate,
        rate_with_moves=lambda moved: min(swarm.means(moved)),
        copy_s=copy_s,
        movable=lambda peer_id: swarm.peers[peer_id].settled,
        horizon_s=horizon_s,
        round_scale=averaging.round_scale,
        round_measured_s=averaging.round_measured_s,
        patterns=averaging.patterns,
    )
    if plan is None:
        return None
    moved = {peer_id: stage for peer_id, _, stage in plan.moves}
    after = min(swarm.means(moved))
    return Rebalance(
        moves=tuple(
            Move(
                peer_id=peer_id,
                from_stage=source,
                to_stage=stage,
                peer_rate=swarm.rate(peer_id, stage),
                copy_s=copy_s(peer_id, stage),
                eases_averaging=True,
            )
            for peer_id, source, stage in plan.moves
        ),
        rate_before=rate,
        rate_after=after,
        planned=_planned(counts, swarm, moved),
        planned_rate=after,
        copy_s=plan.copy_s,
        gain=plan.gain,
        horizon_s=horizon_s,
        step_before_s=plan.step_before_s,
        step_after_s=plan.step_after_s,
    )


def _pessimistic_gain(
    after: Sequence[tuple[float, float, float]],
    now: Sequence[tuple[float, float, float]],
    arriving: Sequence[float],
    leaving: Sequence[float],
) -> float:
    """A lower bound on the pipeline rate gained, min(after) - min(now), with rates at their
    pessimistic ends (`stage_sums` of each stage after the moves and now; `arriving` and `leaving`:
    the squared margins of the peers the moves bring to and take from each stage).

    The gain is after[s] - min(now) for the stage s that ends weakest, and min(now) <= now[t] for
    every t, so it is at least the least over s of the most over t of after[s] - now[t], each at its
    worst end: after[s] at its lower bound, now[t] at its upper. Against t = s the peers that stay
    on s are in both and cancel, so only the arriving and leaving peers are uncertain: a stage given
    one peer gains at least that peer's lower bound, however uncertain the others' rates are.
    Comparing the two placements' bottlenecks alone counted the staying peers' margins twice and
    hid any gain below about three times one peer's margin: a slow peer whose move lifted its new
    stage by 12% was never moved. For t, the current stages weakest by mean and by upper bound are
    enough for the bound."""
    by_mean = min(range(len(now)), key=lambda t: now[t][0])
    by_upper = min(range(len(now)), key=lambda t: now[t][0] + math.sqrt(now[t][2]))
    least = math.inf
    for s, (mean, low, _) in enumerate(after):
        most = mean - now[s][0] - math.sqrt(arriving[s]) - math.sqrt(leaving[s])
        for t in {by_mean, by_upper} - {s}:
            most = max(most, mean - math.sqrt(low) - now[t][0] - math.sqrt(now[t][2]))
        least = min(least, most)
    return least


def _planned(counts: Sequence[int], swarm: _Swarm, moves: Mapping[int, int]) -> tuple[int, ...]:
    """Peers per stage once `moves` (peer id -> stage) are made."""
    planned = list(counts)
    for peer_id, stage in moves.items():
        planned[swarm.placement[peer_id]] -= 1
        planned[stage] += 1
    return tuple(planned)


class _Candidate(NamedTuple):
    """A peer the plan may move: its rate on its own stage, and its place in the (queue, id) order
    that breaks ties."""

    own: float
    index: int
    peer_id: int
    throughput: float
    link_rate: float | None
    """What its links are taken to carry for its mean rate (`_Swarm.links`)."""
    upload: float | None


class _Donors:
    """A stage's settled peers in the orders the plan's search walks: own rate ascending (the donor
    left strongest first), and, for each kind of target stage, rate there descending (the target
    made strongest first), built when first asked for."""

    def __init__(self, swarm: _Swarm, stage: int, candidates: list[_Candidate]) -> None:
        self.swarm = swarm
        self.stage = stage
        self.by_own = sorted(candidates)
        self._by_target: dict[tuple[float, float | None], list[tuple[float, _Candidate, int]]] = {}

    def by_target(self, target: int) -> list[tuple[float, _Candidate, int]]:
        """(Rate on `target`, candidate, end of its run of equal rates): rate descending, then own
        rate and index ascending, so the first of a run beats the rest of it. Targets of equal cost
        and bytes per sample give every peer the same rate, so they share one order."""
        swarm = self.swarm
        per_sample = None if swarm.bytes_per_sample is None else swarm.bytes_per_sample[target]
        kind = (swarm.costs[target], per_sample)
        order = self._by_target.get(kind)
        if order is None:
            # `_Swarm.rate`, with what all of this stage's peers share worked out once.
            scale = swarm.costs[self.stage] / swarm.costs[target]
            per_sample = 0.0 if swarm.bytes_per_sample is None else swarm.bytes_per_sample[target]
            rated = sorted(
                (
                    -min(
                        c.throughput * scale,
                        c.link_rate / per_sample if c.link_rate is not None and per_sample > 0 else math.inf,
                    ),
                    c,
                )
                for c in self.by_own
            )
            ends = [len(rated)] * len(rated)
            for i in range(len(rated) - 2, -1, -1):
                ends[i] = ends[i + 1] if rated[i][0] == rated[i + 1][0] else i + 1
            order = [(-rate, c, end) for (rate, c), end in zip(rated, ends, strict=True)]
            self._by_target[kind] = order
        return order


def _plan(swarm: _Swarm, counts: list[int], budget: RoundBudget | None = None) -> list[tuple[int, int]]:
    """Moves, in order, from the current placement toward the planned one (see the module docstring).

    Each move goes to the candidate with the largest (pair, left, -index): pair, the weaker of the
    two stages involved after the move, must beat the old floor. Rather than rating every candidate
    for every move, each donor stage is searched from both ends at once, its candidates by own
    rate ascending and by rate on the target descending, until no unseen one can beat the best
    found: an unseen candidate leaves its donor at most `donor - own` of the next by own rate, and
    gives the target at most `floor + rate` of the next by rate there.

    With a `budget`, a candidate whose joining would lengthen the step's averaging
    (`RoundBudget.admits`) is passed over for that target.
    """
    rates = swarm.means({})
    counts = list(counts)
    moved: set[int] = set()
    plan: list[tuple[int, int]] = []
    grouped: list[list[_Candidate]] = [[] for _ in range(swarm.num_stages)]
    settled = sorted(
        (p for p in swarm.peers.values() if p.settled), key=attrgetter("queue_length", "peer_id")
    )
    for index, p in enumerate(settled):
        grouped[p.stage].append(
            _Candidate(swarm.own[p.peer_id][0], index, p.peer_id, p.throughput, swarm.links(p).mean, p.upload)
        )
    donors = [_Donors(swarm, stage, candidates) for stage, candidates in enumerate(grouped)]

    def barred(c: _Candidate, target: int) -> bool:
        return c.index in moved or (budget is not None and not budget.admits(target, c.upload))

    while len(plan) < PLAN_MOVES:
        weakest = min(range(swarm.num_stages), key=lambda s: (rates[s], s))
        floor = rates[weakest]
        # Strictly above the old floor: otherwise the move only shifts the bottleneck. Between
        # equal pairs, the donor left strongest; then the first in (queue, id) order.
        best: tuple[float, float, int] | None = None
        best_move: tuple[_Candidate, int, float] | None = None
        for source in range(swarm.num_stages):
            if source == weakest or counts[source] < 2:
                continue
            by_own, by_target = donors[source].by_own, None
            i = j = 0
            while True:
                while i < len(by_own) and barred(by_own[i], weakest):
                    i += 1
                if i == len(by_own):
                    break
                left_bound = rates[source] - by_own[i].own
                if not _may_beat(left_bound, left_bound, floor, best):
                    break
                if by_target is None:
                    by_target = donors[source].by_target(weakest)
                while j < len(by_target) and barred(by_target[j][1], weakest):
                    j += 1
                if j == len(by_target):
                    # The rest each trail the first of their run of equal rates on the target.
                    break
                rate, head, end = by_target[j]
                if not _may_beat(min(left_bound, floor + rate), left_bound, floor, best):
                    break
                for candidate, there in ((by_own[i], None), (head, rate)):
                    if there is None:
                        there = swarm.rate(candidate.peer_id, weakest)
                    left = rates[source] - candidate.own
                    pair = min(left, floor + there)
                    key = (pair, left, -candidate.index)
                    if pair > floor and (best is None or key > best):
                        best, best_move = key, (candidate, source, there)
                i += 1
                j = end
        if best_move is None:
            break
        candidate, source, there = best_move
        moved.add(candidate.index)
        rates[source] -= candidate.own
        rates[weakest] += there
        counts[source] -= 1
        counts[weakest] += 1
        if budget is not None:
            budget.join(weakest, candidate.upload)
        plan.append((candidate.peer_id, weakest))
    return plan


def _may_beat(pair: float, left: float, floor: float, best: tuple[float, float, int] | None) -> bool:
    """Whether a candidate leaving at most `pair` and `left` may still be chosen over `best`."""
    if pair <= floor:
        return False
    return best is None or pair > best[0] or (pair == best[0] and left >= best[1])


def _fill_empty(
    swarm: _Swarm,
    counts: list[int],
    copy_s: Callable[[int, int], float],
    horizon_s: float,
) -> Rebalance | None:
    """Give every empty stage a peer from a stage that keeps one, lowest empty stage first."""
    counts = list(counts)
    filled: dict[int, int] = {}
    rates = swarm.means({})
    before = min(rates)
    # A donor's rate less the mover's is within `slack` of the donor re-summed without it (float
    # sums of n nonnegative terms err by under n ulps of the total): re-sum only when that matters.
    slack = [
        1e-12 * (len(members) + 1) * sum(abs(swarm.own[p][0]) for p in members) for members in swarm.members
    ]
    moves: list[Move] = []
    for empty in range(swarm.num_stages):
        if counts[empty]:
            continue
        occupied = [counts[s] > 0 or s == empty for s in range(swarm.num_stages)]
        # The other stages' rates, the same for every candidate of a donor.
        rest_all, rest_occupied = [], []
        for source in range(swarm.num_stages):
            others = [r for s, r in enumerate(rates) if s not in (source, empty)]
            rest_all.append(min(others, default=math.inf))
            rest_occupied.append(
                min(
                    (r for s, r in enumerate(rates) if s not in (source, empty) and occupied[s]),
                    default=math.inf,
                )
            )
        best: tuple[tuple[float, float, int, int], int] | None = None
        for peer_id, source in swarm.placement.items():
            if counts[source] < 2 or peer_id in filled:
                continue
            trial = filled | {peer_id: empty}
            there = swarm.stage_sums(empty, trial)[0]
            left = rates[source] - swarm.own[peer_id][0]
            if left - slack[source] <= min(rest_occupied[source], there):
                left = swarm.stage_sums(source, trial)[0]
            # While other stages are still empty every candidate leaves the rate at 0: prefer the
            # one that leaves the occupied stages strongest.
            peer = swarm.peers[peer_id]
            key = (
                -min(rest_all[source], left, there),
                -min(rest_occupied[source], left, there),
                peer.queue_length,
                peer_id,
            )
            if best is None or key < best[0]:
                best = (key, peer_id)
        if best is None:
            continue
        peer_id = best[1]
        source = swarm.placement[peer_id]
        counts[source] -= 1
        counts[empty] += 1
        filled[peer_id] = empty
        for s in (source, empty):
            rates[s] = swarm.stage_sums(s, filled)[0]
        moves.append(
            Move(
                peer_id=peer_id,
                from_stage=source,
                to_stage=empty,
                peer_rate=swarm.rate(peer_id, empty),
                copy_s=copy_s(peer_id, empty),
                fills_empty=True,
            )
        )
    if not moves:
        return None
    return Rebalance(
        moves=tuple(moves),
        rate_before=before,
        rate_after=min(rates),
        planned=tuple(counts),
        planned_rate=min(rates),
        copy_s=max(m.copy_s for m in moves),
        gain=0.0,
        horizon_s=horizon_s,
    )
