"""Text samples of stored checkpoints, generated lazily in a subprocess (`python -m peer.sampling`).

The coordinator never imports torch; where torch is installed beside it (the demo, a single-host
setup) it runs the sampler as a child process the first time a checkpoint's samples are asked
for, one at a time, and serves the `samples.json` it writes. Where torch
is missing it says so, and `swarmhub sample` prints samples on a host that has it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
from pathlib import Path
from typing import Literal

from fastapi import Request
from pydantic import BaseModel, ValidationError

from server.checkpoints.store import CheckpointStore
from swarmhub.samples import SAMPLES_FILE, CheckpointSamples

ERRORS_FILE = ".samples.err"
_ERROR_TAIL = 2000
_CREATE = threading.Lock()


class SamplesOut(BaseModel):
    run_id: int
    step: int
    status: Literal["ready", "generating", "failed", "unavailable"]
    """ready: `samples` holds them; generating: ask again shortly; failed / unavailable: see `detail`."""
    detail: str | None = None
    loss: float | None = None
    """The training loss of the newest step up to the checkpoint's, to read the samples against."""
    samples: CheckpointSamples | None = None


class Sampler:
    """Starts and watches the sampler subprocesses of one coordinator."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._running: dict[tuple[int, int], subprocess.Popen[bytes]] = {}
        self._failed: dict[tuple[int, int], str] = {}
        """Kept until the coordinator restarts: a sampler that failed once would fail again."""
        self._torch = importlib.util.find_spec("torch") is not None

    def samples(self, run_id: int, step: int) -> SamplesOut:
        """The samples of a complete checkpoint, starting their generation if nobody has yet."""
        key = (run_id, step)
        step_dir = self.store.step_dir(run_id, step)
        errors = step_dir / ERRORS_FILE
        out = SamplesOut(run_id=run_id, step=step, status="generating")
        with self._lock:
            process = self._running.get(key)
            if process is not None:
                if process.poll() is None:
                    return out
                del self._running[key]
                if process.returncode != 0:
                    tail = (
                        errors.read_text(errors="replace")[-_ERROR_TAIL:].strip() if errors.exists() else ""
                    )
                    self._failed[key] = tail or f"the sampler exited with status {process.returncode}"
            stored = self._read(step_dir / SAMPLES_FILE)
            if stored is not None:
                return out.model_copy(update={"status": "ready", "samples": stored})
            if key in self._failed:
                return out.model_copy(update={"status": "failed", "detail": self._failed[key]})
            if not self._torch:
                return out.model_copy(
                    update={
                        "status": "unavailable",
                        "detail": "torch is not installed beside the coordinator; "
                        f"`swarmhub sample {run_id} --step {step}` prints samples where it is",
                    }
                )
            if any(other.poll() is None for other in self._running.values()):
                # One sampler at a time: the coordinator's host serves the swarm. This one starts
                # when it is asked for again after the other has finished.
                return out
            with errors.open("wb") as stderr:
                self._running[key] = subprocess.Popen(
                    [sys.executable, "-m", "peer.sampling", str(step_dir)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
        return out

    @staticmethod
    def _read(path: Path) -> CheckpointSamples | None:
        try:
            return CheckpointSamples.model_validate_json(path.read_bytes())
        except (FileNotFoundError, ValidationError):
            return None

    def wait(self) -> None:
        """Wait for every running sampler (a test's teardown; the coordinator leaves them to finish)."""
        with self._lock:
            running = list(self._running.values())
        for process in running:
            process.wait()


def get_sampler(request: Request) -> Sampler:
    """The app's sampler, made on first use."""
    state = request.app.state
    with _CREATE:
        if getattr(state, "sampler", None) is None:
            state.sampler = Sampler(state.checkpoints)
        return state.sampler
