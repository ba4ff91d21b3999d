"""What each stage of a run costs, from the project's own cost model: FLOPs per sample, the state a
mover copies, the data-plane bytes through a peer per sample and the gradient bytes averaged."""

from __future__ import annotations

from dataclasses import dataclass

from swarmhub.presets import ModelPreset
from swarmhub.stage_cost import (
    CODEC_BYTES_PER_ELEMENT,
    TRAINING_PASSES,
    stage_bytes_per_sample,
    stage_flops,
    stage_parameters,
    stage_state_bytes,
)

GRADIENT_BYTES_PER_PARAMETER = 4
"""Averaging moves float32 gradients (as `StepCycle._stage_gradient_bytes` assumes)."""


@dataclass(frozen=True, kw_only=True)
class StageModel:
    num_stages: int
    flops: tuple[float, ...]
    """Training FLOPs per sample (forward and backward) of each stage."""
    state_bytes: tuple[int, ...]
    bytes_per_sample: tuple[float, ...]
    """Data-plane bytes through a peer of each stage per sample (calls in and replies out)."""
    gradient_bytes: tuple[int, ...]
    reply_bytes: tuple[tuple[float, float], ...] = ()
    """Bytes per sample a peer of each stage sends back, (forward call, backward call): what its
    upload carries. The last stage's one call is its forward."""

    @classmethod
    def of(cls, preset: ModelPreset, num_stages: int, seq_len: int, compression: str) -> StageModel:
        act = seq_len * preset.d_model * CODEC_BYTES_PER_ELEMENT[compression]
        # The first stage's backward returns nothing (tokens have no gradient); the others return
        # their input's gradient; every forward but the last returns activations.
        replies = [(act, 0.0)] + [(act, act)] * (num_stages - 2) + ([(act, 0.0)] if num_stages > 1 else [])
        return cls(
            num_stages=num_stages,
            flops=tuple(stage_flops(preset, num_stages, seq_len)),
            state_bytes=tuple(stage_state_bytes(preset, num_stages)),
            bytes_per_sample=tuple(stage_bytes_per_sample(num_stages, seq_len, preset.d_model, compression)),
            reply_bytes=tuple(replies[:num_stages]) if num_stages > 1 else ((0.0, 0.0),),
            gradient_bytes=tuple(
                GRADIENT_BYTES_PER_PARAMETER * n for n in stage_parameters(preset, num_stages)
            ),
        )

    def forward_share(self, stage: int) -> float:
        """Share of a sample's work at `stage` done by its forward call; the last stage does forward
        and backward in one call."""
        return 1.0 if stage == self.num_stages - 1 else 1.0 / TRAINING_PASSES
