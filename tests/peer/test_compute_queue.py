"""The device's queue: by priority (the pipeline's order), then arrival; errors and cancellations
reach the caller."""

from __future__ import annotations

import threading

import pytest

from peer.compute_queue import (
    BOOKKEEPING_PRIORITY,
    PARTIAL_PRIORITY,
    SPOT_CHECK_PRIORITY,
    ComputeQueue,
    stage_call_priority,
)


@pytest.mark.parametrize(
    ("kind", "stage", "num_stages", "to_come"),
    [
        # 4 stages: forward 0, 1, 2, forward_backward 3, backward 2, 1, 0 (7 calls a microbatch).
        ("forward", 0, 4, 6),
        ("forward", 1, 4, 5),
        ("forward", 2, 4, 4),
        ("forward_backward", 3, 4, 3),
        ("backward", 2, 4, 2),
        ("backward", 1, 4, 1),
        ("backward", 0, 4, 0),
        # One stage: its forward_backward is the whole microbatch.
        ("forward_backward", 0, 1, 0),
    ],
)
def test_whole_microbatches_go_backward_first_and_partial_ones_critical_path_first(
    kind: str, stage: int, num_stages: int, to_come: int
) -> None:
    whole = stage_call_priority(kind, stage, num_stages)  # type: ignore[arg-type]
    partial = stage_call_priority(kind, stage, num_stages, partial=True)  # type: ignore[arg-type]
    assert whole == to_come
    assert partial == PARTIAL_PRIORITY - to_come
    # A step's partial microbatches (its first and its last) go before any whole one, a spot check
    # after every stage call, and bookkeeping before them all.
    assert BOOKKEEPING_PRIORITY < partial < 0 <= whole < SPOT_CHECK_PRIORITY
    assert stage_call_priority(kind, stage, num_stages, check=True) == SPOT_CHECK_PRIORITY  # type: ignore[arg-type]


def test_a_stage_orders_its_calls_as_the_pipeline_needs() -> None:
    calls = {
        "forward of a whole microbatch": stage_call_priority("forward", 1, 4),
        "backward of a whole microbatch": stage_call_priority("backward", 1, 4),
        "forward of the step's last microbatch": stage_call_priority("forward", 1, 4, partial=True),
        "backward of the step's last microbatch": stage_call_priority("backward", 1, 4, partial=True),
        "spot check": stage_call_priority("forward", 1, 4, check=True),
    }
    assert sorted(calls, key=calls.__getitem__) == [
        "forward of the step's last microbatch",
        "backward of the step's last microbatch",
        "backward of a whole microbatch",
        "forward of a whole microbatch",
        "spot check",
    ]


def test_queued_work_runs_by_priority_then_arrival_one_at_a_time() -> None:
    queue = ComputeQueue("test-compute")
    started = threading.Event()
    release = threading.Event()
    order: list[str] = []
    running = [0]

    def job(name: str) -> str:
        running[0] += 1
        assert running[0] == 1, "two jobs at once"
        order.append(name)
        running[0] -= 1
        return name

    def blocker() -> None:
        started.set()
        release.wait(10)

    try:
        queue.submit(blocker, 0)
        assert started.wait(10)
        futures = [
            queue.submit(lambda: job("backward stage 0"), 0),
            queue.submit(lambda: job("forward stage 0"), -6),
            queue.submit(lambda: job("spot check"), SPOT_CHECK_PRIORITY),
            queue.submit(lambda: job("forward stage 0, later"), -6),
            queue.submit(lambda: job("averaging"), BOOKKEEPING_PRIORITY),
        ]
        release.set()
        assert [f.result(10) for f in futures] == [
            "backward stage 0",
            "forward stage 0",
            "spot check",
            "forward stage 0, later",
            "averaging",
        ]
        assert order == [
            "averaging",
            "forward stage 0",
            "forward stage 0, later",
            "backward stage 0",
            "spot check",
        ]
    finally:
        release.set()
        queue.close()


def test_an_error_reaches_the_caller_and_the_queue_goes_on() -> None:
    queue = ComputeQueue("test-compute")
    try:

        def fail() -> None:
            raise ValueError("stage 1 keeps no forward")

        with pytest.raises(ValueError, match="keeps no forward"):
            queue.submit(fail).result(10)
        assert queue.submit(lambda: 42).result(10) == 42
    finally:
        queue.close()


def test_cancelled_work_is_skipped_and_closing_cancels_what_is_queued() -> None:
    queue = ComputeQueue("test-compute")
    started = threading.Event()
    release = threading.Event()
    ran: list[str] = []

    def blocker() -> None:
        started.set()
        release.wait(10)

    queue.submit(blocker)
    assert started.wait(10)
    skipped = queue.submit(lambda: ran.append("cancelled"))
    assert skipped.cancel()
    done = queue.submit(lambda: ran.append("ran"))
    release.set()
    done.result(10)
    assert ran == ["ran"]

    release.clear()
    started.clear()
    queue.submit(blocker)
    assert started.wait(10)
    pending = queue.submit(lambda: ran.append("after close"))
    # Closing waits for the call running now: it is let finish.
    threading.Timer(0.2, release.set).start()
    queue.close()
    assert release.is_set()
    assert pending.cancelled()
    with pytest.raises(RuntimeError, match="closed"):
        queue.submit(lambda: None)
    assert ran == ["ran"]
