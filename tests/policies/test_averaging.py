"""AveragingRound: when one stage's gradient averaging attempt is complete, void, or retried."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.policies.averaging import (
    ALL_TO_ALL_ALWAYS,
    ASSUMED_LINK_BYTES_PER_S,
    PUSH_BASE_S,
    SLOWEST_LINK_WAITED_FOR,
    AveragingRound,
    PatternRule,
    averaging_pattern,
    push_allowance_s,
    pushing_rate,
    round_limit_s,
    sums_each_way,
)

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
        pytest.param(
            [(1, 0, [1, 2], []), (2, 0, [1, 2, 3], []), (3, 0, [1, 2, 3], []), (1, 0, [1, 2, 3], [])],
            True,
            False,
            id="a member's later report replaces its short one",
        ),
        pytest.param(
            [(1, 0, [1, 2, 3], []), (2, 0, [1, 2, 3], []), (3, 0, [1, 2, 3], []), (2, 0, [2, 3], [])],
            False,
            True,
            id="a member's later short report voids a complete attempt",
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
    assert r.inconsistent() == any(c != group for c, _ in accepted.values())
    assert not (r.complete() and r.inconsistent())
    assert r.counted() == sorted(set().union(*(c for _, c in accepted.values())))


# ---- losing a member -----------------------------------------------------------------------------

WHOLE = [(1, 0, [1, 2, 3], ["a"]), (2, 0, [1, 2, 3], ["b"]), (3, 0, [1, 2, 3], ["c"])]


@pytest.mark.parametrize(
    ("reports", "lost", "distrusted", "restarts"),
    [
        pytest.param([], 2, False, True, id="nothing reported yet"),
        pytest.param(WHOLE[:2], 3, False, True, id="lost before it reported"),
        pytest.param(WHOLE[:2], 1, False, True, id="lost after it reported, the round not complete"),
        pytest.param(WHOLE, 2, False, False, id="complete: the others apply the agreed sum"),
        pytest.param(WHOLE, 2, True, True, id="complete, but removed as faulty: its share goes"),
        pytest.param(WHOLE, 7, False, False, id="not a member"),
        pytest.param([], 7, True, False, id="not a member, distrusted"),
    ],
)
def test_a_lost_member_restarts_the_round_only_if_it_is_unfinished_or_distrusted(
    reports: list[Report], lost: int, distrusted: bool, restarts: bool
) -> None:
    r = new_round()
    for peer, attempt, contributors, counted in reports:
        r.report(peer, attempt, contributors, counted)
    assert r.restarts_without(lost, distrusted=distrusted) == restarts


# Who held a round up: (reporter, target) pairs "reporter gave up waiting for target's contribution".
@pytest.mark.parametrize(
    ("missed", "holding_up"),
    [
        pytest.param([], set(), id="nobody missed anyone"),
        pytest.param(
            [(2, 3)], {3}, id="a slow uploader missed by one member only (its other push arrived in time)"
        ),
        pytest.param([(1, 3), (2, 3)], {3}, id="a slow uploader missed by every other member"),
        pytest.param([(1, 2), (1, 3)], {1}, id="a member that cannot receive misses everyone"),
        pytest.param([(1, 2), (2, 1)], {1}, id="two that missed each other: the lower id goes"),
        pytest.param([(1, 3), (3, 3), (4, 3)], {3}, id="self and outsiders are not heard"),
    ],
)
def test_holding_up_is_who_others_missed(missed: list[tuple[int, int]], holding_up: set[int]) -> None:
    round_ = new_round()
    for reporter, target in missed:
        round_.missed(reporter, target)
    assert round_.holding_up() == holding_up


def test_a_member_is_counted_holding_the_round_up_at_its_first_miss_only() -> None:
    round_ = new_round()
    assert [round_.missed(1, 3), round_.missed(2, 3), round_.missed(1, 3)] == [True, False, False]
    assert [round_.missed(3, 3), round_.missed(4, 2)] == [False, False]  # self and outsiders
    assert round_.was_missed(3) and not round_.was_missed(2)


@given(st.lists(st.tuples(st.sampled_from(sorted(GROUP)), st.sampled_from(sorted(GROUP)))))
@settings(max_examples=200, deadline=None)
def test_going_on_without_those_holding_up_leaves_nobody_missing_anyone(
    missed: list[tuple[int, int]],
) -> None:
    round_ = new_round()
    for reporter, target in missed:
        round_.missed(reporter, target)
    drop = round_.holding_up()
    assert drop < GROUP or not missed
    assert all(reporter in drop or target in drop for reporter, target in missed if reporter != target)


MB = 1e6


@pytest.mark.parametrize(
    ("members", "slowest_link", "allowance"),
    [
        pytest.param(3, None, PUSH_BASE_S + 3 * 8 * MB / ASSUMED_LINK_BYTES_PER_S, id="no link measured"),
        pytest.param(3, 1e9, PUSH_BASE_S + 3 * 8 * MB / ASSUMED_LINK_BYTES_PER_S, id="fast links"),
        pytest.param(3, 1 * MB, PUSH_BASE_S + 4 * 8 * MB / MB, id="a slow member: 2(K-1) sums at its rate"),
        pytest.param(2, 1 * MB, PUSH_BASE_S + 2 * 8 * MB / MB, id="two members"),
        pytest.param(
            3, 1e3, PUSH_BASE_S + 4 * 8 * MB / SLOWEST_LINK_WAITED_FOR, id="a choked member is not waited for"
        ),
    ],
)
def test_push_allowance_follows_the_slowest_measured_link(
    members: int, slowest_link: float | None, allowance: float
) -> None:
    assert push_allowance_s(8 * MB, members, slowest_link) == pytest.approx(allowance)


@pytest.mark.parametrize(
    ("members", "butterfly_from", "pattern", "sums"),
    [
        pytest.param(1, 9, "all_to_all", 0.0, id="a lone member sends nothing"),
        pytest.param(8, 9, "all_to_all", 7.0, id="under the threshold: K-1 whole sums"),
        pytest.param(9, 9, "butterfly", 16 / 9, id="at the threshold: 2(K-1)/K"),
        pytest.param(
            312, 9, "butterfly", 2 * 311 / 312, id="a stage of 10,000 peers over 32: under two sums"
        ),
        pytest.param(2, 2, "butterfly", 1.0, id="two members, threshold 2"),
    ],
)
def test_large_rounds_go_in_a_butterfly_whose_traffic_does_not_grow_with_k(
    members: int, butterfly_from: int, pattern: str, sums: float
) -> None:
    rule = PatternRule(butterfly_from=butterfly_from)
    assert averaging_pattern(members, rule=rule) == pattern
    assert sums_each_way(averaging_pattern(members, rule=rule), members) == pytest.approx(sums)


@pytest.mark.parametrize(
    ("members", "sum_bytes", "slowest", "rule", "pattern"),
    [
        pytest.param(5, 14 * MB, None, PatternRule(), "all_to_all", id="nothing measured: all-to-all"),
        pytest.param(
            5,
            1 * MB,
            125 * MB,
            PatternRule(),
            "all_to_all",
            id="a data-centre link: 19 ms dearer, all-to-all",
        ),
        pytest.param(
            5,
            14 * MB,
            2.5 * MB,
            PatternRule(),
            "butterfly",
            id="14 MB sums at 20 Mbit/s: 13 s dearer, butterfly",
        ),
        pytest.param(
            3, 2.5 * MB, 2.5 * MB, PatternRule(), "all_to_all", id="three members, 0.67 s dearer: all-to-all"
        ),
        pytest.param(
            3, 4 * MB, 2.5 * MB, PatternRule(), "butterfly", id="three members, 1.07 s dearer: butterfly"
        ),
        pytest.param(
            2, 14 * MB, 2.5 * MB, PatternRule(), "all_to_all", id="two members: a butterfly sends as much"
        ),
        pytest.param(
            5, 14 * MB, 2.5 * MB, ALL_TO_ALL_ALWAYS, "all_to_all", id="the extra seconds never counted"
        ),
        pytest.param(
            8, 14 * MB, 2.5 * MB, PatternRule(most_extra_s=60.0), "all_to_all", id="29 s dearer, 60 s allowed"
        ),
    ],
)
def test_a_small_round_goes_in_a_butterfly_where_all_to_all_would_cost_the_step_seconds(
    members: int, sum_bytes: float, slowest: float | None, rule: PatternRule, pattern: str
) -> None:
    assert averaging_pattern(members, sum_bytes, slowest, rule) == pattern


@pytest.mark.parametrize(
    ("members", "slowest_link", "allowance"),
    [
        pytest.param(300, None, PUSH_BASE_S + 2 * 8 * MB / ASSUMED_LINK_BYTES_PER_S, id="no link: two sums"),
        pytest.param(
            300, 1 * MB, PUSH_BASE_S + 4 * 299 / 300 * 8 * MB / MB, id="a slow member: 4(K-1)/K sums"
        ),
        pytest.param(
            9,
            1e3,
            PUSH_BASE_S + 4 * 8 / 9 * 8 * MB / SLOWEST_LINK_WAITED_FOR,
            id="a choked member is not waited for",
        ),
    ],
)
def test_a_butterfly_rounds_allowance_is_its_two_sums_each_way(
    members: int, slowest_link: float | None, allowance: float
) -> None:
    assert push_allowance_s(8 * MB, members, slowest_link, "butterfly") == pytest.approx(allowance)
    # All-to-all would give a 300-member round ~150x as long.
    assert push_allowance_s(8 * MB, members, slowest_link, "all_to_all") > allowance


@pytest.mark.parametrize(
    ("link", "held_up", "rate"),
    [
        pytest.param(None, 0, None, id="nothing measured, never held up: the default allowance"),
        pytest.param(2 * MB, 0, 2 * MB, id="never held up: the reading"),
        pytest.param(2 * MB, 1, 1 * MB, id="held one round up: half the reading"),
        pytest.param(2 * MB, 3, 0.25 * MB, id="three rounds: an eighth"),
        pytest.param(None, 1, ASSUMED_LINK_BYTES_PER_S / 2, id="held up, unmeasured: half what peers assume"),
        pytest.param(2 * MB, 10_000, 2 * MB / 2.0**64, id="halvings stop past any rate above the floor"),
    ],
)
def test_a_member_that_held_rounds_up_is_given_time_for_a_halved_rate(
    link: float | None, held_up: int, rate: float | None
) -> None:
    assert pushing_rate(link, held_up) == rate


def test_a_halved_rate_lengthens_the_allowance_down_to_the_floor() -> None:
    measured = 2 * MB
    allowances = [push_allowance_s(8 * MB, 3, pushing_rate(measured, n)) for n in range(8)]
    assert allowances == sorted(allowances)
    assert allowances[1] - PUSH_BASE_S == pytest.approx(2 * (allowances[0] - PUSH_BASE_S))
    assert allowances[-1] == push_allowance_s(8 * MB, 3, SLOWEST_LINK_WAITED_FOR)


@pytest.mark.parametrize(
    ("reported", "missed", "blamed", "drop"),
    [
        pytest.param([2], [(3, 1)], set(), {1, 3}, id="some reported: without all who did not"),
        pytest.param([], [(2, 1), (3, 1)], {3}, {1}, id="nobody reported: without those holding it up"),
        pytest.param([], [], {3}, {3}, id="nothing missed: without those blamed"),
        pytest.param([], [], set(), set(), id="nobody to blame: an empty step"),
    ],
)
def test_a_round_past_its_deadline_goes_on_without(
    reported: list[int], missed: list[tuple[int, int]], blamed: set[int], drop: set[int]
) -> None:
    round_ = new_round()
    for peer_id in reported:
        round_.report(peer_id, 0, sorted(GROUP), [])
    for reporter, target in missed:
        round_.missed(reporter, target)
    assert round_.going_on_without(blamed) == drop


@pytest.mark.parametrize(("allowance", "limit"), [(10.0, 60.0), (30.0, 60.0), (45.0, 90.0)])
def test_a_round_gets_twice_its_allowance_and_no_less_than_the_deadline(
    allowance: float, limit: float
) -> None:
    assert round_limit_s(60.0, allowance) == limit
