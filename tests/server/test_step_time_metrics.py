"""A step's time split and activation-cache figures, as the coordinator writes them and the API
serves them, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from server.services.swarm import record_committed_step
from server.swarm import decisions as do

TIME_PARTS = ("time_compute_s", "time_network_s", "time_waiting_s", "time_averaging_s", "time_coordinator_s")


def record(step: int, **figures: float) -> do.RecordStep:
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
