"""The dataset directory: shards and manifests named by their sha256, written atomically.

Layout under `settings.dataset_dir` (a participant may copy `shards/` and point `--data-dir` at it)::

    shards/<sha256>          one shard's bytes
    manifests/<id>.json      a dataset's manifest; <id> is the sha256 of this file
    bundled                  the id of the bundled corpus as this coordinator first packed it
    .incoming/*.part         uploads being received and shards being written (same filesystem)

Pure file I/O and packing; which datasets exist and who may read them is the `datasets` table's.
"""

from __future__ import annotations

import os
import secrets
import sysconfig
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from swarmhub.datasets import SHARD_BYTES, DatasetManifest, ShardRef, sha256_hex

INCOMING = ".incoming"
STDLIB_CAP_BYTES = 8 * 1024 * 1024
# Tests are huge and repetitive; site-packages differs between machines.
_STDLIB_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "idlelib", "__pycache__"}


class DatasetStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._bundled_lock = threading.Lock()

    def shard_path(self, sha256: str) -> Path:
        return self.root / "shards" / sha256

    def manifest_path(self, dataset_id: str) -> Path:
        return self.root / "manifests" / f"{dataset_id}.json"

    def new_incoming(self) -> Path:
        folder = self.root / INCOMING
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{secrets.token_hex(8)}.part"

    def _write_atomically(self, target: Path, data: bytes) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = self.new_incoming()
        try:
            with temp.open("wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)

    def put_shard(self, data: bytes) -> ShardRef:
        sha256 = sha256_hex(data)
        target = self.shard_path(sha256)
        if not target.is_file() or target.stat().st_size != len(data):
            self._write_atomically(target, data)
        return ShardRef(sha256=sha256, bytes=len(data))

    def put_manifest(self, manifest: DatasetManifest) -> str:
        dataset_id = manifest.id
        target = self.manifest_path(dataset_id)
        if not target.is_file():
            self._write_atomically(target, manifest.encode())
        return dataset_id

    def pack(self, chunks: Iterable[bytes]) -> DatasetManifest:
        """Cut the concatenation of `chunks` into shards and store them; holds one shard in memory."""
        shards: list[ShardRef] = []
        pending = bytearray()
        for chunk in chunks:
            pending += chunk
            while len(pending) >= SHARD_BYTES:
                shards.append(self.put_shard(bytes(pending[:SHARD_BYTES])))
                del pending[:SHARD_BYTES]
        if pending:
            shards.append(self.put_shard(bytes(pending)))
        if not shards:
            raise ValueError("the dataset is empty")
        manifest = DatasetManifest(bytes=sum(s.bytes for s in shards), shards=shards)
        self.put_manifest(manifest)
        return manifest

    def bundled_id(self) -> str:
        """The bundled corpus's id, packing it from this Python's standard library the first time.

        Kept once packed, so the run's bytes stay the same when the coordinator moves to another
        Python version."""
        marker = self.root / "bundled"
        with self._bundled_lock:
            if marker.is_file():
                dataset_id = marker.read_text().strip()
                if self.manifest_path(dataset_id).is_file():
                    return dataset_id
            dataset_id = self.pack([stdlib_corpus()]).id
            self._write_atomically(marker, dataset_id.encode())
            return dataset_id

    def clean_incoming(self) -> None:
        """Leftovers of uploads a stopped coordinator never finished."""
        folder = self.root / INCOMING
        if folder.is_dir():
            for leftover in folder.glob("*.part"):
                leftover.unlink(missing_ok=True)


def stdlib_corpus() -> bytes:
    """The standard library's Python sources, in path order, capped at 8 MiB."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        (p for p in root.rglob("*.py") if not _STDLIB_SKIP_DIRS.intersection(p.relative_to(root).parts[:-1])),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    data = b"".join(_capped(files))[:STDLIB_CAP_BYTES]
    if not data:
        raise ValueError(f"found no Python sources under the standard library at {root}")
    return data


def _capped(files: list[Path]) -> Iterator[bytes]:
    size = 0
    for path in files:
        if size >= STDLIB_CAP_BYTES:
            return
        chunk = path.read_bytes()
        size += len(chunk)
        yield chunk
