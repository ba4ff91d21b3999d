"""The device's queue: one compute thread serving what is queued by priority, then by arrival.

Stage calls of whole microbatches go backward first: the call with the fewest calls of its
microbatch still to come after it is served first (a backward at the first stage finishes its
microbatch, a forward there has the whole pipeline ahead). Finishing microbatches frees the
trainers' slots for new ones, so the microbatches in flight stay spread along the pipeline; served
the other way round, they bunched up waiting for the first stage's backward while the later stages
ran dry (measured in docs/benchmarks.md, issue 13).

A step opens and ends with microbatches smaller than the run's (`server/policies/step_book.py`
grant_size): its first one fills the pipeline, its last ones drain it, and every stage waits for
them at the barrier. Their calls go before any whole microbatch's, critical path first (the most
calls still to come first), so they cross the pipeline at nearly the unloaded pace.

Spot checks (work whose answer only a check needs) come after every stage call, and bookkeeping
(averaging sums, applying a step, exporting a state) before them: it is what the barrier waits on.
In the steady state the order does not change throughput: the thread is never idle while anything
is queued.
"""

from __future__ import annotations

import atexit
import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Literal

BOOKKEEPING_PRIORITY = -(10**6)
PARTIAL_PRIORITY = -(10**3)
SPOT_CHECK_PRIORITY = 10**6
CLOSE_WAIT_S = 60.0
"""The longest a close waits for the call running (a stage call's timeout is of that order)."""

CallKind = Literal["forward", "backward", "forward_backward"]


def stage_call_priority(
    kind: CallKind, stage: int, num_stages: int, *, partial: bool = False, check: bool = False
) -> int:
    """Priority of a stage call (smaller first), from the calls of its microbatch still to come
    after it: fewest first for a whole microbatch, most first (and before every whole one) for a
    `partial` one, smaller than the run's microbatch size. Still to come after a forward at stage s:
    the later stages' forwards, the last stage's forward_backward and the backwards of stages s .. 0;
    after the last stage's forward_backward, the backwards of every stage before it; after a
    backward at stage s, those of the stages before it."""
    if check:
        return SPOT_CHECK_PRIORITY
    last = num_stages - 1
    if kind == "forward":
        to_come = (last - 1 - stage) + 1 + last
    elif kind == "forward_backward":
        to_come = last
    else:
        to_come = stage
    return PARTIAL_PRIORITY - to_come if partial else to_come


class ComputeQueue:
    """One thread running submitted functions one at a time, smallest priority first, then in the
    order they came."""

    def __init__(self, name: str) -> None:
        self._heap: list[tuple[int, int, Callable[[], Any], Future[Any]]] = []
        self._ready = threading.Condition()
        self._arrivals = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()
        # A process that exits while this thread is inside a kernel aborts (SIGABRT) as the
        # interpreter finalizes: at exit, the call running now is let finish first.
        atexit.register(self.close)

    def submit(self, fn: Callable[[], Any], priority: int = 0) -> Future[Any]:
        future: Future[Any] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the compute queue is closed")
            heapq.heappush(self._heap, (priority, next(self._arrivals), fn, future))
            self._ready.notify()
        return future

    def close(self) -> None:
        """Stop after the function running now, and wait for it; whatever is still queued is
        cancelled."""
        with self._ready:
            self._closed = True
            pending, self._heap = self._heap, []
            self._ready.notify()
        for *_, future in pending:
            future.cancel()
        atexit.unregister(self.close)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=CLOSE_WAIT_S)

    def _serve(self) -> None:
        while True:
            with self._ready:
                while not self._heap and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                _, _, fn, future = heapq.heappop(self._heap)
            # A future whose awaiting call was cancelled meanwhile is skipped.
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:  # handed to whoever awaits the future
                future.set_exception(exc)
            else:
                future.set_result(result)
