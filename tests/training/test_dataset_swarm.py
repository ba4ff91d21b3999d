"""A real swarm trains on datasets the coordinator holds: one uploaded over the API, one added with
`swarmhub dataset add` on the coordinator's host. Peers fetch the shards into their data directory;
none of them is given a path. Assertions are on losses, books and bytes, never on time."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from launch.local_swarm import ADMIN_USERNAME, LocalSwarm, console_script
from tests.training.swarm_helpers import DEMO_RUN, WAIT_S, assert_books_balance

pytestmark = pytest.mark.slow

STEPS = 30
# A small, very regular language: a byte-level model learns it within a few dozen steps.
UPLOADED = "".join(f"{i % 7} plus {i % 5} is {i % 7 + i % 5}.\n" for i in range(20_000)).encode()


def _train(swarm: LocalSwarm, dataset: str) -> list[dict]:
    run = swarm.create_run(name=f"on {dataset[:8]}", dataset=dataset, max_steps=STEPS, **DEMO_RUN)
    assert run["dataset"] == dataset
    for stage in (0, 1):
        swarm.start_peer("--stage", str(stage))
    try:
        steps = swarm.wait_for_steps(run["id"], STEPS, timeout_s=WAIT_S)
    except (TimeoutError, RuntimeError) as exc:
        raise AssertionError(f"{exc}\n{swarm.logs()}") from None
    assert_books_balance(steps, swarm.events(run["id"]), DEMO_RUN["num_stages"])
    for peer in swarm.peers:
        peer.process.terminate()
        peer.process.wait(timeout=30)
    swarm.peers.clear()
    return steps


@pytest.mark.timeout(600)
def test_a_swarm_trains_on_uploaded_and_added_datasets(tmp_path: Path) -> None:
    with LocalSwarm() as swarm:
        uploaded = swarm.client.post(
            "/api/datasets", params={"filename": "sums.txt", "name": "sums"}, content=UPLOADED
        )
        assert uploaded.status_code == 201, uploaded.text
        dataset_id = uploaded.json()["id"]

        steps = _train(swarm, dataset_id)
        losses = [s["loss"] for s in steps]
        assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5, losses
        # The peers' shared data directory holds exactly the shards the coordinator serves.
        manifest = json.loads(swarm.client.get(f"/api/datasets/{dataset_id}").content)
        cached = swarm.workdir / "peer-data" / "shards"
        for shard in manifest["shards"]:
            assert hashlib.sha256((cached / shard["sha256"]).read_bytes()).hexdigest() == shard["sha256"]

        corpus = tmp_path / "corpus"
        (corpus / "part").mkdir(parents=True)
        (corpus / "a.txt").write_bytes(UPLOADED[: len(UPLOADED) // 2])
        records = UPLOADED[len(UPLOADED) // 2 :].decode().splitlines()
        (corpus / "part" / "b.jsonl").write_text("".join(json.dumps({"text": r}) + "\n" for r in records))
        added = subprocess.run(
            [console_script("swarmhub"), "dataset", "add", str(corpus), "--owner", ADMIN_USERNAME],
            env=swarm._env(),
            capture_output=True,
            text=True,
            check=True,
        )
        # Both halves, in path order: the JSONL records' text with their newlines is the same bytes.
        added_id = added.stdout.split()[1].rstrip(":")
        assert added_id == dataset_id, added.stdout
        listed = swarm.client.get("/api/datasets").json()
        assert [d["id"] for d in listed] == [dataset_id]

        (corpus / "c.md").write_text("# one more file\n" * 100)
        added = subprocess.run(
            [console_script("swarmhub"), "dataset", "add", str(corpus), "--owner", ADMIN_USERNAME],
            env=swarm._env(),
            capture_output=True,
            text=True,
            check=True,
        )
        other_id = added.stdout.split()[1].rstrip(":")
        assert other_id != dataset_id and "from 3 files" in added.stdout
        steps = _train(swarm, other_id)
        assert len(steps) >= STEPS
