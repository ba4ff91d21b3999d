"""Runs: creation with defaults, validation, listings, and the status state machine."""

from __future__ import annotations

import pytest

from swarmhub.presets import PRESETS
from swarmhub.wire import NoWork, RunStatusChanged, WorkRequest


def test_create_run_fills_defaults_and_reports_details(client, owner_headers):
    response = client.post("/api/runs", json={"name": "tiny run"}, headers=owner_headers)
    assert response.status_code == 201
    run = response.json()
    assert {k: run[k] for k in ("model_preset", "dataset", "num_stages", "target_batch_size")} == {
        "model_preset": "tiny",
        "dataset": "python-stdlib",
        "num_stages": 2,
        "target_batch_size": 32,
    }
    assert (run["microbatch_size"], run["seq_len"], run["optimizer"]) == (8, 64, "adamw")
    assert (run["learning_rate"], run["warmup_steps"], run["weight_decay"]) == (3e-3, 10, 0.01)
    assert (run["compression"], run["seed"], run["status"], run["current_step"]) == ("none", 0, "active", 0)
    assert run["parameter_count"] == PRESETS["tiny"].parameter_count
    assert run["peer_counts"]["active"] == 0 and run["latest_loss"] is None
    assert "data_key" not in response.text
    detail = client.get(f"/api/runs/{run['id']}", headers=owner_headers).json()
    assert detail == run


@pytest.mark.parametrize(
    ("override", "field", "complaint"),
    [
        (
            {"model_preset": "gigantic"},
            "model_preset",
            "Unknown preset 'gigantic': choose one of tiny, small",
        ),
        ({"num_stages": 5}, "num_stages", "Must be at most 4: preset 'tiny' has 4 blocks."),
        ({"num_stages": 0}, "num_stages", "Must be at least 1."),
        ({"seq_len": 257}, "seq_len", "Must be at most 256 for preset 'tiny'."),
        ({"target_batch_size": 30}, "target_batch_size", "Must be a multiple of microbatch_size (8)."),
        ({"learning_rate": 0}, "learning_rate", "Must be greater than 0."),
        ({"optimizer": "lion"}, "optimizer", "Choose 'adamw' or 'sgd'."),
        ({"compression": "fp4"}, "compression", "Choose 'none', 'float16' or 'int8'."),
        ({"dataset": "relative/path.txt"}, "dataset", "paths on the participants' machines are not accepted"),
        ({"dataset": "/etc/shadow"}, "dataset", "paths on the participants' machines are not accepted"),
        ({"dataset": "a" * 64}, None, "not one of your datasets"),
        ({"name": ""}, "name", "Give the run a name."),
        ({"surprise": 1}, "surprise", "Extra inputs are not permitted"),
    ],
)
def test_invalid_runs_are_422_with_a_reason_and_nothing_is_created(
    client, owner_headers, override, field, complaint
):
    """Each refusal names the setting it is about, in the words the dashboard's form uses."""
    response = client.post("/api/runs", json={"name": "bad"} | override, headers=owner_headers)
    assert response.status_code == 422
    assert complaint in response.text
    if field is not None:
        assert [(e["loc"], complaint in e["msg"]) for e in response.json()["detail"]] == [
            (["body", field], True)
        ]
    assert client.get("/api/runs", headers=owner_headers).json() == []


def test_other_presets_are_accepted(client, owner_headers):
    body = {"name": "big", "model_preset": "small", "num_stages": 8, "seq_len": 512}
    response = client.post(
        "/api/runs", json=body | {"compression": "int8", "max_steps": 5}, headers=owner_headers
    )
    assert response.status_code == 201, response.text
    assert response.json()["max_steps"] == 5


def test_runs_are_listed_newest_first(client, owner_headers):
    ids = [
        client.post("/api/runs", json={"name": f"r{i}"}, headers=owner_headers).json()["id"] for i in range(3)
    ]
    assert [r["id"] for r in client.get("/api/runs", headers=owner_headers).json()] == ids[::-1]


def test_pause_resume_archive_state_machine(client, owner_headers, run_id, connect_peer):
    peer = connect_peer()

    def act(action):
        return client.post(f"/api/runs/{run_id}/{action}", headers=owner_headers)

    assert act("resume").status_code == 409  # active already
    assert act("pause").json()["status"] == "paused"
    assert act("pause").status_code == 409
    assert act("resume").json()["status"] == "active"
    assert act("archive").json()["status"] == "archived"
    refused = act("resume")
    assert refused.status_code == 409 and refused.json() == {"detail": "cannot resume a run that is archived"}
    assert act("archive").status_code == 409
    # The connected peer heard each change that happened, once, in order.
    assert [peer.expect(RunStatusChanged).status for _ in range(3)] == ["paused", "active", "archived"]
    peer.send(WorkRequest())
    assert peer.expect(NoWork).reason == "run is archived"
    events = client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()
    kinds = [e["kind"] for e in events if e["kind"].startswith("run_")]
    assert kinds == ["run_created", "run_paused", "run_resumed", "run_archived"]


def test_steps_events_and_assignments_pagination(app, client, owner_headers, run_id):
    from server.services.events import record_event
    from server.services.steps import record_step

    with app.state.session_factory() as session:
        for step in range(5):
            record_step(
                session,
                run_id=run_id,
                step=step,
                loss=5.0 - step,
                samples_sent=32,
                samples_lost=0,
                samples_counted=[32, 32],
                duration_s=0.5,
            )
            record_event(session, run_id=run_id, kind="step", message=f"step {step}")
        session.commit()
    steps = client.get(
        f"/api/runs/{run_id}/steps", params={"after": 1, "limit": 2}, headers=owner_headers
    ).json()
    assert [s["step"] for s in steps] == [2, 3]
    assert steps[0]["samples_counted"] == [32, 32] and steps[0]["loss"] == 3.0
    assert client.get(f"/api/runs/{run_id}", headers=owner_headers).json()["latest_loss"] == 1.0
    events = client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()
    later = client.get(f"/api/runs/{run_id}/events", params={"after": events[2]["id"]}, headers=owner_headers)
    assert [e["id"] for e in later.json()] == [e["id"] for e in events[3:]]
    assert client.get(f"/api/runs/{run_id}/assignments", headers=owner_headers).json() == []
    assert (
        client.get(f"/api/runs/{run_id}/steps", params={"limit": 0}, headers=owner_headers).status_code == 422
    )
