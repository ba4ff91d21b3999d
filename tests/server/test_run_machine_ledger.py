"""What the run's machine credits each peer in the step it records (`RecordStep.credits`): the
coordinator's own counts for samples trained, heartbeat claims capped by trainers' receipts for
serving, and the claims that lag a step carried into the next."""

from __future__ import annotations

from server.policies.ledger import PeerCredit
from server.swarm import decisions as do
from server.swarm import inputs as on
from swarmhub.wire import (
    AveragingDone,
    Heartbeat,
    MicrobatchDone,
    MicrobatchFailed,
    ServedCall,
    WorkGrant,
    WorkRequest,
)
from tests.server.test_run_machine import Swarm, of, sent, two_by_one


def heartbeat(swarm: Swarm, peer_id: int, samples_total: int, compute_total_s: float) -> None:
    swarm.say(
        peer_id,
        Heartbeat(
            throughput=10.0, queue_length=0, samples_done=samples_total, compute_seconds=compute_total_s
        ),
    )


def grant(swarm: Swarm, trainer: int) -> WorkGrant:
    (reply,) = sent(swarm.say(trainer, WorkRequest()), trainer)
    assert isinstance(reply, WorkGrant)
    return reply


def finish(swarm: Swarm, trainer: int, work: WorkGrant, *servers: int) -> None:
    served = [ServedCall(peer_id=p, samples=work.samples, seconds=0.5, compute_seconds=0.25) for p in servers]
    swarm.say(
        trainer,
        MicrobatchDone(
            step=work.step,
            microbatch_id=work.microbatch_id,
            samples=work.samples,
            loss=2.0,
            bytes_sent=100,
            served=served,
        ),
    )


def record(swarm: Swarm, counted: list[str]) -> do.RecordStep:
    (step,) = of(swarm.average(counted), do.RecordStep)
    swarm.feed(on.StepRecorded(now=swarm.now, step=step.step))
    swarm.apply_all()
    return step


def credits(step: do.RecordStep) -> dict[int, PeerCredit]:
    return {c.peer_id: c for c in step.credits}


def test_each_trainer_is_credited_its_counted_samples_and_servers_what_they_claimed_and_served():
    swarm = two_by_one()
    heartbeat(swarm, 1, 8, 0.5)  # stage 0 claims its forward and backward of one microbatch
    heartbeat(swarm, 2, 400, 50.0)  # stage 1 claims far more than it served
    first, second = grant(swarm, 1), grant(swarm, 2)
    finish(swarm, 1, first, 1, 2, 1)
    finish(swarm, 2, second, 1, 2, 1)
    swarm.now += 4.0
    step = record(swarm, [first.microbatch_id, second.microbatch_id])
    got = credits(step)
    assert sum(c.samples_trained for c in step.credits) == step.samples_counted[0] == 8
    assert (got[1].samples_trained, got[2].samples_trained) == (4, 4)
    # Peer 1 served 4 calls of 4 samples but has claimed only 8 so far; peer 2 is capped by receipts.
    assert (got[1].calls_served, got[1].samples_served, got[1].compute_s) == (2, 8, 0.5)
    assert (got[2].calls_served, got[2].samples_served, got[2].compute_s) == (2, 8, 0.5)
    assert got[1].bytes_moved == got[2].bytes_moved == 100
    assert got[1].uptime_s == got[2].uptime_s == 4.0

    # Peer 1's next heartbeat claims the rest: the next step credits it without new receipts.
    heartbeat(swarm, 1, 16, 1.0)
    third = grant(swarm, 2)
    swarm.say(2, MicrobatchFailed(step=third.step, microbatch_id=third.microbatch_id, reason="gave up"))
    done = [grant(swarm, 2), grant(swarm, 2)]
    for work in done:
        finish(swarm, 2, work, 2)
    swarm.now += 2.0
    later = credits(record(swarm, [w.microbatch_id for w in done]))
    assert (later[1].calls_served, later[1].samples_served, later[1].compute_s) == (2, 8, 0.5)
    assert later[1].samples_trained == 0 and later[1].uptime_s == 2.0
    assert (later[2].samples_trained, later[2].failures) == (8, 1)


def test_a_microbatch_one_stage_did_not_count_is_credited_to_nobody():
    swarm = two_by_one()
    ids = swarm.train(1)
    assert len(ids) == 2
    # Stage 1 lost the second microbatch's gradients (its round went on without them).
    outcomes = []
    for stage, round_ in list(swarm.machine.rounds.items()):
        counted = ids if stage == 0 else ids[:1]
        for peer_id in sorted(round_.group):
            outcomes += swarm.say(
                peer_id,
                AveragingDone(
                    step=0,
                    attempt=round_.attempt,
                    stage=stage,
                    contributors=sorted(round_.group),
                    counted=counted,
                    grad_sum_norm_sq=1.0,
                ),
            )
    (step,) = of(outcomes, do.RecordStep)
    assert step.samples_counted == (8, 4)
    assert credits(step)[1].samples_trained == 4 == min(step.samples_counted)
