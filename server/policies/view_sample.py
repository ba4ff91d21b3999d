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

Each stage's peers are shuffled once per view refresh (`deal_stages`, seeded by the refresh). The
members are split into a few groups (`view_groups`, at most `VIEW_GROUPS`; a member's group is its
id modulo their number), and each group is dealt one window of up to `PEERS_PER_STAGE` consecutive
peers of each shuffle, the groups' windows evenly spaced around it (`view_sample`), so that every
peer is in as many windows as any other. A refresh builds and sends a few views, not one per
member: the coordinator serialises about `LISTINGS` x the swarm's endpoints, however many members
share them. A member is not put in its own window (that made every member's view its own): the
coordinator tells a ready member that its sample leaves it out (`SwarmView.omits_recipient`), and
its trainer counts itself in (`peer/trainer.py`), as it serves its own stage's calls in process.
Pure: no I/O; the same seed gives the same samples.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

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


def deal_stages(stages: Sequence[Sequence[int]], seed: int) -> list[tuple[int, ...]]:
    """Each stage's ready peers (ids) in the order groups' windows are dealt from: as given for a
    stage listed whole, shuffled by `seed` (and the stage's index) for a larger one."""
    decks: list[tuple[int, ...]] = []
    for index, peers in enumerate(stages):
        order = list(peers)
        if len(order) > PEERS_PER_STAGE:
            random.Random(seed * 64 + index).shuffle(order)
        decks.append(tuple(order))
    return decks


def view_groups(decks: Sequence[tuple[int, ...]]) -> int:
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
