"""StageRouter: throughput-weighted choice of a stage's peer, with bans for failing peers."""

from __future__ import annotations

import random

import pytest

from peer.routing import MIN_THROUGHPUT, StageRouter, ban_seconds


def router(
    throughputs: dict[int, float], seed: int = 0, ban_base_s: float = 1.0, ban_max_s: float = 30.0
) -> StageRouter:
    r = StageRouter(rng=random.Random(seed), ban_base_s=ban_base_s, ban_max_s=ban_max_s)
    r.update_peers(throughputs)
    return r


def counts(r: StageRouter, n: int, samples: int = 1, now: float = 0.0) -> dict[int, int]:
    out = {p: 0 for p in r.peers()}
    for _ in range(n):
        p = r.choose(samples, now)
        assert p is not None
        out[p] += 1
    return out


# ---- proportional shares ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "throughputs",
    [
        {1: 10.0},
        {1: 10.0, 2: 10.0},
        {1: 100.0, 2: 50.0, 3: 25.0, 4: 25.0},
        {1: 1.0, 2: 9.0},
        {7: 3.0, 8: 5.0, 9: 7.0, 10: 11.0, 11: 13.0},
        {1: 1000.0, 2: 1.0},
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2, 12345])
@pytest.mark.parametrize("samples", [1, 8])
def test_share_is_proportional_to_throughput(throughputs: dict[int, float], seed: int, samples: int) -> None:
    n = 5000
    got = counts(router(throughputs, seed), n, samples)
    total = sum(throughputs.values())
    for peer, t in throughputs.items():
        # IWRR is deterministic up to tie-breaks: each peer is at most about one call off its share.
        assert got[peer] == pytest.approx(n * t / total, abs=max(2.0, 0.002 * n))


def test_same_seed_same_sequence() -> None:
    def sequence(seed: int) -> list[int | None]:
        r = router({1: 5.0, 2: 5.0, 3: 5.0}, seed)
        return [r.choose(1, 0.0) for _ in range(200)]

    assert sequence(7) == sequence(7)
    assert len({tuple(sequence(s)) for s in range(5)}) > 1  # ties really are broken at random


def test_share_follows_a_throughput_update() -> None:
    r = router({1: 10.0, 2: 10.0}, seed=3)
    counts(r, 1000)
    r.update_peers({1: 30.0, 2: 10.0})
    got = counts(r, 4000)
    assert got[1] == pytest.approx(3000, abs=10)
    assert got[2] == pytest.approx(1000, abs=10)


def test_unmeasured_peer_gets_a_finite_tiny_share_but_is_tried_first() -> None:
    r = router({1: 0.0, 2: 10.0}, seed=0)
    got = counts(r, 1000)
    assert got[1] >= 1  # tried (entered at the minimum)
    assert got[1] <= 2  # then 1 / MIN_THROUGHPUT seconds of virtual time per call
    assert got[2] >= 998
    assert 1 / MIN_THROUGHPUT > 1000 / 10.0


# ---- joining and leaving ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("warmup_calls", [0, 1, 2, 7, 100, 1001])
@pytest.mark.parametrize("new_throughput", [0.0, 5.0, 1000.0])
def test_new_peer_is_tried_at_once(seed: int, warmup_calls: int, new_throughput: float) -> None:
    """The newcomer enters at the current minimum finish time. Peers sitting at that minimum tie
    with it (random tie-break, as in the reference code), so it may wait for them, but it is chosen
    before any existing peer is chosen a second time, whatever its own throughput."""
    r = router({1: 10.0, 2: 20.0, 3: 40.0}, seed)
    counts(r, warmup_calls)
    r.update_peers({1: 10.0, 2: 20.0, 3: 40.0, 4: new_throughput})
    seen: list[int | None] = []
    while (p := r.choose(1, 0.0)) != 4:
        assert p not in seen
        seen.append(p)
    assert len(seen) <= 3


def test_newcomer_tied_with_the_minimum_wins_the_toss_about_half_the_time() -> None:
    firsts = []
    for seed in range(200):
        r = router({1: 10.0}, seed)
        counts(r, 5)  # peer 1 sits at 0.5; the newcomer enters there too
        r.update_peers({1: 10.0, 2: 10.0})
        first, second = r.choose(1, 0.0), r.choose(1, 0.0)
        assert {first, second} == {1, 2}
        firsts.append(first)
    assert 60 <= firsts.count(2) <= 140


def test_first_peers_start_at_zero_and_all_are_tried() -> None:
    r = router({1: 1.0, 2: 2.0, 3: 3.0}, seed=5)
    assert {r.choose(1, 0.0) for _ in range(3)} == {1, 2, 3}


def test_update_peers_removes_departed_peers() -> None:
    r = router({1: 10.0, 2: 10.0, 3: 10.0}, seed=0)
    counts(r, 30)
    r.update_peers({1: 10.0, 3: 10.0})
    assert r.peers() == [1, 3]
    assert 2 not in {r.choose(1, 0.0) for _ in range(100)}
    r.update_peers({})
    assert r.peers() == []
    assert r.choose(1, 0.0) is None


def test_reports_about_unknown_peers_are_ignored() -> None:
    r = router({1: 10.0}, seed=0)
    r.report_failure(99, now=0.0)
    r.report_success(99)
    assert r.peers() == [1]
    assert r.choose(1, 0.0) == 1


def test_empty_router_chooses_none() -> None:
    assert StageRouter(rng=random.Random(0)).choose(1, 0.0) is None


# ---- exclusion and bans -----------------------------------------------------------------------


def test_exclude_set_is_honoured() -> None:
    r = router({1: 100.0, 2: 10.0, 3: 10.0}, seed=0)
    for _ in range(200):
        assert r.choose(1, 0.0, exclude=frozenset({1})) in (2, 3)
    assert r.choose(1, 0.0, exclude=frozenset({1, 2})) == 3
    assert r.choose(1, 0.0, exclude=frozenset({1, 2, 3})) is None
    assert r.choose(1, 0.0, exclude=frozenset({42})) is not None


@pytest.mark.parametrize(
    ("base", "cap", "expected_bans"),
    [
        (1.0, 30.0, [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]),
        (0.5, 3.0, [0.5, 1.0, 2.0, 3.0, 3.0]),
        (2.0, 2.0, [2.0, 2.0, 2.0]),
        (5.0, 100.0, [5.0, 10.0, 20.0, 40.0, 80.0, 100.0]),
    ],
)
def test_ban_backs_off_exponentially_up_to_the_cap(
    base: float, cap: float, expected_bans: list[float]
) -> None:
    r = router({1: 10.0, 2: 10.0}, seed=0, ban_base_s=base, ban_max_s=cap)
    now = 1000.0
    for ban in expected_bans:
        r.report_failure(1, now)
        # Banned and excluded right up to now + ban, back at now + ban.
        for t in (now, now + ban / 2, now + ban * (1 - 1e-9)):
            assert 1 not in {r.choose(1, t) for _ in range(20)}
        back = now + ban
        assert 1 in {r.choose(1, back) for _ in range(4)}
        now = back + 0.5


@pytest.mark.parametrize(
    ("failures", "base", "cap", "expected"),
    [
        (1, 1.0, 30.0, 1.0),
        (6, 1.0, 30.0, 30.0),
        # A silent death keeps failing for as long as a run lasts: the 1,025th failure overflowed
        # 2 ** (failures - 1) to float.
        (1024, 1.0, 30.0, 30.0),
        (1025, 1.0, 30.0, 30.0),
        (100_000, 1.0, 30.0, 30.0),
        (1025, 5.0, 100.0, 100.0),
        (1025, 1e-300, 1.0, 1.0),
        (100_000, 0.0, 30.0, 0.0),
    ],
)
def test_ban_stays_at_the_cap_however_many_failures(
    failures: int, base: float, cap: float, expected: float
) -> None:
    assert ban_seconds(failures, base, cap) == expected


def test_a_peer_failing_thousands_of_times_stays_banned_for_the_cap() -> None:
    r = router({1: 10.0, 2: 10.0}, seed=0, ban_base_s=1.0, ban_max_s=30.0)
    now = 0.0
    for _ in range(5000):
        r.report_failure(1, now)
        now += 31.0
    r.report_failure(1, now)
    assert r.choose(1, now + 29.9, exclude=frozenset({2})) is None
    assert r.choose(1, now + 30.0, exclude=frozenset({2})) == 1


def test_success_resets_the_backoff() -> None:
    r = router({1: 10.0, 2: 10.0}, seed=0, ban_base_s=1.0, ban_max_s=30.0)
    for now in (0.0, 10.0, 20.0):
        r.report_failure(1, now)  # bans of 1, 2, 4 s
    assert r.choose(1, 23.9, exclude=frozenset({2})) is None
    assert r.choose(1, 24.0, exclude=frozenset({2})) == 1
    r.report_success(1)
    r.report_failure(1, 100.0)  # back to the base ban
    assert r.choose(1, 100.9, exclude=frozenset({2})) is None
    assert r.choose(1, 101.0, exclude=frozenset({2})) == 1


def test_none_when_every_peer_is_banned() -> None:
    r = router({1: 10.0, 2: 20.0}, seed=0, ban_base_s=1.0)
    r.report_failure(1, 0.0)
    r.report_failure(2, 0.5)
    assert r.choose(1, 0.9) is None
    assert r.choose(1, 1.0) == 1
    assert r.choose(1, 1.4, exclude=frozenset({1})) is None
    assert r.choose(1, 1.5, exclude=frozenset({1})) == 2


@pytest.mark.parametrize("seed", range(5))
def test_peer_back_from_a_ban_is_not_flooded(seed: int) -> None:
    """A banned peer's finish time stands still while the others' advance. Back from the ban it
    re-enters at the current minimum, as a new peer does, rather than taking every call until it
    has caught up (which would pile the stage's whole load onto the peer that just failed)."""
    r = router({1: 10.0, 2: 10.0}, seed, ban_base_s=1.0)
    r.report_failure(1, now=0.0)
    assert counts(r, 200, now=0.5) == {1: 0, 2: 200}
    got = counts(r, 100, now=2.0)
    assert got[1] == pytest.approx(50, abs=2)
    assert got[2] == pytest.approx(50, abs=2)


@pytest.mark.parametrize("seed", range(5))
def test_peer_joining_during_a_ban_is_not_flooded(seed: int) -> None:
    """A newcomer enters at the minimum over peers in service, not at a banned peer's stale time."""
    r = router({1: 10.0, 2: 10.0}, seed, ban_base_s=30.0)
    r.report_failure(1, now=0.0)
    counts(r, 300, now=1.0)
    r.update_peers({1: 10.0, 2: 10.0, 3: 10.0})
    got = counts(r, 100, now=2.0)
    assert got[1] == 0
    assert got[2] == pytest.approx(50, abs=2)
    assert got[3] == pytest.approx(50, abs=2)
    # After the ban all three share evenly.
    got = counts(r, 300, now=31.0)
    assert all(v == pytest.approx(100, abs=2) for v in got.values())


def test_a_queued_peer_is_chosen_less_until_its_queue_drains() -> None:
    router = StageRouter(rng=random.Random(0))
    router.update_peers({1: 10.0, 2: 10.0})
    router.observe_queue(1, 5, now=0.0)
    router.observe_queue(2, 0, now=0.0)
    picks = [router.choose(8, now=0.0) for _ in range(20)]
    # Read just now, peer 1's five queued calls put it calls behind: peer 2 takes the first five.
    assert picks[:5] == [2, 2, 2, 2, 2]
    assert picks.count(2) > picks.count(1)
    router.observe_queue(1, 0, now=0.0)
    later = [router.choose(8, now=0.0) for _ in range(40)]
    assert abs(later.count(1) - later.count(2)) <= 6


@pytest.mark.parametrize(
    ("age_s", "calls_to_it"),
    [
        # Read just now: it is idle and takes calls until it holds a queue like the others' (as
        # read at face value it would at any age).
        (0.0, 9),
        # One call's compute (0.8 s) old: half its difference from the stage's mean is left.
        (0.8, 6),
        # Many calls old: it says no more than the stage's mean, which its own reading holds a
        # little below the others': one call over its even share of 2.
        (30.0, 3),
    ],
)
def test_a_reading_of_an_empty_queue_fades_with_its_age(age_s: float, calls_to_it: int) -> None:
    """At a loaded stage the replies come seconds apart: the peers that answered last hold long
    queues, the one that answered long ago read empty then. Taken at face value, every trainer sent
    that one its next calls at once (swarm-ref's head: equal peers busy 43-91% of one step)."""
    router = StageRouter(rng=random.Random(0))
    router.update_peers({p: 10.0 for p in range(1, 6)})
    now = 100.0
    router.observe_queue(1, 0, now=now - age_s)
    for p in range(2, 6):
        router.observe_queue(p, 8, now=now)
    picks = [router.choose(8, now=now) for _ in range(10)]
    assert picks.count(1) == calls_to_it


def test_a_fresh_reading_of_a_long_queue_still_steers_calls_away() -> None:
    router = StageRouter(rng=random.Random(0))
    router.update_peers({1: 10.0, 2: 10.0, 3: 10.0})
    router.observe_queue(1, 9, now=50.0)
    router.observe_queue(2, 0, now=50.0)
    router.observe_queue(3, 0, now=50.0)
    picks = [router.choose(8, now=50.0) for _ in range(6)]
    assert 1 not in picks


# ---- link time ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("throughputs", "links", "samples", "nbytes"),
    [
        # Equal compute; one peer behind a link 4x slower, transfer dominating.
        ({1: 10.0, 2: 10.0}, {1: 1e6, 2: 0.25e6}, 1, 1_000_000),
        # Faster compute but a slow link: the slower-computing peer with a fast link wins.
        ({1: 100.0, 2: 10.0}, {1: 0.1e6, 2: 100e6}, 8, 500_000),
        # Links so fast that compute alone decides (shares as without links).
        ({1: 30.0, 2: 10.0}, {1: 1e12, 2: 1e12}, 4, 1_000),
        # Three peers, mixed.
        ({1: 20.0, 2: 20.0, 3: 5.0}, {1: 10e6, 2: 1e6, 3: 10e6}, 8, 2_000_000),
        # 1,000 simulated spot peers, a middle stage's microbatch of 8 (84 MB both ways): a
        # data-centre T4 (compute and its 1 Gbit/s link alike, 0.67 s each) against a broadband T4
        # (6.7 s of link). Shares 10:1 by the longer part; by the sum the broadband peer took 1 call
        # in 6.5.
        ({1: 11.9, 2: 11.9}, {1: 125e6, 2: 12.5e6}, 8, 84_000_000),
        # A fast device whose link is its limit against a slower device whose compute is: each
        # serves by its own longer part (0.5 s and 0.8 s a call), not by 0.58 against 1.3.
        ({1: 100.0, 2: 10.0}, {1: 2e6, 2: 20e6}, 8, 1_000_000),
    ],
)
def test_share_is_proportional_to_one_over_the_longer_of_compute_and_transfer(
    throughputs: dict[int, float], links: dict[int, float], samples: int, nbytes: int
) -> None:
    """A peer takes in a call's bytes while it computes the one before, so it serves one call per
    the longer of the two. Charged their sum, data-centre T4s of 1,000 simulated spot peers were
    charged twice their time and broadband peers took about 2.3x their share of a step's calls
    (docs/benchmarks.md, issue 14)."""
    r = router(throughputs)
    r.update_links(links)
    n = 4000
    got = {p: 0 for p in throughputs}
    for _ in range(n):
        p = r.choose(samples, 0.0, nbytes=nbytes)
        assert p is not None
        got[p] += 1
    speed = {p: 1 / max(samples / throughputs[p], nbytes / links[p]) for p in throughputs}
    total = sum(speed.values())
    for peer, s in speed.items():
        assert got[peer] == pytest.approx(n * s / total, abs=max(2.0, 0.002 * n))


def test_an_unmeasured_link_is_charged_at_the_median_of_the_measured_ones() -> None:
    # Charged no transfer, a newcomer looked faster than every measured peer by its whole transfer
    # time and took call after call until its link was read.
    r = router({1: 10.0, 2: 10.0, 3: 10.0, 4: 10.0})
    r.update_links({1: 1e5, 2: 2e5, 3: 4e5})
    got = counts_with_bytes(r, 2000, nbytes=1_000_000)
    assert got[4] == pytest.approx(got[2], abs=2)
    assert got[1] < got[4] < got[3]
    # Measured at last, it is charged at its own rate.
    r.update_links({4: 1e5})
    again = counts_with_bytes(r, 2000, nbytes=1_000_000)
    assert again[4] == pytest.approx(again[1], abs=2)


def test_while_no_link_is_measured_transfers_count_for_nothing() -> None:
    r = router({1: 10.0, 2: 30.0})
    got = counts_with_bytes(r, 1000, nbytes=1_000_000)
    assert got[2] == pytest.approx(3 * got[1], abs=3)


def test_link_rates_of_unknown_peers_and_zero_rates_are_ignored() -> None:
    r = router({1: 10.0, 2: 10.0})
    r.update_links({1: 0.0, 9: 5e6})
    got = counts_with_bytes(r, 1000, nbytes=1_000_000)
    assert got[1] == pytest.approx(got[2], abs=2)
    assert r.peers() == [1, 2]


def counts_with_bytes(r: StageRouter, n: int, nbytes: int) -> dict[int, int]:
    out = {p: 0 for p in r.peers()}
    for _ in range(n):
        p = r.choose(1, 0.0, nbytes=nbytes)
        assert p is not None
        out[p] += 1
    return out


def test_a_queue_observed_in_a_reply_stands_until_the_next_reply_not_the_next_view() -> None:
    router = StageRouter(rng=random.Random(0))
    router.update_peers({1: 10.0, 2: 10.0})
    router.observe_queue(1, 5, now=0.0)
    # A view refresh (throughputs only) keeps what peer 1's reply said.
    router.update_peers({1: 10.0, 2: 10.0})
    picks = [router.choose(8, now=0.0) for _ in range(5)]
    assert picks == [2, 2, 2, 2, 2]
    router.observe_queue(1, 0, now=0.0)
    router.observe_queue(7, 3, now=0.0)  # not a peer of this stage: ignored
    later = [router.choose(8, now=0.0) for _ in range(40)]
    assert abs(later.count(1) - later.count(2)) <= 6


# ---- queues at peers held back by their own links ------------------------------------------------


MB8 = 8_000_000


@pytest.mark.parametrize(
    ("throughputs", "links", "queues", "nbytes", "first"),
    [
        # A fast device on a slow link with four calls queued: each of them takes its 8 MB over
        # that link (8 s), not its 0.08 s of compute. The slower device on a fast link, with as many
        # queued, finishes first.
        ({1: 100.0, 2: 10.0}, {1: 1e6, 2: 100e6}, {1: 4, 2: 4}, MB8, 2),
        # Links fast enough that compute is the longer: queues count their compute, and the fast
        # device's four queued calls (0.32 s) are less than the other's one (0.8 s).
        ({1: 100.0, 2: 10.0}, {1: 100e6, 2: 100e6}, {1: 4, 2: 1}, MB8, 1),
        # Both held to 8 s a call by links read alike: four queued calls are more than one.
        ({1: 100.0, 2: 10.0}, {1: 1e6, 2: 1e6}, {1: 4, 2: 1}, MB8, 2),
        # The slow link's peer with an empty queue still goes first: an idle peer delays nobody.
        ({1: 100.0, 2: 10.0}, {1: 1e6, 2: 100e6}, {1: 0, 2: 4}, MB8, 1),
        # A data-centre link is the longer part at a fast device too (8 MB at 100 MB/s, 0.08 s
        # against 0.016 s of compute): six calls queued there are more than three at a slower
        # device on the same link. Charged compute alone (0.1 s against 0.15 s), peer 1 won.
        ({1: 500.0, 2: 160.0}, {1: 100e6, 2: 100e6}, {1: 6, 2: 3}, MB8, 2),
        # Three peers: the one on a slow link is charged 16 s a queued call, however fast it computes.
        ({1: 50.0, 2: 20.0, 3: 100.0}, {1: 50e6, 2: 50e6, 3: 0.5e6}, {1: 6, 2: 3, 3: 2}, MB8, 1),
        # Without bytes to move, links weigh nothing.
        ({1: 100.0, 2: 10.0}, {1: 1e6, 2: 100e6}, {1: 4, 2: 4}, 0, 1),
    ],
)
def test_a_queued_call_is_charged_the_longer_of_its_compute_and_its_transfer(
    throughputs: dict[int, float], links: dict[int, float], queues: dict[int, int], nbytes: int, first: int
) -> None:
    """At 10,000 simulated spot peers, A100s on broadband were charged their queues at compute
    alone (1/144 s a sample for what their link takes 0.8 s over) and held the most calls of a
    step, some queued 15 minutes ahead (docs/benchmarks.md, issue 14)."""
    r = router(throughputs)
    r.update_links(links)
    for peer, queued in queues.items():
        r.observe_queue(peer, queued, now=10.0)
    assert r.choose(8, now=10.0, nbytes=nbytes) == first
