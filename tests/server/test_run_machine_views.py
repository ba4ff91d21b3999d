"""The swarm views the machine sends: a small swarm's whole to everyone in one message, a large
swarm's a few bounded samples, each shared by a group of members, with every stage's totals."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from server.policies.view_sample import LISTINGS, PEERS_PER_STAGE
from server.swarm import decisions as do
from server.swarm import inputs as on
from server.swarm.machine import SWARM_VIEW_REFRESH_S
from server.swarm.step_cycle import VIEW_GAP_S
from swarmhub.status import PeerState
from swarmhub.wire import Heartbeat, StageTotal, SwarmView
from tests.server.test_run_machine import Swarm, new_swarm, of


def swarm_of(peers: int, *, ready: int | None = None) -> Swarm:
    """`peers` joined at 10 samples/s each, the first `ready` of them (all by default) ready."""
    swarm = new_swarm()
    for peer_id in range(1, peers + 1):
        swarm.join(peer_id, throughput=10.0)
    for peer_id in range(1, (peers if ready is None else ready) + 1):
        swarm.ready(peer_id)
    return swarm


def refresh(swarm: Swarm) -> list[do.Send]:
    """The views of the next periodic refresh (every member heard from just before)."""
    swarm.now += SWARM_VIEW_REFRESH_S
    for peer_id in swarm.machine.members:
        swarm.say(peer_id, Heartbeat(throughput=10.0, queue_length=0, samples_done=0))
    return [d for d in of(swarm.feed(on.Tick(now=swarm.now)), do.Send) if isinstance(d.message, SwarmView)]


def stage_sizes(swarm: Swarm) -> list[int]:
    sizes = Counter(m.stage for m in swarm.machine.members.values() if m.ready)
    return [sizes[s] for s in range(swarm.machine.spec.num_stages)]


def test_a_small_swarm_gets_every_ready_peer_in_one_message() -> None:
    swarm = swarm_of(7, ready=6)
    (send,) = refresh(swarm)
    assert send.peer_ids == tuple(range(1, 8))  # the loading peer too
    view = send.message
    assert isinstance(view, SwarmView)
    ready = {m.peer_id for m in swarm.machine.members.values() if m.ready}
    assert sorted(p.peer_id for p in view.peers) == sorted(ready)
    assert view.stages == [StageTotal(peers=n, measured=n, rate=10.0 * n) for n in stage_sizes(swarm)]


def test_a_large_swarm_sends_a_few_bounded_samples_and_the_stages_totals() -> None:
    swarm = swarm_of(120, ready=110)
    sizes = stage_sizes(swarm)
    assert min(sizes) > PEERS_PER_STAGE
    sends = refresh(swarm)
    views = {peer_id: s.message for s in sends for peer_id in s.peer_ids}
    assert set(views) == set(swarm.machine.members)
    # A few groups share their samples, not a message per member: members its sample leaves out
    # while ready are told so in a second message of their group.
    groups = math.ceil(LISTINGS * max(sizes) / PEERS_PER_STAGE)
    samples = {tuple(p.peer_id for p in s.message.peers) for s in sends if isinstance(s.message, SwarmView)}
    assert len(samples) == groups
    assert groups < len(sends) <= 2 * groups
    listed: Counter[int] = Counter()
    for peer_id, view in views.items():
        assert isinstance(view, SwarmView)
        member = swarm.machine.members[peer_id]
        ids = [p.peer_id for p in view.peers]
        assert len(ids) == len(set(ids))
        per_stage = Counter(p.stage for p in view.peers)
        assert set(per_stage) == {0, 1}
        assert all(PEERS_PER_STAGE * 3 // 4 <= n <= PEERS_PER_STAGE for n in per_stage.values())
        assert all(swarm.machine.members[i].ready for i in ids)
        # Not put in its own sample: told instead, once ready, where the sample leaves it out.
        assert view.omits_recipient == (member.ready and peer_id not in ids)
        assert view.stages == [StageTotal(peers=n, measured=n, rate=10.0 * n) for n in sizes]
        listed.update(ids)
    # Spread over the stages: every ready peer is seen by about as many members as the others.
    assert len(listed) == sum(sizes)
    per_peer = len(views) * LISTINGS / groups
    assert 0.9 * per_peer <= min(listed.values()) <= max(listed.values()) <= 1.1 * per_peer


def listed(sends: list[do.Send]) -> dict[int, set[int]]:
    """Member -> the peer ids its view lists."""
    return {p: {e.peer_id for e in s.message.peers} for s in sends for p in s.peer_ids}


@pytest.mark.parametrize("peers", [70, 100])
def test_the_next_refresh_deals_the_same_samples_while_nobody_comes_or_goes(peers: int) -> None:
    """Trainers' routers keep what they learnt of the peers they are listed (queues, links, bans)."""
    swarm = swarm_of(peers)
    assert listed(refresh(swarm)) == listed(refresh(swarm))


def test_a_departure_shifts_each_sample_by_a_peer_or_two() -> None:
    swarm = swarm_of(100)
    before = listed(refresh(swarm))
    swarm.feed(on.PeerLeft(now=swarm.now, peer_id=7, state=PeerState.LEFT, reason="goodbye"))
    after = listed(refresh(swarm))
    assert all(7 not in ids for ids in after.values())
    # A window's two ends move by a place each at most, and the departed peer is gone from it.
    assert max(len(before[p] ^ after[p]) for p in after) <= 3


def views_in(decisions: list[do.Decision]) -> list[SwarmView]:
    return [d.message for d in of(decisions, do.Send) if isinstance(d.message, SwarmView)]


def test_peers_turning_ready_together_share_one_view_sent_at_the_next_tick() -> None:
    # A join storm: each ready peer sending every member a view would be N^2 frames for N joins.
    swarm = new_swarm()
    for peer_id in range(1, 41):
        swarm.join(peer_id, throughput=10.0)
    first = views_in(swarm.ready(1))
    assert [[p.peer_id for p in view.peers] for view in first] == [[1]]
    held = [views_in(swarm.ready(peer_id)) for peer_id in range(2, 41)]
    assert held == [[]] * 39
    assert swarm.machine.view_due
    swarm.now += VIEW_GAP_S / 2
    assert views_in(swarm.feed(on.Tick(now=swarm.now))) == []
    swarm.now += VIEW_GAP_S / 2
    (view,) = views_in(swarm.feed(on.Tick(now=swarm.now)))
    assert sorted(p.peer_id for p in view.peers) == list(range(1, 41))
    assert not swarm.machine.view_due
    # Quiet since: the next change goes out at once.
    swarm.now += VIEW_GAP_S
    swarm.join(41, throughput=10.0)
    (view,) = views_in(swarm.ready(41))
    assert len(view.peers) == 41


def test_a_departure_is_in_the_next_view_within_the_gap() -> None:
    swarm = swarm_of(4)
    swarm.now += VIEW_GAP_S
    views_in(swarm.feed(on.Tick(now=swarm.now)))
    swarm.now += VIEW_GAP_S
    assert (
        views_in(swarm.feed(on.PeerLeft(now=swarm.now, peer_id=3, state=PeerState.LEFT, reason="goodbye")))
        != []
    )
    assert (
        views_in(swarm.feed(on.PeerLeft(now=swarm.now, peer_id=4, state=PeerState.LEFT, reason="goodbye")))
        == []
    )
    swarm.now += VIEW_GAP_S
    (view,) = views_in(swarm.feed(on.Tick(now=swarm.now)))
    assert sorted(p.peer_id for p in view.peers) == [1, 2]
