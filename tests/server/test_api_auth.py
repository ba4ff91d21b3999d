"""Logins, cookies with CSRF, bearer tokens, admin-only routes and owner isolation."""

from __future__ import annotations


def test_login_sets_cookies_and_me_works_with_them(api, app, client):
    api.create_account(*api.admin, "admin")
    response = client.post("/api/auth/login", json={"username": api.admin[0], "password": api.admin[1]})
    assert response.status_code == 200
    body = response.json()
    assert body["user"]["username"] == api.admin[0] and body["user"]["role"] == "admin"
    cookies = response.headers.get_list("set-cookie")
    session_cookie = next(c for c in cookies if c.startswith("swarmhub_session="))
    csrf_cookie = next(c for c in cookies if c.startswith("swarmhub_csrf="))
    assert "HttpOnly" in session_cookie and "samesite=lax" in session_cookie.lower()
    assert "HttpOnly" not in csrf_cookie
    assert client.cookies["swarmhub_csrf"] == body["csrf_token"]
    assert client.get("/api/auth/me").json()["username"] == api.admin[0]


def test_wrong_password_and_unknown_user_are_401_alike(api, app, client):
    api.create_account(*api.admin, "admin")
    wrong = client.post("/api/auth/login", json={"username": api.admin[0], "password": "nope"})
    unknown = client.post("/api/auth/login", json={"username": "nobody", "password": "nope"})
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json() == {"detail": "invalid username or password"}
    assert "swarmhub_session" not in client.cookies


def test_disabled_user_cannot_log_in(api, app, client):
    from server.models import User

    api.create_account("carol", "carol password", "owner")
    with app.state.session_factory() as session:
        session.query(User).filter_by(username="carol").update({"disabled": True})
        session.commit()
    response = client.post("/api/auth/login", json={"username": "carol", "password": "carol password"})
    assert response.status_code == 401


def test_cookie_writes_need_the_csrf_header(api, app, client):
    api.create_account(*api.admin, "admin")
    csrf = client.post("/api/auth/login", json={"username": api.admin[0], "password": api.admin[1]}).json()[
        "csrf_token"
    ]
    missing = client.post("/api/runs", json={"name": "r"})
    assert missing.status_code == 403 and "CSRF" in missing.json()["detail"]
    wrong = client.post("/api/runs", json={"name": "r"}, headers={"X-CSRF-Token": "forged"})
    assert wrong.status_code == 403
    assert client.get("/api/runs").json() == []  # nothing was created
    ok = client.post("/api/runs", json={"name": "r"}, headers={"X-CSRF-Token": csrf})
    assert ok.status_code == 201


def test_bearer_token_needs_no_csrf(client, admin_headers):
    assert client.post("/api/runs", json={"name": "r"}, headers=admin_headers).status_code == 201


def test_requests_without_credentials_are_401(client):
    for method, path in [("get", "/api/auth/me"), ("get", "/api/runs"), ("post", "/api/runs")]:
        response = client.request(method, path, json={"name": "x"} if method == "post" else None)
        assert response.status_code == 401, path
        assert "detail" in response.json()
    assert client.get("/api/runs", headers={"Authorization": "Bearer not-a-session"}).status_code == 401


def test_logout_ends_the_session(client, admin_headers):
    assert client.post("/api/auth/logout", headers=admin_headers).status_code == 204
    assert client.get("/api/auth/me", headers=admin_headers).status_code == 401


def test_only_admins_create_users_and_duplicates_conflict(api, client, admin_headers, owner_headers):
    body = {"username": "bob", "password": "bob password", "role": "owner"}
    assert client.post("/api/users", json=body, headers=owner_headers).status_code == 403
    created = client.post("/api/users", json=body, headers=admin_headers)
    assert created.status_code == 201 and created.json()["role"] == "owner"
    assert "password" not in created.text
    assert client.post("/api/users", json=body, headers=admin_headers).status_code == 409
    short = client.post(
        "/api/users", json=body | {"username": "eve", "password": "short"}, headers=admin_headers
    )
    assert short.status_code == 422
    assert api.bearer("bob", "bob password")


def test_owners_see_only_their_runs_and_others_are_404(
    api, app, client, admin_headers, owner_headers, run_id
):
    api.create_account("mallory", "mallory password", "owner")
    mallory = api.bearer("mallory", "mallory password")
    assert client.get("/api/runs", headers=mallory).json() == []
    for path in [f"/api/runs/{run_id}", f"/api/runs/{run_id}/peers", f"/api/runs/{run_id}/tokens"]:
        assert client.get(path, headers=mallory).status_code == 404, path
    assert client.post(f"/api/runs/{run_id}/pause", headers=mallory).status_code == 404
    assert client.get(f"/api/runs/{run_id + 1000}", headers=mallory).json() == {
        "detail": f"run {run_id + 1000} not found"
    }
    # Admins see everyone's runs.
    assert [r["id"] for r in client.get("/api/runs", headers=admin_headers).json()] == [run_id]
    assert client.get(f"/api/runs/{run_id}", headers=admin_headers).status_code == 200


def test_cookies_are_secure_when_configured(settings):
    from fastapi.testclient import TestClient

    from server.app import create_app

    app = create_app(settings.model_copy(update={"cookie_secure": True}))
    with TestClient(app) as client:
        from server.services.accounts import create_user

        with app.state.session_factory() as session:
            create_user(session, username="sec", password="secure password", role="owner")
            session.commit()
        response = client.post("/api/auth/login", json={"username": "sec", "password": "secure password"})
        cookies = response.headers.get_list("set-cookie")
        assert len(cookies) == 2 and all("Secure" in cookie for cookie in cookies)
