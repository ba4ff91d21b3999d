"""The dashboard's model downloads beyond the stage files: the Hugging Face zip, and text samples."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
import torch

from peer.model import state_to_bytes
from peer.sampling import PROMPTS, generate
from server.checkpoints.service import record_requests
from server.models import Run, Step
from swarmhub.wire import CheckpointRequest
from tests.stored_model import perturbed_model

STEP = 5


@pytest.fixture
def stages(app, api, client, owner_headers, run_id):
    """A real model (the run's preset, tiny, in its 2 stages) uploaded as the run's step-5 checkpoint."""
    token = api.issue_token(owner_headers, run_id)["token"]
    registered = client.post("/api/peers/register", json=api.registration(token)).json()
    headers = {"X-Peer-Id": str(registered["peer_id"]), "X-Peer-Credential": registered["credential"]}
    with app.state.session_factory() as session:
        session.get_one(Run, run_id).current_step = STEP
        for stage in range(2):
            record_requests(
                session, run_id, [registered["peer_id"]], CheckpointRequest(step=STEP, stage=stage)
            )
        session.commit()
        for step, loss in ((3, 3.0), (4, 2.5), (6, 2.0)):
            session.add(
                Step(
                    run_id=run_id,
                    step=step,
                    loss=loss,
                    samples_sent=8,
                    samples_lost=0,
                    samples_counted=[8, 8],
                    duration_s=1.0,
                )
            )
        session.commit()
    model = perturbed_model("tiny", num_stages=2, seed=4)
    for stage in model:
        state = {f"model.{k}": v for k, v in stage.state_dict().items()}
        state["optim.0.exp_avg"] = torch.zeros(2)
        response = client.put(
            f"/api/runs/{run_id}/checkpoints/{STEP}/stages/{stage.stage}",
            content=state_to_bytes(state, {}),
            headers={**headers, "Content-Type": "application/octet-stream"},
        )
        assert response.status_code == 200, response.text
    return model


def test_the_hf_zip_holds_a_transformers_model_and_a_readme(client, owner_headers, run_id, stages, tmp_path):
    transformers = pytest.importorskip("transformers")
    assert client.get(f"/api/runs/{run_id}/checkpoints/4/hf", headers=owner_headers).status_code == 404
    response = client.get(f"/api/runs/{run_id}/checkpoints/{STEP}/hf", headers=owner_headers)
    assert response.status_code == 200, response.text
    assert f"run-{run_id}-step-{STEP}-hf.zip" in response.headers["content-disposition"]
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        assert archive.testzip() is None
        assert "README.md" in archive.namelist() and "model.safetensors" in archive.namelist()
        readme = archive.read("README.md").decode()
        archive.extractall(tmp_path / "hf")
    assert readme.startswith(f"# SwarmHub model for Hugging Face transformers: run {run_id}, step {STEP}")
    assert "AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)" in readme
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["n_layer"] == 4

    model = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "hf", trust_remote_code=True, local_files_only=True
    ).eval()
    ids = torch.tensor([list(b"SwarmHub's own model, loaded elsewhere")])
    expected = ids
    with torch.no_grad():
        for stage in stages:
            expected = stage(expected)
        torch.testing.assert_close(model(ids).logits, expected, rtol=1e-6, atol=1e-6)


def test_the_hf_zip_refuses_stage_files_that_are_not_the_model(client, owner_headers, run_id, stages, app):
    # Overwrite stage 1 on disk with a file of other tensors: the export says so rather than guess.
    path = app.state.checkpoints.step_dir(run_id, STEP) / "stage-1.safetensors"
    path.write_bytes(state_to_bytes({"model.weight": torch.zeros(3)}, {}))
    response = client.get(f"/api/runs/{run_id}/checkpoints/{STEP}/hf", headers=owner_headers)
    assert response.status_code == 422 and "not this run's model" in response.json()["detail"]


def test_samples_are_generated_on_first_request_then_served(app, client, owner_headers, run_id, stages):
    url = f"/api/runs/{run_id}/checkpoints/{STEP}/samples"
    first = client.get(url, headers=owner_headers)
    assert first.status_code == 200 and first.json()["status"] == "generating"
    app.state.sampler.wait()
    body = client.get(url, headers=owner_headers).json()
    assert body["status"] == "ready", body
    assert body["loss"] == pytest.approx(2.5)  # step 4's: the newest step up to the checkpoint's
    result = body["samples"]
    assert result["step"] == STEP and result["temperature"] == 0
    assert [s["prompt"] for s in result["samples"]] == list(PROMPTS)
    for sample in result["samples"]:
        expected = generate(stages, sample["prompt"].encode(), max_new_tokens=result["max_new_tokens"])
        assert sample["text"] == expected.decode(errors="replace")
    # Stored beside the checkpoint: a coordinator started afresh serves them without generating.
    assert (app.state.checkpoints.step_dir(run_id, STEP) / "samples.json").exists()


def test_a_failed_sampler_is_reported_not_retried(app, client, owner_headers, run_id, stages):
    url = f"/api/runs/{run_id}/checkpoints/{STEP}/samples"
    (app.state.checkpoints.step_dir(run_id, STEP) / "stage-0.safetensors").write_bytes(b"garbage")
    assert client.get(url, headers=owner_headers).json()["status"] == "generating"
    app.state.sampler.wait()
    for _ in range(2):
        body = client.get(url, headers=owner_headers).json()
        assert body["status"] == "failed" and "not a valid safetensors file" in body["detail"], body
    assert not app.state.sampler._running


def test_samples_of_an_incomplete_or_missing_checkpoint(client, owner_headers, run_id):
    assert client.get(f"/api/runs/{run_id}/checkpoints/1/samples", headers=owner_headers).status_code == 404
