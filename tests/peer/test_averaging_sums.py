"""A stage's summed gradient and the norms members report: the same bits from every member."""

from __future__ import annotations

import math

import torch

from peer.averaging import Contribution, norm_sq, sum_contributions, summarize
from peer.butterfly import DOT_CHUNK


def contributions(k: int, n: int = 10_001) -> dict[int, Contribution]:
    generator = torch.Generator().manual_seed(k)
    # Senders out of order: every member must add in sender order whatever order they arrived in.
    return {
        sender: Contribution(grads=torch.randn(n, generator=generator), counted=[f"mb{sender}"])
        for sender in (7, 3, 11, 5, 2)[:k]
    }


def test_the_sum_is_the_contributions_added_in_sender_order_and_leaves_them_untouched():
    held = contributions(5)
    before = {sender: c.grads.clone() for sender, c in held.items()}
    total = sum_contributions({sender: c.grads for sender, c in held.items()})
    expected = held[2].grads + held[3].grads + held[5].grads + held[7].grads + held[11].grads
    assert torch.equal(total, expected)
    assert all(torch.equal(held[s].grads, before[s]) for s in held)


def test_members_receiving_contributions_in_any_order_hold_the_same_bits():
    held = contributions(5)
    grads = {sender: c.grads for sender, c in held.items()}
    reversed_arrival = dict(reversed(list(grads.items())))
    assert torch.equal(sum_contributions(grads), sum_contributions(reversed_arrival))


def test_norms_are_float64_sums_of_squares():
    held = contributions(3)
    total, total_norm_sq, norms = summarize(held)
    for sender, c in held.items():
        assert math.isclose(norms[sender], float(c.grads.double().square().sum()), rel_tol=1e-12)
    assert math.isclose(total_norm_sq, float(total.double().square().sum()), rel_tol=1e-12)
    assert norm_sq(torch.zeros(0)) == 0.0


def test_a_norm_over_many_chunks_and_a_ragged_tail_is_the_float64_sum_of_squares():
    generator = torch.Generator().manual_seed(0)
    # A few large values among many small ones: one float32 dot is off by ~1e-6 here.
    t = torch.randn(5 * DOT_CHUNK + 777, generator=generator) * 1e-3
    t[::97] *= 1e4
    assert math.isclose(norm_sq(t), float(t.double().square().sum()), rel_tol=1e-12)
    # Any shape: the norm of its elements.
    assert math.isclose(
        norm_sq(t[: 4 * DOT_CHUNK].view(64, -1)),
        float(t[: 4 * DOT_CHUNK].double().square().sum()),
        rel_tol=1e-12,
    )


def test_a_lone_members_sum_is_its_contribution():
    [(sender, only)] = contributions(1).items()
    total, total_norm_sq, norms = summarize({sender: only})
    assert total is only.grads and total_norm_sq == norms[sender]
