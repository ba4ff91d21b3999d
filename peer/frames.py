"""Data-plane message framing: a small typed header, then raw tensor bytes.

Layout: MAGIC (4 bytes), header length (uint32, big-endian), the sender's Ed25519 signature over
header and payload (64 bytes, a reply's bound to the call it answers: `peer/frame_auth.py`; zeros in
unsigned frames), header JSON (utf-8; one of the
kinds in `peer/frame_headers.py`), then each tensor's bytes back to back in header order. The header
declares every tensor's byte count, so a reader knows the whole frame's size after reading the
header (`declared_size`) and the payload is never parsed as text.
Everything here treats a frame as hostile: any inconsistency raises `FrameError` with a message
saying what was wrong.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from pydantic import ValidationError
from torch import Tensor

from .compression import CODECS, Buffer, codec_for
from .frame_auth import SIGNATURE_BYTES, AuthError, FrameSigner, SenderVerifier, SentCall
from .frame_headers import HEADERS, FrameHeader, Reply, TensorMeta

MAGIC = b"SWH2"
_PREFIX = struct.Struct(f">4sI{SIGNATURE_BYTES}s")
PREFIX_SIZE = _PREFIX.size
# Room for a whole stage state (model + optimizer: ~1,200 tensor entries for the large preset) and long
# lists of counted microbatch ids, while a hostile peer still cannot make us buffer much text.
MAX_HEADER_BYTES = 1024 * 1024

FrameLimit = int | Callable[[str], int]
"""A bound on a whole frame: one for every kind, or one per header kind (`swarmhub/resources.py`
`FrameLimits.for_kind`), so a stage call is held to its activations' size and only a state to a state's."""

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "uint8": torch.uint8,
}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class FrameError(ValueError):
    """A frame that cannot be accepted; the message says why."""


def all_finite(t: Tensor) -> bool:
    """Whether every value of a float tensor is finite. A finite sum proves it (a NaN or an Inf in the
    sum's inputs makes it NaN or Inf) in one read pass, ~15x faster than an elementwise check; only a
    sum that overflowed or found a bad value pays for the exact check."""
    return math.isfinite(float(t.sum())) or bool(torch.isfinite(t).all())


@dataclass
class Payload:
    """A frame's tensors, encoded once: several frames (one per receiver) may carry them."""

    metas: list[TensorMeta]
    blobs: list[bytes]
    _digest: bytes | None = field(default=None, repr=False)

    @property
    def digest(self) -> bytes:
        if self._digest is None:
            h = hashlib.sha256()
            for blob in self.blobs:
                h.update(blob)
            self._digest = h.digest()
        return self._digest


def encode_payload(tensors: dict[str, Tensor] | None, codec: str = "none") -> Payload:
    """`tensors` encoded with `codec` (float tensors) or raw (integer ones)."""
    if codec not in CODECS:
        raise FrameError(f"unknown codec {codec!r}; known: {', '.join(CODECS)}")
    metas: list[TensorMeta] = []
    blobs: list[bytes] = []
    for name, t in (tensors or {}).items():
        if t.dtype not in _DTYPE_NAMES:
            raise FrameError(f"tensor {name!r} has dtype {t.dtype}; frames carry {', '.join(DTYPES)}")
        if t.dtype.is_floating_point and not all_finite(t):
            raise FrameError(f"tensor {name!r} has NaN or Inf values; the receiver would reject it")
        c = codec_for(t.dtype, codec)
        blob = c.encode(t)
        metas.append(
            TensorMeta(
                name=name, shape=list(t.shape), dtype=_DTYPE_NAMES[t.dtype], codec=c.name, nbytes=len(blob)
            )
        )
        blobs.append(blob)
    return Payload(metas=metas, blobs=blobs)


def assemble(
    header: FrameHeader, payload: Payload, signer: FrameSigner | None = None, receiver: int = 0
) -> bytes:
    """A whole frame: `header` with `payload`'s metadata; with `signer`, a call addressed to
    `receiver`, numbered, ticketed and signed, else unsigned (measurements, tests, refusals)."""
    if signer is not None:
        return assemble_call(header, payload, signer, receiver)[0]
    header_bytes = _header_bytes(header, payload, {})
    return _pack(header_bytes, bytes(SIGNATURE_BYTES), payload)


def assemble_call(
    header: FrameHeader, payload: Payload, signer: FrameSigner, receiver: int
) -> tuple[bytes, SentCall]:
    """A call to `receiver`, signed by `signer`, and what its reply must answer (`open_reply`)."""
    envelope = signer.envelope(receiver)
    header_bytes = _header_bytes(header, payload, envelope)
    signature = signer.sign(header_bytes, payload.digest)
    counter = envelope["counter"]
    assert isinstance(counter, int)
    return _pack(header_bytes, signature, payload), SentCall(receiver, counter, signature)


def assemble_reply(header: Reply, payload: Payload, signer: FrameSigner, call: OpenedFrame) -> bytes:
    """The answer to `call` (an authenticated one), signed by `signer` and bound to that call."""
    envelope = signer.reply_envelope(call.header.sender, call.header.counter)
    header_bytes = _header_bytes(header, payload, envelope)
    return _pack(header_bytes, signer.sign(header_bytes, payload.digest, call.signature), payload)


def _header_bytes(header: FrameHeader, payload: Payload, envelope: dict[str, object]) -> bytes:
    header_bytes = header.model_copy(update={"tensors": payload.metas} | envelope).model_dump_json().encode()
    if len(header_bytes) > MAX_HEADER_BYTES:
        raise FrameError(f"frame header is {len(header_bytes)} bytes, over the {MAX_HEADER_BYTES}-byte limit")
    return header_bytes


def _pack(header_bytes: bytes, signature: bytes, payload: Payload) -> bytes:
    return b"".join([_PREFIX.pack(MAGIC, len(header_bytes), signature), header_bytes, *payload.blobs])


def encode_frame(
    header: FrameHeader,
    tensors: dict[str, Tensor] | None = None,
    codec: str = "none",
    *,
    signer: FrameSigner | None = None,
    receiver: int = 0,
) -> bytes:
    return assemble(header, encode_payload(tensors, codec), signer, receiver)


def read_prefix(prefix: Buffer) -> int:
    """The header length announced by a frame's first PREFIX_SIZE bytes."""
    if len(prefix) < PREFIX_SIZE:
        raise FrameError(f"frame is {len(prefix)} bytes, shorter than its {PREFIX_SIZE}-byte prefix")
    magic, header_len, _ = _PREFIX.unpack_from(prefix)
    if magic != MAGIC:
        raise FrameError(f"bad magic {magic!r}, expected {MAGIC!r}: not a SwarmHub data-plane frame")
    if header_len > MAX_HEADER_BYTES:
        raise FrameError(f"frame header of {header_len} bytes is over the {MAX_HEADER_BYTES}-byte limit")
    return header_len


def parse_header(header_bytes: Buffer, *, max_bytes: FrameLimit) -> FrameHeader:
    """Validate a header; `max_bytes` bounds the whole frame, so a reader can refuse before the payload."""
    try:
        header = HEADERS.validate_json(bytes(header_bytes))
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'header'}: {err['msg']}" for err in e.errors()
        )
        raise FrameError(f"invalid frame header: {problems}") from None
    names = [t.name for t in header.tensors]
    if len(set(names)) != len(names):
        raise FrameError(f"frame header names a tensor twice: {names}")
    for meta in header.tensors:
        _check_meta(meta)
    total = PREFIX_SIZE + len(header_bytes) + header.payload_bytes
    limit = max_bytes if isinstance(max_bytes, int) else max_bytes(header.kind)
    if total > limit:
        raise FrameError(f"{header.kind} frame of {total} bytes is over the {limit}-byte limit")
    return header


def declared_size(head: Buffer, *, max_bytes: FrameLimit) -> int | None:
    """The whole frame's size as its prefix and header declare it, once `head` (the frame's first bytes
    so far) holds them; None while they have not all arrived. Raises FrameError as `parse_header` does."""
    if len(head) < PREFIX_SIZE:
        return None
    header_end = PREFIX_SIZE + read_prefix(head)
    if len(head) < header_end:
        return None
    header = parse_header(memoryview(head)[PREFIX_SIZE:header_end], max_bytes=max_bytes)
    return header_end + header.payload_bytes


def _check_meta(meta: TensorMeta) -> None:
    if meta.codec not in CODECS:
        raise FrameError(
            f"tensor {meta.name!r} uses unknown codec {meta.codec!r}; known: {', '.join(CODECS)}"
        )
    if any(d < 0 for d in meta.shape):
        raise FrameError(f"tensor {meta.name!r} has a negative dimension in shape {meta.shape}")
    dtype = DTYPES[meta.dtype]
    if not dtype.is_floating_point and meta.codec != "none":
        raise FrameError(f"integer tensor {meta.name!r} must travel uncompressed, not as {meta.codec!r}")
    if meta.codec == "none":
        expected = math.prod(meta.shape) * dtype.itemsize
        if meta.nbytes != expected:
            raise FrameError(
                f"tensor {meta.name!r}: {meta.nbytes} bytes declared but shape {meta.shape} of {meta.dtype} "
                f"is {expected} bytes"
            )


def decode_payload(header: FrameHeader, payload: Buffer) -> dict[str, Tensor]:
    """The tensors of a frame whose header has already been parsed."""
    if len(payload) != header.payload_bytes:
        raise FrameError(
            f"frame payload is {len(payload)} bytes but its header declares {header.payload_bytes}"
        )
    view = memoryview(payload)  # slices without copying; the codecs copy once into the tensor
    tensors: dict[str, Tensor] = {}
    offset = 0
    for meta in header.tensors:
        chunk = view[offset : offset + meta.nbytes]
        offset += meta.nbytes
        try:
            t = CODECS[meta.codec].decode(chunk, meta.shape, DTYPES[meta.dtype])
        except ValueError as e:
            raise FrameError(f"tensor {meta.name!r}: {e}") from None
        if t.is_floating_point() and not all_finite(t):
            raise FrameError(f"tensor {meta.name!r} has NaN or Inf values")
        tensors[meta.name] = t
    return tensors


@dataclass(frozen=True)
class OpenedFrame:
    """A frame whose header is parsed and whose payload is not decoded yet."""

    header: FrameHeader
    signature: bytes
    header_bytes: memoryview
    payload: memoryview


def open_frame(data: Buffer, *, max_bytes: FrameLimit) -> OpenedFrame:
    if isinstance(max_bytes, int) and len(data) > max_bytes:
        raise FrameError(f"frame of {len(data)} bytes is over the {max_bytes}-byte limit")
    header_len = read_prefix(data)
    if len(data) < PREFIX_SIZE + header_len:
        raise FrameError(
            f"frame is truncated: {len(data)} bytes, the header alone needs {PREFIX_SIZE + header_len}"
        )
    view = memoryview(data)
    header_bytes = view[PREFIX_SIZE : PREFIX_SIZE + header_len]
    header = parse_header(header_bytes, max_bytes=max_bytes)
    payload_len = len(data) - PREFIX_SIZE - header_len
    if payload_len != header.payload_bytes:
        raise FrameError(
            f"frame payload is {payload_len} bytes but its header declares {header.payload_bytes}"
        )
    return OpenedFrame(
        header=header,
        signature=bytes(view[PREFIX_SIZE - SIGNATURE_BYTES : PREFIX_SIZE]),
        header_bytes=header_bytes,
        payload=view[PREFIX_SIZE + header_len :],
    )


def decode_frame(data: Buffer, *, max_bytes: FrameLimit) -> tuple[FrameHeader, dict[str, Tensor]]:
    opened = open_frame(data, max_bytes=max_bytes)
    return opened.header, decode_payload(opened.header, opened.payload)


def open_reply(
    data: Buffer, *, max_bytes: FrameLimit, verifier: SenderVerifier, call: SentCall
) -> tuple[Reply, dict[str, Tensor]]:
    """The reply to `call`: raises FrameError for a malformed frame or AuthError unless the peer the
    call went to signed it for this call under a valid ticket (checked before the payload is decoded)."""
    opened = open_frame(data, max_bytes=max_bytes)
    header = opened.header
    verifier.check_reply(header, opened.signature, opened.header_bytes, opened.payload, call)
    if not isinstance(header, Reply):
        raise AuthError(f"peer {call.receiver} answered with a {header.kind} call, not a reply")
    return header, decode_payload(header, opened.payload)


def check_tensor(
    t: Tensor, shape: tuple[int | None, ...] | list[int | None], dtype: torch.dtype, *, name: str = "tensor"
) -> None:
    """Raise FrameError unless `t` has `dtype` and `shape` (None matches any size in that dimension)."""
    if t.dtype != dtype:
        raise FrameError(f"{name} has dtype {t.dtype}, expected {dtype}")
    if t.dim() != len(shape) or any(
        want is not None and got != want for got, want in zip(t.shape, shape, strict=True)
    ):
        want = "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"
        raise FrameError(f"{name} has shape {list(t.shape)}, expected {want}")
