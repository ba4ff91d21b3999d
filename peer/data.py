"""Byte-level training data: a corpus is a byte string, a sample is a window of it.

The corpus is a dataset the coordinator holds, its shards concatenated in the manifest's order
(`peer.dataset_cache` downloads and checks them); a peer never reads a path a run names.

The coordinator hands out ever-increasing global sample indices; every peer maps an index to the
same window with `SampleSource.position`, so a microbatch is fully described by (first index,
count) and any trainer can load it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


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
