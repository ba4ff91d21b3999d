"""A GPT-style transformer LM over byte tokens (`peer/data.py`), cut into pipeline stages.

The whole model lives here in one piece (nanoGPT style); `PipelineStage` owns a consecutive slice
of it: the first stage the embeddings, the last the final LayerNorm and head. There is no dropout
and initialization is seeded per layer, because SWARM recomputes a stage's forward on whichever
peer serves the backward call: every peer of a stage must hold bit-identical parameters and
compute the same function.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import load as st_load
from safetensors.torch import load_file, save, save_file
from torch import Tensor, nn

from swarmhub.presets import ModelPreset


def stage_layers(n_layer: int, num_stages: int, stage: int) -> range:
    """The blocks of `stage`: consecutive, as even as possible, the remainder on the earliest stages.

    Early stages get the extra blocks because the last one already carries the vocabulary head.
    """
    if num_stages < 1:
        raise ValueError(f"num_stages must be at least 1, got {num_stages}")
    if num_stages > n_layer:
        raise ValueError(
            f"cannot cut {n_layer} layers into {num_stages} stages (at most one stage per layer)"
        )
    if not 0 <= stage < num_stages:
        raise ValueError(f"stage {stage} is out of range for {num_stages} stages")
    base, extra = divmod(n_layer, num_stages)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))


class CausalSelfAttention(nn.Module):
    def __init__(self, preset: ModelPreset) -> None:
        super().__init__()
        self.n_head = preset.n_head
        self.c_attn = nn.Linear(preset.d_model, 3 * preset.d_model)
        self.c_proj = nn.Linear(preset.d_model, preset.d_model)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # each [B, T, C]
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # [B, nh, T, hs]
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, nh, T, hs]
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, preset: ModelPreset) -> None:
        super().__init__()
        self.c_fc = nn.Linear(preset.d_model, 4 * preset.d_model)
        self.c_proj = nn.Linear(4 * preset.d_model, preset.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, preset: ModelPreset) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(preset.d_model)
        self.attn = CausalSelfAttention(preset)
        self.ln_2 = nn.LayerNorm(preset.d_model)
        self.mlp = MLP(preset)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class PipelineStage(nn.Module):
    """Stage `stage` of `num_stages`: [B, T] ids or [B, T, d] activations in; [B, T, d] or logits out."""

    def __init__(self, preset: ModelPreset, stage: int, num_stages: int) -> None:
        super().__init__()
        self.preset = preset
        self.stage = stage
        self.num_stages = num_stages
        self.layers = stage_layers(preset.n_layer, num_stages, stage)
        if self.is_first:
            self.wte = nn.Embedding(preset.vocab_size, preset.d_model)
            self.wpe = nn.Embedding(preset.max_seq_len, preset.d_model)
        # Keys "blocks.<global layer index>" so a layer's parameters are named the same whatever the cut.
        self.blocks = nn.ModuleDict({str(i): Block(preset) for i in self.layers})
        if self.is_last:
            self.ln_f = nn.LayerNorm(preset.d_model)
            self.head = nn.Linear(preset.d_model, preset.vocab_size)

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.num_stages - 1

    def forward(self, x: Tensor) -> Tensor:
        if self.is_first:
            seq_len = x.shape[1]
            if seq_len > self.preset.max_seq_len:
                raise ValueError(
                    f"sequence length {seq_len} exceeds the model's max_seq_len {self.preset.max_seq_len}"
                )
            pos = torch.arange(seq_len, device=x.device)  # [T]
            x = self.wte(x) + self.wpe(pos)  # [B, T, d]
        for block in self.blocks.values():
            x = block(x)  # [B, T, d]
        if self.is_last:
            x = self.head(self.ln_f(x))  # [B, T, vocab]
        return x

    def loss(self, logits: Tensor, targets: Tensor) -> Tensor:
        """Mean cross entropy over every position; only the last stage has logits."""
        if not self.is_last:
            raise RuntimeError(f"stage {self.stage} is not the last stage; it has no loss")
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def _generator(seed: int, *key: object) -> torch.Generator:
    """A generator seeded by (seed, key) alone, so a layer's init does not depend on what came before it."""
    digest = hashlib.sha256(repr((seed, *key)).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


@torch.no_grad()
def _init_linear(linear: nn.Linear, std: float, g: torch.Generator) -> None:
    linear.weight.normal_(0.0, std, generator=g)
    linear.bias.zero_()


@torch.no_grad()
def build_stage(preset: ModelPreset, stage: int, num_stages: int, seed: int) -> PipelineStage:
    """The stage with GPT-2 init, a function of (seed, global layer index) only.

    So every peer of a stage builds identical parameters, and a stage equals the same layers of a
    model cut differently or built whole.
    """
    module = PipelineStage(preset, stage, num_stages)
    residual_std = 0.02 / math.sqrt(2 * preset.n_layer)
    if module.is_first:
        module.wte.weight.normal_(0.0, 0.02, generator=_generator(seed, "wte"))
        module.wpe.weight.normal_(0.0, 0.02, generator=_generator(seed, "wpe"))
    for key, block in module.blocks.items():
        g = _generator(seed, "block", int(key))
        _init_linear(block.attn.c_attn, 0.02, g)
        _init_linear(block.attn.c_proj, residual_std, g)
        _init_linear(block.mlp.c_fc, 0.02, g)
        _init_linear(block.mlp.c_proj, residual_std, g)
        # LayerNorms keep their default init (weight 1, bias 0).
    if module.is_last:
        _init_linear(module.head, 0.02, _generator(seed, "head"))
    return module


def build_full_model(preset: ModelPreset, num_stages: int, seed: int) -> list[PipelineStage]:
    return [build_stage(preset, s, num_stages, seed) for s in range(num_stages)]


def full_forward_loss(stages: list[PipelineStage], inputs: Tensor, targets: Tensor) -> Tensor:
    """The single-process reference: chain every stage, then the last stage's loss."""
    x = inputs
    for stage in stages:
        x = stage(x)
    return stages[-1].loss(x, targets)


def save_stage(module: nn.Module, path: str | Path, metadata: dict[str, str]) -> None:
    save_file(_contiguous(module.state_dict()), str(path), metadata=metadata)


def load_stage_state(path: str | Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = dict(f.metadata() or {})
        return load_file(str(path)), metadata
    except SafetensorError as e:
        raise ValueError(f"{path} is not a valid safetensors file: {e}") from e


def state_to_bytes(state_dict: dict[str, Tensor], metadata: dict[str, str]) -> bytes:
    return save(_contiguous(state_dict), metadata=metadata)


def state_from_bytes(data: bytes) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Inverse of `state_to_bytes`; the buffer comes from another peer, so malformed ones raise ValueError."""
    # safetensors.torch.load drops the metadata; the format is an u64 (LE) header length + JSON header.
    try:
        (header_len,) = struct.unpack_from("<Q", data, 0)
        header = json.loads(bytes(data[8 : 8 + header_len]))
        state = st_load(bytes(data))
    except (struct.error, ValueError, SafetensorError) as e:
        raise ValueError(f"malformed stage state ({len(data)} bytes): {e}") from e
    metadata = header.get("__metadata__") or {}
    return state, dict(metadata)


def _contiguous(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    # safetensors refuses non-contiguous tensors and tensors sharing storage.
    return {k: v.detach().contiguous() for k, v in state_dict.items()}
