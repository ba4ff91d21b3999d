"""Swarm view samples: small stages whole and the same for every member, large ones bounded and
spread evenly over a few groups, the same seed the same samples."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError

from server.policies.view_sample import (
    LISTINGS,
    PEERS_PER_STAGE,
    VIEW_GROUPS,
    deal_stages,
    view_groups,
    view_sample,
)
from swarmhub.wire import MAX_VIEW_PEERS, PeerEndpoint, StageTotal, SwarmView

N = PEERS_PER_STAGE


def stage_of(first: int, size: int) -> list[int]:
    return list(range(first, first + size))


def stages_of(sizes: list[int]) -> list[list[int]]:
    return [stage_of(1 + 100_000 * s, size) for s, size in enumerate(sizes)]


def samples_for(members: int, decks: list[tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
    """Each member's sample, as the coordinator deals them (a member's group is its id modulo)."""
    groups = view_groups(decks)
    by_group = [view_sample(decks, g, groups) for g in range(groups)]
    return {m: by_group[m % groups] for m in range(1, members + 1)}


@pytest.mark.parametrize(
    ("sizes", "group", "listed"),
    [
        # Nobody ready yet.
        ([0, 0], 0, [0, 0]),
        # Every stage small: listed whole, as before samples.
        ([3, 5], 0, [3, 5]),
        ([N, N, N], 0, [N, N, N]),
        # One peer over: that stage is sampled, the others stay whole.
        ([N + 1, 2], 1, [N, 2]),
        ([4, 10_000, N], 200, [4, N, N]),
        ([2_500] * 4, 156, [N] * 4),
    ],
)
def test_each_stage_is_listed_whole_up_to_the_bound_and_a_sample_of_that_many_beyond(
    sizes: list[int], group: int, listed: list[int]
) -> None:
    stages = stages_of(sizes)
    decks = deal_stages(stages, seed=3)
    picked = view_sample(decks, group, view_groups(decks))
    per_stage = [sum(1 for p in picked if p in set(stage)) for stage in stages]
    # A sampled stage: a window of whole spans of its shuffle, at least 3/4 of the bound.
    assert [n if n <= N else N for n in per_stage] == per_stage
    assert all(
        n == want if want < N else N * 3 // 4 <= n <= N for n, want in zip(per_stage, listed, strict=True)
    )
    assert len(set(picked)) == len(picked)
    for stage, size in zip(stages, sizes, strict=True):
        if size <= N:
            assert [p for p in picked if p in set(stage)] == stage  # whole, in order


@pytest.mark.parametrize("sizes", [[0], [7, 3], [N] * 64])
def test_a_swarm_of_small_stages_gets_one_view(sizes: list[int]) -> None:
    decks = deal_stages(stages_of(sizes), seed=9)
    assert view_groups(decks) == 1
    assert len(set(samples_for(500, decks).values())) == 1


@pytest.mark.parametrize(
    ("sizes", "groups"),
    [
        ([N + 1], 5),
        ([2_500] * 4, 313),  # 10,000 peers in 4 stages
        ([313] * 31 + [297], 40),  # in 32
        ([5_000, 5_000], VIEW_GROUPS),  # in 2: at the cap
        ([10_000], VIEW_GROUPS),  # in 1: past what it covers
    ],
)
def test_a_large_swarm_gets_at_most_view_groups_distinct_views(sizes: list[int], groups: int) -> None:
    decks = deal_stages(stages_of(sizes), seed=2)
    assert view_groups(decks) == groups <= VIEW_GROUPS
    samples = samples_for(10_000, decks)
    assert len(set(samples.values())) == groups
    assert all(N * 3 // 4 * len(sizes) <= len(sample) <= N * len(sizes) for sample in samples.values())


@pytest.mark.parametrize(
    ("members", "sizes"),
    [(10_000, [2_500] * 4), (10_000, [313] * 31 + [297]), (10_000, [5_000, 5_000]), (1_000, [100, 33, 40])],
)
def test_every_peer_of_a_large_stage_is_listed_in_as_many_groups_and_to_as_many_members(
    members: int, sizes: list[int]
) -> None:
    """Uniform, not by rate: routing already weighs by rate (a peer listed by rate too would be sent
    calls in proportion to its rate squared). Each peer of the largest stage is in `LISTINGS` groups'
    windows, of a smaller stage in proportionally more, and every peer of a stage in as many."""
    stages = stages_of(sizes)
    decks = deal_stages(stages, seed=5)
    groups = view_groups(decks)
    samples = [view_sample(decks, g, groups) for g in range(groups)]
    in_groups = Counter(p for sample in samples for p in sample)
    to_members = Counter(p for sample in samples_for(members, decks).values() for p in sample)
    for stage in stages:
        if len(stage) <= N:
            assert all(to_members[p] == members for p in stage)
            continue
        windows = groups * N // len(stage)
        assert windows >= (LISTINGS if groups < VIEW_GROUPS else 2)  # 2 at the cap: 10,000 in 2 stages
        assert {in_groups[p] for p in stage} == {windows}
        members_of = set(stage)
        assert all(N * 3 // 4 <= sum(p in members_of for p in sample) <= N for sample in samples)
        mean = members * windows / groups
        assert min(to_members[p] for p in stage) >= 0.9 * mean
        assert max(to_members[p] for p in stage) <= 1.1 * mean


def test_past_the_cap_a_refresh_lists_each_peer_once_at_most_and_another_refresh_others() -> None:
    stage = stage_of(1, 20_000)
    seen: list[Counter[int]] = []
    for refresh in (1, 2):
        decks = deal_stages([stage], seed=7, refresh=refresh)
        seen.append(Counter(p for g in range(VIEW_GROUPS) for p in view_sample(decks, g, VIEW_GROUPS)))
    for listed in seen:
        assert len(listed) == VIEW_GROUPS * N and set(listed.values()) == {1}
    assert set(seen[0]) != set(seen[1])


def test_the_same_seed_deals_the_same_samples_and_another_seed_others() -> None:
    stages = [stage_of(1, 300), stage_of(1_000, 40)]
    decks = deal_stages(stages, seed=10)
    groups = view_groups(decks)
    first = view_sample(decks, 4, groups)
    assert view_sample(deal_stages(stages, seed=10), 4, groups) == first
    assert view_sample(deal_stages(stages, seed=11), 4, groups) != first
    assert view_sample(decks, 5, groups) != first


def test_under_the_cap_every_refresh_deals_the_same_order_however_the_peers_are_listed() -> None:
    stage = stage_of(1, 200)
    first = deal_stages([stage], seed=4, refresh=1)
    assert deal_stages([stage], seed=4, refresh=2) == first
    assert deal_stages([list(reversed(stage))], seed=4, refresh=3) == first


@pytest.mark.parametrize(
    ("size", "change"), [(203, "joins"), (203, "leaves"), (2_503, "joins"), (2_503, "leaves")]
)
def test_a_peer_that_comes_or_goes_shifts_each_window_by_a_peer_or_two(size: int, change: str) -> None:
    """While the number of groups stays: it changes when the largest stage crosses a multiple of
    `PEERS_PER_STAGE / LISTINGS` peers, and the windows then shift by up to a cell."""
    stage = stage_of(1, size)
    changed = [*stage, 999_999] if change == "joins" else stage[:17] + stage[18:]
    decks, decks_after = deal_stages([stage], seed=8), deal_stages([changed], seed=8)
    groups = view_groups(decks)
    assert view_groups(decks_after) == groups
    for group in range(groups):
        before, after = set(view_sample(decks, group, groups)), set(view_sample(decks_after, group, groups))
        assert len(before ^ after) <= 3


def test_the_wire_takes_a_view_of_64_stages_at_the_bound_and_no_more() -> None:
    endpoints = [PeerEndpoint(peer_id=i, address=f"h:{i}", stage=i % 64) for i in range(1, 64 * N + 2)]
    totals = [StageTotal(peers=10_000, measured=10_000, rate=1e5)] * 64
    assert len(SwarmView(step=0, peers=endpoints[:-1], stages=totals).peers) == MAX_VIEW_PEERS
    with pytest.raises(ValidationError):
        SwarmView(step=0, peers=endpoints, stages=totals)
    with pytest.raises(ValidationError):
        SwarmView(step=0, peers=[], stages=[*totals, totals[0]])
