"""StepBook: granting microbatches for one global step and closing its books."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.policies.step_book import Grant, StageTally, StepBook, StepSummary, grant_size
from swarmhub.wire import ServedCall


def book(target: int = 10, microbatch: int = 4, cursor: int = 0, step: int = 0) -> StepBook:
    return StepBook(step=step, target_batch_size=target, microbatch_size=microbatch, next_sample=cursor)


def must_grant(b: StepBook, trainer_id: int = 1) -> Grant:
    g = b.grant(trainer_id)
    assert g is not None
    return g


def grant_all(b: StepBook, trainer_id: int = 1) -> list[Grant]:
    grants = []
    while (g := b.grant(trainer_id)) is not None:
        grants.append(g)
    return grants


# ---- construction -----------------------------------------------------------------------------


@pytest.mark.parametrize(("target", "microbatch"), [(0, 4), (4, 0), (-1, 4), (4, -2), (0, 0)])
def test_sizes_must_be_positive(target: int, microbatch: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        book(target, microbatch)


# ---- grant ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "microbatch", "cursor", "expected_sizes"),
    [
        (10, 4, 0, [4, 4, 2]),
        (8, 4, 0, [4, 4]),
        (3, 4, 0, [3]),
        (1, 1, 0, [1]),
        (5, 1, 100, [1, 1, 1, 1, 1]),
        (7, 3, 1000, [3, 3, 1]),
        (4, 100, 5, [4]),
    ],
)
def test_grants_fill_the_target_exactly_and_the_last_is_cut_short(
    target: int, microbatch: int, cursor: int, expected_sizes: list[int]
) -> None:
    b = book(target, microbatch, cursor)
    grants = grant_all(b)
    assert [g.samples for g in grants] == expected_sizes
    # Consecutive, non-overlapping sample ranges from the cursor.
    starts = [cursor + sum(expected_sizes[:i]) for i in range(len(expected_sizes))]
    assert [g.first_sample for g in grants] == starts
    assert b.next_sample == cursor + target
    assert b.samples_outstanding == target
    assert b.samples_sent == target
    assert b.grant(2) is None
    assert len({g.microbatch_id for g in grants}) == len(grants)


def test_grant_records_the_trainer_and_the_step_in_the_id() -> None:
    b = book(target=10, microbatch=4, step=7)
    g1, g2 = b.grant(3), b.grant(9)
    assert g1 is not None and g2 is not None
    assert (g1.trainer_id, g2.trainer_id) == (3, 9)
    assert g1.microbatch_id != g2.microbatch_id
    assert all(g.microbatch_id.startswith("s7-") for g in (g1, g2))
    assert b.outstanding == {g1.microbatch_id: g1, g2.microbatch_id: g2}


def test_completion_does_not_make_room_but_failure_does() -> None:
    b = book(target=10, microbatch=4)
    a, c, _ = grant_all(b)
    assert b.complete(a.microbatch_id, 1.0)
    assert b.grant(1) is None  # done + outstanding still fills the step
    assert b.fail(c.microbatch_id) == c
    replacement = b.grant(2)
    # The failed samples are not granted again: the replacement takes fresh indices.
    assert replacement is not None
    assert replacement.samples == 4
    assert replacement.first_sample == 10
    assert b.grant(2) is None
    assert b.samples_sent == 14
    assert b.next_sample == 14


def test_cursor_carries_into_next_book() -> None:
    b = book(target=10, microbatch=4, cursor=50, step=3)
    a, c, d = grant_all(b)
    b.fail(c.microbatch_id)
    (e,) = grant_all(b)
    nxt = b.next_book()
    assert nxt.step == 4
    assert nxt.target_batch_size == 10
    assert nxt.microbatch_size == 4
    assert nxt.next_sample == 50 + 14
    assert not nxt.outstanding and not nxt.done and not nxt.failed and not nxt.losses
    first = nxt.grant(1)
    assert first is not None
    assert first.first_sample == 64
    assert first.microbatch_id not in {g.microbatch_id for g in (a, c, d, e)}


# ---- complete / fail --------------------------------------------------------------------------


def test_complete_unknown_repeated_or_failed_returns_false() -> None:
    b = book(target=8, microbatch=4)
    a, c = grant_all(b)
    assert b.complete("s0-m99", 1.0) is False
    assert b.complete("nonsense", 1.0) is False
    assert b.complete(a.microbatch_id, 2.0) is True
    assert b.complete(a.microbatch_id, 5.0) is False  # repeated: the first loss stays
    assert b.losses == {a.microbatch_id: 2.0}
    assert b.fail(c.microbatch_id) == c
    assert b.complete(c.microbatch_id, 1.0) is False  # late: already failed
    assert set(b.done) == {a.microbatch_id}
    assert set(b.failed) == {c.microbatch_id}
    assert b.samples_done == 4


def test_fail_unknown_done_or_repeated_returns_none() -> None:
    b = book(target=8, microbatch=4)
    a, c = grant_all(b)
    b.complete(a.microbatch_id, 1.0)
    assert b.fail("nonsense") is None
    assert b.fail(a.microbatch_id) is None  # done stays done
    assert b.fail(c.microbatch_id) == c
    assert b.fail(c.microbatch_id) is None
    assert set(b.done) == {a.microbatch_id}
    assert b.failed == {c.microbatch_id: c}


def test_fail_trainer_fails_only_its_outstanding_microbatches() -> None:
    b = book(target=20, microbatch=4)
    t1 = [must_grant(b, 1) for _ in range(3)]
    t2 = [must_grant(b, 2) for _ in range(2)]
    b.complete(t1[0].microbatch_id, 1.0)
    failed = b.fail_trainer(1)
    assert failed == t1[1:]
    assert set(b.failed) == {g.microbatch_id for g in t1[1:]}
    assert set(b.outstanding) == {g.microbatch_id for g in t2}
    assert t1[0].microbatch_id in b.done
    assert b.fail_trainer(1) == []
    assert b.fail_trainer(99) == []


# ---- barrier ----------------------------------------------------------------------------------


def test_ready_for_barrier_only_when_target_done_and_nothing_in_flight() -> None:
    b = book(target=10, microbatch=4)
    assert not b.ready_for_barrier()
    a, c, d = grant_all(b)
    b.complete(a.microbatch_id, 1.0)
    b.complete(c.microbatch_id, 1.0)
    assert not b.ready_for_barrier()  # d still in flight
    b.fail(d.microbatch_id)
    assert not b.ready_for_barrier()  # nothing in flight, but 2 samples short
    (e,) = grant_all(b)
    assert e.samples == 2
    assert not b.ready_for_barrier()
    b.complete(e.microbatch_id, 1.0)
    assert b.ready_for_barrier()
    assert b.samples_done == 10
    assert b.grant(1) is None


# ---- summarize --------------------------------------------------------------------------------


def test_loss_is_the_sample_weighted_mean_of_done_microbatches() -> None:
    b = book(target=10, microbatch=4)
    a, c, d = grant_all(b)
    b.complete(a.microbatch_id, 1.0)  # 4 samples
    b.complete(c.microbatch_id, 2.0)  # 4 samples
    b.complete(d.microbatch_id, 4.0)  # 2 samples
    summary = b.summarize([[a.microbatch_id, c.microbatch_id, d.microbatch_id]])
    assert summary.loss == pytest.approx((4 * 1.0 + 4 * 2.0 + 2 * 4.0) / 10)  # 2.0, not the plain mean 2.33
    assert summary.samples_done == 10


def test_failed_microbatches_do_not_enter_the_loss() -> None:
    b = book(target=8, microbatch=4)
    a, c = grant_all(b)
    b.complete(a.microbatch_id, 3.0)
    b.fail(c.microbatch_id)
    assert b.summarize([[a.microbatch_id]]).loss == pytest.approx(3.0)


def test_loss_is_none_when_nothing_is_done() -> None:
    b = book(target=8, microbatch=4)
    assert len(grant_all(b)) == 2
    b.fail_trainer(1)
    summary = b.summarize([[], []])
    assert summary.loss is None
    assert summary.samples_done == 0
    assert summary.samples_sent == 8
    assert summary.stage_tallies == [StageTally(counted=0, lost=8)] * 2
    assert summary.samples_lost == 8


def _scenario() -> tuple[StepBook, dict[str, Grant]]:
    """Target 10 by 4: m0 (4) done, m1 (4) failed, m2 (2) done, m3 (4, replacing m1) done."""
    b = book(target=10, microbatch=4, step=5)
    g = {name: must_grant(b) for name in ("m0", "m1", "m2")}
    b.complete(g["m0"].microbatch_id, 1.0)
    b.fail(g["m1"].microbatch_id)
    b.complete(g["m2"].microbatch_id, 1.0)
    g["m3"] = must_grant(b, 2)
    b.complete(g["m3"].microbatch_id, 1.0)
    assert [x.samples for x in g.values()] == [4, 4, 2, 4]
    assert b.ready_for_barrier()
    return b, g


@pytest.mark.parametrize(
    ("counted_names", "expected_counted"),
    [
        pytest.param([["m0", "m2", "m3"]] * 3, [10, 10, 10], id="every stage counted the done ones"),
        pytest.param(
            [["m0", "m1", "m2", "m3"], ["m0", "m1", "m2", "m3"], ["m0", "m2", "m3"]],
            [14, 14, 10],
            id="the failed microbatch reached the first stages",
        ),
        pytest.param(
            [["m0", "m2", "m3"], ["m0", "m3"], ["m0", "m2", "m3"]],
            [10, 8, 10],
            id="a stage lost m2 with a dead peer",
        ),
        pytest.param([[], ["m0"], ["m3", "m3", "m3"]], [0, 4, 4], id="empty and duplicate ids"),
        pytest.param([["m0", "bogus", "s4-m0"]], [4], id="unknown ids are ignored"),
        pytest.param([], [], id="no stages"),
    ],
)
def test_books_balance_per_stage(counted_names: list[list[str]], expected_counted: list[int]) -> None:
    b, g = _scenario()

    def mb_id(name: str) -> str:
        return g[name].microbatch_id if name in g else name

    summary = b.summarize([[mb_id(n) for n in names] for names in counted_names])
    assert isinstance(summary, StepSummary)
    assert summary.step == 5
    assert summary.samples_sent == 14
    assert summary.samples_done == 10
    assert [t.counted for t in summary.stage_tallies] == expected_counted
    for tally in summary.stage_tallies:
        assert tally.counted + tally.lost == summary.samples_sent
        assert tally.lost >= 0
    assert summary.samples_lost == max((14 - c for c in expected_counted), default=0)


def test_samples_of_counts_each_granted_id_once() -> None:
    b, g = _scenario()
    ids = [g[n].microbatch_id for n in ("m0", "m1", "m2", "m3")]
    assert b.samples_of(ids) == 14
    assert b.samples_of(ids + ids) == 14
    assert b.samples_of([ids[1]]) == 4  # failed ones still have a known size
    assert b.samples_of(["x", "y"]) == 0
    assert b.samples_of([]) == 0


# ---- at scale: running totals give the decisions the sums over the dicts gave -------------------


def _by_sums(b: StepBook) -> tuple[int, int, int]:
    """Done, outstanding and sent samples summed over the book's dicts (what the book once computed
    at every grant)."""
    done = sum(g.samples for g in b.done.values())
    outstanding = sum(g.samples for g in b.outstanding.values())
    return done, outstanding, done + outstanding + sum(g.samples for g in b.failed.values())


@pytest.mark.parametrize(
    ("trainers", "target", "microbatch", "fail_every", "lose_every"),
    [
        (1, 40, 4, 0, 0),
        (3, 100, 8, 5, 0),
        (50, 4096, 16, 7, 11),
        (1000, 131_072, 8, 13, 97),
        (3000, 16_384, 4, 0, 3),
    ],
)
def test_many_trainers_get_the_grants_the_summed_books_give(
    trainers: int, target: int, microbatch: int, fail_every: int, lose_every: int
) -> None:
    """Trainers take grants in turn; every `fail_every`-th microbatch fails, every `lose_every`-th
    trainer vanishes with what it holds, the rest complete in the order granted. Each grant is the
    size the summed books call for, and the totals, the barrier and `fail_trainer` agree with them."""
    b = book(target=target, microbatch=microbatch)
    sequence = 0
    for trainer in range(trainers):
        for _ in range(2):
            done, outstanding, sent = _by_sums(b)
            assert (b.samples_done, b.samples_outstanding, b.samples_sent) == (done, outstanding, sent)
            g = b.grant(trainer)
            if done + outstanding >= target:
                assert g is None
                break
            assert g is not None
            assert g.samples == grant_size(
                target - done - outstanding, microbatch, target, first=sequence == 0
            )
            sequence += 1
            if fail_every and sequence % fail_every == 0:
                assert b.fail(g.microbatch_id) == g
        if lose_every and trainer % lose_every == 0:
            held = [g for g in b.outstanding.values() if g.trainer_id == trainer]
            assert b.fail_trainer(trainer) == held
    while b.outstanding or not b.ready_for_barrier():
        for mb in list(b.outstanding):
            assert b.complete(mb, 1.0)
        while (g := b.grant(0)) is not None:
            assert b.complete(g.microbatch_id, 1.0)
    done, outstanding, sent = _by_sums(b)
    assert (b.samples_done, b.samples_outstanding, b.samples_sent) == (done, outstanding, sent)
    assert done == target and outstanding == 0


# ---- property test ----------------------------------------------------------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("grant"), st.integers(min_value=0, max_value=3)),
        st.tuples(st.just("complete"), st.integers(min_value=0, max_value=40)),
        st.tuples(st.just("fail"), st.integers(min_value=0, max_value=40)),
        st.tuples(st.just("fail_trainer"), st.integers(min_value=0, max_value=3)),
    ),
    max_size=80,
)


@settings(max_examples=400, database=None, deadline=None)
@given(
    target=st.integers(min_value=1, max_value=40),
    microbatch=st.integers(min_value=1, max_value=12),
    cursor=st.integers(min_value=0, max_value=10**6),
    ops=_OPS,
    losses=st.lists(st.floats(min_value=0.0, max_value=20.0), min_size=1, max_size=8),
    stage_picks=st.lists(st.lists(st.integers(min_value=0, max_value=60), max_size=30), max_size=4),
)
def test_random_event_sequences_keep_the_books(
    target: int,
    microbatch: int,
    cursor: int,
    ops: list[tuple[str, int]],
    losses: list[float],
    stage_picks: list[list[int]],
) -> None:
    """Invariants that hold after every event, whatever the order:

    - sent == done + outstanding + failed samples, and the cursor has moved by exactly `sent`;
    - every grant is 1..microbatch samples, ids are unique and no sample index is granted twice
      (ranges are consecutive from the cursor);
    - each id is in exactly one of outstanding / done / failed, and losses exist exactly for done;
    - done + outstanding <= target (so done never exceeds the target), and grant() returns None
      exactly when done + outstanding == target;
    - ready_for_barrier() iff nothing is outstanding and done == target;
    - summarize balances on every stage: counted + lost == sent, 0 <= lost <= sent, counted is
      the size of the distinct granted ids listed, samples_lost is the largest stage loss, and the
      loss is the sample-weighted mean over done microbatches.
    """
    b = book(target=target, microbatch=microbatch, cursor=cursor)
    grants: list[Grant] = []
    state: dict[str, str] = {}  # our own model: id -> outstanding | done | failed
    loss_of: dict[str, float] = {}

    def check() -> None:
        by = {k: sum(g.samples for g in grants if state[g.microbatch_id] == k) for k in ("o", "d", "f")}
        assert b.samples_outstanding == by["o"]
        assert b.samples_done == by["d"]
        assert b.samples_sent == by["o"] + by["d"] + by["f"] == sum(g.samples for g in grants)
        assert b.next_sample == cursor + b.samples_sent
        assert b.samples_done + b.samples_outstanding <= target
        assert set(b.outstanding) == {m for m, s in state.items() if s == "o"}
        assert set(b.done) == {m for m, s in state.items() if s == "d"}
        assert set(b.failed) == {m for m, s in state.items() if s == "f"}
        assert b.losses == {m: loss_of[m] for m, s in state.items() if s == "d"}
        assert b.ready_for_barrier() == (not b.outstanding and b.samples_done == target)

    for i, (op, arg) in enumerate(ops):
        if op == "grant":
            room = target - b.samples_done - b.samples_outstanding
            g = b.grant(arg)
            if room == 0:
                assert g is None
                continue
            assert g is not None
            assert g.samples == grant_size(room, microbatch, target, first=not grants)
            assert g.trainer_id == arg
            assert g.first_sample == cursor + sum(x.samples for x in grants)
            assert g.microbatch_id not in state
            grants.append(g)
            state[g.microbatch_id] = "o"
        elif op in ("complete", "fail"):
            # Pick an id among those granted, or an unknown one past the end.
            mb = grants[arg].microbatch_id if arg < len(grants) else f"unknown-{arg}"
            was = state.get(mb)
            if op == "complete":
                loss = losses[i % len(losses)]
                assert b.complete(mb, loss) == (was == "o")
                if was == "o":
                    state[mb], loss_of[mb] = "d", loss
            else:
                result = b.fail(mb)
                assert (result is not None) == (was == "o")
                if was == "o":
                    assert result == grants[arg]
                    state[mb] = "f"
        else:
            expected = [g for g in grants if g.trainer_id == arg and state[g.microbatch_id] == "o"]
            assert b.fail_trainer(arg) == expected
            for g in expected:
                state[g.microbatch_id] = "f"
        check()

    # No sample index granted twice.
    indices = [i for g in grants for i in range(g.first_sample, g.first_sample + g.samples)]
    assert len(indices) == len(set(indices))
    assert all(1 <= g.samples <= microbatch for g in grants)

    # Close the books with arbitrary per-stage lists (granted ids, repeats and unknown ids mixed).
    counted_per_stage = [
        [grants[p].microbatch_id if p < len(grants) else f"unknown-{p}" for p in picks]
        for picks in stage_picks
    ]
    summary = b.summarize(counted_per_stage)
    assert summary.samples_sent == b.samples_sent
    assert summary.samples_done == b.samples_done
    assert len(summary.stage_tallies) == len(stage_picks)
    size = {g.microbatch_id: g.samples for g in grants}
    for ids, tally in zip(counted_per_stage, summary.stage_tallies, strict=True):
        assert tally.counted == sum(size[m] for m in set(ids) if m in size)
        assert tally.counted + tally.lost == summary.samples_sent
        assert 0 <= tally.lost <= summary.samples_sent
    assert summary.samples_lost == max((t.lost for t in summary.stage_tallies), default=0)
    done = [g for g in grants if state[g.microbatch_id] == "d"]
    if done:
        expected_loss = sum(loss_of[g.microbatch_id] * g.samples for g in done) / sum(g.samples for g in done)
        assert summary.loss == pytest.approx(expected_loss)
    else:
        assert summary.loss is None

    # Whatever happened, finishing what is in flight and granting on reaches the barrier with
    # exactly the target done; everything else sent is failed.
    for mb in list(b.outstanding):
        assert b.complete(mb, 1.0)
    while (g := b.grant(0)) is not None:
        assert b.complete(g.microbatch_id, 1.0)
    assert b.ready_for_barrier()
    assert b.samples_done == target
    assert b.samples_sent - b.samples_done == sum(x.samples for x in b.failed.values())


# ---- where the step's time and activation cache went ------------------------------------------------


def test_served_compute_and_network_are_summed_per_serving_peer_for_finished_microbatches_only() -> None:
    b = book(target=12)
    first, second, third = grant_all(b)

    def call(peer_id: int, compute: float, network: float = 0.0) -> ServedCall:
        return ServedCall(
            peer_id=peer_id, samples=4, seconds=1.0, compute_seconds=compute, network_seconds=network
        )

    assert b.complete(first.microbatch_id, 1.0, served=[call(1, 0.25, 0.5), call(2, 0.5, 0.125)])
    assert b.complete(second.microbatch_id, 1.0, served=[call(2, 0.5, 0.25), call(3, 0.0)])
    # Repeated or failed: their calls are not booked.
    assert not b.complete(first.microbatch_id, 1.0, served=[call(1, 9.0, 9.0)])
    b.fail(third.microbatch_id)
    assert not b.complete(third.microbatch_id, 1.0, served=[call(4, 9.0, 9.0)])
    assert b.served_compute == {1: 0.25, 2: 1.0, 3: 0.0}
    # The same serving peers as compute, so both have one denominator.
    assert b.served_network == {1: 0.5, 2: 0.375, 3: 0.0}
    b.add_cache(3, 1)
    b.add_cache(2, 0)
    assert (b.cache_hits, b.cache_misses) == (5, 1)
    # The next step starts its own books.
    following = b.next_book()
    assert (following.served_compute, following.served_network) == ({}, {})
    assert (following.cache_hits, following.cache_misses) == (0, 0)


@pytest.mark.parametrize(
    ("target", "microbatch", "sizes"),
    [
        # Long steps open with a quarter-size microbatch and end with halving ones: a shorter fill
        # and drain, the same samples.
        (32, 4, [1] + [4] * 7 + [2, 1]),
        (16, 4, [1, 4, 4, 4, 2, 1]),
        (17, 4, [1, 4, 4, 4, 2, 1, 1]),
        (32, 8, [2, 8, 8, 8, 3, 2, 1]),
        # Short steps keep whole microbatches; the last is cut to the target.
        (8, 4, [4, 4]),
        (24, 8, [8, 8, 8]),
        (10, 4, [4, 4, 2]),
        (3, 4, [3]),
    ],
)
def test_grants_taper_at_both_ends_of_long_steps(target: int, microbatch: int, sizes: list[int]) -> None:
    book = StepBook(step=0, target_batch_size=target, microbatch_size=microbatch, next_sample=0)
    granted = []
    while (grant := book.grant(trainer_id=1)) is not None:
        granted.append(grant.samples)
    assert granted == sizes
    assert sum(granted) == target
