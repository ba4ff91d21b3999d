"""Forward passes a stage peer keeps for the matching backward call, within a memory bound.

Without it every backward call carries the stage's input again and recomputes the forward (a third
more compute for a block). A peer that served a microbatch's forward keeps the autograd graph, so
the trainer's backward to the same peer carries only the output gradient. The store is a cache, not
a promise: entries are evicted oldest first when the bound is reached, and dropped whenever the
stage's parameters change (a step applied, a state loaded), so a backward that finds nothing is
answered `NOT_KEPT` and the trainer sends the full call to any peer of the stage, as before.

Only the stage's compute thread touches the store; the event loop reads its counters for heartbeats.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from swarmhub.wire import ActivationCacheTally


@dataclass(frozen=True, kw_only=True)
class KeptForward:
    step: int
    inputs: Tensor
    """The stage's input as the graph saw it (requires grad unless this is the first stage)."""
    output: Tensor
    nbytes: int


class ActivationStore:
    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._entries: OrderedDict[str, KeptForward] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def keep(self, microbatch_id: str, entry: KeptForward) -> bool:
        """Store `entry` (replacing one of the same microbatch), evicting the oldest ones to make room;
        False when it alone exceeds the bound."""
        self._drop(microbatch_id)
        if entry.nbytes > self.limit_bytes:
            return False
        while self._entries and self._bytes + entry.nbytes > self.limit_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.nbytes
            self.evictions += 1
        self._entries[microbatch_id] = entry
        self._bytes += entry.nbytes
        return True

    def take(self, microbatch_id: str, step: int) -> KeptForward | None:
        """The kept forward of `microbatch_id` at `step`, removed from the store; None (a miss) if
        it was never kept, evicted, or computed with other parameters."""
        entry = self._entries.pop(microbatch_id, None)
        if entry is not None:
            self._bytes -= entry.nbytes
        if entry is None or entry.step != step:
            self.misses += 1
            return None
        self.hits += 1
        return entry

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def _drop(self, microbatch_id: str) -> None:
        old = self._entries.pop(microbatch_id, None)
        if old is not None:
            self._bytes -= old.nbytes

    def tally(self) -> ActivationCacheTally:
        return ActivationCacheTally(
            entries=len(self._entries),
            bytes=self._bytes,
            limit_bytes=self.limit_bytes,
            hits=self.hits,
            misses=self.misses,
            evictions=self.evictions,
        )


@contextmanager
def counting_saved_bytes() -> Any:
    """Within the block, autograd's saved tensors are counted (each storage once): what keeping the
    graph costs in memory. Yields a callable returning the bytes counted so far."""
    seen: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    def total() -> int:
        return sum(seen.values())

    counter: Callable[[], int] = total
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield counter
