from __future__ import annotations

import pytest
import torch

from peer.model import (
    PipelineStage,
    build_full_model,
    build_stage,
    full_forward_loss,
    load_stage_state,
    save_stage,
    stage_layers,
    state_from_bytes,
    state_to_bytes,
)
from swarmhub.presets import get_preset

torch.set_num_threads(1)

TINY = get_preset("tiny")


@pytest.mark.parametrize(
    ("n_layer", "num_stages", "expected"),
    [
        (4, 1, [range(0, 4)]),
        (4, 2, [range(0, 2), range(2, 4)]),
        (4, 4, [range(0, 1), range(1, 2), range(2, 3), range(3, 4)]),
        (8, 3, [range(0, 3), range(3, 6), range(6, 8)]),
        (12, 5, [range(0, 3), range(3, 6), range(6, 8), range(8, 10), range(10, 12)]),
    ],
)
def test_stage_layers_split(n_layer: int, num_stages: int, expected: list[range]) -> None:
    got = [stage_layers(n_layer, num_stages, s) for s in range(num_stages)]
    assert got == expected


@pytest.mark.parametrize(("n_layer", "num_stages", "stage"), [(4, 5, 0), (4, 0, 0), (4, 2, 2), (4, 2, -1)])
def test_stage_layers_rejects(n_layer: int, num_stages: int, stage: int) -> None:
    with pytest.raises(ValueError, match="stage"):
        stage_layers(n_layer, num_stages, stage)


def test_stage_is_built_from_the_preset() -> None:
    first, last = build_full_model(TINY, 2, seed=0)
    assert first.wte.weight.shape == (256, TINY.d_model) and first.wpe.weight.shape == (TINY.max_seq_len, 64)
    assert last.head.out_features == 256 and first.blocks["0"].attn.n_head == TINY.n_head


def test_the_vocabulary_follows_the_presets_token_size() -> None:
    ref = get_preset("swarm-ref")
    first = PipelineStage(ref, 0, 4)
    last = PipelineStage(ref, 3, 4)
    assert first.wte.num_embeddings == last.head.out_features == ref.vocab_size == 65536


def _batch(batch: int = 2, seq_len: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 256, (batch, seq_len + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def test_stage_shapes_and_roles() -> None:
    stages = build_full_model(TINY, 2, seed=0)
    inputs, _ = _batch()
    assert (stages[0].is_first, stages[0].is_last, stages[1].is_first, stages[1].is_last) == (
        True,
        False,
        False,
        True,
    )
    hidden = stages[0](inputs)
    assert hidden.shape == (2, 16, 64) and hidden.dtype == torch.float32
    assert stages[1](hidden).shape == (2, 16, 256)
    with pytest.raises(RuntimeError, match="not the last stage"):
        stages[0].loss(hidden, inputs)
    with pytest.raises(ValueError, match="max_seq_len"):
        stages[0](torch.zeros(1, TINY.max_seq_len + 1, dtype=torch.long))


@pytest.mark.parametrize("num_stages", [2, 3, 4])
def test_stages_chained_equal_single_stage_model(num_stages: int) -> None:
    # Init depends on the global layer index only, so any cut is the same function as the whole model.
    inputs, targets = _batch()
    whole = build_full_model(TINY, 1, seed=3)
    cut = build_full_model(TINY, num_stages, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(
            full_forward_loss(cut, inputs, targets), full_forward_loss(whole, inputs, targets)
        )
        x = inputs
        for stage in cut:
            x = stage(x)
        torch.testing.assert_close(x, whole[0](inputs))
        torch.testing.assert_close(cut[-1].loss(x, targets), full_forward_loss(whole, inputs, targets))


def test_loss_near_uniform_at_init() -> None:
    inputs, targets = _batch()
    with torch.no_grad():
        loss = full_forward_loss(build_full_model(TINY, 2, seed=0), inputs, targets)
    assert abs(loss.item() - torch.log(torch.tensor(256.0)).item()) < 0.5


def test_stage_built_alone_equals_stage_in_full_model() -> None:
    full = build_full_model(TINY, 3, seed=7)
    for s in range(3):
        alone = build_stage(TINY, s, 3, seed=7)
        a, b = alone.state_dict(), full[s].state_dict()
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), name


def test_seed_changes_every_part() -> None:
    a = build_stage(TINY, 0, 1, seed=0).state_dict()
    b = build_stage(TINY, 0, 1, seed=1).state_dict()
    for name in (
        "wte.weight",
        "wpe.weight",
        "blocks.0.attn.c_attn.weight",
        "blocks.3.mlp.c_proj.weight",
        "head.weight",
    ):
        assert not torch.equal(a[name], b[name]), name


def test_gpt2_init_scales() -> None:
    stage = build_stage(get_preset("small"), 0, 1, seed=0)
    block = stage.blocks["0"]
    assert block.attn.c_attn.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert block.mlp.c_proj.weight.std().item() == pytest.approx(0.02 / 4, rel=0.05)  # 1/sqrt(2 * 8 layers)
    assert torch.count_nonzero(block.mlp.c_fc.bias) == 0


@pytest.mark.parametrize(("preset", "num_stages"), [("tiny", 1), ("tiny", 4), ("small", 3), ("swarm-ref", 4)])
def test_parameter_count_matches_preset(preset: str, num_stages: int) -> None:
    shape = get_preset(preset)
    stages = [PipelineStage(shape, s, num_stages) for s in range(num_stages)]
    assert sum(p.numel() for st in stages for p in st.parameters()) == get_preset(preset).parameter_count


def test_backward_through_stages_matches_whole_model() -> None:
    # What a SWARM backward call does: recompute the stage's forward from its input, backprop the output grad.
    inputs, targets = _batch()
    whole = build_full_model(TINY, 1, seed=5)[0]
    whole.loss(whole(inputs), targets).backward()
    first, last = build_full_model(TINY, 2, seed=5)
    hidden = first(inputs).detach().requires_grad_(True)
    last.loss(last(hidden), targets).backward()
    first(inputs).backward(hidden.grad)
    grads = {n: p.grad for st in (first, last) for n, p in st.named_parameters()}
    for name, p in whole.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, msg=name)


def test_save_and_load_stage(tmp_path) -> None:
    stage = build_stage(TINY, 1, 2, seed=0)
    path = tmp_path / "stage1.safetensors"
    save_stage(stage, path, {"step": "12", "stage": "1"})
    state, metadata = load_stage_state(path)
    assert metadata == {"step": "12", "stage": "1"}
    fresh = PipelineStage(TINY, 1, 2)
    fresh.load_state_dict(state)
    for name, t in stage.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], t), name


def test_state_bytes_round_trip() -> None:
    state = build_stage(TINY, 0, 2, seed=0).state_dict()
    data = state_to_bytes(state, {"step": "3"})
    back, metadata = state_from_bytes(data)
    assert metadata == {"step": "3"}
    assert back.keys() == state.keys()
    assert all(torch.equal(back[k], state[k]) for k in state)


@pytest.mark.parametrize("cut", [0, 7, 100, -10])
def test_state_from_bytes_rejects_malformed(cut: int) -> None:
    data = state_to_bytes({"w": torch.ones(4, 4)}, {})
    with pytest.raises(ValueError, match="malformed stage state"):
        state_from_bytes(data[:cut])


def test_state_from_bytes_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="malformed stage state"):
        state_from_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
