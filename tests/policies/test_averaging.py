"""AveragingRound: when one stage's gradient averaging attempt is complete, void, or retried."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.policies.averaging import AveragingRound

GROUP = frozenset({1, 2, 3})


def new_round(group: frozenset[int] = GROUP, attempt: int = 0, stage: int = 2) -> AveragingRound:
    return AveragingRound(stage=stage, attempt=attempt, group=group)


# (peer, attempt, contributors, counted) reports, the round's complete() and inconsistent().
Report = tuple[int, int, list[int], list[str]]


@pytest.mark.parametrize(
    ("reports", "complete", "inconsistent"),
    [
        pytest.param([], False, False, id="no reports"),
        pytest.param([(1, 0, [1, 2, 3], ["a"])], False, False, id="one of three"),
        pytest.param([(1, 0, [1, 2, 3], []), (2, 0, [1, 2, 3], [])], False, False, id="two of three"),
        pytest.param(
            [(1, 0, [1, 2, 3], []), (2, 0, [3, 2, 1], []), (3, 0, [2, 1, 3, 3], [])],
            True,
            False,
            id="all report the whole group (order and repeats do not matter)",
        ),
        pytest.param(
            [(1, 0, [1, 2, 3], []), (2, 0, [1, 2], []), (3, 0, [1, 2, 3], [])],
            False,
            True,
            id="one averaged without a member",
        ),
        pytest.param([(1, 0, [1, 2], [])], False, True, id="a single short report voids the attempt"),
        pytest.param(
            [(1, 0, [1, 2, 3, 4], []), (2, 0, [1, 2, 3], []), (3, 0, [1, 2, 3], [])],
            False,
            True,
            id="one averaged with an outsider",
        ),
        pytest.param(
            [(1, 1, [1, 2, 3], []), (2, 0, [1, 2, 3], []), (3, 0, [1, 2, 3], [])],
            False,
            False,
            id="a report for another attempt is ignored",
        ),
        pytest.param(
            [(1, 0, [1, 2, 3], []), (2, 0, [1, 2, 3], []), (3, 0, [1, 2, 3], []), (4, 0, [4], [])],
            True,
            False,
            id="a non-member is ignored",
        ),
        pytest.param(
            [(1, 0, [1, 2, 3], []), (2, 0, [1, 2, 3], []), (4, 0, [1, 2, 3], [])],
            False,
            False,
            id="a non-member does not stand in for a missing member",
        ),
        pytest.param(
            [(1, 0, [1, 2, 3], []), (2, 0, [1, 2, 3], []), (3, -1, [1, 2], [])],
            False,
            False,
            id="a stale inconsistent report does not void the attempt",
        ),
    ],
)
def test_complete_and_inconsistent(reports: list[Report], complete: bool, inconsistent: bool) -> None:
    r = new_round()
    for peer, attempt, contributors, counted in reports:
        r.report(peer, attempt, contributors, counted)
    assert r.complete() is complete
    assert r.inconsistent() is inconsistent


def test_ignored_reports_leave_no_trace() -> None:
    r = new_round(attempt=3)
    r.report(1, 2, [1, 2, 3], ["stale"])
    r.report(1, 4, [1, 2, 3], ["future"])
    r.report(9, 3, [1, 2, 3], ["outsider"])
    assert r.reports == {}
    assert r.counted() == []


def test_counted_is_the_sorted_union_of_members_reports() -> None:
    r = new_round()
    r.report(1, 0, [1, 2, 3], ["s0-m2", "s0-m0"])
    r.report(2, 0, [1, 2, 3], ["s0-m0", "s0-m1"])
    r.report(3, 0, [1, 2, 3], [])
    r.report(4, 0, [1, 2, 3], ["outsider"])
    r.report(1, 1, [1, 2, 3], ["stale"])
    assert r.counted() == ["s0-m0", "s0-m1", "s0-m2"]


@pytest.mark.parametrize(
    ("group", "leaver", "remaining"),
    [
        (frozenset({1, 2, 3}), 2, frozenset({1, 3})),
        (frozenset({1, 2, 3}), 9, frozenset({1, 2, 3})),
        (frozenset({5}), 5, frozenset()),
    ],
)
def test_without_starts_the_next_attempt_on_a_smaller_group(
    group: frozenset[int], leaver: int, remaining: frozenset[int]
) -> None:
    r = new_round(group=group, attempt=4, stage=7)
    for peer in group:
        r.report(peer, 4, [*group], [f"mb-{peer}"])
    retry = r.without(leaver)
    assert retry.stage == 7
    assert retry.attempt == 5
    assert retry.group == remaining
    assert retry.reports == {}
    assert not retry.inconsistent()
    # The old round is untouched.
    assert r.attempt == 4 and r.group == group and set(r.reports) == set(group)


def test_retry_ignores_the_old_attempt_and_completes_on_the_new_group() -> None:
    r = new_round()
    r.report(1, 0, [1, 2], [])
    assert r.inconsistent()
    retry = r.without(3)
    retry.report(1, 0, [1, 2, 3], ["late"])  # a late report of attempt 0
    retry.report(3, 1, [1, 2], [])  # the departed peer
    assert retry.reports == {}
    retry.report(1, 1, [1, 2], ["a"])
    assert not retry.complete()
    retry.report(2, 1, [2, 1], ["b"])
    assert retry.complete()
    assert retry.counted() == ["a", "b"]


@settings(max_examples=300, database=None, deadline=None)
@given(
    group=st.frozensets(st.integers(min_value=0, max_value=5), min_size=1, max_size=5),
    reports=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=6),
            st.integers(min_value=0, max_value=2),
            st.lists(st.integers(min_value=0, max_value=6), max_size=6),
            st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=3),
        ),
        max_size=12,
    ),
)
def test_properties(group: frozenset[int], reports: list[Report]) -> None:
    r = new_round(group=group, attempt=1)
    accepted: dict[int, tuple[frozenset[int], frozenset[str]]] = {}
    for peer, attempt, contributors, counted in reports:
        r.report(peer, attempt, contributors, counted)
        if attempt == 1 and peer in group:
            accepted[peer] = (frozenset(contributors), frozenset(counted))
    assert r.reports == accepted
    assert r.complete() == (set(accepted) == group and all(c == group for c, _ in accepted.values()))
    assert not (r.complete() and r.inconsistent())
    assert r.counted() == sorted(set().union(*(c for _, c in accepted.values())))
