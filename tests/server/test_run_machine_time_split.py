"""Where a step's time goes, as the run's state machine books it: compute, network, waiting, averaging
and the coordinator's part add up to one whole step, and compute and network come from the stage
calls peers served."""

from __future__ import annotations

import itertools

import pytest

from server.policies.step_time import StageBusy
from server.swarm import decisions as do
from server.swarm import inputs as on
from swarmhub.wire import (
    ActivationCacheTally,
    Heartbeat,
    MicrobatchDone,
    MicrobatchFailed,
    ServedCall,
    WorkGrant,
    WorkRequest,
)
from tests.server.test_run_machine import Swarm, of, sent, two_by_one

TRAINER = 1


def timed_step(
    swarm: Swarm,
    *,
    collect: float,
    average: float,
    record: float,
    apply: float,
    compute: list[dict[int, float]],
    network: float = 0.0,
) -> do.RecordStep:
    """One whole step whose phases take these seconds: microbatches are granted at once and all come
    back `collect` later (`compute[i]`: serving peer -> compute seconds of the i-th one's calls, each
    call `network` seconds on the network); then averaging, the step's write and the apply take theirs."""
    grants: list[WorkGrant] = []
    while isinstance(reply := sent(swarm.say(TRAINER, WorkRequest()), TRAINER)[0], WorkGrant):
        grants.append(reply)
    swarm.now += collect
    for i, grant in enumerate(grants):
        served = [
            ServedCall(
                peer_id=peer,
                samples=grant.samples,
                seconds=collect,
                compute_seconds=seconds,
                network_seconds=network,
            )
            for peer, seconds in compute[i].items()
        ]
        swarm.say(
            TRAINER,
            MicrobatchDone(
                step=grant.step,
                microbatch_id=grant.microbatch_id,
                samples=grant.samples,
                loss=2.0,
                served=served,
            ),
        )
    swarm.now += average
    (written,) = of(swarm.average([g.microbatch_id for g in grants]), do.RecordStep)
    swarm.now += record
    swarm.feed(on.StepRecorded(now=swarm.now, step=written.step))
    swarm.now += apply
    swarm.apply_all()
    return written


def parts(record: do.RecordStep) -> tuple[float, float, float, float]:
    """The four parts of the steps that report no network time (their network part is 0)."""
    assert record.time_network_s == 0.0
    return (record.time_compute_s, record.time_waiting_s, record.time_averaging_s, record.time_coordinator_s)


@pytest.mark.parametrize(
    ("compute", "expected_compute"),
    [
        # Peer 1 computed 0.3 s per microbatch, peer 2 0.5 s: each was busy for its sum, and the
        # step's compute is their mean.
        ([{1: 0.3, 2: 0.5}, {1: 0.3, 2: 0.5}], (0.6 + 1.0) / 2),
        # Peers that say nothing of their compute (older peers) leave it all to waiting.
        ([{1: 0.0, 2: 0.0}, {1: 0.0, 2: 0.0}], 0.0),
        # A peer that served but computed nothing still counts among the serving peers.
        ([{1: 0.0, 2: 1.0}, {1: 0.0, 2: 1.0}], 2.0 / 2),
        # The mean busy time never exceeds the time the step was collecting.
        ([{1: 3.0, 2: 3.0}, {1: 3.0, 2: 3.0}], 4.0),
    ],
)
def test_collecting_splits_into_the_serving_peers_mean_compute_and_waiting(
    compute: list[dict[int, float]], expected_compute: float
) -> None:
    swarm = two_by_one()
    record = timed_step(swarm, collect=4.0, average=1.5, record=0.25, apply=0.5, compute=compute)
    assert parts(record) == pytest.approx((expected_compute, 4.0 - expected_compute, 1.5, 0.0))


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        # (collect, average, record, apply) of each step -> the parts booked with each step.
        (
            [(4.0, 1.0, 0.5, 0.25), (2.0, 3.0, 1.0, 1.0), (1.0, 1.0, 0.0, 0.0)],
            [(0.5, 3.5, 1.0, 0.0), (0.5, 1.5, 3.0, 0.75), (0.5, 0.5, 1.0, 2.0)],
        ),
        ([(1.0, 0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0)], [(0.5, 0.5, 0.0, 0.0), (0.5, 0.5, 0.0, 0.0)]),
    ],
)
def test_the_parts_add_up_to_the_time_between_two_steps_records(
    phases: list[tuple[float, float, float, float]], expected: list[tuple[float, float, float, float]]
) -> None:
    swarm = two_by_one()
    started = swarm.now
    records, recorded_at = [], []
    for collect, average, record, apply in phases:
        records.append(
            timed_step(
                swarm,
                collect=collect,
                average=average,
                record=record,
                apply=apply,
                compute=[{1: 0.25, 2: 0.25}, {1: 0.25, 2: 0.25}],
            )
        )
        recorded_at.append(swarm.now - record - apply)
    assert [parts(r) for r in records] == [pytest.approx(e) for e in expected]
    # The coordinator's part of a step is the previous step's write, apply and this step's opening;
    # the first step since the machine started has none, so its parts run from its opening.
    cycles = [recorded_at[0] - started] + [b - a for a, b in itertools.pairwise(recorded_at)]
    assert [sum(parts(r)) for r in records] == pytest.approx(cycles)


@pytest.mark.parametrize(
    ("network", "expected_network"),
    [
        # Two microbatches, each with a call to both peers of 0.25 s on the network: each peer's
        # calls spent 0.5 s there, and the step's network part is their mean.
        (0.25, 0.5),
        # Network never takes more than what compute left of collecting (4 - 1.6).
        (3.0, 4.0 - (0.6 + 1.0) / 2),
    ],
)
def test_collecting_splits_off_the_serving_peers_mean_network_time(
    network: float, expected_network: float
) -> None:
    swarm = two_by_one()
    record = timed_step(
        swarm,
        collect=4.0,
        average=1.5,
        record=0.25,
        apply=0.5,
        compute=[{1: 0.3, 2: 0.5}, {1: 0.3, 2: 0.5}],
        network=network,
    )
    compute = (0.6 + 1.0) / 2
    five = (
        record.time_compute_s,
        record.time_network_s,
        record.time_waiting_s,
        record.time_averaging_s,
        record.time_coordinator_s,
    )
    assert five == pytest.approx((compute, expected_network, 4.0 - compute - expected_network, 1.5, 0.0))
    assert sum(five) == pytest.approx(4.0 + 1.5)


def test_the_record_says_how_busy_the_busiest_stage_was_while_the_step_collected() -> None:
    swarm = two_by_one()
    # Peer 1 (stage 0) computed 0.6 s of the 4 s collecting, peer 2 (stage 1) 1.0 s.
    record = timed_step(
        swarm, collect=4.0, average=1.5, record=0.25, apply=0.5, compute=[{1: 0.3, 2: 0.5}, {1: 0.3, 2: 0.5}]
    )
    assert record.stage_busy == StageBusy(stage=1, mean_share=0.25, least_share=0.25, most_share=0.25)
    # A step whose serving peers say nothing of their compute says nothing of its stages either.
    quiet = timed_step(swarm, collect=4.0, average=1.0, record=0.0, apply=0.0, compute=[{1: 0.0, 2: 0.0}] * 2)
    assert quiet.stage_busy is None


def test_only_finished_microbatches_of_the_open_step_count_towards_compute() -> None:
    swarm = two_by_one()
    # A microbatch that failed reports no calls: what they computed is the step's waiting.
    (failed,) = sent(swarm.say(TRAINER, WorkRequest()), TRAINER)
    assert isinstance(failed, WorkGrant)
    swarm.say(TRAINER, MicrobatchFailed(step=0, microbatch_id=failed.microbatch_id, reason="lost"))
    record = timed_step(
        swarm, collect=2.0, average=1.0, record=0.0, apply=0.0, compute=[{1: 0.5, 2: 0.5}, {1: 0.5, 2: 0.5}]
    )
    assert parts(record) == pytest.approx((1.0, 1.0, 1.0, 0.0))
    # A report repeated after the step closed adds nothing to the next one.
    late = MicrobatchDone(
        step=0,
        microbatch_id=f"s0-{swarm.machine.book.nonce}m1",
        samples=4,
        loss=2.0,
        served=[ServedCall(peer_id=2, samples=4, seconds=1.0, compute_seconds=1.0)],
    )
    swarm.say(TRAINER, late)
    assert swarm.machine.book.served_compute == swarm.machine.book.served_network == {}


def cache(hits: int, misses: int) -> Heartbeat:
    return Heartbeat(
        throughput=10.0,
        queue_length=0,
        samples_done=0,
        activation_cache=ActivationCacheTally(hits=hits, misses=misses),
    )


def test_activation_cache_running_totals_are_booked_per_step() -> None:
    swarm = two_by_one()
    swarm.say(1, cache(3, 1))
    swarm.say(1, cache(5, 1))  # running totals: 2 more hits
    swarm.say(2, cache(4, 0))
    swarm.say(2, cache(1, 0))  # restarted: counted from zero, nothing taken back
    record = timed_step(swarm, collect=1.0, average=1.0, record=0.0, apply=0.0, compute=[{}, {}])
    assert (record.cache_hits, record.cache_misses) == (5 + 4 + 1, 1)
    swarm.say(1, cache(5, 3))
    swarm.say(2, cache(2, 0))
    record = timed_step(swarm, collect=1.0, average=1.0, record=0.0, apply=0.0, compute=[{}, {}])
    assert (record.cache_hits, record.cache_misses) == (1, 2)
