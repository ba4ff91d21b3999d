"""A peer's rate as a smoothed mean with a confidence, from readings that each cover a few seconds.

A single reading is noisy (a heartbeat's rate covers a handful of calls, which share the device
with the peer's own trainer and wait on the network), and a peer that just loaded a stage still
reports some calls of its old one. Deciding on such readings moved peers back and forth. So each
reading updates an exponentially weighted mean and variance; the first readings are averaged
plainly (weight 1/n) until the window is reached, so early readings are not overweighted. The
bounds are the mean plus or minus `Z` standard errors of that mean, never tighter than a noise
floor, and a rate is "settled" only after `SETTLE_READINGS` readings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALPHA = 0.2
"""Weight of the newest reading once the window is full: about the last ten readings count."""
Z = 3.0
"""Standard errors either side: a move is made only when it pays even at the pessimistic end. Two
were not enough: over hundreds of decisions, swarms at a true tie moved on noise."""
NOISE_FLOOR = 0.10
"""Readings are never taken as closer than 10% apart from the true rate, however alike they are:
a few identical readings say nothing about the next load on a shared device."""
SETTLE_READINGS = 5
"""Readings before a rate is trusted enough to move its peer on."""


@dataclass(frozen=True, kw_only=True)
class RateEstimate:
    mean: float = 0.0
    variance: float = 0.0
    """Exponentially weighted variance of single readings around the mean."""
    count: int = 0

    def observe(self, value: float) -> RateEstimate:
        """The estimate with one more reading (samples per second, not negative)."""
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"a rate must be finite and not negative, got {value}")
        if self.count == 0:
            return RateEstimate(mean=value, variance=0.0, count=1)
        weight = max(ALPHA, 1.0 / (self.count + 1))
        diff = value - self.mean
        return RateEstimate(
            mean=self.mean + weight * diff,
            variance=(1.0 - weight) * (self.variance + weight * diff * diff),
            count=self.count + 1,
        )

    @property
    def settled(self) -> bool:
        return self.count >= SETTLE_READINGS

    @property
    def margin(self) -> float:
        """Z standard errors of the mean: the readings' spread over the readings the mean rests on."""
        if self.count == 0:
            return math.inf
        effective = min(self.count, (2.0 - ALPHA) / ALPHA)
        spread = max(self.variance, (NOISE_FLOOR * self.mean) ** 2)
        return Z * math.sqrt(spread / effective)

    @property
    def lower(self) -> float:
        return max(0.0, self.mean - self.margin)

    @property
    def upper(self) -> float:
        return self.mean + self.margin
