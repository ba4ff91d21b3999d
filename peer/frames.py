"""Data-plane message framing: a small typed header, then raw tensor bytes.

Layout: MAGIC (4 bytes), header length (uint32, big-endian), header JSON (utf-8), then each
tensor's bytes back to back in header order. The header declares every tensor's byte count, so a
reader knows the whole frame's size after reading the header (`read_prefix`, `parse_header`,
`FrameHeader.payload_bytes`) and the payload is never parsed as text. Everything here treats a
frame as hostile: any inconsistency raises `FrameError` with a message saying what was wrong.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import struct
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from torch import Tensor

from peer.compression import CODECS, Buffer, codec_for

MAGIC = b"SWH1"
_PREFIX = struct.Struct(">4sI")
PREFIX_SIZE = _PREFIX.size
# Room for a whole stage state (model + optimizer: ~1,200 tensor entries for the large preset) and long
# lists of counted microbatch ids, while a hostile peer still cannot make us buffer much text.
MAX_HEADER_BYTES = 1024 * 1024

DTypeName = Literal["float32", "float16", "bfloat16", "int64"]
FrameKind = Literal["forward", "backward", "forward_backward", "push_grads", "fetch_state", "result", "error"]
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class FrameError(ValueError):
    """A frame that cannot be accepted; the message says why."""


class _Model(BaseModel):
    # NaN/Inf as JSON constants: a diverged loss in `info` must still round-trip.
    model_config = ConfigDict(extra="ignore", frozen=True, ser_json_inf_nan="constants")


class TensorMeta(_Model):
    name: str
    shape: list[int]
    dtype: DTypeName
    codec: str
    nbytes: int = Field(ge=0)


class FrameHeader(_Model):
    kind: FrameKind
    run_id: int
    stage: int
    microbatch_id: str
    sender: int
    """Peer id of the sender; its credential is checked against it."""
    credential: str
    step: int
    attempt: int = 0
    tensors: list[TensorMeta] = []
    info: dict[str, str | int | float | list[str]] = {}
    """Small extras: samples, loss, counted microbatch ids."""
    error: str | None = None

    @property
    def payload_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def encode_frame(
    *,
    kind: FrameKind,
    run_id: int,
    stage: int,
    microbatch_id: str,
    sender: int,
    credential: str,
    step: int,
    attempt: int = 0,
    tensors: dict[str, Tensor] | None = None,
    codec: str = "none",
    info: dict[str, str | int | float | list[str]] | None = None,
    error: str | None = None,
) -> bytes:
    """A whole frame; float tensors travel with `codec`, integer ones raw."""
    if codec not in CODECS:
        raise FrameError(f"unknown codec {codec!r}; known: {', '.join(CODECS)}")
    metas: list[TensorMeta] = []
    blobs: list[bytes] = []
    for name, t in (tensors or {}).items():
        if t.dtype not in _DTYPE_NAMES:
            raise FrameError(f"tensor {name!r} has dtype {t.dtype}; frames carry {', '.join(DTYPES)}")
        if t.dtype.is_floating_point and not torch.isfinite(t).all():
            raise FrameError(f"tensor {name!r} has NaN or Inf values; the receiver would reject it")
        c = codec_for(t.dtype, codec)
        blob = c.encode(t)
        metas.append(
            TensorMeta(
                name=name, shape=list(t.shape), dtype=_DTYPE_NAMES[t.dtype], codec=c.name, nbytes=len(blob)
            )
        )
        blobs.append(blob)
    header = FrameHeader(
        kind=kind,
        run_id=run_id,
        stage=stage,
        microbatch_id=microbatch_id,
        sender=sender,
        credential=credential,
        step=step,
        attempt=attempt,
        tensors=metas,
        info=info or {},
        error=error,
    )
    header_bytes = header.model_dump_json().encode()
    if len(header_bytes) > MAX_HEADER_BYTES:
        raise FrameError(f"frame header is {len(header_bytes)} bytes, over the {MAX_HEADER_BYTES}-byte limit")
    return b"".join([_PREFIX.pack(MAGIC, len(header_bytes)), header_bytes, *blobs])


def read_prefix(prefix: Buffer) -> int:
    """The header length announced by a frame's first PREFIX_SIZE bytes."""
    if len(prefix) < PREFIX_SIZE:
        raise FrameError(f"frame is {len(prefix)} bytes, shorter than its {PREFIX_SIZE}-byte prefix")
    magic, header_len = _PREFIX.unpack_from(prefix)
    if magic != MAGIC:
        raise FrameError(f"bad magic {magic!r}, expected {MAGIC!r}: not a SwarmHub data-plane frame")
    if header_len > MAX_HEADER_BYTES:
        raise FrameError(f"frame header of {header_len} bytes is over the {MAX_HEADER_BYTES}-byte limit")
    return header_len


def parse_header(header_bytes: Buffer, *, max_bytes: int) -> FrameHeader:
    """Validate a header; `max_bytes` bounds the whole frame, so a reader can refuse before the payload."""
    try:
        header = FrameHeader.model_validate_json(bytes(header_bytes))
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
    if total > max_bytes:
        raise FrameError(f"frame of {total} bytes is over the {max_bytes}-byte limit")
    return header


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
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise FrameError(f"tensor {meta.name!r} has NaN or Inf values")
        tensors[meta.name] = t
    return tensors


def decode_frame(data: Buffer, *, max_bytes: int) -> tuple[FrameHeader, dict[str, Tensor]]:
    if len(data) > max_bytes:
        raise FrameError(f"frame of {len(data)} bytes is over the {max_bytes}-byte limit")
    header_len = read_prefix(data)
    if len(data) < PREFIX_SIZE + header_len:
        raise FrameError(
            f"frame is truncated: {len(data)} bytes, the header alone needs {PREFIX_SIZE + header_len}"
        )
    view = memoryview(data)
    header = parse_header(view[PREFIX_SIZE : PREFIX_SIZE + header_len], max_bytes=max_bytes)
    return header, decode_payload(header, view[PREFIX_SIZE + header_len :])


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


def make_credential(data_key: str, peer_id: int) -> str:
    """hex HMAC-SHA256(key=data_key, message=decimal peer id): proves the coordinator admitted `peer_id`."""
    return hmac.new(data_key.encode(), str(peer_id).encode(), hashlib.sha256).hexdigest()


def verify_credential(data_key: str, peer_id: int, credential: str) -> bool:
    return hmac.compare_digest(make_credential(data_key, peer_id).encode(), credential.encode())
