"""Injected faults (`--fault`): what each form parses to and what a faulty peer does with it."""

from __future__ import annotations

import random

import pytest
import torch

from peer.faults import Fault


@pytest.mark.parametrize(
    ("text", "kind", "amount"),
    [
        ("noise:0.05", "noise", 0.05),
        ("noise:1", "noise", 1.0),
        ("scale:50", "scale", 50.0),
        ("part:1.5", "part", 1.5),
        ("stale", "stale", 0.0),
    ],
)
def test_accepted_forms(text: str, kind: str, amount: float) -> None:
    fault = Fault.parse(text)
    assert (fault.kind, fault.amount) == (kind, amount)
    assert Fault.parse(fault.describe()).describe() == fault.describe()


@pytest.mark.parametrize(
    "text",
    ["", "noise", "noise:", "noise:0", "noise:1.5", "noise:-0.1", "noise:nan", "noise:x",
     "scale:0", "scale:-2", "part:0", "part:inf", "stale:3", "flip:0.5", "Noise:0.1"],
)  # fmt: skip
def test_refused_forms_name_the_accepted_ones(text: str) -> None:
    with pytest.raises(ValueError) as info:
        Fault.parse(text)
    message = str(info.value)
    assert f"--fault {text!r}" in message
    assert "noise:FRACTION (0 < FRACTION <= 1), scale:FACTOR or part:FACTOR (FACTOR > 0), or stale" in message


def test_noise_corrupts_about_its_fraction_of_results() -> None:
    torch.manual_seed(0)
    fault = Fault(kind="noise", amount=0.25, rng=random.Random(7))
    y = torch.randn(4, 8)
    draws = 4000
    corrupted = sum(not torch.equal(fault.corrupt_outputs({"y": y})["y"], y) for _ in range(draws))
    # Binomial(4000, 0.25): mean 1000, sd ~27; the bound is about 5 sd either side.
    assert 860 < corrupted < 1140


def test_a_corrupted_result_is_as_far_off_as_the_result_is_large() -> None:
    torch.manual_seed(0)
    y = torch.randn(8, 64) * 30
    noisy = Fault(kind="noise", amount=1.0, rng=random.Random(0)).corrupt_outputs({"y": y, "z": y / 1000})
    for name, original in {"y": y, "z": y / 1000}.items():
        assert 0.5 < float((noisy[name] - original).norm() / original.norm()) < 2.0


def test_noise_leaves_empty_results_and_other_faults_untouched() -> None:
    assert Fault(kind="noise", amount=1.0).corrupt_outputs({}) == {}
    y = {"y": torch.ones(3)}
    assert Fault.parse("scale:50").corrupt_outputs(y) is y
    assert Fault.parse("stale").corrupt_outputs(y) is y


def test_scale_multiplies_the_contribution_only_for_a_scale_fault() -> None:
    grads = torch.tensor([1.0, -2.0, 0.5])
    assert torch.equal(Fault.parse("scale:50").scale_contribution(grads), grads * 50)
    assert torch.equal(Fault.parse("noise:0.5").scale_contribution(grads), grads)
    assert torch.equal(Fault.parse("stale").scale_contribution(grads), grads)


def test_only_a_stale_fault_keeps_stale_weights() -> None:
    assert Fault.parse("stale").keeps_stale_weights
    assert not Fault.parse("noise:0.05").keeps_stale_weights
    assert not Fault.parse("scale:50").keeps_stale_weights
