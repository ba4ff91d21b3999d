"""The simulator's clock: a heap of (time, order, handler, argument, argument)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

Handler = Callable[[Any, Any], None]


class EventQueue:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Handler, Any, Any]] = []
        self._order = itertools.count()
        self.handled = 0

    def at(self, time: float, handler: Handler, a: Any = None, b: Any = None) -> None:
        """Run `handler(a, b)` at `time` (never before now); equal times run in the order scheduled."""
        heapq.heappush(self._heap, (max(time, self.now), next(self._order), handler, a, b))

    def run_until(self, end: float) -> None:
        heap = self._heap
        pop = heapq.heappop
        while heap and heap[0][0] <= end:
            time, _, handler, a, b = pop(heap)
            self.now = time
            self.handled += 1
            handler(a, b)
        self.now = end
