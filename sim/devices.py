"""Modelled peers: a device's training speed and a link's bandwidth and latency, drawn from a mix.

Speeds are effective training FLOP/s (what a device sustains on a transformer stage's forward and
backward, well under its datasheet peak), assumptions for scenarios rather than measurements; the
simulator only needs their ratios to be plausible. A peer's rate on a stage is its FLOP/s over the
stage's FLOPs per sample (`swarmhub.stage_cost.stage_flops`), capped by what its link carries.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

DEVICE_FLOPS: dict[str, float] = {
    "cpu": 0.3e12,
    "t4": 12e12,
    "v100": 35e12,
    "a100": 90e12,
}
"""Effective training FLOP/s per device kind (mixed precision on the GPUs)."""


@dataclass(frozen=True, kw_only=True)
class LinkClass:
    bandwidth: float
    """Bytes per second the peer's link carries (the slower direction)."""
    latency_s: float
    """One-way latency to the other peers."""
    upload: float | None = None
    """Bytes per second it sends, where that is below `bandwidth` (an asymmetric or paced link)."""


LINKS: dict[str, LinkClass] = {
    "datacenter": LinkClass(bandwidth=125e6, latency_s=0.002),
    "broadband": LinkClass(bandwidth=12.5e6, latency_s=0.02),
    "slow": LinkClass(bandwidth=2.5e6, latency_s=0.06),
}
"""1 Gbit/s, 100 Mbit/s and 20 Mbit/s links."""


@dataclass(frozen=True, kw_only=True)
class PeerKind:
    device: str
    link: str
    measured_flops: float | None = None
    """A measured speed instead of the device table's: validation against real peers, whose speed is
    what they were measured at, not a device's assumed one."""
    measured_link: LinkClass | None = None

    @property
    def flops(self) -> float:
        return self.measured_flops if self.measured_flops is not None else DEVICE_FLOPS[self.device]

    @property
    def bandwidth(self) -> float:
        return (self.measured_link or LINKS[self.link]).bandwidth

    @property
    def latency_s(self) -> float:
        return (self.measured_link or LINKS[self.link]).latency_s

    @property
    def upload(self) -> float:
        return (self.measured_link or LINKS[self.link]).upload or self.bandwidth


@dataclass(frozen=True, kw_only=True)
class DeviceMix:
    """Shares of device kinds and of link classes; a peer draws each independently."""

    devices: Mapping[str, float]
    links: Mapping[str, float]

    def __post_init__(self) -> None:
        for name in self.devices:
            if name not in DEVICE_FLOPS:
                raise ValueError(f"unknown device {name!r}; choose from {', '.join(DEVICE_FLOPS)}")
        for name in self.links:
            if name not in LINKS:
                raise ValueError(f"unknown link class {name!r}; choose from {', '.join(LINKS)}")
        if not self.devices or not self.links:
            raise ValueError("a mix needs at least one device and one link class")

    def draw(self, rng: random.Random) -> PeerKind:
        device = rng.choices(list(self.devices), weights=list(self.devices.values()))[0]
        link = rng.choices(list(self.links), weights=list(self.links.values()))[0]
        return PeerKind(device=device, link=link)


def stage_rate(kind: PeerKind, flops_per_sample: float, bytes_per_sample: float) -> float:
    """Samples/s `kind` sustains on a stage: its compute, capped by its link."""
    compute = kind.flops / flops_per_sample
    return min(compute, kind.bandwidth / bytes_per_sample) if bytes_per_sample > 0 else compute
