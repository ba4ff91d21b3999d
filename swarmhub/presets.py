"""Model presets and their parameter counts, without torch (the coordinator shows them too)."""

from __future__ import annotations

from dataclasses import dataclass

VOCAB_SIZE = 256
"""Byte-level: every UTF-8 byte is a token, so any text file is a dataset with no tokenizer."""


@dataclass(frozen=True, kw_only=True)
class ModelPreset:
    name: str
    d_model: int
    n_layer: int
    n_head: int
    max_seq_len: int

    def __post_init__(self) -> None:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")

    @property
    def parameter_count(self) -> int:
        d = self.d_model
        embeddings = VOCAB_SIZE * d + self.max_seq_len * d
        # attention: qkv (3d^2 + 3d) and output (d^2 + d); MLP: d->4d->d; two LayerNorms (2d each)
        block = (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d) + 4 * d
        head = 2 * d + d * VOCAB_SIZE + VOCAB_SIZE
        return embeddings + self.n_layer * block + head


PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset(name="tiny", d_model=64, n_layer=4, n_head=4, max_seq_len=256),
        ModelPreset(name="small", d_model=256, n_layer=8, n_head=8, max_seq_len=512),
        ModelPreset(name="medium", d_model=512, n_layer=12, n_head=8, max_seq_len=1024),
        ModelPreset(name="base", d_model=768, n_layer=12, n_head=12, max_seq_len=1024),
        ModelPreset(name="large", d_model=1024, n_layer=24, n_head=16, max_seq_len=1024),
        ModelPreset(name="xl", d_model=2048, n_layer=20, n_head=16, max_seq_len=1024),
    )
}


def get_preset(name: str) -> ModelPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}") from None
