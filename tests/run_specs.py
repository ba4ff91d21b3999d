"""A small valid run for tests that need a RunSpec: each test names only the fields it depends on."""

from __future__ import annotations

from typing import Any

from swarmhub.datasets import BUNDLED_DATASET
from swarmhub.wire import RunSpec

DEFAULTS: dict[str, Any] = {
    "run_id": 1,
    "name": "t",
    "model_preset": "tiny",
    "dataset": BUNDLED_DATASET,
    "num_stages": 2,
    "target_batch_size": 8,
    "microbatch_size": 4,
    "seq_len": 16,
    "optimizer": "adamw",
    "learning_rate": 1e-3,
    "warmup_steps": 0,
    "weight_decay": 0.0,
    "compression": "none",
    "seed": 0,
}


def run_spec(**fields: Any) -> RunSpec:
    return RunSpec(**{**DEFAULTS, **fields})
