"""Whose upload paces a step's averaging, and which moves keep slow uplinks off heavy stages.

Averaging is all-to-all in small rounds (`peer/averaging.py`): at the barrier each member pushes its
stage's gradient sum to the K - 1 others, one push after another through its upload; rounds of
`BUTTERFLY_FROM_MEMBERS` or more go in a butterfly, 2(K - 1)/K sums each (`peer/butterfly.py`). A
stage's round lasts about that many sums' bytes / its slowest member's upload, and the next step
collects only when every stage's round is done, so the longest round is added to every step.
Rates alone place a peer by what it computes and what its links carry per sample: in the
simulator's churn-100 swarm they put three T4s on 20 Mbit/s links in the 29-member head stage
(14 MB sums), whose round then took 157 s against 7-60 s of collecting; on a middle stage (1.3 MB
sums) the same peers push in a few seconds.

Two rules, both pure, which `rebalance.choose_moves` applies when given a `StepAveraging`:
- `RoundBudget.admits`: a move planned for rates may not make its new stage's round longer than
  both the step's collecting and the longest round now;
- `choose_pace_moves`: while the longest round outlasts the step's collecting, members leave the
  stage whose round is longest (again after each move: stages may share it), slowest upload first
  (then the least served, then the lowest id; members as fast as the rest only while the round is
  most of the step), for the stages whose rounds they lengthen least, if the shorter step gains
  more samples over the decision's horizon than their copies cost, and only as many as the rate
  plan would not bring back (`RoundBudget` after the moves must refuse each of them its old stage
  again).
Rounds are modelled from upload readings and scaled by how long the stage's rounds were timed at
(`round_timing`): readings taken from trainers' calls can be far from what a push gets, and a stage
whose rounds were never timed is not left for them. Nor is a stage whose timed rounds hid under the
collecting, whatever the model says: the model plans the moves, the rounds as timed decide whether
averaging is what the step waits for.
A large stage's round is long because of K, not only because of a slow member: in the simulator's
churn-100 swarm without deaths, the rate plan filled the head stage with 26 broadband members (for
its compute), whose round took 28 s a step against 2 s of collecting. Moving only upload outliers
(under half the median member's) left that untouched (112.6 samples/s); moving members off the
head stage alone stopped when the embeddings' stage's round was as long (147); moving them off
both, 219. A first version that moved any slowest member ping-ponged a peer in and out of the head
stage (its leaving slowed collecting, and the longer collecting let the rate plan admit it again):
the re-admission check rules that out for the rates of the decision, and `DOMINANT_ROUND` keeps
moves whose gain the rates' noise could undo off.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from server.policies.averaging import PatternRule, averaging_pattern, sums_each_way


@dataclass(frozen=True, kw_only=True)
class StepAveraging:
    """What a run's step averages: each stage's gradient sum as members push it, and the samples a
    step collects before it averages."""

    gradient_bytes: Sequence[float]
    batch_size: int
    round_scale: Sequence[float | None] = ()
    """Per stage, its timed rounds' seconds over the modelled (`round_timing.RoundTimes.scales`);
    None or missing: never timed, the model alone sizes its rounds and nobody leaves it for them."""
    round_measured_s: Sequence[float | None] = ()
    """Per stage, how long its timed rounds took (`round_timing.RoundTimes.measured_s`); None or
    missing: never timed. Members leave a stage for averaging only if its rounds took longer than
    the step's collecting."""
    patterns: PatternRule = field(default_factory=PatternRule)
    """Which rounds go in a butterfly (the coordinator's settings)."""


@dataclass(frozen=True, kw_only=True)
class Uplink:
    """One member as averaging sees it."""

    peer_id: int
    stage: int
    upload: float | None
    """Bytes/s its pushes are given (`averaging.pushing_rate`); None: not measured, never the pace."""
    rate: float = 0.0
    """Samples/s it serves on its stage: of members as fast to push, the least served leaves first."""


def round_s(
    members: int,
    gradient_bytes: float,
    slowest_upload: float | None,
    patterns: PatternRule = PatternRule(),
) -> float:
    """Seconds a round of `members` takes at its slowest member's upload, in the pattern the
    coordinator gives it (`averaging_pattern`; 0: nothing to push, or no upload measured)."""
    if members < 2 or slowest_upload is None or slowest_upload <= 0:
        return 0.0
    pattern = averaging_pattern(members, gradient_bytes, slowest_upload, patterns)
    sums = sums_each_way(pattern, members)
    return sums * gradient_bytes / slowest_upload


def scale_of(round_scale: Sequence[float | None], stage: int) -> float:
    """What the stage's modelled rounds are multiplied by: 1 where its rounds were never timed."""
    scale = round_scale[stage] if stage < len(round_scale) else None
    return 1.0 if scale is None else scale


def averaging_budget_s(rounds: Sequence[float], collect_s: float) -> float:
    """What averaging may take without a move lengthening the step: the longest round now, or the
    step's collecting if longer (a round hidden under that costs nothing worth a copy)."""
    return max(collect_s, max(rounds, default=0.0))


class RoundBudget:
    """Which stages a mover may join without lengthening the step's averaging: after it joins, its
    new stage's round (one member more, and its upload if slower than the slowest there) must stay
    within `averaging_budget_s`. Leaving a stage only shortens its round. Updated as a plan adds
    members, so a plan's later moves see its earlier ones. Rounds are modelled, scaled by
    `round_scale` (`StepAveraging.round_scale`)."""

    def __init__(
        self,
        counts: Sequence[int],
        slowest: Sequence[float | None],
        gradient_bytes: Sequence[float],
        collect_s: float,
        round_scale: Sequence[float | None] = (),
        patterns: PatternRule = PatternRule(),
    ) -> None:
        """The budget of stages with these member counts and slowest uploads (`slower_upload`): all
        a budget keeps of its members, which a caller going over them anyway tallies as it goes (the
        coordinator and the simulator rebuild a joiner's budget about once a second, over 10,000
        peers in a large swarm)."""
        if not len(counts) == len(slowest) == len(gradient_bytes):
            raise ValueError("need one count, one slowest upload and one sum size per stage")
        self.patterns = patterns
        self.gradient_bytes = list(gradient_bytes)
        self.scale = [scale_of(round_scale, s) for s in range(len(gradient_bytes))]
        self.counts = list(counts)
        self.slowest = list(slowest)
        self.rounds = [self.round_of(s) for s in range(len(gradient_bytes))]
        """Each stage's round, from its members' uploads."""
        self.budget_s = averaging_budget_s(self.rounds, collect_s)

    @classmethod
    def of_uplinks(
        cls,
        uplinks: Sequence[Uplink],
        gradient_bytes: Sequence[float],
        collect_s: float,
        round_scale: Sequence[float | None] = (),
        patterns: PatternRule = PatternRule(),
    ) -> RoundBudget:
        counts = [0] * len(gradient_bytes)
        slowest: list[float | None] = [None] * len(gradient_bytes)
        for u in uplinks:
            counts[u.stage] += 1
            slowest[u.stage] = slower_upload(slowest[u.stage], u.upload)
        return cls(counts, slowest, gradient_bytes, collect_s, round_scale, patterns)

    def round_of(self, stage: int) -> float:
        return self.scale[stage] * round_s(
            self.counts[stage], self.gradient_bytes[stage], self.slowest[stage], self.patterns
        )

    def round_joined(self, stage: int, upload: float | None) -> float:
        """`stage`'s round with one member more, pushing at `upload`."""
        slowest = slower_upload(self.slowest[stage], upload)
        return self.scale[stage] * round_s(
            self.counts[stage] + 1, self.gradient_bytes[stage], slowest, self.patterns
        )

    def admits(self, stage: int, upload: float | None) -> bool:
        return self.round_joined(stage, upload) <= self.budget_s

    def join(self, stage: int, upload: float | None) -> None:
        self.counts[stage] += 1
        self.slowest[stage] = slower_upload(self.slowest[stage], upload)


def slower_upload(a: float | None, b: float | None) -> float | None:
    """The slower of two uploads, an unmeasured one (None) never the slower: how a stage's pace is
    tallied over its members."""
    if a is None:
        return b
    return a if b is None else min(a, b)


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
"""Members a decision moves for averaging at most: several may share the slowest upload (a round is
only as short as its slowest member left), and copies to few sources queue."""
STAYING_MEMBERS = 2
"""Members a stage keeps at least when members leave it for averaging: one to serve, and one its
calls fail over to (a shorter round is not worth a stage that stalls the pipeline when its one
member dies)."""


@dataclass(frozen=True, kw_only=True)
class PacePlan:
    moves: tuple[tuple[int, int, int], ...]
    """(Peer id, stage it leaves, stage it goes to), in the order they were chosen."""
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
    round_scale: Sequence[float | None] = (),
    round_measured_s: Sequence[float | None] = (),
    patterns: PatternRule = PatternRule(),
) -> PacePlan | None:
    """Moves of members off the stages whose rounds are the step's longest, or None.

    Only while the longest round outlasts the step's collecting (`batch_size` samples at
    `pipeline_rate`), as modelled and as the stage's rounds were timed (`round_measured_s`): below
    that, averaging is not what the step waits for. Moves are chosen one at a time, each off the
    stage whose round is longest after the moves before it (then the lowest index): several stages
    may share the longest round, and shortening one of them alone gains nothing. Off a stage, its
    measured members leave slowest upload first (then the least served, then the lowest id): upload
    outliers (`OUTLIER_SHARE`) always, the others only while the longest round dominates the step
    (`DOMINANT_ROUND`); at most `MOST_PACE_MOVES` in all, and each stage keeps `STAYING_MEMBERS`.
    Each goes to the stage whose round it lengthens least, then the lowest index; its rate counts in
    the step through `rate_with_moves` (the pipeline's rate with peers on the stages given). Choosing
    stops at a stage with no candidate left, or at a member that may not move (`movable`: an
    unsettled rate), or at a stage whose rounds were never timed or were timed shorter than the
    collecting (`round_measured_s`; `round_scale` multiplies each stage's modelled rounds).

    Of the first 1, 2, ... moves, the number with the most samples over `horizon_s` is made, if any
    beats making none: the movers serve nothing while they copy (`copy_s`), so a step shortened
    counts only for the horizon after the longest copy. A number is considered only if the
    placement it leaves would refuse every mover its old stage again (`RoundBudget.admits` with the
    collecting of the pipeline after the moves): the rate plan would otherwise bring one back at the
    next decision."""
    num_stages = len(gradient_bytes)
    counts = [0] * num_stages
    measured: list[list[tuple[float, float, int]]] = [[] for _ in range(num_stages)]
    """Per stage, its measured members in the order they would leave: uploads ascending, so the
    slowest left after k of them have gone is the (k+1)-th."""
    for u in uplinks:
        counts[u.stage] += 1
        if u.upload is not None:
            measured[u.stage].append((u.upload, u.rate, u.peer_id))
    for members in measured:
        members.sort()
    gone = [0] * num_stages
    joined: list[float | None] = [None] * num_stages
    """The slowest upload among the members the moves bring to each stage."""

    def slowest(t: int) -> float | None:
        left = measured[t][gone[t]][0] if gone[t] < len(measured[t]) else None
        return _least(left, joined[t])

    scale = [scale_of(round_scale, t) for t in range(num_stages)]

    def round_at(t: int, members: int, slowest_upload: float | None) -> float:
        return scale[t] * round_s(members, gradient_bytes[t], slowest_upload, patterns)

    def rounds() -> list[float]:
        return [round_at(t, counts[t], slowest(t)) for t in range(num_stages)]

    now = rounds()
    longest = max(now, default=0.0)
    collect = step_s(batch_size, pipeline_rate, 0.0)

    def timed_past_collecting(t: int) -> bool:
        measured = round_measured_s[t] if t < len(round_measured_s) else None
        return measured is not None and measured > collect

    if longest <= 0 or longest <= collect or not any(map(timed_past_collecting, range(num_stages))):
        return None
    before = collect + longest
    dominant = longest > DOMINANT_ROUND * collect
    leaving = []
    for t, members in enumerate(measured):
        median = statistics.median(upload for upload, _, _ in members) if members else 0.0
        may = len(members) if dominant else sum(1 for m in members if m[0] < OUTLIER_SHARE * median)
        leaving.append(min(may, counts[t] - STAYING_MEMBERS))
    baseline = horizon_s / before
    best: PacePlan | None = None
    moves: list[tuple[int, int, int]] = []
    uploads: dict[int, float] = {}
    longest_copy = 0.0
    while len(moves) < MOST_PACE_MOVES:
        paced = max(range(num_stages), key=lambda t: (now[t], -t))
        if gone[paced] >= leaving[paced] or not timed_past_collecting(paced):
            break
        upload, _, peer_id = measured[paced][gone[paced]]
        if not movable(peer_id):
            break
        gone[paced] += 1
        counts[paced] -= 1
        target = min(
            (t for t in range(num_stages) if t != paced),
            key=lambda t: (round_at(t, counts[t] + 1, _least(slowest(t), upload)), t),
        )
        counts[target] += 1
        joined[target] = _least(joined[target], upload)
        moves.append((peer_id, paced, target))
        uploads[peer_id] = upload
        longest_copy = max(longest_copy, copy_s(peer_id, target))
        if longest_copy >= horizon_s:
            break
        now = rounds()
        rate_after = rate_with_moves({p: to for p, _, to in moves})
        after = step_s(batch_size, rate_after, max(now))
        allowed = averaging_budget_s(now, step_s(batch_size, rate_after, 0.0))
        comes_back = any(
            round_at(source, counts[source] + 1, _least(slowest(source), uploads[p])) <= allowed
            for p, source, _ in moves
        )
        gain = batch_size * ((horizon_s - longest_copy) / after - baseline)
        if comes_back or gain <= 0 or (best is not None and gain <= best.gain):
            continue
        best = PacePlan(
            moves=tuple(moves),
            step_before_s=before,
            step_after_s=after,
            copy_s=longest_copy,
            gain=gain,
        )
    return best


def _least(a: float | None, b: float | None) -> float | None:
    """The lower of two uploads, either of which may be unmeasured."""
    if a is None:
        return b
    return a if b is None else min(a, b)
