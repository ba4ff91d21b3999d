"""Model presets and their parameter counts, without torch (the coordinator shows them too)."""

from __future__ import annotations

from dataclasses import dataclass

TOKEN_BYTES = (1, 2)
"""Tokens are fixed tuples of bytes, so any text file is a dataset with no tokenizer: one byte (a
256-token vocabulary) or a pair of bytes (65,536 tokens). Longer tuples would need a real tokenizer
to be worth their vocabulary."""


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
        if self.token_bytes not in TOKEN_BYTES:
            raise ValueError(f"token_bytes must be one of {TOKEN_BYTES}, got {self.token_bytes}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")

    @property
    def vocab_size(self) -> int:
        """Token ids are 0 .. vocab_size - 1: every tuple of `token_bytes` bytes."""
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


SWARM_REF = ModelPreset(name="swarm-ref", d_model=192, n_layer=24, n_head=6, max_seq_len=256, token_bytes=2)
"""After the SWARM reference setup's trait that matters here: a large vocabulary head makes the last
stage several times heavier than the first, so rebalancing has real work to do (peers belong on the
last stage); still small enough for a CPU swarm.

Forward FLOPs per token (backward is about twice each, so the ratio holds for training):
- a block: 24 d^2 for its matmuls (qkv 6 d^2, output 2 d^2, MLP 16 d^2) plus 2-4 T d for attention
  (scores and their product with values at sequence length T; causal kernels skip about half):
  0.98-1.08 MFLOPs at d = 192, T = 256;
- the head: 2 d V = 25.2 MFLOPs at V = 65,536, i.e. 23-26 blocks' worth;
- the embeddings: a lookup, next to nothing.
Cut into 4 stages (the default) each stage holds 6 blocks, so the last stage costs (6 + 23..26) / 6
= 4.9-5.3 times the first; shorter sequences make attention cheaper and the ratio a little higher,
and the softmax over 65,536 logits adds memory-bound work the count leaves out (one CPU thread took
about 6 times as long for the last stage's forward and backward as for the first's).
At d = 192 a head worth a few blocks would need a much smaller vocabulary, so the shape is many thin
layers rather than a few wide ones (wide ones would not train on a CPU): 36M parameters, 12.6M of
them in the head and as many in the token embedding."""

PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset(name="tiny", d_model=64, n_layer=4, n_head=4, max_seq_len=256),
        ModelPreset(name="small", d_model=256, n_layer=8, n_head=8, max_seq_len=512),
        SWARM_REF,
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
