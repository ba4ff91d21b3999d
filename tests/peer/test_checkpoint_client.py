"""The peer's checkpoint client against the real coordinator app (in process, SQLite on disk)."""

from __future__ import annotations

import asyncio
import io

import httpx
import pytest
import torch

from peer.checkpoint_client import (
    CheckpointError,
    download_stage_checkpoint,
    latest_checkpoint_step,
    upload_stage_checkpoint,
)
from peer.console import Console
from server.app import create_app
from server.checkpoints.service import record_requests
from server.models import Run
from server.services.accounts import create_user
from swarmhub.settings import ServerSettings
from swarmhub.wire import DATA_PLANE_VERSION, CheckpointRequest

BASE = "http://coordinator"


def _state(seed: float) -> dict[str, torch.Tensor]:
    return {"model.w": torch.randn(4, 3, generator=torch.Generator().manual_seed(int(seed))) + seed}


async def _scenario(tmp_path) -> None:
    settings = ServerSettings(
        database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", checkpoint_dir=tmp_path / "checkpoints"
    )
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client,
    ):
        with app.state.session_factory() as session:
            create_user(session, username="owner", password="owner password", role="owner")
            session.commit()
        login = await client.post("/api/auth/login", json={"username": "owner", "password": "owner password"})
        client.cookies.clear()
        owner = {"Authorization": f"Bearer {login.json()['token']}"}
        run_id = (await client.post("/api/runs", json={"name": "ckpt"}, headers=owner)).json()["id"]
        token = (await client.post(f"/api/runs/{run_id}/tokens", headers=owner)).json()["token"]
        registration = {
            "join_token": token,
            "listen_port": 7001,
            "announce": "127.0.0.1:7001",
            "device": "cpu",
            "data_plane_version": DATA_PLANE_VERSION,
            "throughput": 1.0,
        }
        registered = (await client.post("/api/peers/register", json=registration)).json()
        peer_id, credential = registered["peer_id"], registered["credential"]
        with app.state.session_factory() as session:
            session.get_one(Run, run_id).current_step = 5
            # What the coordinator records when it sends the peer a CheckpointRequest.
            for stage in (0, 1):
                record_requests(session, run_id, [peer_id], CheckpointRequest(step=5, stage=stage))
            session.commit()

        assert await latest_checkpoint_step(client, BASE, run_id, peer_id, credential) is None
        for stage in (0, 1):
            await upload_stage_checkpoint(
                client, BASE, run_id, 5, stage, peer_id, credential, _state(stage), {"note": "x", "step": "9"}
            )
        assert await latest_checkpoint_step(client, BASE, run_id, peer_id, credential) == 5

        shown = io.StringIO()
        state, metadata = await download_stage_checkpoint(
            client, BASE, run_id, 5, 1, peer_id, credential, console=Console("p", shown)
        )
        assert torch.equal(state["model.w"], _state(1)["model.w"])
        assert metadata == {"note": "x", "run_id": str(run_id), "step": "5", "stage": "1"}
        # The download's progress, to the whole of its length.
        lines = shown.getvalue().splitlines()
        assert lines and all(line.startswith("[p] downloading stage 1 of step 5") for line in lines)
        assert "100%" in lines[-1]

        with pytest.raises(CheckpointError) as missing:
            await download_stage_checkpoint(client, BASE, run_id, 4, 0, peer_id, credential)
        assert missing.value.status_code == 404 and "step 4" in str(missing.value)
        with pytest.raises(CheckpointError) as refused:
            await upload_stage_checkpoint(client, BASE, run_id, 5, 0, peer_id, "wrong", _state(0), {})
        assert refused.value.status_code == 401 and "credential" in refused.value.detail
        with pytest.raises(CheckpointError) as ahead:
            await upload_stage_checkpoint(client, BASE, run_id, 6, 0, peer_id, credential, _state(0), {})
        assert ahead.value.status_code == 409 and "HTTP 409" in str(ahead.value)
        with pytest.raises(CheckpointError) as bad_stage:
            await upload_stage_checkpoint(client, BASE, run_id, 5, 2, peer_id, credential, _state(0), {})
        assert bad_stage.value.status_code == 422
        with pytest.raises(CheckpointError):
            await latest_checkpoint_step(client, BASE, run_id, peer_id, "wrong")


def test_upload_download_and_latest_round_trip(tmp_path):
    asyncio.run(_scenario(tmp_path))
