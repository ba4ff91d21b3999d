"""Table tests of what a run asks of a participant's machine (`swarmhub/resources.py`)."""

from __future__ import annotations

import pytest

from peer.model import build_stage
from swarmhub.presets import PRESETS
from swarmhub.resources import (
    FRAME_SLACK_BYTES,
    MAX_ACTIVATION_ELEMENTS,
    estimate_memory,
    format_bytes,
    frame_limits,
    largest_stage_parameters,
    stage_parameters,
)

GiB = 1 << 30
MiB = 1 << 20


@pytest.mark.parametrize(
    ("preset", "num_stages"), [("tiny", 1), ("tiny", 3), ("small", 3), ("small", 8), ("swarm-ref", 4)]
)
def test_stage_parameters_match_the_built_stages(preset, num_stages):
    p = PRESETS[preset]
    for stage in range(num_stages):
        module = build_stage(p, stage, num_stages, seed=0)
        assert stage_parameters(p, num_stages, stage) == sum(t.numel() for t in module.parameters())
    assert sum(stage_parameters(p, num_stages, s) for s in range(num_stages)) == p.parameter_count


@pytest.mark.parametrize(
    ("preset", "num_stages", "microbatch", "seq_len", "optimizer", "low", "high"),
    [
        # The defaults: a few MiB, any laptop holds them.
        ("tiny", 2, 8, 64, "adamw", 1 * MiB, 64 * MiB),
        ("small", 2, 8, 64, "adamw", 64 * MiB, 512 * MiB),
        # One stage holding all of xl with AdamW: tens of GiB.
        ("xl", 1, 8, 256, "adamw", 16 * GiB, 64 * GiB),
        # The same with SGD keeps one moment, not two.
        ("xl", 1, 8, 256, "sgd", 12 * GiB, 28 * GiB),
        # Long sequences: the attention scores dominate the activations.
        ("large", 24, 16, 1024, "adamw", 2 * GiB, 8 * GiB),
        # A 65,536-token head: its logits, their softmax and gradient dominate (1.5 GiB of ~2.1).
        ("swarm-ref", 4, 8, 256, "adamw", 2 * GiB, 3 * GiB),
    ],
)
def test_memory_estimate_table(preset, num_stages, microbatch, seq_len, optimizer, low, high):
    estimate = estimate_memory(
        PRESETS[preset],
        num_stages=num_stages,
        microbatch_size=microbatch,
        seq_len=seq_len,
        optimizer=optimizer,
    )
    assert low <= estimate.total <= high, format_bytes(estimate.total)
    assert (
        estimate.total == estimate.parameters + estimate.optimizer + estimate.gradients + estimate.activations
    )


def test_the_estimate_grows_with_every_setting():
    base = dict(num_stages=2, microbatch_size=8, seq_len=64, optimizer="sgd")
    p = PRESETS["small"]
    total = estimate_memory(p, **base).total
    assert estimate_memory(p, **{**base, "microbatch_size": 16}).total > total
    assert estimate_memory(p, **{**base, "seq_len": 128}).total > total
    assert estimate_memory(p, **{**base, "num_stages": 1}).total > total
    assert estimate_memory(p, **{**base, "optimizer": "adamw"}).total > total
    assert estimate_memory(PRESETS["medium"], **base).total > total


@pytest.mark.parametrize(
    ("preset", "num_stages", "microbatch", "seq_len"),
    [("tiny", 2, 8, 64), ("small", 8, 16, 512), ("xl", 1, 8, 1024), ("xl", 20, 8, 1024)],
)
def test_frame_limits_follow_the_runs_shapes(preset, num_stages, microbatch, seq_len):
    p = PRESETS[preset]
    limits = frame_limits(
        p, num_stages=num_stages, microbatch_size=microbatch, seq_len=seq_len, optimizer="adamw"
    )
    params = largest_stage_parameters(p, num_stages)
    activation = 4 * microbatch * seq_len * p.d_model
    # A call is bounded by its activations, not by the stage's state.
    for kind in ("forward", "backward", "forward_backward", "forward_reply", "backward_reply", "error"):
        assert limits.for_kind(kind) == 2 * activation + FRAME_SLACK_BYTES
    assert limits.for_kind("push_grads") == 4 * params + FRAME_SLACK_BYTES
    assert limits.for_kind("fetch_state_reply") == 12 * params + FRAME_SLACK_BYTES
    assert limits.served == max(limits.activations, limits.gradients)
    assert limits.largest >= limits.served


def test_the_activation_bound_admits_every_preset_at_a_useful_size():
    for p in PRESETS.values():
        assert 8 * min(256, p.max_seq_len) * p.d_model <= MAX_ACTIVATION_ELEMENTS
