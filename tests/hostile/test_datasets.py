"""Hostile owners and peers against datasets: no run makes a participant's peer read a path on its
own machine, nobody reads a dataset that is not theirs, and the store is reachable only by hash."""

from __future__ import annotations

import hashlib

import pytest

from swarmhub.datasets import DatasetManifest

HONEST_TEXT = b"an honest owner's corpus, uploaded to the coordinator\n" * 200


def _upload(client, headers, data: bytes, filename: str = "corpus.txt"):
    response = client.post("/api/datasets", params={"filename": filename}, content=data, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _read(client, headers, dataset_id: str) -> bytes:
    manifest = client.get(f"/api/datasets/{dataset_id}", headers=headers)
    assert manifest.status_code == 200, manifest.text
    shards = DatasetManifest.model_validate_json(manifest.content).shards
    parts = [client.get(f"/api/datasets/{dataset_id}/shards/{s.sha256}", headers=headers) for s in shards]
    return b"".join(part.content for part in parts)


@pytest.mark.parametrize(
    "dataset",
    ["/etc/shadow", "../../etc/passwd", "~/.ssh/id_ed25519", "python-stdlib/../x", "file:///etc/shadow"],
)
def test_a_run_naming_a_path_on_the_participants_machines_is_refused(client, owner_headers, dataset):
    response = client.post(
        "/api/runs", json={"name": "exfiltrate", "dataset": dataset}, headers=owner_headers
    )
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "dataset"]
    assert "paths on the participants' machines are not accepted" in error["msg"]
    assert client.get("/api/runs", headers=owner_headers).json() == []
    # The honest run, on a dataset the coordinator holds, is created as before.
    honest = client.post("/api/runs", json={"name": "honest"}, headers=owner_headers)
    assert honest.status_code == 201 and honest.json()["dataset"] == "python-stdlib"


def test_an_owner_cannot_train_on_or_read_another_owners_dataset(client, api, owner_headers):
    victim = _upload(client, owner_headers, HONEST_TEXT)
    api.create_account("mallory", "mallory's password", "owner")
    mallory = api.bearer("mallory", "mallory's password")

    stolen = client.post("/api/runs", json={"name": "steal", "dataset": victim}, headers=mallory)
    assert stolen.status_code == 422 and "not one of your datasets" in stolen.json()["detail"]
    assert client.get(f"/api/datasets/{victim}", headers=mallory).status_code == 404
    manifest = client.get(f"/api/datasets/{victim}", headers=owner_headers).json()
    shard = manifest["shards"][0]["sha256"]
    assert client.get(f"/api/datasets/{victim}/shards/{shard}", headers=mallory).status_code == 404
    assert client.get("/api/runs", headers=mallory).json() == []
    # The owner's run on it is unaffected.
    run = client.post("/api/runs", json={"name": "mine", "dataset": victim}, headers=owner_headers)
    assert run.status_code == 201 and _read(client, owner_headers, victim) == HONEST_TEXT


def test_a_peer_reads_only_its_own_runs_dataset_and_loses_it_when_kicked(
    client, owner_headers, admin_headers, connect_peer
):
    private = _upload(client, owner_headers, HONEST_TEXT)
    private_run = client.post(
        "/api/runs", json={"name": "private", "dataset": private}, headers=owner_headers
    )
    member_id, member_credential = connect_peer.register(run_id=private_run.json()["id"])
    member = {"X-Peer-Id": str(member_id), "X-Peer-Credential": member_credential}
    intruder_id, intruder_credential = connect_peer.register()  # joined a python-stdlib run
    intruder = {"X-Peer-Id": str(intruder_id), "X-Peer-Credential": intruder_credential}

    refused = client.get(f"/api/datasets/{private}", headers=intruder)
    assert refused.status_code == 403 and "does not train on" in refused.json()["detail"]
    forged = client.get(f"/api/datasets/{private}", headers={**intruder, "X-Peer-Id": str(member_id)})
    assert forged.status_code == 401
    assert _read(client, member, private) == HONEST_TEXT

    assert client.post(f"/api/peers/{member_id}/kick", headers=admin_headers).status_code == 200
    assert client.get(f"/api/datasets/{private}", headers=member).status_code == 401


@pytest.mark.parametrize(
    "path",
    [
        "/api/datasets/..%2F..%2Fbundled",
        "/api/datasets/python-stdlib/shards/..%2F..%2Fbundled",
        "/api/datasets/python-stdlib/shards/" + "A" * 64,
        "/api/datasets/%2Fetc%2Fpasswd",
    ],
)
def test_the_store_is_reached_only_by_hash(client, owner_headers, path):
    response = client.get(path, headers=owner_headers)
    assert response.status_code in (404, 422)
    assert b"root:" not in response.content


def test_an_upload_name_cannot_place_files_outside_the_store(client, owner_headers, settings, tmp_path):
    dataset_id = _upload(client, owner_headers, HONEST_TEXT, filename="../../../escape.txt")
    assert (
        not (tmp_path / "escape.txt").exists() and not (settings.dataset_dir.parent / "escape.txt").exists()
    )
    stored = {p.name for p in (settings.dataset_dir / "shards").iterdir()}
    assert stored == {hashlib.sha256(HONEST_TEXT).hexdigest()}
    assert _read(client, owner_headers, dataset_id) == HONEST_TEXT


def _start_draft(client, headers) -> str:
    response = client.post("/api/datasets/drafts", headers=headers)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _add_file(client, headers, draft: str, data: bytes, filename: str = "part.txt"):
    return client.post(
        f"/api/datasets/drafts/{draft}/files", params={"filename": filename}, content=data, headers=headers
    )


def test_an_owner_can_neither_see_nor_touch_another_owners_draft(client, api, owner_headers):
    draft = _start_draft(client, owner_headers)
    assert _add_file(client, owner_headers, draft, HONEST_TEXT).status_code == 200
    api.create_account("mallory", "mallory's password", "owner")
    mallory = api.bearer("mallory", "mallory's password")

    for response in (
        client.get(f"/api/datasets/drafts/{draft}", headers=mallory),
        _add_file(client, mallory, draft, b"poison\n"),
        client.post(f"/api/datasets/drafts/{draft}/seal", headers=mallory),
        client.delete(f"/api/datasets/drafts/{draft}", headers=mallory),
    ):
        assert response.status_code == 404
        assert response.json()["detail"] == f"dataset draft {draft} not found"
    assert client.get("/api/datasets", headers=mallory).json() == []
    # The owner's draft holds only the owner's file and seals into the owner's dataset.
    sealed = client.post(f"/api/datasets/drafts/{draft}/seal", headers=owner_headers)
    assert sealed.status_code == 201, sealed.text
    assert _read(client, owner_headers, sealed.json()["id"]) == HONEST_TEXT


@pytest.mark.server_settings(dataset_draft_max_files=2)
def test_a_draft_takes_a_bounded_number_of_files(client, owner_headers, settings):
    draft = _start_draft(client, owner_headers)
    for _ in range(2):
        assert _add_file(client, owner_headers, draft, HONEST_TEXT).status_code == 200
    refused = _add_file(client, owner_headers, draft, b"one more\n")
    assert refused.status_code == 409
    assert "already holds 2 files, the limit" in refused.json()["detail"]
    assert len(list((settings.dataset_dir / "drafts" / draft).iterdir())) == 3  # the record and two files
    sealed = client.post(f"/api/datasets/drafts/{draft}/seal", headers=owner_headers)
    assert sealed.status_code == 201 and _read(client, owner_headers, sealed.json()["id"]) == HONEST_TEXT * 2


@pytest.mark.server_settings(
    dataset_upload_max_bytes=len(HONEST_TEXT), dataset_draft_max_bytes=len(HONEST_TEXT) + 10
)
def test_files_over_the_limits_are_refused_before_they_are_stored(client, owner_headers, settings):
    draft = _start_draft(client, owner_headers)
    too_big = _add_file(client, owner_headers, draft, HONEST_TEXT + b"x")
    assert too_big.status_code == 413
    assert f"takes at most {len(HONEST_TEXT)} more" in too_big.json()["detail"]

    def chunks():  # no Content-Length: the limit holds while the body streams in
        yield HONEST_TEXT
        yield b"and then some more"

    streamed = _add_file(client, owner_headers, draft, chunks())
    assert streamed.status_code == 413 and "exceeds the limit" in streamed.json()["detail"]
    assert _add_file(client, owner_headers, draft, HONEST_TEXT).status_code == 200
    # The draft holds len(HONEST_TEXT) + 10 bytes in all: 10 more fit, 11 do not.
    over_dataset = _add_file(client, owner_headers, draft, b"x" * 11)
    assert over_dataset.status_code == 413
    assert not any(p.suffix == ".part" for p in (settings.dataset_dir / ".incoming").iterdir())
    sealed = client.post(f"/api/datasets/drafts/{draft}/seal", headers=owner_headers)
    assert sealed.status_code == 201 and _read(client, owner_headers, sealed.json()["id"]) == HONEST_TEXT
