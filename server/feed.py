"""In-process publish/subscribe of dashboard frames, per run.

Publishing never blocks: each subscriber has a bounded queue, and a subscriber that falls behind
loses its oldest frames (a dashboard cares about the latest state). Frames are updates, so one lost
leaves a dashboard wrong until the thing it described changes again: the feed asks `caught_up`
before each frame and sends a fresh snapshot instead of the rest of a queue that overflowed.
`publish` may be called from any thread: synchronous routes run in a thread pool.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

DEFAULT_QUEUE_SIZE = 256


class Subscription:
    def __init__(self, run_id: int, maxsize: int) -> None:
        self.run_id = run_id
        self.dropped = 0
        """Frames discarded because this subscriber was too slow."""
        self._dropped_seen = 0
        self._queue: deque[dict[str, Any]] = deque(maxlen=maxsize)
        self._ready = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def _deliver(self, message: dict[str, Any]) -> None:
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
        self._queue.append(message)
        self._ready.set()

    def offer(self, message: dict[str, Any]) -> None:
        try:
            on_own_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_own_loop = False
        if on_own_loop:
            self._deliver(message)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._deliver, message)

    def caught_up(self) -> bool:
        """False once after frames were dropped, with the queue emptied: the subscriber needs a
        snapshot, which holds everything queued and dropped. Frames published after this call are
        queued as usual (a snapshot read after them repeats what they say, which is harmless)."""
        if self.dropped == self._dropped_seen:
            return True
        self._dropped_seen = self.dropped
        self._queue.clear()
        return False

    async def get(self) -> dict[str, Any]:
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        return self._queue.popleft()

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self

    async def __anext__(self) -> dict[str, Any]:
        return await self.get()


class FeedHub:
    def __init__(self, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
        self._queue_size = queue_size
        self._subscribers: dict[int, set[Subscription]] = {}
        self._lock = threading.Lock()

    def publish(self, run_id: int, message: dict[str, Any]) -> None:
        """Send a JSON-ready frame to every current subscriber of the run."""
        with self._lock:
            targets = list(self._subscribers.get(run_id, ()))
        for subscription in targets:
            subscription.offer(message)

    def subscriber_count(self, run_id: int) -> int:
        with self._lock:
            return len(self._subscribers.get(run_id, ()))

    @asynccontextmanager
    async def subscribe(self, run_id: int) -> AsyncIterator[Subscription]:
        subscription = Subscription(run_id, self._queue_size)
        with self._lock:
            self._subscribers.setdefault(run_id, set()).add(subscription)
        try:
            yield subscription
        finally:
            with self._lock:
                subscribers = self._subscribers.get(run_id)
                if subscribers is not None:
                    subscribers.discard(subscription)
                    if not subscribers:
                        del self._subscribers[run_id]
