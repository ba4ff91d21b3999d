"""What an averaging round costs on the wire, computed per round (never per byte): SWARM's two
exchanges as the peers make them, all-to-all (`peer/averaging.py`) for small rounds and a butterfly
(`peer/butterfly.py`) for large ones, and the ring all-reduce a data-parallel fixed pipeline would use.

All-to-all, as the peers do it: at the barrier each member pushes its whole gradient sum to the K-1
others, one push after another through its one paced upload (`UploadPacer` queues them in the
order of the barrier's group, by peer id), and takes the others' sums through its download. A
member gives up on the round after its timeout (`push_timeout_s`): it then names the members whose
sums had not arrived (`AveragingRound.missed`) and reports nothing; one that had everything in time
and whose pushes went out reports. Acknowledgements (a few bytes) are taken to pass unpaced. A new
attempt at the round pushes only the sums its members do not hold yet (`peer.averaging.Deliveries`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class Pusher:
    """One member of an all-to-all round."""

    peer_id: int
    ready_s: float
    """When its upload is free to start pushing, from the barrier; infinite: it never pushes (dead)."""
    upload: float
    """Bytes/s its pushes go out at."""
    download: float
    """Bytes/s it takes the others' sums at."""
    latency_s: float


@dataclass(frozen=True, kw_only=True)
class RoundOutcome:
    group: frozenset[int]
    reported: frozenset[int]
    """Members that had every sum in time and pushed theirs: they report the round done."""
    missed: dict[int, frozenset[int]]
    """Member that gave up -> the members whose sums it had not received by its timeout."""
    ends_s: float
    """When the last sum is in (sent and taken), from the barrier: the round's end if complete."""
    delivered_s: dict[tuple[int, int], float] = field(default_factory=dict)
    """(sender, receiver) -> when the receiver had the sender's sum, from the barrier (all-to-all;
    pairs held before the round are not listed): what a new attempt need not push again."""

    def held_by(self, elapsed_s: float) -> frozenset[tuple[int, int]]:
        """The (sender, receiver) pairs delivered `elapsed_s` after the barrier."""
        return frozenset(pair for pair, at in self.delivered_s.items() if at <= elapsed_s)

    @property
    def complete(self) -> bool:
        return self.reported == self.group


def all_to_all_round(
    members: Sequence[Pusher],
    wire_bytes: float,
    timeout_s: float,
    held: frozenset[tuple[int, int]] = frozenset(),
) -> RoundOutcome:
    """Who reports, and who misses whom, in one all-to-all round of `members` pushing sums of
    `wire_bytes` each, every member giving up `timeout_s` after the barrier; `held`: the (sender,
    receiver) pairs delivered in earlier attempts, which are not pushed again. O(K^2) per round: the
    time each sum reaches each member is kept for an attempt that follows."""
    ordered = sorted(members, key=lambda m: m.peer_id)
    group = frozenset(m.peer_id for m in ordered)
    if len(ordered) < 2:
        return RoundOutcome(group=group, reported=group, missed={}, ends_s=0.0)
    # A sender's pushes go out one after another through its upload, in the group's order; a
    # receiver takes the sums it does not hold through its download.
    to_push = {
        m.peer_id: [
            r.peer_id for r in ordered if r.peer_id != m.peer_id and (m.peer_id, r.peer_id) not in held
        ]
        for m in ordered
    }
    delivered: dict[tuple[int, int], float] = {}
    for sender in ordered:
        per_push = wire_bytes / sender.upload
        for rank, receiver in enumerate(to_push[sender.peer_id]):
            delivered[(sender.peer_id, receiver)] = sender.ready_s + (rank + 1) * per_push + sender.latency_s
    sent = {
        m.peer_id: m.ready_s + len(to_push[m.peer_id]) * wire_bytes / m.upload + m.latency_s
        if to_push[m.peer_id]
        else 0.0
        for m in ordered
    }
    into = {m.peer_id: 0 for m in ordered}
    for _, receiver in delivered:
        into[receiver] += 1
    taken = {
        m.peer_id: into[m.peer_id] * wire_bytes / m.download + m.latency_s if into[m.peer_id] else 0.0
        for m in ordered
    }
    late_for: dict[int, set[int]] = {}
    """Receiver -> late senders whose sum had not reached it by its timeout (a late sender's early
    receivers may still have had it in time: its pushes go out one after another)."""
    for (sender, receiver), at in delivered.items():
        if at > timeout_s:
            late_for.setdefault(receiver, set()).add(sender)
    missed: dict[int, frozenset[int]] = {}
    reported: set[int] = set()
    for m in ordered:
        me = m.peer_id
        if taken[me] > timeout_s:
            # Its download cannot take the others' sums in time: it misses those it did not hold.
            missed[me] = frozenset(sender for sender, receiver in delivered if receiver == me)
        elif me in late_for:
            missed[me] = frozenset(late_for[me])
        elif sent[me] <= timeout_s:
            reported.add(me)
        # Else it had every sum but its own pushes ran past its timeout: it gives up naming nobody.
    return RoundOutcome(
        group=group,
        reported=frozenset(reported),
        missed=missed,
        ends_s=max(max(sent.values()), max(taken.values())),
        delivered_s=delivered,
    )


def butterfly_round(
    members: Sequence[Pusher], wire_bytes: float, timeout_s: float, weights: Sequence[int] | None = None
) -> RoundOutcome:
    """A reduce-scatter and all-gather among `members`, as `peer/butterfly.py` makes it: a member
    owning a share w of the parts (its weight in `weights`, in the members' order; None: equal
    parts) sends and takes (1 + (K-2)w) sums' worth, directly to and from each other member (a
    latency each way per phase), and every part passes through every member, so a member too slow
    for the timeout is missed by all the others. A new attempt sends everything again (parts move
    with K)."""
    k = len(members)
    group = frozenset(m.peer_id for m in members)
    if k < 2:
        return RoundOutcome(group=group, reported=group, missed={}, ends_s=0.0)
    weighed = list(weights) if weights is not None else [1] * k
    total = sum(weighed)
    hops = 2
    done = {
        m.peer_id: m.ready_s
        + (1 + (k - 2) * weight / total) * wire_bytes / min(m.upload, m.download)
        + hops * m.latency_s
        for m, weight in zip(members, weighed, strict=True)
    }
    late = frozenset(p for p, t in done.items() if t > timeout_s)
    if not late:
        return RoundOutcome(group=group, reported=group, missed={}, ends_s=max(done.values()))
    missed = {p: late for p in group - late}
    return RoundOutcome(group=group, reported=frozenset(), missed=missed, ends_s=max(done.values()))


def ring_allreduce_s(gradient_bytes: float, links: Sequence[float], latency_s: float) -> float:
    """Seconds a ring all-reduce of `gradient_bytes` among members with these link rates takes: each
    member sends and receives 2(K-1)/K of the bytes (a reduce-scatter and an all-gather, in 2(K-1)
    steps of one chunk each), and the ring moves at its slowest link."""
    k = len(links)
    if k < 2:
        return 0.0
    return 2 * (k - 1) / k * gradient_bytes / min(links) + 2 * (k - 1) * latency_s
