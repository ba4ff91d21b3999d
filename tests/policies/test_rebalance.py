"""choose_move / stage_capacities: which peer, if any, the coordinator moves to which stage."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from server.policies.rebalance import (
    DEFAULT_MIN_GAIN,
    Move,
    PeerLoad,
    choose_move,
    inbound_link_rates,
    stage_bytes_per_sample,
    stage_capacities,
)


def loads(*stages: list[float] | list[tuple[float, int]]) -> list[PeerLoad]:
    """Peers numbered 1, 2, ... in order; each stage lists throughputs or (throughput, queue)."""
    peers = []
    for stage, members in enumerate(stages):
        for member in members:
            throughput, queue = member if isinstance(member, tuple) else (member, 0)
            peers.append(
                PeerLoad(peer_id=len(peers) + 1, stage=stage, throughput=throughput, queue_length=queue)
            )
    return peers


# ---- stage_capacities ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stages", "num_stages", "expected"),
    [
        pytest.param([[1.0, 2.0], [3.0]], 2, [3.0, 3.0], id="sums per stage"),
        pytest.param([[5.0], []], 2, [5.0, 0.0], id="empty stage is zero"),
        pytest.param([[], [], []], 3, [0.0, 0.0, 0.0], id="no peers"),
        pytest.param([[1.5, 2.5, 4.0]], 1, [8.0], id="single stage"),
    ],
)
def test_stage_capacities(stages: list[list[float]], num_stages: int, expected: list[float]) -> None:
    assert stage_capacities(loads(*stages), num_stages) == pytest.approx(expected)


# ---- choose_move: tables ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stages", "expected"),
    [
        # An empty stage stalls the pipeline: it gets a peer from a stage that has two or more.
        pytest.param([[10.0, 10.0], []], (1, 0, 1), id="empty last stage"),
        pytest.param([[], [10.0, 10.0]], (1, 1, 0), id="empty first stage"),
        pytest.param([[10.0, 10.0, 10.0, 10.0], []], (1, 0, 1), id="four on one stage"),
        pytest.param([[10.0], [10.0, 10.0], []], (2, 1, 2), id="donor is the stage with two"),
        pytest.param([[10.0, 10.0, 10.0, 10.0], [], []], (1, 0, 1), id="two empty stages, lower first"),
        pytest.param([[], [10.0, 10.0, 10.0], []], (1, 1, 0), id="two empty stages around the donor"),
        # The moved peer is the one whose move raises the rate most, not simply the fastest.
        pytest.param([[40.0, 10.0, 10.0], [5.0]], (1, 0, 1), id="fastest peer gives the best rate"),
        pytest.param([[100.0, 10.0, 10.0], [50.0]], (2, 0, 1), id="a slow peer gives the best rate"),
        pytest.param([[10.0, 10.0], [10.0, 10.0], [1.0, 1.0]], (1, 0, 2), id="three stages, from the first"),
        pytest.param([[10.0], [10.0, 10.0], [1.0, 1.0]], (2, 1, 2), id="three stages, from the one with two"),
    ],
)
def test_move(stages: list[list[float]], expected: tuple[int, int, int]) -> None:
    move = choose_move(loads(*stages), len(stages))
    assert move is not None
    assert (move.peer_id, move.from_stage, move.to_stage) == expected


@pytest.mark.parametrize(
    "stages",
    [
        pytest.param([[10.0], [10.0]], id="balanced, one each"),
        pytest.param([[10.0, 10.0], [10.0, 10.0]], id="balanced, two each"),
        pytest.param([[10.0, 10.0], [10.0, 10.0], [10.0, 10.0]], id="balanced, three stages"),
        # Never empty a stage, however lopsided.
        pytest.param([[100.0], [1.0]], id="donor has a single peer"),
        pytest.param([[100.0], []], id="only peer cannot fill the empty stage"),
        pytest.param([[100.0], [1.0], [100.0]], id="every donor has a single peer"),
        # Moving would make the donor the new, worse bottleneck.
        pytest.param([[10.0, 10.0], [15.0]], id="move would lower the rate"),
        pytest.param([[10.0, 1.0], [10.0]], id="moving the slow one gains too little"),
        pytest.param([], id="no peers at all"),
    ],
)
def test_no_move(stages: list[list[float]]) -> None:
    num_stages = max(len(stages), 2)
    assert choose_move(loads(*stages), num_stages) is None


def test_single_stage_run_never_moves() -> None:
    assert choose_move(loads([1.0, 100.0, 3.0]), 1) is None
    assert choose_move([], 1) is None


@pytest.mark.parametrize("stage", [-1, 2, 7])
def test_peer_on_a_stage_the_run_does_not_have(stage: int) -> None:
    peers = [*loads([10.0, 10.0], [10.0]), PeerLoad(peer_id=99, stage=stage, throughput=1.0)]
    with pytest.raises(ValueError, match="99"):
        choose_move(peers, 2)


# ---- hysteresis ------------------------------------------------------------------------------
# Stage 0: three peers of 10 (30); stage 1: two peers of 8 (16). Moving a stage-0 peer scales its
# rate by the stages' mean ratio 8 / 10, so stage 1 becomes 16 + 8 = 24 and stage 0 keeps 20: the
# pipeline goes from 16 to 20, a gain of 4, against a bar of min_gain x the moved peer's estimated
# rate 8 (smaller than the rate 16). All exact in binary floating point: at min_gain = 0.5 the
# gain equals the bar.

HYSTERESIS = ([10.0, 10.0, 10.0], [8.0, 8.0])


def test_gain_of_exactly_min_gain_does_not_move() -> None:
    assert choose_move(loads(*HYSTERESIS), 2, min_gain=0.5) is None


def test_gain_just_above_min_gain_moves() -> None:
    move = choose_move(loads(*HYSTERESIS), 2, min_gain=0.49)
    assert move is not None
    assert (move.from_stage, move.to_stage) == (0, 1)
    assert (move.rate_before, move.rate_after, move.peer_rate) == (16.0, 20.0, 8.0)


def test_default_min_gain_is_ten_percent_of_what_the_peer_brings() -> None:
    assert DEFAULT_MIN_GAIN == 0.10
    assert choose_move(loads(*HYSTERESIS), 2) is not None
    # Stage 1 at 19.5: the move gains 0.5, under 10% of the moved peer's 9.75.
    assert choose_move(loads([10.0, 10.0, 10.0], [9.75, 9.75]), 2) is None
    # Stage 1 at 19: it gains 1, over 10% of 9.5.
    assert choose_move(loads([10.0, 10.0, 10.0], [9.5, 9.5]), 2) is not None


def test_a_large_swarm_still_moves_toward_a_slow_stage() -> None:
    # 1,250 peers a stage, the last stage 3x slower per peer: one move is a tiny share of the
    # pipeline's rate, far below 10% of it, yet clearly worth its own peer's contribution.
    peers = loads([30.0] * 1250, [10.0] * 1250)
    move = choose_move(peers, 2)
    assert move is not None and (move.from_stage, move.to_stage) == (0, 1)
    assert move.rate_after - move.rate_before == pytest.approx(10.0)
    assert move.rate_after < move.rate_before * 1.01


# ---- the estimated rates ---------------------------------------------------------------------


def test_rate_after_scales_by_the_stage_cost() -> None:
    # Stage 1's peers are four times slower (an expensive stage): a 20/s peer of stage 0 is
    # expected to do 5/s there, so the pipeline goes from 5 to 10, not to 25.
    move = choose_move(loads([20.0, 20.0, 20.0], [5.0]), 2)
    assert move is not None
    assert (move.from_stage, move.to_stage) == (0, 1)
    assert move.rate_before == pytest.approx(5.0)
    assert move.rate_after == pytest.approx(10.0)


def test_rate_after_scales_up_toward_a_cheaper_stage() -> None:
    # Stage 1's peers are twice as fast per peer: a 10/s peer is expected to do 20/s there, so
    # the pipeline goes from 20 to min(50, 40) = 40 (unscaled it would be 30).
    move = choose_move(loads([10.0] * 6, [20.0]), 2)
    assert move is not None
    assert move.rate_before == pytest.approx(20.0)
    assert move.rate_after == pytest.approx(40.0)


def test_empty_stage_keeps_the_peers_own_rate() -> None:
    move = choose_move(loads([30.0, 10.0], []), 2)
    assert move is not None
    assert move.rate_before == 0.0
    # Moving the 10/s peer leaves 30 behind: rate 10; moving the 30/s one leaves 10: also 10.
    # Equal rates: the lower id (peer 1) goes.
    assert move.peer_id == 1
    assert move.rate_after == pytest.approx(10.0)


# ---- ties ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage0", "expected_peer"),
    [
        pytest.param([(10.0, 3), (10.0, 1), (10.0, 2)], 2, id="shortest queue"),
        pytest.param([(10.0, 0), (10.0, 0), (10.0, 0)], 1, id="equal queues, lowest id"),
        pytest.param([(10.0, 5), (10.0, 2), (10.0, 2)], 2, id="equal shortest queues, lower id"),
        # A better rate beats a shorter queue.
        pytest.param([(10.0, 0), (10.0, 0), (40.0, 9)], 3, id="rate before queue"),
    ],
)
def test_ties(stage0: list[tuple[float, int]], expected_peer: int) -> None:
    move = choose_move(loads(stage0, [(2.0, 0)]), 2)
    assert move is not None
    assert move.peer_id == expected_peer


def test_ties_across_donor_stages() -> None:
    # Stages 0 and 2 each offer an equally good peer; the queue decides, then the id.
    peers = loads([(10.0, 4), (10.0, 4)], [(1.0, 0)], [(10.0, 1), (10.0, 1)])
    move = choose_move(peers, 3)
    assert move is not None and (move.peer_id, move.from_stage) == (4, 2)
    peers = loads([(10.0, 1), (10.0, 1)], [(1.0, 0)], [(10.0, 1), (10.0, 1)])
    move = choose_move(peers, 3)
    assert move is not None and (move.peer_id, move.from_stage) == (1, 0)


def test_choice_does_not_depend_on_input_order() -> None:
    peers = loads([(10.0, 2), (10.0, 1), (10.0, 1)], [(1.0, 0)])
    assert choose_move(peers, 2) == choose_move(list(reversed(peers)), 2)


def test_reason_names_stages_and_rates() -> None:
    move = Move(peer_id=4, from_stage=0, to_stage=1, rate_before=5.0, rate_after=10.0, peer_rate=5.0)
    assert "stage 1" in move.reason and "stage 0" in move.reason
    assert "5.0" in move.reason and "10.0" in move.reason
    chosen = choose_move(loads([20.0, 20.0, 20.0], [5.0]), 2)
    assert chosen is not None
    assert "stage 1" in chosen.reason and "stage 0" in chosen.reason
    assert "5.0" in chosen.reason and "10.0" in chosen.reason


# ---- properties ------------------------------------------------------------------------------

throughputs = st.floats(min_value=0.1, max_value=1000.0, allow_nan=False, allow_infinity=False)


@st.composite
def swarms(draw: st.DrawFn) -> tuple[list[PeerLoad], int]:
    num_stages = draw(st.integers(min_value=2, max_value=4))
    count = draw(st.integers(min_value=1, max_value=10))
    peers = [
        PeerLoad(
            peer_id=i,
            stage=draw(st.integers(min_value=0, max_value=num_stages - 1)),
            throughput=draw(throughputs),
            queue_length=draw(st.integers(min_value=0, max_value=5)),
        )
        for i in range(count)
    ]
    return peers, num_stages


def apply_move(peers: list[PeerLoad], move: Move, num_stages: int) -> list[PeerLoad]:
    """The swarm after `move`, if the policy's estimate of the moved peer's new rate is the truth."""
    members = [[p for p in peers if p.stage == s] for s in range(num_stages)]

    def mean(stage: int) -> float:
        return sum(p.throughput for p in members[stage]) / len(members[stage])

    moved = next(p for p in peers if p.peer_id == move.peer_id)
    scale = mean(move.to_stage) / mean(move.from_stage) if members[move.to_stage] else 1.0
    return [
        p
        if p.peer_id != move.peer_id
        else PeerLoad(
            peer_id=p.peer_id, stage=move.to_stage, throughput=moved.throughput * scale, queue_length=0
        )
        for p in peers
    ]


@settings(max_examples=300, deadline=None)
@given(swarms())
def test_a_move_is_worth_it_and_never_empties_a_stage(swarm: tuple[list[PeerLoad], int]) -> None:
    peers, num_stages = swarm
    move = choose_move(peers, num_stages)
    assume(move is not None)
    capacities = stage_capacities(peers, num_stages)
    assert move.rate_before == pytest.approx(min(capacities))
    bar = DEFAULT_MIN_GAIN * min(move.rate_before, move.peer_rate)
    assert move.rate_after - move.rate_before > bar or move.fills_empty
    assert move.from_stage != move.to_stage
    moved = next(p for p in peers if p.peer_id == move.peer_id)
    assert moved.stage == move.from_stage
    assert sum(1 for p in peers if p.stage == move.from_stage) >= 2, "the source stage keeps a peer"
    after = apply_move(peers, move, num_stages)
    assert min(stage_capacities(after, num_stages)) == pytest.approx(move.rate_after)


@settings(max_examples=300, deadline=None)
@given(swarms())
def test_repeated_moves_settle(swarm: tuple[list[PeerLoad], int]) -> None:
    """Moves taken as the truth never bounce a peer back and forth: the policy goes quiet."""
    peers, num_stages = swarm
    occupied = sum(1 for s in range(num_stages) if any(p.stage == s for p in peers))
    seen = {tuple(sorted((p.peer_id, p.stage) for p in peers))}
    for _ in range(50):
        move = choose_move(peers, num_stages)
        if move is None:
            break
        peers = apply_move(peers, move, num_stages)
        now = sum(1 for s in range(num_stages) if any(p.stage == s for p in peers))
        assert now >= occupied, "a move emptied a stage"
        occupied = now
        placement = tuple(sorted((p.peer_id, p.stage) for p in peers))
        assert placement not in seen or move.rate_before == 0, f"oscillation back to {placement}"
        seen.add(placement)
    else:
        pytest.fail("still moving after 50 moves")


@settings(max_examples=200, deadline=None)
@given(swarms())
def test_empty_stage_is_filled_when_a_donor_exists(swarm: tuple[list[PeerLoad], int]) -> None:
    peers, num_stages = swarm
    counts = [sum(1 for p in peers if p.stage == s) for s in range(num_stages)]
    assume(0 in counts and max(counts) >= 2)
    move = choose_move(peers, num_stages)
    assert move is not None, "an empty stage stalls the pipeline; a stage with two peers can give one"
    assert counts[move.to_stage] == 0
    assert counts[move.from_stage] >= 2


def test_filling_an_empty_stage_says_so() -> None:
    move = choose_move(loads([10.0, 10.0, 10.0, 10.0], [], []), 3)
    assert move is not None and move.fills_empty
    # Stage 2 is still empty, so the rate stays 0; the move is still the only way forward.
    assert (move.rate_before, move.rate_after) == (0.0, 0.0)
    assert "stage 1 had no peer" in move.reason and "stage 0" in move.reason
    next_move = choose_move(apply_move(loads([10.0, 10.0, 10.0, 10.0], [], []), move, 3), 3)
    assert next_move is not None and next_move.to_stage == 2 and next_move.rate_after == pytest.approx(10.0)


def test_empty_stage_comes_before_an_unmeasured_one() -> None:
    # Stage 0's peer reports no throughput yet (capacity 0, like an empty stage): the empty
    # stage 2 is the one that stalls the pipeline for sure.
    move = choose_move(loads([0.0], [10.0, 10.0], []), 3)
    assert move is not None and (move.from_stage, move.to_stage) == (1, 2)


def test_pinned_peers_count_but_do_not_move() -> None:
    peers = loads([10.0, 10.0, 10.0], [10.0])
    move = choose_move(peers, 2, pinned=frozenset({1}))
    assert move is not None and move.peer_id == 2
    assert move.rate_before == 10.0
    assert choose_move(peers, 2, pinned=frozenset({1, 2, 3})) is None


# ---- link caps ---------------------------------------------------------------------------------


def linked(stage: int, peer_id: int, throughput: float, link_rate: float | None) -> PeerLoad:
    return PeerLoad(peer_id=peer_id, stage=stage, throughput=throughput, link_rate=link_rate)


@pytest.mark.parametrize(
    ("peers", "bytes_per_sample", "expected"),
    [
        pytest.param(
            [linked(0, 1, 100.0, 1000.0), linked(1, 2, 100.0, None)],
            [10.0, 10.0],
            [100.0, 100.0],
            id="a link carrying more than the compute does not cap",
        ),
        pytest.param(
            [linked(0, 1, 100.0, 500.0), linked(0, 2, 100.0, 2000.0), linked(1, 3, 100.0, 200.0)],
            [10.0, 4.0],
            [150.0, 50.0],
            id="link-bound peers count at link rate / bytes per sample",
        ),
        pytest.param(
            [linked(0, 1, 100.0, 0.0)],
            [10.0],
            [0.0],
            id="a link that carried nothing caps at zero",
        ),
    ],
)
def test_stage_capacities_capped_by_links(
    peers: list[PeerLoad], bytes_per_sample: list[float], expected: list[float]
) -> None:
    assert stage_capacities(peers, len(bytes_per_sample), bytes_per_sample) == pytest.approx(expected)


def test_without_bytes_per_sample_links_are_ignored() -> None:
    peers = [linked(0, 1, 100.0, 1.0), linked(1, 2, 100.0, 1.0)]
    assert stage_capacities(peers, 2) == pytest.approx([100.0, 100.0])


@pytest.mark.parametrize(
    ("peers", "bytes_per_sample", "expected"),
    [
        pytest.param(
            # By compute stage 1 (one peer, 100) is the bottleneck and either stage-0 peer would
            # help; peer 1's link carries only 20 samples/s of stage 1's traffic, so peer 2 goes.
            [
                linked(0, 1, 100.0, 2_000.0),
                linked(0, 2, 100.0, 100_000.0),
                linked(0, 3, 100.0, None),
                linked(1, 4, 100.0, None),
            ],
            [10.0, 100.0],
            (2, 0, 1),
            id="the peer whose link can carry the bottleneck stage moves",
        ),
        pytest.param(
            # Stage 0's compute is ample but its only two peers' links carry 30 samples/s each:
            # stage 0 is the real bottleneck and a stage-1 peer with a fast link moves there.
            [
                linked(0, 1, 200.0, 300.0),
                linked(0, 2, 200.0, 300.0),
                linked(1, 3, 100.0, 1e9),
                linked(1, 4, 100.0, 1e9),
                linked(1, 5, 100.0, 1e9),
            ],
            [10.0, 10.0],
            (3, 1, 0),
            id="a link-bound stage is the bottleneck",
        ),
    ],
)
def test_move_accounts_for_links(
    peers: list[PeerLoad], bytes_per_sample: list[float], expected: tuple[int, int, int]
) -> None:
    move = choose_move(peers, len(bytes_per_sample), bytes_per_sample=bytes_per_sample)
    assert move is not None
    assert (move.peer_id, move.from_stage, move.to_stage) == expected


def test_a_link_bound_peer_is_estimated_at_what_its_link_carries() -> None:
    peers = [linked(0, 1, 100.0, 100.0), linked(0, 2, 100.0, 100.0), linked(1, 3, 50.0, None)]
    by_compute = choose_move(peers, 2)
    assert by_compute is not None
    assert (by_compute.peer_rate, by_compute.rate_after) == pytest.approx((50.0, 100.0))
    # Stage 1 moves 100 bytes per sample; the peer's link carries 100 bytes/s: 1 sample/s.
    by_links = choose_move(peers, 2, bytes_per_sample=[1.0, 100.0])
    assert by_links is not None
    assert (by_links.peer_rate, by_links.rate_before, by_links.rate_after) == pytest.approx((1.0, 50.0, 51.0))


def test_bytes_per_sample_must_name_every_stage() -> None:
    with pytest.raises(ValueError, match="bytes_per_sample has 1 stages"):
        choose_move([linked(0, 1, 1.0, None)], 2, bytes_per_sample=[1.0])


@pytest.mark.parametrize(
    ("num_stages", "compression", "expected"),
    [
        # seq 64, d 8: an activation is 512 elements; tokens 64 x 8 bytes.
        (1, "none", [1024.0]),
        (2, "none", [2 * 512 + 2 * 2048, 2 * 2048 + 512]),
        (3, "float16", [2 * 512 + 2 * 1024, 5 * 1024, 2 * 1024 + 512]),
        (2, "int8", [2 * 512 + 2 * 512 * (1 + 4 / 2048), 2 * 512 * (1 + 4 / 2048) + 512]),
    ],
)
def test_stage_bytes_per_sample(num_stages: int, compression: str, expected: list[float]) -> None:
    assert stage_bytes_per_sample(num_stages, 64, 8, compression) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("reports", "expected"),
    [
        pytest.param({}, {}, id="nobody measured"),
        pytest.param({1: {2: 5.0}, 3: {2: 9.0, 1: 4.0}}, {2: 9.0, 1: 4.0}, id="the best measurement"),
        pytest.param({1: {1: 99.0, 2: 0.0}}, {}, id="self-reports and zeros ignored"),
    ],
)
def test_inbound_link_rates(reports: dict[int, dict[int, float]], expected: dict[int, float]) -> None:
    assert inbound_link_rates(reports) == expected
