"""The ideal training rate of a swarm whose peers run at emulated speeds (pure; no I/O).

Inputs: each stage's seconds per sample at slowdown 1 (`stage_seconds[s]`: one forward and one
backward of the stage for a microbatch, divided by its samples, measured without contention) and
each peer's slowdown (`slowdowns[p]`, the `--slowdown` it runs with). Peer p serving stage s
processes `1 / (stage_seconds[s] * slowdowns[p])` samples/s; a stage's capacity is the sum over the
peers serving it; a placement (one stage per peer) trains at its bottleneck, the smallest stage
capacity. The ideal rate is the largest bottleneck rate over every placement of whole peers on
stages: an upper bound that ignores communication, pipeline bubbles and coordination, which is
what the measured rate is a fraction of.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

Placement = tuple[int, ...]
"""placement[p]: the stage peer p serves."""


@dataclass(frozen=True)
class Ideal:
    rate: float
    """Samples/s of the best placement (its bottleneck stage's capacity)."""
    placement: Placement


def stage_capacities(
    stage_seconds: Sequence[float], slowdowns: Sequence[float], placement: Placement
) -> list[float]:
    """Samples/s each stage sustains with `placement`."""
    if len(placement) != len(slowdowns):
        raise ValueError(f"placement names {len(placement)} peers, there are {len(slowdowns)}")
    capacity = [0.0] * len(stage_seconds)
    for stage, slowdown in zip(placement, slowdowns, strict=True):
        if not 0 <= stage < len(stage_seconds):
            raise ValueError(f"stage {stage} is out of range for {len(stage_seconds)} stages")
        capacity[stage] += 1.0 / (stage_seconds[stage] * slowdown)
    return capacity


def placement_rate(stage_seconds: Sequence[float], slowdowns: Sequence[float], placement: Placement) -> float:
    """Samples/s of a fixed placement: its bottleneck stage's capacity (0 if a stage has no peer)."""
    return min(stage_capacities(stage_seconds, slowdowns, placement))


def even_placement(num_peers: int, num_stages: int) -> Placement:
    """Peers placed evenly by count, in order: peer p on stage p mod S."""
    return tuple(p % num_stages for p in range(num_peers))


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to write `total` as an ordered sum of `parts` non-negative integers."""
    for cuts in itertools.combinations(range(total + parts - 1), parts - 1):
        bounds = (-1, *cuts, total + parts - 1)
        yield tuple(b - a - 1 for a, b in itertools.pairwise(bounds))


def best_placement(stage_seconds: Sequence[float], slowdowns: Sequence[float]) -> Ideal:
    """The placement with the highest bottleneck rate, found exactly.

    Peers of equal slowdown are interchangeable, so only how many of each speed serve each stage
    matters: the search enumerates those counts, which stays small for the swarms benchmarked
    (a few speeds, up to a few dozen peers). Ties go to the first placement enumerated."""
    num_stages = len(stage_seconds)
    if num_stages == 0 or any(t <= 0 for t in stage_seconds):
        raise ValueError("every stage needs positive seconds per sample")
    if any(k <= 0 for k in slowdowns):
        raise ValueError("every slowdown must be positive")
    if len(slowdowns) < num_stages:
        raise ValueError(f"{len(slowdowns)} peers cannot serve {num_stages} stages")
    speeds = sorted(set(slowdowns))
    members = {k: [p for p, s in enumerate(slowdowns) if s == k] for k in speeds}
    best_rate, best_counts = -1.0, None
    for counts in itertools.product(*(_compositions(len(members[k]), num_stages) for k in speeds)):
        capacity = [
            sum(n[s] / k for n, k in zip(counts, speeds, strict=True)) / stage_seconds[s]
            for s in range(num_stages)
        ]
        if min(capacity) > best_rate:
            best_rate, best_counts = min(capacity), counts
    assert best_counts is not None
    placement = [0] * len(slowdowns)
    for k, per_stage in zip(speeds, best_counts, strict=True):
        peers = iter(members[k])
        for stage, n in enumerate(per_stage):
            for _ in range(n):
                placement[next(peers)] = stage
    return Ideal(rate=placement_rate(stage_seconds, slowdowns, tuple(placement)), placement=tuple(placement))


def fixed_pipeline_samples(
    *, rate: float, duration_s: float, deaths_s: Sequence[float], restart_s: float, checkpoint_every_s: float
) -> float:
    """Samples a fixed pipeline keeps over `duration_s` when any member's death stops it.

    It trains at `rate` and saves a checkpoint after every `checkpoint_every_s` of training (for
    free); a death at time t loses what was trained since the last checkpoint, and training resumes
    from that checkpoint `restart_s` after the death (a death during a restart starts it over).
    """
    kept = 0.0
    resume_at = 0.0
    for death in sorted(d for d in deaths_s if d < duration_s):
        trained = max(0.0, death - resume_at)
        kept += (trained // checkpoint_every_s) * checkpoint_every_s * rate
        resume_at = death + restart_s
    return kept + max(0.0, duration_s - resume_at) * rate
