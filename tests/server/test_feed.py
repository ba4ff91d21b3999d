"""The dashboard feed: the hub's delivery rules, and the websocket's snapshot, frames and refusals."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
from pydantic import TypeAdapter
from starlette.websockets import WebSocketDisconnect

from server.feed import FeedHub
from server.schemas import FeedFrame
from swarmhub.wire import Heartbeat


def test_hub_delivers_to_subscribers_of_the_run_only():
    async def scenario():
        hub = FeedHub()
        async with hub.subscribe(1) as one, hub.subscribe(2) as two:
            hub.publish(1, {"n": 1})
            hub.publish(3, {"n": "nobody listens"})
            assert await one.get() == {"n": 1}
            assert hub.subscriber_count(2) == 1
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(two.get(), 0.01)
        assert hub.subscriber_count(1) == 0

    asyncio.run(scenario())


def test_slow_subscribers_lose_their_oldest_frames():
    async def scenario():
        hub = FeedHub(queue_size=3)
        async with hub.subscribe(1) as sub:
            for n in range(5):
                hub.publish(1, {"n": n})
            assert [await sub.get() for _ in range(3)] == [{"n": 2}, {"n": 3}, {"n": 4}]
            assert sub.dropped == 2

    asyncio.run(scenario())


def test_a_subscriber_that_lost_frames_is_told_once_and_its_queue_emptied():
    async def scenario():
        hub = FeedHub(queue_size=3)
        async with hub.subscribe(1) as sub:
            hub.publish(1, {"n": 0})
            await sub.get()
            assert sub.caught_up()
            for n in range(1, 6):
                hub.publish(1, {"n": n})
            await sub.get()
            assert not sub.caught_up()
            hub.publish(1, {"n": 6})
            assert await sub.get() == {"n": 6}
            assert sub.caught_up()

    asyncio.run(scenario())


def test_publishing_from_another_thread_wakes_the_subscriber():
    async def scenario():
        hub = FeedHub()
        async with hub.subscribe(7) as sub:
            threading.Thread(target=hub.publish, args=(7, {"from": "thread"})).start()
            assert await asyncio.wait_for(sub.get(), 5) == {"from": "thread"}

    asyncio.run(scenario())


def _token(headers):
    return headers["Authorization"].removeprefix("Bearer ")


@contextlib.contextmanager
def _feed(client, run_id, headers):
    """A feed opened as an API client opens it: no cookie, the token in the first message."""
    with client.websocket_connect(f"/ws/runs/{run_id}/feed") as ws:
        ws.send_json({"type": "auth", "token": _token(headers)})
        yield ws


def test_feed_sends_a_snapshot_then_live_frames(client, owner_headers, run_id):
    with _feed(client, run_id, owner_headers) as ws:
        snapshot = ws.receive_json()
        assert snapshot["type"] == "snapshot" and snapshot["run"]["id"] == run_id
        assert [e["kind"] for e in snapshot["events"]] == ["run_created"]
        assert snapshot["peers"] == [] and snapshot["steps"] == []
        assert client.post(f"/api/runs/{run_id}/pause", headers=owner_headers).status_code == 200
        run_frame, event_frame = ws.receive_json(), ws.receive_json()
        assert run_frame["type"] == "run" and run_frame["run"]["status"] == "paused"
        assert event_frame["type"] == "event" and event_frame["event"]["kind"] == "run_paused"
        for frame in (snapshot, run_frame, event_frame):
            TypeAdapter(FeedFrame).validate_python(frame)  # the documented contract


def test_feed_reports_new_peers(api, client, owner_headers, run_id):
    token = api.issue_token(owner_headers, run_id)["token"]
    with _feed(client, run_id, owner_headers) as ws:
        ws.receive_json()
        client.post("/api/peers/register", json=api.registration(token, name="p1"))
        peer_frame, event_frame = ws.receive_json(), ws.receive_json()
        assert peer_frame["type"] == "peer" and peer_frame["peer"]["name"] == "p1"
        assert event_frame["event"]["kind"] == "peer_registered"


def test_a_dashboard_that_fell_behind_gets_a_fresh_snapshot(client, owner_headers, run_id, monkeypatch):
    """Frames are updates: a dashboard that lost some would stay wrong. A burst larger than its queue
    (published within one turn of the server's loop, so the feed cannot drain it in between) is
    followed by a snapshot, and the frames that were dropped are never sent."""
    monkeypatch.setattr(client.app.state.feed, "_queue_size", 4)
    with _feed(client, run_id, owner_headers) as ws:
        assert ws.receive_json()["type"] == "snapshot"

        def burst() -> None:
            for n in range(50):
                client.app.state.feed.publish(run_id, {"type": "ping", "n": n})

        ws.portal.call(burst)
        first = ws.receive_json()
        assert first["type"] == "snapshot" and first["run"]["id"] == run_id
        client.app.state.feed.publish(run_id, {"type": "ping", "n": "after"})
        assert ws.receive_json() == {"type": "ping", "n": "after"}


def test_feed_accepts_the_session_cookie(api, client, run_id):
    client.post("/api/auth/login", json={"username": "alice", "password": "alice password"})
    with client.websocket_connect(f"/ws/runs/{run_id}/feed") as ws:
        assert ws.receive_json()["type"] == "snapshot"
    # A page on another site must not ride on the cookie.
    with (
        client.websocket_connect(f"/ws/runs/{run_id}/feed", headers={"Origin": "https://evil.example"}) as ws,
        pytest.raises(WebSocketDisconnect) as refused,
    ):
        ws.receive_json()
    assert refused.value.code == 1008 and "cross-site" in refused.value.reason


def test_feed_pings_while_idle(client, owner_headers, run_id, monkeypatch):
    monkeypatch.setattr("server.routes.feed.KEEPALIVE_S", 0.05)
    with _feed(client, run_id, owner_headers) as ws:
        ws.receive_json()
        assert ws.receive_json() == {"type": "ping"}


@pytest.mark.parametrize("who", ["nobody", "stranger", "bad token"])
def test_unauthorized_feeds_close_with_1008(api, client, run_id, who):
    first: dict = {"type": "hello"}
    if who == "stranger":
        api.create_account("mallory", "mallory password", "owner")
        first = {"type": "auth", "token": _token(api.bearer("mallory", "mallory password"))}
    elif who == "bad token":
        first = {"type": "auth", "token": "forged"}
    with (
        client.websocket_connect(f"/ws/runs/{run_id}/feed") as ws,
        pytest.raises(WebSocketDisconnect) as refused,
    ):
        ws.send_json(first)
        ws.receive_json()
    assert refused.value.code == 1008 and refused.value.reason


def test_a_token_in_the_url_is_not_accepted(client, owner_headers, run_id):
    # URLs land in access logs and browser history: the token must come in the cookie or a message.
    with (
        client.websocket_connect(f"/ws/runs/{run_id}/feed?token={_token(owner_headers)}") as ws,
        pytest.raises(WebSocketDisconnect) as refused,
    ):
        ws.send_json({"type": "hello"})
        ws.receive_json()
    assert refused.value.code == 1008 and refused.value.reason == "not logged in"


def test_the_feed_closes_when_its_session_ends(client, owner_headers, run_id, monkeypatch):
    monkeypatch.setattr("server.routes.feed.SESSION_CHECK_S", 0.05)
    with _feed(client, run_id, owner_headers) as ws:
        assert ws.receive_json()["type"] == "snapshot"
        assert client.post("/api/auth/logout", headers=owner_headers).status_code == 204
        with pytest.raises(WebSocketDisconnect) as ended:
            while True:
                ws.receive_json()
    assert ended.value.code == 1008 and "session ended" in ended.value.reason


def test_admins_watch_any_run(client, admin_headers, run_id):
    with _feed(client, run_id, admin_headers) as ws:
        assert ws.receive_json()["run"]["id"] == run_id


def test_a_watched_peers_heartbeat_figures_reach_the_feed(client, owner_headers, run_id, connect_peer):
    """Heartbeat figures are synced every couple of seconds; a run someone watches gets them as frames
    (a run nobody watches gets the rows alone: `test_measured_link_rates_reach_the_api`)."""
    peer = connect_peer()
    with _feed(client, run_id, owner_headers) as ws:
        assert ws.receive_json()["type"] == "snapshot"
        peer.send(Heartbeat(throughput=42.0, queue_length=3, samples_done=96))
        for _ in range(50):
            frame = ws.receive_json()
            # A sync may first frame the peer with its registered throughput (it was just admitted).
            if (
                frame["type"] == "peer"
                and frame["peer"]["id"] == peer.peer_id
                and frame["peer"]["throughput"] == 42.0
            ):
                break
        else:
            pytest.fail("no peer frame carried the heartbeat's figures")
    assert (frame["peer"]["queue_length"], frame["peer"]["samples_done"]) == (3, 96)
