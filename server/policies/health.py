"""How a run is doing, in words an owner can act on, and how healthy each of its stages is.

A run is training, paused, stalled (with the reason: a stage without a live peer, or no work
finished for a while), waiting for peers (its swarm has never been whole since the coordinator
started watching it), finished or archived. A stage is green, amber or red from its live peers and
their observed rate, as Petals' health monitor colours its blocks: red when nothing serves it (the
pipeline stops there), amber when one peer's loss would stop it or it serves far below the other
stages (the bottleneck), green otherwise.

Pure: `server.swarm.machine.RunMachine` gathers the inputs from its live state (times are its
monotonic clock) and records `run_stalled` / `run_recovered` when the state changes; the shell
turns the times into clock times for the API and the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from statistics import median

from swarmhub.status import RunStatus

BOTTLENECK_SHARE = 0.5
"""A stage serving less than this share of the median stage's rate is flagged as the bottleneck."""


class RunState(StrEnum):
    TRAINING = "training"
    PAUSED = "paused"
    STALLED = "stalled"
    """Active, its swarm was whole, and now nothing trains (a stage lost its last live peer, or no
    work has finished for `stall_after_s`)."""
    WAITING = "waiting"
    """Active, and its swarm has not been whole since the coordinator started watching it."""
    FINISHED = "finished"
    ARCHIVED = "archived"


class StageColor(StrEnum):
    GREEN = "green"
    AMBER = "amber"
    RED = "red"


@dataclass(frozen=True, kw_only=True)
class StageInput:
    ready: int
    """Live peers holding the stage's current state, routed to."""
    loading: int
    """Live peers assigned to it and still copying its state."""
    rate: float
    """The ready peers' summed observed rate, samples per second."""
    last_ready: float | None
    """When it last had a ready peer (now, if it has one); None if never since watching began."""


@dataclass(frozen=True, kw_only=True)
class HealthInputs:
    now: float
    status: RunStatus
    stages: tuple[StageInput, ...]
    peers: int
    """Live peers connected to the run, whatever they serve."""
    last_progress: float
    """When work last moved (a microbatch or an averaging report done, a step applied) or was last
    expected to start (watching began, the run was resumed)."""
    whole_since: float | None
    """When every stage last came to have a ready peer; None while one has none."""
    stall_after_s: float
    """How long a whole swarm may go without progress before the run counts as stalled."""


@dataclass(frozen=True, kw_only=True)
class StageHealth:
    stage: int
    color: StageColor
    ready: int
    loading: int
    rate: float
    reason: str


@dataclass(frozen=True, kw_only=True)
class RunHealth:
    state: RunState
    reason: str
    since: float | None = None
    """When the condition began (the inputs' clock): the stall, or the wait."""
    stages: tuple[StageHealth, ...] = field(default=())

    @property
    def training(self) -> bool:
        return self.state == RunState.TRAINING

    def key(self) -> tuple[object, ...]:
        """What a change of is worth telling dashboards about (rates change on every heartbeat)."""
        return (
            self.state,
            self.reason,
            self.since,
            tuple((s.color, s.ready, s.loading, s.reason) for s in self.stages),
        )


def stage_health(stages: tuple[StageInput, ...]) -> tuple[StageHealth, ...]:
    """Each stage's colour: red without a ready peer, amber with one (no spare) or as the bottleneck."""
    served = [s.rate for s in stages if s.ready > 0]
    typical = median(served) if served else 0.0
    out = []
    for index, s in enumerate(stages):
        loading = f"; {s.loading} loading its state" if s.loading else ""
        if s.ready == 0:
            color, reason = StageColor.RED, f"no live peer{loading}"
        elif s.ready == 1:
            color, reason = StageColor.AMBER, f"one live peer: losing it stalls the run{loading}"
        elif typical > 0 and s.rate < BOTTLENECK_SHARE * typical:
            color, reason = StageColor.AMBER, "bottleneck: far below the other stages' rate"
        else:
            color, reason = StageColor.GREEN, f"{s.ready} live peers"
        out.append(
            StageHealth(
                stage=index, color=color, ready=s.ready, loading=s.loading, rate=s.rate, reason=reason
            )
        )
    return tuple(out)


def run_health(inputs: HealthInputs) -> RunHealth:
    stages = stage_health(inputs.stages)
    match inputs.status:
        case RunStatus.FINISHED:
            return RunHealth(state=RunState.FINISHED, reason="reached its last step", stages=stages)
        case RunStatus.ARCHIVED:
            return RunHealth(state=RunState.ARCHIVED, reason="archived by its owner", stages=stages)
        case RunStatus.PAUSED:
            return RunHealth(state=RunState.PAUSED, reason="paused by its owner", stages=stages)
    empty = [(index, s) for index, s in enumerate(inputs.stages) if s.ready == 0]
    if empty:
        lost = [(index, s) for index, s in empty if s.last_ready is not None]
        if not lost:
            if inputs.peers == 0:
                return RunHealth(state=RunState.WAITING, reason="no peer has joined yet", stages=stages)
            index, s = empty[0]
            doing = "is loading its state" if s.loading else "has no peer yet"
            return RunHealth(state=RunState.WAITING, reason=f"stage {index} {doing}", stages=stages)
        # The stall began when the first of the stages now empty lost its last peer.
        index, s = min(lost, key=lambda pair: pair[1].last_ready or 0.0)
        others = (
            f" (and {len(empty) - 1} more stage{'s' if len(empty) > 2 else ''})" if len(empty) > 1 else ""
        )
        loading = f"; {s.loading} peer{'s' if s.loading > 1 else ''} loading its state" if s.loading else ""
        return RunHealth(
            state=RunState.STALLED,
            reason=f"stage {index} has no live peer{others}{loading}",
            since=s.last_ready,
            stages=stages,
        )
    if inputs.peers == 0:  # no stage to speak of (none known yet) and nobody here
        return RunHealth(state=RunState.WAITING, reason="no peer has joined yet", stages=stages)
    expected = max(inputs.last_progress, inputs.whole_since or inputs.last_progress)
    if inputs.now - expected > inputs.stall_after_s:
        return RunHealth(
            state=RunState.STALLED,
            reason="no work has finished lately although every stage has a live peer",
            since=expected,
            stages=stages,
        )
    return RunHealth(state=RunState.TRAINING, reason="every stage has a live peer", stages=stages)


@dataclass(kw_only=True)
class HealthWatch:
    """The times `run_health` needs, kept by the run's machine as things happen."""

    started: float
    last_progress: float = 0.0
    last_ready: dict[int, float] = field(default_factory=dict)
    whole_since: float | None = None

    def __post_init__(self) -> None:
        self.last_progress = max(self.last_progress, self.started)

    def progressed(self, now: float) -> None:
        self.last_progress = max(self.last_progress, now)

    def observe(self, now: float, ready_by_stage: list[int]) -> None:
        """Each stage's count of ready peers as of `now`."""
        for stage, ready in enumerate(ready_by_stage):
            if ready > 0:
                self.last_ready[stage] = now
        whole = all(ready > 0 for ready in ready_by_stage)
        if not whole:
            self.whole_since = None
        elif self.whole_since is None:
            self.whole_since = now
