"""The checkpoint store over REST: peer uploads, checks, completeness, retention, downloads, isolation."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import zipfile

import pytest
import torch

from peer.model import state_from_bytes, state_to_bytes
from server.checkpoints.service import record_requests
from server.checkpoints.store import max_stage_bytes
from server.models import Run
from swarmhub.wire import (
    ApplyStep,
    AveragingDone,
    CheckpointRequest,
    MicrobatchDone,
    NoWork,
    RunStatusChanged,
    StageReady,
    StepApplied,
    StepBarrier,
    StepCommitted,
    SwarmView,
    WorkGrant,
    WorkRequest,
)


def _state(seed: float) -> dict[str, torch.Tensor]:
    return {
        "model.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4) + seed,
        "optim.0.exp_avg": torch.full((3, 4), seed),
        "optim.0.step": torch.tensor(7.0),
    }


def _blob(seed: float = 0.0, **metadata: str) -> bytes:
    return state_to_bytes(_state(seed), metadata)


def _url(run_id: int, step: int, stage: int) -> str:
    return f"/api/runs/{run_id}/checkpoints/{step}/stages/{stage}"


ASKED_STEPS = range(13)


@pytest.fixture
def peer(api, app, client, owner_headers, run_id) -> dict[str, str]:
    """Headers of a registered peer of the run, which the coordinator asked for both stages of
    every step these tests upload (`tests/hostile/test_resource_bounds.py` covers the asking)."""
    token = api.issue_token(owner_headers, run_id)["token"]
    registered = client.post("/api/peers/register", json=api.registration(token)).json()
    with app.state.session_factory() as session:
        for step in ASKED_STEPS:
            for stage in range(2):
                request = CheckpointRequest(step=step, stage=stage)
                record_requests(session, run_id, [registered["peer_id"]], request)
        session.commit()
    return {"X-Peer-Id": str(registered["peer_id"]), "X-Peer-Credential": registered["credential"]}


def _set_step(app, run_id: int, step: int) -> None:
    with app.state.session_factory() as session:
        session.get_one(Run, run_id).current_step = step
        session.commit()


def _put(client, run_id: int, step: int, stage: int, headers: dict[str, str], body: bytes):
    return client.put(
        _url(run_id, step, stage),
        content=body,
        headers={**headers, "Content-Type": "application/octet-stream"},
    )


def _save_step(client, run_id: int, step: int, headers: dict[str, str], stages: int = 2) -> None:
    for stage in range(stages):
        response = _put(client, run_id, step, stage, headers, _blob(step + stage / 10))
        assert response.status_code == 200, response.text


def _events(client, run_id: int, headers: dict[str, str]) -> list[dict]:
    return client.get(f"/api/runs/{run_id}/events", headers=headers).json()


def test_a_step_is_complete_once_every_stage_is_in(app, client, owner_headers, run_id, peer, settings):
    _set_step(app, run_id, 4)
    first = _put(client, run_id, 4, 0, peer, _blob(1.0))
    assert first.status_code == 200, first.text
    assert first.json()["complete"] is False and [s["stage"] for s in first.json()["stages"]] == [0]
    assert client.get(f"/api/runs/{run_id}/checkpoints/latest", headers=owner_headers).status_code == 404
    assert "checkpoint" not in [e["kind"] for e in _events(client, run_id, owner_headers)]

    body = _blob(2.0)
    second = _put(client, run_id, 4, 1, peer, body)
    assert second.status_code == 200, second.text
    assert second.json()["complete"] is True
    events = [e for e in _events(client, run_id, owner_headers) if e["kind"] == "checkpoint"]
    assert len(events) == 1 and events[0]["data"]["step"] == 4
    assert events[0]["peer_id"] == int(peer["X-Peer-Id"])

    listed = client.get(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).json()
    assert [(s["step"], s["complete"], s["num_stages"]) for s in listed] == [(4, True, 2)]
    stage1 = listed[0]["stages"][1]
    assert stage1["bytes"] == len(body) and stage1["sha256"] == hashlib.sha256(body).hexdigest()
    assert client.get(f"/api/runs/{run_id}/checkpoints/latest", headers=owner_headers).json()["step"] == 4
    assert client.get(f"/api/runs/{run_id}/checkpoints/latest", headers=peer).json()["step"] == 4

    step_dir = settings.checkpoint_dir / f"run-{run_id}" / "step-4"
    assert (step_dir / "stage-1.safetensors").read_bytes() == body
    manifest = json.loads((step_dir / "manifest.json").read_text())
    assert manifest["complete"] is True and manifest["num_stages"] == 2
    assert manifest["model_preset"] == "tiny"
    assert manifest["stages"]["1"]["sha256"] == hashlib.sha256(body).hexdigest()
    assert list((settings.checkpoint_dir / f"run-{run_id}" / ".incoming").iterdir()) == []

    # A stored stage is never replaced: the file and the step's single event stay as they were.
    again = _put(client, run_id, 4, 0, peer, _blob(3.0))
    assert again.status_code == 409 and "never overwritten" in again.json()["detail"]
    assert [e["kind"] for e in _events(client, run_id, owner_headers)].count("checkpoint") == 1
    assert (
        state_from_bytes((step_dir / "stage-0.safetensors").read_bytes())[0]["optim.0.exp_avg"][0, 0] == 1.0
    )


def test_peers_authenticate_and_must_belong_to_the_run(api, client, owner_headers, run_id, peer):
    body = _blob()
    wrong = {**peer, "X-Peer-Credential": "not the credential"}
    assert _put(client, run_id, 0, 0, wrong, body).status_code == 401
    unknown = {**peer, "X-Peer-Id": "999999"}
    assert _put(client, run_id, 0, 0, unknown, body).status_code == 401
    assert _put(client, run_id, 0, 0, {}, body).status_code == 422  # no peer headers at all
    # A bearer session is not a peer: owners read checkpoints, peers write them.
    assert _put(client, run_id, 0, 0, owner_headers, body).status_code == 422

    other_run = client.post("/api/runs", json={"name": "other"}, headers=owner_headers).json()["id"]
    other_token = api.issue_token(owner_headers, other_run)["token"]
    other = client.post("/api/peers/register", json=api.registration(other_token)).json()
    other_headers = {"X-Peer-Id": str(other["peer_id"]), "X-Peer-Credential": other["credential"]}
    refused = _put(client, run_id, 0, 0, other_headers, body)
    assert refused.status_code == 403 and "does not belong" in refused.json()["detail"]
    assert client.get(f"/api/runs/{run_id}/checkpoints/latest", headers=other_headers).status_code == 403
    assert client.get(_url(run_id, 0, 0), headers=other_headers).status_code == 403
    assert client.get(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).json() == []


def test_kicked_peers_cannot_upload(api, client, admin_headers, run_id, peer):
    assert client.post(f"/api/peers/{peer['X-Peer-Id']}/kick", headers=admin_headers).status_code == 200
    assert _put(client, run_id, 0, 0, peer, _blob()).status_code == 401


def test_only_safetensors_files_are_stored(client, owner_headers, run_id, peer, settings):
    good = _blob()
    (header_len,) = struct.unpack_from("<Q", good)
    header = json.loads(good[8 : 8 + header_len])
    header["model.weight"]["data_offsets"][1] += 4  # a range that no longer matches the shape
    forged = json.dumps(header).encode()
    bad_offsets = struct.pack("<Q", len(forged)) + forged + good[8 + header_len :]
    for body in (
        b"",
        b"PK\x03\x04 not a tensor file",
        b"\x00" * 64,
        struct.pack("<Q", 10**9) + b"{}",
        struct.pack("<Q", 2) + b"[]",
        good[:-1],
        good + b"\x00",
        bad_offsets,
    ):
        response = _put(client, run_id, 0, 0, peer, body)
        assert response.status_code == 422, (body[:40], response.text)
        assert "safetensors" in response.json()["detail"]
    assert client.get(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).json() == []
    assert list((settings.checkpoint_dir / f"run-{run_id}" / ".incoming").iterdir()) == []


def test_oversize_uploads_are_413(client, owner_headers, run_id, peer, settings):
    limit = max_stage_bytes("tiny")
    too_big = b"\x00" * (limit + 1)
    response = _put(client, run_id, 0, 0, peer, too_big)
    assert response.status_code == 413 and str(limit) in response.json()["detail"]

    # Without a Content-Length (chunked), the stream is cut off once it passes the limit.
    def chunks():
        for offset in range(0, len(too_big), 1 << 20):
            yield too_big[offset : offset + (1 << 20)]

    streamed = _put(client, run_id, 0, 0, peer, chunks())
    assert streamed.status_code == 413
    assert client.get(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).json() == []
    assert list((settings.checkpoint_dir / f"run-{run_id}" / ".incoming").iterdir()) == []


def test_steps_ahead_of_the_run_and_unknown_stages_are_refused(app, client, run_id, peer):
    _set_step(app, run_id, 2)
    ahead = _put(client, run_id, 3, 0, peer, _blob())
    assert ahead.status_code == 409 and "ahead" in ahead.json()["detail"]
    assert _put(client, run_id, 2, 2, peer, _blob()).status_code == 422
    assert _put(client, run_id, 2, 1, peer, _blob()).status_code == 200


def test_stage_files_download_for_peers_and_owners(app, client, owner_headers, admin_headers, run_id, peer):
    _set_step(app, run_id, 1)
    body = _blob(5.0, note="hello")
    assert _put(client, run_id, 1, 0, peer, body).status_code == 200
    for headers in (peer, owner_headers, admin_headers):
        response = client.get(_url(run_id, 1, 0), headers=headers)
        assert response.status_code == 200, response.text
        assert response.content == body
        assert response.headers["content-type"] == "application/octet-stream"
        assert response.headers["x-checkpoint-sha256"] == hashlib.sha256(body).hexdigest()
    state, metadata = state_from_bytes(client.get(_url(run_id, 1, 0), headers=peer).content)
    assert metadata == {"note": "hello"} and torch.equal(state["model.weight"], _state(5.0)["model.weight"])
    assert client.get(_url(run_id, 1, 1), headers=peer).status_code == 404
    assert client.get(_url(run_id, 0, 0), headers=peer).status_code == 404
    assert client.get(_url(run_id, 1, 0)).status_code == 401
    wrong = {**peer, "X-Peer-Credential": "nope"}
    assert client.get(_url(run_id, 1, 0), headers=wrong).status_code == 401


def test_the_owner_downloads_the_whole_model(app, client, owner_headers, run_id, peer):
    _set_step(app, run_id, 3)
    assert _put(client, run_id, 3, 0, peer, _blob(1.0)).status_code == 200
    incomplete = client.get(f"/api/runs/{run_id}/checkpoints/3/model", headers=owner_headers)
    assert incomplete.status_code == 409 and "[1]" in incomplete.json()["detail"]
    assert _put(client, run_id, 3, 1, peer, _blob(2.0)).status_code == 200
    assert client.get(f"/api/runs/{run_id}/checkpoints/9/model", headers=owner_headers).status_code == 404
    # The model is the owner's: a peer's credential does not download it.
    assert client.get(f"/api/runs/{run_id}/checkpoints/3/model", headers=peer).status_code == 401

    response = client.get(f"/api/runs/{run_id}/checkpoints/3/model", headers=owner_headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/zip"
    assert f"run-{run_id}-step-3.zip" in response.headers["content-disposition"]
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        assert archive.testzip() is None
        assert sorted(archive.namelist()) == [
            "README.md",
            "config.json",
            "stage-0.safetensors",
            "stage-1.safetensors",
        ]
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}
        config = json.loads(archive.read("config.json"))
        readme = archive.read("README.md").decode()
        for stage, seed in ((0, 1.0), (1, 2.0)):
            state, _ = state_from_bytes(archive.read(f"stage-{stage}.safetensors"))
            assert torch.equal(state["optim.0.exp_avg"], _state(seed)["optim.0.exp_avg"])
    assert config["step"] == 3 and config["num_stages"] == 2 and config["model_preset"] == "tiny"
    assert (config["d_model"], config["n_layer"], config["n_head"], config["max_seq_len"]) == (64, 4, 4, 256)
    assert (config["vocab_size"], config["token_bytes"]) == (256, 1)
    assert config["parameter_count"] > 0 and config["run"]["run_id"] == run_id
    assert "data_key" not in json.dumps(config)
    # The README says what is inside and how to use it, with this checkpoint's own commands.
    assert readme.startswith(f"# SwarmHub checkpoint: run {run_id}, step 3")
    assert "`stage-0.safetensors`, `stage-1.safetensors`" in readme and "preset `tiny`" in readme
    assert f"swarmhub export {run_id} --step 3 --format hf" in readme
    assert f"swarmhub sample {run_id} --step 3" in readme and "range(2)" in readme


def test_only_the_newest_complete_steps_are_kept(app, client, owner_headers, run_id, peer, settings):
    assert settings.checkpoint_keep == 3
    _set_step(app, run_id, 10)
    assert _put(client, run_id, 1, 0, peer, _blob()).status_code == 200  # never completed
    for step in (2, 4, 6, 8):
        _save_step(client, run_id, step, peer)
    listed = client.get(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).json()
    assert [(s["step"], s["complete"]) for s in listed] == [(8, True), (6, True), (4, True)]
    run_dir = settings.checkpoint_dir / f"run-{run_id}"
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith("step-")) == [
        "step-4",
        "step-6",
        "step-8",
    ]
    late = _put(client, run_id, 2, 0, peer, _blob())
    assert late.status_code == 409 and "older" in late.json()["detail"]
    # An incomplete step newer than the oldest kept one stays until it falls out of the window.
    assert _put(client, run_id, 5, 0, peer, _blob()).status_code == 200
    _save_step(client, run_id, 10, peer)
    listed = client.get(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).json()
    assert [(s["step"], s["complete"]) for s in listed] == [(10, True), (8, True), (6, True)]
    assert not (run_dir / "step-5").exists() and not (run_dir / "step-4").exists()


def test_other_owners_see_nothing(api, app, client, owner_headers, run_id, peer):
    _set_step(app, run_id, 1)
    _save_step(client, run_id, 1, peer)
    api.create_account("bob", "bob password", "owner")
    bob = api.bearer("bob", "bob password")
    for path in (
        f"/api/runs/{run_id}/checkpoints",
        f"/api/runs/{run_id}/checkpoints/latest",
        f"/api/runs/{run_id}/checkpoints/1/model",
        _url(run_id, 1, 0),
    ):
        assert client.get(path, headers=bob).status_code == 404, path
        assert client.get(path, headers=owner_headers).status_code == 200, path
    assert client.post(f"/api/runs/{run_id}/checkpoints", headers=bob).status_code == 404


def _ready_pair(connect_peer, run_id: int | None = None):
    """Two connected peers, one per stage of the run, both ready at step 0."""
    first = connect_peer(run_id=run_id)
    second = connect_peer(run_id=run_id)
    assert (first.stage, second.stage) == (0, 1)
    for peer in (first, second):
        peer.send(StageReady(stage=peer.stage, step=0, origin="initialized"))
        peer.expect(SwarmView, skip=())
    return first, second


def _take_step(trainer, stage_peers, step: int) -> StepCommitted:
    """Drive one global step of a one-microbatch run through the real protocol, as peers would."""
    trainer.send(WorkRequest())
    grant = trainer.expect(WorkGrant)
    assert grant.step == step
    trainer.send(
        MicrobatchDone(step=step, microbatch_id=grant.microbatch_id, samples=grant.samples, loss=4.5)
    )
    for peer in stage_peers:
        barrier = peer.expect(StepBarrier)
        assert (barrier.step, barrier.stage, [p.peer_id for p in barrier.group]) == (
            step,
            peer.stage,
            [peer.peer_id],
        )
        peer.send(
            AveragingDone(
                step=step,
                attempt=barrier.attempt,
                stage=peer.stage,
                contributors=[peer.peer_id],
                counted=[grant.microbatch_id],
                grad_sum_norm_sq=1.0,
            )
        )
    for peer in stage_peers:
        assert peer.expect(ApplyStep).step == step
        peer.send(StepApplied(step=step, stage=peer.stage))
    committed = [peer.expect(StepCommitted) for peer in stage_peers]
    assert committed[0] == committed[1] == StepCommitted(step=step, loss=4.5, next_step=step + 1)
    return committed[0]


def test_owners_request_a_checkpoint(api, client, owner_headers, run_id, connect_peer):
    first, second = _ready_pair(connect_peer)
    assert client.post(f"/api/runs/{run_id}/pause", headers=owner_headers).status_code == 200
    for peer in (first, second):
        assert peer.expect(RunStatusChanged).status == "paused"

    # Between steps (the run is paused) the request goes out at once: one ready peer per stage.
    response = client.post(f"/api/runs/{run_id}/checkpoints", headers=owner_headers)
    assert response.status_code == 202, response.text
    assert response.json() == {"run_id": run_id, "current_step": 0}
    for peer in (first, second):
        assert peer.expect(CheckpointRequest) == CheckpointRequest(step=0, stage=peer.stage)
    assert _events(client, run_id, owner_headers)[-1]["kind"] == "checkpoint_requested"

    # A browser session must echo its CSRF token, as for every other write.
    login = client.post("/api/auth/login", json={"username": "alice", "password": "alice password"})
    assert login.status_code == 200
    assert client.post(f"/api/runs/{run_id}/checkpoints").status_code == 403
    csrf = client.cookies["swarmhub_csrf"]
    assert client.post(f"/api/runs/{run_id}/checkpoints", headers={"X-CSRF-Token": csrf}).status_code == 202
    client.cookies.clear()
    for peer in (first, second):
        assert peer.expect(CheckpointRequest) == CheckpointRequest(step=0, stage=peer.stage)

    assert client.post(f"/api/runs/{run_id}/archive", headers=owner_headers).status_code == 200
    assert client.post(f"/api/runs/{run_id}/checkpoints", headers=owner_headers).status_code == 409
    for peer in (first, second):
        assert peer.expect(RunStatusChanged).status == "archived"
        # Nothing more was asked of it: the reply to its next request is the next frame.
        peer.send(WorkRequest())
        assert peer.expect(NoWork).reason == "run is archived"


def test_a_checkpoint_requested_mid_step_is_taken_at_the_step_boundary(client, owner_headers, connect_peer):
    body = {"name": "one microbatch a step", "target_batch_size": 8, "microbatch_size": 8}
    run_id = client.post("/api/runs", json=body, headers=owner_headers).json()["id"]
    first, second = _ready_pair(connect_peer, run_id)

    response = client.post(f"/api/runs/{run_id}/checkpoints", headers=owner_headers)
    assert response.status_code == 202 and response.json()["current_step"] == 0
    # The run is active: nothing is asked now (the next frame is the reply to the trainer's
    # request, not a CheckpointRequest), but the step that commits next ends with one per stage.
    _take_step(first, (first, second), step=0)
    for peer in (first, second):
        assert peer.expect(CheckpointRequest) == CheckpointRequest(step=1, stage=peer.stage)
    assert client.get(f"/api/runs/{run_id}", headers=owner_headers).json()["current_step"] == 1

    # Asked once, taken once: the step after that (not a multiple of checkpoint_every_steps) has none.
    _take_step(second, (first, second), step=1)
    for peer in (first, second):
        peer.send(WorkRequest())
        grant = peer.expect(WorkGrant) if peer is first else peer.expect(NoWork)
        assert grant.step == 2
    steps = client.get(f"/api/runs/{run_id}/steps", headers=owner_headers).json()
    assert [(s["step"], s["loss"], s["samples_counted"]) for s in steps] == [
        (0, 4.5, [8, 8]),
        (1, 4.5, [8, 8]),
    ]
