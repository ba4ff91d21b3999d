"""Adaptive rebalancing: which peer, if any, moves to which stage.

Cost model. A pipeline's rate is the rate of its slowest stage, and a stage's rate is the sum of
its peers' measured throughputs (samples/s each peer sustains for that stage). A peer's rate on
another stage is estimated by scaling its current rate by how fast that stage's peers are
relative to its own stage's peers (mean throughput there / mean throughput here): this captures
that stages differ in cost (the last one carries the vocabulary head) while keeping the peer's
own speed. An empty stage has no information, so a peer is assumed to keep its rate there.

Links. A peer's rate is also capped by what its links carry: each sample it processes moves a
stage-dependent number of bytes through it (`stage_bytes_per_sample`: activations in, out and
their gradients back, as the trainers' calls carry them), so a peer whose links carry L bytes/s
serves at most L / bytes-per-sample samples/s there however fast it computes. L is the best rate
any peer measured to it (`inbound_link_rates`, from heartbeats); a peer nobody measured is not
capped.

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

from collections.abc import Mapping, Sequence
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
    link_rate: float | None = None
    """Bytes per second its links were measured to carry; None: not measured, not capped."""


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


def _capped(peer: PeerLoad, stage: int, rate: float, bytes_per_sample: Sequence[float] | None) -> float:
    if peer.link_rate is None or bytes_per_sample is None or bytes_per_sample[stage] <= 0:
        return rate
    return min(rate, peer.link_rate / bytes_per_sample[stage])


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


def stage_capacities(
    peers: Sequence[PeerLoad], num_stages: int, bytes_per_sample: Sequence[float] | None = None
) -> list[float]:
    """Samples/s each stage serves: its peers' throughputs, each capped by its links."""
    capacities = [0.0] * num_stages
    for peer in peers:
        capacities[peer.stage] += _capped(peer, peer.stage, peer.throughput, bytes_per_sample)
    return capacities


def choose_move(
    peers: Sequence[PeerLoad],
    num_stages: int,
    *,
    min_gain: float = DEFAULT_MIN_GAIN,
    pinned: frozenset[int] = frozenset(),
    bytes_per_sample: Sequence[float] | None = None,
) -> Move | None:
    """The single move that raises the pipeline's rate most, or None if none raises it enough.

    Peers in `pinned` count toward their stage's capacity but are not moved (the coordinator pins
    a peer that moved recently, until its rate on the new stage has been measured for a while).
    With `bytes_per_sample` (per stage), peers' rates are capped by their measured links.
    """
    if bytes_per_sample is not None and len(bytes_per_sample) != num_stages:
        raise ValueError(f"bytes_per_sample has {len(bytes_per_sample)} stages, the run has {num_stages}")
    if num_stages < 2:
        return None
    for peer in peers:
        if not 0 <= peer.stage < num_stages:
            raise ValueError(f"peer {peer.peer_id} is on stage {peer.stage}, the run has {num_stages}")
    capacities = stage_capacities(peers, num_stages, bytes_per_sample)
    counts = [0] * num_stages
    compute = [0.0] * num_stages
    for peer in peers:
        counts[peer.stage] += 1
        compute[peer.stage] += peer.throughput
    # Stage cost is a matter of compute: the scale between stages ignores the link caps.
    means = [compute[s] / counts[s] if counts[s] else 0.0 for s in range(num_stages)]
    rate = min(capacities)
    # An empty stage comes first, even before a stage whose peers report no throughput yet.
    bottleneck = min(range(num_stages), key=lambda s: (counts[s] > 0, capacities[s], s))
    fills_empty = counts[bottleneck] == 0

    best: tuple[tuple[float, float, int, int], float, float, PeerLoad] | None = None
    for peer in peers:
        if peer.stage == bottleneck or counts[peer.stage] < 2 or peer.peer_id in pinned:
            continue
        scale = means[bottleneck] / means[peer.stage] if counts[bottleneck] and means[peer.stage] > 0 else 1.0
        moved_rate = _capped(peer, bottleneck, peer.throughput * scale, bytes_per_sample)
        after = list(capacities)
        after[peer.stage] -= _capped(peer, peer.stage, peer.throughput, bytes_per_sample)
        after[bottleneck] += moved_rate
        new_rate = min(after)
        # While other stages are still empty every candidate leaves the rate at 0: prefer the one
        # that leaves the occupied stages strongest.
        occupied = min(c for s, c in enumerate(after) if counts[s] or s == bottleneck)
        key = (-new_rate, -occupied, peer.queue_length, peer.peer_id)
        if best is None or key < best[0]:
            best = (key, new_rate, moved_rate, peer)
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
