"""Join tokens, peer registration over the wire schema, and admin kicks and bans."""

from __future__ import annotations

import socket

import pytest

from swarmhub.wire import DATA_PLANE_VERSION, Kicked, PeerRegistered


def test_token_is_shown_once_with_a_join_command(api, client, owner_headers, run_id):
    issued = api.issue_token(owner_headers, run_id)
    # Not the Host header of the request (the test client's "testserver"): where the coordinator listens.
    assert issued["join_command"] == f"swarmhub-peer join http://127.0.0.1:8000 --token {issued['token']}"
    assert len(issued["token"]) >= 32
    listed = client.get(f"/api/runs/{run_id}/tokens", headers=owner_headers).json()
    assert [t["id"] for t in listed] == [issued["id"]]
    assert "token" not in listed[0] and issued["token"] not in str(listed)


@pytest.mark.server_settings(public_url="https://swarm.example.org/")
def test_join_command_names_the_public_url_whoever_asks(api, client, owner_headers, run_id):
    issued = api.issue_token(owner_headers, run_id)
    assert issued["join_command"] == f"swarmhub-peer join https://swarm.example.org --token {issued['token']}"
    other = client.post(
        f"/api/runs/{run_id}/tokens", json={"label": ""}, headers=owner_headers | {"Host": "127.0.0.1:9"}
    ).json()
    assert other["join_command"].startswith("swarmhub-peer join https://swarm.example.org --token ")


@pytest.mark.server_settings(host="0.0.0.0", port=8123)
def test_join_command_never_names_a_wildcard_address(api, owner_headers, run_id):
    url = api.issue_token(owner_headers, run_id)["join_command"].split()[2]
    assert url == f"http://{socket.gethostname()}:8123"


def test_registration_returns_the_wire_reply(api, app, client, owner_headers, run_id):
    token = api.issue_token(owner_headers, run_id)["token"]
    response = client.post("/api/peers/register", json=api.registration(token, name="gpu-box"))
    assert response.status_code == 201, response.text
    registered = PeerRegistered.model_validate(response.json())
    assert registered.run.run_id == run_id and registered.run.num_stages == 2
    assert registered.run.model_preset == "tiny" and registered.control_url_path == "/ws/peer"
    peers = client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json()
    assert [(p["id"], p["name"], p["state"], p["stage"]) for p in peers] == [
        (registered.peer_id, "gpu-box", "joining", None)
    ]
    assert registered.credential not in str(peers)

    from server.services.peers import authenticate_peer

    with app.state.session_factory() as session:
        assert authenticate_peer(session, registered.peer_id, registered.credential) is not None
        assert authenticate_peer(session, registered.peer_id, "wrong") is None
    kinds = [e["kind"] for e in client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()]
    assert kinds[-1] == "peer_registered"


def test_unnamed_peers_get_a_name(api, client, owner_headers, run_id):
    token = api.issue_token(owner_headers, run_id)["token"]
    peer_id = client.post("/api/peers/register", json=api.registration(token)).json()["peer_id"]
    assert (
        client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json()[0]["name"] == f"peer-{peer_id}"
    )


def test_revoked_and_unknown_tokens_are_refused(api, client, owner_headers, run_id):
    token = api.issue_token(owner_headers, run_id)
    assert client.delete(f"/api/runs/{run_id}/tokens/{token['id']}", headers=owner_headers).status_code == 204
    assert client.delete(f"/api/runs/{run_id}/tokens/{token['id']}", headers=owner_headers).status_code == 204
    assert client.get(f"/api/runs/{run_id}/tokens", headers=owner_headers).json()[0]["revoked_at"] is not None
    for secret in (token["token"], "x" * 32):
        refused = client.post("/api/peers/register", json=api.registration(secret))
        assert refused.status_code == 401
        assert refused.json() == {"detail": "invalid or revoked join token"}
    assert client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json() == []
    assert client.delete(f"/api/runs/{run_id}/tokens/999", headers=owner_headers).status_code == 404


def test_archived_runs_take_no_peers_and_no_tokens(api, client, owner_headers, run_id):
    token = api.issue_token(owner_headers, run_id)["token"]
    client.post(f"/api/runs/{run_id}/archive", headers=owner_headers)
    refused = client.post("/api/peers/register", json=api.registration(token))
    assert refused.status_code == 409 and "archived" in refused.json()["detail"]
    assert client.post(f"/api/runs/{run_id}/tokens", headers=owner_headers).status_code == 409


def test_a_peer_of_another_data_plane_version_is_refused_and_its_token_still_works(
    api, client, owner_headers, run_id
):
    token = api.issue_token(owner_headers, run_id)["token"]
    older = api.registration(token)
    del older["data_plane_version"]  # a peer from before the version was sent
    for body in (older, api.registration(token, data_plane_version=DATA_PLANE_VERSION + 1)):
        refused = client.post("/api/peers/register", json=body)
        assert refused.status_code == 409
        detail = refused.json()["detail"]
        assert f"this swarm {DATA_PLANE_VERSION}" in detail and "pip install" in detail
    assert client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json() == []
    assert client.post("/api/peers/register", json=api.registration(token)).status_code == 201


def test_bad_registrations_are_422(api, client, owner_headers, run_id):
    token = api.issue_token(owner_headers, run_id)["token"]
    for bad in (
        {"announce": "no such host!"},
        {"listen_port": 0},
        {"device": "tpu"},
        {"throughput": -1},
        {"requested_stage": 2},
    ):
        response = client.post("/api/peers/register", json=api.registration(token, **bad))
        assert response.status_code == 422, bad
    assert client.get(f"/api/runs/{run_id}/peers", headers=owner_headers).json() == []


def test_owners_and_admins_kick_and_ban_peers(
    api, client, admin_headers, owner_headers, run_id, connect_peer
):
    # One token per participant: a ban holds for the token that minted the banned peer.
    flaky_token = api.issue_token(owner_headers, run_id)["token"]
    evil_token = api.issue_token(owner_headers, run_id)["token"]
    first = connect_peer(flaky_token, name="flaky")
    second = connect_peer(evil_token, name="evil")

    api.create_account("stranger", "another long passphrase", "owner")
    stranger = api.bearer("stranger", "another long passphrase")
    # Someone else's run's peer is reported missing, as the run itself would be.
    assert client.post(f"/api/peers/{first.peer_id}/kick", headers=stranger).status_code == 404
    kicked = client.post(
        f"/api/peers/{first.peer_id}/kick", json={"reason": "too slow"}, headers=owner_headers
    )
    assert kicked.status_code == 200 and kicked.json()["state"] == "kicked"
    # The peer hears it on its control channel, which the coordinator then closes.
    assert first.expect(Kicked) == Kicked(reason="too slow")
    closed = first.expect_close(skip=())
    assert (closed.code, closed.reason) == (1008, "removed: too slow")
    assert client.post(f"/api/peers/{first.peer_id}/kick", headers=admin_headers).status_code == 409

    banned = client.post(f"/api/peers/{second.peer_id}/ban", headers=admin_headers)
    assert banned.json()["state"] == "banned" and banned.json()["left_at"] is not None
    assert second.expect(Kicked) == Kicked(reason="banned by an admin")
    closed = second.expect_close(skip=())
    assert (closed.code, closed.reason) == (1008, "removed: banned by an admin")
    assert client.post(f"/api/peers/{second.peer_id}/ban", headers=admin_headers).status_code == 409
    assert client.post("/api/peers/9999/ban", headers=admin_headers).status_code == 404
    assert "swarmhub_peers_connected 0.0" in client.get("/metrics").text

    # A banned identity may not rejoin the run under any name; a name is no identity, and a kicked
    # peer may rejoin.
    refused = client.post("/api/peers/register", json=api.registration(evil_token, name="innocent"))
    assert refused.status_code == 403 and "banned" in refused.json()["detail"]
    assert (
        client.post("/api/peers/register", json=api.registration(flaky_token, name="evil")).status_code == 201
    )

    everyone = client.get("/api/admin/peers", headers=admin_headers).json()
    assert [(p["name"], p["state"]) for p in everyone] == [
        ("evil", "joining"),
        ("evil", "banned"),
        ("flaky", "kicked"),
    ]
    assert all("last_heartbeat" in p for p in everyone)
    assert client.get("/api/admin/peers", headers=owner_headers).status_code == 403
    kinds = [e["kind"] for e in client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()]
    assert "peer_kicked" in kinds and "peer_banned" in kinds


def test_join_tokens_never_look_like_a_command_line_option(api, owner_headers) -> None:
    run_id = api.client.post("/api/runs", json={"name": "tokens"}, headers=owner_headers).json()["id"]
    for _ in range(50):
        token = api.client.post(f"/api/runs/{run_id}/tokens", json={}, headers=owner_headers).json()["token"]
        assert token.startswith("swh_")


def test_one_join_token_registers_at_most_its_peers(api, client, owner_headers, run_id):
    issued = client.post(
        f"/api/runs/{run_id}/tokens", json={"label": "one friend", "max_peers": 2}, headers=owner_headers
    ).json()
    assert issued["max_peers"] == 2
    for _ in range(2):
        assert client.post("/api/peers/register", json=api.registration(issued["token"])).status_code == 201
    refused = client.post("/api/peers/register", json=api.registration(issued["token"]))
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        "this join token has registered its 2 peers; ask the run's owner for another"
    )
    default = client.post(f"/api/runs/{run_id}/tokens", json={}, headers=owner_headers).json()
    assert default["max_peers"] == 32
    too_many = client.post(f"/api/runs/{run_id}/tokens", json={"max_peers": 10**6}, headers=owner_headers)
    assert too_many.status_code == 422
