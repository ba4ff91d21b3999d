"""The ideal rate of a set of live peers: the best placement of whole peers on stages.

Small swarms whose peers are compute-bound are placed exactly by `bench.ideal.best_placement` (its
enumeration of per-speed counts stays small there). Larger ones, or peers capped by their links (a
rate that is no longer one speed scaled by stage costs), are placed greedily: fastest peer first,
each onto the stage with the lowest rate so far (ties to the lowest index). For hundreds of peers
per stage the greedy placement is within a peer's rate of the best, far inside the gaps this ideal
is used to measure.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence

from bench.ideal import best_placement, placement_rate
from sim.devices import PeerKind, stage_rate

EXACT_LIMIT = 20_000
"""Placements `best_placement` may enumerate before the greedy placement is used instead."""


def _enumerations(counts: Sequence[int], num_stages: int) -> int:
    total = 1
    for n in counts:
        total *= math.comb(n + num_stages - 1, num_stages - 1)
    return total


def ideal_rate(
    kinds: Mapping[PeerKind, int], flops: Sequence[float], bytes_per_sample: Sequence[float]
) -> float:
    """Samples/s of the best placement of `kinds` (kind -> how many live peers are of it) on stages of
    `flops` FLOPs and `bytes_per_sample` data-plane bytes per sample."""
    num_stages = len(flops)
    live = {kind: n for kind, n in kinds.items() if n > 0}
    if sum(live.values()) < num_stages:
        return 0.0
    rows = {
        kind: [stage_rate(kind, k, b) for k, b in zip(flops, bytes_per_sample, strict=True)] for kind in live
    }
    compute_bound = all(
        math.isclose(r, kind.flops / k) for kind, row in rows.items() for r, k in zip(row, flops, strict=True)
    )
    speeds = sorted({kind.flops for kind in live})
    counts = [sum(n for kind, n in live.items() if kind.flops == speed) for speed in speeds]
    if compute_bound and _enumerations(counts, num_stages) <= EXACT_LIMIT:
        reference = speeds[-1]
        stage_seconds = [k / reference for k in flops]
        slowdowns = [reference / speed for speed, n in zip(speeds, counts, strict=True) for _ in range(n)]
        return placement_rate(stage_seconds, slowdowns, best_placement(stage_seconds, slowdowns).placement)
    return greedy_rate([(rows[kind], n) for kind, n in live.items()])


def greedy_rate(groups: Sequence[tuple[Sequence[float], int]]) -> float:
    """The bottleneck rate of the greedy placement of `groups` ((rates per stage, how many peers))."""
    if not groups:
        return 0.0
    num_stages = len(groups[0][0])
    if sum(n for _, n in groups) < num_stages:
        return 0.0
    stages = [(0.0, s) for s in range(num_stages)]
    heapq.heapify(stages)
    for row, n in sorted(groups, key=lambda g: -sum(g[0])):
        for _ in range(n):
            total, s = heapq.heappop(stages)
            heapq.heappush(stages, (total + row[s], s))
    return min(total for total, _ in stages)
