"""The data-plane server of one peer: checks every frame, then runs it on the stage's worker.

A frame is refused, with an error frame saying why, when it is malformed, oversized, not from an
admitted peer of this run, for another stage or step, or has tensors of the wrong shape, dtype or
values (NaN, Inf, token ids out of the vocabulary). A refused or failing call never stops the
server: the next frame is served as usual. The answer to an authenticated call, error or not, is
signed by this peer and bound to that call (`peer/frame_auth.py`); a frame that did not authenticate
gets an unsigned error, which its caller cannot take for this peer's word.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import torch
from torch import Tensor

from swarmhub.presets import get_preset
from swarmhub.wire import ArbitrationVerdict, RunSpec

from .accept_window import computes
from .activation_store import ActivationStore
from .averaging import GradientInbox
from .butterfly import Part, PartInbox
from .compute_queue import BOOKKEEPING_PRIORITY, CallKind, ComputeQueue, stage_call_priority
from .faults import Fault
from .frame_auth import AuthError, FrameSigner, SenderVerifier
from .frame_headers import (
    MAX_ERROR_CHARS,
    MAX_TIMEOUT_S,
    ArbitrateCall,
    ArbitrateReply,
    BackwardCall,
    BackwardReply,
    Call,
    ErrorReply,
    FetchState,
    ForwardCall,
    ForwardReply,
    FrameHeader,
    GradsAck,
    LossReply,
    PushGrads,
    Reply,
    StageCall,
    StateReply,
)
from .frames import (
    FrameError,
    FrameLimit,
    OpenedFrame,
    Payload,
    assemble,
    assemble_reply,
    check_tensor,
    decode_payload,
    encode_payload,
    open_frame,
)
from .spot_checks import Result, discrepancy, open_evidence, through_codec, tolerance
from .stage_worker import StageError, StageWorker

log = logging.getLogger(__name__)

THROUGHPUT_EMA = 0.2
"""Weight of the newest measurement in the throughput average: reacts within a few calls."""


def _since(received: float) -> float:
    """A reply's `server_s`: the seconds since its call was received, within the header's bound."""
    return min(time.perf_counter() - received, MAX_TIMEOUT_S)


class StageServer:
    def __init__(
        self,
        *,
        peer_id: int,
        run: RunSpec,
        signer: FrameSigner,
        d_model: int,
        slowdown: float,
        max_bytes: FrameLimit,
        fault: Fault | None = None,
        activation_cache_bytes: int = 0,
    ) -> None:
        self.peer_id = peer_id
        self.run = run
        self.signer = signer
        """Signs this peer's replies (and, in the trainer, its calls) with its key and ticket."""
        self.verifier = SenderVerifier(run_id=run.run_id, peer_id=peer_id)
        """Who may call: admitted, unrevoked peers of this run, each speaking only as itself."""
        self.d_model = d_model
        self.slowdown = slowdown
        self.max_bytes = max_bytes
        self.worker: StageWorker | None = None
        self.inbox = GradientInbox()
        self.parts = PartInbox()
        """Butterfly rounds' parts (`peer/butterfly.py`)."""
        self.seconds_per_sample: dict[str, float] = {}
        """EMA of compute seconds per sample, by call kind."""
        self.samples_done = 0
        self.calls_refused = 0
        self.compute_seconds = 0.0
        """Seconds spent computing calls since this peer joined (emulated slowness included)."""
        self.kept = ActivationStore(activation_cache_bytes)
        """Forwards kept for their backward, shared by whichever stage this peer serves."""
        self.fault = fault
        """A fault injected on purpose (`--fault`, for tests and demos); None for an honest peer."""
        self.report: Callable[[ArbitrationVerdict], Awaitable[object]] | None = None
        """Sends a referee's verdict to the coordinator (set once the control channel exists)."""
        self._waiting = 0
        self._queue = ComputeQueue("stage-compute")

    @property
    def queue_length(self) -> int:
        return self._waiting

    async def compute(self, fn: Any) -> Any:
        """Run `fn` on the compute thread, one call at a time: bookkeeping beside the stage calls
        (averaging sums, state exports, optimizer steps), never stretched by `--slowdown`, and served
        before them (`peer/compute_queue.py`)."""
        result, _ = await self.compute_timed(fn, priority=BOOKKEEPING_PRIORITY)
        return result

    async def compute_timed(
        self, fn: Any, *, priority: int, kind: str | None = None, samples: int = 0
    ) -> tuple[Any, float]:
        """`fn`'s result and the seconds it held the device (queueing excluded). With `kind` (a stage
        call), emulated slowness is included and the time feeds the throughput estimate and
        `compute_seconds`."""
        self._waiting += 1
        try:
            # The one compute thread queues the calls: the next starts the moment one ends, without
            # waiting for the event loop to come round (which it would behind a lock held here).
            result, seconds = await asyncio.wrap_future(
                self._queue.submit(lambda: self._hold_device(fn, kind is not None), priority)
            )
        finally:
            self._waiting -= 1
        if kind is not None:
            self.record_call(kind, samples, seconds)
            self.compute_seconds += seconds
        return result, seconds

    def _hold_device(self, fn: Any, stage_call: bool) -> tuple[Any, float]:
        """On the compute thread: `fn`, then for a stage call the emulated slowness, which keeps the
        device busy too. Only the model's compute is what an emulated device's speed decides: the
        bookkeeping around it (sums, hashes, state copies) runs at this machine's speed, as it would
        beside a real device.

        The stretch follows this thread's CPU time, not the wall clock (with one torch thread, the
        default, every kernel runs on it): waiting for the GIL or for a core that another process
        holds is the host's contention, not the device's speed, and stretched by the slowdown it
        would make an emulated device slower the busier its host."""
        started = time.perf_counter()
        cpu_started = time.thread_time()
        result = fn()
        if stage_call and self.slowdown > 1.0:
            one_thread = torch.get_num_threads() == 1
            spent = time.thread_time() - cpu_started if one_thread else time.perf_counter() - started
            time.sleep((self.slowdown - 1.0) * spent)
        return result, time.perf_counter() - started

    def record_call(self, kind: str, samples: int, seconds: float) -> None:
        if samples <= 0 or seconds <= 0:
            return
        value = seconds / samples
        old = self.seconds_per_sample.get(kind)
        self.seconds_per_sample[kind] = (
            value if old is None else (1 - THROUGHPUT_EMA) * old + THROUGHPUT_EMA * value
        )

    @property
    def throughput(self) -> float:
        """Samples per second this stage sustains: one forward plus one backward call per sample
        (the last stage does both in one forward_backward call). 0 until measured."""
        kinds = (
            ("forward_backward",) if self.worker and self.worker.module.is_last else ("forward", "backward")
        )
        if not all(k in self.seconds_per_sample for k in kinds):
            return 0.0
        return 1.0 / sum(self.seconds_per_sample[k] for k in kinds)

    async def handle(self, data: bytes) -> bytes:
        received = time.perf_counter()
        answering: OpenedFrame | None = None
        try:
            frame = open_frame(data, max_bytes=self.max_bytes)
            self._authenticate(frame)
            # Only now may an answer be signed: nobody gets this peer's signature on a call of theirs.
            answering = frame
            call = self._authorize(frame.header)
            return await self._dispatch(frame, call, decode_payload(call, frame.payload), received)
        except (FrameError, StageError, AuthError) as exc:
            self.calls_refused += 1
            return self._error(answering, str(exc))
        except Exception as exc:
            # The boundary of a network call: whatever went wrong, answer and keep serving.
            log.exception("stage call failed")
            self.calls_refused += 1
            return self._error(answering, f"internal error: {type(exc).__name__}: {exc}")

    def _authenticate(self, frame: OpenedFrame) -> None:
        """Raise unless the frame's sender is who it says (checked before its payload is decoded)."""
        header = frame.header
        if header.run_id != self.run.run_id:
            raise FrameError(f"frame is for run {header.run_id}, this peer serves run {self.run.run_id}")
        self.verifier.check(header, frame.signature, frame.header_bytes, frame.payload)

    def _authorize(self, header: FrameHeader) -> Call:
        """The frame's call, if this peer serves it."""
        if not isinstance(header, Call):
            raise FrameError(f"a peer does not serve {header.kind!r} frames")
        if self.worker is None:
            raise StageError("this peer has no stage loaded yet")
        if header.stage != self.worker.stage:
            raise StageError(f"frame is for stage {header.stage}, this peer serves stage {self.worker.stage}")
        return header

    async def _dispatch(
        self, frame: OpenedFrame, header: Call, tensors: dict[str, Tensor], received: float
    ) -> bytes:
        worker = self.worker
        assert worker is not None  # checked by _authorize
        if isinstance(header, PushGrads):
            # Only the step this stage is at: an inbox never holds sums for steps that may never come.
            worker.check_step(header.step)
            if header.part is None:
                grads = self._tensor(tensors, "grads", (worker.parameter_count,), torch.float32)
                await self.inbox.put(header.step, header.attempt, header.sender, grads, header.counted)
                return self._reply(frame, GradsAck)
            assert header.bounds is not None  # a part has bounds (`PushGrads`)
            start, end = header.bounds
            if end > worker.parameter_count:
                raise FrameError(
                    f"part [{start}, {end}) lies outside the stage's {worker.parameter_count} gradients"
                )
            part = Part(
                attempt=header.attempt,
                part=header.part,
                parts=header.parts,
                bounds=(start, end),
                grads=self._tensor(tensors, "grads", (end - start,), torch.float32),
                counted=header.counted,
            )
            await self.parts.put(header.step, header.sender, part, reduced=header.reduced)
            return self._reply(frame, GradsAck)

        if isinstance(header, FetchState):

            def export() -> tuple[Payload, int]:
                # A whole stage state: encoded and hashed (for the signature) off the event loop.
                payload = encode_payload(worker.export_state(), "none")
                _ = payload.digest
                return payload, worker.step

            state, step = await self.compute(export)
            return self._reply(frame, StateReply, state, step=step)
        if isinstance(header, ArbitrateCall):
            return await self._arbitrate(frame, worker, header, tensors)
        reply_kind, outputs, fields = await self._answer(worker, header, tensors)
        # Encoded before the clock stops: the caller counts what is not `server_s` as the network's.
        payload = self._payload(outputs)
        return self._reply(frame, reply_kind, payload, server_s=_since(received), **fields)

    async def serve_local(
        self, header: StageCall, tensors: dict[str, Tensor]
    ) -> tuple[Reply, dict[str, Tensor]]:
        """A stage call from this peer's own trainer, served as the same call from the network would
        be but without framing, signing and hashing: a peer need not prove itself to itself, and on
        a machine where compute and data plane share the cores, that is compute regained. Both ways
        the tensors pass through the run's codec, so what the trainer gets does not depend on whether
        its call left the process. Raises StageError (NotKept included) or FrameError as a refusal."""
        received = time.perf_counter()
        call = self._authorize(header)
        worker = self.worker
        assert worker is not None and isinstance(call, StageCall)  # checked by _authorize
        inputs = through_codec(tensors, self.run.compression)
        reply_kind, outputs, fields = await self._answer(worker, call, inputs)
        outputs = through_codec(outputs, self.run.compression)
        reply = reply_kind(run_id=self.run.run_id, sender=self.peer_id, server_s=_since(received), **fields)
        return reply, outputs

    async def _answer(
        self, worker: StageWorker, header: StageCall, tensors: dict[str, Tensor]
    ) -> tuple[type[Reply], dict[str, Tensor], dict[str, Any]]:
        """A stage call computed and counted: its reply kind, output tensors and reply fields."""
        reply_kind, outputs, loss, seconds = await self._serve(worker, header, tensors)
        if not header.check:
            self.samples_done += header.samples
        if self.fault is not None:
            outputs = self.fault.corrupt_outputs(outputs)
        fields: dict[str, Any] = {"compute_s": min(seconds, MAX_TIMEOUT_S), "queued": self._waiting}
        if loss is not None:
            fields["loss"] = loss
        return reply_kind, outputs, fields

    async def _serve(
        self, worker: StageWorker, header: StageCall, tensors: dict[str, Tensor]
    ) -> tuple[type[Reply], dict[str, Tensor], float | None, float]:
        """Compute a stage call: its reply kind, output tensors, (last stage) loss and compute seconds.
        A spot check (`header.check`) accumulates and keeps nothing."""
        samples = header.samples
        if samples > self.run.microbatch_size:
            raise FrameError(f"samples must be in 1..{self.run.microbatch_size}, got {samples}")
        received = time.monotonic()

        def priority(kind: CallKind) -> int:
            partial = samples < self.run.microbatch_size
            return stage_call_priority(
                kind, worker.stage, self.run.num_stages, partial=partial, check=header.check
            )

        def starts(*, accumulates: bool) -> None:
            """Raises for a call that waited past its window (`accept_window`), as it starts on the
            compute thread; a spot check has none."""
            waited = time.monotonic() - received
            if header.check or computes(accumulates=accumulates, waited_s=waited, timeout_s=header.timeout_s):
                return
            window = "timeout's accept window" if accumulates else "timeout; its caller gave up"
            raise StageError(
                f"stage {worker.stage} {header.kind} call of microbatch {header.microbatch_id} waited "
                f"{waited:.1f}s for the compute thread, past its {header.timeout_s:g}s {window}; refused"
            )

        def accept() -> bool:
            """Whether the call's gradients are accumulated (a check's never are)."""
            starts(accumulates=True)
            return not header.check

        def forward(x: Tensor, keep: str | None) -> Tensor:
            starts(accumulates=False)
            return worker.forward(header.step, x, keep)

        if isinstance(header, BackwardCall) and header.cached:
            grad = self._tensor(tensors, "grad", (samples, self.run.seq_len, self.d_model), torch.float32)
            grad_x, seconds = await self.compute_timed(
                lambda: worker.backward_kept(header.step, header.microbatch_id, samples, grad, accept()),
                kind="backward",
                samples=samples,
                priority=priority("backward"),
            )
            return BackwardReply, {} if grad_x is None else {"grad_x": grad_x}, None, seconds
        x = self._stage_input(worker, tensors, samples)
        if isinstance(header, ForwardCall):
            keep = header.microbatch_id if header.keep and not header.check else None
            y, seconds = await self.compute_timed(
                lambda: forward(x, keep),
                kind="forward",
                samples=samples,
                priority=priority("forward"),
            )
            return ForwardReply, {"y": y}, None, seconds
        if isinstance(header, BackwardCall):
            grad = self._tensor(tensors, "grad", (samples, self.run.seq_len, self.d_model), torch.float32)
            grad_x, seconds = await self.compute_timed(
                lambda: worker.backward(header.step, header.microbatch_id, samples, x, grad, accept()),
                kind="backward",
                samples=samples,
                priority=priority("backward"),
            )
            return BackwardReply, {} if grad_x is None else {"grad_x": grad_x}, None, seconds
        targets = self._tensor(tensors, "targets", (samples, self.run.seq_len), torch.int64)
        self._check_tokens(targets, "targets")
        (loss, grad_x), seconds = await self.compute_timed(
            lambda: worker.forward_backward(header.step, header.microbatch_id, samples, x, targets, accept()),
            kind="forward_backward",
            samples=samples,
            priority=priority("forward_backward"),
        )
        return LossReply, {} if grad_x is None else {"grad_x": grad_x}, loss, seconds

    async def _arbitrate(
        self, frame: OpenedFrame, worker: StageWorker, header: ArbitrateCall, tensors: dict[str, Tensor]
    ) -> bytes:
        """Referee a spot-check mismatch: check the evidence, compute the call as a check, and say which
        result agrees with this peer's (as it would have travelled: through the run's codec)."""
        if header.stage != worker.stage:
            raise StageError(
                f"arbitration is for stage {header.stage}, this peer serves stage {worker.stage}"
            )
        try:
            disputed = open_evidence(header, tensors, self.verifier, self.max_bytes)
            call = disputed.call.model_copy(update={"check": True})
            _, outputs, loss, _ = await self._serve(worker, call, disputed.inputs)
        except (FrameError, AuthError, StageError) as exc:
            await self._report_verdict(
                ArbitrationVerdict(case_id=header.case_id, valid=False, detail=str(exc)[:500])
            )
            raise
        mine = Result(tensors=through_codec(outputs, self.run.compression), loss=loss)
        limit = tolerance(self.run.compression)
        off_checked = discrepancy(mine, disputed.checked)
        off_checker = discrepancy(mine, disputed.checker)
        verdict = ArbitrationVerdict(
            case_id=header.case_id,
            valid=True,
            agrees_with_checked=off_checked <= limit,
            agrees_with_checker=off_checker <= limit,
            discrepancy_checked=min(off_checked, 1e30),
            discrepancy_checker=min(off_checker, 1e30),
            tolerance=limit,
            detail=f"{disputed.call.kind} call of microbatch {disputed.call.microbatch_id}",
        )
        await self._report_verdict(verdict)
        return self._reply(
            frame,
            ArbitrateReply,
            agrees_with_checked=verdict.agrees_with_checked,
            agrees_with_checker=verdict.agrees_with_checker,
        )

    async def _report_verdict(self, verdict: ArbitrationVerdict) -> None:
        log.info("arbitration %d: %s", verdict.case_id, verdict.model_dump_json())
        if self.report is not None:
            await self.report(verdict)

    def _stage_input(self, worker: StageWorker, tensors: dict[str, Tensor], samples: int) -> Tensor:
        if worker.module.is_first:
            x = self._tensor(tensors, "x", (samples, self.run.seq_len), torch.int64)
            self._check_tokens(x, "x")
            return x
        return self._tensor(tensors, "x", (samples, self.run.seq_len, self.d_model), torch.float32)

    @staticmethod
    def _tensor(tensors: dict[str, Tensor], name: str, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        if name not in tensors:
            raise FrameError(f"frame lacks tensor {name!r}; it has {sorted(tensors)}")
        t = tensors[name]
        check_tensor(t, shape, dtype, name=name)
        return t

    def _check_tokens(self, t: Tensor, name: str) -> None:
        vocab = get_preset(self.run.model_preset).vocab_size
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= vocab):
            raise FrameError(f"{name} holds token ids outside 0..{vocab - 1}")

    def _payload(self, tensors: dict[str, Tensor]) -> Payload:
        return encode_payload(tensors, self.run.compression)

    def _reply(
        self, answering: OpenedFrame | None, kind: type[Reply], payload: Payload | None = None, **fields: Any
    ) -> bytes:
        """`kind` signed as the answer to `answering` (an authenticated call); unsigned without one,
        or while this peer holds no ticket yet."""
        header = kind(run_id=self.run.run_id, sender=self.peer_id, **fields)
        payload = encode_payload(None) if payload is None else payload
        if answering is None or self.signer.ticket is None:
            return assemble(header, payload)
        return assemble_reply(header, payload, self.signer, answering)

    def _error(self, answering: OpenedFrame | None, message: str) -> bytes:
        return self._reply(answering, ErrorReply, error=message[:MAX_ERROR_CHARS])

    def close(self) -> None:
        self._queue.close()
