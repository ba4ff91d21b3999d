"""Codecs for activations and gradients on the data plane (hivemind's habit: one object per codec).

A codec turns a tensor into bytes and back, given the shape and dtype the frame header declares.
Buffers come from other peers, so decoding checks every length and raises ValueError on anything
malformed. Integer tensors (token ids, targets) are never lossy-compressed: `codec_for` sends them
through 'none' whatever the run's compression.

Bytes per element: 'none' the dtype's size; 'float16' 2; 'int8' 1 + 4 / INT8_BLOCKSIZE (one float32
absmax per block, ≈1.002) plus a 16-byte header per tensor. The int8 code book is bitsandbytes'
default dynamic map, which both ends build themselves, so it is never sent.
"""

from __future__ import annotations

import functools
import logging
import math
import struct
from types import ModuleType
from typing import Protocol, get_args

import numpy as np
import torch
from torch import Tensor

from swarmhub.wire import CompressionName


class _DropKernelsHubNotice(logging.Filter):
    """bitsandbytes warns at import when the optional `kernels` package is absent; on CPU it is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(
            "Failed to load CPU gemm_4bit_forward from kernels-community"
        )


@functools.cache
def bitsandbytes_functional() -> ModuleType:
    """bitsandbytes' functional module, imported when an int8 tensor is first encoded or decoded: the
    import wraps its kernels in torch.compile and costs a process about 2 s of CPU, which every peer of
    a run that does not compress paid at start-up."""
    cpu_logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    notice = _DropKernelsHubNotice()
    cpu_logger.addFilter(notice)
    try:
        import bitsandbytes.functional as bnbf
    finally:
        cpu_logger.removeFilter(notice)
    return bnbf


Buffer = bytes | bytearray | memoryview


class Codec(Protocol):
    name: str
    lossless: bool
    """Decoding what it encoded gives the same tensor, bit for bit."""

    def encode(self, t: Tensor) -> bytes: ...

    def decode(self, data: Buffer, shape: tuple[int, ...] | list[int], dtype: torch.dtype) -> Tensor: ...


def _numel(shape: tuple[int, ...] | list[int]) -> int:
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in shape {list(shape)}")
    return math.prod(shape)


def _raw_bytes(t: Tensor) -> bytes:
    # Through uint8 rather than numpy so bfloat16 (which numpy lacks) works too.
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _from_raw(data: Buffer, shape: tuple[int, ...] | list[int], dtype: torch.dtype, what: str) -> Tensor:
    numel = _numel(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(data) != numel * itemsize:
        raise ValueError(
            f"{what}: {len(data)} bytes do not hold shape {list(shape)} of {dtype} ({numel * itemsize} bytes)"
        )
    if numel == 0:
        return torch.empty(tuple(shape), dtype=dtype)
    # bytearray: torch.frombuffer wants a writable buffer, and the tensor must own its memory.
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(tuple(shape))


class NoCompression:
    """The tensor's own bytes, in its own dtype."""

    name = "none"
    lossless = True

    def encode(self, t: Tensor) -> bytes:
        return _raw_bytes(t)

    def decode(self, data: Buffer, shape: tuple[int, ...] | list[int], dtype: torch.dtype) -> Tensor:
        return _from_raw(data, shape, dtype, "uncompressed tensor")


class Float16Compression:
    """Half precision, clamped to its finite range (as hivemind does) so large values do not become Inf."""

    name = "float16"
    lossless = False
    _FP16_MAX = torch.finfo(torch.float16).max

    def encode(self, t: Tensor) -> bytes:
        # Halved where the tensor lives: a GPU peer sends half the bytes across to the host.
        t = t.detach().float().clamp(-self._FP16_MAX, self._FP16_MAX)
        return _raw_bytes(t.to(torch.float16))

    def decode(self, data: Buffer, shape: tuple[int, ...] | list[int], dtype: torch.dtype) -> Tensor:
        return _from_raw(data, shape, torch.float16, "float16 tensor").to(dtype)


INT8_BLOCKSIZE = 2048
# Block sizes bitsandbytes' blockwise quantizer accepts; a buffer naming another is malformed.
_INT8_VALID_BLOCKSIZES = frozenset({64, 128, 256, 512, 1024, 2048, 4096})


class BlockwiseInt8:
    """bitsandbytes 8-bit blockwise quantization with the dynamic code book.

    Buffer: header (numel u64, blocksize u32, blocks u32; little-endian), then `blocks` float32
    absmax values, then `numel` uint8 codes.
    """

    name = "int8"
    lossless = False
    _HEADER = struct.Struct("<QII")

    def __init__(self, blocksize: int = INT8_BLOCKSIZE) -> None:
        if blocksize not in _INT8_VALID_BLOCKSIZES:
            raise ValueError(
                f"int8 blocksize must be one of {sorted(_INT8_VALID_BLOCKSIZES)}, got {blocksize}"
            )
        self.blocksize = blocksize
        self._code_books: dict[torch.device, Tensor] = {}

    def _code_on(self, device: torch.device) -> Tensor:
        """The code book on `device`, built there once (at the first int8 tensor, not at import)."""
        book = self._code_books.get(device)
        if book is None:
            book = bitsandbytes_functional().create_dynamic_map().float().to(device)
            self._code_books[device] = book
        return book

    def encode(self, t: Tensor) -> bytes:
        # Quantized where the tensor lives: bitsandbytes' GPU kernels are hundreds of times the host's
        # on a stage's activations (bench/gpu_path.py), and only the codes, a quarter of the float32
        # bytes, cross to the host. A GPU rounds a few values into the neighbouring bucket where the
        # host would not: every receiver decodes the bytes sent, so members still agree bit for bit.
        flat = t.detach().float().contiguous().reshape(-1)
        if flat.numel() == 0:
            return self._HEADER.pack(0, self.blocksize, 0)
        codes, state = bitsandbytes_functional().quantize_blockwise(
            flat, code=self._code_on(flat.device), blocksize=self.blocksize
        )
        absmax = state.absmax.float().contiguous().cpu()
        return (
            self._HEADER.pack(flat.numel(), self.blocksize, absmax.numel())
            + absmax.numpy().tobytes()
            + codes.cpu().numpy().tobytes()
        )

    def decode(self, data: Buffer, shape: tuple[int, ...] | list[int], dtype: torch.dtype) -> Tensor:
        numel = _numel(shape)
        if len(data) < self._HEADER.size:
            raise ValueError(
                f"int8 buffer of {len(data)} bytes is shorter than its {self._HEADER.size}-byte header"
            )
        count, blocksize, blocks = self._HEADER.unpack_from(data)
        if count != numel:
            raise ValueError(f"int8 buffer holds {count} elements but shape {list(shape)} needs {numel}")
        if blocksize not in _INT8_VALID_BLOCKSIZES:
            raise ValueError(f"int8 buffer names an unsupported blocksize {blocksize}")
        if blocks != -(-count // blocksize):
            raise ValueError(
                f"int8 buffer has {blocks} absmax blocks; {count} elements in blocks of {blocksize} "
                f"need {-(-count // blocksize)}"
            )
        expected = self._HEADER.size + 4 * blocks + count
        if len(data) != expected:
            raise ValueError(f"int8 buffer is {len(data)} bytes, its header implies {expected}")
        if count == 0:
            return torch.empty(tuple(shape), dtype=dtype)
        absmax = np.frombuffer(data, dtype="<f4", count=blocks, offset=self._HEADER.size)
        if not np.isfinite(absmax).all() or (absmax < 0).any():
            raise ValueError("int8 buffer has a negative or non-finite absmax")
        codes = np.frombuffer(data, dtype=np.uint8, count=count, offset=self._HEADER.size + 4 * blocks)
        out = bitsandbytes_functional().dequantize_blockwise(
            torch.from_numpy(codes.copy()),
            absmax=torch.from_numpy(absmax.astype(np.float32)),
            code=self._code_on(torch.device("cpu")),
            blocksize=blocksize,
        )
        return out.reshape(tuple(shape)).to(dtype)


CODECS: dict[str, Codec] = {c.name: c for c in (NoCompression(), Float16Compression(), BlockwiseInt8())}

_missing = (set(get_args(CompressionName)) | {"float16"}) - CODECS.keys()
if _missing:
    raise ImportError(f"no codec implements {sorted(_missing)} (named in swarmhub.wire.CompressionName)")


def get_codec(name: str) -> Codec:
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"unknown codec {name!r}; known: {', '.join(CODECS)}") from None


def codec_for(dtype: torch.dtype, requested: str) -> Codec:
    """The codec a tensor of `dtype` travels with: the requested one for floats, 'none' for the rest."""
    return get_codec(requested) if dtype.is_floating_point else CODECS["none"]
