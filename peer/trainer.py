"""The trainer: drives granted microbatches through the pipeline, one stage peer at a time.

For every stage call it picks a peer of that stage by stochastic wiring (`routing.StageRouter`);
a call that fails, is refused, times out or is answered by anything but the dialled peer's signed reply
to that call is retried on another peer of the same stage. Backward calls carry the stage's input
again, so any peer of the stage can serve them. A share of the calls is also spot-checked on a
second peer of the stage (`peer/spot_checker.py`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from torch import Tensor

from swarmhub.wire import (
    MicrobatchDone,
    MicrobatchFailed,
    PeerEndpoint,
    PeerUnreachable,
    RunSpec,
    ServedCall,
    SpotCheckMismatch,
    WorkGrant,
)

from .data import SampleSource
from .frame_auth import AuthError, FrameSigner, SenderVerifier
from .frame_headers import (
    BackwardCall,
    BackwardReply,
    ErrorReply,
    ForwardBackwardCall,
    ForwardCall,
    ForwardReply,
    LossReply,
    Reply,
    StageCall,
)
from .frames import FrameError, FrameLimit, assemble_call, encode_payload, open_reply
from .routing import StageRouter
from .spot_checker import SpotChecker
from .transport import FramePool, TransportError, UnlistedAddress

log = logging.getLogger(__name__)

MAX_ATTEMPTS_PER_CALL = 6
MAX_LOSS = 1e4
"""The wire refuses losses beyond this (a byte-level model starts near ln 256): the microbatch failed."""
NO_PEER_WAIT_S = 0.5
NO_PEER_PATIENCE_S = 30.0
"""How long a call waits for any peer of its stage to appear before the microbatch is given up."""

R = TypeVar("R", bound=Reply)


class CallFailed(RuntimeError):
    pass


@dataclass(kw_only=True)
class TrainerStats:
    microbatches_done: int = 0
    microbatches_failed: int = 0
    retries: int = 0
    samples_done: int = 0


class Trainer:
    def __init__(
        self,
        *,
        run: RunSpec,
        peer_id: int,
        signer: FrameSigner,
        verifier: SenderVerifier,
        samples: SampleSource,
        pool: FramePool,
        request_work: Callable[[], Awaitable[WorkGrant | None]],
        report: Callable[
            [MicrobatchDone | MicrobatchFailed | PeerUnreachable | SpotCheckMismatch], Awaitable[bool]
        ],
        call_timeout_s: float,
        max_frame_bytes: FrameLimit,
        concurrency: int = 2,
    ) -> None:
        self.run = run
        self.peer_id = peer_id
        self.signer = signer
        self.verifier = verifier
        """Checks that each reply is the dialled peer's answer to the call it was sent."""
        self.samples = samples
        self.pool = pool
        self.request_work = request_work
        self.report = report
        self.call_timeout_s = call_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.concurrency = concurrency
        self.routers = [StageRouter() for _ in range(run.num_stages)]
        self.addresses: dict[int, str] = {}
        self.checker = SpotChecker(
            run=run,
            peer_id=peer_id,
            signer=signer,
            verifier=verifier,
            pool=pool,
            routers=self.routers,
            addresses=lambda: self.addresses,
            report=report,
            call_timeout_s=call_timeout_s,
            max_frame_bytes=max_frame_bytes,
        )
        self.stats = TrainerStats()
        self._served: dict[str, list[ServedCall]] = {}
        """Per microbatch in flight: its successful stage calls, timed, for the coordinator."""
        self.work_available = asyncio.Event()
        self.work_available.set()

    def update_swarm(self, peers: list[PeerEndpoint]) -> None:
        addresses = {p.peer_id: p.address for p in peers}
        for gone in set(self.addresses.values()) - set(addresses.values()):
            self.pool.abandon(gone)
        self.addresses = addresses
        for stage, router in enumerate(self.routers):
            members = [p for p in peers if p.stage == stage]
            router.update_peers(
                {p.peer_id: p.throughput for p in members}, {p.peer_id: p.queue_length for p in members}
            )

    async def run_forever(self) -> None:
        await asyncio.gather(*(self._slot() for _ in range(self.concurrency)))

    async def _slot(self) -> None:
        while True:
            await self.work_available.wait()
            grant = await self.request_work()
            if grant is None:
                # The step is full (or the run paused): wait for the coordinator to open the next one.
                self.work_available.clear()
                try:
                    async with asyncio.timeout(2.0):
                        await self.work_available.wait()
                except TimeoutError:
                    self.work_available.set()
                continue
            await self.train_microbatch(grant)

    async def train_microbatch(self, grant: WorkGrant) -> None:
        retries_before = self.stats.retries
        traffic = [0]
        try:
            loss = await self._pipeline(grant, traffic)
            if not math.isfinite(loss) or not 0 <= loss <= MAX_LOSS:
                raise CallFailed(f"the last stage answered a loss of {loss}")
        except CallFailed as exc:
            self._served.pop(grant.microbatch_id, None)
            self.stats.microbatches_failed += 1
            log.warning("microbatch %s failed: %s", grant.microbatch_id, exc)
            await self.report(
                MicrobatchFailed(step=grant.step, microbatch_id=grant.microbatch_id, reason=str(exc)[:500])
            )
            return
        self.stats.microbatches_done += 1
        self.stats.samples_done += grant.samples
        await self.report(
            MicrobatchDone(
                step=grant.step,
                microbatch_id=grant.microbatch_id,
                samples=grant.samples,
                loss=loss,
                retries=self.stats.retries - retries_before,
                bytes_sent=traffic[0],
                served=self._served.pop(grant.microbatch_id, []),
            )
        )

    async def _pipeline(self, grant: WorkGrant, traffic: list[int]) -> float:
        """Loss of the microbatch; `traffic[0]` accumulates the bytes moved for it."""
        inputs, targets = self.samples.batch(grant.first_sample, grant.samples)
        last = self.run.num_stages - 1
        stage_inputs: list[Tensor] = [inputs]
        for stage in range(last):
            _, out = await self._call(
                stage, ForwardCall, ForwardReply, grant, {"x": stage_inputs[-1]}, traffic, expect="y"
            )
            stage_inputs.append(out["y"])
        reply, out = await self._call(
            last,
            ForwardBackwardCall,
            LossReply,
            grant,
            {"x": stage_inputs[last], "targets": targets},
            traffic,
        )
        for stage in range(last - 1, -1, -1):
            grad = out.get("grad_x")
            if grad is None:
                raise CallFailed(f"stage {stage + 1} answered without an input gradient")
            _, out = await self._call(
                stage, BackwardCall, BackwardReply, grant, {"x": stage_inputs[stage], "grad": grad}, traffic
            )
        return reply.loss

    async def _call(
        self,
        stage: int,
        call: type[StageCall],
        reply_kind: type[R],
        grant: WorkGrant,
        tensors: dict[str, Tensor],
        traffic: list[int],
        expect: str | None = None,
    ) -> tuple[R, dict[str, Tensor]]:
        router = self.routers[stage]
        header = call(
            run_id=self.run.run_id,
            sender=self.peer_id,
            stage=stage,
            step=grant.step,
            microbatch_id=grant.microbatch_id,
            samples=grant.samples,
            timeout_s=self.call_timeout_s,
        )
        kind = header.kind
        # Encoded once; each attempt's frame is addressed to (and signed for) the peer it goes to.
        payload = encode_payload(tensors, self.run.compression)
        frame_bytes = sum(m.nbytes for m in payload.metas)
        tried: set[int] = set()
        errors: list[str] = []
        waited_since: float | None = None
        attempts = 0
        # A reply is about as large as its call (activations forward, their gradients back).
        exchanged = 2 * frame_bytes
        router.update_links(self.pool.links.rates())
        while attempts < MAX_ATTEMPTS_PER_CALL:
            now = time.monotonic()
            exclude = frozenset(tried) if tried and len(tried) < len(router.peers()) else frozenset()
            peer = router.choose(grant.samples, now, exclude, nbytes=exchanged)
            if peer is None or peer not in self.addresses:
                waited_since = waited_since or now
                if now - waited_since > NO_PEER_PATIENCE_S:
                    raise CallFailed(f"no live peer of stage {stage} for {NO_PEER_PATIENCE_S:.0f}s")
                await asyncio.sleep(NO_PEER_WAIT_S)
                continue
            waited_since = None
            attempts += 1
            frame, sent = assemble_call(header, payload, self.signer, receiver=peer)
            started = time.monotonic()
            try:
                reply = await self.pool.request(
                    self.addresses[peer],
                    frame,
                    self.call_timeout_s,
                    peer_id=peer,
                    compute_s=router.compute_s(peer, grant.samples),
                )
                traffic[0] += len(frame) + len(reply)
                answer, out = open_reply(
                    reply, max_bytes=self.max_frame_bytes, verifier=self.verifier, call=sent
                )
                if isinstance(answer, ErrorReply):
                    raise CallFailed(answer.error or "refused without a reason")
                if not isinstance(answer, reply_kind):
                    raise CallFailed(f"answered a {kind} call with a {answer.kind} frame")
                if expect is not None and expect not in out:
                    raise CallFailed(f"reply lacks tensor {expect!r}")
            except (TransportError, FrameError, AuthError, CallFailed) as exc:
                if isinstance(exc, TransportError) and not isinstance(exc, UnlistedAddress):
                    # No answer at all (a refusal would be an error frame): the coordinator decides
                    # from several trainers' reports whether the peer is gone.
                    await self.report(PeerUnreachable(peer_id=peer, reason=str(exc)[:500]))
                router.report_failure(peer, time.monotonic())
                tried.add(peer)
                self.stats.retries += 1
                errors.append(f"peer {peer}: {exc}")
                log.info(
                    "stage %d %s call to peer %d failed (%s); retrying elsewhere", stage, kind, peer, exc
                )
                continue
            router.report_success(peer)
            self.checker.maybe_check(header, payload, peer, frame, reply, answer, out)
            elapsed = max(time.monotonic() - started, 1e-6)
            served = ServedCall(peer_id=peer, samples=grant.samples, seconds=min(elapsed, 3600.0))
            self._served.setdefault(grant.microbatch_id, []).append(served)
            return answer, out
        raise CallFailed(f"stage {stage} {kind} failed {attempts} times: " + "; ".join(errors[-3:]))
