"""Byte-level training data: a corpus is a byte string, a sample is a window of it.

The coordinator hands out ever-increasing global sample indices; every peer maps an index to the
same window with `SampleSource.position`, so a microbatch is fully described by (first index,
count) and any trainer can load it.
"""

from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

STDLIB_DATASET = "python-stdlib"
STDLIB_CAP_BYTES = 8 * 1024 * 1024
TEXT_SUFFIXES = (".txt", ".md", ".py", ".rst")
# Tests are huge and repetitive; site-packages differs between machines and would break determinism.
_STDLIB_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "idlelib", "__pycache__"}


def load_corpus(dataset: str) -> bytes:
    """'python-stdlib' (the standard library's sources, ~8 MB), a text file, or a directory of text files."""
    if dataset == STDLIB_DATASET:
        return _stdlib_corpus()
    path = Path(dataset).expanduser()
    if path.is_file():
        data = path.read_bytes()
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
        if not files:
            raise ValueError(f"dataset directory {path} has no {', '.join(TEXT_SUFFIXES)} files")
        data = b"".join(p.read_bytes() for p in files)
    else:
        raise ValueError(
            f"dataset {dataset!r} is neither {STDLIB_DATASET!r} nor an existing file or directory"
        )
    if not data:
        raise ValueError(f"dataset {dataset!r} is empty")
    return data


def _stdlib_corpus() -> bytes:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        (p for p in root.rglob("*.py") if not _STDLIB_SKIP_DIRS.intersection(p.relative_to(root).parts[:-1])),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    parts: list[bytes] = []
    size = 0
    for p in files:
        if size >= STDLIB_CAP_BYTES:
            break
        chunk = p.read_bytes()
        parts.append(chunk)
        size += len(chunk)
    data = b"".join(parts)[:STDLIB_CAP_BYTES]
    if not data:
        raise ValueError(f"found no Python sources under the standard library at {root}")
    return data


def corpus_fingerprint(corpus: bytes) -> str:
    """Digest of a corpus: a run's peers must read identical bytes (the stdlib differs by Python version)."""
    return hashlib.sha256(corpus).hexdigest()[:16]


class SampleSource:
    """Non-overlapping windows of seq_len + 1 bytes, visited in a fresh seeded permutation every epoch."""

    _CACHED_EPOCHS = 2  # a batch straddles at most two epochs

    def __init__(self, corpus: bytes, seq_len: int, seed: int) -> None:
        if seq_len < 1:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        window = seq_len + 1
        if len(corpus) < window:
            raise ValueError(f"corpus of {len(corpus)} bytes is shorter than one sample ({window} bytes)")
        self.seq_len = seq_len
        self.seed = seed
        self.num_samples = len(corpus) // window
        self._windows = np.frombuffer(corpus, dtype=np.uint8)[: self.num_samples * window].reshape(-1, window)
        self._permutations: dict[int, np.ndarray] = {}

    def _permutation(self, epoch: int) -> np.ndarray:
        perm = self._permutations.get(epoch)
        if perm is None:
            perm = np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
            if len(self._permutations) >= self._CACHED_EPOCHS:
                self._permutations.pop(min(self._permutations))
            self._permutations[epoch] = perm
        return perm

    def position(self, global_index: int) -> int:
        """The window that global sample `global_index` reads."""
        if global_index < 0:
            raise ValueError(f"global sample index must be non-negative, got {global_index}")
        epoch, offset = divmod(global_index, self.num_samples)
        return int(self._permutation(epoch)[offset])

    def batch(self, first_sample: int, count: int) -> tuple[Tensor, Tensor]:
        """Samples first_sample .. first_sample + count - 1 as (inputs, targets), int64 [count, seq_len]."""
        if first_sample < 0 or count < 1:
            raise ValueError(f"bad sample range: first_sample={first_sample}, count={count}")
        indices = np.arange(first_sample, first_sample + count, dtype=np.int64)
        epochs, offsets = np.divmod(indices, self.num_samples)
        positions = np.empty(count, dtype=np.int64)
        for epoch in np.unique(epochs):
            mask = epochs == epoch
            positions[mask] = self._permutation(int(epoch))[offsets[mask]]
        rows = torch.from_numpy(self._windows[positions].astype(np.int64))  # [count, seq_len + 1]
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
