"""The trainer: drives granted microbatches through the pipeline, one stage peer at a time.

For every stage call it picks a peer of that stage by stochastic wiring (`routing.StageRouter`);
a call that fails, is refused or times out is retried on another peer of the same stage. Backward
calls carry the stage's input again, so any peer of the stage can serve them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from torch import Tensor

from swarmhub.wire import MicrobatchDone, MicrobatchFailed, PeerEndpoint, PeerUnreachable, RunSpec, WorkGrant

from .data import SampleSource
from .frames import FrameError, FrameKind, decode_frame, encode_frame
from .routing import StageRouter
from .transport import FramePool, TransportError

log = logging.getLogger(__name__)

MAX_ATTEMPTS_PER_CALL = 6
NO_PEER_WAIT_S = 0.5
NO_PEER_PATIENCE_S = 30.0
"""How long a call waits for any peer of its stage to appear before the microbatch is given up."""


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
        credential: str,
        samples: SampleSource,
        pool: FramePool,
        request_work: Callable[[], Awaitable[WorkGrant | None]],
        report: Callable[[MicrobatchDone | MicrobatchFailed | PeerUnreachable], Awaitable[bool]],
        call_timeout_s: float,
        max_frame_bytes: int,
        concurrency: int = 2,
    ) -> None:
        self.run = run
        self.peer_id = peer_id
        self.credential = credential
        self.samples = samples
        self.pool = pool
        self.request_work = request_work
        self.report = report
        self.call_timeout_s = call_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.concurrency = concurrency
        self.routers = [StageRouter() for _ in range(run.num_stages)]
        self.addresses: dict[int, str] = {}
        self.stats = TrainerStats()
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
        except CallFailed as exc:
            self.stats.microbatches_failed += 1
            log.warning("microbatch %s failed: %s", grant.microbatch_id, exc)
            await self.report(
                MicrobatchFailed(step=grant.step, microbatch_id=grant.microbatch_id, reason=str(exc))
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
            )
        )

    async def _pipeline(self, grant: WorkGrant, traffic: list[int]) -> float:
        """Loss of the microbatch; `traffic[0]` accumulates the bytes moved for it."""
        inputs, targets = self.samples.batch(grant.first_sample, grant.samples)
        last = self.run.num_stages - 1
        stage_inputs: list[Tensor] = [inputs]
        for stage in range(last):
            _, out = await self._call(stage, "forward", grant, {"x": stage_inputs[-1]}, traffic, expect="y")
            stage_inputs.append(out["y"])
        info, out = await self._call(
            last, "forward_backward", grant, {"x": stage_inputs[last], "targets": targets}, traffic
        )
        loss = info.get("loss")
        if not isinstance(loss, float):
            raise CallFailed(f"last stage answered without a loss: {info}")
        for stage in range(last - 1, -1, -1):
            grad = out.get("grad_x")
            if grad is None:
                raise CallFailed(f"stage {stage + 1} answered without an input gradient")
            _, out = await self._call(
                stage, "backward", grant, {"x": stage_inputs[stage], "grad": grad}, traffic
            )
        return loss

    async def _call(
        self,
        stage: int,
        kind: FrameKind,
        grant: WorkGrant,
        tensors: dict[str, Tensor],
        traffic: list[int],
        expect: str | None = None,
    ) -> tuple[dict, dict[str, Tensor]]:
        router = self.routers[stage]
        frame = encode_frame(
            kind=kind,
            run_id=self.run.run_id,
            stage=stage,
            microbatch_id=grant.microbatch_id,
            sender=self.peer_id,
            credential=self.credential,
            step=grant.step,
            tensors=tensors,
            codec=self.run.compression,
            info={"samples": grant.samples, "timeout_s": self.call_timeout_s},
        )
        tried: set[int] = set()
        errors: list[str] = []
        waited_since: float | None = None
        attempts = 0
        while attempts < MAX_ATTEMPTS_PER_CALL:
            now = time.monotonic()
            exclude = frozenset(tried) if tried and len(tried) < len(router.peers()) else frozenset()
            peer = router.choose(grant.samples, now, exclude)
            if peer is None or peer not in self.addresses:
                waited_since = waited_since or now
                if now - waited_since > NO_PEER_PATIENCE_S:
                    raise CallFailed(f"no live peer of stage {stage} for {NO_PEER_PATIENCE_S:.0f}s")
                await asyncio.sleep(NO_PEER_WAIT_S)
                continue
            waited_since = None
            attempts += 1
            try:
                reply = await self.pool.request(self.addresses[peer], frame, self.call_timeout_s)
                traffic[0] += len(frame) + len(reply)
                header, out = decode_frame(reply, max_bytes=self.max_frame_bytes)
                if header.kind == "error":
                    raise CallFailed(header.error or "refused without a reason")
                if expect is not None and expect not in out:
                    raise CallFailed(f"reply lacks tensor {expect!r}")
            except (TransportError, FrameError, CallFailed) as exc:
                if isinstance(exc, TransportError):
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
            return header.info, out
        raise CallFailed(f"stage {stage} {kind} failed {attempts} times: " + "; ".join(errors[-3:]))
