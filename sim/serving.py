"""A simulated peer's compute thread, in the order `peer/compute_queue.py` serves it: the calls that
have reached the peer by `stage_call_priority`, then by arrival.

A call reaches its peer one link latency after it was sent. The latency is the serving peer's, the
same for every caller, so calls arrive in the order they were sent: they wait in that order until
they have arrived, and only then compete by priority.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class ServingQueue(Generic[T]):
    """The calls sent to one peer and not yet started on its compute thread."""

    def __init__(self) -> None:
        self._on_the_way: deque[tuple[float, int, int, T]] = deque()
        self._arrived: list[tuple[int, int, float, T]] = []
        self._order = itertools.count()

    def put(self, arrives_at: float, priority: int, call: T) -> None:
        if self._on_the_way and arrives_at < self._on_the_way[-1][0]:
            raise ValueError(
                f"a call arriving at {arrives_at} was sent after one arriving at {self._on_the_way[-1][0]}: "
                "a peer's calls arrive in the order they were sent"
            )
        self._on_the_way.append((arrives_at, priority, next(self._order), call))

    def waiting(self, now: float) -> int:
        """Calls that have reached the peer by `now` and wait for its compute thread."""
        self._take_in(now)
        return len(self._arrived)

    def next_call(self, now: float) -> tuple[float, float, T] | None:
        """The call the thread starts on, free at `now`: (when it starts, when it arrived, call).
        With nothing arrived yet, the first call on the way, as it arrives."""
        self._take_in(now)
        if self._arrived:
            _, _, arrived_at, call = heapq.heappop(self._arrived)
            return now, arrived_at, call
        if self._on_the_way:
            arrives_at, _, _, call = self._on_the_way.popleft()
            return arrives_at, arrives_at, call
        return None

    def clear(self) -> None:
        self._on_the_way.clear()
        self._arrived.clear()

    def __len__(self) -> int:
        return len(self._on_the_way) + len(self._arrived)

    def _take_in(self, now: float) -> None:
        while self._on_the_way and self._on_the_way[0][0] <= now:
            arrives_at, priority, order, call = self._on_the_way.popleft()
            heapq.heappush(self._arrived, (priority, order, arrives_at, call))
