"""A simulated peer's compute thread: the calls that have arrived by priority, then by arrival."""

from __future__ import annotations

import pytest

from sim.serving import ServingQueue


@pytest.mark.parametrize(
    ("sent", "free_at", "expected"),
    [
        # (arrives at, priority, name): all arrived by the time the thread is free: by priority...
        (
            [(0.0, 5, "forward"), (0.1, 1, "backward"), (0.2, 3, "forward_backward")],
            1.0,
            [(1.0, "backward"), (1.0, "forward_backward"), (1.0, "forward")],
        ),
        # ...then by arrival among equals;
        (
            [(0.0, 2, "first"), (0.1, 2, "second"), (0.2, 2, "third")],
            1.0,
            [(1.0, "first"), (1.0, "second"), (1.0, "third")],
        ),
        # a call still on the way waits its turn even if it goes first once it arrives;
        ([(0.0, 5, "forward"), (2.0, 1, "backward")], 1.0, [(1.0, "forward"), (2.0, "backward")]),
        # with nothing arrived, the thread starts on the first call the moment it arrives.
        ([(3.0, 5, "forward"), (4.0, 1, "backward")], 1.0, [(3.0, "forward"), (4.0, "backward")]),
    ],
)
def test_the_thread_serves_what_has_arrived_by_priority_then_arrival(
    sent: list[tuple[float, int, str]], free_at: float, expected: list[tuple[float, str]]
) -> None:
    queue: ServingQueue[str] = ServingQueue()
    for arrives_at, priority, name in sent:
        queue.put(arrives_at, priority, name)
    served, now = [], free_at
    while (call := queue.next_call(now)) is not None:
        start, _, name = call
        served.append((start, name))
        now = start
    assert served == expected
    assert len(queue) == 0


def test_waiting_counts_only_the_calls_that_have_arrived() -> None:
    queue: ServingQueue[str] = ServingQueue()
    queue.put(1.0, 0, "a")
    queue.put(2.0, 0, "b")
    assert (queue.waiting(0.5), queue.waiting(1.0), queue.waiting(2.5)) == (0, 1, 2)
    assert len(queue) == 2
    queue.clear()
    assert queue.waiting(3.0) == 0 and queue.next_call(3.0) is None


def test_a_call_sent_to_arrive_before_one_sent_earlier_is_refused() -> None:
    # One peer's latency is the same for every caller: arrivals out of send order are a bug.
    queue: ServingQueue[str] = ServingQueue()
    queue.put(2.0, 0, "a")
    with pytest.raises(ValueError, match="in the order they were sent"):
        queue.put(1.0, 0, "b")
