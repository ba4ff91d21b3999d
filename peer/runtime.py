"""A running peer: registers, benchmarks itself, serves its stage, trains, and follows the coordinator.

Everything the coordinator says arrives on the control channel and is handled in `on_message`;
tensors only ever move over the data plane (`stage_server`, `trainer`, `averaging`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import torch

from swarmhub.presets import get_preset
from swarmhub.settings import PeerSettings
from swarmhub.wire import (
    ApplyStep,
    AveragingDone,
    CheckpointRequest,
    CoordinatorToPeerMessage,
    Goodbye,
    Heartbeat,
    Hello,
    Kicked,
    MicrobatchDone,
    MicrobatchFailed,
    NoWork,
    PeerRegistered,
    PeerRegistration,
    PeerUnreachable,
    RunSpec,
    RunStatusChanged,
    StageAssignment,
    StageReady,
    StepApplied,
    StepBarrier,
    StepCommitted,
    SwarmView,
    Welcome,
    WorkGrant,
    WorkRequest,
)

from .averaging import Contribution
from .benchmark import measure_block_throughput
from .checkpoint_client import CheckpointError, download_stage_checkpoint, upload_stage_checkpoint
from .control import ControlChannel, control_url
from .data import SampleSource, corpus_fingerprint, load_corpus
from .frames import decode_frame, encode_frame, make_credential
from .model import build_stage, config_for
from .stage_server import StageServer
from .stage_worker import StageWorker
from .trainer import Trainer
from .transport import FramePool, FrameServer, TransportError, UploadPacer

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 1.0
TRANSFER_BASE_TIMEOUT_S = 10.0
TRANSFER_MIN_BYTES_PER_S = 5e6
"""Stage states and gradient sums are given this much time to move (a slow link, not a choked one)."""
UPLOAD_GRACE_S = 120.0


class PeerStopped(Exception):
    """The coordinator ended this peer's part (kicked, run finished or archived)."""


def max_frame_bytes(run: RunSpec) -> int:
    """Upper bound of any data-plane frame of this run: a whole stage's state (parameters plus two
    optimizer moments) is the largest thing sent; activations are far smaller for real presets."""
    preset = get_preset(run.model_preset)
    state = 3 * 4 * preset.parameter_count
    activations = 4 * 4 * run.microbatch_size * run.seq_len * preset.d_model
    return state + activations + (1 << 20)


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
            f"({trainer.stats.samples_done / max(elapsed, 1e-9):.1f}/s)  retries {trainer.stats.retries}"
        )


class PeerRuntime:
    def __init__(self, coordinator_url: str, token: str, settings: PeerSettings, name: str = "") -> None:
        self.coordinator_url = coordinator_url.rstrip("/")
        self.token = token
        self.settings = settings
        self.name = name or socket.gethostname()
        self.device = torch.device(settings.device)
        self.registered: PeerRegistered | None = None
        self.data_key = ""
        self.step = 0
        self.stage: int | None = None
        self.server: StageServer | None = None
        self.trainer: Trainer | None = None
        self.pool: FramePool | None = None
        self.control: ControlChannel | None = None
        self.throughput_estimate = 0.0
        self.progress = ProgressLine()
        self.stopped = asyncio.Event()
        self.stop_reason = ""
        self._work_replies: collections.deque[asyncio.Future[WorkGrant | None]] = collections.deque()
        self._pending_sum: dict[int, object] = {}
        self._averaging: asyncio.Task[None] | None = None
        self._loading: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[object]] = set()
        self._uploads: set[asyncio.Task[None]] = set()
        self._http = httpx.AsyncClient(timeout=120)

    # ---- start-up ---------------------------------------------------------------------------

    async def run(self) -> str:
        """Join and train until stopped; returns why it stopped."""
        torch.set_num_threads(self.settings.threads)
        listener = socket.create_server((self.settings.listen_host, self.settings.listen_port))
        address = f"{self.settings.listen_host}:{listener.getsockname()[1]}"
        registered = await self._register(address)
        run = registered.run
        self.registered = registered
        frame_limit = max_frame_bytes(run)
        pacer = UploadPacer(self.settings.upload_mbps)
        config = config_for(run.model_preset)
        self.server = StageServer(
            peer_id=registered.peer_id,
            run=run,
            data_key="",
            d_model=config.d_model,
            slowdown=self.settings.slowdown,
            max_bytes=frame_limit,
        )
        self.pool = FramePool(max_bytes=frame_limit, pacer=pacer)
        self.throughput_estimate = measure_block_throughput(config, run, self.device) / self.settings.slowdown
        self._say(
            f"joined run {run.run_id} ({run.name!r}) as peer {registered.peer_id}; serving data plane on "
            f"{address}; benchmark {self.throughput_estimate:.1f} samples/s per block"
        )
        frame_server = FrameServer(self.server.handle, max_bytes=frame_limit, pacer=pacer)
        await frame_server.start(listener)
        corpus = await asyncio.to_thread(load_corpus, run.dataset)
        fingerprint = corpus_fingerprint(corpus)
        samples = SampleSource(corpus, run.seq_len, run.seed)
        self.trainer = Trainer(
            run=run,
            peer_id=registered.peer_id,
            credential="",
            samples=samples,
            pool=self.pool,
            request_work=self._request_work,
            report=self._report,
            call_timeout_s=self.settings.call_timeout_s,
            max_frame_bytes=frame_limit,
        )
        self.control = ControlChannel(
            control_url(self.coordinator_url, registered.control_url_path),
            hello=lambda: Hello(
                peer_id=registered.peer_id,
                credential=registered.credential,
                throughput=self.throughput_estimate,
                corpus_fingerprint=fingerprint,
            ),
            on_message=self.on_message,
            on_disconnect=self._on_control_lost,
        )
        self._spawn(self._control_forever())
        self._spawn(self._heartbeats())
        if self.settings.trainer:
            self._spawn(self.trainer.run_forever())
        try:
            await self.stopped.wait()
            if self._uploads:
                # A finishing run asked for its final checkpoint just before saying it finished.
                await asyncio.wait(self._uploads, timeout=UPLOAD_GRACE_S)
        finally:
            await self.control.send(Goodbye())
            await self.control.close()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await frame_server.stop()
            await self.pool.close()
            await self._http.aclose()
            self.server.close()
        return self.stop_reason

    async def _register(self, address: str) -> PeerRegistered:
        registration = PeerRegistration(
            join_token=self.token,
            address=address,
            device=self.settings.device,
            device_name=torch.cuda.get_device_name() if self.device.type == "cuda" else "cpu",
            throughput=0.0,
            requested_stage=None if self.settings.stage == "auto" else int(self.settings.stage),
            name=self.name,
        )
        try:
            response = await self._http.post(
                f"{self.coordinator_url}/api/peers/register",
                content=registration.model_dump_json(),
                headers={"content-type": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise SystemExit(f"cannot reach the coordinator at {self.coordinator_url}: {exc}") from exc
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise SystemExit(f"the coordinator refused to register this peer: {detail}")
        return PeerRegistered.model_validate_json(response.content)

    def _spawn(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.stop(f"{type(exc).__name__}: {exc}")
            if not isinstance(exc, PeerStopped):
                log.error("peer task failed", exc_info=exc)

    def _background(self, coro: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        """A task replaced by the next message of its kind; a failure is logged, not fatal."""
        task = asyncio.ensure_future(coro)

        def done(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                if isinstance(task.exception(), PeerStopped):
                    self.stop(str(task.exception()))
                else:
                    log.error("%s failed", what, exc_info=task.exception())

        task.add_done_callback(done)
        return task

    def stop(self, reason: str) -> None:
        if not self.stopped.is_set():
            self.stop_reason = reason
            self.stopped.set()

    async def _control_forever(self) -> None:
        assert self.control is not None
        await self.control.run()

    # ---- control messages --------------------------------------------------------------------

    async def on_message(self, message: CoordinatorToPeerMessage) -> None:
        match message:
            case Welcome():
                self.data_key = message.data_key
                assert self.server is not None and self.trainer is not None
                self.server.data_key = message.data_key
                self.trainer.credential = make_credential(message.data_key, message.peer_id)
                self.step = message.step
                if self.server.worker is not None:
                    await self.server.compute(self.server.worker.discard_accumulated)
            case StageAssignment():
                if self._loading is not None:
                    self._loading.cancel()
                self._loading = self._background(self._load_stage(message), "loading stage")
            case SwarmView():
                assert self.trainer is not None
                self.trainer.update_swarm(message.peers)
            case WorkGrant() | NoWork():
                if self._work_replies:
                    self._work_replies.popleft().set_result(
                        message if isinstance(message, WorkGrant) else None
                    )
            case StepBarrier():
                if self._averaging is not None:
                    self._averaging.cancel()
                self._averaging = self._background(self._average(message), "averaging")
            case ApplyStep():
                await self._apply(message)
            case StepCommitted():
                self.step = message.next_step
                assert self.trainer is not None and self.server is not None
                self._say(
                    self.progress.render(
                        step=message.step,
                        loss=message.loss,
                        stage=self.stage,
                        trainer=self.trainer,
                        throughput=self.server.throughput,
                    )
                )
                self.trainer.work_available.set()
            case CheckpointRequest():
                task = self._background(self._upload_checkpoint(message), "checkpoint upload")
                self._uploads.add(task)
                task.add_done_callback(self._uploads.discard)
            case RunStatusChanged():
                if message.status in ("finished", "archived"):
                    self._say(f"run is {message.status}; leaving")
                    self.stop(f"run {message.status}")
                elif message.status == "active" and self.trainer is not None:
                    self.trainer.work_available.set()
            case Kicked():
                self._say(f"removed by the coordinator: {message.reason}")
                self.stop(f"kicked: {message.reason}")

    def _on_control_lost(self) -> None:
        while self._work_replies:
            self._work_replies.popleft().set_result(None)

    async def _request_work(self) -> WorkGrant | None:
        assert self.control is not None
        future: asyncio.Future[WorkGrant | None] = asyncio.get_running_loop().create_future()
        self._work_replies.append(future)
        if not await self.control.send(WorkRequest()):
            if future in self._work_replies:
                self._work_replies.remove(future)
            await asyncio.sleep(0.5)
            return None
        return await future

    async def _report(self, message: MicrobatchDone | MicrobatchFailed | PeerUnreachable) -> bool:
        assert self.control is not None
        return await self.control.send(message)

    async def _heartbeats(self) -> None:
        assert self.control is not None and self.server is not None
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            measured = self.server.throughput
            await self.control.send(
                Heartbeat(
                    throughput=measured if measured > 0 else self._stage_estimate(),
                    queue_length=self.server.queue_length,
                    samples_done=self.server.samples_done,
                )
            )

    def _stage_estimate(self) -> float:
        """Start-up benchmark scaled to the blocks of the assigned stage, until calls are measured."""
        assert self.registered is not None
        if self.stage is None:
            return self.throughput_estimate
        run = self.registered.run
        n_layer = get_preset(run.model_preset).n_layer
        return self.throughput_estimate * run.num_stages / n_layer

    # ---- stage state -------------------------------------------------------------------------

    async def _load_stage(self, assignment: StageAssignment) -> None:
        assert self.server is not None and self.registered is not None and self.control is not None
        run = self.registered.run
        worker = self.server.worker
        origin: Literal["kept", "copied", "checkpoint", "initialized"] = "kept"
        if not (worker is not None and worker.stage == assignment.stage and worker.step == assignment.step):
            module = build_stage(config_for(run.model_preset), assignment.stage, run.num_stages, run.seed)
            worker = StageWorker(module, run, assignment.step, self.device)
            origin = "initialized"
            if assignment.state_sources:
                await self._copy_state(worker, assignment)
                origin = "copied"
            elif assignment.checkpoint_step is not None:
                try:
                    state, _ = await download_stage_checkpoint(
                        self._http,
                        self.coordinator_url,
                        run.run_id,
                        assignment.checkpoint_step,
                        assignment.stage,
                        self.registered.peer_id,
                        self.registered.credential,
                    )
                except (CheckpointError, httpx.HTTPError) as exc:
                    log.error("could not load the stage checkpoint, starting the stage afresh: %s", exc)
                else:
                    # The checkpoint's parameters, serving the step the run is on now.
                    await self.server.compute(lambda: worker.import_state(state, assignment.step))
                    origin = "checkpoint"
            self.server.worker = worker
            # Rates measured on another stage say nothing about this one.
            self.server.seconds_per_sample.clear()
        self.stage = assignment.stage
        self._say(f"serving stage {assignment.stage} from step {worker.step} ({assignment.reason})")
        await self.control.send(StageReady(stage=assignment.stage, step=worker.step, origin=origin))

    async def _copy_state(self, worker: StageWorker, assignment: StageAssignment) -> None:
        """Copy the stage's parameters and optimizer state from the first offered peer that answers."""
        assert self.pool is not None and self.registered is not None and self.control is not None
        assert self.server is not None
        run = self.registered.run
        frame = encode_frame(
            kind="fetch_state",
            run_id=run.run_id,
            stage=assignment.stage,
            microbatch_id="",
            sender=self.registered.peer_id,
            credential=make_credential(self.data_key, self.registered.peer_id),
            step=assignment.step,
        )
        # Generous for the stage's size on a slow link, but not forever on a choked one.
        timeout = TRANSFER_BASE_TIMEOUT_S + max_frame_bytes(run) / TRANSFER_MIN_BYTES_PER_S
        problems = []
        for source in assignment.state_sources:
            try:
                reply = await self.pool.request(source.address, frame, timeout)
            except TransportError as exc:
                await self.control.send(PeerUnreachable(peer_id=source.peer_id, reason=str(exc)[:500]))
                problems.append(f"peer {source.peer_id}: {exc}")
                continue
            header, tensors = decode_frame(reply, max_bytes=max_frame_bytes(run))
            step = header.info.get("step")
            if header.kind == "result" and isinstance(step, int):
                break
            problems.append(f"peer {source.peer_id}: {header.error or 'state without its step'}")
        else:
            raise PeerStopped(
                f"could not copy stage {assignment.stage} from any live peer: " + "; ".join(problems)
            )
        await self.server.compute(lambda: worker.import_state(tensors, step))

    async def _upload_checkpoint(self, request: CheckpointRequest) -> None:
        assert self.server is not None and self.registered is not None
        worker = self.server.worker
        if worker is None or worker.stage != request.stage or worker.step != request.step:
            log.warning(
                "checkpoint of stage %d step %d asked, but this peer is elsewhere",
                request.stage,
                request.step,
            )
            return
        state = await self.server.compute(worker.export_state)
        run = self.registered.run
        await upload_stage_checkpoint(
            self._http,
            self.coordinator_url,
            run.run_id,
            request.step,
            request.stage,
            self.registered.peer_id,
            self.registered.credential,
            state,
            {"model_preset": run.model_preset, "num_stages": str(run.num_stages)},
        )
        self._say(f"uploaded checkpoint of stage {request.stage} at step {request.step}")

    # ---- global steps ------------------------------------------------------------------------

    async def _average(self, barrier: StepBarrier) -> None:
        assert self.server is not None and self.pool is not None and self.control is not None
        assert self.registered is not None
        worker = self.server.worker
        if worker is None or worker.stage != barrier.stage or worker.step != barrier.step:
            log.warning(
                "barrier for stage %d step %d does not match this peer's state", barrier.stage, barrier.step
            )
            return
        worker.frozen = True
        mine = await self.server.compute(worker.flat_gradients)
        counted = sorted(worker.accumulated)
        others = [p for p in barrier.group if p.peer_id != self.registered.peer_id]
        frame = encode_frame(
            kind="push_grads",
            run_id=self.registered.run.run_id,
            stage=barrier.stage,
            microbatch_id="",
            sender=self.registered.peer_id,
            credential=make_credential(self.data_key, self.registered.peer_id),
            step=barrier.step,
            attempt=barrier.attempt,
            tensors={"grads": mine},
            codec="none",
            info={"counted": counted},
        )

        # Long enough to move a stage's gradients on a slow link, not forever on a choked one.
        timeout = TRANSFER_BASE_TIMEOUT_S + len(frame) * len(barrier.group) / TRANSFER_MIN_BYTES_PER_S

        async def push(address: str) -> None:
            reply = await self.pool.request(address, frame, timeout)  # type: ignore[union-attr]
            header, _ = decode_frame(reply, max_bytes=max_frame_bytes(self.registered.run))  # type: ignore[union-attr]
            if header.kind == "error":
                raise TransportError(f"gradient push refused: {header.error}")

        members = {p.peer_id for p in others}
        try:
            async with asyncio.timeout(timeout):
                pushed = await asyncio.gather(*(push(p.address) for p in others), return_exceptions=True)
                failed = {p.peer_id for p, result in zip(others, pushed, strict=True) if result is not None}
                if failed:
                    raise TransportError(f"gradient push to peers {sorted(failed)} failed")
                received = await self.server.inbox.wait_for(barrier.step, barrier.attempt, members)
        except (TransportError, TimeoutError) as exc:
            # Name the members that did not deliver: the coordinator marks them lost on enough such
            # reports and starts a new attempt without them.
            arrived = self.server.inbox.senders(barrier.step, barrier.attempt)
            for peer_id in sorted(members - arrived):
                await self.control.send(
                    PeerUnreachable(
                        peer_id=peer_id,
                        reason=f"no gradients for step {barrier.step} within {timeout:.0f}s: {exc}"[:500],
                    )
                )
            log.warning("averaging step %d attempt %d stalled: %s", barrier.step, barrier.attempt, exc)
            return
        contributions = [Contribution(grads=mine, counted=counted), *received.values()]
        total = torch.stack([c.grads for c in contributions]).sum(dim=0)
        self._pending_sum[barrier.step] = total
        union = sorted({mb for c in contributions for mb in c.counted})
        await self.control.send(
            AveragingDone(
                step=barrier.step,
                attempt=barrier.attempt,
                stage=barrier.stage,
                contributors=sorted(p.peer_id for p in barrier.group),
                counted=union,
                grad_sum_norm_sq=float(total.double().square().sum()),
            )
        )

    async def _apply(self, message: ApplyStep) -> None:
        assert self.server is not None and self.control is not None
        worker = self.server.worker
        summed = self._pending_sum.pop(message.step, None)
        if worker is None or worker.step != message.step or summed is None:
            log.warning("apply for step %d but this peer has no averaged gradient for it", message.step)
            return
        await self.server.compute(
            lambda: worker.apply_step(summed, message.samples, message.learning_rate, message.grad_scale)
        )
        self.server.inbox.drop_through(message.step)
        await self.control.send(StepApplied(step=message.step, stage=message.stage))

    def _say(self, text: str) -> None:
        print(
            f"[peer {self.registered.peer_id if self.registered else '?'}] {text}",
            file=sys.stdout,
            flush=True,
        )
