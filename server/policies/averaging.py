"""When a stage's gradient averaging round is complete and consistent."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from server.policies.part_check import PartReport
from swarmhub.settings import ServerSettings
from swarmhub.wire import AveragingPattern

NORM_RTOL = 1e-6
NORM_ATOL = 1e-12
"""Members add the same decoded contributions in the same order, so their sums are bit-identical
and their float64 norms agree far inside this tolerance."""


@dataclass(kw_only=True)
class AveragingRound:
    """One attempt at averaging one stage's gradients among `group` (peer ids).

    A round completes when every member reports the same contributors, namely the whole group.
    If a member is lost the coordinator starts a new attempt without it: members keep their
    local gradients until they apply a step, so a retry loses only the departed peer's share.
    A member whose contributions arrive too late (a slow upload) is found by who missed whose
    (`missed`, `holding_up`), and a retry goes on without it.
    """

    stage: int
    attempt: int
    group: frozenset[int]
    pattern: AveragingPattern = "all_to_all"
    """How this attempt's members exchange their sums, as its barrier told them."""
    check_seed: int | None = None
    """A butterfly attempt whose members all reported: the seed of its part check (`part_check`)."""
    checks: dict[int, PartReport] = field(default_factory=dict)
    checked: bool = False
    """The part check passed: a butterfly attempt is complete only then."""
    reports: dict[int, tuple[frozenset[int], frozenset[str]]] = field(default_factory=dict)
    norms_sq: dict[int, float] = field(default_factory=dict)
    missing: dict[int, frozenset[int]] = field(default_factory=dict)
    """Member -> the members whose contribution to this attempt it gave up waiting for."""
    _disagreeing: set[int] = field(default_factory=set, init=False, repr=False)
    """Reporters whose contributors are not the group. Kept with every report because the
    coordinator asks whether a round is complete at every report and every step event: comparing
    each report's contributors anew made that O(K^2) a question, 5% of the simulator's time at
    10,000 peers (stages of 300-650 members)."""

    def report(
        self, peer_id: int, attempt: int, contributors: list[int], counted: list[str], norm_sq: float = 0.0
    ) -> None:
        if attempt != self.attempt or peer_id not in self.group:
            return
        agreed = frozenset(contributors)
        self.reports[peer_id] = (agreed, frozenset(counted))
        self.norms_sq[peer_id] = norm_sq
        if agreed == self.group:
            self._disagreeing.discard(peer_id)
        else:
            self._disagreeing.add(peer_id)

    def missed(self, reporter: int, target: int) -> bool:
        """`reporter` gave up waiting for `target`'s contribution (its push did not arrive in time).
        True if nobody had missed `target` in this attempt before: it held the round up once more."""
        if reporter == target or not {reporter, target} <= self.group:
            return False
        first = not self.was_missed(target)
        self.missing[reporter] = self.missing.get(reporter, frozenset()) | {target}
        return first

    def was_missed(self, peer_id: int) -> bool:
        """Some member of this attempt gave up waiting for `peer_id`'s contribution."""
        return any(peer_id in targets for targets in self.missing.values())

    def holding_up(self) -> frozenset[int]:
        """The members to go on without so that no one left misses anyone's contribution: a small
        cover of the missed pairs, greedily the member in most of them first; on a tie the one missed
        most (a slow uploader is missed, a member that cannot receive misses), then the lowest id.

        A slow uploader's pushes may reach some members in time and not others (they go out one
        after another), so it may be missed by a single member and probed reachable: it is still the
        one holding the round up, and dropping it costs only its own share, not the stage's."""
        pairs = {(reporter, target) for reporter, targets in self.missing.items() for target in targets}
        drop: set[int] = set()
        while pairs:
            members = {peer for pair in pairs for peer in pair}
            worst = max(
                members,
                key=lambda peer: (
                    sum(peer in pair for pair in pairs),
                    sum(target == peer for _, target in pairs),
                    -peer,
                ),
            )
            drop.add(worst)
            pairs = {pair for pair in pairs if worst not in pair}
        return frozenset(drop)

    def going_on_without(self, blamed: frozenset[int] | set[int]) -> frozenset[int]:
        """Who a round past its deadline goes on without: the members that did not report, if any
        did; else those holding it up (`holding_up`); else those the coordinator blames. Empty: nobody
        to blame (the stage takes an empty step)."""
        reported = frozenset(self.reports)
        if reported == self.group and self.check_seed is not None:
            # Stuck at the part check: those that did not answer it.
            return self.group - frozenset(self.checks)
        if reported:
            return self.group - reported
        return self.holding_up() or self.group & frozenset(blamed)

    def grad_sum_norm_sq(self) -> float:
        """Squared norm of the stage's summed gradient, as its members agree on it.

        After averaging every member holds the same sum (added in the same order), so honest
        figures agree to rounding. With three or more members the median is the agreed value and
        a liar cannot move it; with two, neither is a majority and the smaller figure is used: a
        member can then only make clipping laxer, never shrink the whole swarm's step."""
        values = sorted(self.norms_sq.values())
        if not values:
            return 0.0
        return values[0] if len(values) <= 2 else statistics.median(values)

    def disagreeing(self) -> frozenset[int]:
        """Members whose reported norm differs from the agreed one beyond rounding; with fewer than
        three members there is no majority to disagree with."""
        if len(self.norms_sq) < 3:
            return frozenset()
        agreed = self.grad_sum_norm_sq()
        return frozenset(
            peer_id
            for peer_id, value in self.norms_sq.items()
            if not math.isclose(value, agreed, rel_tol=NORM_RTOL, abs_tol=NORM_ATOL)
        )

    def reported_all(self) -> bool:
        """Every member reported the same contributors, the whole group."""
        return len(self.reports) == len(self.group) and not self._disagreeing

    def complete(self) -> bool:
        """Every member reported, and in a butterfly the part check passed."""
        return self.reported_all() and (self.pattern != "butterfly" or self.checked)

    def awaits_check(self) -> bool:
        """A butterfly attempt whose reports are in and whose parts have not been checked yet."""
        return self.pattern == "butterfly" and self.reported_all() and not self.checked

    def check(self, peer_id: int, attempt: int, report: PartReport) -> None:
        if attempt == self.attempt and peer_id in self.group and self.check_seed is not None:
            self.checks[peer_id] = report

    def inconsistent(self) -> bool:
        """Some member averaged over a different set of peers than the group: the attempt is void."""
        return bool(self._disagreeing)

    def counted(self) -> list[str]:
        ids: set[str] = set()
        for _, counted in self.reports.values():
            ids |= counted
        return sorted(ids)

    def restarts_without(self, peer_id: int, *, distrusted: bool = False) -> bool:
        """Whether losing `peer_id` calls for a new attempt. Not once every member reported (a
        butterfly's part check then goes on without the lost member's figures), unless
        the peer was removed as faulty (its contribution is not to be kept): every member holds the
        sum all of them agreed on, the lost one's contribution included, and the others apply it
        without it. Restarting a complete round throws a finished average away, and in a large swarm
        whose members die every minute or two, a stage whose averaging takes longer than that (many
        members, slow links) would rarely see all its rounds complete at once."""
        return peer_id in self.group and (distrusted or not self.reported_all())

    def without(self, *peer_ids: int) -> AveragingRound:
        """The next attempt, without these members (lost, or holding the round up)."""
        return AveragingRound(stage=self.stage, attempt=self.attempt + 1, group=self.group - set(peer_ids))


BUTTERFLY_FROM_MEMBERS: int = ServerSettings.model_fields["butterfly_from_members"].default
"""Rounds of this many members or more average in a butterfly (the coordinator's setting)."""
ALL_TO_ALL_MOST_EXTRA_S: float = ServerSettings.model_fields["all_to_all_most_extra_s"].default
"""Smaller rounds go in a butterfly too where all-to-all would take this many seconds longer (the
coordinator's setting)."""


@dataclass(frozen=True, kw_only=True)
class PatternRule:
    """How the coordinator picks a round's pattern (`averaging_pattern`): its two settings."""

    butterfly_from: int = BUTTERFLY_FROM_MEMBERS
    most_extra_s: float = ALL_TO_ALL_MOST_EXTRA_S


ALL_TO_ALL_ALWAYS = PatternRule(butterfly_from=1 << 30, most_extra_s=math.inf)
"""Every round all-to-all: what the peers did before `peer/butterfly.py`."""


def averaging_pattern(
    members: int,
    sum_bytes: float = 0.0,
    slowest_upload: float | None = None,
    rule: PatternRule = PatternRule(),
) -> AveragingPattern:
    """How a round of `members` exchanges its sums of `sum_bytes`. All-to-all sends each member's
    whole sum to the K-1 others: every member adds every contribution itself, so each contribution's
    norm is reported by K-1 members and a liar among them cannot move the median, and a new attempt
    pushes only the sums not delivered yet; but a member's traffic grows with K, and in the simulator
    a 300-member stage (10,000 peers over 32 stages) never finished a round. A butterfly sends and
    takes 2(K-1)/K sums per member whatever K: each member sums one K-th of every contribution and
    sends that part back to all.

    Rounds of `rule.butterfly_from` members or more go in a butterfly. Smaller ones from 3 members
    (where a butterfly sends less) go in one too where all-to-all at the slowest member's measured
    upload would take more than `rule.most_extra_s` longer: the stronger check is kept where it is
    cheap. In the simulator's 1,000-peer swarm the rate plan gave the embeddings' stage (14 MB sums)
    5 members, whose all-to-all round took 153 s a step against 31 s for every butterfly stage: 0.102
    of ideal, 0.135 with this rule (`docs/benchmarks.md`)."""
    if members >= rule.butterfly_from:
        return "butterfly"
    if members < 3 or slowest_upload is None or slowest_upload <= 0:
        return "all_to_all"
    saved = sums_each_way("all_to_all", members) - sums_each_way("butterfly", members)
    return "butterfly" if saved * sum_bytes / slowest_upload > rule.most_extra_s else "all_to_all"


def sums_each_way(pattern: AveragingPattern, members: int) -> float:
    """Sums' worth a member of a round of `members` sends, and as many it takes."""
    if members < 2:
        return 0.0
    return 2 * (members - 1) / members if pattern == "butterfly" else float(members - 1)


PUSH_BASE_S = 10.0
ASSUMED_LINK_BYTES_PER_S = 5e6
"""What a peer allows itself to push a stage's gradients with no word from the coordinator
(`peer.transport.transfer_timeout_s`): a fixed start plus the bytes at this rate."""
SLOWEST_LINK_WAITED_FOR = ASSUMED_LINK_BYTES_PER_S / 10
"""A member measured slower than this is not waited for: the round goes on without it (choked
links would otherwise hold every step for minutes)."""


def own_push_sums(pattern: AveragingPattern, members: int) -> float:
    """The sums' worth a peer sizes its own allowance by (`peer.transport.transfer_timeout_s`): the
    whole group's for all-to-all (a margin over the K-1 it sends), two for a butterfly."""
    return float(members) if pattern == "all_to_all" else 2.0


def push_allowance_s(
    stage_bytes: float, members: int, slowest_link: float | None, pattern: AveragingPattern = "all_to_all"
) -> float:
    """Seconds the members of a round of `members` give their exchange before they give up on a
    member: what a peer allows itself by default, or, if a member's link was measured slower, what
    that member needs to send its share and take the others' (links are measured as bytes both ways
    per second: 2(K-1) sums all-to-all, 4(K-1)/K in a butterfly), at a rate no lower than
    `SLOWEST_LINK_WAITED_FOR`."""
    own = PUSH_BASE_S + stage_bytes * own_push_sums(pattern, members) / ASSUMED_LINK_BYTES_PER_S
    if slowest_link is None:
        return own
    rate = max(slowest_link, SLOWEST_LINK_WAITED_FOR)
    return max(own, PUSH_BASE_S + 2 * sums_each_way(pattern, members) * stage_bytes / rate)


def pushing_rate(link: float | None, rounds_held_up: int) -> float | None:
    """The rate a member's pushes are given time for: its measured link, halved for each round it
    held up (others gave up waiting for its contribution, `AveragingRound.missed`). The reading is
    of calls' bytes both ways over their time on the wire (`peer.links`), which on an asymmetric
    link can be well above what the upload alone carries, and the pushes go only through the upload;
    a member found too slow once is given time for half that rate the next time. Time given costs
    nothing unless the member fails (a round ends when its last sum is in), and `push_allowance_s`
    still caps it at `SLOWEST_LINK_WAITED_FOR`. None: nothing measured and never held a round up."""
    if rounds_held_up <= 0:
        return link
    # Past ~30 halvings any measured rate is under the floor: the exponent stays a float's.
    return (link if link is not None else ASSUMED_LINK_BYTES_PER_S) / 2.0 ** min(rounds_held_up, 64)


def round_limit_s(averaging_deadline_s: float, push_allowance: float) -> float:
    """How long a round may take before it goes on without the members holding it up: twice what its
    members give their exchange (they give up and report first), and no less than the deadline."""
    return max(averaging_deadline_s, 2 * push_allowance)


PROPORTION_LIMIT = 10.0
"""How far a member's gradient norm per counted sample may exceed the stage's reference. Honest
members differ by at most the square root of the ratio of their sample counts (sums of uncorrelated
per-sample gradients grow with its square root, of aligned ones linearly): under 3x for microbatch
counts within 1:8. A contribution scaled tenfold or more is out of all proportion."""


def per_sample_norm(norm_sq: float, samples: int) -> float:
    """A contribution's gradient norm per sample it counts; infinite for a gradient with no samples."""
    norm = math.sqrt(norm_sq)
    if samples <= 0:
        return math.inf if norm > 0 else 0.0
    return norm / samples


def out_of_proportion(contributions: dict[int, tuple[float, int]], history: list[float]) -> dict[int, float]:
    """Members whose contribution (peer id -> (squared norm, samples counted)) is out of all proportion
    to its samples, with how many times the reference it is.

    With three or more members the reference is the median norm per sample among them (a liar cannot
    move it). With two, each is held against the other, or against the median of the stage's recent
    accepted rounds (`history`) if that is larger: the other may be a liar that shrank its own, and a
    spike the whole stage shares is nobody's fault. A lone member, or two with no history yet, has
    nothing to be held against. A gradient that counts no samples is always out; an empty one (no
    samples, nothing summed: a member routed no work, say one whose rate restarted when it copied its
    stage again) is neither judged nor a reference, so the member that did the step's work is not held
    against history alone when the stage's gradients spike."""
    rates = {
        peer: per_sample_norm(norm_sq, samples)
        for peer, (norm_sq, samples) in contributions.items()
        if samples > 0 or norm_sq > 0
    }
    flagged = {peer: math.inf for peer, rate in rates.items() if math.isinf(rate)}
    finite = {peer: rate for peer, rate in rates.items() if not math.isinf(rate)}
    if len(finite) >= 3:
        median = statistics.median(finite.values())
        references = dict.fromkeys(finite, median)
    elif len(finite) == 2 and history:
        floor = statistics.median(history)
        (a, rate_a), (b, rate_b) = finite.items()
        references = {a: max(rate_b, floor), b: max(rate_a, floor)}
    else:
        return flagged
    for peer, rate in finite.items():
        reference = references[peer]
        if reference > 0 and rate > PROPORTION_LIMIT * reference:
            flagged[peer] = rate / reference
    return flagged
