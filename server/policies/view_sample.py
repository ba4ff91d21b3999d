"""Which ready peers a member's swarm view lists: a bounded sample of each stage's, one of a few.

Listing every ready peer to every member makes the views grow with the square of the swarm
(10,000 peers: 10^8 endpoints a refresh). A stage of at most `PEERS_PER_STAGE` peers is listed
whole, as before; a larger one is listed as a sample of that many, and the view carries every
stage's totals besides (`swarmhub.wire.StageTotal`) so a trainer still knows the stage's capacity.

The sample is uniform, not weighted by the peers' rates: a trainer's router already sends each
listed peer calls in proportion to its rate (`peer/routing.py`), so a peer listed in proportion to
its rate as well would be sent calls in proportion to its rate squared (a peer four times as fast
as another would get sixteen times its calls, not four). Listed uniformly, each peer's share of
the calls is its share of the stage's rate, as with the whole view.

Each stage's peers are put in an order of the run's own (`deal_stage`: ranked by a hash of the
run's seed, the stage and the peer). The members are split into a few groups (`view_groups`, at most
`VIEW_GROUPS`; a member's group is its id modulo their number), and each group is dealt one window
of up to `PEERS_PER_STAGE` consecutive peers of each stage's order, the groups' windows evenly
spaced around it (`view_sample`), so that every peer is in as many windows as any other.

The order stays from one refresh to the next, so a stage whose peers did not change is dealt the
same windows, and a peer that comes or goes shifts each window by a peer or two (unless it takes the
largest stage across a multiple of `PEERS_PER_STAGE / LISTINGS` peers, which changes the number of
groups and shifts the windows by up to a cell). A trainer's router keeps what it learnt of the
peers it is listed: their queues, the rates of its links to them, their bans. Shuffled afresh at
every refresh (as it was), a simulated swarm of 10,000 peers in 32 stages reshuffled every 0.5 s
while peers came and went, and every router met a new window each time: new peers entered at the
least finish time, with no queue or link reading and no ban (simulated at 2,000 peers in 8 stages,
1 h lifetimes: 558 samples/s against 633 with the order that stays, docs/benchmarks.md). Only past
what `VIEW_GROUPS` windows cover is the order turned at each refresh (`refresh`), so that each
refresh lists other peers there.

A refresh builds and sends a few views, not one per member: the coordinator serialises about
`LISTINGS` x the swarm's endpoints, however many members share them. A member is not put in its own
window (that made every member's view its own): the coordinator tells a ready member that its
sample leaves it out (`SwarmView.omits_recipient`), and its trainer counts itself in
(`peer/trainer.py`), as it serves its own stage's calls in process. Pure: no I/O; the same seed
(and refresh) gives the same samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence, Sized

PEERS_PER_STAGE = 32
"""A stage's peers listed to one member. Each peer of a larger stage is listed to about
`LISTINGS` groups' members, far more trainers than it takes to keep its queue full (a trainer keeps
at most 16 microbatches in flight over all the stages, `peer/concurrency.py`). 32 also leaves a
trainer whose routing banned a few failing peers plenty to choose from. A view lists at most 32 x
the number of stages whatever the swarm's size: 128 endpoints (~25 KB) for 4 stages, 1,024
(~200 KB) for 32. Swarms of up to 32 peers a stage, every multi-peer test among them, are listed
whole, as before."""

LISTINGS = 4
"""How many groups' windows list each peer of the largest stage in a refresh: the groups are as many
as that takes (`view_groups`). The windows are cut from evenly spaced points of a stage's shuffle,
whole spans between them, so every peer of a stage is in the same number of windows as the others
(and to about as many members: the groups differ by one member at most). The spans are about the
stage's size / the groups, and a window holds as many as fit in `PEERS_PER_STAGE`: at 4 a window of
the largest stage lists at least 3/4 of 32 peers (31 or 32 from a few hundred peers up), and each
peer of it is in 4 groups' views, spread over 4 x members / groups trainers. More would list each
peer to more trainers, at the cost of building and sending that many more views."""

VIEW_GROUPS = 320
"""The most groups (distinct samples, give or take the members told they are left out of theirs) a
refresh deals: 4 windows on every peer of a stage of up to 320 x 32 / 4 = 2,560, 2 on one of up to
5,120, so 10,000 peers in 4 stages or more have every peer listed to members evenly, and in 2 still
every peer listed. Past 10,240 a stage no longer fits, and a refresh leaves some of its peers out of
every sample (the next refresh, another shuffle, lists others). What the coordinator serialises a
refresh is the groups x a view's size: 313 views of 4 stages (10,000 peers: 2,500 a stage) or 40 of
32 (313 a stage) come to about 40,000 endpoints, where a view per member was 1.3 million (4 stages)
to 10 million (32)."""


def deal_stages(stages: Sequence[Sequence[int]], seed: int, refresh: int = 0) -> list[tuple[int, ...]]:
    """Each stage's ready peers (ids) in the order groups' windows are dealt from (`deal_stage`)."""
    return [deal_stage(peers, seed, index, refresh) for index, peers in enumerate(stages)]


def deal_stage(peers: Sequence[int], seed: int, index: int, refresh: int = 0) -> tuple[int, ...]:
    """Stage `index`'s deck: its peers as given if it is listed whole, else ranked by `_rank` (the
    run's `seed`, the stage, the peer), and past what `VIEW_GROUPS` windows cover turned by
    `PEERS_PER_STAGE` at each `refresh`."""
    if len(peers) <= PEERS_PER_STAGE:
        return tuple(peers)
    order = sorted(peers, key=lambda peer: _rank(seed, index, peer))
    if len(order) > VIEW_GROUPS * PEERS_PER_STAGE:
        # Each group's window is the first `PEERS_PER_STAGE` of its cell: the next refresh, the next.
        turn = refresh * PEERS_PER_STAGE % len(order)
        order = order[turn:] + order[:turn]
    return tuple(order)


_MASK = (1 << 64) - 1


def _rank(seed: int, stage: int, peer: int) -> int:
    """A peer's place in its stage's order: splitmix64 of the three, so neighbours in id are spread
    apart, and the same three give the same place wherever it is computed."""
    x = (seed * 0x9E3779B97F4A7C15 + stage * 0xD1B54A32D192ED03 + peer) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def view_groups(decks: Sequence[Sized]) -> int:
    """How many groups (distinct samples) this refresh deals: 1 while every stage is listed whole
    (one broadcast), else enough for `LISTINGS` windows on each peer of the largest stage, up to
    `VIEW_GROUPS`."""
    largest = max((len(deck) for deck in decks), default=0)
    if largest <= PEERS_PER_STAGE:
        return 1
    return min(VIEW_GROUPS, math.ceil(LISTINGS * largest / PEERS_PER_STAGE))


def view_sample(decks: Sequence[tuple[int, ...]], group: int, groups: int) -> tuple[int, ...]:
    """The peers (ids, stage by stage) the view of group `group` of `groups` lists: each stage's deck
    whole if it holds at most `PEERS_PER_STAGE`, else the group's window of at most that many."""
    picked: list[int] = []
    for deck in decks:
        size = len(deck)
        if size <= PEERS_PER_STAGE:
            picked += deck
            continue
        # The deck is cut into `groups` cells at evenly spaced points; a group's window is as many
        # whole cells from its own as fit in `PEERS_PER_STAGE`, so every peer is in exactly that many
        # groups' windows. Past `VIEW_GROUPS` not even one fits: the window is the first 32 of its cell.
        cells = PEERS_PER_STAGE * groups // size
        start = group * size // groups
        end = (group + cells) * size // groups if cells else start + PEERS_PER_STAGE
        picked += (deck[i % size] for i in range(start, end))
    return tuple(picked)
