"""The contribution ledger through the real coordinator, on SQLite and PostgreSQL: peers speak the
control channel as real ones do (`connect_peer`), a step is committed, and the ledger's API, its CSV
export and a participant's own view show what each peer and each join token is credited."""

from __future__ import annotations

import csv
import io
from typing import Any

import sqlalchemy as sa

from server.models import PeerLedger
from swarmhub.wire import (
    ApplyStep,
    AveragingDone,
    Heartbeat,
    MicrobatchDone,
    ServedCall,
    StageReady,
    StepApplied,
    StepBarrier,
    StepCommitted,
    SwarmView,
    WorkGrant,
    WorkRequest,
)

CALL_S, COMPUTE_S = 0.5, 0.25


def _issue(client, headers: dict[str, str], run_id: int, label: str) -> str:
    response = client.post(f"/api/runs/{run_id}/tokens", json={"label": label}, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()["token"]


def _register(api, token: str) -> tuple[int, str, str]:
    response = api.client.post("/api/peers/register", json=api.registration(token))
    assert response.status_code == 201, response.text
    body = response.json()
    return body["peer_id"], body["credential"], body["contribution_token"]


def _served(stage0: int, stage1: int, samples: int) -> list[ServedCall]:
    """A microbatch's stage calls: stage 0 forward, stage 1 forward-backward, stage 0 backward."""
    return [
        ServedCall(peer_id=peer, samples=samples, seconds=CALL_S, compute_seconds=COMPUTE_S)
        for peer in (stage0, stage1, stage0)
    ]


def _take_step(peers: list[Any]) -> list[WorkGrant]:
    """One step of 16 samples in two microbatches, one per trainer, through the real protocol."""
    first, second = peers
    grants = []
    for trainer in peers:
        trainer.send(WorkRequest())
        grants.append(trainer.expect(WorkGrant))
    for trainer, grant in zip(peers, grants, strict=True):
        trainer.send(
            MicrobatchDone(
                step=grant.step,
                microbatch_id=grant.microbatch_id,
                samples=grant.samples,
                loss=4.0,
                bytes_sent=1000 * trainer.peer_id,
                served=_served(first.peer_id, second.peer_id, grant.samples),
            )
        )
    ids = [g.microbatch_id for g in grants]
    for peer in peers:
        barrier = peer.expect(StepBarrier)
        peer.send(
            AveragingDone(
                step=barrier.step,
                attempt=barrier.attempt,
                stage=peer.stage,
                contributors=[peer.peer_id],
                counted=ids,
                grad_sum_norm_sq=1.0,
            )
        )
    for peer in peers:
        applied = peer.expect(ApplyStep)
        peer.send(StepApplied(step=applied.step, stage=peer.stage))
    for peer in peers:
        peer.expect(StepCommitted)
    return grants


def test_a_committed_step_is_credited_exported_and_shown_to_each_participant(
    api, app, client, owner_headers, connect_peer, eventually
):
    created = client.post(
        "/api/runs",
        json={"name": "ledger", "num_stages": 2, "target_batch_size": 16, "microbatch_size": 8},
        headers=owner_headers,
    )
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    registered = [_register(api, _issue(client, owner_headers, run_id, label)) for label in ("ann", "")]
    peers = [connect_peer.hello(peer_id, credential) for peer_id, credential, _ in registered]
    first, second = peers
    assert (first.stage, second.stage) == (0, 1)
    # The second peer is as one registered before the ledger existed: its account is opened when it
    # is first credited.
    with app.state.session_factory() as session:
        session.execute(sa.delete(PeerLedger).where(PeerLedger.peer_id == second.peer_id))
        session.commit()
    for peer in peers:
        peer.send(StageReady(stage=peer.stage, step=0, origin="initialized"))
        peer.expect(SwarmView, skip=())

    # Stage 0's peer claims exactly its calls (two per microbatch); stage 1's claims far more than
    # the trainers received from it, and is credited only what they received.
    first.send(Heartbeat(throughput=10.0, queue_length=0, samples_done=32, compute_seconds=1.0))
    second.send(Heartbeat(throughput=10.0, queue_length=0, samples_done=1000, compute_seconds=100.0))
    grants = _take_step(peers)
    assert [g.samples for g in grants] == [8, 8]

    ledger = client.get(f"/api/runs/{run_id}/ledger", headers=owner_headers)
    assert ledger.status_code == 200, ledger.text
    body = ledger.json()
    assert body["samples_counted"] == 16
    by_peer = {p["peer_id"]: p for p in body["peers"]}
    assert sum(p["samples_trained"] for p in body["peers"]) == body["samples_counted"]
    a, b = by_peer[first.peer_id], by_peer[second.peer_id]
    assert (a["samples_trained"], a["calls_served"], a["samples_served"], a["compute_s"]) == (8, 4, 32, 1.0)
    assert (b["samples_trained"], b["calls_served"], b["samples_served"], b["compute_s"]) == (8, 2, 16, 0.5)
    assert (a["bytes_moved"], b["bytes_moved"]) == (1000 * first.peer_id, 1000 * second.peer_id)
    assert a["uptime_s"] > 0 and b["uptime_s"] > 0
    assert a["steps"] == b["steps"] == 1 and a["failures"] == b["failures"] == 0
    assert (a["participant"], b["participant"]) == ("ann", f"token {b['participant_id']}")
    # Most samples trained and served first; each participant is its one peer here.
    assert [p["peer_id"] for p in body["peers"]] == [first.peer_id, second.peer_id]
    participants = {p["participant"]: p for p in body["participants"]}
    assert participants["ann"]["samples_served"] == 32 and participants["ann"]["peers"] == 1

    # The CSV export: one row per peer, the same figures.
    exported = client.get(f"/api/runs/{run_id}/ledger.csv", headers=owner_headers)
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("text/csv")
    assert f'filename="run-{run_id}-ledger.csv"' in exported.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [int(r["peer_id"]) for r in rows] == [first.peer_id, second.peer_id]
    assert rows[0]["participant"] == "ann" and rows[0]["stage"] == "0" and rows[0]["state"] == "active"
    assert [(r["samples_trained"], r["calls_served"], r["compute_s"]) for r in rows] == [
        ("8", "4", "1.000"),
        ("8", "2", "0.500"),
    ]

    # A peer that vanishes counts a failure; a second step adds to the totals, never replaces them.
    second.disconnect()
    eventually(
        lambda: (
            client.get(f"/api/runs/{run_id}/ledger", headers=owner_headers).json()["peers"][1]["failures"]
            == 1
        ),
        "the lost peer's failure",
    )

    # A participant's own view needs no account: the link its peer printed is the key.
    client.cookies.clear()
    own = client.get(f"/api/contributions/{registered[0][2]}")
    assert own.status_code == 200, own.text
    mine = own.json()
    assert (mine["run_id"], mine["peer"]["peer_id"], mine["participant"]["participant"]) == (
        run_id,
        first.peer_id,
        "ann",
    )
    assert (mine["rank"], mine["participants"], mine["run_samples_counted"]) == (1, 2, 16)
    assert client.get("/api/contributions/" + "x" * 43).status_code == 404
    assert client.get(f"/api/contributions/{registered[1][2]}").status_code == 404


def test_the_ledger_is_the_owners_and_admins_only(api, client, owner_headers, admin_headers, run_id):
    assert client.get(f"/api/runs/{run_id}/ledger").status_code == 401
    assert client.get(f"/api/runs/{run_id}/ledger.csv").status_code == 401
    api.create_account("mallory", "mallory password", "owner")
    other = api.bearer("mallory", "mallory password")
    assert client.get(f"/api/runs/{run_id}/ledger", headers=other).status_code == 404
    assert client.get(f"/api/runs/{run_id}/ledger.csv", headers=other).status_code == 404
    empty = client.get(f"/api/runs/{run_id}/ledger", headers=admin_headers).json()
    assert empty == {"run_id": run_id, "samples_counted": 0, "peers": [], "participants": []}
