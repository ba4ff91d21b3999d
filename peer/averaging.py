"""Gradient averaging among the peers of one stage, directly over the data plane.

At a step barrier every member sends its accumulated gradient sum (and the microbatch ids in it)
to every other member and sums what it receives: an all-to-all exchange, simple and exact for the
handful of peers a stage has (each sends (K-1) x stage size). The sum is held until the
coordinator confirms every member averaged over the same peers; only then is the step applied.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True, kw_only=True)
class Contribution:
    grads: Tensor
    counted: list[str]


class GradientInbox:
    """Contributions received from other members, keyed by (step, attempt, sender)."""

    def __init__(self) -> None:
        self._received: dict[tuple[int, int], dict[int, Contribution]] = {}
        self._changed = asyncio.Condition()

    async def put(self, step: int, attempt: int, sender: int, grads: Tensor, counted: list[str]) -> None:
        async with self._changed:
            self._received.setdefault((step, attempt), {})[sender] = Contribution(
                grads=grads, counted=counted
            )
            self._changed.notify_all()

    async def wait_for(self, step: int, attempt: int, senders: set[int]) -> dict[int, Contribution]:
        """Wait until every sender in `senders` has contributed to (step, attempt)."""
        async with self._changed:
            await self._changed.wait_for(lambda: senders <= set(self._received.get((step, attempt), {})))
            got = self._received.get((step, attempt), {})
            return {s: got[s] for s in senders}

    def senders(self, step: int, attempt: int) -> set[int]:
        return set(self._received.get((step, attempt), {}))

    def drop_through(self, step: int) -> None:
        for key in [k for k in self._received if k[0] <= step]:
            del self._received[key]
