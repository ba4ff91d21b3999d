"""With compression off, a step over the swarm equals the same step taken in one process.

A real coordinator and four real peer processes (2 stages x 2 peers) train; the run is paused
after the first committed step, every peer's parameters are fetched over the data plane, and each
is compared with a single-process model stepped on the same microbatches with the same rules.
"""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
import torch

from launch.local_swarm import LocalSwarm
from peer.data import SampleSource
from peer.frame_headers import FetchState, StateReply
from peer.frames import decode_frame, encode_frame
from peer.model import build_full_model, full_forward_loss
from peer.stage_worker import apply_gradients, make_optimizer
from peer.transport import FramePool, UploadPacer
from server.datasets.store import stdlib_corpus
from swarmhub.presets import get_preset
from swarmhub.schedule import GRAD_CLIP_NORM, clip_scale, learning_rate
from swarmhub.wire import PeerEndpoint, RunSpec
from tests.ticket_helpers import minted_signer
from tests.training.swarm_helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOLERANCE = {
    "sgd": {"rtol": 1e-5, "atol": 1e-6},
    # Adam divides each gradient by its own magnitude, so a near-zero gradient whose last bits
    # differ (the swarm sums microbatch gradients in another order) moves by up to ~1e-3 x lr.
    "adamw": {"rtol": 1e-4, "atol": 1e-5},
}


def reference_parameters(spec: RunSpec, steps: int) -> list[dict[str, torch.Tensor]]:
    """Each stage's parameters after `steps` steps in one process: every step is one batch of
    `target_batch_size` consecutive global samples, as the coordinator grants them when no
    microbatch fails."""
    torch.manual_seed(0)
    preset = get_preset(spec.model_preset)
    stages = build_full_model(preset, spec.num_stages, spec.seed)
    optimizers = [make_optimizer(spec, list(stage.parameters())) for stage in stages]
    samples = SampleSource(stdlib_corpus(), spec.seq_len, spec.seed, token_bytes=preset.token_bytes)
    for step in range(steps):
        inputs, targets = samples.batch(step * spec.target_batch_size, spec.target_batch_size)
        loss = full_forward_loss(stages, inputs, targets)
        grads = [torch.autograd.grad(loss, list(stage.parameters()), retain_graph=True) for stage in stages]
        norms_sq = [float(sum(g.double().square().sum() for g in stage_grads)) for stage_grads in grads]
        scale = clip_scale(norms_sq, GRAD_CLIP_NORM)
        rate = learning_rate(
            step, peak=spec.learning_rate, warmup_steps=spec.warmup_steps, max_steps=spec.max_steps
        )
        for stage, optimizer, stage_grads in zip(stages, optimizers, grads, strict=True):
            apply_gradients(stage, optimizer, [g * scale for g in stage_grads], rate)
    return [{k: v.detach().clone() for k, v in stage.state_dict().items()} for stage in stages]


async def fetch_parameters(
    swarm: LocalSwarm, run_id: int, peers: list[dict], data_key: str
) -> dict[int, tuple[int, int, dict[str, torch.Tensor]]]:
    """peer id -> (stage, step, parameters), asked of each peer over the data plane."""
    pool = FramePool(max_bytes=1 << 28, pacer=UploadPacer(None))
    pool.learn(PeerEndpoint(peer_id=p["id"], address=p["address"], stage=p["stage"]) for p in peers)
    caller = peers[0]["id"]
    # Asked as a peer of the run would ask: with a ticket the run's key signed, as the coordinator's host can.
    signer = minted_signer(data_key, run_id, caller)
    result = {}
    try:
        for peer in peers:
            frame = encode_frame(
                FetchState(run_id=run_id, sender=caller, stage=peer["stage"], step=0),
                signer=signer,
                receiver=peer["id"],
            )
            header, tensors = decode_frame(await pool.request(peer["address"], frame, 60), max_bytes=1 << 28)
            assert isinstance(header, StateReply), header
            params = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
            result[peer["id"]] = (peer["stage"], header.step, params)
    finally:
        await pool.close()
    return result


def settled_parameters(
    swarm: LocalSwarm, run_id: int, peers: list[dict], data_key: str
) -> tuple[int, dict[int, tuple[int, int, dict[str, torch.Tensor]]]] | None:
    """The run's committed step and every peer's parameters, if every peer holds that step and no
    step committed while they were fetched (a peer applies a step before the run commits it)."""
    committed = swarm.run_detail(run_id)["current_step"]
    fetched = asyncio.run(fetch_parameters(swarm, run_id, peers, data_key))
    if swarm.run_detail(run_id)["current_step"] != committed:
        return None
    if any(step != committed for _, step, _ in fetched.values()):
        return None
    return committed, fetched


@pytest.mark.parametrize(
    ("optimizer", "butterfly_from"),
    [
        pytest.param("sgd", None, id="sgd"),
        pytest.param("adamw", None, id="adamw"),
        # Every round of two members goes in a butterfly (`peer/butterfly.py`): the same step.
        pytest.param("adamw", 2, id="adamw-butterfly"),
    ],
)
def test_swarm_step_equals_single_process_step(
    optimizer: str, butterfly_from: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if butterfly_from is not None:
        monkeypatch.setenv("SWARMHUB_BUTTERFLY_FROM_MEMBERS", str(butterfly_from))
    with LocalSwarm() as swarm:
        run = swarm.create_run(
            name=f"equivalence {optimizer}",
            model_preset="tiny",
            num_stages=2,
            target_batch_size=64,
            microbatch_size=8,
            seq_len=64,
            optimizer=optimizer,
            learning_rate=0.05 if optimizer == "sgd" else 3e-3,
            warmup_steps=0,
            compression="none",
            # The placement is part of what is compared: two copies of each stage.
            rebalance=False,
        )
        for stage in (0, 0, 1, 1):
            swarm.start_peer("--stage", str(stage), *(["--verbose"] if butterfly_from else []))
        swarm.wait_for_steps(run["id"], 1, timeout_s=120)
        swarm.client.post(f"/api/runs/{run['id']}/pause").raise_for_status()
        peers = [p for p in swarm.client.get(f"/api/runs/{run['id']}/peers").json() if p["state"] == "active"]
        assert sorted(p["stage"] for p in peers) == [0, 0, 1, 1]
        with sqlite3.connect(swarm.workdir / "swarmhub.sqlite") as db:
            (data_key,) = db.execute("select data_key from runs where id = ?", (run["id"],)).fetchone()
        # A step already averaging when the pause arrived still commits; what is compared is a
        # state every peer and the run agree on.
        steps, fetched = wait_until(
            "every peer to hold the run's committed step",
            lambda: settled_parameters(swarm, run["id"], peers, data_key),
            timeout_s=120,
        )
        spec = RunSpec.model_validate({**run, "run_id": run["id"]})
        if butterfly_from is not None:
            assert all("averaged in a butterfly of 2 members" in p.log() for p in swarm.peers)

    expected = reference_parameters(spec, steps)
    initial = build_full_model(get_preset("tiny"), 2, spec.seed)
    assert steps >= 1
    for peer_id, (stage, _, params) in fetched.items():
        assert params.keys() == expected[stage].keys()
        for name, value in params.items():
            torch.testing.assert_close(
                value,
                expected[stage][name],
                **TOLERANCE[spec.optimizer],
                msg=lambda m, peer_id=peer_id, stage=stage, name=name: (
                    f"peer {peer_id} stage {stage} {name}: {m}"
                ),
            )
        # The comparison is not vacuous: training moved the parameters.
        moved = max(
            (value - initial[stage].state_dict()[name]).abs().max().item() for name, value in params.items()
        )
        assert moved > 1e-4
    # Both peers of a stage hold bit-identical parameters.
    for stage in (0, 1):
        copies = [params for s, _, params in fetched.values() if s == stage]
        for name in copies[0]:
            assert torch.equal(copies[0][name], copies[1][name]), f"stage {stage} copies differ in {name}"
