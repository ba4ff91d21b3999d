"""Whether a run fits this machine, decided before the peer allocates anything for it.

The estimate (`swarmhub/resources.py`) covers the largest stage the coordinator may give this peer;
the limit is what the participant states (`--max-memory`), else the device's free memory now.
"""

from __future__ import annotations

from pathlib import Path

import torch

from swarmhub.presets import get_preset
from swarmhub.resources import MemoryEstimate, estimate_memory, format_bytes
from swarmhub.settings import PeerSettings
from swarmhub.wire import RunSpec

MEMINFO = Path("/proc/meminfo")
CUDA_WORKSPACE_BYTES = 68 * 2**20
"""What a GPU peer holds beyond the estimate once it computes: cuBLAS's workspace, allocated at the
first matrix product (68 MB of every peak measured on an H100, bench/gpu_path.py). The CUDA context
is already out of the free memory read, which creates it."""


class RunDoesNotFit(RuntimeError):
    """The run needs more memory than this peer may use; the message names both."""


def free_memory(device: str) -> tuple[int, str] | None:
    """Bytes free on `device` now and where that figure comes from; None where it cannot be read."""
    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return free, "free CUDA memory"
    try:
        import psutil  # optional: not every peer's environment has it

        return psutil.virtual_memory().available, "available memory"
    except ImportError:
        pass
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "available memory (/proc/meminfo)"
    except OSError:
        pass
    return None


def run_estimate(run: RunSpec) -> MemoryEstimate:
    return estimate_memory(
        get_preset(run.model_preset),
        num_stages=run.num_stages,
        microbatch_size=run.microbatch_size,
        seq_len=run.seq_len,
        optimizer=run.optimizer,
    )


def check_fits(run: RunSpec, settings: PeerSettings) -> MemoryEstimate:
    """Raise RunDoesNotFit unless the run's estimate is within this peer's limit; returns the estimate."""
    estimate = run_estimate(run)
    if settings.max_memory is not None:
        limit, source = int(settings.max_memory), "--max-memory"
    else:
        found = free_memory(settings.device)
        if found is None:
            return estimate
        limit, source = found
    workspace = CUDA_WORKSPACE_BYTES if settings.device == "cuda" else 0
    needed = estimate.total + workspace
    if needed > limit:
        cublas = f", cuBLAS workspace {format_bytes(workspace)}" if workspace else ""
        raise RunDoesNotFit(
            f"run {run.run_id} ({run.name!r}) needs about {format_bytes(needed)} on"
            f" this peer (preset {run.model_preset}, {run.num_stages} stage(s), microbatch"
            f" {run.microbatch_size} x {run.seq_len} tokens, {run.optimizer}: parameters"
            f" {format_bytes(estimate.parameters)}, optimizer {format_bytes(estimate.optimizer)}, gradients"
            f" {format_bytes(estimate.gradients)}, activations {format_bytes(estimate.activations)}{cublas}),"
            f" more than the {format_bytes(limit)} this peer may use ({source}); not joining it"
        )
    return estimate
