from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from peer.frame_headers import (
    MAX_ERROR_CHARS,
    MAX_ID,
    BackwardCall,
    BackwardReply,
    ErrorReply,
    FetchState,
    ForwardBackwardCall,
    ForwardCall,
    ForwardReply,
    FrameHeader,
    GradsAck,
    LossReply,
    PushGrads,
    StateReply,
)
from peer.frames import (
    MAGIC,
    MAX_HEADER_BYTES,
    PREFIX_SIZE,
    FrameError,
    all_finite,
    check_tensor,
    decode_frame,
    decode_payload,
    encode_frame,
    parse_header,
    read_prefix,
)

torch.set_num_threads(1)

LIMIT = 1 << 24
NO_SIGNATURE = bytes(64)
ENVELOPE: dict[str, Any] = {"run_id": 3, "sender": 9, "receiver": 4, "counter": 1}
CALL: dict[str, Any] = {
    **ENVELOPE,
    "stage": 1,
    "step": 5,
    "microbatch_id": "7:42",
    "samples": 2,
    "timeout_s": 60.0,
}
FORWARD = ForwardCall(**CALL)
FIELDS: dict[str, Any] = {**CALL, "kind": "forward"}
"""The forward call's header as it travels, for hand-made frames."""


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
    header, got = decode_frame(encode_frame(FORWARD, tensors, codec), max_bytes=LIMIT)
    assert isinstance(header, ForwardCall)
    assert header.model_dump(exclude={"tensors"}) == FORWARD.model_dump(exclude={"tensors"})
    assert [m.name for m in header.tensors] == list(tensors)
    assert {m.name: m.codec for m in header.tensors}["ids"] == "none"
    for name, t in tensors.items():
        assert got[name].shape == t.shape and got[name].dtype == t.dtype
        tol = 0.0 if codec == "none" else 0.05
        torch.testing.assert_close(got[name].float(), t.float(), atol=tol, rtol=tol)
    assert torch.equal(got["ids"], tensors["ids"])


EVERY_KIND: list[FrameHeader] = [
    FORWARD,
    BackwardCall(**CALL),
    ForwardBackwardCall(**CALL),
    PushGrads(**ENVELOPE, stage=1, step=5, attempt=2, counted=["7:40", "7:41"]),
    FetchState(**ENVELOPE, stage=0, step=5),
    ForwardReply(run_id=3, sender=4),
    BackwardReply(run_id=3, sender=4),
    LossReply(run_id=3, sender=4, loss=5.5),
    GradsAck(run_id=3, sender=4),
    StateReply(run_id=3, sender=4, step=5),
    ErrorReply(run_id=3, sender=4, error="stage busy"),
]


@pytest.mark.parametrize("header", EVERY_KIND, ids=lambda h: h.kind)
def test_every_kind_round_trips(header: FrameHeader) -> None:
    decoded, tensors = decode_frame(encode_frame(header), max_bytes=LIMIT)
    assert type(decoded) is type(header) and decoded == header and tensors == {}


def test_kinds_are_distinct() -> None:
    assert len({h.kind for h in EVERY_KIND}) == len(EVERY_KIND)


def test_nan_loss_survives() -> None:
    header, _ = decode_frame(encode_frame(LossReply(run_id=3, sender=4, loss=math.nan)), max_bytes=LIMIT)
    assert isinstance(header, LossReply) and math.isnan(header.loss)


def test_streaming_reader_knows_the_size_after_the_header() -> None:
    data = encode_frame(FORWARD, _tensors(), "int8")
    header_len = read_prefix(data[:PREFIX_SIZE])
    header = parse_header(data[PREFIX_SIZE : PREFIX_SIZE + header_len], max_bytes=LIMIT)
    assert PREFIX_SIZE + header_len + header.payload_bytes == len(data)
    assert decode_payload(header, data[PREFIX_SIZE + header_len :]).keys() == _tensors().keys()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ForwardCall(**{**CALL, "samples": 0}), "greater than or equal to 1"),
        (lambda: PushGrads(**ENVELOPE, stage=1, step=5, attempt=0), "counted"),
        (lambda: FetchState(**ENVELOPE, stage=1, step=5, samples=2), "Extra inputs"),
        (lambda: ErrorReply(run_id=3, sender=4, error="x" * (MAX_ERROR_CHARS + 1)), "at most"),
    ],
)
def test_the_sender_cannot_build_a_bad_header(make: Any, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        make()


def _frame(header: dict[str, Any], payload: bytes = b"") -> bytes:
    body = json.dumps(header).encode()
    return MAGIC + struct.pack(">I", len(body)) + NO_SIGNATURE + body + payload


def _meta(**overrides: Any) -> dict[str, Any]:
    return {"name": "x", "shape": [2, 3], "dtype": "float32", "codec": "none", "nbytes": 24, **overrides}


def _with(*metas: dict[str, Any]) -> dict[str, Any]:
    return {**FIELDS, "tensors": list(metas)}


VALID = encode_frame(FORWARD, {"x": torch.ones(2, 3)})
NAN = struct.pack("<f", math.nan)
INF16 = struct.pack("<e", math.inf)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"SWH", "shorter than its 72-byte prefix"),
        (b"HTTP" + VALID[4:], "bad magic b'HTTP'"),
        (
            MAGIC + struct.pack(">I", MAX_HEADER_BYTES + 1) + NO_SIGNATURE + b"{}",
            f"over the {MAX_HEADER_BYTES}-byte limit",
        ),
        (MAGIC + struct.pack(">I", 100) + NO_SIGNATURE + b"{}", "truncated"),
        (_frame({}), "invalid frame header: header: Unable to extract tag using discriminator 'kind'"),
        (MAGIC + struct.pack(">I", 5) + NO_SIGNATURE + b"{nope", "invalid frame header"),
        (MAGIC + struct.pack(">I", 2) + NO_SIGNATURE + b"\xff\xfe", "invalid frame header"),
        (_frame({**FIELDS, "kind": "shutdown"}), "Input tag 'shutdown' found using 'kind' does not match"),
        (VALID[:-1], "payload is 23 bytes but its header declares 24"),
        (VALID + b"\x00", "payload is 25 bytes but its header declares 24"),
        (_frame(_with(_meta(dtype="int32"))), "forward.tensors.0.dtype: Input should be"),
        (_frame(_with(_meta(codec="zstd")), b"\x00" * 24), "unknown codec 'zstd'"),
        (
            _frame(_with(_meta(nbytes=20)), b"\x00" * 20),
            "20 bytes declared but shape [2, 3] of float32 is 24",
        ),
        (_frame(_with(_meta(shape=[-2, -3])), b"\x00" * 24), "negative dimension"),
        (
            _frame(_with(_meta(nbytes=-1))),
            "forward.tensors.0.nbytes: Input should be greater than or equal to 0",
        ),
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


def _without(header: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in header.items() if k != name}


FETCH: dict[str, Any] = {**ENVELOPE, "kind": "fetch_state", "stage": 1, "step": 5}
ERROR: dict[str, Any] = {"run_id": 3, "sender": 4, "kind": "error", "error": "busy"}


@pytest.mark.parametrize(
    ("header", "message"),
    [
        # Another kind's fields:
        ({**FIELDS, "counted": ["7:40"]}, "forward.counted: Extra inputs are not permitted"),
        ({**FETCH, "samples": 2}, "fetch_state.samples: Extra inputs are not permitted"),
        ({**ERROR, "loss": 1.0}, "error.loss: Extra inputs are not permitted"),
        ({**FIELDS, "kind": "push_grads"}, "push_grads.attempt: Field required"),
        ({**FIELDS, "kind": "forward_backward_reply"}, "forward_backward_reply.loss: Field required"),
        # A missing field:
        (_without(FIELDS, "samples"), "forward.samples: Field required"),
        (_without(FIELDS, "timeout_s"), "forward.timeout_s: Field required"),
        (_without(FETCH, "step"), "fetch_state.step: Field required"),
        (_without(ERROR, "error"), "error.error: Field required"),
        # Oversized values:
        ({**FIELDS, "microbatch_id": "m" * 1000}, "forward.microbatch_id: String should have at most 256"),
        ({**FIELDS, "run_id": MAX_ID + 1}, "forward.run_id: Input should be less than or equal to"),
        ({**FIELDS, "samples": 1 << 30}, "forward.samples: Input should be less than or equal to"),
        ({**FIELDS, "timeout_s": 1e12}, "forward.timeout_s: Input should be less than or equal to"),
        ({**FIELDS, "counter": -1}, "forward.counter: Input should be greater than or equal to 0"),
        ({**FIELDS, "ticket": {"run_id": 3}}, "forward.ticket.peer_id: Field required"),
        (
            {**ERROR, "error": "e" * (MAX_ERROR_CHARS + 1)},
            f"error.error: String should have at most {MAX_ERROR_CHARS}",
        ),
        (_with(_meta(shape=[1] * 9, nbytes=4)), "forward.tensors.0.shape: List should have at most 8"),
        # Wrong-typed values:
        ({**FIELDS, "samples": "2"}, "forward.samples: Input should be a valid integer"),
        ({**FIELDS, "step": 5.0}, "forward.step: Input should be a valid integer"),
        ({**FIELDS, "sender": True}, "forward.sender: Input should be a valid integer"),
        ({**FIELDS, "stage": -1}, "forward.stage: Input should be greater than or equal to 0"),
        ({**FIELDS, "timeout_s": math.nan}, "forward.timeout_s: Input should be a finite number"),
        ({**FIELDS, "tensors": {"x": 1}}, "forward.tensors: Input should be a valid array"),
        (
            {**FETCH, "kind": "push_grads", "attempt": 0, "counted": "7:40"},
            "push_grads.counted: Input should be a valid array",
        ),
        (
            {"run_id": 3, "sender": 4, "kind": "forward_backward_reply", "loss": "low"},
            "loss: Input should be a valid number",
        ),
        ({**FIELDS, "kind": 1}, "Input tag '1' found using 'kind' does not match"),
    ],
)
def test_header_rejections(header: dict[str, Any], message: str) -> None:
    with pytest.raises(FrameError) as info:
        decode_frame(_frame(header), max_bytes=LIMIT)
    assert str(info.value).startswith("invalid frame header: ")
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
        encode_frame(FORWARD, tensors, codec)


def test_encode_rejects_oversized_header() -> None:
    with pytest.raises(FrameError, match="frame header is"):
        encode_frame(
            PushGrads(**ENVELOPE, stage=1, step=5, attempt=0, counted=["m" * 200] * (MAX_HEADER_BYTES // 200))
        )


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


@pytest.mark.parametrize(
    ("values", "dtype", "finite"),
    [
        ([1.0, -2.0, 3.5], torch.float32, True),
        ([], torch.float32, True),
        ([1.0, math.nan], torch.float32, False),
        ([math.inf, 1.0], torch.float32, False),
        ([math.inf, -math.inf], torch.float32, False),
        # Finite values whose sum overflows: the exact check decides.
        ([3e38] * 4, torch.float32, True),
        ([60000.0] * 4, torch.float16, True),
        ([60000.0, math.inf], torch.float16, False),
        ([1.0, math.nan], torch.bfloat16, False),
    ],
)
def test_all_finite_agrees_with_the_elementwise_check(
    values: list[float], dtype: torch.dtype, finite: bool
) -> None:
    t = torch.tensor(values, dtype=dtype)
    assert all_finite(t) is finite
    assert finite == bool(torch.isfinite(t).all())
