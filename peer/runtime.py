"""A running peer: registers, then follows the coordinator until stopped.

Registration (`registration.py`) and start-up (`joined.py`) give a `JoinedPeer`; from then on every
message the coordinator sends on the control channel is routed by `MessageRouter` to the part that
handles it: the stage loader and checkpoint upload (`stage_state.py`), the averager
(`averaging.py`), the trainer. Tensors only ever move over the data plane.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import time
from collections.abc import Callable, Coroutine
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import httpx
import torch

from swarmhub.settings import PeerSettings
from swarmhub.tls import DataPlaneCertificate, coordinator_context, data_plane_tls, generate_certificate
from swarmhub.wire import (
    ApplyStep,
    Arbitrate,
    CheckpointRequest,
    CoordinatorToPeerMessage,
    DataPlaneTicket,
    Goodbye,
    Heartbeat,
    Kicked,
    NoWork,
    PeerRegistered,
    PeerRegistration,
    Reachability,
    RunStatusChanged,
    StageAssignment,
    StepBarrier,
    StepCommitted,
    SwarmView,
    Welcome,
    WorkGrant,
)

from .averaging import Averager
from .control import Rejected
from .fits import RunDoesNotFit, check_fits
from .joined import JoinedPeer, PeerStopped, join
from .links import LINK_REPORT_MAX_AGE_S
from .registration import register
from .stage_state import load_stage, upload_checkpoint
from .trainer import Trainer

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 1.0
UPLOAD_GRACE_S = 120.0


GIL_SWITCH_INTERVAL_S = 0.0005


@dataclass(kw_only=True)
class ProgressLine:
    """What the terminal shows; one line per committed step."""

    started: float = field(default_factory=time.monotonic)

    def render(
        self, *, step: int, loss: float | None, stage: int | None, trainer: Trainer, throughput: float
    ) -> str:
        elapsed = time.monotonic() - self.started
        loss_text = "-" if loss is None else f"{loss:.4f}"
        return (
            f"step {step:5d}  loss {loss_text}  stage {stage if stage is not None else '-'}  "
            f"stage rate {throughput:7.1f} samples/s  trained {trainer.stats.samples_done} samples "
            f"({trainer.stats.samples_done / max(elapsed, 1e-9):.1f}/s)  retries {trainer.stats.retries}  "
            f"in flight {trainer.concurrency}  kept backwards {kept_share(trainer)}"
        )


def kept_share(trainer: Trainer) -> str:
    """Share of the trainer's backward calls served from a kept forward (no input resent)."""
    total = trainer.stats.kept_backwards + trainer.stats.full_backwards
    return "-" if total == 0 else f"{100 * trainer.stats.kept_backwards / total:.0f}%"


class MessageRouter:
    """Hands each coordinator message to the part that handles it. Loading a stage, averaging and
    uploading run as background tasks; a new assignment or barrier replaces the running one."""

    def __init__(self, peer: JoinedPeer, stop: Callable[[str], None]) -> None:
        self._peer = peer
        self._stop = stop
        self._averager = Averager(peer)
        self._progress = ProgressLine()
        self._loading: asyncio.Task[None] | None = None
        self._averaging: asyncio.Task[None] | None = None
        self.uploads: set[asyncio.Task[None]] = set()

    async def route(self, message: CoordinatorToPeerMessage) -> None:
        peer = self._peer
        # Endpoints come with their certificates' fingerprints: the pool learns them before anything
        # dials those addresses.
        match message:
            case Welcome():
                peer.admit(message.data_key)
                if peer.server.worker is not None:
                    await peer.server.compute(peer.server.worker.discard_accumulated)
            case DataPlaneTicket():
                peer.take_ticket(message)
            case StageAssignment():
                peer.pool.learn(message.state_sources)
                if self._loading is not None:
                    self._loading.cancel()
                self._loading = self._background(load_stage(peer, message, self._averager), "loading stage")
            case SwarmView():
                peer.pool.learn(message.peers)
                peer.trainer.update_swarm(message.peers)
            case WorkGrant() | NoWork():
                peer.work.answer(message)
            case StepBarrier():
                peer.pool.learn(message.group)
                if self._averaging is not None:
                    self._averaging.cancel()
                self._averaging = self._background(self._averager.average(message), "averaging")
            case ApplyStep():
                await self._averager.apply(message)
            case StepCommitted():
                peer.say(
                    self._progress.render(
                        step=message.step,
                        loss=message.loss,
                        stage=peer.stage,
                        trainer=peer.trainer,
                        throughput=peer.server.throughput,
                    )
                )
                peer.trainer.work_available.set()
            case CheckpointRequest():
                task = self._background(upload_checkpoint(peer, message), "checkpoint upload")
                self.uploads.add(task)
                task.add_done_callback(self.uploads.discard)
            case RunStatusChanged():
                if message.status in ("finished", "archived"):
                    peer.say(f"run is {message.status}; leaving")
                    self._stop(f"run {message.status}")
                elif message.status == "active":
                    peer.trainer.work_available.set()
            case Reachability():
                peer.say(message.detail)
            case Arbitrate():
                peer.pool.learn([message.referee])
                self._background(peer.trainer.checker.arbitrate(message), "arbitration")
            case Kicked():
                peer.say(f"removed by the coordinator: {message.reason}")
                self._stop(f"kicked: {message.reason}")

    def _background(self, coro: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        """A failure is logged, not fatal, unless it is the end of this peer's part."""
        task = asyncio.ensure_future(coro)

        def done(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                if isinstance(task.exception(), PeerStopped):
                    self._stop(str(task.exception()))
                else:
                    log.error("%s failed", what, exc_info=task.exception())

        task.add_done_callback(done)
        return task


class PeerRuntime:
    def __init__(self, coordinator_url: str, token: str, settings: PeerSettings, name: str = "") -> None:
        self.coordinator_url = coordinator_url.rstrip("/")
        self.token = token
        self.settings = settings
        self.name = name or socket.gethostname()
        self.stopped = asyncio.Event()
        self.stop_reason = ""
        self._tasks: set[asyncio.Task[object]] = set()

    def stop(self, reason: str) -> None:
        if not self.stopped.is_set():
            self.stop_reason = reason
            self.stopped.set()

    async def run(self) -> str:
        """Join and train until stopped; returns why it stopped."""
        torch.set_num_threads(self.settings.threads)
        # The compute thread needs the GIL between torch's kernels; with the default 5 ms switch
        # interval it waits behind the event loop's Python work that long each time.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        listener = socket.create_server((self.settings.listen_host, self.settings.listen_port))
        certificate = (
            generate_certificate(self.name)
            if data_plane_tls(self.coordinator_url, self.settings.data_plane_tls)
            else None
        )
        tls = coordinator_context(self.coordinator_url, self.settings.coordinator_ca)
        async with httpx.AsyncClient(timeout=120, verify=tls or True) as http:
            registered = None
            try:
                registered = await self._unless_stopped(
                    register(http, self.coordinator_url, self._registration(listener, certificate))
                )
            finally:
                if registered is None:
                    listener.close()
            if registered is None:
                return self.stop_reason
            try:
                check_fits(registered.run, self.settings)
            except RunDoesNotFit:
                listener.close()
                raise
            peer = await join(
                coordinator_url=self.coordinator_url,
                registered=registered,
                settings=self.settings,
                listener=listener,
                http=http,
                certificate=certificate,
            )
            await self._serve(peer)
        return self.stop_reason

    def _registration(
        self, listener: socket.socket, certificate: DataPlaneCertificate | None
    ) -> PeerRegistration:
        device = torch.device(self.settings.device)
        return PeerRegistration(
            join_token=self.token,
            listen_port=listener.getsockname()[1],
            announce=self.settings.announce or None,
            tls_fingerprint="" if certificate is None else certificate.fingerprint,
            device=self.settings.device,
            device_name=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            throughput=0.0,
            requested_stage=None if self.settings.stage == "auto" else int(self.settings.stage),
            name=self.name,
        )

    async def _unless_stopped(
        self, registering: Coroutine[Any, Any, PeerRegistered]
    ) -> PeerRegistered | None:
        """Registration keeps retrying an unreachable coordinator; Ctrl-C must still end it."""
        task = asyncio.ensure_future(registering)
        stopping = asyncio.ensure_future(self.stopped.wait())
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        return None

    async def _serve(self, peer: JoinedPeer) -> None:
        router = MessageRouter(peer, self.stop)
        self._spawn(peer.control.run(router.route))
        self._spawn(self._heartbeats(peer))
        if self.settings.trainer:
            self._spawn(peer.trainer.run_forever())
        try:
            await self.stopped.wait()
            if router.uploads:
                # A finishing run asked for its final checkpoint just before saying it finished.
                await asyncio.wait(router.uploads, timeout=UPLOAD_GRACE_S)
        finally:
            await peer.control.send(Goodbye())
            await peer.control.close()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await peer.close()

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.stop(f"{type(exc).__name__}: {exc}")
            if not isinstance(exc, PeerStopped | Rejected):
                log.error("peer task failed", exc_info=exc)

    async def _heartbeats(self, peer: JoinedPeer) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            measured = peer.server.throughput
            await peer.control.send(
                Heartbeat(
                    throughput=measured if measured > 0 else peer.stage_throughput_estimate(),
                    queue_length=peer.server.queue_length,
                    samples_done=peer.server.samples_done,
                    links=peer.pool.links.rates(time.monotonic(), LINK_REPORT_MAX_AGE_S),
                    spot_checks=peer.trainer.checker.tally,
                    compute_seconds=peer.server.compute_seconds,
                    activation_cache=peer.server.kept.tally(),
                )
            )
