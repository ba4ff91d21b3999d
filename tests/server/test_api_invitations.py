"""Accounts in the admin's hands: invitation and password-reset links (single use, expiring, stored
hashed), disabled accounts, changing one's password, and runs that name their owners."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from server.models import Invitation, utcnow
from server.security import token_hash

BOB = ("bob", "bob's long password")


def _invite(client, admin_headers, **body) -> dict:
    response = client.post("/api/invitations", json=body, headers=admin_headers)
    assert response.status_code == 201, response.text
    return response.json()


def _login(client, username: str, password: str) -> int:
    status = client.post("/api/auth/login", json={"username": username, "password": password}).status_code
    client.cookies.clear()
    return status


def test_an_invitation_makes_one_owner_once(api, app, client, admin_headers):
    issued = _invite(client, admin_headers)
    assert issued["purpose"] == "invite" and issued["role"] == "owner"
    assert issued["created_by_name"] == api.admin[0] and issued["username"] is None
    token = issued["token"]

    info = client.post("/api/invitations/inspect", json={"token": token})
    assert info.status_code == 200 and info.json()["purpose"] == "invite"
    listed = client.get("/api/invitations", headers=admin_headers).json()
    assert [i["id"] for i in listed] == [issued["id"]] and "token" not in listed[0]

    accepted = client.post(
        "/api/invitations/accept", json={"token": token, "username": BOB[0], "password": BOB[1]}
    )
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["username"] == BOB[0] and accepted.json()["role"] == "owner"
    assert _login(client, *BOB) == 200

    again = client.post(
        "/api/invitations/accept", json={"token": token, "username": "bob2", "password": BOB[1]}
    )
    assert again.status_code == 404 and "ask an admin" in again.json()["detail"]
    assert client.post("/api/invitations/inspect", json={"token": token}).status_code == 404
    assert client.get("/api/invitations", headers=admin_headers).json() == []


def test_the_token_is_stored_only_as_its_hash(app, client, admin_headers):
    token = _invite(client, admin_headers)["token"]
    with app.state.session_factory() as session:
        row = session.scalars(sa.select(Invitation)).one()
        assert row.token_hash == token_hash(token)
        assert token not in {str(getattr(row, c.key)) for c in Invitation.__table__.columns}


def test_expired_and_revoked_links_do_not_work(app, client, admin_headers):
    expired = _invite(client, admin_headers)
    with app.state.session_factory() as session:
        session.execute(
            sa.update(Invitation)
            .where(Invitation.id == expired["id"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
        session.commit()
    body = {"username": BOB[0], "password": BOB[1]}
    assert client.post("/api/invitations/accept", json=body | {"token": expired["token"]}).status_code == 404
    assert client.get("/api/invitations", headers=admin_headers).json() == []

    revoked = _invite(client, admin_headers)
    assert client.delete(f"/api/invitations/{revoked['id']}", headers=admin_headers).status_code == 204
    assert client.post("/api/invitations/accept", json=body | {"token": revoked["token"]}).status_code == 404
    assert _login(client, *BOB) == 401


@pytest.mark.server_settings(invitation_hours=0.5)
def test_links_expire_after_the_setting(client, admin_headers):
    issued = _invite(client, admin_headers)
    lifetime = datetime.fromisoformat(issued["expires_at"]) - datetime.fromisoformat(issued["created_at"])
    assert timedelta(minutes=29) < lifetime <= timedelta(minutes=30)


def test_a_refused_acceptance_leaves_the_link_usable(api, client, admin_headers):
    api.create_account("alice", "alice password", "owner")
    token = _invite(client, admin_headers)["token"]
    taken = client.post(
        "/api/invitations/accept", json={"token": token, "username": "alice", "password": BOB[1]}
    )
    assert taken.status_code == 409
    short = client.post(
        "/api/invitations/accept", json={"token": token, "username": BOB[0], "password": "short"}
    )
    assert short.status_code == 422
    nameless = client.post("/api/invitations/accept", json={"token": token, "password": BOB[1]})
    assert nameless.status_code == 422
    ok = client.post("/api/invitations/accept", json={"token": token, "username": BOB[0], "password": BOB[1]})
    assert ok.status_code == 200


def test_only_admins_issue_links(client, owner_headers):
    assert client.post("/api/invitations", json={}, headers=owner_headers).status_code == 403
    assert client.get("/api/invitations", headers=owner_headers).status_code == 403
    assert client.post("/api/invitations", json={}).status_code == 401
    assert client.post("/api/users/1/reset-link", headers=owner_headers).status_code == 403


def test_a_reset_link_sets_a_new_password_and_ends_sessions(api, client, admin_headers, owner_headers):
    alice_id = client.get("/api/auth/me", headers=owner_headers).json()["id"]
    first = client.post(f"/api/users/{alice_id}/reset-link", headers=admin_headers)
    assert first.status_code == 201 and first.json()["username"] == "alice"
    second = client.post(f"/api/users/{alice_id}/reset-link", headers=admin_headers).json()
    # A newer reset link replaces the older one.
    assert [i["id"] for i in client.get("/api/invitations", headers=admin_headers).json()] == [second["id"]]
    new_password = "alice's new password"
    stale = client.post(
        "/api/invitations/accept", json={"token": first.json()["token"], "password": new_password}
    )
    assert stale.status_code == 404

    info = client.post("/api/invitations/inspect", json={"token": second["token"]}).json()
    assert info["purpose"] == "reset" and info["username"] == "alice"
    used = client.post("/api/invitations/accept", json={"token": second["token"], "password": new_password})
    assert used.status_code == 200 and used.json()["username"] == "alice"
    assert client.get("/api/auth/me", headers=owner_headers).status_code == 401
    assert _login(client, "alice", "alice password") == 401
    assert _login(client, "alice", new_password) == 200
    assert client.post(f"/api/users/{2**31 - 1}/reset-link", headers=admin_headers).status_code == 404


def test_a_disabled_user_cannot_log_in_and_their_sessions_end(api, client, admin_headers, owner_headers):
    alice_id = client.get("/api/auth/me", headers=owner_headers).json()["id"]
    disabled = client.patch(f"/api/users/{alice_id}", json={"disabled": True}, headers=admin_headers)
    assert disabled.status_code == 200 and disabled.json()["disabled"] is True
    assert client.get("/api/auth/me", headers=owner_headers).status_code == 401
    assert _login(client, "alice", "alice password") == 401

    enabled = client.patch(f"/api/users/{alice_id}", json={"disabled": False}, headers=admin_headers)
    assert enabled.status_code == 200 and enabled.json()["disabled"] is False
    assert _login(client, "alice", "alice password") == 200


def test_changing_the_password_needs_the_current_one(api, client, owner_headers):
    other = api.bearer("alice", "alice password")
    new_password = "a brand new passphrase"
    wrong = client.post(
        "/api/auth/password",
        json={"current_password": "not it at all", "new_password": new_password},
        headers=owner_headers,
    )
    assert wrong.status_code == 422 and "current password" in wrong.json()["detail"]
    short = client.post(
        "/api/auth/password",
        json={"current_password": "alice password", "new_password": "short"},
        headers=owner_headers,
    )
    assert short.status_code == 422
    changed = client.post(
        "/api/auth/password",
        json={"current_password": "alice password", "new_password": new_password},
        headers=owner_headers,
    )
    assert changed.status_code == 200 and changed.json() == {"ended": 1}
    assert client.get("/api/auth/me", headers=owner_headers).status_code == 200
    assert client.get("/api/auth/me", headers=other).status_code == 401
    assert _login(client, "alice", "alice password") == 401
    assert _login(client, "alice", new_password) == 200


def test_runs_name_their_owner(client, admin_headers, owner_headers, run_id):
    for headers in (owner_headers, admin_headers):
        listed = client.get("/api/runs", headers=headers).json()
        assert [(r["id"], r["owner_name"]) for r in listed] == [(run_id, "alice")]
    assert client.get(f"/api/runs/{run_id}", headers=admin_headers).json()["owner_name"] == "alice"
    paused = client.post(f"/api/runs/{run_id}/pause", headers=owner_headers)
    assert paused.status_code == 200 and paused.json()["owner_name"] == "alice"


def test_housekeeping_deletes_expired_links_only(app, settings, client, admin_headers):
    from server.housekeeping import purge_once

    expired, live = _invite(client, admin_headers), _invite(client, admin_headers)
    with app.state.session_factory() as session:
        session.execute(
            sa.update(Invitation)
            .where(Invitation.id == expired["id"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
        session.commit()
    assert purge_once(app.state.session_factory, settings)[2] == 1
    assert [i["id"] for i in client.get("/api/invitations", headers=admin_headers).json()] == [live["id"]]
    with app.state.session_factory() as session:
        assert session.scalars(sa.select(Invitation.id)).all() == [live["id"]]
