"""`choose_moves` written the straightforward way, to check the policy's searches against.

Every peer's rate on every stage is tabulated, every placement is summed over all peers, and each
planned move rates every candidate: the module docstring of `server.policies.rebalance`, read
literally. Sums run in the same order as the policy's, so the two agree exactly, not within a
tolerance.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence

from server.policies.rebalance import (
    COPY_SOURCES,
    DEFAULT_LINK_RATE,
    PLAN_MOVES,
    Move,
    PeerLoad,
    Rebalance,
)


class _Table:
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
        measured = sorted(p.link_rate for p in peers if p.link_rate is not None)
        # A peer nobody measured: the median measured link for its mean, the slowest and fastest
        # for its bounds; nobody capped while no link is measured.
        unmeasured = (statistics.median(measured), measured[0], measured[-1]) if measured else (None,) * 3
        self.copy_link: dict[int, float] = {}
        for p in peers:
            links = (p.link_rate,) * 3 if p.link_rate is not None else unmeasured
            # Its copy, too, runs at its mean link (the default while none is measured).
            self.copy_link[p.peer_id] = links[0] or DEFAULT_LINK_RATE
            scales = [costs[p.stage] / c for c in costs]
            low = p.throughput if p.lower is None else min(p.lower, p.throughput)
            high = p.throughput if p.upper is None else max(p.upper, p.throughput)
            for rates, rate, link in zip(
                (self.mean, self.low, self.high), (p.throughput, low, high), links, strict=True
            ):
                caps = [math.inf] * num_stages
                if link is not None and bytes_per_sample is not None:
                    caps = [link / b if b > 0 else math.inf for b in bytes_per_sample]
                rates[p.peer_id] = [min(rate * scale, cap) for scale, cap in zip(scales, caps, strict=True)]

    def means(self, placement: Mapping[int, int]) -> list[float]:
        stages = [0.0] * self.num_stages
        for peer_id, stage in placement.items():
            stages[stage] += self.mean[peer_id][stage]
        return stages

    def sums(self, placement: Mapping[int, int]) -> list[tuple[float, float, float]]:
        """Each stage's mean rate and its peers' squared margins below and above."""
        means = [0.0] * self.num_stages
        lows = [0.0] * self.num_stages
        highs = [0.0] * self.num_stages
        for peer_id, stage in placement.items():
            mean = self.mean[peer_id][stage]
            means[stage] += mean
            lows[stage] += (self.low[peer_id][stage] - mean) ** 2
            highs[stage] += (self.high[peer_id][stage] - mean) ** 2
        return list(zip(means, lows, highs, strict=True))

    def pessimistic_gain(self, placement: Mapping[int, int], moves: Sequence[tuple[int, int]]) -> float:
        """The least over stages s of the most over t of after[s] - now[t] at their worst ends, t
        being s itself (only the peers that come and go uncertain) or a current bottleneck (by mean
        and by upper bound)."""
        after, now = self.sums(placement | dict(moves)), self.sums(placement)
        arriving = [0.0] * self.num_stages
        leaving = [0.0] * self.num_stages
        for peer_id, stage in moves:
            source = placement[peer_id]
            arriving[stage] += (self.mean[peer_id][stage] - self.low[peer_id][stage]) ** 2
            leaving[source] += (self.high[peer_id][source] - self.mean[peer_id][source]) ** 2
        stages = range(self.num_stages)
        weakest = {
            min(stages, key=lambda t: now[t][0]),
            min(stages, key=lambda t: now[t][0] + math.sqrt(now[t][2])),
        }
        return min(
            max(
                [mean - now[s][0] - math.sqrt(arriving[s]) - math.sqrt(leaving[s])]
                + [mean - math.sqrt(low) - now[t][0] - math.sqrt(now[t][2]) for t in weakest - {s}]
            )
            for s, (mean, low, _) in enumerate(after)
        )


def choose_moves(
    peers: Sequence[PeerLoad],
    num_stages: int,
    *,
    horizon_s: float,
    stage_costs: Sequence[float] | None = None,
    state_bytes: Sequence[float] | None = None,
    bytes_per_sample: Sequence[float] | None = None,
) -> Rebalance | None:
    if num_stages < 2:
        return None
    table = _Table(peers, num_stages, stage_costs or [1.0] * num_stages, bytes_per_sample)
    placement = {p.peer_id: p.stage for p in peers}

    def copy_s(peer_id: int, stage: int) -> float:
        if state_bytes is None:
            return 0.0
        return state_bytes[stage] / table.copy_link[peer_id]

    counts = _counts(placement, num_stages)
    if 0 in counts:
        return _fill_empty(table, placement, counts, copy_s, horizon_s)
    plan = _plan(table, placement, counts)
    best: tuple[float, int] | None = None
    incoming = [0] * num_stages
    for k, (_, stage) in enumerate(plan, start=1):
        if incoming[stage] >= max(1, counts[stage] // COPY_SOURCES):
            break
        incoming[stage] += 1
        copy = max(copy_s(p, s) for p, s in plan[:k])
        if copy >= horizon_s:
            continue
        gain = table.pessimistic_gain(placement, plan[:k]) * (horizon_s - copy)
        if gain <= 0 or (best is not None and gain <= best[0]):
            continue
        if (
            best is not None
            and table.pessimistic_gain(placement | dict(plan[: best[1]]), plan[best[1] : k]) <= 0
        ):
            continue
        best = (gain, k)
    if best is None:
        return None
    gain, k = best
    chosen = plan[:k]
    planned = placement | dict(plan)
    return Rebalance(
        moves=tuple(
            Move(
                peer_id=p,
                from_stage=placement[p],
                to_stage=s,
                peer_rate=table.mean[p][s],
                copy_s=copy_s(p, s),
            )
            for p, s in chosen
        ),
        rate_before=min(table.means(placement)),
        rate_after=min(table.means(placement | dict(chosen))),
        planned=_counts(planned, num_stages),
        planned_rate=min(table.means(planned)),
        copy_s=max(copy_s(p, s) for p, s in chosen),
        gain=gain,
        horizon_s=horizon_s,
    )


def _counts(placement: Mapping[int, int], num_stages: int) -> tuple[int, ...]:
    counts = [0] * num_stages
    for stage in placement.values():
        counts[stage] += 1
    return tuple(counts)


def _plan(table: _Table, placement: dict[int, int], counts: Sequence[int]) -> list[tuple[int, int]]:
    """Each move: rate every candidate against the weakest stage, keep the largest
    (pair, left, -index) whose pair beats the old floor."""
    rates = table.means(placement)
    counts = list(counts)
    plan: list[tuple[int, int]] = []
    candidates = [
        p.peer_id
        for p in sorted(table.peers.values(), key=lambda p: (p.queue_length, p.peer_id))
        if p.settled
    ]
    while len(plan) < PLAN_MOVES:
        weakest = min(range(table.num_stages), key=lambda s: (rates[s], s))
        floor = rates[weakest]
        scored = []
        for index, peer_id in enumerate(candidates):
            source = placement[peer_id]
            if source == weakest or counts[source] < 2:
                continue
            left = rates[source] - table.mean[peer_id][source]
            pair = min(left, floor + table.mean[peer_id][weakest])
            if pair > floor:
                scored.append(((pair, left, -index), peer_id))
        if not scored:
            break
        _, peer_id = max(scored)
        candidates.remove(peer_id)
        source = placement[peer_id]
        rates[source] -= table.mean[peer_id][source]
        rates[weakest] += table.mean[peer_id][weakest]
        counts[source] -= 1
        counts[weakest] += 1
        plan.append((peer_id, weakest))
    return plan


def _fill_empty(
    table: _Table,
    placement: dict[int, int],
    counts: Sequence[int],
    copy_s: Callable[[int, int], float],
    horizon_s: float,
) -> Rebalance | None:
    before = min(table.means(placement))
    counts = list(counts)
    original = dict(placement)
    moves: list[Move] = []
    for empty in range(table.num_stages):
        if counts[empty]:
            continue
        keyed = []
        for peer in table.peers.values():
            source = placement[peer.peer_id]
            if counts[source] < 2 or peer.peer_id in {m.peer_id for m in moves}:
                continue
            rates = table.means(placement | {peer.peer_id: empty})
            occupied = [r for s, r in enumerate(rates) if counts[s] or s == empty]
            keyed.append(((-min(rates), -min(occupied), peer.queue_length, peer.peer_id), peer.peer_id))
        if not keyed:
            continue
        _, peer_id = min(keyed)
        counts[original[peer_id]] -= 1
        counts[empty] += 1
        placement = placement | {peer_id: empty}
        moves.append(
            Move(
                peer_id=peer_id,
                from_stage=original[peer_id],
                to_stage=empty,
                peer_rate=table.mean[peer_id][empty],
                copy_s=copy_s(peer_id, empty),
                fills_empty=True,
            )
        )
    if not moves:
        return None
    return Rebalance(
        moves=tuple(moves),
        rate_before=before,
        rate_after=min(table.means(placement)),
        planned=_counts(placement, table.num_stages),
        planned_rate=min(table.means(placement)),
        copy_s=max(m.copy_s for m in moves),
        gain=0.0,
        horizon_s=horizon_s,
    )
