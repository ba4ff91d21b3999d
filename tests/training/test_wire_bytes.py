"""The real data-plane frame of one demo-shaped activation is much smaller with int8 compression."""

from __future__ import annotations

import torch

from peer.frame_headers import ForwardCall
from peer.frames import decode_frame, encode_frame

torch.set_num_threads(1)

# The demo's defaults: microbatch 8, seq 64, tiny preset (d_model 64); a stage-1 forward_backward call.
MICROBATCH, SEQ_LEN, D_MODEL = 8, 64, 64


def _frame(x: torch.Tensor, codec: str) -> bytes:
    header = ForwardCall(
        run_id=1,
        sender=3,
        stage=1,
        step=12,
        microbatch_id="s12-a1b2c3m7",
        samples=MICROBATCH,
        timeout_s=60.0,
    )
    return encode_frame(header, {"x": x}, codec)


def test_int8_activation_frame_is_at_least_3_5x_smaller() -> None:
    x = torch.randn(MICROBATCH, SEQ_LEN, D_MODEL, generator=torch.Generator().manual_seed(0))
    plain = _frame(x, "none")
    compressed = _frame(x, "int8")
    assert len(plain) > x.numel() * 4  # the raw float32 payload plus a header
    assert len(plain) / len(compressed) >= 3.5, (len(plain), len(compressed))
    # And it is still the same activation, within int8 quantization error.
    _, out = decode_frame(compressed, max_bytes=1 << 24)
    assert out["x"].shape == x.shape
    assert (out["x"] - x).abs().max() <= 0.05 * x.abs().max()
