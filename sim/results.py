"""What a simulated run reports: samples over time against the ideal, moves, losses, and what the
coordinator decided and sent."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Move:
    t: float
    peer_id: int
    from_stage: int
    to_stage: int
    fills_empty: bool = False


@dataclass(frozen=True, kw_only=True)
class SeriesRow:
    """One interval of the run, ending at `t`."""

    t: float
    samples_per_s: float
    """Samples whose microbatch finished every stage in the interval."""
    ideal_rate: float
    """The best placement of the peers alive at the interval's end (`sim.ideal`)."""
    fraction_of_ideal: float
    live_peers: int
    moves: int
    step: int


@dataclass(frozen=True, kw_only=True)
class RunReport:
    scenario: str
    mode: str
    duration_s: float
    wall_s: float
    events: int
    samples_completed: int
    """Samples of microbatches that went through every stage."""
    samples_committed: int
    """Samples in applied steps (every stage counted them)."""
    samples_lost: int
    """Samples a committed step recorded lost (a stage's peer died holding their gradients), or, for
    the fixed pipeline, trained since the last checkpoint when a member died."""
    steps: int
    retries: int
    microbatches_failed: int
    ideal_rate_mean: float
    restarts: int = 0
    """Fixed pipeline: restarts from a checkpoint after a member died."""
    calls_refused: int = 0
    """SWARM: calls refused for waiting past their window (`peer.accept_window`): accumulating ones
    past the accept window, forwards past their caller's timeout."""
    moves: list[Move] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    """When each step's books closed (all stages averaged), in simulated seconds."""
    step_samples: list[int] = field(default_factory=list)
    """Each step's samples sent less those it lost (what a real run's rate counts)."""
    series: list[SeriesRow] = field(default_factory=list)
    coordinator: dict[str, Any] = field(default_factory=dict)
    phase_s: dict[str, float] = field(default_factory=dict)
    """SWARM: simulated seconds spent collecting, averaging, recording and applying steps."""
    calls_taken: list[int] = field(default_factory=list)
    """SWARM, per stage: the calls its live peers took."""
    call_queued_s: list[float] = field(default_factory=list)
    """Per stage: seconds those calls waited in their peers' queues, summed."""
    call_served_s: list[float] = field(default_factory=list)
    """Per stage: seconds they held their peers (compute or transfer, the longer), summed."""

    @property
    def samples_per_s(self) -> float:
        return self.samples_committed / self.duration_s if self.duration_s else 0.0

    @property
    def fraction_of_ideal(self) -> float:
        """Committed samples over what the ideal placement of the live peers would have trained."""
        return self.samples_per_s / self.ideal_rate_mean if self.ideal_rate_mean else 0.0

    def time_split(self) -> dict[str, Any]:
        """Where a SWARM run's time went: the share of it each phase of the step cycle took, and a
        stage call's mean wait in its peer's queue against its mean service there, over all stages
        and stage by stage."""

        def mean(total: float, calls: int) -> float:
            return round(total / calls, 3) if calls else 0.0

        return {
            "phase_share": {phase: round(s / self.duration_s, 3) for phase, s in self.phase_s.items()},
            "call_queued_s": mean(sum(self.call_queued_s), sum(self.calls_taken)),
            "call_served_s": mean(sum(self.call_served_s), sum(self.calls_taken)),
            "stage_call_queued_s": [
                mean(q, n) for q, n in zip(self.call_queued_s, self.calls_taken, strict=True)
            ],
            "stage_call_served_s": [
                mean(q, n) for q, n in zip(self.call_served_s, self.calls_taken, strict=True)
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["samples_per_s"] = self.samples_per_s
        out["fraction_of_ideal"] = self.fraction_of_ideal
        return out

    def headline(self) -> dict[str, Any]:
        """The figures a table shows, one row per run."""
        return {
            "scenario": self.scenario,
            "mode": self.mode,
            "samples_per_s": round(self.samples_per_s, 3),
            "ideal_rate": round(self.ideal_rate_mean, 3),
            "fraction_of_ideal": round(self.fraction_of_ideal, 4),
            "steps": self.steps,
            "moves": len(self.moves),
            "samples_lost": self.samples_lost,
            "retries": self.retries,
            "calls_refused": self.calls_refused,
            "restarts": self.restarts,
            "wall_s": round(self.wall_s, 2),
        }
