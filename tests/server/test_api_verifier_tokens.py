"""Verifier join tokens: their peers are the owner's own, trusted to referee spot-check disputes."""

from __future__ import annotations

from swarmhub.wire import StageAssignment


def issue(client, headers: dict[str, str], run_id: int, **body) -> dict:
    response = client.post(f"/api/runs/{run_id}/tokens", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


def register(api, client, token: str) -> int:
    response = client.post("/api/peers/register", json=api.registration(token))
    assert response.status_code == 201, response.text
    return response.json()["peer_id"]


def test_a_verifier_tokens_peers_are_trusted_and_an_ordinary_tokens_are_not(
    api, client, owner_headers, run_id
):
    verifier = issue(client, owner_headers, run_id, label="my box", verifier=True)
    ordinary = issue(client, owner_headers, run_id, label="friends")
    default = issue(client, owner_headers, run_id)
    assert (verifier["verifier"], ordinary["verifier"], default["verifier"]) == (True, False, False)
    listed = {
        t["id"]: t["verifier"] for t in client.get(f"/api/runs/{run_id}/tokens", headers=owner_headers).json()
    }
    assert listed == {verifier["id"]: True, ordinary["id"]: False, default["id"]: False}

    trusted = {register(api, client, verifier["token"]) for _ in range(2)}
    untrusted = {register(api, client, ordinary["token"]), register(api, client, default["token"])}
    peers = client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json()
    assert {p["id"]: p["trusted"] for p in peers} == {p: True for p in trusted} | {
        p: False for p in untrusted
    }

    events = client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()
    issued = [e["message"] for e in events if e["kind"] == "token_issued"]
    assert issued[0].startswith(f"verifier token {verifier['id']} issued")
    assert issued[1].startswith(f"join token {ordinary['id']} issued")


def test_verifier_is_a_boolean(client, owner_headers, run_id):
    response = client.post(f"/api/runs/{run_id}/tokens", json={"verifier": "maybe"}, headers=owner_headers)
    assert response.status_code == 422


def test_only_the_runs_owner_issues_verifier_tokens(api, client, owner_headers, run_id):
    api.create_account("mallory", "mallory password", "owner")
    mallory = api.bearer("mallory", "mallory password")
    response = client.post(f"/api/runs/{run_id}/tokens", json={"verifier": True}, headers=mallory)
    assert response.status_code == 404
    assert client.get(f"/api/runs/{run_id}/tokens", headers=owner_headers).json() == []


def test_a_verifier_peer_is_told_to_corroborate_the_state_it_copies(
    client, owner_headers, run_id, connect_peer
):
    verifier = issue(client, owner_headers, run_id, verifier=True)["token"]
    ordinary = issue(client, owner_headers, run_id)["token"]
    trusted_peer = connect_peer(verifier)
    other_peer = connect_peer(ordinary)
    (trusted_assignment,) = [f for f in trusted_peer.frames if isinstance(f, StageAssignment)]
    (other_assignment,) = [f for f in other_peer.frames if isinstance(f, StageAssignment)]
    assert trusted_assignment.corroborate is True
    assert other_assignment.corroborate is False
