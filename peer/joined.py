"""A peer the coordinator has registered: every part it runs with, built once registration succeeded.

`join` starts the data-plane server, benchmarks the device, fetches the run's dataset from the
coordinator and sets up the trainer and the control channel; the `JoinedPeer` it returns is what
the stage loader, the averager and the runtime's message routing share.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import time
from dataclasses import dataclass

import httpx
import torch

from swarmhub.presets import get_preset
from swarmhub.probe import answer as answer_probe
from swarmhub.probe import credential_digest
from swarmhub.resources import FrameLimits, frame_limits
from swarmhub.settings import PeerSettings
from swarmhub.stage_cost import stage_rate_from_block
from swarmhub.tls import DataPlaneCertificate, coordinator_context
from swarmhub.wire import (
    DataPlaneTicket,
    Heartbeat,
    Hello,
    NoWork,
    PeerEndpoint,
    PeerRegistered,
    RunSpec,
    WorkGrant,
    WorkRequest,
)

from .benchmark import measure_block_throughput
from .compression import bitsandbytes_functional
from .console import Console
from .control import ControlChannel, control_url
from .data import SampleSource
from .dataset_cache import default_data_dir, load_dataset
from .faults import Fault
from .frame_auth import FrameSigner
from .links import LINK_REPORT_MAX_AGE_S
from .stage_server import StageServer
from .trainer import Trainer
from .transport import FramePool, FrameServer, UploadPacer

NOT_CONNECTED_RETRY_S = 0.5


class PeerStopped(Exception):
    """The coordinator ended this peer's part (kicked, run finished or archived)."""


def run_frame_limits(run: RunSpec) -> FrameLimits:
    """Each data-plane frame kind of this run bounded by what it carries: calls by the activations,
    gradient pushes by the largest stage's parameters, only state copies by a stage's whole state."""
    return frame_limits(
        get_preset(run.model_preset),
        num_stages=run.num_stages,
        microbatch_size=run.microbatch_size,
        seq_len=run.seq_len,
        optimizer=run.optimizer,
    )


class WorkRequests:
    """The trainer's outstanding `WorkRequest`s; the coordinator answers them in order."""

    def __init__(self) -> None:
        self._replies: collections.deque[asyncio.Future[WorkGrant | None]] = collections.deque()

    async def ask(self, control: ControlChannel) -> WorkGrant | None:
        """A grant, or None for no work now (step full, run paused, channel down)."""
        future: asyncio.Future[WorkGrant | None] = asyncio.get_running_loop().create_future()
        self._replies.append(future)
        if not await control.send(WorkRequest()):
            if future in self._replies:
                self._replies.remove(future)
            await asyncio.sleep(NOT_CONNECTED_RETRY_S)
            return None
        return await future

    def answer(self, message: WorkGrant | NoWork) -> None:
        if self._replies:
            self._replies.popleft().set_result(message if isinstance(message, WorkGrant) else None)

    def drop_all(self) -> None:
        """The channel went down: no answer will come to what was asked on it."""
        while self._replies:
            self._replies.popleft().set_result(None)


@dataclass(kw_only=True)
class JoinedPeer:
    coordinator_url: str
    registered: PeerRegistered
    device: torch.device
    http: httpx.AsyncClient
    server: StageServer
    frame_server: FrameServer
    pool: FramePool
    trainer: Trainer
    control: ControlChannel
    work: WorkRequests
    block_throughput: float
    """Start-up benchmark: samples/s through one block of the run's model on this device."""
    frame_limits: FrameLimits
    signer: FrameSigner
    """This peer's frame-signing key and its current ticket (`peer/frame_auth.py`)."""
    console: Console
    heartbeat_interval_s: float = 1.0
    """What the coordinator asked for in its Welcome (a big swarm's coordinator asks for fewer)."""
    fingerprint: str = ""
    """SHA-256 (hex) of this peer's data-plane certificate (empty: plain ws), as it registered it."""

    @property
    def peer_id(self) -> int:
        return self.registered.peer_id

    @property
    def run(self) -> RunSpec:
        return self.registered.run

    @property
    def stage(self) -> int | None:
        worker = self.server.worker
        return None if worker is None else worker.stage

    @property
    def throughput(self) -> float:
        """Samples per second this peer serves its stage at, as it tells the coordinator: measured,
        else estimated from the start-up benchmark."""
        measured = self.server.throughput
        return measured if measured > 0 else self.stage_throughput_estimate()

    def endpoint(self) -> PeerEndpoint:
        """This peer as the coordinator lists it to the others, from its own figures."""
        return PeerEndpoint(
            peer_id=self.peer_id,
            address=self.registered.address,
            stage=self.stage,
            throughput=self.throughput,
            queue_length=self.server.queue_length,
            fingerprint=self.fingerprint,
        )

    def heartbeat(self) -> Heartbeat:
        """What this peer tells the coordinator every heartbeat interval (and as it starts serving a
        new stage): its stage's rate, queue, running totals and measured links."""
        return Heartbeat(
            throughput=self.throughput,
            queue_length=self.server.queue_length,
            samples_done=self.server.samples_done,
            links=self.pool.links.rates(time.monotonic(), LINK_REPORT_MAX_AGE_S),
            spot_checks=self.trainer.checker.tally,
            compute_seconds=self.server.compute_seconds,
            activation_cache=self.server.kept.tally(),
        )

    def admit(self, ticket_key: str) -> None:
        """Take the run's public ticket key (Welcome): callers' tickets are checked against it."""
        self.server.verifier.trust(ticket_key)

    def take_ticket(self, message: DataPlaneTicket) -> None:
        """A renewed ticket for this peer's calls, the coordinator's clock and who is revoked."""
        self.server.verifier.observe(message.coordinator_time, message.revoked)
        self.signer.take(message.ticket)

    def stage_throughput_estimate(self) -> float:
        """Start-up benchmark scaled to the cost of the assigned stage, until calls are measured."""
        stage = self.stage
        if stage is None:
            return self.block_throughput
        run = self.run
        return stage_rate_from_block(
            self.block_throughput, get_preset(run.model_preset), run.num_stages, run.seq_len, stage
        )

    def say(self, text: str) -> None:
        self.console.say(text)

    async def close(self) -> None:
        await self.frame_server.stop()
        await self.pool.close()
        self.server.close()


async def join(
    *,
    coordinator_url: str,
    registered: PeerRegistered,
    settings: PeerSettings,
    listener: socket.socket,
    http: httpx.AsyncClient,
    certificate: DataPlaneCertificate | None,
    console: Console,
) -> JoinedPeer:
    """Start serving the data plane (over TLS with `certificate`) and set up every part; the control
    channel is not opened yet."""
    run = registered.run
    device = torch.device(settings.device)
    limits = run_frame_limits(run)
    pacer = UploadPacer(settings.upload_mbps)
    preset = get_preset(run.model_preset)
    signer = FrameSigner()
    server = StageServer(
        peer_id=registered.peer_id,
        run=run,
        signer=signer,
        d_model=preset.d_model,
        slowdown=settings.slowdown,
        max_bytes=limits.for_kind,
        fault=Fault.parse(settings.fault) if settings.fault else None,
        activation_cache_bytes=int(settings.activation_cache_mb * 2**20),
    )
    # A server never receives a state; a client may (when it loads a stage from another peer).
    pool = FramePool(max_bytes=limits.largest, pacer=pacer)
    console.say(
        f"benchmarking this device ({device}) on one block of {preset.name} at the run's microbatch "
        f"({run.microbatch_size} x {run.seq_len} tokens)…"
    )
    block_throughput = measure_block_throughput(preset, run, device) / settings.slowdown
    if run.compression == "int8":
        # Its ~2 s import now, before this peer serves or sends anything, not inside its first call.
        bitsandbytes_functional()
    bound = f"{settings.listen_host}:{listener.getsockname()[1]}"
    console.say(
        f"benchmark: {block_throughput:.1f} samples/s per block; data plane bound on {bound}, "
        f"announced as {registered.address}"
    )
    digest = credential_digest(registered.credential)
    frame_server = FrameServer(
        server.handle,
        max_bytes=limits.served,
        pacer=pacer,
        answer_text=lambda text: answer_probe(text, peer_id=registered.peer_id, digest=digest),
        ssl_context=None if certificate is None else certificate.server_context(),
    )
    await frame_server.start(listener)
    corpus = await load_dataset(
        http,
        coordinator_url,
        run.dataset,
        peer_id=registered.peer_id,
        credential=registered.credential,
        data_dir=settings.data_dir or default_data_dir(),
        console=console,
    )
    work = WorkRequests()
    control = ControlChannel(
        control_url(coordinator_url, registered.control_url_path),
        hello=lambda: Hello(
            peer_id=registered.peer_id,
            credential=registered.credential,
            throughput=block_throughput,
            frame_key=signer.public_key,
        ),
        on_disconnect=work.drop_all,
        ssl_context=coordinator_context(coordinator_url, settings.coordinator_ca),
    )
    server.report = control.send
    if server.fault is not None:
        console.say(
            f"FAULTY ON PURPOSE (--fault {server.fault.describe()}): "
            "a testing aid; the swarm should catch and ban this peer"
        )
    trainer = Trainer(
        run=run,
        peer_id=registered.peer_id,
        signer=signer,
        verifier=server.verifier,
        samples=SampleSource(
            corpus, run.seq_len, run.seed, token_bytes=get_preset(run.model_preset).token_bytes
        ),
        pool=pool,
        request_work=lambda: work.ask(control),
        report=control.send,
        call_timeout_s=settings.call_timeout_s,
        max_frame_bytes=limits.for_kind,
        serve_local=server.serve_local,
    )
    return JoinedPeer(
        coordinator_url=coordinator_url,
        registered=registered,
        device=device,
        http=http,
        server=server,
        frame_server=frame_server,
        pool=pool,
        trainer=trainer,
        control=control,
        work=work,
        block_throughput=block_throughput,
        frame_limits=limits,
        signer=signer,
        console=console,
        fingerprint="" if certificate is None else certificate.fingerprint,
    )
