"""The peer's dataset download against the real coordinator app: verified, cached, corrupt bytes refused."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import httpx
import pytest

from peer.dataset_cache import DatasetError, load_dataset
from server.app import create_app
from server.services.accounts import create_user
from swarmhub.datasets import SHARD_BYTES
from swarmhub.settings import ServerSettings
from swarmhub.wire import DATA_PLANE_VERSION

BASE = "http://coordinator"
DATA = b"".join(f"line {i}: the quick brown fox\n".encode() for i in range(200_000))  # ~6 MB, 2 shards


async def _scenario(tmp_path: Path) -> None:
    settings = ServerSettings(
        database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
        checkpoint_dir=tmp_path / "checkpoints",
        dataset_dir=tmp_path / "coordinator-datasets",
    )
    app = create_app(settings)
    shard_requests: list[str] = []

    async def count(request: httpx.Request) -> None:
        if "/shards/" in request.url.path:
            shard_requests.append(request.url.path.rsplit("/", 1)[1])

    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=BASE, event_hooks={"request": [count]}
        ) as client,
    ):
        with app.state.session_factory() as session:
            create_user(session, username="owner", password="owner password", role="owner")
            session.commit()
        login = await client.post("/api/auth/login", json={"username": "owner", "password": "owner password"})
        client.cookies.clear()
        owner = {"Authorization": f"Bearer {login.json()['token']}"}
        uploaded = await client.post(
            "/api/datasets", params={"filename": "fox.txt"}, content=DATA, headers=owner
        )
        dataset_id = uploaded.json()["id"]
        run = await client.post("/api/runs", json={"name": "fox", "dataset": dataset_id}, headers=owner)
        token = (await client.post(f"/api/runs/{run.json()['id']}/tokens", headers=owner)).json()["token"]
        registration = {
            "join_token": token,
            "listen_port": 7001,
            "device": "cpu",
            "throughput": 1.0,
            "data_plane_version": DATA_PLANE_VERSION,
        }
        registration["announce"] = "127.0.0.1:7001"
        response = await client.post("/api/peers/register", json=registration)
        assert response.status_code == 201, response.text
        registered = response.json()
        peer = {"peer_id": registered["peer_id"], "credential": registered["credential"]}
        cache = tmp_path / "peer-cache"

        assert await load_dataset(client, BASE, dataset_id, data_dir=cache, **peer) == DATA
        shards = sorted(p.name for p in (cache / "shards").iterdir())
        assert len(shards) == 2 and sorted(shard_requests) == shards

        # Cached shards that check out are read, not downloaded again.
        shard_requests.clear()
        assert await load_dataset(client, BASE, dataset_id, data_dir=cache, **peer) == DATA
        assert shard_requests == []

        # A participant's copy of the coordinator's shards: used because the bytes hash right, and
        # a file there whose bytes do not match its name is replaced by the verified download.
        copy = tmp_path / "participant-copy"
        shutil.copytree(settings.dataset_dir / "shards", copy / "shards")
        forged = copy / "shards" / shards[0]
        forged.write_bytes(b"x" * SHARD_BYTES)
        assert await load_dataset(client, BASE, dataset_id, data_dir=copy, **peer) == DATA
        assert shard_requests == [shards[0]]
        assert forged.read_bytes() != b"x" * SHARD_BYTES

        # A corrupt shard on the coordinator is refused, and nothing of it is cached.
        served = settings.dataset_dir / "shards" / shards[1]
        corrupt = bytearray(served.read_bytes())
        corrupt[100] ^= 0xFF
        served.write_bytes(bytes(corrupt))
        fresh = tmp_path / "fresh-cache"
        with pytest.raises(DatasetError, match="does not match its hash; refused"):
            await load_dataset(client, BASE, dataset_id, data_dir=fresh, **peer)
        assert not (fresh / "shards" / shards[1]).exists()

        # Only the run's dataset: another id is refused by the coordinator.
        with pytest.raises(DatasetError, match="HTTP 403"):
            await load_dataset(client, BASE, "python-stdlib", data_dir=fresh, **peer)


def test_shards_are_downloaded_verified_and_cached(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))
