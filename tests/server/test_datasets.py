"""Datasets the coordinator holds: upload, packing into content-addressed shards, who may read them."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from server.datasets.store import STDLIB_CAP_BYTES, stdlib_corpus
from swarmhub.datasets import SHARD_BYTES, DatasetManifest


def _upload(client, headers, data: bytes, filename: str = "corpus.txt", **params):
    return client.post(
        "/api/datasets",
        params={"filename": filename, **params},
        content=data,
        headers={**headers, "Content-Type": "application/octet-stream"},
    )


def _read_back(client, headers, dataset_id: str) -> bytes:
    manifest = client.get(f"/api/datasets/{dataset_id}", headers=headers)
    assert manifest.status_code == 200, manifest.text
    resolved = manifest.headers["X-Dataset-Id"]
    assert hashlib.sha256(manifest.content).hexdigest() == resolved
    parsed = DatasetManifest.model_validate_json(manifest.content)
    parts = []
    for shard in parsed.shards:
        response = client.get(f"/api/datasets/{dataset_id}/shards/{shard.sha256}", headers=headers)
        assert response.status_code == 200, response.text
        assert hashlib.sha256(response.content).hexdigest() == shard.sha256
        parts.append(response.content)
    return b"".join(parts)


def test_a_text_upload_is_packed_into_shards_named_by_their_hash(client, owner_headers, settings):
    data = bytes(range(256)) * (SHARD_BYTES // 256 + 10)  # a little over one shard
    response = _upload(client, owner_headers, data, name="bytes")
    assert response.status_code == 201, response.text
    dataset = response.json()
    assert dataset["name"] == "bytes" and dataset["bytes"] == len(data) and dataset["shards"] == 2
    assert _read_back(client, owner_headers, dataset["id"]) == data
    manifest = (settings.dataset_dir / "manifests" / f"{dataset['id']}.json").read_bytes()
    assert hashlib.sha256(manifest).hexdigest() == dataset["id"]
    for shard in json.loads(manifest)["shards"]:
        stored = (settings.dataset_dir / "shards" / shard["sha256"]).read_bytes()
        assert hashlib.sha256(stored).hexdigest() == shard["sha256"]

    again = _upload(client, owner_headers, data, filename="same.txt")
    assert again.json()["id"] == dataset["id"]
    assert [d["id"] for d in client.get("/api/datasets", headers=owner_headers).json()] == [dataset["id"]]


def test_jsonl_contributes_the_text_of_each_record(client, owner_headers):
    lines = [json.dumps({"text": "first record"}), "", json.dumps({"text": "zweite Zeile é", "id": 2})]
    response = _upload(client, owner_headers, "\n".join(lines).encode(), filename="train.jsonl")
    assert response.status_code == 201, response.text
    expected = "first record\nzweite Zeile é\n".encode()
    assert _read_back(client, owner_headers, response.json()["id"]) == expected


@pytest.mark.parametrize(
    ("filename", "data", "message"),
    [
        ("train.jsonl", b'{"text": "ok"}\n{"body": 1}\n', "line 2: a record needs a string 'text'"),
        ("train.jsonl", b"not json\n", "line 1: not a JSON value"),
        ("train.parquet", b"PAR1", "not a readable Parquet file"),
        ("model.bin", b"\x00", "unsupported file type"),
        ("empty.txt", b"", "empty"),
    ],
)
def test_unreadable_uploads_are_refused_with_the_reason(client, owner_headers, filename, data, message):
    response = _upload(client, owner_headers, data, filename=filename)
    assert response.status_code == 422
    assert message in response.json()["detail"]
    assert client.get("/api/datasets", headers=owner_headers).json() == []


@pytest.mark.server_settings(dataset_upload_max_bytes=1000)
def test_uploads_past_the_limit_are_refused(client, owner_headers):
    response = _upload(client, owner_headers, b"x" * 1001)
    assert response.status_code == 413
    assert "swarmhub dataset add" in response.json()["detail"]


def test_only_the_owner_and_admins_see_and_use_a_dataset(client, api, owner_headers, admin_headers):
    dataset_id = _upload(client, owner_headers, b"the owner's words " * 100).json()["id"]
    api.create_account("mallory", "mallory password", "owner")
    other = api.bearer("mallory", "mallory password")

    assert client.get("/api/datasets", headers=other).json() == []
    assert client.get(f"/api/datasets/{dataset_id}", headers=other).status_code == 404
    refused = client.post("/api/runs", json={"name": "x", "dataset": dataset_id}, headers=other)
    assert refused.status_code == 422 and "not one of your datasets" in refused.json()["detail"]

    assert _read_back(client, admin_headers, dataset_id) == b"the owner's words " * 100
    created = client.post("/api/runs", json={"name": "mine", "dataset": dataset_id}, headers=owner_headers)
    assert created.status_code == 201 and created.json()["dataset"] == dataset_id
    assert client.get(f"/api/datasets/{dataset_id}").status_code == 401


def test_peers_read_only_their_runs_dataset(client, api, owner_headers, connect_peer, run_id):
    dataset_id = _upload(client, owner_headers, b"peer food " * 500).json()["id"]
    uploaded_run = client.post(
        "/api/runs", json={"name": "on upload", "dataset": dataset_id}, headers=owner_headers
    ).json()["id"]
    reader_id, reader_credential = connect_peer.register(run_id=uploaded_run)
    reader = {"X-Peer-Id": str(reader_id), "X-Peer-Credential": reader_credential}
    assert _read_back(client, reader, dataset_id) == b"peer food " * 500

    stranger_id, stranger_credential = connect_peer.register()  # a peer of the python-stdlib run
    stranger = {"X-Peer-Id": str(stranger_id), "X-Peer-Credential": stranger_credential}
    forbidden = client.get(f"/api/datasets/{dataset_id}", headers=stranger)
    assert forbidden.status_code == 403 and "does not train on" in forbidden.json()["detail"]
    wrong = client.get(f"/api/datasets/{dataset_id}", headers={**reader, "X-Peer-Credential": "guess"})
    assert wrong.status_code == 401


def test_the_bundled_corpus_is_packed_once_on_the_coordinator(client, owner_headers, settings):
    first = client.get("/api/datasets/python-stdlib", headers=owner_headers)
    resolved = first.headers["X-Dataset-Id"]
    corpus = _read_back(client, owner_headers, "python-stdlib")
    assert corpus == stdlib_corpus() and 1_000_000 < len(corpus) <= STDLIB_CAP_BYTES
    assert b"def " in corpus and b"import " in corpus
    # Kept once packed: the run's bytes do not change with the coordinator's Python.
    assert (settings.dataset_dir / "bundled").read_text() == resolved
    again = client.get("/api/datasets/python-stdlib", headers=owner_headers)
    assert again.headers["X-Dataset-Id"] == resolved and again.content == first.content


def test_a_shard_not_in_the_manifest_is_not_served(client, owner_headers):
    first = _upload(client, owner_headers, b"first dataset " * 100).json()["id"]
    second = _upload(client, owner_headers, b"second dataset " * 100).json()["id"]
    other_shard = json.loads(client.get(f"/api/datasets/{second}", headers=owner_headers).content)
    response = client.get(
        f"/api/datasets/{first}/shards/{other_shard['shards'][0]['sha256']}", headers=owner_headers
    )
    assert response.status_code == 404


def _parquet(tmp_path, name: str, columns: dict) -> bytes:
    path = tmp_path / name
    pq.write_table(pa.table(columns), path)
    return path.read_bytes()


def test_parquet_contributes_its_text_column(client, owner_headers, tmp_path):
    data = _parquet(
        tmp_path, "t.parquet", {"id": [1, 2, 3], "text": ["first", None, "dritte é"], "url": ["a", "b", "c"]}
    )
    response = _upload(client, owner_headers, data, filename="train.parquet")
    assert response.status_code == 201, response.text
    assert _read_back(client, owner_headers, response.json()["id"]) == "first\ndritte é\n".encode()


def test_parquet_without_a_text_column_contributes_every_string_column_row_by_row(
    client, owner_headers, tmp_path
):
    data = _parquet(tmp_path, "t.parquet", {"title": ["T1", "T2"], "n": [1.5, 2.5], "body": ["B1", None]})
    response = _upload(client, owner_headers, data, filename="train.parquet")
    assert response.status_code == 201, response.text
    assert _read_back(client, owner_headers, response.json()["id"]) == b"T1\nB1\nT2\n"


@pytest.mark.parametrize(
    ("columns", "message"),
    [({"n": [1, 2]}, "no string column"), ({"text": [1, 2], "s": ["a", "b"]}, "'text' column holds int64")],
)
def test_parquet_without_documents_is_refused(client, owner_headers, tmp_path, columns, message):
    response = _upload(client, owner_headers, _parquet(tmp_path, "t.parquet", columns), filename="t.parquet")
    assert response.status_code == 422
    assert message in response.json()["detail"]


def _draft(client, headers, **params) -> str:
    response = client.post("/api/datasets/drafts", params=params, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _add(client, headers, draft: str, filename: str, data: bytes):
    return client.post(
        f"/api/datasets/drafts/{draft}/files",
        params={"filename": filename},
        content=data,
        headers={**headers, "Content-Type": "application/octet-stream"},
    )


def test_a_dataset_of_several_files_is_packed_in_upload_order(client, owner_headers, settings, tmp_path):
    draft = _draft(client, owner_headers, name="mixed")
    parquet = _parquet(tmp_path, "c.parquet", {"text": ["from parquet"]})
    for filename, data in [
        ("a.txt", b"plain text\n"),
        ("b.jsonl", b'{"text": "from jsonl"}\n'),
        ("c.parquet", parquet),
    ]:
        response = _add(client, owner_headers, draft, filename, data)
        assert response.status_code == 200, response.text
    listed = client.get(f"/api/datasets/drafts/{draft}", headers=owner_headers).json()
    assert [f["name"] for f in listed["files"]] == ["a.txt", "b.jsonl", "c.parquet"]
    assert listed["bytes"] == 11 + 23 + len(parquet)

    sealed = client.post(f"/api/datasets/drafts/{draft}/seal", headers=owner_headers)
    assert sealed.status_code == 201, sealed.text
    dataset = sealed.json()
    assert dataset["name"] == "mixed" and dataset["files"] == 3
    assert _read_back(client, owner_headers, dataset["id"]) == b"plain text\nfrom jsonl\nfrom parquet\n"
    assert [d["id"] for d in client.get("/api/datasets", headers=owner_headers).json()] == [dataset["id"]]
    assert client.get(f"/api/datasets/drafts/{draft}", headers=owner_headers).status_code == 404
    assert not any((settings.dataset_dir / "drafts").iterdir())
    run = client.post("/api/runs", json={"name": "r", "dataset": dataset["id"]}, headers=owner_headers)
    assert run.status_code == 201, run.text


def test_an_unreadable_file_is_refused_by_name_and_the_draft_keeps_the_others(client, owner_headers):
    draft = _draft(client, owner_headers)
    assert _add(client, owner_headers, draft, "a.txt", b"kept\n").status_code == 200
    bad = _add(client, owner_headers, draft, "b.jsonl", b"not json\n")
    assert bad.status_code == 422 and "b.jsonl line 1" in bad.json()["detail"]
    assert _add(client, owner_headers, draft, "model.bin", b"x").status_code == 422
    sealed = client.post(f"/api/datasets/drafts/{draft}/seal", headers=owner_headers)
    assert sealed.status_code == 201, sealed.text
    assert sealed.json()["files"] == 1 and sealed.json()["name"] == "a.txt"


def test_an_empty_draft_cannot_be_sealed_and_can_be_deleted(client, owner_headers, settings):
    draft = _draft(client, owner_headers)
    assert client.post(f"/api/datasets/drafts/{draft}/seal", headers=owner_headers).status_code == 409
    assert client.delete(f"/api/datasets/drafts/{draft}", headers=owner_headers).status_code == 204
    assert client.get(f"/api/datasets/drafts/{draft}", headers=owner_headers).status_code == 404
    assert not (settings.dataset_dir / "drafts" / draft).exists()


@pytest.mark.server_settings(dataset_drafts_per_owner=2)
def test_an_owner_holds_a_bounded_number_of_drafts(client, owner_headers):
    for _ in range(2):
        _draft(client, owner_headers)
    refused = client.post("/api/datasets/drafts", headers=owner_headers)
    assert refused.status_code == 409 and "the limit" in refused.json()["detail"]


def test_abandoned_drafts_are_pruned(client, owner_headers, app, settings):
    draft = _draft(client, owner_headers)
    assert _add(client, owner_headers, draft, "a.txt", b"left behind\n").status_code == 200
    expires_at = datetime.fromisoformat(
        client.get(f"/api/datasets/drafts/{draft}", headers=owner_headers).json()["expires_at"]
    )
    app.state.dataset_drafts.prune(expires_at - timedelta(seconds=1))
    assert client.get(f"/api/datasets/drafts/{draft}", headers=owner_headers).status_code == 200
    app.state.dataset_drafts.prune(expires_at)
    assert client.get(f"/api/datasets/drafts/{draft}", headers=owner_headers).status_code == 404
    assert not (settings.dataset_dir / "drafts" / draft).exists()
