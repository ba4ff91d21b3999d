"""The coordinator's front door, attacked over plain HTTP and websockets: one test per attack.

Each test asserts the attacker's clear refusal and that the coordinator still serves honest users.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

import httpx
import pytest
import sqlalchemy as sa
from starlette.websockets import WebSocketDisconnect

from peer.checkpoint_client import CheckpointError, verify_sha256
from server.app import create_app
from server.housekeeping import purge_once
from server.models import AuthSession, Checkpoint, JoinToken, LoginThrottle, Run, User, utcnow
from server.security import MIN_PASSWORD_LENGTH
from server.services import login_throttle
from server.services.login_throttle import FREE_FAILURES

ALICE = ("alice", "alice password")


def _login(client, username: str, password: str, **kwargs) -> httpx.Response:
    return client.post("/api/auth/login", json={"username": username, "password": password}, **kwargs)


def _bearer(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def _unlock_all(app) -> None:
    """Move every lock into the past, as the wait would: the test checks the rule, not the clock."""
    with app.state.session_factory() as session:
        session.execute(sa.update(LoginThrottle).values(locked_until=utcnow() - timedelta(seconds=1)))
        session.commit()


# ---- bodies ---------------------------------------------------------------------------------


def test_an_oversized_body_is_refused_before_it_is_read(client, owner_headers, settings):
    huge = b'{"username": "alice", "password": "' + b"x" * (2 * settings.max_body_bytes) + b'"}'
    declared = client.post("/api/auth/login", content=huge, headers={"Content-Type": "application/json"})
    assert declared.status_code == 413
    assert f"limit of {settings.max_body_bytes} bytes" in declared.json()["detail"]

    def chunks():  # no Content-Length: the limit holds on what actually arrives
        for _ in range(3):
            yield b"x" * settings.max_body_bytes

    streamed = client.post(
        "/api/runs", content=chunks(), headers={**owner_headers, "Content-Type": "application/json"}
    )
    assert streamed.status_code == 413
    assert client.get("/api/auth/me", headers=owner_headers).status_code == 200


def test_a_422_never_echoes_a_large_input(client):
    response = _login(client, "a" * 500_000, "password")
    assert response.status_code == 422
    assert len(response.content) < 2000
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "username"] and error["input"].startswith("aaaa")


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_non_finite_number_in_a_json_body_is_a_422(client, owner_headers, run_id, value):
    login = client.post(
        "/api/auth/login",
        content=f'{{"username": {value}, "password": "x"}}',
        headers={"Content-Type": "application/json"},
    )
    assert login.status_code == 422, login.text
    assert login.json()["detail"][0]["type"] == "json_invalid"
    run = client.post(
        "/api/runs",
        content=f'{{"name": "n", "lr": {value}}}',
        headers={**owner_headers, "Content-Type": "application/json"},
    )
    assert run.status_code == 422 and run.json()["detail"][0]["type"] == "json_invalid", run.text
    assert client.get(f"/api/runs/{run_id}", headers=owner_headers).status_code == 200


# ---- logins ---------------------------------------------------------------------------------


def _from(app, address: str):
    """A client at another address (the app's lifespan already runs under the `client` fixture)."""
    from fastapi.testclient import TestClient

    return TestClient(app, client=(address, 50000))


def test_wrong_logins_for_one_account_back_off(app, client, owner_headers):
    for _ in range(FREE_FAILURES["pair"]):
        assert _login(client, "alice", "not her password").status_code == 401
    locked = _login(client, *ALICE)
    assert locked.status_code == 429
    assert int(locked.headers["Retry-After"]) >= 1 and "too many failed logins" in locked.json()["detail"]
    # The guesser's address is locked out of alice's account, alice elsewhere is not, and her live
    # session keeps working.
    _bearer(_login(_from(app, "198.51.100.20"), *ALICE))
    assert client.get("/api/auth/me", headers=owner_headers).status_code == 200
    _unlock_all(app)
    assert _login(client, "alice", "still wrong").status_code == 401
    relocked = _login(client, *ALICE)
    assert relocked.status_code == 429
    assert int(relocked.headers["Retry-After"]) > int(locked.headers["Retry-After"])  # it doubles
    _unlock_all(app)
    _bearer(_login(client, *ALICE))


def test_wrong_logins_for_one_account_from_many_addresses_back_off(app, client, owner_headers):
    for n in range(FREE_FAILURES["user"]):
        address = f"203.0.113.{n % 250}" if n < 250 else f"198.51.100.{n % 250}"
        assert _login(_from(app, address), "alice", f"guess {n} at it").status_code == 401
    assert _login(_from(app, "192.0.2.99"), *ALICE).status_code == 429


def test_wrong_logins_from_one_address_back_off_across_accounts(app, client, owner_headers):
    for n in range(FREE_FAILURES["addr"]):
        assert _login(client, f"guess-{n}", "password123456").status_code == 401
    assert _login(client, *ALICE).status_code == 429
    with app.state.session_factory() as session:
        assert session.get_one(LoginThrottle, "addr:testclient").failures == FREE_FAILURES["addr"]


def test_the_login_backoff_survives_a_restart(settings, owner_headers, app, client, monkeypatch):
    # The throttle's clock stands still: the first lock lasts 1 s, and starting a second app on a
    # busy machine can take longer than that.
    frozen = utcnow()
    monkeypatch.setattr(login_throttle, "utcnow", lambda: frozen)
    for _ in range(FREE_FAILURES["pair"]):
        assert _login(client, "alice", "wrong wrong wrong").status_code == 401
    from fastapi.testclient import TestClient

    with TestClient(create_app(settings)) as restarted:
        assert _login(restarted, *ALICE).status_code == 429


def test_a_short_password_is_refused_with_a_clear_message(client, admin_headers, owner_headers):
    response = client.post(
        "/api/users", json={"username": "carol", "password": "short pw"}, headers=admin_headers
    )
    assert response.status_code == 422
    assert f"at least {MIN_PASSWORD_LENGTH} characters" in response.text
    same = client.post(
        "/api/users",
        json={"username": "carolcarolcarol", "password": "CarolCarolCarol"},
        headers=admin_headers,
    )
    assert same.status_code == 422 and "must not be the username" in same.text
    change = client.post(
        "/api/auth/password",
        json={"current_password": ALICE[1], "new_password": "tiny"},
        headers=owner_headers,
    )
    assert change.status_code == 422 and f"at least {MIN_PASSWORD_LENGTH} characters" in change.text
    assert _login(client, *ALICE).status_code == 200


def test_a_stolen_session_ends_when_the_owner_changes_the_password(client, owner_headers):
    stolen = _bearer(_login(client, *ALICE))
    client.cookies.clear()
    wrong = client.post(
        "/api/auth/password",
        json={"current_password": "a guess at it", "new_password": "a brand new passphrase"},
        headers=stolen,
    )
    assert wrong.status_code == 422 and "current password is wrong" in wrong.text
    changed = client.post(
        "/api/auth/password",
        json={"current_password": ALICE[1], "new_password": "a brand new passphrase"},
        headers=owner_headers,
    )
    assert changed.status_code == 200 and changed.json() == {"ended": 1}
    assert client.get("/api/auth/me", headers=stolen).status_code == 401
    assert client.get("/api/auth/me", headers=owner_headers).status_code == 200
    assert _login(client, *ALICE).status_code == 401
    _bearer(_login(client, "alice", "a brand new passphrase"))


def test_ending_other_sessions_keeps_this_one(client, owner_headers):
    others = [_bearer(_login(client, *ALICE)) for _ in range(2)]
    client.cookies.clear()
    ended = client.post("/api/auth/sessions/end-others", headers=owner_headers)
    assert ended.status_code == 200 and ended.json() == {"ended": 2}
    assert all(client.get("/api/auth/me", headers=h).status_code == 401 for h in others)
    assert client.get("/api/auth/me", headers=owner_headers).status_code == 200


def test_a_disabled_user_is_out_at_once_feed_included(
    app, client, admin_headers, owner_headers, run_id, monkeypatch
):
    monkeypatch.setattr("server.routes.feed.SESSION_CHECK_S", 0.05)
    alice_id = client.get("/api/auth/me", headers=owner_headers).json()["id"]
    token = owner_headers["Authorization"].removeprefix("Bearer ")
    with client.websocket_connect(f"/ws/runs/{run_id}/feed") as feed:
        feed.send_json({"type": "auth", "token": token})
        assert feed.receive_json()["type"] == "snapshot"
        # Only admins disable users.
        assert (
            client.patch(f"/api/users/{alice_id}", json={"disabled": True}, headers=owner_headers).status_code
            == 403
        )
        disabled = client.patch(f"/api/users/{alice_id}", json={"disabled": True}, headers=admin_headers)
        assert disabled.status_code == 200 and disabled.json()["disabled"] is True
        with pytest.raises(WebSocketDisconnect) as closed:
            while True:
                feed.receive_json()
    assert closed.value.code == 1008 and "session ended" in closed.value.reason
    assert client.get("/api/auth/me", headers=owner_headers).status_code == 401
    assert _login(client, *ALICE).status_code == 401
    with app.state.session_factory() as session:
        assert session.scalar(sa.select(sa.func.count()).where(AuthSession.user_id == alice_id)) == 0
    assert (
        client.patch(f"/api/users/{alice_id}", json={"disabled": False}, headers=admin_headers).status_code
        == 200
    )
    _bearer(_login(client, *ALICE))


def test_an_idle_session_ends_and_is_purged(app, client, settings, owner_headers):
    with app.state.session_factory() as session:
        session.execute(
            sa.update(AuthSession).values(
                last_seen_at=utcnow() - timedelta(minutes=settings.session_idle_minutes + 1)
            )
        )
        session.commit()
    assert client.get("/api/auth/me", headers=owner_headers).status_code == 401
    assert purge_once(app.state.session_factory, settings)[0] == 1
    with app.state.session_factory() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(AuthSession)) == 0
        assert session.scalar(sa.select(User.username)) == "alice"


# ---- the dashboard's feed, cookies, headers --------------------------------------------------


def test_a_session_token_in_the_feed_url_is_refused(client, owner_headers, run_id):
    token = owner_headers["Authorization"].removeprefix("Bearer ")
    with (
        client.websocket_connect(f"/ws/runs/{run_id}/feed?token={token}") as feed,
        pytest.raises(WebSocketDisconnect) as refused,
    ):
        feed.send_json({"type": "subscribe"})
        feed.receive_json()
    assert refused.value.code == 1008 and refused.value.reason == "not logged in"


def test_the_feed_closes_at_logout(client, run_id, owner_headers, monkeypatch):
    monkeypatch.setattr("server.routes.feed.SESSION_CHECK_S", 0.05)
    login = _login(client, *ALICE)  # the browser way: the cookie, sent same-origin
    with client.websocket_connect(f"/ws/runs/{run_id}/feed") as feed:
        assert feed.receive_json()["type"] == "snapshot"
        csrf = {"X-CSRF-Token": login.json()["csrf_token"]}
        assert client.post("/api/auth/logout", headers=csrf).status_code == 204
        with pytest.raises(WebSocketDisconnect) as closed:
            while True:
                feed.receive_json()
    assert closed.value.code == 1008


@pytest.mark.server_settings(public_url="https://swarm.example")
def test_cookies_are_secure_behind_https(client, owner_headers):
    response = _login(client, *ALICE)
    cookies = response.headers.get_list("set-cookie")
    assert len(cookies) == 2 and all("secure" in c.lower() for c in cookies)


def test_cookies_are_secure_when_the_request_came_over_https(app, owner_headers):
    from fastapi.testclient import TestClient

    with TestClient(app, base_url="https://testserver") as https:
        cookies = _login(https, *ALICE).headers.get_list("set-cookie")
    assert all("secure" in c.lower() for c in cookies)


@pytest.mark.parametrize("path", ["/healthz", "/api/auth/me", "/api/nowhere"])
def test_every_response_carries_the_security_headers(client, path):
    response = client.get(path)
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    policy = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
    assert "unsafe-inline" not in policy


# ---- checkpoints ----------------------------------------------------------------------------


def test_a_peer_refuses_a_checkpoint_whose_sha256_differs():
    body = b"stage bytes as stored"
    good = httpx.Response(
        200, content=body, headers={"X-Checkpoint-SHA256": hashlib.sha256(body).hexdigest()}
    )
    verify_sha256("downloading", good)
    tampered = httpx.Response(200, content=body[:-1] + b"!", headers=good.headers)
    with pytest.raises(CheckpointError, match="damaged or cut short"):
        verify_sha256("downloading", tampered)
    with pytest.raises(CheckpointError, match="no X-Checkpoint-SHA256"):
        verify_sha256("downloading", httpx.Response(200, content=body))


def _checkpoint_peer(api, app, client, owner_headers, run_id, steps: range) -> dict[str, str]:
    """A registered peer of the run that the coordinator asked for both stages of `steps`."""
    from server.checkpoints.service import record_requests
    from swarmhub.wire import CheckpointRequest

    token = api.issue_token(owner_headers, run_id)["token"]
    registered = client.post("/api/peers/register", json=api.registration(token)).json()
    with app.state.session_factory() as session:
        for step in steps:
            for stage in range(2):
                record_requests(
                    session, run_id, [registered["peer_id"]], CheckpointRequest(step=step, stage=stage)
                )
        session.get_one(Run, run_id).current_step = max(steps)
        session.commit()
    return {"X-Peer-Id": str(registered["peer_id"]), "X-Peer-Credential": registered["credential"]}


def _stage_file(seed: float) -> bytes:
    import torch

    from peer.model import state_to_bytes

    return state_to_bytes({"model.weight": torch.full((64,), seed)}, {})


def _upload(client, run_id: int, step: int, stage: int, peer: dict[str, str], body) -> httpx.Response:
    return client.put(
        f"/api/runs/{run_id}/checkpoints/{step}/stages/{stage}",
        content=body,
        headers={**peer, "Content-Type": "application/octet-stream"},
    )


def test_a_commit_that_fails_mid_upload_leaves_no_file_behind(
    api, app, client, owner_headers, run_id, settings
):
    peer = _checkpoint_peer(api, app, client, owner_headers, run_id, range(1, 3))
    first = _stage_file(1.0)
    assert _upload(client, run_id, 2, 0, peer, first).status_code == 200

    def revoked_mid_upload():
        body = _stage_file(2.0)
        yield body[:100]
        # While the body streams in, the owner revokes the token the peer joined with.
        with app.state.session_factory() as session:
            session.execute(
                sa.update(JoinToken).where(JoinToken.run_id == run_id).values(revoked_at=utcnow())
            )
            session.commit()
        yield body[100:]

    refused = _upload(client, run_id, 2, 1, peer, revoked_mid_upload())
    assert refused.status_code == 401, refused.text
    run_dir = settings.checkpoint_dir / f"run-{run_id}"
    assert not (run_dir / "step-2" / "stage-1.safetensors").exists()
    assert list((run_dir / ".incoming").iterdir()) == []
    (step,) = client.get(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).json()
    assert [s["stage"] for s in step["stages"]] == [0] and step["stages"][0]["bytes"] == len(first)
    assert (run_dir / "step-2" / "stage-0.safetensors").read_bytes() == first


@pytest.mark.server_settings(checkpoint_quota_bytes=500)
def test_a_run_cannot_fill_the_disk_past_its_checkpoint_quota(
    api, app, client, owner_headers, run_id, settings
):
    peer = _checkpoint_peer(api, app, client, owner_headers, run_id, range(1, 4))
    body = _stage_file(1.0)
    assert 250 < len(body) <= 500
    assert _upload(client, run_id, 1, 0, peer, body).status_code == 200
    over = _upload(client, run_id, 1, 1, peer, body)
    assert over.status_code == 413 and "quota" in over.json()["detail"]
    assert [
        s["step"] for s in client.get(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).json()
    ] == [1]
    assert list((settings.checkpoint_dir / f"run-{run_id}" / ".incoming").iterdir()) == []


def test_the_coordinator_settles_its_checkpoint_directory_at_start(
    app, client, owner_headers, run_id, settings
):
    from fastapi.testclient import TestClient

    store = app.state.checkpoints
    good = b"complete stage bytes"
    with app.state.session_factory() as session:

        def put(step: int, stage: int, data: bytes, *, on_disk: bool = True) -> None:
            relative = store.relative_path(run_id, step, stage)
            if on_disk:
                store.path(relative).parent.mkdir(parents=True, exist_ok=True)
                store.path(relative).write_bytes(data)
            sha = hashlib.sha256(data).hexdigest()
            session.add(
                Checkpoint(run_id=run_id, step=step, stage=stage, path=relative, bytes=len(data), sha256=sha)
            )

        put(4, 0, good)
        put(4, 1, good)
        put(2, 0, good)  # incomplete and older than the complete step 4: nothing resumes from it
        put(6, 0, b"recorded, then the coordinator died before the rename", on_disk=False)
        put(6, 1, b"a row whose file is gone", on_disk=False)
        session.commit()
    incoming = store.run_dir(run_id) / ".incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    (incoming / "0123abcd.part").write_bytes(b"half an upload")
    finished = b"recorded, then the coordinator died before the rename"
    (incoming / f"step-6-stage-0-{hashlib.sha256(finished).hexdigest()}.ready").write_bytes(finished)
    (incoming / f"step-8-stage-0-{'0' * 64}.ready").write_bytes(b"never recorded")
    stray = store.step_dir(run_id, 10)
    stray.mkdir(parents=True)
    (stray / "stage-0.safetensors").write_bytes(b"no row")

    with TestClient(create_app(settings)) as restarted:
        listed = restarted.get(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).json()
    assert [(s["step"], [st["stage"] for st in s["stages"]]) for s in listed] == [(6, [0]), (4, [0, 1])]
    assert list(incoming.iterdir()) == []
    assert store.path(store.relative_path(run_id, 6, 0)).read_bytes() == finished
    assert not store.step_dir(run_id, 2).exists() and not stray.exists()
