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
    token_bytes: int = 1
    """Bytes of text per token: 1 is byte-level; 2 pairs bytes into a 65,536-token vocabulary."""

    def __post_init__(self) -> None:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")

    @property
    def vocab_size(self) -> int:
        return 256**self.token_bytes

    @property
    def embedding_parameters(self) -> int:
        """Token and position embeddings: the first stage's extra parameters."""
        return self.vocab_size * self.d_model + self.max_seq_len * self.d_model

    @property
    def block_parameters(self) -> int:
        d = self.d_model
        # attention: qkv (3d^2 + 3d) and output (d^2 + d); MLP: d->4d->d; two LayerNorms (2d each)
        return (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d) + 4 * d

    @property
    def head_parameters(self) -> int:
        """Final LayerNorm and the vocabulary head: the last stage's extra parameters."""
        return 2 * self.d_model + self.d_model * self.vocab_size + self.vocab_size

    @property
    def parameter_count(self) -> int:
        return self.embedding_parameters + self.n_layer * self.block_parameters + self.head_parameters


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
