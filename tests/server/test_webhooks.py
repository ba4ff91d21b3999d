"""Run webhooks against a real coordinator and a real HTTP receiver on 127.0.0.1: signed deliveries of
events the coordinator records, retries with backoff, resumption after a restart, and who may do what."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import torch
from fastapi.testclient import TestClient

from peer.model import state_to_bytes
from server.app import create_app
from server.checkpoints.service import record_requests
from server.db import make_engine, make_session_factory
from server.models import Run
from server.services.accounts import create_user
from server.services.events import record_event
from swarmhub.webhook_signing import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from swarmhub.wire import CheckpointRequest
from tests.server.webhook_receiver import WebhookReceiver


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver()
    yield server
    server.close()


def add_webhook(client, headers, run_id: int, url: str, **body) -> dict:
    response = client.post(f"/api/runs/{run_id}/webhooks", json={"url": url, **body}, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


def deliveries(client, headers, run_id: int) -> list[dict]:
    response = client.get(f"/api/runs/{run_id}/webhooks/deliveries", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def complete_checkpoint(api, app, client, owner_headers, run_id: int, step: int = 0) -> None:
    """A peer of the run uploads every stage of `step`: the coordinator records a 'checkpoint' event."""
    token = api.issue_token(owner_headers, run_id)["token"]
    registered = client.post("/api/peers/register", json=api.registration(token)).json()
    with app.state.session_factory() as session:
        for stage in range(2):
            record_requests(
                session, run_id, [registered["peer_id"]], CheckpointRequest(step=step, stage=stage)
            )
        session.commit()
    peer = {"X-Peer-Id": str(registered["peer_id"]), "X-Peer-Credential": registered["credential"]}
    for stage in range(2):
        blob = state_to_bytes({"model.weight": torch.full((2, 2), float(stage))}, {})
        response = client.put(
            f"/api/runs/{run_id}/checkpoints/{step}/stages/{stage}",
            content=blob,
            headers={**peer, "Content-Type": "application/octet-stream"},
        )
        assert response.status_code == 200, response.text


def test_a_receiver_gets_a_signed_delivery_of_a_checkpoint_event(
    api, app, client, owner_headers, run_id, receiver, eventually
):
    hook = add_webhook(client, owner_headers, run_id, receiver.url)
    assert hook["kinds"] == ["run_stalled", "run_recovered", "run_finished", "checkpoint"]
    assert hook["enabled"] is True and len(hook["secret"]) >= 32

    complete_checkpoint(api, app, client, owner_headers, run_id)

    (request,) = eventually(receiver.requests, "the receiver got the checkpoint event")
    assert request.path == "/hooks/swarmhub"
    assert request.headers["Content-Type"] == "application/json"
    timestamp, sig = request.headers[TIMESTAMP_HEADER], request.headers[SIGNATURE_HEADER]
    assert verify(hook["secret"], request.body, timestamp, sig)
    assert not verify("another secret", request.body, timestamp, sig)
    body = json.loads(request.body)
    assert body["kind"] == request.headers[EVENT_HEADER] == "checkpoint"
    assert (body["run_id"], body["run_name"]) == (run_id, "first")
    assert body["data"]["step"] == 0 and body["message"].startswith("checkpoint of step 0 complete")
    assert str(body["delivery_id"]) == request.headers[DELIVERY_HEADER]
    event = next(
        e
        for e in client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()
        if e["kind"] == "checkpoint"
    )
    assert body["event_id"] == event["id"]

    (logged,) = eventually(
        lambda: [d for d in deliveries(client, owner_headers, run_id) if d["state"] == "delivered"],
        "the delivery log says delivered",
    )
    assert (logged["id"], logged["attempts"], logged["status_code"], logged["error"]) == (
        body["delivery_id"],
        1,
        200,
        "",
    )
    assert (logged["event_kind"], logged["webhook_id"]) == ("checkpoint", hook["id"])
    assert logged["delivered_at"] is not None and logged["next_attempt_at"] is None


@pytest.mark.server_settings(webhook_backoff_base_s=0.05, webhook_backoff_cap_s=0.2)
def test_a_failed_delivery_is_retried_until_the_receiver_accepts_it(
    api, app, client, owner_headers, run_id, eventually
):
    receiver = WebhookReceiver(statuses=[500])
    try:
        hook = add_webhook(client, owner_headers, run_id, receiver.url, kinds=["run_finished"])
        with app.state.session_factory() as session:
            record_event(session, run_id=run_id, kind="run_finished", message="reached max_steps=10")
            session.commit()

        (logged,) = eventually(
            lambda: [d for d in deliveries(client, owner_headers, run_id) if d["state"] == "delivered"],
            "the delivery succeeded on its second attempt",
        )
        assert (logged["attempts"], logged["status_code"], logged["error"]) == (2, 200, "")
        first, second = receiver.requests()
        assert first.body == second.body  # the same delivery, sent again
        assert first.headers[DELIVERY_HEADER] == second.headers[DELIVERY_HEADER] == str(logged["id"])
        for request in (first, second):
            sig = request.headers[SIGNATURE_HEADER]
            assert verify(hook["secret"], request.body, request.headers[TIMESTAMP_HEADER], sig)
    finally:
        receiver.close()


@pytest.mark.server_settings(webhook_backoff_base_s=0.01, webhook_backoff_cap_s=0.02, webhook_max_attempts=3)
def test_a_delivery_is_given_up_after_the_most_attempts(api, app, client, owner_headers, run_id, eventually):
    receiver = WebhookReceiver(statuses=[503] * 10)
    try:
        add_webhook(client, owner_headers, run_id, receiver.url)
        with app.state.session_factory() as session:
            record_event(session, run_id=run_id, kind="run_stalled", message="no step for 5 minutes")
            session.commit()
        (logged,) = eventually(
            lambda: [d for d in deliveries(client, owner_headers, run_id) if d["state"] == "failed"],
            "the delivery was given up",
        )
        assert (logged["attempts"], logged["status_code"]) == (3, 503)
        assert logged["error"] == "HTTP 503 Service Unavailable" and logged["next_attempt_at"] is None
        assert len(receiver.requests()) == 3
    finally:
        receiver.close()


def test_an_unreachable_receiver_is_logged_and_retried_later(
    api, app, client, owner_headers, run_id, eventually
):
    # Nothing listens there any more: connecting fails.
    gone = WebhookReceiver()
    url = gone.url
    gone.close()
    add_webhook(client, owner_headers, run_id, url)
    with app.state.session_factory() as session:
        record_event(session, run_id=run_id, kind="run_recovered", message="steps again")
        session.commit()
    (logged,) = eventually(
        lambda: [d for d in deliveries(client, owner_headers, run_id) if d["attempts"] == 1],
        "the first attempt failed",
    )
    assert logged["state"] == "pending" and logged["status_code"] is None
    assert logged["error"].startswith("ConnectError") and logged["next_attempt_at"] is not None


def test_pending_deliveries_are_sent_when_the_coordinator_starts_again(settings, receiver, eventually):
    """The event and what it owes commit together; a coordinator that was down sends it at start."""
    with TestClient(create_app(settings)) as client:
        with client.app.state.session_factory() as session:
            create_user(session, username="alice", password="alice password", role="owner")
            session.commit()
        login = client.post("/api/auth/login", json={"username": "alice", "password": "alice password"})
        client.cookies.clear()
        owner = {"Authorization": f"Bearer {login.json()['token']}"}
        run_id = client.post("/api/runs", json={"name": "first"}, headers=owner).json()["id"]
        hook = add_webhook(client, owner, run_id, receiver.url, kinds=["run_finished"])

    # The coordinator is down; the event is written as the coordinator writes it, then it starts again.
    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine)() as session:
            assert session.get(Run, run_id) is not None
            record_event(session, run_id=run_id, kind="run_finished", message="reached max_steps=3")
            session.commit()
    finally:
        engine.dispose()
    assert receiver.requests() == []

    with TestClient(create_app(settings)) as client:
        (request,) = eventually(receiver.requests, "the pending delivery was sent after the restart")
        assert json.loads(request.body)["message"] == "reached max_steps=3"
        assert verify(
            hook["secret"], request.body, request.headers[TIMESTAMP_HEADER], request.headers[SIGNATURE_HEADER]
        )
        (logged,) = eventually(
            lambda: [d for d in deliveries(client, owner, run_id) if d["state"] == "delivered"],
            "the log says delivered",
        )
        assert logged["attempts"] == 1


def test_a_webhook_is_sent_only_the_kinds_it_asked_for(
    api, app, client, owner_headers, run_id, receiver, eventually
):
    add_webhook(client, owner_headers, run_id, receiver.url, kinds=["run_finished"])
    with app.state.session_factory() as session:
        record_event(session, run_id=run_id, kind="checkpoint", message="checkpoint of step 2 complete")
        record_event(session, run_id=run_id, kind="peer_joined", message="p1 joined")
        record_event(session, run_id=run_id, kind="run_finished", message="reached max_steps=2")
        session.commit()
    (request,) = eventually(receiver.requests, "the run_finished event arrived")
    assert json.loads(request.body)["kind"] == "run_finished"
    assert [d["event_kind"] for d in deliveries(client, owner_headers, run_id)] == ["run_finished"]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://example.com/hook", "URL scheme should be 'http' or 'https'"),
        ("javascript:alert(1)", "URL scheme should be 'http' or 'https'"),
        ("not a url", "Input should be a valid URL"),
        ("http://", "Input should be a valid URL"),
        ("https://example.com/" + "a" * 2000, "URL should have at most 2000 characters"),
    ],
)
def test_bad_urls_are_422_with_the_reason(client, owner_headers, run_id, url, problem):
    response = client.post(f"/api/runs/{run_id}/webhooks", json={"url": url}, headers=owner_headers)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "url"] and error["msg"].startswith(problem)
    assert client.get(f"/api/runs/{run_id}/webhooks", headers=owner_headers).json() == []


def test_unknown_kinds_are_422(client, owner_headers, run_id):
    for kinds in (["peer_joined"], []):
        response = client.post(
            f"/api/runs/{run_id}/webhooks",
            json={"url": "https://example.com/", "kinds": kinds},
            headers=owner_headers,
        )
        assert response.status_code == 422, response.text


def test_only_the_owner_and_admins_manage_a_runs_webhooks(
    api, app, client, owner_headers, admin_headers, run_id, receiver
):
    hook = add_webhook(client, owner_headers, run_id, receiver.url)
    api.create_account("mallory", "mallory password", "owner")
    mallory = api.bearer("mallory", "mallory password")
    base = f"/api/runs/{run_id}/webhooks"
    assert client.post(base, json={"url": "https://evil.example/"}, headers=mallory).status_code == 404
    assert client.get(base, headers=mallory).status_code == 404
    assert client.get(f"{base}/deliveries", headers=mallory).status_code == 404
    assert client.patch(f"{base}/{hook['id']}", json={"enabled": False}, headers=mallory).status_code == 404
    assert client.delete(f"{base}/{hook['id']}", headers=mallory).status_code == 404
    assert client.get(base).status_code == 401

    # The secret was shown once; listings never carry it.
    listed = client.get(base, headers=admin_headers).json()
    assert [h["id"] for h in listed] == [hook["id"]] and "secret" not in listed[0]
    assert client.delete(f"{base}/{hook['id']}", headers=admin_headers).status_code == 204
    assert client.get(base, headers=owner_headers).json() == []
    kinds = [e["kind"] for e in client.get(f"/api/runs/{run_id}/events", headers=owner_headers).json()]
    assert kinds[-2:] == ["webhook_added", "webhook_removed"]


def test_a_browser_session_needs_the_csrf_header(api, client, run_id, receiver):
    response = client.post("/api/auth/login", json={"username": "alice", "password": "alice password"})
    assert response.status_code == 200
    base = f"/api/runs/{run_id}/webhooks"
    assert client.post(base, json={"url": receiver.url}).status_code == 403
    csrf = response.json()["csrf_token"]
    assert client.post(base, json={"url": receiver.url}, headers={"X-CSRF-Token": csrf}).status_code == 201


def test_a_disabled_webhook_is_sent_nothing_and_its_pending_deliveries_are_cancelled(
    api, app, client, owner_headers, run_id, eventually
):
    gone = WebhookReceiver()
    url = gone.url
    gone.close()
    hook = add_webhook(client, owner_headers, run_id, url)
    with app.state.session_factory() as session:
        record_event(session, run_id=run_id, kind="run_stalled", message="no step for 5 minutes")
        session.commit()
    eventually(
        lambda: deliveries(client, owner_headers, run_id)[0]["attempts"] == 1, "a first failed attempt"
    )

    response = client.patch(
        f"/api/runs/{run_id}/webhooks/{hook['id']}", json={"enabled": False}, headers=owner_headers
    )
    assert response.status_code == 200 and response.json()["enabled"] is False
    (logged,) = deliveries(client, owner_headers, run_id)
    assert (logged["state"], logged["next_attempt_at"]) == ("cancelled", None)
    with app.state.session_factory() as session:
        record_event(session, run_id=run_id, kind="run_recovered", message="steps again")
        session.commit()
    assert len(deliveries(client, owner_headers, run_id)) == 1


def test_a_run_has_at_most_ten_webhooks(client, owner_headers, run_id):
    for n in range(10):
        add_webhook(client, owner_headers, run_id, f"https://example.com/{n}")
    response = client.post(
        f"/api/runs/{run_id}/webhooks", json={"url": "https://example.com/11"}, headers=owner_headers
    )
    assert response.status_code == 409 and "delete one first" in response.json()["detail"]
