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


@pytest.mark.parametrize("peers", [70, 100])
def test_the_next_refresh_deals_other_samples(peers: int) -> None:
    swarm = swarm_of(peers)
    first = {p: s.message for s in refresh(swarm) for p in s.peer_ids}
    second = {p: s.message for s in refresh(swarm) for p in s.peer_ids}
    changed = sum(first[p] != second[p] for p in first)
    assert changed > peers // 2
