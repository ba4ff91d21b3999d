"""choose_stage: where a joining peer goes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.policies.stage_choice import choose_stage


@pytest.mark.parametrize(
    ("throughputs", "peer_counts", "expected"),
    [
        pytest.param([5.0], [1], 0, id="single stage"),
        pytest.param([0.0], [0], 0, id="single empty stage"),
        pytest.param([30.0, 10.0, 20.0], [1, 1, 1], 1, id="lowest throughput"),
        pytest.param([30.0, 20.0, 10.0], [5, 5, 5], 2, id="lowest throughput last"),
        pytest.param([10.0, 0.0, 5.0], [2, 0, 1], 1, id="empty stage"),
        # An empty stage stalls the pipeline: it comes first whatever throughput it still shows.
        pytest.param([1.0, 99.0], [1, 0], 1, id="empty stage beats a slower non-empty one"),
        pytest.param([0.0, 0.0, 7.0], [3, 1, 0], 2, id="empty stage beats zero-throughput ones"),
        pytest.param([0.0, 0.0, 0.0], [0, 0, 0], 0, id="all empty, lowest index"),
        pytest.param([5.0, 0.0, 0.0], [1, 0, 0], 1, id="two empty, lower index"),
        pytest.param([0.0, 4.0, 2.0], [2, 0, 0], 2, id="two empty, lower throughput"),
        # Ties on throughput go to fewer peers, then to the lower index.
        pytest.param([10.0, 10.0], [3, 2], 1, id="tie, fewer peers"),
        pytest.param([10.0, 10.0, 10.0], [2, 2, 2], 0, id="full tie, lowest index"),
        pytest.param([10.0, 5.0, 5.0], [1, 2, 2], 1, id="tie among the weakest, lower index"),
        pytest.param([10.0, 5.0, 5.0], [1, 3, 2], 2, id="tie among the weakest, fewer peers"),
        pytest.param([4.0, 5.0], [9, 1], 0, id="throughput before peer count"),
    ],
)
def test_weakest_stage(throughputs: list[float], peer_counts: list[int], expected: int) -> None:
    assert choose_stage(throughputs, peer_counts, None) == expected
    assert choose_stage(tuple(throughputs), tuple(peer_counts), None) == expected


@pytest.mark.parametrize(
    ("throughputs", "peer_counts", "requested"),
    [
        ([10.0, 0.0, 5.0], [2, 0, 1], 0),
        ([10.0, 0.0, 5.0], [2, 0, 1], 2),
        ([10.0, 0.0, 5.0], [2, 0, 1], 1),
        ([0.0, 100.0], [0, 5], 1),
        ([7.0], [1], 0),
    ],
)
def test_requested_stage_is_honoured(
    throughputs: list[float], peer_counts: list[int], requested: int
) -> None:
    assert choose_stage(throughputs, peer_counts, requested) == requested


@pytest.mark.parametrize("requested", [-1, -3, 3, 4, 100])
def test_requested_stage_out_of_range(requested: int) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        choose_stage([1.0, 2.0, 3.0], [1, 1, 1], requested)


@pytest.mark.parametrize(
    ("throughputs", "peer_counts", "requested"),
    [
        ([], [], None),
        ([], [], 0),
        ([1.0, 2.0], [1], None),
        ([1.0], [1, 2], None),
        ([1.0, 2.0], [], 0),
        ([], [1], None),
    ],
)
def test_mismatched_or_empty_inputs(
    throughputs: list[float], peer_counts: list[int], requested: int | None
) -> None:
    with pytest.raises(ValueError, match="one throughput and one peer count per stage"):
        choose_stage(throughputs, peer_counts, requested)


@settings(max_examples=300, database=None, deadline=None)
@given(
    stages=st.lists(
        st.tuples(st.sampled_from([0.0, 1.0, 2.5, 10.0, 100.0]), st.integers(min_value=0, max_value=3)),
        min_size=1,
        max_size=8,
    )
)
def test_choice_is_the_minimum_of_the_documented_order(stages: list[tuple[float, int]]) -> None:
    throughputs = [t for t, _ in stages]
    counts = [c for _, c in stages]
    chosen = choose_stage(throughputs, counts, None)
    assert 0 <= chosen < len(stages)
    if 0 in counts:
        assert counts[chosen] == 0
    for s in range(len(stages)):
        if (counts[s] == 0) == (counts[chosen] == 0):
            assert (throughputs[chosen], counts[chosen], chosen) <= (throughputs[s], counts[s], s)


@pytest.mark.parametrize(
    ("throughputs", "peer_counts", "refused", "expected"),
    [
        # The head stage serves least, but one member more would lengthen its round past the step's
        # budget: the joiner strengthens the weakest stage that takes it.
        pytest.param([30.0, 20.0, 10.0], [5, 5, 5], {2}, 1, id="the weakest refuses"),
        pytest.param([30.0, 20.0, 10.0], [5, 5, 5], {1, 2}, 0, id="only the strongest admits"),
        pytest.param([30.0, 20.0, 10.0], [5, 5, 5], {0, 1, 2}, 2, id="none admits: by rate alone"),
        pytest.param([30.0, 0.0, 10.0], [5, 0, 5], {1}, 1, id="an empty stage comes first all the same"),
        pytest.param([30.0, 20.0, 10.0], [5, 5, 5], set(), 2, id="all admit"),
    ],
)
def test_stages_whose_round_would_not_admit_a_joiner_are_passed_over(
    throughputs: list[float], peer_counts: list[int], refused: set[int], expected: int
) -> None:
    assert choose_stage(throughputs, peer_counts, None, admits=lambda s: s not in refused) == expected


def test_a_requested_stage_is_served_whatever_its_round() -> None:
    assert choose_stage([30.0, 20.0, 10.0], [5, 5, 5], 2, admits=lambda _s: False) == 2
