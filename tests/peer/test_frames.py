from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
import torch

from peer.frames import (
    MAGIC,
    MAX_HEADER_BYTES,
    PREFIX_SIZE,
    FrameError,
    check_tensor,
    decode_frame,
    decode_payload,
    encode_frame,
    make_credential,
    parse_header,
    read_prefix,
    verify_credential,
)

torch.set_num_threads(1)

LIMIT = 1 << 24
FIELDS: dict[str, Any] = {
    "kind": "forward",
    "run_id": 3,
    "stage": 1,
    "microbatch_id": "7:42",
    "sender": 9,
    "credential": make_credential("run-key", 9),
    "step": 5,
}


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "hidden": torch.randn(2, 16, 64, generator=g),
        "grad": torch.randn(2, 16, 64, generator=g).half(),
        "ids": torch.randint(0, 256, (2, 16), generator=g),
    }


@pytest.mark.parametrize("codec", ["none", "float16", "int8"])
def test_round_trip(codec: str) -> None:
    tensors = _tensors()
    info = {"samples": 2, "loss": 5.5, "counted": ["7:40", "7:41"], "note": "x"}
    data = encode_frame(**FIELDS, attempt=1, tensors=tensors, codec=codec, info=info)
    header, got = decode_frame(data, max_bytes=LIMIT)
    assert (header.kind, header.run_id, header.stage, header.microbatch_id, header.sender, header.step) == (
        "forward",
        3,
        1,
        "7:42",
        9,
        5,
    )
    assert header.attempt == 1 and header.info == info and header.error is None
    assert [m.name for m in header.tensors] == list(tensors)
    assert {m.name: m.codec for m in header.tensors}["ids"] == "none"
    for name, t in tensors.items():
        assert got[name].shape == t.shape and got[name].dtype == t.dtype
        tol = 0.0 if codec == "none" else 0.05
        torch.testing.assert_close(got[name].float(), t.float(), atol=tol, rtol=tol)
    assert torch.equal(got["ids"], tensors["ids"])


def test_error_frame_without_tensors() -> None:
    header, tensors = decode_frame(
        encode_frame(**{**FIELDS, "kind": "error"}, error="stage busy"), max_bytes=LIMIT
    )
    assert header.kind == "error" and header.error == "stage busy" and tensors == {}


def test_nan_loss_in_info_survives() -> None:
    header, _ = decode_frame(encode_frame(**FIELDS, info={"loss": math.nan}), max_bytes=LIMIT)
    assert math.isnan(header.info["loss"])


def test_streaming_reader_knows_the_size_after_the_header() -> None:
    data = encode_frame(**FIELDS, tensors=_tensors(), codec="int8")
    header_len = read_prefix(data[:PREFIX_SIZE])
    header = parse_header(data[PREFIX_SIZE : PREFIX_SIZE + header_len], max_bytes=LIMIT)
    assert PREFIX_SIZE + header_len + header.payload_bytes == len(data)
    assert decode_payload(header, data[PREFIX_SIZE + header_len :]).keys() == _tensors().keys()


def test_extra_header_fields_are_ignored() -> None:
    header = {**FIELDS, "tensors": [], "from_the_future": [1, 2]}
    body = json.dumps(header).encode()
    decoded, _ = decode_frame(MAGIC + struct.pack(">I", len(body)) + body, max_bytes=LIMIT)
    assert decoded.step == 5


def _frame(header: dict[str, Any], payload: bytes = b"") -> bytes:
    body = json.dumps(header).encode()
    return MAGIC + struct.pack(">I", len(body)) + body + payload


def _meta(**overrides: Any) -> dict[str, Any]:
    return {"name": "x", "shape": [2, 3], "dtype": "float32", "codec": "none", "nbytes": 24, **overrides}


def _with(*metas: dict[str, Any]) -> dict[str, Any]:
    return {**FIELDS, "tensors": list(metas)}


VALID = encode_frame(**FIELDS, tensors={"x": torch.ones(2, 3)})
NAN = struct.pack("<f", math.nan)
INF16 = struct.pack("<e", math.inf)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"SWH", "shorter than its 8-byte prefix"),
        (b"HTTP" + VALID[4:], "bad magic b'HTTP'"),
        (MAGIC + struct.pack(">I", MAX_HEADER_BYTES + 1) + b"{}", f"over the {MAX_HEADER_BYTES}-byte limit"),
        (MAGIC + struct.pack(">I", 100) + b"{}", "truncated"),
        (_frame({}), "invalid frame header: kind: Field required"),
        (MAGIC + struct.pack(">I", 5) + b"{nope", "invalid frame header"),
        (MAGIC + struct.pack(">I", 2) + b"\xff\xfe", "invalid frame header"),
        (_frame({**FIELDS, "kind": "shutdown"}), "kind: Input should be"),
        (VALID[:-1], "payload is 23 bytes but its header declares 24"),
        (VALID + b"\x00", "payload is 25 bytes but its header declares 24"),
        (_frame(_with(_meta(dtype="int32"))), "tensors.0.dtype: Input should be"),
        (_frame(_with(_meta(codec="zstd")), b"\x00" * 24), "unknown codec 'zstd'"),
        (
            _frame(_with(_meta(nbytes=20)), b"\x00" * 20),
            "20 bytes declared but shape [2, 3] of float32 is 24",
        ),
        (_frame(_with(_meta(shape=[-2, -3])), b"\x00" * 24), "negative dimension"),
        (_frame(_with(_meta(nbytes=-1))), "nbytes: Input should be greater than or equal to 0"),
        (
            _frame(_with(_meta(dtype="int64", codec="int8", nbytes=6)), b"\x00" * 6),
            "must travel uncompressed",
        ),
        (_frame(_with(_meta(), _meta()), b"\x00" * 48), "names a tensor twice"),
        (_frame(_with(_meta(codec="int8", nbytes=8)), b"\x00" * 8), "tensor 'x': int8 buffer of 8 bytes"),
        (_frame(_with(_meta(shape=[2], nbytes=8)), NAN + b"\x00" * 4), "tensor 'x' has NaN or Inf"),
        (_frame(_with(_meta(shape=[1], dtype="float16", nbytes=2)), INF16), "tensor 'x' has NaN or Inf"),
        (_frame(_with(_meta(shape=[1 << 40], nbytes=1 << 42))), "over the 16777216-byte limit"),
    ],
)
def test_rejections(data: bytes, message: str) -> None:
    with pytest.raises(FrameError) as info:
        decode_frame(data, max_bytes=LIMIT)
    assert message in str(info.value)


def test_frame_over_max_bytes() -> None:
    with pytest.raises(FrameError, match="over the 100-byte limit"):
        decode_frame(VALID, max_bytes=100)


@pytest.mark.parametrize(
    ("tensors", "codec", "message"),
    [
        ({"x": torch.ones(2)}, "zstd", "unknown codec 'zstd'"),
        ({"x": torch.ones(2, dtype=torch.int32)}, "none", "has dtype torch.int32"),
        ({"x": torch.tensor([1.0, math.inf])}, "int8", "NaN or Inf"),
    ],
)
def test_encode_rejections(tensors: dict[str, torch.Tensor], codec: str, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        encode_frame(**FIELDS, tensors=tensors, codec=codec)


def test_encode_rejects_oversized_header() -> None:
    with pytest.raises(FrameError, match="frame header is"):
        encode_frame(**FIELDS, info={"counted": ["m" * 1000] * (MAX_HEADER_BYTES // 1000)})


def test_frame_error_is_a_value_error() -> None:
    assert issubclass(FrameError, ValueError)


def test_check_tensor() -> None:
    t = torch.zeros(2, 16, 64)
    check_tensor(t, (2, 16, 64), torch.float32)
    check_tensor(t, (None, None, 64), torch.float32)
    with pytest.raises(FrameError, match=r"hidden has shape \[2, 16, 64\], expected \[\*, \*, 32\]"):
        check_tensor(t, (None, None, 32), torch.float32, name="hidden")
    with pytest.raises(FrameError, match="expected"):
        check_tensor(t, (2, 16), torch.float32)
    with pytest.raises(FrameError, match=r"dtype torch\.float32, expected torch\.int64"):
        check_tensor(t, (2, 16, 64), torch.int64)


def test_credentials() -> None:
    credential = make_credential("run-key", 9)
    assert len(credential) == 64 and credential == make_credential("run-key", 9)
    assert verify_credential("run-key", 9, credential)
    assert not verify_credential("run-key", 10, credential)  # another peer's credential
    assert not verify_credential("other-key", 9, credential)  # another run's
    assert not verify_credential("run-key", 9, credential[:-1] + ("1" if credential[-1] == "0" else "0"))
    assert not verify_credential("run-key", 9, "")
    assert not verify_credential("run-key", 9, "ü" * 64)
