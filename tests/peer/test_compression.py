from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
import torch

from peer.compression import CODECS, INT8_BLOCKSIZE, BlockwiseInt8, codec_for, get_codec
from swarmhub.wire import CompressionName

torch.set_num_threads(1)

SHAPE = (8, 64, 256)


def _activations(scale: float = 3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(SHAPE, generator=g) * scale


def _python(code: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)


def test_first_int8_use_is_quiet() -> None:
    # bitsandbytes logs a warning about its optional `kernels` package at import; peers should not show it.
    done = _python(
        "import torch; from peer.compression import get_codec; get_codec('int8').encode(torch.ones(9))"
    )
    assert "kernels" not in done.stderr + done.stdout


def test_a_peer_starts_without_importing_bitsandbytes() -> None:
    """Its import costs ~2 s of CPU, paid only by a run that compresses to int8."""
    done = _python("import sys, peer.runtime; print('bitsandbytes' in sys.modules)")
    assert done.stdout.strip() == "False"


def test_every_wire_compression_has_a_codec() -> None:
    assert set(get_args(CompressionName)) | {"float16"} <= CODECS.keys()
    assert all(name == codec.name for name, codec in CODECS.items())


@pytest.mark.parametrize(
    ("codec", "max_rel_error", "min_ratio"),
    [("none", 0.0, 1.0), ("float16", 1e-3, 2.0), ("int8", 0.02, 3.5)],
)
def test_codec_error_and_size(codec: str, max_rel_error: float, min_ratio: float) -> None:
    x = _activations()
    data = CODECS[codec].encode(x)
    y = CODECS[codec].decode(data, list(SHAPE), torch.float32)
    assert y.shape == SHAPE and y.dtype == torch.float32
    assert ((y - x).norm() / x.norm()).item() <= max_rel_error
    assert x.numel() * 4 / len(data) >= min_ratio


def test_int8_error_bounded_per_block() -> None:
    # The dynamic code book's widest gap is < 2/127 of a block's absmax: rounding stays within absmax/127.
    x = _activations()
    data = CODECS["int8"].encode(x)
    y = CODECS["int8"].decode(data, list(SHAPE), torch.float32)
    blocks_x = x.reshape(-1, INT8_BLOCKSIZE)
    error = (y.reshape(-1, INT8_BLOCKSIZE) - blocks_x).abs().amax(dim=1)
    absmax = blocks_x.abs().amax(dim=1)
    assert torch.all(error <= absmax / 127)


def test_int8_bytes_per_element() -> None:
    numel = 8 * 64 * 256
    assert len(CODECS["int8"].encode(_activations())) == 16 + 4 * (numel // INT8_BLOCKSIZE) + numel


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(0,), (1,), (3, 5), (2, 3000)])
def test_round_trip_shapes_and_dtypes(codec: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x = torch.linspace(-2, 2, torch.Size(shape).numel()).reshape(shape).to(dtype)
    y = CODECS[codec].decode(CODECS[codec].encode(x), list(shape), dtype)
    assert y.shape == shape and y.dtype == dtype
    torch.testing.assert_close(y.float(), x.float(), atol=0.03, rtol=0.02)


def test_float16_clamps_instead_of_overflowing() -> None:
    x = torch.tensor([1e6, -1e6, 1.0])
    y = CODECS["float16"].decode(CODECS["float16"].encode(x), [3], torch.float32)
    assert torch.isfinite(y).all()
    assert y[0].item() == torch.finfo(torch.float16).max


def test_integer_tensors_travel_uncompressed() -> None:
    ids = torch.randint(0, 256, (4, 32))
    for requested in CODECS:
        codec = codec_for(ids.dtype, requested)
        assert codec.name == "none"
        assert torch.equal(codec.decode(codec.encode(ids), [4, 32], torch.int64), ids)
    assert codec_for(torch.float32, "int8").name == "int8"


def test_unknown_codec() -> None:
    with pytest.raises(ValueError, match="unknown codec 'zstd'"):
        get_codec("zstd")
    with pytest.raises(ValueError, match="blocksize"):
        BlockwiseInt8(blocksize=1000)


def _int8_buffer(numel: int = 5000) -> bytes:
    return CODECS["int8"].encode(torch.randn(numel))


def _header(numel: int, blocksize: int, blocks: int) -> bytes:
    return struct.pack("<QII", numel, blocksize, blocks)


@pytest.mark.parametrize(
    ("codec", "data", "shape", "message"),
    [
        ("none", b"\x00" * 10, [3], "10 bytes do not hold shape"),
        ("none", b"\x00" * 12, [-3], "negative dimension"),
        ("float16", b"\x00" * 5, [3], "5 bytes do not hold shape"),
        ("int8", b"\x00" * 7, [3], "shorter than its 16-byte header"),
        ("int8", _int8_buffer()[:-1], [5000], "header implies"),
        ("int8", _int8_buffer() + b"\x00", [5000], "header implies"),
        ("int8", _int8_buffer(), [5001], "holds 5000 elements"),
        ("int8", _header(10, 1000, 1) + b"\x00" * 14, [10], "unsupported blocksize 1000"),
        ("int8", _header(5000, 2048, 2) + b"\x00" * 5008, [5000], "2 absmax blocks"),
        (
            "int8",
            _header(3, 2048, 1) + struct.pack("<f", float("nan")) + b"\x00" * 3,
            [3],
            "non-finite absmax",
        ),
        ("int8", _header(3, 2048, 1) + struct.pack("<f", -1.0) + b"\x00" * 3, [3], "negative"),
    ],
)
def test_malformed_buffers_raise_value_error(codec: str, data: bytes, shape: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CODECS[codec].decode(data, shape, torch.float32)
