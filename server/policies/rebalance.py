"""Adaptive rebalancing: the placement of peers on stages to aim for, and which moves toward it pay.

Rates. A pipeline's rate is the rate of its slowest stage, and a stage's rate is the sum of its
peers' rates there. A peer's rate on its own stage is a smoothed measurement with a confidence
(`rate_estimate.RateEstimate`: mean, lower and upper bound). Its rate on another stage is that
rate scaled by the two stages' costs (`stage_costs`, FLOPs per sample from `swarmhub.stage_cost`):
in cost units a peer has one speed, whatever stage it serves. Stages' measured means are never used
to scale, they are as noisy as the peers behind them.

Links. A peer's rate is also capped by what its links carry: each sample it processes moves a
stage-dependent number of bytes through it (`stage_bytes_per_sample`: activations in, out and
their gradients back, as the trainers' calls carry them), so a peer whose links carry L bytes/s
serves at most L / bytes-per-sample samples/s there however fast it computes. L is the best rate
any peer measured to it (`inbound_link_rates`, from heartbeats); a peer nobody measured is not
capped.

The plan. From the current placement, peers are moved one at a time into the weakest stage (ties:
the lowest index), each time the peer that leaves the weaker of the two stages involved strongest
(then the donor stage strongest, the shortest queue, the lowest id), as long as both stay above the
weakest stage's old rate: the bottleneck never drops, and several stages that are equally weak are
each given a peer (one peer into one of them alone would gain nothing). A peer moves at most once
in a plan and a stage that received a peer gives none. The plan looks at most `PLAN_MOVES` moves
ahead; a swarm further from balance gets there over several decisions.

The decision. Of the plan, a decision makes the first moves, at most one into a stage per
`COPY_SOURCES` peers it has (at least one: a stage's peers serve few copies of their state at a
time, and the next movers go by measured rates), and only as many as pay: over `horizon_s` (until
the next decision) the gained rate, taken pessimistically (the planned placement at its peers'
lower bounds against the current one at its upper bounds, independent peers' margins adding in
quadrature), must outweigh what the copies cost. A mover copies its new stage's state
(`state_bytes`) at its measured link rate and serves nothing meanwhile: its old stage loses it at
once (the plan never takes a stage below the current bottleneck, so the pipeline keeps its rate)
and its new one gets it only after the copy, so the gain counts only for the horizon left after the
longest copy. The number of moves with the largest net gain is made; none if no number gains.
Unsettled peers (a rate of too few readings, such as one that just moved) count with their wide
bounds and are not moved.

Empty stages come first: while a stage has no peer the pipeline is stalled, so each empty stage
gets a peer at once, whatever the cost, from a stage that keeps one (the donor that leaves the
occupied stages strongest; then the shortest queue, then the lowest id). A move never empties a
stage. Every choice is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from server.policies.rate_estimate import RateEstimate

PLAN_MOVES = 32
"""Moves the plan looks ahead: enough to balance any swarm a decision can act on (one move into
each stage), cheap for thousands of peers."""
COPY_SOURCES = 3
"""Peers a mover is offered to copy its stage from: a decision moves at most one peer into a stage
per three peers there (at least one), so copies do not queue on the same sources."""
DEFAULT_LINK_RATE = 12.5e6
"""Bytes per second a mover is assumed to copy at when no peer measured its links (100 Mbit/s)."""


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
    """Bytes per second its links were measured to carry; None: not measured, not capped."""

    @classmethod
    def measured(
        cls,
        *,
        peer_id: int,
        stage: int,
        rate: RateEstimate,
        queue_length: int = 0,
        link_rate: float | None = None,
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
        )


CODEC_BYTES_PER_ELEMENT: dict[str, float] = {"none": 4.0, "float16": 2.0, "int8": 1.0 + 4 / 2048}
"""Wire bytes per float32 activation element (peer/compression.py; int8 adds one absmax per 2048)."""
TOKEN_BYTES = 8
"""Token ids and targets travel as int64, never compressed."""


def stage_bytes_per_sample(num_stages: int, seq_len: int, d_model: int, compression: str) -> list[float]:
    """Data-plane bytes through a stage's peer per sample, as the trainers' calls move them: the
    first stage gets tokens (forward and backward calls) and returns activations and takes their
    gradient; a middle one gets activations twice and a gradient, and returns activations and an
    input gradient; the last gets activations and targets and returns an input gradient."""
    act = seq_len * d_model * CODEC_BYTES_PER_ELEMENT[compression]
    tokens = seq_len * TOKEN_BYTES
    if num_stages == 1:
        return [2.0 * tokens]
    middle = [5 * act] * (num_stages - 2)
    return [2 * tokens + 2 * act, *middle, 2 * act + tokens]


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

    def reason(self, move: Move) -> str:
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


class _Swarm:
    """The rate model: every peer's rate on every stage (mean and bounds), and stage rates."""

    def __init__(
        self,
        peers: Sequence[PeerLoad],
        num_stages: int,
        costs: Sequence[float],
        bytes_per_sample: Sequence[float] | None,
    ) -> None:
        self.peers = {p.peer_id: p for p in peers}
        self.num_stages = num_stages
        self.mean: dict[int, list[float]] = {}
        self.low: dict[int, list[float]] = {}
        self.high: dict[int, list[float]] = {}
        for p in peers:
            caps = [math.inf] * num_stages
            if p.link_rate is not None and bytes_per_sample is not None:
                caps = [p.link_rate / b if b > 0 else math.inf for b in bytes_per_sample]
            scales = [costs[p.stage] / c for c in costs]
            low = p.throughput if p.lower is None else min(p.lower, p.throughput)
            high = p.throughput if p.upper is None else max(p.upper, p.throughput)
            for rates, rate in ((self.mean, p.throughput), (self.low, low), (self.high, high)):
                rates[p.peer_id] = [min(rate * scale, cap) for scale, cap in zip(scales, caps, strict=True)]

    def rate(self, peer_id: int, stage: int) -> float:
        return self.mean[peer_id][stage]

    def means(self, placement: Mapping[int, int]) -> list[float]:
        stages = [0.0] * self.num_stages
        for peer_id, stage in placement.items():
            stages[stage] += self.mean[peer_id][stage]
        return stages

    def bound(self, placement: Mapping[int, int], *, high: bool) -> float:
        """The pipeline's rate with every stage at its upper (or lower) bound; independent peers'
        margins add in quadrature."""
        means = [0.0] * self.num_stages
        margins = [0.0] * self.num_stages
        bounds = self.high if high else self.low
        for peer_id, stage in placement.items():
            mean = self.mean[peer_id][stage]
            means[stage] += mean
            margins[stage] += (bounds[peer_id][stage] - mean) ** 2
        sign = 1.0 if high else -1.0
        return min(max(0.0, m + sign * math.sqrt(e)) for m, e in zip(means, margins, strict=True))


def stage_capacities(
    peers: Sequence[PeerLoad], num_stages: int, bytes_per_sample: Sequence[float] | None = None
) -> list[float]:
    """Samples/s each stage serves: its peers' mean rates, each capped by its links."""
    swarm = _Swarm(peers, num_stages, [1.0] * num_stages, bytes_per_sample)
    return swarm.means({p.peer_id: p.stage for p in peers})


def choose_moves(
    peers: Sequence[PeerLoad],
    num_stages: int,
    *,
    horizon_s: float,
    stage_costs: Sequence[float] | None = None,
    state_bytes: Sequence[float] | None = None,
    bytes_per_sample: Sequence[float] | None = None,
) -> Rebalance | None:
    """The moves worth making now, or None.

    `stage_costs`: FLOPs (any unit) per sample of each stage, None: all equal. `state_bytes`: bytes
    a peer copies to join each stage, None: copying is free. `bytes_per_sample`: data-plane bytes
    per sample through a peer of each stage, to cap peers' rates by their measured links.
    """
    for name, values in (
        ("stage_costs", stage_costs),
        ("state_bytes", state_bytes),
        ("bytes_per_sample", bytes_per_sample),
    ):
        if values is not None and len(values) != num_stages:
            raise ValueError(f"{name} has {len(values)} stages, the run has {num_stages}")
    if stage_costs is not None and not all(c > 0 for c in stage_costs):
        raise ValueError(f"stage costs must be positive, got {list(stage_costs)}")
    for peer in peers:
        if not 0 <= peer.stage < num_stages:
            raise ValueError(f"peer {peer.peer_id} is on stage {peer.stage}, the run has {num_stages}")
    if num_stages < 2:
        return None
    swarm = _Swarm(peers, num_stages, stage_costs or [1.0] * num_stages, bytes_per_sample)
    placement = {p.peer_id: p.stage for p in peers}

    def copy_s(peer_id: int, stage: int) -> float:
        if state_bytes is None:
            return 0.0
        link = swarm.peers[peer_id].link_rate
        return state_bytes[stage] / (link if link else DEFAULT_LINK_RATE)

    counts = [0] * num_stages
    for stage in placement.values():
        counts[stage] += 1
    if 0 in counts:
        return _fill_empty(swarm, placement, counts, copy_s, horizon_s)
    plan = _plan(swarm, placement, counts)
    if not plan:
        return None
    now_high = swarm.bound(placement, high=True)
    best: tuple[float, int] | None = None
    after = dict(placement)
    incoming = [0] * num_stages
    for k, (peer_id, stage) in enumerate(plan, start=1):
        if incoming[stage] >= max(1, counts[stage] // COPY_SOURCES):
            break
        incoming[stage] += 1
        after[peer_id] = stage
        movers = plan[:k]
        copy = max(copy_s(p, s) for p, s in movers)
        if copy >= horizon_s:
            continue
        gain = (swarm.bound(after, high=False) - now_high) * (horizon_s - copy)
        if gain > 0 and (best is None or gain > best[0]):
            best = (gain, k)
    if best is None:
        return None
    gain, k = best
    chosen = plan[:k]
    moved = placement | dict(chosen)
    planned = placement | dict(plan)
    return Rebalance(
        moves=tuple(
            Move(
                peer_id=p,
                from_stage=placement[p],
                to_stage=s,
                peer_rate=swarm.rate(p, s),
                copy_s=copy_s(p, s),
            )
            for p, s in chosen
        ),
        rate_before=min(swarm.means(placement)),
        rate_after=min(swarm.means(moved)),
        planned=_counts(planned, num_stages),
        planned_rate=min(swarm.means(planned)),
        copy_s=max(copy_s(p, s) for p, s in chosen),
        gain=gain,
        horizon_s=horizon_s,
    )


def _counts(placement: Mapping[int, int], num_stages: int) -> tuple[int, ...]:
    counts = [0] * num_stages
    for stage in placement.values():
        counts[stage] += 1
    return tuple(counts)


def _plan(swarm: _Swarm, placement: dict[int, int], counts: list[int]) -> list[tuple[int, int]]:
    """Moves, in order, from `placement` toward the planned one (see the module docstring)."""
    rates = swarm.means(placement)
    counts = list(counts)
    received: set[int] = set()
    plan: list[tuple[int, int]] = []
    candidates = [
        (p.peer_id, placement[p.peer_id], swarm.mean[p.peer_id])
        for p in sorted(swarm.peers.values(), key=lambda p: (p.queue_length, p.peer_id))
        if p.settled
    ]
    while len(plan) < PLAN_MOVES:
        weakest = min(range(swarm.num_stages), key=lambda s: (rates[s], s))
        floor = rates[weakest]
        # Strictly above the old floor: otherwise the move only shifts the bottleneck. Between
        # equal pairs, the donor left strongest; then the first in (queue, id) order.
        best_pair, best_left, best = floor, -math.inf, -1
        for index, (_, source, mean) in enumerate(candidates):
            if source == weakest or source in received or counts[source] < 2:
                continue
            left = rates[source] - mean[source]
            pair = min(left, floor + mean[weakest])
            if pair > best_pair or (pair == best_pair and best >= 0 and left > best_left):
                best_pair, best_left, best = pair, left, index
        if best < 0:
            break
        peer_id, source, mean = candidates.pop(best)
        rates[source] -= mean[source]
        rates[weakest] += mean[weakest]
        counts[source] -= 1
        counts[weakest] += 1
        received.add(weakest)
        plan.append((peer_id, weakest))
    return plan


def _fill_empty(
    swarm: _Swarm,
    placement: dict[int, int],
    counts: list[int],
    copy_s: Callable[[int, int], float],
    horizon_s: float,
) -> Rebalance | None:
    """Give every empty stage a peer from a stage that keeps one, lowest empty stage first."""
    before = min(swarm.means(placement))
    counts = list(counts)
    original = dict(placement)
    moves: list[Move] = []
    for empty in range(swarm.num_stages):
        if counts[empty]:
            continue
        best: tuple[tuple[float, float, int, int], int] | None = None
        for peer in swarm.peers.values():
            source = placement[peer.peer_id]
            if counts[source] < 2 or peer.peer_id in {m.peer_id for m in moves}:
                continue
            trial = placement | {peer.peer_id: empty}
            rates = swarm.means(trial)
            occupied = [r for s, r in enumerate(rates) if counts[s] or s == empty]
            # While other stages are still empty every candidate leaves the rate at 0: prefer the
            # one that leaves the occupied stages strongest.
            key = (-min(rates), -min(occupied), peer.queue_length, peer.peer_id)
            if best is None or key < best[0]:
                best = (key, peer.peer_id)
        if best is None:
            continue
        peer_id = best[1]
        counts[original[peer_id]] -= 1
        counts[empty] += 1
        placement = placement | {peer_id: empty}
        moves.append(
            Move(
                peer_id=peer_id,
                from_stage=original[peer_id],
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
        rate_after=min(swarm.means(placement)),
        planned=_counts(placement, swarm.num_stages),
        planned_rate=min(swarm.means(placement)),
        copy_s=max(m.copy_s for m in moves),
        gain=0.0,
        horizon_s=horizon_s,
    )
