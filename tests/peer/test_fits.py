"""Whether a run fits this peer: the estimate against the stated limit or the free memory, and on a GPU
the cuBLAS workspace beside it (measured on an H100, bench/gpu_path.py)."""

from __future__ import annotations

import pytest

from peer import fits
from peer.fits import CUDA_WORKSPACE_BYTES, RunDoesNotFit, check_fits, run_estimate
from swarmhub.settings import PeerSettings
from tests.run_specs import run_spec

RUN = run_spec(
    run_id=3,
    name="fits",
    model_preset="small",
    target_batch_size=32,
    microbatch_size=8,
    seq_len=128,
)


def free(monkeypatch: pytest.MonkeyPatch, device: str, nbytes: int) -> PeerSettings:
    source = "free CUDA memory" if device == "cuda" else "available memory"
    monkeypatch.setattr(fits, "free_memory", lambda asked: (nbytes, source) if asked == device else None)
    return PeerSettings(device=device)


def test_a_run_within_the_free_memory_fits_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    needed = run_estimate(RUN).total
    assert check_fits(RUN, free(monkeypatch, "cpu", needed)).total == needed


def test_a_gpu_peer_keeps_room_for_the_cublas_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    needed = run_estimate(RUN).total
    with pytest.raises(RunDoesNotFit, match=r"cuBLAS workspace 68\.0 MiB.*free CUDA memory"):
        check_fits(RUN, free(monkeypatch, "cuda", needed))
    check_fits(RUN, free(monkeypatch, "cuda", needed + CUDA_WORKSPACE_BYTES))


def test_a_stated_limit_is_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = free(monkeypatch, "cpu", 2**50).model_copy(update={"max_memory": 2**20})
    with pytest.raises(RunDoesNotFit, match=r"this peer may use \(--max-memory\); not joining it"):
        check_fits(RUN, settings)
