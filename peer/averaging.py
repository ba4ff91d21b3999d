"""Gradient averaging among the peers of one stage, directly over the data plane.

At a step barrier every member sends its accumulated gradient sum (and the microbatch ids in it)
to every other member and sums what it receives: an all-to-all exchange, simple and exact for the
handful of peers a stage has (each sends (K-1) x stage size). The sum is held until the
coordinator confirms every member averaged over the same peers; only then is the step applied.

A member's sum is the same in every attempt at a step's round (its accumulator is frozen at the
first barrier), so a new attempt (a member was lost mid-round) does not send it again to members
that acknowledged it: they still hold it. Simulated at 100 spot peers, restarts that pushed
everything again spent most of a short-lived swarm's averaging on sums already delivered.

Sums travel with the run's codec. A lossy codec must not let members drift apart (each stage's
members stay bit-identical), so a member adds its own contribution as the others receive it:
decoded from the very frame it sends. Every member then sums the same decoded tensors in the same
order (by sender id) and gets the same bits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from swarmhub.wire import (
    ApplyStep,
    AveragingDone,
    CheckParts,
    ContributionNorm,
    PartsChecked,
    PeerEndpoint,
    PeerUnreachable,
    StepApplied,
    StepBarrier,
)

from .butterfly import Part, PartsHandled, assemble_parts, dot64, part_bounds, project_parts, reduce_part
from .compression import get_codec
from .frame_auth import AuthError
from .frame_headers import ErrorReply, PushGrads
from .frames import FrameError, Payload, assemble, assemble_call, decode_payload, encode_payload, open_reply
from .transport import TransportError, transfer_timeout_s

if TYPE_CHECKING:
    from .joined import JoinedPeer

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Contribution:
    grads: Tensor
    counted: list[str]


def contribution(header: PushGrads, grads: Tensor, codec: str) -> tuple[Payload, Tensor]:
    """The push payload for `grads` (encoded once, sent to every member in a frame addressed to it),
    and `grads` as every receiver will decode it from that payload: `grads` itself where the codec
    gives back what it was given (decoding swarm-ref's 60 MB head-stage sum again only to get the same
    bits was a tenth of a member's averaging work on the compute thread)."""
    payload = encode_payload({"grads": grads}, codec)
    _ = payload.digest  # hashed here, on the compute thread, not on the event loop when signing
    if get_codec(codec).lossless:
        return payload, grads
    decoded = decode_payload(header.model_copy(update={"tensors": payload.metas}), b"".join(payload.blobs))
    return payload, decoded["grads"]


def contribution_frame(header: PushGrads, grads: Tensor, codec: str) -> tuple[bytes, Tensor]:
    """One unsigned push frame for `grads` and `grads` as decoded from it (measurements, tests)."""
    payload, decoded = contribution(header, grads, codec)
    return assemble(header, payload), decoded


def sum_contributions(grads: dict[int, Tensor]) -> Tensor:
    """Sender id -> decoded contribution, summed in sender order so every member adds alike. Added
    one by one into a copy of the first: stacking them first copied K whole stage gradients (3.6x
    the time for four of swarm-ref's head stage, 15 M parameters)."""
    first, *rest = (grads[sender] for sender in sorted(grads))
    total = first.clone()
    for grad in rest:
        total.add_(grad)
    return total


def norm_sq(t: Tensor) -> float:
    """Squared L2 norm in float64 (`dot64`): each chunk of `DOT_CHUNK` elements widened and dotted
    with itself, the chunks' sums added in order. As accurate as a float64 copy of `t` (1e-14
    relative for a 15 M parameter stage) without one, and 8x faster than
    `torch.linalg.vector_norm(t, dtype=float64)`, which a member ran on every contribution of a
    round: a fifth of swarm-ref's head-stage averaging work in a profile. The same bits give the
    same figure, so members still agree."""
    return dot64(t, t)


def summarize(contributions: dict[int, Contribution]) -> tuple[Tensor, float, dict[int, float]]:
    """The stage's summed gradient, its squared norm, and each contribution's squared norm."""
    norms = {sender: norm_sq(c.grads) for sender, c in contributions.items()}
    if len(contributions) == 1:
        # A lone member's sum is its contribution, norm and all.
        [(only, c)] = contributions.items()
        return c.grads, norms[only], norms
    total = sum_contributions({sender: c.grads for sender, c in contributions.items()})
    return total, norm_sq(total), norms


class GradientInbox:
    """Contributions received from other members: per step, each sender's newest only, so a sender
    holds at most one sum here per step however many attempts it names (the stage server takes
    pushes only for the step it is at, and only from authenticated senders). A sum received in one
    attempt serves every later attempt of the step: the sender's sum does not change between them."""

    def __init__(self) -> None:
        self._received: dict[int, dict[int, tuple[int, Contribution]]] = {}
        """Step -> sender -> (attempt, contribution)."""
        self._changed = asyncio.Condition()

    async def put(self, step: int, attempt: int, sender: int, grads: Tensor, counted: list[str]) -> None:
        async with self._changed:
            by_sender = self._received.setdefault(step, {})
            held = by_sender.get(sender)
            if held is None or attempt >= held[0]:
                by_sender[sender] = (attempt, Contribution(grads=grads, counted=counted))
            self._changed.notify_all()

    async def wait_for(self, step: int, senders: set[int]) -> dict[int, Contribution]:
        """Wait until every sender in `senders` has contributed to the step, in this attempt or an
        earlier one."""
        async with self._changed:
            await self._changed.wait_for(lambda: senders <= self.senders(step))
            got = self._received.get(step, {})
            return {s: got[s][1] for s in senders}

    def senders(self, step: int) -> set[int]:
        return set(self._received.get(step, {}))

    def drop_through(self, step: int) -> None:
        for key in [k for k in self._received if k <= step]:
            del self._received[key]

    def clear(self) -> None:
        """Forget every sum: the coordinator restarted (or dropped this peer), and the senders threw
        their accumulated gradients away, so what they sent before is nobody's contribution now."""
        self._received.clear()


class Deliveries:
    """Which members acknowledged this peer's sum, per step: a later attempt of the step pushes only
    to the others. Keyed by the sum's digest as well, so a sum that changed (the accumulator was
    thrown away and filled again) goes to everyone."""

    def __init__(self) -> None:
        self._acked: dict[int, tuple[bytes, set[int]]] = {}
        """Step -> (digest of the sum pushed, members that acknowledged it)."""

    def still_to_push(self, step: int, digest: bytes, members: list[PeerEndpoint]) -> list[PeerEndpoint]:
        held = self._acked.get(step)
        if held is None or held[0] != digest:
            return members
        return [m for m in members if m.peer_id not in held[1]]

    def acknowledged(self, step: int, digest: bytes, peer_id: int) -> None:
        held = self._acked.get(step)
        if held is None or held[0] != digest:
            held = self._acked[step] = (digest, set())
        held[1].add(peer_id)

    def drop_through(self, step: int) -> None:
        for key in [k for k in self._acked if k <= step]:
            del self._acked[key]

    def clear(self) -> None:
        self._acked.clear()


class Averager:
    """This peer's side of each step's exchange: push its sum at a `StepBarrier`, keep the group's
    sum until `ApplyStep`, then step the stage with it."""

    def __init__(self, peer: JoinedPeer) -> None:
        self._peer = peer
        self._pending_sum: dict[int, tuple[int, Tensor]] = {}
        """Step -> (averaging attempt, the group's summed gradient), kept until the update is applied."""
        self._parts_handled: dict[int, PartsHandled] = {}
        """Step -> what this peer handled in its latest butterfly attempt, for the part check."""
        self.deliveries = Deliveries()

    async def average(self, barrier: StepBarrier) -> None:
        peer = self._peer
        server = peer.server
        worker = server.worker
        if worker is None or worker.stage != barrier.stage or worker.step != barrier.step:
            log.warning(
                "barrier for stage %d step %d does not match this peer's state", barrier.stage, barrier.step
            )
            return
        worker.frozen = True
        counted = sorted(worker.accumulated)
        others = [p for p in barrier.group if p.peer_id != peer.peer_id]
        header = PushGrads(
            run_id=peer.run.run_id,
            sender=peer.peer_id,
            stage=barrier.stage,
            step=barrier.step,
            attempt=barrier.attempt,
            counted=counted,
        )
        fault = server.fault

        def own_gradients() -> Tensor:
            grads = worker.flat_gradients()
            return grads if fault is None else fault.scale_contribution(grads)

        if not others:
            # A lone member sends nothing: no frame to encode, and its sum is its own gradients.
            await self._report(barrier, peer.peer_id, counted, await server.compute(own_gradients), {})
            return
        if barrier.pattern == "butterfly":
            await self._butterfly(barrier, counted, own_gradients)
            return
        payload, mine = await server.compute(
            lambda: contribution(header, own_gradients(), peer.run.compression)
        )
        # The coordinator gives a round with a slow member longer than a peer assumes on its own.
        timeout = max(
            transfer_timeout_s(sum(m.nbytes for m in payload.metas) * len(barrier.group)),
            barrier.push_timeout_s or 0.0,
        )

        async def push(peer_id: int, address: str) -> None:
            await self._push(header, payload, peer_id, address, timeout)
            self.deliveries.acknowledged(barrier.step, payload.digest, peer_id)

        members = {p.peer_id for p in others}
        receivers = self.deliveries.still_to_push(barrier.step, payload.digest, others)
        try:
            async with asyncio.timeout(timeout):
                pushed = await asyncio.gather(
                    *(push(p.peer_id, p.address) for p in receivers), return_exceptions=True
                )
                outcomes = zip(receivers, pushed, strict=True)
                failed = {p.peer_id: result for p, result in outcomes if result is not None}
                if failed:
                    # Each push's own error: "failed" alone left a refused frame, a closed connection and
                    # a slow link looking alike.
                    causes = "; ".join(f"{peer_id}: {failed[peer_id]}" for peer_id in sorted(failed))
                    raise TransportError(f"gradient push to peers {sorted(failed)} failed ({causes})")
                received = await server.inbox.wait_for(barrier.step, members)
        except (TransportError, TimeoutError) as exc:
            # Name the members that did not deliver: the coordinator marks them lost on enough such
            # reports and starts a new attempt without them.
            arrived = server.inbox.senders(barrier.step)
            for peer_id in sorted(members - arrived):
                await peer.control.send(
                    PeerUnreachable(
                        peer_id=peer_id,
                        reason=f"no gradients for step {barrier.step} within {timeout:.0f}s: {exc}"[:500],
                    )
                )
            log.warning("averaging step %d attempt %d stalled: %s", barrier.step, barrier.attempt, exc)
            return
        await self._report(barrier, peer.peer_id, counted, mine, received)

    async def _push(
        self, header: PushGrads, payload: Payload, peer_id: int, address: str, timeout: float
    ) -> None:
        """Send one push to a member and check its signed acknowledgement."""
        peer = self._peer
        frame, sent = assemble_call(header, payload, peer.signer, receiver=peer_id)
        reply = await peer.pool.request(address, frame, timeout, peer_id=peer_id)
        try:
            # A forged acknowledgement would hide a push that never arrived.
            answer, _ = open_reply(
                reply, max_bytes=peer.frame_limits.for_kind, verifier=peer.server.verifier, call=sent
            )
        except (FrameError, AuthError) as exc:
            raise TransportError(f"gradient push answered with a refused reply: {exc}") from exc
        if isinstance(answer, ErrorReply):
            raise TransportError(f"gradient push refused: {answer.error}")

    async def _butterfly(
        self, barrier: StepBarrier, counted: list[str], own_gradients: Callable[[], Tensor]
    ) -> None:
        """This member's side of a butterfly round (`peer/butterfly.py`): its parts out, its own part
        reduced and sent back to all, the reduced parts put together; then the report. A member
        whose part does not come in time is named to the coordinator: a sender of this member's own
        part if any is missing (an owner that lacks a part sends nothing, so a missing reduced part
        says nothing of its owner then), else the owners whose reduced part is missing."""
        peer = self._peer
        server = peer.server
        worker = server.worker
        assert worker is not None
        ids = sorted(p.peer_id for p in barrier.group)
        parts = len(ids)
        rank = {peer_id: index for index, peer_id in enumerate(ids)}
        me = rank[peer.peer_id]
        addresses = {p.peer_id: p.address for p in barrier.group}
        others = [peer_id for peer_id in ids if peer_id != peer.peer_id]
        length = worker.parameter_count
        weighed = barrier.part_weights or [1] * parts
        weights = dict(zip((p.peer_id for p in barrier.group), weighed, strict=True))
        bounds = part_bounds(length, [weights[peer_id] for peer_id in ids])
        codec = peer.run.compression
        lossless = get_codec(codec).lossless

        def header(part: int, *, reduced: bool) -> PushGrads:
            return PushGrads(
                run_id=peer.run.run_id,
                sender=peer.peer_id,
                stage=barrier.stage,
                step=barrier.step,
                attempt=barrier.attempt,
                counted=[] if reduced else counted,
                part=part,
                parts=parts,
                bounds=bounds[part],
                reduced=reduced,
            )

        def cut() -> tuple[dict[int, Payload], list[Tensor]]:
            """Each other member's payload, and every part as its owner will hold it (decoded)."""
            grads = own_gradients()
            payloads: dict[int, Payload] = {}
            sent = [grads[start:end] for start, end in bounds]
            for peer_id in others:
                j = rank[peer_id]
                payloads[peer_id], sent[j] = contribution(header(j, reduced=False), sent[j], codec)
            if not lossless:
                _, sent[me] = contribution(header(me, reduced=False), sent[me], codec)
            return payloads, sent

        payloads, sent = await server.compute(cut)
        mine = sent[me]
        sent_bytes = sum(m.nbytes for payload in payloads.values() for m in payload.metas)
        timeout = max(transfer_timeout_s(2 * sent_bytes), barrier.push_timeout_s or 0.0)
        failures: dict[int, BaseException] = {}

        async def push(part_header: PushGrads, payload: Payload, peer_id: int) -> None:
            try:
                await self._push(part_header, payload, peer_id, addresses[peer_id], timeout)
            except TransportError as exc:
                failures[peer_id] = exc

        def reduce(received: dict[int, Part]) -> tuple[Payload, Tensor, dict[int, float]]:
            pieces = {peer.peer_id: mine, **{sender: got.grads for sender, got in received.items()}}
            norms = {sender: norm_sq(piece) for sender, piece in pieces.items()}
            reduced = reduce_part(pieces)
            if server.fault is not None:
                reduced = server.fault.corrupt_part(reduced)
            payload, decoded = contribution(header(me, reduced=True), reduced, codec)
            return payload, decoded, norms

        step, attempt = barrier.step, barrier.attempt
        own_part = dict.fromkeys(others, me)
        their_parts = {peer_id: rank[peer_id] for peer_id in others}
        gathered: dict[int, Part] | None = None
        try:
            async with asyncio.timeout(timeout), asyncio.TaskGroup() as pushes:
                for peer_id in others:
                    pushes.create_task(push(header(rank[peer_id], reduced=False), payloads[peer_id], peer_id))
                received = await server.parts.wait_for(step, attempt, own_part, reduced=False, bounds=bounds)
                reduced_payload, reduced_mine, norms = await server.compute(lambda: reduce(received))
                for peer_id in others:
                    pushes.create_task(push(header(me, reduced=True), reduced_payload, peer_id))
                gathered = await server.parts.wait_for(
                    step, attempt, their_parts, reduced=True, bounds=bounds
                )
        except TimeoutError:
            if gathered is None:
                await self._name_missing(barrier, own_part, their_parts, bounds, timeout, failures)
                return
            # Every part came in and only this member's own pushes ran out of time: the members they
            # were for name it.
        if failures:
            log.warning("butterfly step %d attempt %d: pushes failed: %s", step, attempt, failures)

        def put_together() -> tuple[Tensor, float]:
            total = assemble_parts({me: reduced_mine, **{rank[s]: got.grads for s, got in gathered.items()}})
            return total, norm_sq(total)

        total, total_norm_sq = await server.compute(put_together)
        self._pending_sum[step] = (attempt, total)
        by_rank = {rank[sender]: got.grads for sender, got in received.items()}
        self._parts_handled[step] = PartsHandled(
            attempt=attempt,
            me=me,
            bounds=bounds,
            sent=sent,
            received=[mine if j == me else by_rank[j] for j in range(parts)],
            total=total,
        )
        log.info("stage %d step %d: averaged in a butterfly of %d members", barrier.stage, step, parts)
        counted_by = {peer.peer_id: counted, **{sender: got.counted for sender, got in received.items()}}
        await peer.control.send(
            AveragingDone(
                step=step,
                attempt=attempt,
                stage=barrier.stage,
                contributors=ids,
                counted=sorted({mb for listed in counted_by.values() for mb in listed}),
                grad_sum_norm_sq=total_norm_sq,
                contributions=[
                    ContributionNorm(peer_id=sender, norm_sq=norms[sender], counted=counted_by[sender])
                    for sender in ids
                ],
            )
        )

    async def _name_missing(
        self,
        barrier: StepBarrier,
        own_part: dict[int, int],
        their_parts: dict[int, int],
        bounds: list[tuple[int, int]],
        timeout: float,
        failures: dict[int, BaseException],
    ) -> None:
        """Tell the coordinator whose parts did not come in time (`_butterfly`)."""
        peer = self._peer
        inbox = peer.server.parts
        step, attempt = barrier.step, barrier.attempt
        missing = set(own_part) - inbox.arrived(step, attempt, own_part, reduced=False, bounds=bounds)
        if not missing:
            gathered = inbox.arrived(step, attempt, their_parts, reduced=True, bounds=bounds)
            missing = set(their_parts) - gathered
        causes = "; ".join(f"push to {p} failed: {failures[p]}" for p in sorted(failures))
        for peer_id in sorted(missing):
            await peer.control.send(
                PeerUnreachable(
                    peer_id=peer_id,
                    reason=f"no gradient part for step {step} within {timeout:.0f}s. {causes}"[:500],
                )
            )
        log.warning(
            "butterfly averaging step %d attempt %d stalled; missing %s", step, attempt, sorted(missing)
        )

    async def _report(
        self,
        barrier: StepBarrier,
        own_id: int,
        counted: list[str],
        mine: Tensor,
        received: dict[int, Contribution],
    ) -> None:
        """Sum the contributions, hold the sum until the step is applied, and tell the coordinator."""
        peer = self._peer
        contributions = {own_id: Contribution(grads=mine, counted=counted), **received}
        # Sums and norms of whole stage gradients: the compute thread's work, not the event loop's.
        total, total_norm_sq, norms_sq = await peer.server.compute(lambda: summarize(contributions))
        self._pending_sum[barrier.step] = (barrier.attempt, total)
        union = sorted({mb for c in contributions.values() for mb in c.counted})
        await peer.control.send(
            AveragingDone(
                step=barrier.step,
                attempt=barrier.attempt,
                stage=barrier.stage,
                contributors=sorted(p.peer_id for p in barrier.group),
                counted=union,
                grad_sum_norm_sq=total_norm_sq,
                contributions=[
                    ContributionNorm(peer_id=sender, norm_sq=norms_sq[sender], counted=c.counted)
                    for sender, c in sorted(contributions.items())
                ],
            )
        )

    async def check_parts(self, message: CheckParts) -> None:
        """Answer the coordinator's part check of a butterfly attempt this peer averaged in."""
        handled = self._parts_handled.get(message.step)
        worker = self._peer.server.worker
        if (
            handled is None
            or handled.attempt != message.attempt
            or worker is None
            or worker.stage != message.stage
        ):
            log.warning(
                "part check for stage %d step %d attempt %d, which this peer did not average in",
                message.stage,
                message.step,
                message.attempt,
            )
            return
        figures = await self._peer.server.compute(lambda: project_parts(handled, message.seed))
        await self._peer.control.send(
            PartsChecked(step=message.step, attempt=message.attempt, stage=message.stage, **figures)
        )

    async def apply(self, message: ApplyStep) -> bool:
        """Step the stage with the recorded update if this peer holds the sum it applies to; then tell
        the coordinator. False (and nothing changed) if it does not."""
        server = self._peer.server
        worker = server.worker
        if (
            message.samples == 0
            and worker is not None
            and (worker.stage, worker.step) == (message.stage, message.step)
        ):
            # An empty step (the stage's averaging found nobody to blame for its stall): every member
            # steps its counter and nothing else, so the stage's copies stay identical.
            self._pending_sum.pop(message.step, None)
            await server.compute(lambda: worker.apply_step(torch.zeros(0), 0, message.learning_rate, 1.0))
            self._forget_through(message.step)
            await self._peer.control.send(StepApplied(step=message.step, stage=message.stage))
            return True
        pending = self._pending_sum.get(message.step)
        if (
            worker is None
            or worker.stage != message.stage
            or worker.step != message.step
            or pending is None
            or pending[0] != message.attempt
        ):
            log.warning("apply for step %d but this peer has no averaged gradient for it", message.step)
            return False
        del self._pending_sum[message.step]
        summed = pending[1]
        # A peer faulty on purpose (`--fault stale`) moves its step on and keeps its weights.
        samples = 0 if server.fault is not None and server.fault.keeps_stale_weights else message.samples
        await server.compute(
            lambda: worker.apply_step(summed, samples, message.learning_rate, message.grad_scale)
        )
        self._forget_through(message.step)
        await self._peer.control.send(StepApplied(step=message.step, stage=message.stage))
        return True

    def _forget_through(self, step: int) -> None:
        for key in [k for k in self._parts_handled if k <= step]:
            del self._parts_handled[key]
        self._peer.server.inbox.drop_through(step)
        self._peer.server.parts.drop_through(step)
        self.deliveries.drop_through(step)

    def forget_sums(self) -> None:
        """The coordinator restarted or dropped this peer, and everyone's accumulated gradients were
        thrown away: no sum sent or received so far is anyone's contribution."""
        self._parts_handled.clear()
        self._peer.server.inbox.clear()
        self._peer.server.parts.clear()
        self.deliveries.clear()
