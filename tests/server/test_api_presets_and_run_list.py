"""GET /api/presets (public) and GET /api/runs with what the runs page shows: parameter count,
latest loss and peer counts, in a fixed number of queries whatever the number of runs."""

from __future__ import annotations

import secrets
from contextlib import contextmanager

import sqlalchemy as sa

from server.models import Peer
from server.services.steps import record_step
from swarmhub.presets import PRESETS
from swarmhub.resources import MAX_ACTIVATION_ELEMENTS
from swarmhub.status import PeerState


def test_presets_are_public_and_match_swarmhub_presets(client):
    response = client.get("/api/presets")  # no credentials
    assert response.status_code == 200
    assert response.json() == [
        {
            "name": p.name,
            "parameter_count": p.parameter_count,
            "d_model": p.d_model,
            "n_layer": p.n_layer,
            "n_head": p.n_head,
            "max_seq_len": p.max_seq_len,
            "max_activation_elements": MAX_ACTIVATION_ELEMENTS,
        }
        for p in PRESETS.values()
    ]
    names = [p["name"] for p in response.json()]
    assert names[:3] == ["tiny", "small", "swarm-ref"]
    # Smallest first, the pair-token preset (whose embeddings and head are 65,536 tokens wide) too.
    counts = [p["parameter_count"] for p in response.json()]
    assert counts == sorted(counts)


def test_presets_are_in_the_openapi_schema(client):
    schema = client.get("/openapi.json").json()
    operation = schema["paths"]["/api/presets"]["get"]
    assert operation["operationId"] == "list_presets"
    assert "security" not in operation
    assert set(schema["components"]["schemas"]["PresetOut"]["required"]) == {
        "name",
        "parameter_count",
        "d_model",
        "n_layer",
        "n_head",
        "max_seq_len",
    }


def _add_peers(app, run_id: int, states: list[str]) -> None:
    with app.state.session_factory() as session:
        for i, state in enumerate(states):
            session.add(
                Peer(
                    run_id=run_id,
                    name=f"p{i}",
                    address=f"127.0.0.1:{7000 + i}",
                    device="cpu",
                    state=state,
                    credential_hash=secrets.token_hex(32),
                )
            )
        session.commit()


def _add_steps(app, run_id: int, losses: list[float | None]) -> None:
    with app.state.session_factory() as session:
        for step, loss in enumerate(losses):
            record_step(
                session,
                run_id=run_id,
                step=step,
                loss=loss,
                samples_sent=8,
                samples_lost=0,
                samples_counted=[8, 8],
                duration_s=0.1,
            )
        session.commit()


def _create(client, headers, name: str, **fields) -> int:
    response = client.post("/api/runs", json={"name": name} | fields, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_runs_list_items_are_run_details(app, client, owner_headers):
    quiet = _create(client, owner_headers, "quiet")
    busy = _create(client, owner_headers, "busy", model_preset="small")
    _add_peers(app, busy, ["active", "active", "lost", "left", "joining"])
    _add_peers(app, quiet, ["kicked"])
    # The newest step with a loss counts; a later step without one (not measured) does not hide it.
    _add_steps(app, busy, [5.5, 4.25, None])

    listed = client.get("/api/runs", headers=owner_headers).json()
    assert [r["id"] for r in listed] == [busy, quiet]
    by_id = {r["id"]: r for r in listed}
    assert by_id[busy]["parameter_count"] == PRESETS["small"].parameter_count
    assert by_id[busy]["latest_loss"] == 4.25
    assert by_id[busy]["peer_counts"] == dict.fromkeys(PeerState, 0) | {
        "active": 2,
        "lost": 1,
        "left": 1,
        "joining": 1,
    }
    assert by_id[quiet]["latest_loss"] is None
    assert by_id[quiet]["peer_counts"] == dict.fromkeys(PeerState, 0) | {"kicked": 1}
    # Each item is exactly what GET /api/runs/{id} answers.
    for run in listed:
        assert client.get(f"/api/runs/{run['id']}", headers=owner_headers).json() == run


def test_owners_list_their_runs_and_admins_every_run_with_details(app, api, client, admin_headers):
    api.create_account("bob", "bob password 1", "owner")
    api.create_account("carol", "carol password 1", "owner")
    bob, carol = api.bearer("bob", "bob password 1"), api.bearer("carol", "carol password 1")
    bobs = _create(client, bob, "bob's")
    carols = _create(client, carol, "carol's")
    _add_steps(app, bobs, [3.0])
    _add_steps(app, carols, [2.0, 1.5])

    assert [(r["id"], r["latest_loss"]) for r in client.get("/api/runs", headers=bob).json()] == [(bobs, 3.0)]
    assert [(r["id"], r["latest_loss"]) for r in client.get("/api/runs", headers=carol).json()] == [
        (carols, 1.5)
    ]
    every = client.get("/api/runs", headers=admin_headers).json()
    assert [(r["id"], r["latest_loss"]) for r in every] == [(carols, 1.5), (bobs, 3.0)]


@contextmanager
def _count_queries(app):
    engine = app.state.session_factory.kw["bind"]
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def test_runs_list_takes_the_same_number_of_queries_for_one_run_or_many(app, client, owner_headers):
    first = _create(client, owner_headers, "r0")
    _add_peers(app, first, ["active"])
    _add_steps(app, first, [1.0])
    with _count_queries(app) as one:
        assert len(client.get("/api/runs", headers=owner_headers).json()) == 1

    for i in range(1, 8):
        run_id = _create(client, owner_headers, f"r{i}")
        _add_peers(app, run_id, ["active", "lost"])
        _add_steps(app, run_id, [float(i), float(i) / 2])
    with _count_queries(app) as many:
        listed = client.get("/api/runs", headers=owner_headers).json()
    assert len(listed) == 8
    assert all(r["peer_counts"]["active"] == 1 for r in listed)
    assert len(many) == len(one), f"{len(one)} queries for one run, {len(many)} for eight:\n" + "\n".join(
        many
    )
