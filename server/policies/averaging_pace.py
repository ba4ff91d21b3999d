"""Whose upload paces a step's averaging, and which moves keep slow uplinks off heavy stages.

Averaging is all-to-all (`peer/averaging.py`): at the barrier each member pushes its stage's
gradient sum to the K - 1 others, one push after another through its upload. A stage's round lasts
about (K - 1) x sum bytes / its slowest member's upload, and the next step collects only when every
stage's round is done, so the longest round is added to every step. Rates alone place a peer by
what it computes and what its links carry per sample: in the simulator's churn-100 swarm they put
three T4s on 20 Mbit/s links in the 29-member head stage (14 MB sums), whose round then took 157 s
against 7-60 s of collecting; on a middle stage (1.3 MB sums) the same peers push in a few seconds.

Two rules, both pure, which `rebalance.choose_moves` applies when given a `StepAveraging`:
- `RoundBudget.admits`: a move planned for rates may not make its new stage's round longer than
  both the step's collecting and the longest round now;
- `choose_pace_moves`: while the longest round outlasts the step's collecting, members leave its
  stage, slowest upload first (then the least served, then the lowest id; members as fast as the
  rest only while the round is most of the step), for the stages whose rounds they lengthen least,
  if the shorter step gains more samples over the decision's horizon than their copies cost, and
  only as many as the rate plan would not bring back (`RoundBudget` after the moves must refuse
  each of them its old stage again).
A large stage's round is long because of K, not only because of a slow member: in the simulator's
churn-100 swarm without deaths, the rate plan filled the head stage with 26 broadband members (for
its compute), whose round took 28 s a step against 2 s of collecting. Moving only upload outliers
(under half the median member's) left that untouched. A first version that moved any slowest
member ping-ponged a peer in and out of the head stage (its leaving slowed collecting, and the
longer collecting let the rate plan admit it again): the re-admission check rules that out for the
rates of the decision, and `DOMINANT_ROUND` keeps moves whose gain the rates' noise could undo off.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class StepAveraging:
    """What a run's step averages: each stage's gradient sum as members push it, and the samples a
    step collects before it averages."""

    gradient_bytes: Sequence[float]
    batch_size: int


@dataclass(frozen=True, kw_only=True)
class Uplink:
    """One member as averaging sees it."""

    peer_id: int
    stage: int
    upload: float | None
    """Bytes/s its pushes are given (`averaging.pushing_rate`); None: not measured, never the pace."""
    rate: float = 0.0
    """Samples/s it serves on its stage: of members as fast to push, the least served leaves first."""


def round_s(members: int, gradient_bytes: float, slowest_upload: float | None) -> float:
    """Seconds an all-to-all round of `members` takes at its slowest member's upload (0: nothing to
    push, or no upload measured)."""
    if members < 2 or slowest_upload is None or slowest_upload <= 0:
        return 0.0
    return (members - 1) * gradient_bytes / slowest_upload


def averaging_budget_s(rounds: Sequence[float], collect_s: float) -> float:
    """What averaging may take without a move lengthening the step: the longest round now, or the
    step's collecting if longer (a round hidden under that costs nothing worth a copy)."""
    return max(collect_s, max(rounds, default=0.0))


class RoundBudget:
    """Which stages a mover may join without lengthening the step's averaging: after it joins, its
    new stage's round (one member more, and its upload if slower than the slowest there) must stay
    within `averaging_budget_s`. Leaving a stage only shortens its round. Updated as a plan adds
    members, so a plan's later moves see its earlier ones."""

    def __init__(self, uplinks: Sequence[Uplink], gradient_bytes: Sequence[float], collect_s: float) -> None:
        self.gradient_bytes = list(gradient_bytes)
        self.counts = [0] * len(gradient_bytes)
        self.slowest: list[float | None] = [None] * len(gradient_bytes)
        for u in uplinks:
            self._add(u.stage, u.upload)
        self.rounds = [self.round_of(s) for s in range(len(gradient_bytes))]
        """Each stage's round, from its members' uploads."""
        self.budget_s = averaging_budget_s(self.rounds, collect_s)

    def _add(self, stage: int, upload: float | None) -> None:
        self.counts[stage] += 1
        if upload is not None:
            low = self.slowest[stage]
            self.slowest[stage] = upload if low is None else min(low, upload)

    def round_of(self, stage: int) -> float:
        return round_s(self.counts[stage], self.gradient_bytes[stage], self.slowest[stage])

    def round_joined(self, stage: int, upload: float | None) -> float:
        """`stage`'s round with one member more, pushing at `upload`."""
        low = self.slowest[stage]
        slowest = upload if low is None else (low if upload is None else min(low, upload))
        return round_s(self.counts[stage] + 1, self.gradient_bytes[stage], slowest)

    def admits(self, stage: int, upload: float | None) -> bool:
        return self.round_joined(stage, upload) <= self.budget_s

    def join(self, stage: int, upload: float | None) -> None:
        self._add(stage, upload)


OUTLIER_SHARE = 0.5
"""A member paces its stage's round as an outlier when its upload is under this share of the
median member's there."""
DOMINANT_ROUND = 4.0
"""Members about as fast to push as the rest move only while the longest round outlasts the step's
collecting this many times over (averaging is four fifths of the step): a large stage's round is
long because of K, and moving a few of its members shortens it by a few pushes, worth a copy when
averaging is most of the step (simulated churn-100: a 28 s round after 2 s of collecting). Nearer
the collecting, rates measured over a few seconds decide it as much as the moves do: in a machine
test a broadband member was moved off a 2 s round after 0.9 s of collecting for a step ~2.9 s ->
~2.6 s, and at twice the collecting one was moved back by the rate plan two decisions later."""
MOST_PACE_MOVES = 8
"""Members a decision moves off one stage at most: several may share the slowest upload (the round
is only as short as its slowest member left), and copies to few sources queue."""
STAYING_MEMBERS = 2
"""Members the paced stage keeps at least: one to serve, and one its calls fail over to (a shorter
round is not worth a stage that stalls the pipeline when its one member dies)."""


@dataclass(frozen=True, kw_only=True)
class PacePlan:
    moves: tuple[tuple[int, int], ...]
    """(Peer id, stage it goes to), slowest upload first; all leave `from_stage`."""
    from_stage: int
    step_before_s: float
    step_after_s: float
    """Collecting plus the longest round, now and after the moves (rates at their means)."""
    copy_s: float
    """The longest of the movers' copies."""
    gain: float
    """Samples gained over the horizon, net of the copies."""


def step_s(batch_size: int, pipeline_rate: float, longest_round_s: float) -> float:
    """A step's seconds: collecting `batch_size` samples at the pipeline's rate, then averaging."""
    collect = batch_size / pipeline_rate if pipeline_rate > 0 else math.inf
    return collect + longest_round_s


def choose_pace_moves(
    uplinks: Sequence[Uplink],
    gradient_bytes: Sequence[float],
    *,
    batch_size: int,
    pipeline_rate: float,
    rate_with_moves: Callable[[Mapping[int, int]], float],
    copy_s: Callable[[int, int], float],
    movable: Callable[[int], bool],
    horizon_s: float,
) -> PacePlan | None:
    """Moves of members off the stage whose round is the step's longest, or None.

    Only while that round outlasts the step's collecting (`batch_size` samples at `pipeline_rate`):
    below that, averaging is not what the step waits for. Its measured members leave slowest upload
    first (then the least served, then the lowest id): upload outliers (`OUTLIER_SHARE`) always, the
    others only while the round dominates the step (`DOMINANT_ROUND`); at most `MOST_PACE_MOVES`,
    and the stage keeps `STAYING_MEMBERS`. Each goes to the stage whose round it lengthens least,
    then the lowest index; its rate counts in the step through `rate_with_moves` (the pipeline's
    rate with peers on the stages given).

    Of the first 1, 2, ... of them (stopping at one that may not move: `movable`, an unsettled
    rate), the number with the most samples over `horizon_s` is made, if any beats making none: the
    movers serve nothing while they copy (`copy_s`), so a step shortened counts only for the horizon
    after the longest copy. A number is considered only if the placement it leaves would refuse every
    mover its old stage again (`RoundBudget.admits` with the collecting of the pipeline after the
    moves): the rate plan would otherwise bring one back at the next decision."""
    num_stages = len(gradient_bytes)
    budget = RoundBudget(uplinks, gradient_bytes, 0.0)
    rounds = budget.rounds
    paced = max(range(num_stages), key=lambda s: (rounds[s], -s))
    longest = rounds[paced]
    if longest <= 0 or longest <= step_s(batch_size, pipeline_rate, 0.0):
        return None
    before = step_s(batch_size, pipeline_rate, longest)
    measured = sorted(
        (u.upload, u.rate, u.peer_id) for u in uplinks if u.stage == paced and u.upload is not None
    )
    candidates = measured
    if longest <= DOMINANT_ROUND * step_s(batch_size, pipeline_rate, 0.0):
        median = statistics.median(upload for upload, _, _ in measured) if measured else 0.0
        candidates = [m for m in measured if m[0] < OUTLIER_SHARE * median]
    staying = budget.counts[paced]
    baseline = horizon_s / before
    best: PacePlan | None = None
    moves: dict[int, int] = {}
    longest_copy = 0.0
    for k, (upload, _, peer_id) in enumerate(
        candidates[: min(MOST_PACE_MOVES, staying - STAYING_MEMBERS)], start=1
    ):
        if not movable(peer_id):
            break
        staying -= 1
        target = min(
            (t for t in range(num_stages) if t != paced),
            key=lambda t: (budget.round_joined(t, upload), t),
        )
        budget.join(target, upload)
        moves[peer_id] = target
        longest_copy = max(longest_copy, copy_s(peer_id, target))
        if longest_copy >= horizon_s:
            break
        left = measured[k][0] if k < len(measured) else None
        after_rounds = [budget.round_of(t) for t in range(num_stages)]
        after_rounds[paced] = round_s(staying, gradient_bytes[paced], left)
        rate_after = rate_with_moves(dict(moves))
        after = step_s(batch_size, rate_after, max(after_rounds))
        allowed = averaging_budget_s(after_rounds, step_s(batch_size, rate_after, 0.0))
        # Of the movers, this one pushes fastest: the one the budget would refuse last.
        comes_back = round_s(staying + 1, gradient_bytes[paced], upload) <= allowed
        gain = batch_size * ((horizon_s - longest_copy) / after - baseline)
        if comes_back or gain <= 0 or (best is not None and gain <= best.gain):
            continue
        best = PacePlan(
            moves=tuple(moves.items()),
            from_stage=paced,
            step_before_s=before,
            step_after_s=after,
            copy_s=longest_copy,
            gain=gain,
        )
    return best
