"""Spot-check arbitration: who referees a mismatch, and what a referee's verdict means.

A trainer found two peers of a stage disagreeing on one call (`peer/spot_checks.py`); a third peer of
the stage, chosen by the coordinator at random among those not involved (the owner's trusted verifier
peers first), recomputes the call from the signed evidence. The peer the referee disagrees with,
while agreeing with the other, is faulty. A stage of two has no third peer: a trusted verifier peer
is brought to it, and checks the state it copies against both parties' before it referees.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from swarmhub.wire import ArbitrationVerdict, SpotCheckMismatch

CASE_TTL_S = 120.0
"""A mismatch no referee settled within this long is dropped (the stage had no third peer, or the
referee never answered); the next mismatch opens a new case."""
MAX_OPEN_CASES_PER_REPORTER = 4
"""Mismatches one trainer may have awaiting a verdict; more are refused as a flood."""


class Finding(StrEnum):
    CHECKED_FAULTY = "checked_faulty"
    CHECKER_FAULTY = "checker_faulty"
    UNFOUNDED = "unfounded"
    """The referee agrees with both: the reported mismatch does not hold."""
    UNRESOLVED = "unresolved"
    """The referee agrees with neither, or could not judge."""


@dataclass(kw_only=True)
class Case:
    case_id: int
    reporter: int
    mismatch: SpotCheckMismatch
    opened_at: float
    referee: int | None = None
    """None until a referee is named (the stage may have no third peer yet)."""
    recruited: int | None = None
    """A trusted peer brought to the stage to referee, while it loads the stage."""


def choose_referee(
    candidates: Iterable[int], case: Case, rng: random.Random, trusted: frozenset[int] = frozenset()
) -> int | None:
    """A peer of the stage that is neither party nor the reporter, drawn at random so that nobody can
    arrange to referee their own dispute; a `trusted` one (the owner's own) if there is one."""
    eligible = sorted(set(candidates) - involved_in(case))
    pool = [peer for peer in eligible if peer in trusted] or eligible
    return rng.choice(pool) if pool else None


def involved_in(case: Case) -> set[int]:
    return {case.mismatch.checked, case.mismatch.checker, case.reporter}


def judge(verdict: ArbitrationVerdict) -> Finding:
    if not verdict.valid:
        return Finding.UNRESOLVED
    if verdict.agrees_with_checker and not verdict.agrees_with_checked:
        return Finding.CHECKED_FAULTY
    if verdict.agrees_with_checked and not verdict.agrees_with_checker:
        return Finding.CHECKER_FAULTY
    if verdict.agrees_with_checked and verdict.agrees_with_checker:
        return Finding.UNFOUNDED
    return Finding.UNRESOLVED
