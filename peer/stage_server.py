"""The data-plane server of one peer: checks every frame, then runs it on the stage's worker.

A frame is refused, with an error frame saying why, when it is malformed, oversized, not from an
admitted peer of this run, for another stage or step, or has tensors of the wrong shape, dtype or
values (NaN, Inf, token ids out of the vocabulary). A refused or failing call never stops the
server: the next frame is served as usual.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch import Tensor

from swarmhub.presets import VOCAB_SIZE
from swarmhub.wire import RunSpec

from .averaging import GradientInbox
from .frames import FrameError, FrameHeader, check_tensor, decode_frame, encode_frame, verify_credential
from .stage_worker import StageError, StageWorker

log = logging.getLogger(__name__)

THROUGHPUT_EMA = 0.2
"""Weight of the newest measurement in the throughput average: reacts within a few calls."""
ACCEPT_FRACTION = 0.8
"""Gradients of a call are accumulated only if it finished within this share of the caller's
timeout: a caller that gave up and retried elsewhere must not find its samples counted twice."""


class StageServer:
    def __init__(
        self,
        *,
        peer_id: int,
        run: RunSpec,
        data_key: str,
        d_model: int,
        slowdown: float,
        max_bytes: int,
    ) -> None:
        self.peer_id = peer_id
        self.run = run
        self.data_key = data_key
        self.d_model = d_model
        self.slowdown = slowdown
        self.max_bytes = max_bytes
        self.worker: StageWorker | None = None
        self.inbox = GradientInbox()
        self.seconds_per_sample: dict[str, float] = {}
        """EMA of compute seconds per sample, by call kind."""
        self.samples_done = 0
        self.calls_refused = 0
        self._waiting = 0
        self._compute_lock = asyncio.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stage-compute")

    @property
    def queue_length(self) -> int:
        return self._waiting

    async def compute(self, fn: Any, *, kind: str | None = None, samples: int = 0) -> Any:
        """Run `fn` on the compute thread, one call at a time; emulated slowness holds the device too.

        With `kind`, the time spent (queueing excluded, emulated slowness included) feeds the
        throughput estimate."""
        self._waiting += 1
        try:
            async with self._compute_lock:
                started = time.perf_counter()
                result = await asyncio.get_running_loop().run_in_executor(self._executor, fn)
                elapsed = time.perf_counter() - started
                if self.slowdown > 1.0:
                    await asyncio.sleep((self.slowdown - 1.0) * elapsed)
                if kind is not None:
                    self.record_call(kind, samples, time.perf_counter() - started)
                return result
        finally:
            self._waiting -= 1

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
        header: FrameHeader | None = None
        try:
            header, tensors = decode_frame(data, max_bytes=self.max_bytes)
            self._authorize(header)
            return await self._dispatch(header, tensors)
        except (FrameError, StageError) as exc:
            self.calls_refused += 1
            return self._error(header, str(exc))
        except Exception as exc:
            # The boundary of a network call: whatever went wrong, answer and keep serving.
            log.exception("stage call failed")
            self.calls_refused += 1
            return self._error(header, f"internal error: {type(exc).__name__}: {exc}")

    def _authorize(self, header: FrameHeader) -> None:
        if header.run_id != self.run.run_id:
            raise FrameError(f"frame is for run {header.run_id}, this peer serves run {self.run.run_id}")
        if not verify_credential(self.data_key, header.sender, header.credential):
            raise FrameError(f"credential of peer {header.sender} is not valid for this run")
        if self.worker is None:
            raise StageError("this peer has no stage loaded yet")
        if header.stage != self.worker.stage:
            raise StageError(f"frame is for stage {header.stage}, this peer serves stage {self.worker.stage}")

    async def _dispatch(self, header: FrameHeader, tensors: dict[str, Tensor]) -> bytes:
        worker = self.worker
        assert worker is not None  # checked by _authorize
        samples = self._samples(header)
        timeout_s = float(header.info.get("timeout_s", 0) or 0)
        received = time.monotonic()

        def accept() -> bool:
            return timeout_s <= 0 or time.monotonic() - received < ACCEPT_FRACTION * timeout_s

        if header.kind == "forward":
            x = self._stage_input(worker, tensors, samples)
            y = await self.compute(lambda: worker.forward(header.step, x), kind="forward", samples=samples)
            return self._result(header, {"y": y})
        if header.kind == "backward":
            x = self._stage_input(worker, tensors, samples)
            grad = self._tensor(tensors, "grad", (samples, self.run.seq_len, self.d_model), torch.float32)
            grad_x = await self.compute(
                lambda: worker.backward(header.step, header.microbatch_id, samples, x, grad, accept()),
                kind="backward",
                samples=samples,
            )
            self.samples_done += samples
            return self._result(header, {} if grad_x is None else {"grad_x": grad_x})
        if header.kind == "forward_backward":
            x = self._stage_input(worker, tensors, samples)
            targets = self._tensor(tensors, "targets", (samples, self.run.seq_len), torch.int64)
            self._check_tokens(targets, "targets")
            loss, grad_x = await self.compute(
                lambda: worker.forward_backward(
                    header.step, header.microbatch_id, samples, x, targets, accept()
                ),
                kind="forward_backward",
                samples=samples,
            )
            self.samples_done += samples
            return self._result(header, {} if grad_x is None else {"grad_x": grad_x}, info={"loss": loss})
        if header.kind == "push_grads":
            grads = self._tensor(tensors, "grads", (worker.parameter_count,), torch.float32)
            counted = header.info.get("counted", [])
            if not isinstance(counted, list):
                raise FrameError("push_grads info 'counted' must be a list of microbatch ids")
            await self.inbox.put(header.step, header.attempt, header.sender, grads, counted)
            return self._result(header, {})
        if header.kind == "fetch_state":
            state, step = await self.compute(lambda: (worker.export_state(), worker.step))
            return self._result(header, state, codec="none", info={"step": step})
        raise FrameError(f"a peer does not serve {header.kind!r} frames")

    def _samples(self, header: FrameHeader) -> int:
        samples = header.info.get("samples", 0)
        if header.kind in ("forward", "backward", "forward_backward") and (
            not isinstance(samples, int) or not 1 <= samples <= self.run.microbatch_size
        ):
            raise FrameError(f"samples must be an integer in 1..{self.run.microbatch_size}, got {samples!r}")
        return samples if isinstance(samples, int) else 0

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

    @staticmethod
    def _check_tokens(t: Tensor, name: str) -> None:
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= VOCAB_SIZE):
            raise FrameError(f"{name} holds token ids outside 0..{VOCAB_SIZE - 1}")

    def _result(
        self,
        request: FrameHeader,
        tensors: dict[str, Tensor],
        *,
        codec: str | None = None,
        info: dict[str, Any] | None = None,
    ) -> bytes:
        return encode_frame(
            kind="result",
            run_id=self.run.run_id,
            stage=request.stage,
            microbatch_id=request.microbatch_id,
            sender=self.peer_id,
            credential="",
            step=request.step,
            attempt=request.attempt,
            tensors=tensors,
            codec=codec or self.run.compression,
            info=info or {},
        )

    def _error(self, request: FrameHeader | None, message: str) -> bytes:
        return encode_frame(
            kind="error",
            run_id=self.run.run_id,
            stage=request.stage if request else -1,
            microbatch_id=request.microbatch_id if request else "",
            sender=self.peer_id,
            credential="",
            step=request.step if request else -1,
            error=message,
        )

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
