"""The checkpoint directory: stage files, per-step manifests, atomic writes, safetensors checks.

Layout under `settings.checkpoint_dir`::

    run-<id>/step-<n>/stage-<s>.safetensors   one stage's model + optimizer tensors
    run-<id>/step-<n>/manifest.json           num_stages, model_preset, complete, per-stage size/sha256
    run-<id>/.incoming/*.part                 uploads being received (same filesystem: os.replace)
    run-<id>/.incoming/step-<n>-stage-<s>-<sha256>.ready   received, fsynced, row being committed

Pure file I/O; which steps exist and are complete is decided by the `checkpoints` table
(`server.checkpoints.service`). The coordinator never imports torch: uploads are checked by
parsing the safetensors header (u64 little-endian length, then a JSON object) by hand.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from server.errors import Unprocessable
from swarmhub.presets import get_preset

MANIFEST = "manifest.json"
INCOMING = ".incoming"
READY = ".ready"
READY_NAME = re.compile(r"step-(\d+)-stage-(\d+)-([0-9a-f]{64})\.ready")
MAX_HEADER_BYTES = 100 * 1024 * 1024
"""safetensors' own limit on the JSON header."""
SLACK_BYTES = 1024 * 1024

# Bytes per element of the dtypes safetensors writes (sub-byte dtypes are not accepted).
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


def max_stage_bytes(model_preset: str) -> int:
    """Upper bound on one stage file: parameters plus two optimizer moments, all float32, for the
    whole model (a stage holds at most all of it), plus room for the header."""
    return 3 * 4 * get_preset(model_preset).parameter_count + SLACK_BYTES


def check_safetensors(path: Path) -> dict[str, str]:
    """Raise Unprocessable unless `path` is a well-formed safetensors file; returns its metadata.

    Checks what a reader relies on: the header is a JSON object of tensors with known dtypes,
    each tensor's byte range matches its shape, and the ranges tile the data section exactly.
    """
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise Unprocessable(f"not a safetensors file: only {size} bytes, less than its 8-byte prefix")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
            raise Unprocessable(
                f"not a safetensors file: header length {header_len} does not fit in {size} bytes"
            )
        raw = f.read(header_len)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise Unprocessable(f"not a safetensors file: header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise Unprocessable("not a safetensors file: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise Unprocessable("not a safetensors file: __metadata__ must map strings to strings")
    ranges: list[tuple[int, int]] = []
    for name, info in header.items():
        ranges.append(_tensor_range(name, info))
    ranges.sort()
    data_bytes = size - 8 - header_len
    cursor = 0
    for begin, end in ranges:
        if begin != cursor:
            raise Unprocessable(f"not a safetensors file: tensor data has a gap or overlap at byte {begin}")
        cursor = end
    if cursor != data_bytes:
        raise Unprocessable(
            f"not a safetensors file: tensors cover {cursor} bytes of a {data_bytes}-byte data section"
        )
    return metadata


def _tensor_range(name: str, info: Any) -> tuple[int, int]:
    if not isinstance(info, dict):
        raise Unprocessable(f"not a safetensors file: entry {name!r} is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise Unprocessable(f"not a safetensors file (or an unsupported dtype): {name!r} has dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise Unprocessable(f"not a safetensors file: {name!r} has shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise Unprocessable(f"not a safetensors file: {name!r} has data_offsets {offsets!r}")
    if offsets[1] - offsets[0] != math.prod(shape) * DTYPE_BYTES[dtype]:
        raise Unprocessable(f"not a safetensors file: {name!r} byte range does not match its shape")
    return offsets[0], offsets[1]


def _fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    """Files of every run's checkpoints under one root directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.lock = threading.Lock()
        """Serializes commits of uploads (file move, row, manifest, retention) in this process."""

    @staticmethod
    def relative_path(run_id: int, step: int, stage: int) -> str:
        return f"run-{run_id}/step-{step}/stage-{stage}.safetensors"

    def run_dir(self, run_id: int) -> Path:
        return self.root / f"run-{run_id}"

    def step_dir(self, run_id: int, step: int) -> Path:
        return self.run_dir(run_id) / f"step-{step}"

    def path(self, relative: str) -> Path:
        return self.root / relative

    def new_incoming(self, run_id: int) -> Path:
        """A fresh temporary path for an upload, on the same filesystem as its destination."""
        incoming = self.run_dir(run_id) / INCOMING
        incoming.mkdir(parents=True, exist_ok=True)
        return incoming / f"{secrets.token_hex(8)}.part"

    def make_ready(self, temp: Path, run_id: int, step: int, stage: int, sha256: str) -> Path:
        """Flush a received upload to disk under a name that says what it is, before its row is
        committed: should the coordinator die between commit and rename, `recover` finishes the rename."""
        with temp.open("rb+") as f:
            os.fsync(f.fileno())
        ready = temp.with_name(f"step-{step}-stage-{stage}-{sha256}{READY}")
        os.replace(temp, ready)
        _fsync_dir(ready.parent)
        return ready

    def install(self, ready: Path, run_id: int, step: int, stage: int) -> None:
        """Atomically move a recorded upload into place (replacing an earlier upload of the same stage)."""
        target = self.path(self.relative_path(run_id, step, stage))
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(ready, target)
        _fsync_dir(target.parent)

    def leftovers(self) -> Iterator[tuple[int, Path]]:
        """Every file left in an incoming directory (run id, path): partial or not yet installed uploads."""
        for incoming in self.root.glob(f"run-*/{INCOMING}"):
            run_id = incoming.parent.name.removeprefix("run-")
            if run_id.isdigit():
                for path in incoming.iterdir():
                    yield int(run_id), path

    @staticmethod
    def parse_ready(path: Path) -> tuple[int, int, str] | None:
        """(step, stage, sha256) of a `make_ready` file; None for anything else."""
        match = READY_NAME.fullmatch(path.name)
        return (int(match[1]), int(match[2]), match[3]) if match else None

    def stored_steps(self, run_id: int) -> list[int]:
        return [
            int(d.name.removeprefix("step-"))
            for d in self.run_dir(run_id).glob("step-*")
            if d.name.removeprefix("step-").isdigit()
        ]

    def write_manifest(self, run_id: int, step: int, manifest: dict[str, Any]) -> None:
        directory = self.step_dir(run_id, step)
        directory.mkdir(parents=True, exist_ok=True)
        temp = directory / f".{MANIFEST}.{secrets.token_hex(4)}.part"
        temp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        os.replace(temp, directory / MANIFEST)

    def delete_step(self, run_id: int, step: int) -> None:
        shutil.rmtree(self.step_dir(run_id, step), ignore_errors=True)
