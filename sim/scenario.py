"""A simulated run: the model and its cut, the swarm (device mix, size, lifetimes, joins), the
mode (SWARM with or without rebalancing, or a fixed pipeline) and how long to run it.

Timeouts default to the project's own settings, so the simulator waits as long as the real peers
and coordinator would."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from server.policies.averaging import ALL_TO_ALL_ALWAYS, PatternRule
from sim.devices import DeviceMix, PeerKind
from sim.stages import StageModel
from swarmhub.presets import ModelPreset, get_preset
from swarmhub.settings import PeerSettings, ServerSettings

Mode = Literal["swarm", "static", "fixed"]
"""swarm: SWARM with rebalancing; static: SWARM without rebalancing (joiners still go to the weakest
stage); fixed: one peer per stage, restarted from the last checkpoint whenever a member dies."""
AveragingPattern = Literal["peers", "all-to-all", "butterfly"]
"""peers: as the coordinator chooses (`averaging_pattern`: a butterfly from `butterfly_from_members`,
or from 3 members where all-to-all would take a second longer); all-to-all: every round so, each
member sending its sum to every other ((K-1) sums out per member); butterfly: every round a reduce-scatter and
all-gather (two sums' worth per member, `peer/butterfly.py`)."""

CALL_TIMEOUT_S: float = PeerSettings.model_fields["call_timeout_s"].default
HEARTBEAT_TIMEOUT_S: float = ServerSettings.model_fields["heartbeat_timeout_s"].default
HEARTBEAT_INTERVAL_S: float = ServerSettings.model_fields["heartbeat_interval_s"].default
AVERAGING_DEADLINE_S: float = ServerSettings.model_fields["averaging_deadline_s"].default
BUTTERFLY_FROM_MEMBERS: int = ServerSettings.model_fields["butterfly_from_members"].default


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    preset: ModelPreset
    num_stages: int
    seq_len: int
    microbatch_size: int
    target_batch_size: int
    compression: str = "int8"
    peers: int
    """Peers at the start (each joins at a random moment in the first `join_spread_s`)."""
    mix: DeviceMix
    duration_s: float
    mode: Mode = "swarm"
    mean_lifetime_s: float | None = None
    """Mean of each peer's exponential lifetime; None: nobody dies."""
    join_rate_per_s: float | None = None
    """Poisson arrivals of new peers; None: as many as die on average (peers / mean lifetime)."""
    seed: int = 0
    rate_noise: float = 0.05
    """Relative spread of a peer's reported rate around its true one (a heartbeat's reading)."""
    averaging: AveragingPattern = "peers"
    butterfly_from_members: int = BUTTERFLY_FROM_MEMBERS
    call_timeout_s: float = CALL_TIMEOUT_S
    heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S
    averaging_deadline_s: float = AVERAGING_DEADLINE_S
    """The least time an averaging round gets before it goes on without the members holding it up."""

    @property
    def patterns(self) -> PatternRule:
        """The rule the coordinator's pattern choice is given: its settings, or one that forces every
        round into the pattern named."""
        if self.averaging == "butterfly":
            return PatternRule(butterfly_from=2)
        if self.averaging == "all-to-all":
            return ALL_TO_ALL_ALWAYS
        return PatternRule(butterfly_from=self.butterfly_from_members)

    join_spread_s: float = 5.0
    sample_every_s: float = 60.0
    """Length of the intervals the report's time series is cut into."""
    record_s: float = 0.05
    """The coordinator's write of a step before its update may be applied."""
    apply_s: float = 0.5
    """A member's optimizer step after averaging."""
    checkpoint_every_s: float = 600.0
    """Fixed pipeline: training time between checkpoints."""
    replacement_s: float = 60.0
    """Fixed pipeline: time to bring up a replacement for a dead member, before it loads the checkpoint."""
    bundle: int = 1
    """Granted microbatches a trainer drives through the pipeline together, as one call per stage.
    1 simulates every call; more trades the granularity of queues for speed at thousands of peers
    (the grants, completions and messages are still counted one by one)."""
    routers: int = 32
    """Independent routers per stage, the trainers dealt among them round robin. A real trainer
    routes alone, on the queue lengths its own replies told it, and so, up to this many, does a
    simulated one; beyond, trainers share routers, which keeps thousands of peers fast. One router
    for all trainers balanced the stages as no real swarm does: swarm-ref's twin made 1.24-1.26x its
    real run, 0.88x with a router per trainer (docs/benchmarks.md, issue 14)."""
    kinds: tuple[PeerKind, ...] = field(default=())
    """The initial peers' kinds, overriding draws from `mix` (tests and small validations)."""
    non_trainers: tuple[int, ...] = ()
    """Initial peers (by index) that serve a stage but drive no microbatches (`--trainer false`)."""
    deaths: tuple[tuple[float, int], ...] = ()
    """Deaths at fixed times, (seconds, initial peer index), on top of the lifetimes drawn."""
    stages: tuple[int, ...] = ()
    """The stage each initial peer asks for (`--stage`); empty: `choose_stage` places them."""
    stage_flops: tuple[float, ...] = ()
    """Each stage's FLOPs per sample instead of the cost model's: validation against real runs sets
    measured seconds per sample, with peers' `measured_flops` at one over their slowdown."""

    def __post_init__(self) -> None:
        if self.kinds and len(self.kinds) != self.peers:
            raise ValueError(f"{len(self.kinds)} kinds given for {self.peers} peers")
        placed = all(0 <= s < self.num_stages for s in self.stages)
        if self.stages and (len(self.stages) != self.peers or not placed):
            raise ValueError(
                f"stages {self.stages}: not one of {self.num_stages} for each of {self.peers} peers"
            )
        if self.stage_flops and len(self.stage_flops) != self.num_stages:
            raise ValueError(f"{len(self.stage_flops)} stage costs given for {self.num_stages} stages")
        if self.num_stages > self.preset.n_layer:
            raise ValueError(
                f"preset {self.preset.name} has {self.preset.n_layer} blocks, not {self.num_stages}"
            )

    def stage_model(self) -> StageModel:
        model = StageModel.of(self.preset, self.num_stages, self.seq_len, self.compression)
        return replace(model, flops=self.stage_flops) if self.stage_flops else model

    @property
    def joins_per_s(self) -> float:
        if self.join_rate_per_s is not None:
            return self.join_rate_per_s
        return self.peers / self.mean_lifetime_s if self.mean_lifetime_s else 0.0


WIDE = ModelPreset(name="sim-wide", d_model=4096, n_layer=32, n_head=32, max_seq_len=2048, token_bytes=2)
"""About 7B parameters in 32 blocks: one block per stage at 32 stages (no project preset has 32)."""

INTERNET = DeviceMix(
    devices={"t4": 0.5, "v100": 0.2, "a100": 0.1, "cpu": 0.2},
    links={"broadband": 0.6, "datacenter": 0.3, "slow": 0.1},
)
"""Volunteers and spot instances: mostly T4s on home broadband, some data-centre GPUs, some CPUs."""
SPOT = DeviceMix(
    devices={"t4": 0.5, "v100": 0.3, "a100": 0.2},
    links={"datacenter": 0.7, "broadband": 0.3},
)
"""Preemptible cloud GPUs, some reached over slower links."""
HOMOGENEOUS = DeviceMix(devices={"t4": 1.0}, links={"datacenter": 1.0})


def fitting_bundle(sc: Scenario, *, share: float = 0.5, most: int = 16) -> int:
    """The most microbatches (at least one, at most `most`) a bundled call may carry and still take
    at most `share` of the call timeout on the scenario's slowest device and link: a call moves at
    most its stage's bytes per sample and computes at most its FLOPs per sample. Half the timeout
    leaves room for a call queued ahead of it on the same peer."""
    model = sc.stage_model()
    kinds = sc.kinds or tuple(
        PeerKind(device=device, link=link)
        for device, weight in sc.mix.devices.items()
        if weight > 0
        for link, link_weight in sc.mix.links.items()
        if link_weight > 0
    )
    per_sample = max(
        max(
            flops / kind.flops,
            per_stage / kind.bandwidth,
            max(reply) / kind.upload,
        )
        for kind in kinds
        for flops, per_stage, reply in zip(
            model.flops, model.bytes_per_sample, model.reply_bytes, strict=True
        )
    )
    latency = max(kind.latency_s for kind in kinds)
    budget = share * sc.call_timeout_s - 2 * latency
    fits = math.floor(budget / (per_sample * sc.microbatch_size))
    return max(1, min(most, fits))


def _scenarios() -> dict[str, Scenario]:
    ref = get_preset("swarm-ref")
    small = Scenario(
        name="small-homogeneous",
        preset=ref,
        num_stages=4,
        seq_len=256,
        microbatch_size=8,
        target_batch_size=4096,
        compression="none",
        peers=16,
        mix=HOMOGENEOUS,
        duration_s=1800.0,
    )
    churn = Scenario(
        name="churn-100",
        preset=ref,
        num_stages=8,
        seq_len=256,
        microbatch_size=16,
        target_batch_size=4096,
        peers=100,
        mix=INTERNET,
        mean_lifetime_s=3600.0,
        duration_s=4 * 3600.0,
    )
    scale = Scenario(
        name="scale-10k",
        preset=WIDE,
        num_stages=32,
        seq_len=512,
        microbatch_size=8,
        target_batch_size=131_072,
        peers=10_000,
        mix=SPOT,
        mean_lifetime_s=4 * 3600.0,
        duration_s=3 * 3600.0,
        join_spread_s=60.0,
        sample_every_s=300.0,
    )
    # Thousands of peers need calls bundled to simulate in minutes; one that outlasts the call
    # timeout would only simulate its failure. The price is fidelity: a bundled call, and so a
    # step's wave through 63 calls, is 4x longer, and 10,000 peers reach about half the fraction of
    # ideal they do with calls of one microbatch (0.056 against 0.114 in 40 simulated minutes,
    # docs/benchmarks.md). `sim.figures scale` runs bundles of 1.
    scale = replace(scale, bundle=fitting_bundle(scale))
    return {s.name: s for s in (small, churn, scale)}


SCENARIOS: dict[str, Scenario] = _scenarios()
