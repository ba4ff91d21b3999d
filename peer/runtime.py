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
from typing import Any

import httpx
import torch

from swarmhub.settings import PeerSettings
from swarmhub.status import RunStatus
from swarmhub.tls import DataPlaneCertificate, coordinator_context, data_plane_tls, generate_certificate
from swarmhub.wire import (
    DATA_PLANE_VERSION,
    ApplyStep,
    Arbitrate,
    CheckParts,
    CheckpointRequest,
    CoordinatorToPeerMessage,
    DataPlaneTicket,
    Goodbye,
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
from .console import Console
from .control import Rejected
from .fits import RunDoesNotFit, check_fits
from .joined import JoinedPeer, PeerStopped, join
from .progress import StepClock, step_line
from .registration import contribution_url, register
from .stage_state import load_stage, upload_checkpoint
from .trainer import Trainer

log = logging.getLogger(__name__)

UPLOAD_GRACE_S = 120.0


GIL_SWITCH_INTERVAL_S = 0.0005


class ProgressLine:
    """What the terminal shows per committed step: step N/TOTAL, loss, ETA and this peer's part."""

    def __init__(self) -> None:
        self.clock = StepClock()

    def render(self, *, step: int, loss: float | None, peer: JoinedPeer) -> str:
        max_steps = peer.run.max_steps
        trainer = peer.trainer
        return step_line(
            step=step,
            max_steps=max_steps,
            eta=self.clock.committed(step, time.monotonic(), max_steps),
            loss=loss,
            stage=peer.stage,
            stage_rate=peer.server.throughput,
            samples_done=trainer.stats.samples_done,
            retries=trainer.stats.retries,
            in_flight=trainer.concurrency,
            kept_backwards=kept_share(trainer),
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
        self._status = RunStatus.ACTIVE
        self._loading: asyncio.Task[None] | None = None
        self._averaging: asyncio.Task[None] | None = None
        self.uploads: set[asyncio.Task[None]] = set()

    async def route(self, message: CoordinatorToPeerMessage) -> None:
        peer = self._peer
        # Endpoints come with their certificates' fingerprints: the pool learns them before anything
        # dials those addresses.
        match message:
            case Welcome():
                peer.say(f"connected to the coordinator; the run is at step {message.step + 1}")
                peer.admit(message.data_key)
                peer.heartbeat_interval_s = message.heartbeat_interval_s
                if peer.server.worker is not None:
                    await peer.server.compute(peer.server.worker.discard_accumulated)
                self._averager.forget_sums()
            case DataPlaneTicket():
                peer.take_ticket(message)
            case StageAssignment():
                peer.say(f"assigned stage {message.stage} ({message.reason}); loading its state…")
                peer.pool.learn(message.state_sources)
                if self._loading is not None:
                    self._loading.cancel()
                if self._averaging is not None:
                    # Assignments go out between rounds: a round this peer is still pushing for went
                    # on without it, and its pushes would hold the upload the copy's requests need.
                    self._averaging.cancel()
                self._loading = self._background(load_stage(peer, message, self._averager), "loading stage")
            case SwarmView():
                # Left out of its stage's sample while ready, this peer still routes to itself.
                own = peer.endpoint() if message.omits_recipient else None
                peer.pool.learn(message.peers if own is None else [*message.peers, own])
                peer.trainer.update_swarm(message.peers, message.stages, own=own)
            case WorkGrant() | NoWork():
                peer.work.answer(message)
            case StepBarrier():
                peer.pool.learn(message.group)
                # The step's calls are all served by now: its running totals go ahead of its averaging
                # report, so the step is credited with them (`server/policies/ledger.py`) rather than a
                # heartbeat later, which for a run's last step (or steps faster than heartbeats) is never.
                await peer.control.send(peer.heartbeat())
                if self._averaging is not None:
                    self._averaging.cancel()
                self._averaging = self._background(self._averager.average(message), "averaging")
            case CheckParts():
                self._background(self._averager.check_parts(message), "part check")
            case ApplyStep():
                await self._averager.apply(message)
            case StepCommitted():
                peer.say(self._progress.render(step=message.step, loss=message.loss, peer=peer))
                peer.trainer.work_available.set()
            case CheckpointRequest():
                task = self._background(upload_checkpoint(peer, message), "checkpoint upload")
                self.uploads.add(task)
                task.add_done_callback(self.uploads.discard)
            case RunStatusChanged():
                if message.status in ("finished", "archived"):
                    peer.say(f"run is {message.status}; leaving")
                    self._stop(f"run {message.status}")
                elif message.status == RunStatus.PAUSED and self._status != RunStatus.PAUSED:
                    peer.say("run is paused by its owner: staying connected, training resumes when it does")
                elif message.status == RunStatus.ACTIVE:
                    if self._status == RunStatus.PAUSED:
                        peer.say("run resumed")
                        self._progress.clock.restart()
                    peer.trainer.work_available.set()
                self._status = message.status
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
    def __init__(
        self,
        coordinator_url: str,
        token: str,
        settings: PeerSettings,
        name: str = "",
        console: Console | None = None,
    ) -> None:
        self.coordinator_url = coordinator_url.rstrip("/")
        self.token = token
        self.settings = settings
        self.name = name or socket.gethostname()
        self.console = console or Console(self.name)
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
            self.console.say(f"registering with the coordinator at {self.coordinator_url}…")
            try:
                registered = await self._unless_stopped(
                    register(http, self.coordinator_url, self._registration(listener, certificate))
                )
            finally:
                if registered is None:
                    listener.close()
            if registered is None:
                return self.stop_reason
            run = registered.run
            self.console.say(
                f"registered as peer {registered.peer_id} of run {run.run_id} ({run.name!r}): model "
                f"{run.model_preset} in {run.num_stages} stage{'' if run.num_stages == 1 else 's'}, "
                + (f"{run.max_steps} steps" if run.max_steps else "no step limit")
            )
            link = contribution_url(self.coordinator_url, registered)
            if link is not None:
                self.console.say(f"what this peer contributes, live: {link}")
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
                console=self.console,
            )
            self.console.say("opening the control channel; the coordinator assigns a stage")
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
            data_plane_version=DATA_PLANE_VERSION,
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
            await asyncio.sleep(peer.heartbeat_interval_s)
            await peer.control.send(peer.heartbeat())
