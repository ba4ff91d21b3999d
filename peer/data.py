"""Training data: a corpus is a byte string, a token a fixed tuple of its bytes, a sample a window of
tokens.

A token is `token_bytes` consecutive bytes read as one big-endian number (the preset's
`token_bytes`): a byte (ids 0..255) or a pair of bytes (ids 0..65,535), so text needs no tokenizer
and ids decode back to exactly the bytes they came from. The corpus is cut into tokens from its
first byte, so every window sees the same pairing.

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

from swarmhub.presets import TOKEN_BYTES


def _token_dtype(token_bytes: int) -> np.dtype:
    if token_bytes not in TOKEN_BYTES:
        raise ValueError(f"token_bytes must be one of {TOKEN_BYTES}, got {token_bytes}")
    return np.dtype(f">u{token_bytes}")


def bytes_to_tokens(data: bytes, token_bytes: int) -> np.ndarray:
    """The ids of `data`'s whole tokens (a trailing partial token is dropped)."""
    usable = len(data) - len(data) % token_bytes
    return np.frombuffer(data, dtype=_token_dtype(token_bytes), count=usable // token_bytes)


def tokens_to_bytes(ids: np.ndarray | Tensor, token_bytes: int) -> bytes:
    """The bytes `ids` stand for: the inverse of `bytes_to_tokens`."""
    values = np.asarray(ids, dtype=np.int64)
    if values.size and (values.min() < 0 or values.max() >= 256**token_bytes):
        raise ValueError(f"token ids must be in 0..{256**token_bytes - 1}")
    return values.astype(_token_dtype(token_bytes)).tobytes()


class SampleSource:
    """Non-overlapping windows of seq_len + 1 tokens, visited in a fresh seeded permutation every epoch."""

    _CACHED_EPOCHS = 2  # a batch straddles at most two epochs

    def __init__(self, corpus: bytes, seq_len: int, seed: int, *, token_bytes: int) -> None:
        if seq_len < 1:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        window = seq_len + 1
        tokens = bytes_to_tokens(corpus, token_bytes)
        if len(tokens) < window:
            raise ValueError(
                f"corpus of {len(corpus)} bytes is shorter than one sample ({window * token_bytes} bytes)"
            )
        self.seq_len = seq_len
        self.seed = seed
        self.num_samples = len(tokens) // window
        self._windows = tokens[: self.num_samples * window].reshape(-1, window)
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
