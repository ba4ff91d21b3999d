"""The start-up benchmark: how many samples per second this device pushes through one block."""

from __future__ import annotations

import time

import torch

from swarmhub.presets import ModelPreset
from swarmhub.wire import RunSpec

from .model import Block

WARMUP_ITERATIONS = 1
TIMED_ITERATIONS = 3


def measure_block_throughput(preset: ModelPreset, run: RunSpec, device: torch.device) -> float:
    """Samples/s of forward + backward through one transformer block at the run's microbatch shape.

    A stage's rate is this divided by its number of blocks; the coordinator uses it to place the
    peer before any real call has been measured.
    """
    block = Block(preset).to(device)
    x = torch.randn(run.microbatch_size, run.seq_len, preset.d_model, device=device, requires_grad=True)
    for _ in range(WARMUP_ITERATIONS):
        block(x).sum().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(TIMED_ITERATIONS):
        block(x).sum().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    return TIMED_ITERATIONS * run.microbatch_size / elapsed
