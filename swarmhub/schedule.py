"""The learning-rate schedule. Part of the run's state: the coordinator computes it per step and sends
it with ApplyStep, so every peer of a stage steps with the same rate and a restart resumes it."""

from __future__ import annotations

import math

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
