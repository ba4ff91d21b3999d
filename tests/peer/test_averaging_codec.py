"""The gradient exchange's codec: members of a stage end with the same bits, lossy codecs send less."""

from __future__ import annotations

import pytest
import torch

from peer.averaging import contribution_frame, sum_contributions
from peer.compression import get_codec
from peer.frame_headers import PushGrads
from peer.frames import decode_frame

PARAMETERS = 100_000
MEMBERS = (3, 7, 11)


def push_header(sender: int) -> PushGrads:
    return PushGrads(run_id=1, sender=sender, stage=0, step=4, attempt=0, counted=[f"4:{sender}"])


def exchange(codec: str) -> tuple[dict[int, torch.Tensor], dict[int, int]]:
    """Each member's summed gradient after an all-to-all exchange, and each member's push size."""
    gen = torch.Generator().manual_seed(0)
    grads = {m: torch.randn(PARAMETERS, generator=gen) * (m + 1) for m in MEMBERS}
    frames: dict[int, bytes] = {}
    own: dict[int, torch.Tensor] = {}
    for member, g in grads.items():
        frames[member], own[member] = contribution_frame(push_header(member), g, codec)
    sums = {}
    for member in MEMBERS:
        # What this member holds: its own decoded contribution and the others' frames as received.
        held = {member: own[member]}
        for sender in MEMBERS:
            if sender != member:
                _, tensors = decode_frame(frames[sender], max_bytes=len(frames[sender]))
                held[sender] = tensors["grads"]
        sums[member] = sum_contributions(held)
    return sums, {m: len(f) for m, f in frames.items()}


@pytest.mark.parametrize("codec", ["none", "float16", "int8"])
def test_members_sum_identical_bits(codec: str) -> None:
    sums, _ = exchange(codec)
    first = sums[MEMBERS[0]]
    for member in MEMBERS[1:]:
        assert torch.equal(sums[member], first), f"member {member} summed different bits with {codec}"


@pytest.mark.parametrize("codec", ["none", "float16", "int8"])
def test_a_codec_is_lossless_exactly_when_it_gives_back_the_bits_it_was_given(codec: str) -> None:
    """A member adds its own sum as encoded only where the codec says decoding would change it."""
    grads = torch.randn(PARAMETERS, generator=torch.Generator().manual_seed(1))
    frame, own = contribution_frame(push_header(3), grads, codec)
    _, received = decode_frame(frame, max_bytes=len(frame))
    assert torch.equal(own, received["grads"])
    assert get_codec(codec).lossless == torch.equal(received["grads"], grads)


def test_uncompressed_sum_is_exact() -> None:
    sums, _ = exchange("none")
    gen = torch.Generator().manual_seed(0)
    grads = {m: torch.randn(PARAMETERS, generator=gen) * (m + 1) for m in MEMBERS}
    assert torch.equal(sums[MEMBERS[0]], torch.stack([grads[m] for m in sorted(MEMBERS)]).sum(dim=0))


def test_lossy_sum_is_close_to_exact() -> None:
    exact, _ = exchange("none")
    for codec, tolerance in (("float16", 1e-3), ("int8", 5e-2)):
        lossy, _ = exchange(codec)
        error = (lossy[MEMBERS[0]] - exact[MEMBERS[0]]).norm() / exact[MEMBERS[0]].norm()
        assert error < tolerance, f"{codec}: relative error {error:.4f}"


def test_compressed_pushes_are_smaller() -> None:
    _, plain = exchange("none")
    _, half = exchange("float16")
    _, int8 = exchange("int8")
    for member in MEMBERS:
        assert 1.95 < plain[member] / half[member] <= 2.0
        assert 3.9 < plain[member] / int8[member] <= 4.0
