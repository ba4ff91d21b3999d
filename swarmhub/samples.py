"""A checkpoint's text samples as stored beside its stage files (`samples.json`) and served to the dashboard.

Shared by the sampler (`peer/sampling.py`, torch) and the coordinator (which reads the file and never
imports torch).
"""

from __future__ import annotations

from pydantic import BaseModel

SAMPLES_FILE = "samples.json"


class Sample(BaseModel):
    prompt: str
    text: str
    """What the model wrote after the prompt (bytes that are not UTF-8 shown as U+FFFD)."""


class CheckpointSamples(BaseModel):
    step: int
    max_new_tokens: int
    temperature: float
    """0 is greedy decoding; above 0, sampling seeded by `seed`."""
    seed: int
    samples: list[Sample]
