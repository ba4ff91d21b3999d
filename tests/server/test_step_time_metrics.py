"""A step's time split and activation-cache figures, as the coordinator writes them and the API
serves them, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from server.policies.step_time import StageBusy
from server.services.swarm import record_committed_step
from server.swarm import decisions as do

TIME_PARTS = ("time_compute_s", "time_network_s", "time_waiting_s", "time_averaging_s", "time_coordinator_s")


def record(step: int, stage_busy: StageBusy | None = None, **figures: float) -> do.RecordStep:
    return do.RecordStep(
        step=step,
        loss=2.0,
        samples_sent=8,
        samples_done=8,
        samples_lost=0,
        samples_counted=(8, 8),
        duration_s=3.0,
        next_sample=8 * (step + 1),
        wire_bytes=0,
        retries=0,
        check_calls=0,
        check_bytes=0,
        check_seconds=0.0,
        check_largest_agreeing=0.0,
        learning_rate=1e-3,
        grad_scale=1.0,
        attempts=(0, 0),
        finished=False,
        stage_busy=stage_busy,
        **figures,
    )


def test_the_time_split_and_cache_figures_are_per_step_metrics(api, client, owner_headers, run_id):
    figures = {
        "time_compute_s": 0.75,
        "time_network_s": 0.25,
        "time_waiting_s": 1.25,
        "time_averaging_s": 1.0,
        "time_coordinator_s": 0.5,
        "cache_hits": 12,
        "cache_misses": 1,
    }
    with api.app.state.session_factory() as session:
        record_committed_step(session, run_id, record(0, **figures))
        session.commit()
    rows = client.get(f"/api/runs/{run_id}/metrics", headers=owner_headers).json()
    values = {row["name"]: row["value"] for row in rows if row["step"] == 0}
    assert {name: values[name] for name in TIME_PARTS} == {
        "time_compute_s": 0.75,
        "time_network_s": 0.25,
        "time_waiting_s": 1.25,
        "time_averaging_s": 1.0,
        "time_coordinator_s": 0.5,
    }
    assert sum(values[name] for name in TIME_PARTS) == pytest.approx(3.75)
    assert (values["activation_cache_hits"], values["activation_cache_misses"]) == (12, 1)
    # One part alone, as a chart asks for it.
    only = client.get(
        f"/api/runs/{run_id}/metrics", params={"name": "time_waiting_s"}, headers=owner_headers
    ).json()
    assert [(row["step"], row["value"]) for row in only] == [(0, 1.25)]


BUSY = (
    "busiest_stage",
    "busiest_stage_busy_share",
    "busiest_stage_least_busy_share",
    "busiest_stage_most_busy_share",
)


def test_the_busiest_stage_is_a_per_step_metric_when_a_peer_computed(api, client, owner_headers, run_id):
    zeros = dict.fromkeys((*TIME_PARTS, "cache_hits", "cache_misses"), 0.0)
    busy = StageBusy(stage=3, mean_share=0.7, least_share=0.36, most_share=0.97)
    with api.app.state.session_factory() as session:
        record_committed_step(session, run_id, record(0, stage_busy=busy, **zeros))
        record_committed_step(session, run_id, record(1, **zeros))
        session.commit()
    rows = client.get(f"/api/runs/{run_id}/metrics", headers=owner_headers).json()
    by_step = {step: {r["name"]: r["value"] for r in rows if r["step"] == step} for step in (0, 1)}
    assert [by_step[0][name] for name in BUSY] == [3, 0.7, 0.36, 0.97]
    assert not set(BUSY) & set(by_step[1])
