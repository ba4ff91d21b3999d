"""The swarm-ref preset: pair-of-bytes tokens and a heavy vocabulary head (`swarmhub/presets.py`)."""

from __future__ import annotations

import math

import pytest
import torch

from peer.data import SampleSource
from peer.model import build_full_model, full_forward_loss, stage_layers
from peer.stage_worker import apply_gradients, make_optimizer
from swarmhub.presets import get_preset
from swarmhub.wire import RunSpec

torch.set_num_threads(1)

REF = get_preset("swarm-ref")
STAGES = 4  # the default cut
TEXT = ("def f(x):\n    return x * 2  # ünïcödé\n" * 40).encode()


def test_the_preset_pairs_bytes_and_is_cut_evenly() -> None:
    assert (REF.token_bytes, REF.vocab_size) == (2, 65536)
    assert [len(stage_layers(REF.n_layer, STAGES, s)) for s in range(STAGES)] == [6, 6, 6, 6]


def test_the_last_stage_costs_several_times_the_first() -> None:
    # Forward matmul FLOPs per token at full length: a block's 24 d^2 + 4 T d, the head's 2 d V.
    d, t = REF.d_model, REF.max_seq_len
    block = 24 * d * d + 4 * t * d
    blocks = len(stage_layers(REF.n_layer, STAGES, 0))
    ratio = (blocks * block + 2 * d * REF.vocab_size) / (blocks * block)
    assert 4 <= ratio <= 6, ratio


def test_cut_into_stages_it_equals_the_whole_model() -> None:
    samples = SampleSource(TEXT, seq_len=32, seed=0, token_bytes=REF.token_bytes)
    inputs, targets = samples.batch(0, 2)
    assert int(inputs.max()) >= 256
    whole = build_full_model(REF, 1, seed=5)
    cut = build_full_model(REF, STAGES, seed=5)
    with torch.no_grad():
        x = inputs
        for stage in cut:
            x = stage(x)
        assert x.shape == (2, 32, 65536)
        torch.testing.assert_close(x, whole[0](inputs))
        torch.testing.assert_close(
            full_forward_loss(cut, inputs, targets), full_forward_loss(whole, inputs, targets)
        )


def test_a_training_step_starts_near_uniform_and_lowers_the_loss() -> None:
    spec = RunSpec(
        run_id=1,
        name="swarm-ref",
        model_preset="swarm-ref",
        dataset="python-stdlib",
        num_stages=STAGES,
        target_batch_size=4,
        microbatch_size=4,
        seq_len=32,
        optimizer="adamw",
        learning_rate=1e-3,
        warmup_steps=0,
        weight_decay=0.0,
        compression="none",
    )
    stages = build_full_model(REF, STAGES, seed=0)
    optimizers = [make_optimizer(spec, list(stage.parameters())) for stage in stages]
    inputs, targets = SampleSource(TEXT, spec.seq_len, seed=0, token_bytes=REF.token_bytes).batch(0, 4)
    loss = full_forward_loss(stages, inputs, targets)
    assert math.isfinite(loss.item())
    assert loss.item() == pytest.approx(math.log(65536), abs=0.5)
    grads = [torch.autograd.grad(loss, list(stage.parameters()), retain_graph=True) for stage in stages]
    assert all(torch.isfinite(g).all() for stage_grads in grads for g in stage_grads)
    for stage, optimizer, stage_grads in zip(stages, optimizers, grads, strict=True):
        apply_gradients(stage, optimizer, list(stage_grads), spec.learning_rate)
    with torch.no_grad():
        after = full_forward_loss(stages, inputs, targets).item()
    assert math.isfinite(after) and after < loss.item()
