"""The contribution ledger's arithmetic (`server/policies/ledger.py`), on its own."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from server.policies.ledger import (
    FinishedMicrobatch,
    PeerCredit,
    Pending,
    StepCredits,
    Tally,
    claim_since,
    credit_step,
)
from swarmhub.wire import ServedCall


def call(peer: int, samples: int = 8, seconds: float = 0.5, compute: float = 0.25) -> ServedCall:
    return ServedCall(peer_id=peer, samples=samples, seconds=seconds, compute_seconds=compute)


def mb(
    mb_id: str, trainer: int, samples: int = 8, nbytes: int = 0, *served: ServedCall
) -> FinishedMicrobatch:
    return FinishedMicrobatch(
        microbatch_id=mb_id, trainer_id=trainer, samples=samples, bytes_moved=nbytes, served=served
    )


def claimed(samples: int, compute_s: float) -> Pending:
    return Pending(claimed=Tally(samples=samples, compute_s=compute_s))


def by_peer(result: StepCredits) -> dict[int, PeerCredit]:
    return {c.peer_id: c for c in result.credits}


def step(
    finished: list[FinishedMicrobatch],
    counted: list[set[str]],
    pending: dict[int, Pending] | None = None,
    failed: dict[int, int] | None = None,
    uptime: dict[int, float] | None = None,
) -> StepCredits:
    return credit_step(
        finished=finished,
        counted_per_stage=counted,
        failed_by_trainer=failed or {},
        pending=pending or {},
        uptime_s=uptime or {},
    )


def test_samples_trained_are_the_microbatches_every_stage_counted() -> None:
    # "b" was lost on stage 1 (its peer died before averaging): nobody is credited its samples.
    result = step(
        [mb("a", 1, 8, 1000), mb("b", 1, 4, 1000), mb("c", 2, 8, 500)], [{"a", "b", "c"}, {"a", "c"}]
    )
    got = by_peer(result)
    assert got[1].samples_trained == 8 and got[2].samples_trained == 8
    # Bytes are the trainer's traffic for what it finished, counted everywhere or not.
    assert got[1].bytes_moved == 2000 and got[2].bytes_moved == 500


def test_serving_credit_is_the_claim_capped_by_what_trainers_received() -> None:
    served = [call(3), call(3), call(4, compute=0.375)]
    # Peer 3 claims more than trainers saw; peer 4 less (its heartbeat has not caught up).
    result = step([mb("a", 1, 8, 0, *served)], [{"a"}], pending={3: claimed(40, 5.0), 4: claimed(4, 0.125)})
    got = by_peer(result)
    assert (got[3].calls_served, got[3].samples_served, got[3].compute_s) == (2, 16, 0.5)
    # Half a call's samples claimed: no whole call yet.
    assert (got[4].calls_served, got[4].samples_served, got[4].compute_s) == (0, 4, 0.125)
    assert result.pending[3] == Pending(claimed=Tally(samples=24, compute_s=4.5))
    assert result.pending[4] == Pending(received=Tally(calls=1, samples=4, compute_s=0.25))


def test_compute_is_bounded_by_the_trainers_wait() -> None:
    # A reply naming more compute than the trainer waited for earns the wait.
    slow_reply = ServedCall(peer_id=3, samples=8, seconds=0.5, compute_seconds=2.0)
    result = step([mb("a", 1, 8, 0, slow_reply)], [{"a"}], pending={3: claimed(8, 100.0)})
    assert by_peer(result)[3].compute_s == 0.5


def test_receipts_ahead_of_the_heartbeat_are_credited_when_it_comes() -> None:
    first = step(
        [mb("a", 1, 8, 0, call(3)), mb("b", 1, 8, 0, call(3))], [{"a", "b"}], pending={3: claimed(8, 0.25)}
    )
    assert (by_peer(first)[3].calls_served, by_peer(first)[3].samples_served) == (1, 8)
    # The next heartbeat claims the second call; the next step credits it with no new receipts.
    carried = {3: first.pending[3].claim(Tally(samples=8, compute_s=0.25))}
    second = step([], [set()], pending=carried)
    assert (by_peer(second)[3].calls_served, by_peer(second)[3].samples_served) == (1, 8)
    assert second.pending[3] == Pending()


def test_failures_and_uptime_are_credited_as_given() -> None:
    result = step([], [set(), set()], failed={5: 2}, uptime={5: 3.5, 6: -1.0})
    got = by_peer(result)
    assert got[5].failures == 2 and got[5].uptime_s == 3.5
    assert 6 not in got  # nothing to its name


def test_claims_since_the_last_heartbeat_and_a_restarted_peer() -> None:
    new, seen = claim_since(None, 16, 1.0)
    assert new == Tally(samples=16, compute_s=1.0)
    new, seen = claim_since(seen, 24, 1.5)
    assert new == Tally(samples=8, compute_s=0.5) and seen == Tally(samples=24, compute_s=1.5)
    new, _ = claim_since(seen, 4, 0.125)  # its totals went down: it started again
    assert new == Tally(samples=4, compute_s=0.125)


calls = st.lists(
    st.builds(
        ServedCall,
        peer_id=st.integers(1, 4),
        samples=st.integers(1, 16),
        seconds=st.floats(0.01, 5),
        compute_seconds=st.floats(0, 5),
    ),
    max_size=6,
)
steps = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(1, 4), st.integers(1, 16), calls, st.booleans()), max_size=6),
        st.dictionaries(st.integers(1, 4), st.tuples(st.integers(0, 100), st.floats(0, 20)), max_size=4),
    ),
    min_size=1,
    max_size=5,
)


@given(steps)
def test_over_steps_never_more_than_counted_received_or_claimed(
    run: list[tuple[list[tuple[int, int, list[ServedCall], bool]], dict[int, tuple[int, float]]]],
) -> None:
    pending: dict[int, Pending] = {}
    credited: dict[int, Tally] = {}
    received: dict[int, Tally] = {}
    claims: dict[int, Tally] = {}
    trained = counted_samples = 0
    for index, (microbatches, heartbeats) in enumerate(run):
        for peer, (samples, compute) in heartbeats.items():
            new = Tally(samples=samples, compute_s=compute)
            pending[peer] = pending.get(peer, Pending()).claim(new)
            claims[peer] = claims.get(peer, Tally()) + new
        finished = [
            FinishedMicrobatch(
                microbatch_id=f"s{index}m{i}", trainer_id=t, samples=s, bytes_moved=0, served=tuple(c)
            )
            for i, (t, s, c, _) in enumerate(microbatches)
        ]
        for _, _, cs, _ in microbatches:
            for c in cs:
                got = Tally(calls=1, samples=c.samples, compute_s=min(c.compute_seconds, c.seconds))
                received[c.peer_id] = received.get(c.peer_id, Tally()) + got
        counted = {f"s{index}m{i}" for i, (*_, ok) in enumerate(microbatches) if ok}
        counted_samples += sum(s for (_, s, _, ok) in microbatches if ok)
        result = step(finished, [counted, counted], pending=pending)
        pending = result.pending
        for credit in result.credits:
            trained += credit.samples_trained
            credited[credit.peer_id] = credited.get(credit.peer_id, Tally()) + Tally(
                calls=credit.calls_served, samples=credit.samples_served, compute_s=credit.compute_s
            )
    assert trained == counted_samples
    for peer, total in credited.items():
        claim, got = claims.get(peer, Tally()), received.get(peer, Tally())
        # All matched that could be: the lesser side, over the whole run.
        assert total.samples == min(claim.samples, got.samples)
        assert total.calls <= got.calls
        assert abs(total.compute_s - min(claim.compute_s, got.compute_s)) <= 1e-6 * (1 + got.compute_s)
