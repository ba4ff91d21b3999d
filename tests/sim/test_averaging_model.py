"""The simulator's averaging costs against cases worked by hand, the outcome fed to the coordinator's
own round policy, and what averaging does to a swarm's steps and to a fixed pipeline's rate."""

from __future__ import annotations

import dataclasses

import pytest

from server.policies.averaging import AveragingRound
from sim import swarm as sim_swarm
from sim.averaging import Pusher, all_to_all_round, butterfly_round, ring_allreduce_s
from sim.devices import LINKS, PeerKind
from sim.fixed import allreduce_s, pipeline_rate, simulate_fixed
from sim.scenario import Scenario
from sim.swarm import SwarmSim
from tests.sim.test_swarm_sim import BASE, T4

MB = 1e6


def _pusher(
    peer_id: int, upload: float = 10 * MB, download: float = 100 * MB, ready_s: float = 0.0
) -> Pusher:
    return Pusher(peer_id=peer_id, ready_s=ready_s, upload=upload, download=download, latency_s=0.0)


EVEN = [_pusher(1), _pusher(2), _pusher(3)]
SLOW_UPLOAD = [_pusher(1, upload=1 * MB), _pusher(2), _pusher(3)]
"""Member 1 pushes at 1 MB/s: its 10 MB sum reaches 2 (first in its order) at 10 s and 3 at 20 s."""


@pytest.mark.parametrize(
    ("members", "timeout_s", "reported", "missed", "ends_s"),
    [
        # Two pushes of 10 MB at 10 MB/s each, in time: the round ends when the last is in.
        (EVEN, 15.0, {1, 2, 3}, {}, 2.0),
        # A lone member averages alone, at once.
        ([_pusher(1)], 15.0, {1}, {}, 0.0),
        # 2 had everything in time and reports; 3 gives up on 1; 1's own pushes ran past its
        # timeout, so it gives up naming nobody.
        (SLOW_UPLOAD, 15.0, {2}, {3: {1}}, 20.0),
        # With less time neither has its sum: both name 1.
        (SLOW_UPLOAD, 8.0, set(), {2: {1}, 3: {1}}, 20.0),
        # A member whose upload is busy at first holds its pushes back as a slow link would.
        ([_pusher(1, ready_s=14.5), _pusher(2), _pusher(3)], 15.0, set(), {2: {1}, 3: {1}}, 16.5),
        # Member 3 takes the others' 20 MB at 1 MB/s: it misses them both.
        ([_pusher(1), _pusher(2), _pusher(3, download=1 * MB)], 15.0, {1, 2}, {3: {1, 2}}, 20.0),
    ],
)
def test_all_to_all_round(
    members: list[Pusher], timeout_s: float, reported: set[int], missed: dict[int, set[int]], ends_s: float
) -> None:
    outcome = all_to_all_round(members, 10 * MB, timeout_s)
    assert outcome.reported == reported
    assert outcome.missed == missed
    assert outcome.ends_s == pytest.approx(ends_s)
    assert outcome.complete == (reported == {m.peer_id for m in members})


@pytest.mark.parametrize(
    ("members", "held", "reported", "missed", "ends_s"),
    [
        # 1 and 2 exchanged their sums before 3 was lost: the new attempt pushes nothing.
        ([_pusher(1), _pusher(2)], {(1, 2), (2, 1)}, {1, 2}, {}, 0.0),
        # 2 holds 1's sum but 1 not 2's: one push of 10 MB at 10 MB/s.
        ([_pusher(1), _pusher(2)], {(1, 2)}, {1, 2}, {}, 1.0),
        # The slow uploader's first push (to 2) was in: only its push to 3 goes again, 10 s at 1 MB/s,
        # and 3, which had nothing of it in time before, has it now.
        (SLOW_UPLOAD, {(1, 2)}, {1, 2, 3}, {}, 10.0),
        # Held pairs of members not in the round change nothing.
        (EVEN, {(4, 1), (1, 4)}, {1, 2, 3}, {}, 2.0),
    ],
)
def test_a_new_attempt_pushes_only_the_sums_not_held_yet(
    members: list[Pusher],
    held: set[tuple[int, int]],
    reported: set[int],
    missed: dict[int, set[int]],
    ends_s: float,
) -> None:
    outcome = all_to_all_round(members, 10 * MB, 15.0, frozenset(held))
    assert outcome.reported == reported
    assert outcome.missed == missed
    assert outcome.ends_s == pytest.approx(ends_s)
    assert not held & outcome.delivered_s.keys()


def test_what_an_attempt_delivered_by_a_moment_is_what_its_pushes_had_sent() -> None:
    # Member 1 pushes at 1 MB/s to 2 (in at 10 s), then to 3 (20 s); 2 and 3 push in 1 s each.
    outcome = all_to_all_round(SLOW_UPLOAD, 10 * MB, 30.0)
    assert outcome.held_by(0.5) == frozenset()
    assert outcome.held_by(2.0) == {(2, 1), (2, 3), (3, 1), (3, 2)}
    assert outcome.held_by(10.0) == {(2, 1), (2, 3), (3, 1), (3, 2), (1, 2)}
    assert outcome.held_by(20.0) == outcome.delivered_s.keys()


@pytest.mark.parametrize(
    ("timeout_s", "drop"),
    [
        # One member had 1's sum and reported: the round goes on without all who did not (1 and 3),
        # as the real run of an upload-bound server did ("going on without peers [1, 8]").
        (15.0, {1, 3}),
        # Nobody reported: without the member the others missed.
        (8.0, {1}),
    ],
)
def test_the_coordinators_policy_drops_who_the_outcome_says(timeout_s: float, drop: set[int]) -> None:
    outcome = all_to_all_round(SLOW_UPLOAD, 10 * MB, timeout_s)
    round_ = AveragingRound(stage=0, attempt=0, group=frozenset({1, 2, 3}))
    for p in outcome.reported:
        round_.report(p, 0, [1, 2, 3], [])
    for reporter, targets in outcome.missed.items():
        for target in targets:
            round_.missed(reporter, target)
    assert not round_.complete()
    assert round_.going_on_without(frozenset()) == drop


SLOW_FIRST = [_pusher(0, upload=1 * MB)] + [_pusher(p) for p in range(1, 4)]


@pytest.mark.parametrize(
    ("members", "weights", "timeout_s", "reported", "missed", "ends_s"),
    [
        # 2(K-1)/K = 1.5 sums of 10 MB at 10 MB/s, and 2 log2(4) latency hops of nothing.
        ([_pusher(p) for p in range(4)], None, 20.0, {0, 1, 2, 3}, {}, 1.5),
        ([_pusher(p) for p in range(4)], [1, 1, 1, 1], 20.0, {0, 1, 2, 3}, {}, 1.5),
        (SLOW_FIRST, None, 12.0, set(), {1: {0}, 2: {0}, 3: {0}}, 15.0),
        # The slow member owns 1/31 of the parts: (1 + 2/31) sums through its 1 MB/s upload.
        (SLOW_FIRST, [1, 10, 10, 10], 12.0, {0, 1, 2, 3}, {}, (1 + 2 / 31) * 10),
    ],
)
def test_butterfly_round(
    members: list[Pusher],
    weights: list[int] | None,
    timeout_s: float,
    reported: set[int],
    missed: dict[int, set[int]],
    ends_s: float,
) -> None:
    outcome = butterfly_round(members, 10 * MB, timeout_s, weights)
    assert outcome.reported == reported
    assert outcome.missed == missed
    assert outcome.ends_s == pytest.approx(ends_s)


@pytest.mark.parametrize(
    ("gradient_bytes", "links", "latency_s", "seconds"),
    [
        (10 * MB, [10 * MB], 0.01, 0.0),
        # Two members: each sends and takes half the bytes twice, one step each way.
        (10 * MB, [10 * MB, 10 * MB], 0.0, 1.0),
        # The ring moves at its slowest link; 2(K-1) = 6 steps of latency.
        (20 * MB, [10 * MB, 10 * MB, 5 * MB, 10 * MB], 0.01, 2 * 3 / 4 * 20 / 5 + 6 * 0.01),
        # However many members, each moves under twice the bytes.
        (10 * MB, [10 * MB] * 100, 0.0, 2 * 99 / 100),
    ],
)
def test_ring_allreduce_s(
    gradient_bytes: float, links: list[float], latency_s: float, seconds: float
) -> None:
    assert ring_allreduce_s(gradient_bytes, links, latency_s) == pytest.approx(seconds)


def _paced(upload: float) -> PeerKind:
    return PeerKind(
        device="t4", link="datacenter", measured_link=dataclasses.replace(LINKS["datacenter"], upload=upload)
    )


def _one_paced_server(upload: float) -> Scenario:
    """12 T4s on 4 stages, the first a server only whose upload is `upload` bytes/s."""
    return dataclasses.replace(
        BASE,
        averaging="all-to-all",
        mode="static",
        compression="none",
        microbatch_size=4,
        target_batch_size=2048,
        kinds=(_paced(upload),) + (T4,) * 11,
        stages=tuple(p % 4 for p in range(12)),
        non_trainers=(0,),
        duration_s=700.0,
    )


def test_a_member_whose_pushes_miss_the_deadline_is_dropped_and_its_samples_lost() -> None:
    fast = SwarmSim(_one_paced_server(125 * MB)).run()
    assert fast.samples_lost == 0
    assert all(kept == 2048 for kept in fast.step_samples)
    # At 0.3 MB/s its two 61 MB pushes take 400 s, past the members' allowance: the member that
    # had its sum in time reports, the round goes on without the other two at the deadline, and
    # their gradients are lost.
    slow = SwarmSim(_one_paced_server(0.3 * MB)).run()
    assert slow.step_times[0] > BASE.averaging_deadline_s
    assert slow.samples_lost > 0
    assert all(kept < 2048 for kept in slow.step_samples)
    assert sum(slow.step_samples) + slow.samples_lost == slow.steps * 2048


def test_a_fixed_pipelines_throughput_falls_with_averaging_on_slow_links() -> None:
    # Three pipelines of four T4s on data-centre links, and the same with uploads of 2.5 MB/s: the
    # pipelines train alike, and the step's all-reduce goes out at each member's upload.
    share = {}
    for upload in (None, 2.5 * MB):
        kinds = (_paced(upload) if upload else T4,) * 12
        scenario = dataclasses.replace(
            BASE, mode="fixed", peers=12, kinds=kinds, target_batch_size=2048, duration_s=3600.0
        )
        model = scenario.stage_model()
        rate = pipeline_rate(kinds[:4], model)
        independent = 3 * rate * scenario.duration_s
        report = simulate_fixed(scenario)
        # Each step trains the batch over the three pipelines, then all-reduces.
        train_s = scenario.target_batch_size / (3 * rate)
        averaging_s = allreduce_s([kinds[:4]] * 3, model, scenario.compression)
        assert report.samples_committed == pytest.approx(
            independent * train_s / (train_s + averaging_s), abs=1
        )
        share[upload] = report.samples_committed / independent
    assert 0.8 < share[None] < 1.0
    assert share[2.5 * MB] < share[None] / 4


def test_a_lone_pipeline_has_nothing_to_average() -> None:
    assert allreduce_s([(T4,) * 4], BASE.stage_model(), BASE.compression) == 0.0


def test_a_round_restarted_after_a_death_pushes_only_what_the_survivors_lack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Stage 0's three members: initial peer 8 uploads at 6 MB/s, the others at 60 MB/s. Its pushes
    # hold the round up; it dies 45 s in, and when it is forgotten the two survivors have long held
    # each other's sums. The new attempt needs no push.
    kinds = tuple(_paced(6 * MB) if i == 8 else _paced(60 * MB) for i in range(12))
    scenario = dataclasses.replace(
        _one_paced_server(60 * MB), kinds=kinds, non_trainers=(), deaths=((45.0, 8),), duration_s=60.0
    )
    kept = SwarmSim(scenario)
    kept_report = kept.run()
    # The peers as they were: every attempt pushed every sum again.
    whole = sim_swarm.all_to_all_round
    monkeypatch.setattr(sim_swarm, "all_to_all_round", lambda m, w, t, held=frozenset(): whole(m, w, t))
    again = SwarmSim(scenario).run()
    one_push = kept._wire_gradient_bytes[0] / (60 * MB)
    assert kept_report.samples_lost == again.samples_lost > 0
    # The step the death restarted is later by one survivor's push (and its link's latency of a few
    # milliseconds); the steps before it are the same.
    restarted = next(i for i, t in enumerate(kept_report.step_times) if t > 45.0)
    assert again.step_times[:restarted] == kept_report.step_times[:restarted]
    assert again.step_times[restarted] - kept_report.step_times[restarted] == pytest.approx(
        one_push, abs=0.005
    )
