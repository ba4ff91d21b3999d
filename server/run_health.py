"""A run's health as the API and the dashboard show it: the machine's `RunHealth` with clock times."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from server.policies.health import HealthInputs, RunHealth, run_health
from server.schemas import HealthFrame, RunHealthOut, StageHealthOut
from swarmhub.status import RunStatus


def health_out(health: RunHealth, *, now: float, wall_now: datetime) -> RunHealthOut:
    """`now` is the machine's clock when `health` was computed, `wall_now` the same moment by the wall."""
    since = None if health.since is None else wall_now - timedelta(seconds=now - health.since)
    return RunHealthOut(
        state=health.state,
        reason=health.reason,
        since=since,
        stages=[
            StageHealthOut(
                stage=s.stage, color=s.color, ready=s.ready, loading=s.loading, rate=s.rate, reason=s.reason
            )
            for s in health.stages
        ],
    )


def status_health(status: RunStatus) -> RunHealthOut:
    """The health of a run no peer has connected to since the coordinator started: its status alone."""
    health = run_health(
        HealthInputs(
            now=0.0,
            status=status,
            stages=(),
            peers=0,
            last_progress=0.0,
            whole_since=None,
            stall_after_s=float("inf"),
        )
    )
    return RunHealthOut(state=health.state, reason=health.reason, since=None, stages=[])


def health_frame(health: RunHealthOut) -> dict[str, Any]:
    return HealthFrame(health=health).model_dump(mode="json")
