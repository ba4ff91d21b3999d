"""Verified computation: spot-check mismatches refereed by a third peer, contributions checked against
the samples they count (rejected, and their member banned when it keeps happening), and the peer
found wrong banned.

The layer between `Membership` and `RunMachine`. A convicted peer is handled like any departed one
(`_forget`): whatever it contributed to the open step is left out of its stage's average and booked
lost there, so the step's books still balance, and its identity (join token and data-plane key) may
not rejoin the run.
"""

from __future__ import annotations

import random
import secrets
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from server.policies.arbitration import (
    CASE_TTL_S,
    MAX_OPEN_CASES_PER_REPORTER,
    Case,
    Finding,
    choose_referee,
    involved_in,
    judge,
)
from server.policies.averaging import out_of_proportion, per_sample_norm
from server.policies.part_check import PartReport, judge_parts
from server.swarm import decisions as do
from server.swarm.members import Member
from server.swarm.membership import Membership
from server.swarm.step_cycle import Phase
from swarmhub.run_settings import CODEC_ERROR
from swarmhub.status import PeerState
from swarmhub.wire import (
    FAULTY_CLOSE_CODE,
    Arbitrate,
    ArbitrationVerdict,
    AveragingDone,
    CheckParts,
    CheckTally,
    ContributionNorm,
    PartsChecked,
    SpotCheckMismatch,
)

REJECTIONS_TO_BAN = 3
"""Rounds in a row whose contribution was rejected before its member is banned. One rejected round
can befall an honest member: gradients of microbatches that another, faulty, peer's outputs poisoned
upstream are large too (seen in bench/verification.py with a noisy peer before spot checks caught
it); a liar that scales its contribution is rejected every round."""
NORM_HISTORY = 64
"""Accepted per-sample norms kept per stage: the reference when a round has fewer than three members."""
CLOSE_REASON_CHARS = 120
"""A websocket close reason holds at most 123 bytes."""


class Verification(Membership):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cases: dict[int, Case] = {}
        self._last_case_id = 0
        self._rng = random.Random(self.spec.run_id)
        self._contributions: dict[int, tuple[int, dict[int, list[ContributionNorm]]]] = {}
        """Stage -> (attempt, member -> the contributions it reported in that averaging attempt)."""
        self._norm_history: dict[int, deque[float]] = {}

    # ---- what spot checks cost -------------------------------------------------------------------

    def _count_checks(self, member: Member, tally: CheckTally) -> None:
        before = member.check_tally
        restarted = tally.calls < before.calls or tally.bytes < before.bytes or tally.seconds < before.seconds
        if restarted:
            before = CheckTally()
        self.book.add_checks(
            tally.calls - before.calls,
            tally.bytes - before.bytes,
            tally.seconds - before.seconds,
            tally.largest_agreeing,
        )
        member.check_tally = tally

    # ---- spot-check mismatches -------------------------------------------------------------------

    def _mismatch(self, reporter: Member, message: SpotCheckMismatch, now: float) -> None:
        checked = self.members.get(message.checked)
        checker = self.members.get(message.checker)
        if checked is None or checker is None or checked is checker:
            return  # a party already left (or was removed): nothing to settle
        if checked.stage != message.stage or checker.stage != message.stage:
            return  # one of them moved since: its result was for a stage it no longer serves
        if not (
            self._had_reason_to_call(reporter, checked, now)
            and self._had_reason_to_call(reporter, checker, now)
        ):
            self._strike(
                reporter, "reported a spot-check mismatch between peers it had no reason to call", now
            )
            return
        open_cases = sum(1 for case in self.cases.values() if case.reporter == reporter.peer_id)
        if open_cases >= MAX_OPEN_CASES_PER_REPORTER:
            self._strike(reporter, f"reported more than {open_cases} mismatches awaiting a verdict", now)
            return
        self._last_case_id += 1
        case = Case(case_id=self._last_case_id, reporter=reporter.peer_id, mismatch=message, opened_at=now)
        self.cases[case.case_id] = case
        self._event(
            "spot_check_mismatch",
            f"{reporter.name} found {checked.name} and {checker.name} disagreeing on a stage {message.stage} "
            f"{message.kind} call (discrepancy {message.discrepancy:.3g}, tolerance {message.tolerance:.3g})",
            checked,
            case_id=case.case_id,
            stage=message.stage,
            step=message.step,
            checker=checker.peer_id,
            reporter=reporter.peer_id,
            discrepancy=message.discrepancy,
            tolerance=message.tolerance,
        )
        self._name_referee(case, now)

    def _name_referee(self, case: Case, now: float) -> None:
        reporter = self.members.get(case.reporter)
        if reporter is None:
            return
        ready = self.ready(case.mismatch.stage)
        referee = choose_referee(
            (m.peer_id for m in ready), case, self._rng, frozenset(m.peer_id for m in ready if m.trusted)
        )
        if referee is None:
            # No third peer of the stage: bring a trusted one; tried again on each tick until the case
            # has a referee or expires.
            self._recruit_verifier(case, now)
            return
        case.referee = referee
        self._send(
            reporter,
            Arbitrate(
                case=case.mismatch.case, case_id=case.case_id, referee=self.members[referee].endpoint()
            ),
        )

    def _recruit_verifier(self, case: Case, now: float) -> None:
        """Assign a trusted peer (verifier token) to the case's stage so it can referee once loaded; it
        copies the stage's state from both parties and serves only if their states agree."""
        stage = case.mismatch.stage
        recruited = self.members.get(case.recruited) if case.recruited is not None else None
        if recruited is not None and recruited.stage == stage:
            return  # still loading the stage
        # A verifier already brought to, or named in, another case stays there: taken back and forth it
        # would never finish loading either stage.
        others = [c for c in self.cases.values() if c is not case]
        engaged = {c.recruited for c in others} | {c.referee for c in others}
        candidates = [
            m
            for m in self.members.values()
            if m.trusted
            and m.reachable
            and m.peer_id not in involved_in(case)
            and m.peer_id not in engaged
            and m.stage != stage
            # Taking it must not leave its own stage without a peer.
            and (m.stage is None or not m.ready or len(self.ready(m.stage)) >= 2)
        ]
        if not candidates:
            return
        verifier = min(candidates, key=lambda m: m.peer_id)
        case.recruited = verifier.peer_id
        self._event(
            "spot_check_referee",
            f"{verifier.name} (trusted verifier) brought to stage {stage} to referee spot-check case "
            f"{case.case_id}: the stage has no third peer",
            verifier,
            case_id=case.case_id,
            stage=stage,
        )
        self._assign(verifier, stage, f"to referee spot-check case {case.case_id}", now)
        self._send_view(now)

    def _verdict(self, referee: Member, message: ArbitrationVerdict, now: float) -> None:
        case = self.cases.get(message.case_id)
        if case is None or case.referee != referee.peer_id:
            self._strike(
                referee, f"sent a verdict on case {message.case_id} it was not asked to referee", now
            )
            return
        del self.cases[case.case_id]
        mismatch = case.mismatch
        finding = judge(message)
        data = {
            "case_id": case.case_id,
            "stage": mismatch.stage,
            "step": mismatch.step,
            "call_kind": mismatch.kind,
            "checked": mismatch.checked,
            "checker": mismatch.checker,
            "referee": referee.peer_id,
            "reporter": case.reporter,
            "finding": finding.value,
            "discrepancy_checked": message.discrepancy_checked,
            "discrepancy_checker": message.discrepancy_checker,
            "tolerance": message.tolerance,
        }
        if finding in (Finding.CHECKED_FAULTY, Finding.CHECKER_FAULTY):
            guilty_id, honest_id = (
                (mismatch.checked, mismatch.checker)
                if finding == Finding.CHECKED_FAULTY
                else (mismatch.checker, mismatch.checked)
            )
            off = (
                message.discrepancy_checked
                if finding == Finding.CHECKED_FAULTY
                else message.discrepancy_checker
            )
            guilty = self.members.get(guilty_id)
            if guilty is not None:
                self._ban_faulty(
                    guilty,
                    f"its stage {mismatch.stage} {mismatch.kind} result for step {mismatch.step} disagreed "
                    f"with peers {honest_id} and {referee.peer_id} (discrepancy {off:.3g}, tolerance "
                    f"{message.tolerance:.3g})",
                    now,
                    **data,
                )
            return
        reporter = self.members.get(case.reporter)
        if finding == Finding.UNFOUNDED and reporter is not None:
            self._strike(
                reporter, f"reported a mismatch the referee found unfounded (case {case.case_id})", now
            )
        self._event(
            f"spot_check_{finding.value}",
            f"spot check case {case.case_id} on stage {mismatch.stage}: "
            + (
                "the referee agrees with both results; nobody is faulty"
                if finding == Finding.UNFOUNDED
                else f"not settled ({message.detail or 'the referee agrees with neither result'})"
            ),
            referee,
            **data,
        )

    def _expire_cases(self, now: float) -> None:
        for case in list(self.cases.values()):
            if now - case.opened_at > CASE_TTL_S:
                del self.cases[case.case_id]
                why = "no third peer of the stage" if case.referee is None else "the referee never answered"
                self._event(
                    "spot_check_unresolved",
                    f"spot check case {case.case_id} on stage {case.mismatch.stage} dropped: {why}",
                    None,
                    case_id=case.case_id,
                    stage=case.mismatch.stage,
                )
            elif case.referee is None:
                self._name_referee(case, now)

    # ---- contributions at averaging --------------------------------------------------------------

    def _averaging_reported(self, member: Member, message: AveragingDone, now: float) -> None:
        """Keep a member's view of its round's contributions; once the round is complete, reject any
        contribution out of all proportion to the samples it counts (before the step is applied: the
        round is retried without its member)."""
        round_ = self.rounds.get(message.stage)
        if round_ is None or message.attempt != round_.attempt:
            return
        attempt, reports = self._contributions.get(message.stage, (round_.attempt, {}))
        if attempt != round_.attempt:
            reports = {}
        reports[member.peer_id] = message.contributions
        self._contributions[message.stage] = (round_.attempt, reports)
        if not round_.reported_all() or self.phase != Phase.AVERAGING:
            return
        contributions = (
            _butterfly_contributions(round_.group, reports, self.book.samples_of)
            if round_.pattern == "butterfly"
            else _all_to_all_contributions(round_.group, reports, self.book.samples_of)
        )
        history = self._norm_history.setdefault(message.stage, deque(maxlen=NORM_HISTORY))
        flagged = out_of_proportion(contributions, list(history))
        del self._contributions[message.stage]
        for peer_id in contributions.keys() - flagged.keys():
            # Only a gradient judged and accepted starts the count again: an empty one (a member
            # routed no work this step, as one just back from copying its stage may be) says nothing,
            # and let a liar rejected every round it worked go on unbanned.
            if peer_id in self.members and contributions[peer_id][1] > 0:
                self.members[peer_id].rejected_rounds = 0
        if not flagged:
            history.extend(per_sample_norm(n, s) for n, s in contributions.values() if s > 0)
            return
        rejected = []
        for peer_id, times in sorted(flagged.items()):
            offender = self.members.get(peer_id)
            if offender is None:
                continue
            norm_sq, samples = contributions[peer_id]
            ratio = "with no samples counted" if times == float("inf") else f"{times:.0f}x the stage's norm"
            why = (
                f"its stage {message.stage} gradient for step {message.step} (norm {norm_sq**0.5:.4g} over "
                f"{samples} samples) is {ratio} per sample"
            )
            data = {"stage": message.stage, "step": message.step, "samples": samples, "norm": norm_sq**0.5}
            offender.rejected_rounds += 1
            if offender.rejected_rounds >= REJECTIONS_TO_BAN:
                self._ban_faulty(
                    offender,
                    f"{why}; rejected {offender.rejected_rounds} rounds in a row",
                    now,
                    finding="out_of_proportion",
                    **data,
                )
                continue
            offender.ready = False
            offender.waiting_reason = "its gradient was rejected; copying the stage again"
            rejected.append(offender.peer_id)
            self._event(
                "contribution_rejected",
                f"{offender.name}: {why}; left out of the step ({offender.rejected_rounds} in a row, "
                f"banned at {REJECTIONS_TO_BAN})",
                offender,
                rejected_in_a_row=offender.rejected_rounds,
                **data,
            )
        if rejected and message.stage in self.rounds:
            self._restart_round(message.stage, frozenset(rejected), now)

    # ---- part checks of butterfly rounds -----------------------------------------------------------

    def _maybe_check_parts(self, stage: int) -> None:
        """Ask the members of a butterfly round whose reports are all in (and whose contributions
        passed) to check its parts, with a seed none of them could know while they sent them."""
        round_ = self.rounds.get(stage)
        if self.phase != Phase.AVERAGING or round_ is None or not round_.awaits_check():
            return
        if round_.check_seed is not None:
            return
        round_.check_seed = secrets.randbits(63)
        live = tuple(p for p in sorted(round_.group) if p in self.members)
        message = CheckParts(step=self.book.step, attempt=round_.attempt, stage=stage, seed=round_.check_seed)
        self._out.append(do.Send(peer_ids=live, message=message))

    def _parts_checked(self, member: Member, message: PartsChecked, now: float) -> None:
        round_ = self.rounds.get(message.stage)
        if self.phase != Phase.AVERAGING or message.step != self.book.step or round_ is None:
            return
        report = PartReport(
            sent=message.sent,
            sent_norms_sq=message.sent_norms_sq,
            received=message.received,
            held=message.held,
            held_norms_sq=message.held_norms_sq,
        )
        round_.check(member.peer_id, message.attempt, report)
        self._maybe_judge_parts(message.stage, now)

    def _maybe_judge_parts(self, stage: int, now: float) -> None:
        round_ = self.rounds.get(stage)
        if round_ is None or not round_.awaits_check() or round_.check_seed is None:
            return
        live = round_.group & self.members.keys()
        if not live <= round_.checks.keys():
            return
        reports = {p: r for p, r in round_.checks.items() if p in live}
        verdict = judge_parts(sorted(round_.group), reports, CODEC_ERROR[self.spec.compression])
        step = self.book.step
        if verdict.clean:
            round_.checked = True
            for peer_id in live:
                self.members[peer_id].disputed_rounds = 0
            self._round_completed(stage, now)
            self._maybe_record(now)
            return
        disputed = {p for pair in verdict.disputes for p in pair} - verdict.convicted.keys()
        for peer_id, why in sorted(verdict.convicted.items()):
            if peer_id in self.members:
                self._ban_faulty(
                    self.members[peer_id],
                    f"{why}, in stage {stage}'s averaging for step {step}",
                    now,
                    finding="part_sum",
                    stage=stage,
                    step=step,
                )
        dropped = []
        for peer_id in sorted(disputed & self.members.keys()):
            member = self.members[peer_id]
            member.disputed_rounds += 1
            others = sorted(q for pair in verdict.disputes if peer_id in pair for q in pair if q != peer_id)
            why = f"its part check disagrees with peers {others}' on what passed between them"
            if member.disputed_rounds >= REJECTIONS_TO_BAN:
                self._ban_faulty(
                    member,
                    f"{why}; {member.disputed_rounds} rounds in a row",
                    now,
                    finding="part_dispute",
                    stage=stage,
                    step=step,
                )
                continue
            member.ready = False
            member.waiting_reason = "its part check was disputed; copying the stage again"
            dropped.append(peer_id)
            self._event(
                "parts_disputed",
                f"{member.name}: {why}; left out of the step ({member.disputed_rounds} in a row, banned at "
                f"{REJECTIONS_TO_BAN})",
                member,
                stage=stage,
                step=step,
                disputed_in_a_row=member.disputed_rounds,
            )
        if dropped and stage in self.rounds:
            self._restart_round(stage, frozenset(dropped), now)

    # ---- verdicts --------------------------------------------------------------------------------

    def _ban_faulty(self, target: Member, reason: str, now: float, **data: object) -> None:
        """Remove a peer found computing wrong results, for good: its channel is closed, its tickets
        revoked and its identity banned from the run; its share of the open step is lost."""
        for case_id in [c.case_id for c in self.cases.values() if target.peer_id in involved_in(c)]:
            del self.cases[case_id]
        self._out.append(
            do.Close(
                peer_id=target.peer_id,
                code=FAULTY_CLOSE_CODE,
                reason=f"banned: {reason}"[:CLOSE_REASON_CHARS],
            )
        )
        self._event("peer_faulty", f"{target.name} banned as faulty: {reason}", target, **data)
        self._forget(target, now, distrusted=True)
        self._depart(target, PeerState.BANNED, f"faulty: {reason}")


def _all_to_all_contributions(
    group: frozenset[int], reports: dict[int, list[ContributionNorm]], samples_of: Callable[[list[str]], int]
) -> dict[int, tuple[float, int]]:
    """Contributor -> (squared norm, samples counted) from an all-to-all round: the median of the
    other members' views, the contributor's own only as a last resort (receivers decode the same
    bytes, so their figures agree whatever the contributor claims)."""
    contributions: dict[int, tuple[float, int]] = {}
    for contributor in group:
        views = [
            c
            for reporter, listed in reports.items()
            if reporter != contributor
            for c in listed
            if c.peer_id == contributor
        ] or [c for c in reports.get(contributor, []) if c.peer_id == contributor]
        if views:
            view = sorted(views, key=lambda c: c.norm_sq)[len(views) // 2]
            contributions[contributor] = (view.norm_sq, samples_of(view.counted))
    return contributions


def _butterfly_contributions(
    group: frozenset[int], reports: dict[int, list[ContributionNorm]], samples_of: Callable[[list[str]], int]
) -> dict[int, tuple[float, int]]:
    """Contributor -> (squared norm, samples counted) from a butterfly round: each member summed one
    part of every contribution, and the parts' squared norms add up to the whole's. There is one view
    of each part, so a member that lies about a part it summed moves that contributor's figure; the
    samples counted are the ones most members list (each got them with the contributor's own part)."""
    contributions: dict[int, tuple[float, int]] = {}
    for contributor in group:
        views = [c for listed in reports.values() for c in listed if c.peer_id == contributor]
        if not views:
            continue
        counted = Counter(tuple(c.counted) for c in views).most_common(1)[0][0]
        contributions[contributor] = (sum(c.norm_sq for c in views), samples_of(list(counted)))
    return contributions
