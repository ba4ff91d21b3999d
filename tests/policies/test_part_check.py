"""part_check: whether the owners of a butterfly round's parts summed them honestly, from the
members' projections of what they sent, received and hold."""

from __future__ import annotations

import dataclasses
import random

import pytest

from server.policies.part_check import PartReport, PartVerdict, judge_parts

ORDER = [2, 3, 4, 7]


def honest_reports(order: list[int], seed: int = 0, *, codec_noise: float = 0.0) -> dict[int, PartReport]:
    """What honest members report: sender s's projection of its part j, the same as owner j received
    it; each held part the sum of its owner's received figures (off by `codec_noise` of its norm, as
    a lossy codec leaves a summed part)."""
    rng = random.Random(seed)
    k = len(order)
    projection = [[rng.gauss(0, 1) for _ in range(k)] for _ in range(k)]
    """[sender rank][part]: the projection of the sender's part onto the part's stretch of r."""
    norms_sq = [[1.0 for _ in range(k)] for _ in range(k)]
    held = [
        sum(projection[i][j] for i in range(k)) + codec_noise * rng.gauss(0, 1) * k**0.5 for j in range(k)
    ]
    held_norms_sq = [float(k) for _ in range(k)]
    return {
        member: PartReport(
            sent=list(projection[i]),
            sent_norms_sq=list(norms_sq[i]),
            received=[projection[s][i] for s in range(k)],
            held=list(held),
            held_norms_sq=list(held_norms_sq),
        )
        for i, member in enumerate(order)
    }


def altered(report: PartReport, **lists: list[float]) -> PartReport:
    return dataclasses.replace(report, **lists)


def with_change(values: list[float], index: int, delta: float) -> list[float]:
    out = list(values)
    out[index] += delta
    return out


def test_honest_members_pass() -> None:
    for seed in range(20):
        assert judge_parts(ORDER, honest_reports(ORDER, seed), codec_error=0.0).clean


def test_an_owner_whose_sum_is_wrong_is_convicted_by_its_own_figures() -> None:
    """Owner 4 (part 2) sent everyone a part off by half its norm: every member holds it so, while
    what owner 4 itself says it received adds up to the honest sum."""
    reports = honest_reports(ORDER)
    reports = {m: altered(r, held=with_change(r.held, 2, 1.0)) for m, r in reports.items()}
    verdict = judge_parts(ORDER, reports, codec_error=0.0)
    assert verdict.convicted.keys() == {4} and not verdict.disputes
    assert "part 2" in verdict.convicted[4]


def test_an_owner_that_bends_what_it_received_to_fit_its_sum_is_in_a_dispute() -> None:
    """Owner 4 covers its wrong sum by reporting sender 7's contribution as what would fit: its
    figure and 7's of the same bytes disagree, and nobody can tell which of the two lies."""
    reports = honest_reports(ORDER)
    reports = {m: altered(r, held=with_change(r.held, 2, 1.0)) for m, r in reports.items()}
    reports[4] = altered(reports[4], received=with_change(reports[4].received, 3, 1.0))
    verdict = judge_parts(ORDER, reports, codec_error=0.0)
    assert verdict == PartVerdict(convicted={}, disputes=frozenset({(7, 4)}))


def test_a_sender_that_lies_about_what_it_sent_is_in_a_dispute_with_the_owner() -> None:
    reports = honest_reports(ORDER)
    reports[2] = altered(reports[2], sent=with_change(reports[2].sent, 1, 0.5))
    assert judge_parts(ORDER, reports, codec_error=0.0) == PartVerdict(
        convicted={}, disputes=frozenset({(2, 3)})
    )


def test_one_member_lying_about_what_it_holds_cannot_frame_an_owner() -> None:
    reports = honest_reports(ORDER)
    reports[7] = altered(reports[7], held=with_change(reports[7].held, 0, 5.0))
    assert judge_parts(ORDER, reports, codec_error=0.0).clean


@pytest.mark.parametrize(
    ("codec_error", "noise", "clean"),
    [
        pytest.param(0.02, 0.02, True, id="int8: a summed part off by the codec's error passes"),
        pytest.param(0.0, 0.02, False, id="lossless: the same is a wrong sum"),
        pytest.param(0.02, 0.5, False, id="int8: off by half its norm is a wrong sum"),
    ],
)
def test_a_lossy_codecs_error_on_the_summed_part_is_allowed_and_no_more(
    codec_error: float, noise: float, clean: bool
) -> None:
    reports = honest_reports(ORDER, 3)
    k = len(ORDER)
    # The held parts off by `noise` of their norm (sqrt(k) here), for every part alike.
    reports = {
        m: altered(r, held=[h + noise * k**0.5 * (1 if j % 2 else -1) for j, h in enumerate(r.held)])
        for m, r in reports.items()
    }
    assert judge_parts(ORDER, reports, codec_error=codec_error).clean is clean


def test_a_member_that_did_not_report_is_left_out_of_the_checks() -> None:
    """Member 3 (part 1) died before its part check: its part cannot be checked, the others can."""
    reports = honest_reports(ORDER)
    del reports[3]
    assert judge_parts(ORDER, reports, codec_error=0.0).clean
    reports = {m: altered(r, held=with_change(r.held, 0, 1.0)) for m, r in reports.items()}
    assert judge_parts(ORDER, reports, codec_error=0.0).convicted.keys() == {2}


def test_a_report_with_the_wrong_number_of_figures_is_refused() -> None:
    reports = honest_reports(ORDER)
    reports[3] = altered(reports[3], received=reports[3].received[:2])
    verdict = judge_parts(ORDER, reports, codec_error=0.0)
    assert verdict.convicted.keys() == {3} and "figures for 4 parts" in verdict.convicted[3]
