"""The run page's webhooks panel against the real coordinator: an owner adds a webhook, a real
receiver on 127.0.0.1 gets the signed delivery of a checkpoint the coordinator records, the delivery
log shows it, and the webhook is removed."""

from __future__ import annotations

import json

import pytest
import torch
from browser_helpers import OWNER, screenshot, sign_in, wait_until

from peer.model import state_to_bytes
from server.checkpoints.service import record_requests
from server.db import make_engine, make_session_factory
from swarmhub.webhook_signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from swarmhub.wire import DATA_PLANE_VERSION, CheckpointRequest
from tests.server.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.browser

RUN = {"model_preset": "tiny", "num_stages": 1, "target_batch_size": 8, "microbatch_size": 4, "seq_len": 32}


def _checkpoint(coordinator, owner_api, run_id: int) -> None:
    """A peer of the run uploads its one stage at step 0, as the coordinator asked it to."""
    token = owner_api.post(f"/api/runs/{run_id}/tokens", json={}).json()["token"]
    registration = {
        "join_token": token,
        "listen_port": 9,
        "device": "cpu",
        "throughput": 1.0,
        "data_plane_version": DATA_PLANE_VERSION,
    }
    peer = owner_api.post("/api/peers/register", json=registration).json()
    engine = make_engine(coordinator.database_url)
    try:
        with make_session_factory(engine)() as session:
            record_requests(session, run_id, [peer["peer_id"]], CheckpointRequest(step=0, stage=0))
            session.commit()
    finally:
        engine.dispose()
    response = owner_api.put(
        f"/api/runs/{run_id}/checkpoints/0/stages/0",
        content=state_to_bytes({"model.weight": torch.zeros(2, 2)}, {}),
        headers={
            "X-Peer-Id": str(peer["peer_id"]),
            "X-Peer-Credential": peer["credential"],
            "Content-Type": "application/octet-stream",
        },
    )
    assert response.status_code == 200, response.text


def test_an_owner_adds_a_webhook_sees_its_delivery_and_removes_it(page, coordinator, owner_api) -> None:
    run = owner_api.post("/api/runs", json={"name": "webhook run", **RUN}).json()
    receiver = WebhookReceiver()
    try:
        sign_in(page, *OWNER)
        page.goto(f"/#/runs/{run['id']}")
        panel = page.get_by_test_id("webhooks")

        panel.get_by_label("Webhook URL").fill("ftp://example.com/hook")
        panel.get_by_role("button", name="Add webhook").click()
        assert "Only http:// and https://" in panel.get_by_test_id("webhook-error").inner_text()

        panel.get_by_label("Webhook URL").fill(receiver.url)
        panel.get_by_label("send stalled events").uncheck()
        panel.get_by_role("button", name="Add webhook").click()
        secret = panel.get_by_test_id("webhook-secret").locator("code").inner_text()
        panel.get_by_test_id("webhook").wait_for()
        (hook,) = owner_api.get(f"/api/runs/{run['id']}/webhooks").json()
        assert hook["kinds"] == ["run_recovered", "run_finished", "checkpoint"]

        _checkpoint(coordinator, owner_api, run["id"])
        wait_until(receiver.requests, 15, "the webhook delivery", coordinator.log_tail)
        (request,) = receiver.requests()
        assert verify(
            secret, request.body, request.headers[TIMESTAMP_HEADER], request.headers[SIGNATURE_HEADER]
        )
        assert json.loads(request.body)["kind"] == "checkpoint"

        delivered = panel.locator("[data-testid=webhook-delivery][data-state=delivered]")
        delivered.wait_for()
        assert "delivered (HTTP 200, 1 attempt)" in delivered.inner_text()
        screenshot(page, "run-page-webhooks")

        panel.get_by_test_id("webhook").get_by_role("button", name="Remove").click()
        panel.get_by_test_id("webhook-list").wait_for(state="detached")
        assert owner_api.get(f"/api/runs/{run['id']}/webhooks").json() == []
    finally:
        receiver.close()
