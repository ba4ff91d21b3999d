"""Per-step rules of the optimizer step, computed by the coordinator and sent with ApplyStep.

The learning-rate schedule is part of the run's state: every peer of a stage steps with the same
rate and a restart resumes it. Gradient clipping uses the norm over the whole model, assembled
from each stage's share, so a step over the swarm equals the same step in one process.
"""

from __future__ import annotations

import math

GRAD_CLIP_NORM = 1.0
CLIP_EPSILON = 1e-6
"""As in torch.nn.utils.clip_grad_norm_, so the swarm clips exactly like one process does."""
MIN_LR_FRACTION = 0.1
"""Cosine decay ends at this fraction of the peak rate, as in nanoGPT, rather than at zero."""


def learning_rate(step: int, *, peak: float, warmup_steps: int, max_steps: int | None) -> float:
    """Rate for optimizer step `step` (0-based): linear warm-up, then cosine decay if the run has an end.

    Warm-up starts at peak / (warmup_steps + 1), not 0: a zero first step would waste a step
    (the reference code's schedule sat at 0 because it was never stepped).
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if step < warmup_steps:
        return peak * (step + 1) / (warmup_steps + 1)
    if max_steps is None or max_steps <= warmup_steps:
        return peak
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    floor = peak * MIN_LR_FRACTION
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


def clip_scale(stage_norms_sq: list[float], max_norm: float = GRAD_CLIP_NORM) -> float:
    """Factor for every gradient of the model, from the squared norms of each stage's averaged gradient."""
    total = math.sqrt(sum(stage_norms_sq))
    return min(1.0, max_norm / (total + CLIP_EPSILON))
