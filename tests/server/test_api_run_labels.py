"""Run tags, notes and archiving (the owner's bookkeeping), and the sampled loss curve."""

from __future__ import annotations

from server.services.steps import record_step


def _labels(client, headers, run_id, **body):
    return client.patch(f"/api/runs/{run_id}/labels", json=body, headers=headers)


def test_owner_sets_tags_and_notes_and_they_come_back(client, owner_headers, run_id):
    response = _labels(
        client, owner_headers, run_id, tags=["baseline", "lr-sweep", "baseline"], notes="first try"
    )
    assert response.status_code == 200, response.text
    assert (response.json()["tags"], response.json()["notes"]) == (["baseline", "lr-sweep"], "first try")
    # A field left out stays as it is.
    response = _labels(client, owner_headers, run_id, notes="second thoughts")
    assert response.json()["tags"] == ["baseline", "lr-sweep"]
    detail = client.get(f"/api/runs/{run_id}", headers=owner_headers).json()
    assert (detail["tags"], detail["notes"], detail["archived"]) == (
        ["baseline", "lr-sweep"],
        "second thoughts",
        False,
    )


def test_bad_tags_are_refused(client, owner_headers, run_id):
    for tags in (["a,b"], [" padded"], [""], ["x" * 41], [f"t{i}" for i in range(21)]):
        assert _labels(client, owner_headers, run_id, tags=tags).status_code == 422, tags
    assert _labels(client, owner_headers, run_id, surprise=1).status_code == 422
    assert client.get(f"/api/runs/{run_id}", headers=owner_headers).json()["tags"] == []


def test_archived_runs_leave_the_list_unless_asked_for_and_come_back(client, owner_headers, run_id):
    other = client.post("/api/runs", json={"name": "second"}, headers=owner_headers).json()["id"]
    assert _labels(client, owner_headers, run_id, archived=True).json()["archived"] is True
    assert [r["id"] for r in client.get("/api/runs", headers=owner_headers).json()] == [other]
    listed = client.get("/api/runs", params={"archived": "true"}, headers=owner_headers).json()
    assert [(r["id"], r["archived"]) for r in listed] == [(other, False), (run_id, True)]
    # Filing a run away leaves its training alone, and is undone.
    assert client.get(f"/api/runs/{run_id}", headers=owner_headers).json()["status"] == "active"
    assert _labels(client, owner_headers, run_id, archived=False).json()["archived"] is False
    assert [r["id"] for r in client.get("/api/runs", headers=owner_headers).json()] == [other, run_id]
    kinds = [e["kind"] for e in client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()]
    assert kinds[-2:] == ["run_filed", "run_unfiled"]


def test_ending_a_run_with_the_archive_action_files_it_too(client, owner_headers, run_id):
    assert client.post(f"/api/runs/{run_id}/archive", headers=owner_headers).status_code == 200
    assert client.get("/api/runs", headers=owner_headers).json() == []
    assert client.get(f"/api/runs/{run_id}", headers=owner_headers).json()["archived"] is True


def test_only_the_owner_edits_labels(api, client, owner_headers, admin_headers, run_id):
    api.create_account("bob", "bob's password", "owner")
    bob = api.bearer("bob", "bob's password")
    assert _labels(client, bob, run_id, notes="mine now").status_code == 404
    response = _labels(client, admin_headers, run_id, notes="admin was here")
    assert response.status_code == 403
    assert "owner" in response.json()["detail"]
    detail = client.get(f"/api/runs/{run_id}", headers=admin_headers).json()
    assert detail["notes"] == ""


def test_loss_curve_samples_evenly_and_skips_steps_without_loss(api, client, owner_headers, run_id):
    from server.models import Run

    with api.app.state.session_factory() as session:
        for step in range(100):
            loss = None if step == 99 else 10.0 - step / 10
            record_step(
                session,
                run_id=run_id,
                step=step,
                loss=loss,
                samples_sent=32,
                samples_lost=0,
                samples_counted=[32, 32],
                duration_s=1.0,
            )
        session.get_one(Run, run_id).current_step = 100
        session.commit()
    curve = client.get(f"/api/runs/{run_id}/loss-curve", params={"points": 12}, headers=owner_headers).json()
    steps = [p["step"] for p in curve]
    assert steps == [0, 9, 18, 27, 36, 45, 54, 63, 72, 81, 90]  # 99 is picked but has no loss
    assert curve[1]["loss"] == 10.0 - 0.9
    whole = client.get(
        f"/api/runs/{run_id}/loss-curve", params={"points": 2000}, headers=owner_headers
    ).json()
    assert len(whole) == 99
    assert (
        client.get(f"/api/runs/{run_id}/loss-curve", params={"points": 1}, headers=owner_headers).status_code
        == 422
    )
