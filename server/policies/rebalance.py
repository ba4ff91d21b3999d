"""Adaptive rebalancing: which peer, if any, moves to which stage.

Cost model. A pipeline's rate is the rate of its slowest stage, and a stage's rate is the sum of
its peers' measured throughputs (samples/s each peer sustains for that stage). A peer's rate on
another stage is estimated by scaling its current rate by how fast that stage's peers are
relative to its own stage's peers (mean throughput there / mean throughput here): this captures
that stages differ in cost (the last one carries the vocabulary head) while keeping the peer's
own speed. An empty stage has no information, so a peer is assumed to keep its rate there.

Decision. Only a move that raises the pipeline's rate by more than `min_gain` times the smaller
of the current rate and the moved peer's estimated rate is made (hysteresis in units of what one
peer can change: a 10% bar on the whole rate would freeze a swarm of thousands, where one peer is
a fraction of a percent), or one
that gives an empty stage its first peer (with two stages empty, filling one leaves the rate at
0, yet it is the only way out of the stall), and never one that empties a stage; among equally
good moves the peer with the shortest queue (least work it would abandon) and then the lowest id
goes, so the choice is deterministic. One move per decision: the moved peer's new rate is
measured before the next one is chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_MIN_GAIN = 0.10
"""Hysteresis: the gain must exceed 10% of what is at stake, so measurement noise does not bounce
peers between stages."""


@dataclass(frozen=True, kw_only=True)
class PeerLoad:
    peer_id: int
    stage: int
    throughput: float
    queue_length: int = 0


@dataclass(frozen=True, kw_only=True)
class Move:
    peer_id: int
    from_stage: int
    to_stage: int
    rate_before: float
    rate_after: float
    peer_rate: float
    """The moved peer's estimated rate on its new stage."""
    fills_empty: bool = False
    """The target stage had no peer at all."""

    @property
    def reason(self) -> str:
        if self.fills_empty:
            return (
                f"stage {self.to_stage} had no peer: pipeline rate {self.rate_before:.1f} -> "
                f"{self.rate_after:.1f} samples/s (estimated) by moving a peer from stage {self.from_stage}"
            )
        return (
            f"stage {self.to_stage} was the bottleneck: pipeline rate {self.rate_before:.1f} -> "
            f"{self.rate_after:.1f} samples/s (estimated) by moving a peer from stage {self.from_stage}"
        )


def stage_capacities(peers: Sequence[PeerLoad], num_stages: int) -> list[float]:
    capacities = [0.0] * num_stages
    for peer in peers:
        capacities[peer.stage] += peer.throughput
    return capacities


def choose_move(
    peers: Sequence[PeerLoad],
    num_stages: int,
    *,
    min_gain: float = DEFAULT_MIN_GAIN,
    pinned: frozenset[int] = frozenset(),
) -> Move | None:
    """The single move that raises the pipeline's rate most, or None if none raises it enough.

    Peers in `pinned` count toward their stage's capacity but are not moved (the coordinator pins
    a peer that moved recently, until its rate on the new stage has been measured for a while).
    """
    if num_stages < 2:
        return None
    for peer in peers:
        if not 0 <= peer.stage < num_stages:
            raise ValueError(f"peer {peer.peer_id} is on stage {peer.stage}, the run has {num_stages}")
    capacities = stage_capacities(peers, num_stages)
    counts = [0] * num_stages
    for peer in peers:
        counts[peer.stage] += 1
    means = [capacities[s] / counts[s] if counts[s] else 0.0 for s in range(num_stages)]
    rate = min(capacities)
    # An empty stage comes first, even before a stage whose peers report no throughput yet.
    bottleneck = min(range(num_stages), key=lambda s: (counts[s] > 0, capacities[s], s))
    fills_empty = counts[bottleneck] == 0

    best: tuple[tuple[float, float, int, int], float, float, PeerLoad] | None = None
    for peer in peers:
        if peer.stage == bottleneck or counts[peer.stage] < 2 or peer.peer_id in pinned:
            continue
        scale = means[bottleneck] / means[peer.stage] if counts[bottleneck] and means[peer.stage] > 0 else 1.0
        after = list(capacities)
        after[peer.stage] -= peer.throughput
        after[bottleneck] += peer.throughput * scale
        new_rate = min(after)
        # While other stages are still empty every candidate leaves the rate at 0: prefer the one
        # that leaves the occupied stages strongest.
        occupied = min(c for s, c in enumerate(after) if counts[s] or s == bottleneck)
        key = (-new_rate, -occupied, peer.queue_length, peer.peer_id)
        if best is None or key < best[0]:
            best = (key, new_rate, peer.throughput * scale, peer)
    if best is None:
        return None
    _, new_rate, peer_rate, peer = best
    if not fills_empty and not new_rate - rate > min_gain * min(rate, peer_rate):
        return None
    return Move(
        peer_id=peer.peer_id,
        from_stage=peer.stage,
        to_stage=bottleneck,
        rate_before=rate,
        rate_after=new_rate,
        peer_rate=peer_rate,
        fills_empty=fills_empty,
    )
