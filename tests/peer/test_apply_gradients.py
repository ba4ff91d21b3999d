"""The optimizer step takes the averaged gradient as CPU slices of one flat sum and copies each once,
onto its parameter's device and dtype: the sum is left as it was, and the step is the one that
explicit per-parameter copies give."""

from __future__ import annotations

import torch

from peer.model import build_stage
from peer.stage_worker import StageWorker, apply_gradients, make_optimizer
from swarmhub.presets import get_preset
from tests.run_specs import run_spec


def test_apply_step_equals_a_step_with_copied_gradients_and_leaves_the_sum_alone() -> None:
    preset = get_preset("tiny")
    for optimizer in ("adamw", "sgd"):
        run = run_spec(optimizer=optimizer, learning_rate=1e-2, weight_decay=0.1)
        worker = StageWorker(build_stage(preset, 1, 2, seed=0), run, 0, torch.device("cpu"))
        reference = build_stage(preset, 1, 2, seed=0)
        reference_optimizer = make_optimizer(run, list(reference.parameters()))
        summed = torch.randn(worker.parameter_count, generator=torch.Generator().manual_seed(3))
        before = summed.clone()
        for _ in range(2):
            worker.apply_step(summed, samples=4, learning_rate=run.learning_rate, grad_scale=0.5)
            averaged = before * (0.5 / 4)
            grads, offset = [], 0
            for param in reference.parameters():
                grads.append(averaged[offset : offset + param.numel()].view_as(param).clone())
                offset += param.numel()
            apply_gradients(reference, reference_optimizer, grads, run.learning_rate)
        assert torch.equal(summed, before), optimizer
        for got, want in zip(worker.module.parameters(), reference.parameters(), strict=True):
            assert torch.equal(got, want), optimizer


def test_apply_gradients_copies_onto_the_parameters_dtype_without_aliasing() -> None:
    module = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(module.parameters(), lr=1.0)
    flat = torch.arange(8, dtype=torch.float64)
    grads = [flat[:6].view(2, 3), flat[6:]]
    weight, bias = module.weight.detach().clone(), module.bias.detach().clone()
    apply_gradients(module, optimizer, grads, learning_rate=0.5)
    assert torch.equal(flat, torch.arange(8, dtype=torch.float64))
    assert module.weight.dtype == torch.float32
    assert torch.allclose(module.weight, weight - 0.5 * flat[:6].view(2, 3).float())
    assert torch.allclose(module.bias, bias - 0.5 * flat[6:].float())
