"""The butterfly exchange of large averaging rounds: a reduce-scatter, then an all-gather.

The stage's flat gradients are cut into K contiguous parts, one per member in the order of peer ids,
each in proportion to its member's weight in the barrier (`server.policies.butterfly_parts`: a member
on a slow link owns a small part, since everything it owns passes through its link K-1 times each
way). Each member sends part j of its sum to member j, sums the K contributions to its own part (in sender
order, as all-to-all members sum whole contributions), and sends that reduced part to every other
member, which puts the K reduced parts together. With equal parts a member sends and takes 2(K-1)/K sums'
worth however large the round, where all-to-all sends K-1 whole sums: in the simulator a stage of 300
members (10,000 peers over 32 stages) never finished an all-to-all round.

Members stay bit-identical: each reduced part is summed once, by its owner, and everyone (the owner
too) uses it as decoded from the one frame the owner encodes. Each member sees only one part of the
others' sums, so a contribution's norm is the sum of its parts' norms as their owners report them
(`server.swarm.verification`), one view per part rather than K-1 views of the whole. The
coordinator chooses the pattern by the round's size (`server.policies.averaging.averaging_pattern`):
small rounds stay all-to-all.

A round in which a member is missing is retried by the coordinator without it, from the start: a
part's boundaries move with K, so nothing received in one attempt serves another.

Once every member has reported, the coordinator checks that each owner summed its part honestly
(`server.policies.part_check`): each member projects what it sent, received and holds onto a random
vector drawn after the fact (`project_parts`), and the projections, being linear, must add up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


def part_bounds(length: int, weights: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) of each of `len(weights)` contiguous parts of `length` elements, in proportion to
    the (positive integer) weights, in integer arithmetic so every member cuts the same parts. Each
    part holds at least one element while `length` allows: the rest is shared by weight."""
    if not weights or min(weights) < 1:
        raise ValueError(f"part weights must be positive integers, got {list(weights)}")
    parts, total = len(weights), sum(weights)
    spare = max(0, length - parts)
    bounds = []
    start, before = 0, 0
    for j, weight in enumerate(weights):
        before += weight
        end = min(j + 1, length) + spare * before // total
        bounds.append((start, end))
        start = end
    return bounds


def reduce_part(contributions: dict[int, Tensor]) -> Tensor:
    """Sender id -> its contribution to one part, summed in sender order (every owner adds alike)."""
    first, *rest = (contributions[sender] for sender in sorted(contributions))
    total = first.clone()
    for part in rest:
        total.add_(part)
    return total


def assemble_parts(reduced: dict[int, Tensor]) -> Tensor:
    """Part index -> reduced part, put back together as the stage's flat summed gradient."""
    return torch.cat([reduced[part] for part in sorted(reduced)])


@dataclass(frozen=True, kw_only=True)
class Part:
    attempt: int
    part: int
    parts: int
    bounds: tuple[int, int]
    """[start, end) of the part in the stage's flat gradients, as its sender cut it."""
    grads: Tensor
    counted: list[str]


class PartInbox:
    """Parts received from other members: per step, per sender, the newest attempt's own part (for
    this member to reduce) and the newest reduced part (for it to put together), so one sender holds
    at most two tensors here per step, each no larger than the stage."""

    def __init__(self) -> None:
        self._received: dict[tuple[int, bool], dict[int, Part]] = {}
        """(Step, reduced) -> sender -> its newest part."""
        self._changed = asyncio.Condition()

    async def put(self, step: int, sender: int, part: Part, *, reduced: bool) -> None:
        async with self._changed:
            by_sender = self._received.setdefault((step, reduced), {})
            held = by_sender.get(sender)
            if held is None or part.attempt >= held.attempt:
                by_sender[sender] = part
            self._changed.notify_all()

    def arrived(
        self,
        step: int,
        attempt: int,
        expected: dict[int, int],
        *,
        reduced: bool,
        bounds: Sequence[tuple[int, int]],
    ) -> set[int]:
        """Senders of `expected` (sender -> the part it is to send) whose part for this attempt is in,
        cut as this member cuts the round's parts (`bounds`, from the barrier it was sent): a part cut
        otherwise is not the one awaited, whatever its sender claims."""
        got = self._received.get((step, reduced), {})
        parts = len(bounds)
        return {
            sender
            for sender, part in expected.items()
            if (held := got.get(sender)) is not None
            and (held.attempt, held.part, held.parts) == (attempt, part, parts)
            and held.bounds == bounds[part]
        }

    async def wait_for(
        self,
        step: int,
        attempt: int,
        expected: dict[int, int],
        *,
        reduced: bool,
        bounds: Sequence[tuple[int, int]],
    ) -> dict[int, Part]:
        """Wait until every sender of `expected` has sent its part for this attempt (`arrived`)."""
        async with self._changed:
            await self._changed.wait_for(
                lambda: self.arrived(step, attempt, expected, reduced=reduced, bounds=bounds) == set(expected)
            )
            got = self._received[(step, reduced)]
            return {s: got[s] for s in expected}

    def drop_through(self, step: int) -> None:
        for key in [k for k in self._received if k[0] <= step]:
            del self._received[key]

    def clear(self) -> None:
        self._received.clear()


DOT_CHUNK = 1 << 16
"""Elements widened to float64 and dotted at a time (512 KB, held in a core's cache)."""


def dot64(a: Tensor, b: Tensor) -> float:
    """<a, b> in float64, chunk by chunk in order: the same bits give the same figure on every member.
    A squared norm (`a is b`) widens each chunk once."""
    total = 0.0
    for x, y in zip(a.reshape(-1).split(DOT_CHUNK), b.reshape(-1).split(DOT_CHUNK), strict=True):
        wide = x.double()
        total += float(torch.dot(wide, wide if a is b else y.double()))
    return total


def projection_vector(seed: int, length: int) -> Tensor:
    """The part check's random vector (`CheckParts`): standard normal, from the seed alone."""
    return torch.randn(length, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)


@dataclass(frozen=True, kw_only=True)
class PartsHandled:
    """What one member handled in a butterfly attempt, kept for its part check until the step is
    applied: each part of its own sum as it sent it (decoded, as its owner received it; its own
    part as it kept it), each sender's contribution to its own part as received, and the sum."""

    attempt: int
    me: int
    bounds: list[tuple[int, int]]
    """The round's parts, as `part_bounds` cut them."""
    sent: list[Tensor]
    received: list[Tensor]
    """By sender rank, this member's own included."""
    total: Tensor


def project_parts(handled: PartsHandled, seed: int) -> dict[str, list[float]]:
    """The member's part check (`server.policies.part_check.PartReport`) for the vector of `seed`."""
    r = projection_vector(seed, handled.total.numel())
    ranges = handled.bounds
    start, end = ranges[handled.me]
    held = [handled.total[a:b] for a, b in ranges]
    return {
        "sent": [dot64(piece, r[a:b]) for piece, (a, b) in zip(handled.sent, ranges, strict=True)],
        "sent_norms_sq": [dot64(piece, piece) for piece in handled.sent],
        "received": [dot64(piece, r[start:end]) for piece in handled.received],
        "held": [dot64(piece, r[a:b]) for piece, (a, b) in zip(held, ranges, strict=True)],
        "held_norms_sq": [dot64(piece, piece) for piece in held],
    }
