"""Faults a peer can be told to commit, for tests and demos of the swarm's defences (`--fault`).

A testing aid, never for real runs: a faulty peer is meant to be caught. Kinds:

- `noise:FRACTION`: that share of its stage results (activations, input gradients) gets Gaussian
  noise as large as the result itself; spot checks catch it (`peer/spot_checks.py`).
- `scale:FACTOR`: its gradient contribution at averaging is multiplied by FACTOR; the coordinator's
  proportion check rejects it (`server/policies/averaging.py`).
- `part:FACTOR`: in a butterfly round, the part of the stage's gradients it sums is multiplied by
  FACTOR before it sends it to everyone (a consistent wrong sum); the part check convicts it
  (`server/policies/part_check.py`).
- `stale`: it never applies an update to its weights (its step counter moves on as if it had), so it
  serves results of step-0 weights; spot checks catch it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

FaultKind = Literal["noise", "scale", "part", "stale"]


@dataclass(kw_only=True)
class Fault:
    kind: FaultKind
    amount: float = 0.0
    rng: random.Random = field(default_factory=random.Random)

    @classmethod
    def parse(cls, text: str) -> Fault:
        """`noise:0.05`, `scale:50`, `part:2` or `stale`; ValueError with the accepted forms otherwise."""
        kind, _, amount = text.partition(":")
        forms = "noise:FRACTION (0 < FRACTION <= 1), scale:FACTOR or part:FACTOR (FACTOR > 0), or stale"
        try:
            if kind == "stale" and not amount:
                return cls(kind="stale")
            value = float(amount)
        except ValueError:
            raise ValueError(f"--fault {text!r}: expected {forms}") from None
        if kind == "noise" and 0 < value <= 1:
            return cls(kind="noise", amount=value)
        if kind in ("scale", "part") and 0 < value < math.inf:
            return cls(kind=kind, amount=value)
        raise ValueError(f"--fault {text!r}: expected {forms}")

    def corrupt_outputs(self, outputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """A stage call's results as this peer sends them."""
        if self.kind != "noise" or not outputs or self.rng.random() >= self.amount:
            return outputs
        return {name: t + torch.randn_like(t) * t.std().clamp_min(1e-6) for name, t in outputs.items()}

    def scale_contribution(self, grads: Tensor) -> Tensor:
        return grads * self.amount if self.kind == "scale" else grads

    def corrupt_part(self, reduced: Tensor) -> Tensor:
        """A butterfly part this peer summed, as it sends it to everyone."""
        return reduced * self.amount if self.kind == "part" else reduced

    @property
    def keeps_stale_weights(self) -> bool:
        return self.kind == "stale"

    def describe(self) -> str:
        return self.kind if self.kind == "stale" else f"{self.kind}:{self.amount:g}"
