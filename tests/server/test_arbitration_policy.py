"""Who referees a spot-check mismatch, and what each verdict finds."""

from __future__ import annotations

import random

import pytest

from server.policies.arbitration import Case, Finding, choose_referee, judge
from swarmhub.wire import ArbitrationVerdict, SpotCheckMismatch

CHECKED, CHECKER, REPORTER = 2, 3, 1


def case() -> Case:
    mismatch = SpotCheckMismatch(
        case=7,
        step=0,
        stage=0,
        microbatch_id="mb-1",
        kind="forward",
        checked=CHECKED,
        checker=CHECKER,
        checked_digest="a" * 64,
        checker_digest="b" * 64,
        discrepancy=0.5,
        tolerance=0.01,
    )
    return Case(case_id=1, reporter=REPORTER, mismatch=mismatch, opened_at=0.0)


@pytest.mark.parametrize("seed", range(20))
def test_the_referee_is_never_a_party_or_the_reporter(seed: int) -> None:
    referee = choose_referee([CHECKED, CHECKER, REPORTER, 4, 5], case(), random.Random(seed))
    assert referee in (4, 5)


@pytest.mark.parametrize(
    "candidates",
    [[], [CHECKED], [CHECKED, CHECKER], [CHECKED, CHECKER, REPORTER], [REPORTER, REPORTER]],
)
def test_nobody_referees_when_only_the_involved_are_at_hand(candidates: list[int]) -> None:
    assert choose_referee(candidates, case(), random.Random(0)) is None


def test_the_referee_is_drawn_from_all_eligible_peers() -> None:
    rng = random.Random(1234)
    drawn = [choose_referee([CHECKED, 4, CHECKER, 5, REPORTER, 6], case(), rng) for _ in range(300)]
    assert set(drawn) == {4, 5, 6}
    # No one eligible peer is always (or never) picked: nobody can count on refereeing a dispute.
    assert all(drawn.count(p) >= 50 for p in (4, 5, 6))


def test_the_draw_does_not_depend_on_the_order_candidates_come_in() -> None:
    forward = choose_referee([4, 5, 6, 7], case(), random.Random(99))
    backward = choose_referee([7, 6, 5, 4], case(), random.Random(99))
    assert forward == backward


@pytest.mark.parametrize("seed", range(20))
def test_a_trusted_eligible_peer_is_always_preferred(seed: int) -> None:
    candidates = [CHECKED, CHECKER, REPORTER, 4, 5, 6, 7]
    assert choose_referee(candidates, case(), random.Random(seed), trusted=frozenset({6})) == 6


def test_the_referee_is_drawn_among_the_trusted_when_there_are_several() -> None:
    rng = random.Random(77)
    trusted = frozenset({5, 7})
    drawn = [choose_referee([CHECKED, CHECKER, 4, 5, 6, 7], case(), rng, trusted=trusted) for _ in range(200)]
    assert set(drawn) == {5, 7}
    assert all(drawn.count(p) >= 50 for p in (5, 7))


@pytest.mark.parametrize("involved", [CHECKED, CHECKER, REPORTER])
@pytest.mark.parametrize("seed", range(10))
def test_an_involved_trusted_peer_never_referees(involved: int, seed: int) -> None:
    referee = choose_referee(
        [CHECKED, CHECKER, REPORTER, 4, 5], case(), random.Random(seed), trusted=frozenset({involved})
    )
    assert referee in (4, 5)


def test_a_trusted_peer_that_is_not_a_candidate_is_not_drawn() -> None:
    # Trusted but not a ready peer of the stage: it cannot referee there.
    assert choose_referee([CHECKED, CHECKER, 4], case(), random.Random(0), trusted=frozenset({9})) == 4
    assert choose_referee([CHECKED, CHECKER], case(), random.Random(0), trusted=frozenset({9})) is None


@pytest.mark.parametrize(
    ("valid", "agrees_with_checked", "agrees_with_checker", "finding"),
    [
        (True, False, True, Finding.CHECKED_FAULTY),
        (True, True, False, Finding.CHECKER_FAULTY),
        (True, True, True, Finding.UNFOUNDED),
        (True, False, False, Finding.UNRESOLVED),
        (False, False, True, Finding.UNRESOLVED),
        (False, True, False, Finding.UNRESOLVED),
        (False, True, True, Finding.UNRESOLVED),
        (False, False, False, Finding.UNRESOLVED),
    ],
)
def test_a_verdict_finds(
    valid: bool, agrees_with_checked: bool, agrees_with_checker: bool, finding: Finding
) -> None:
    verdict = ArbitrationVerdict(
        case_id=1,
        valid=valid,
        agrees_with_checked=agrees_with_checked,
        agrees_with_checker=agrees_with_checker,
    )
    assert judge(verdict) == finding
