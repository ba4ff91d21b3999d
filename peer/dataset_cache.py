"""A run's dataset on this peer: the coordinator's manifest and shards, checked and cached.

The manifest is checked against the dataset's id (its sha256; the bundled corpus's id is resolved
by the coordinator, which names it in `X-Dataset-Id`), and every shard against the manifest, both
when downloaded and when found in the data directory. A file in the data directory is used only
if its bytes hash to the name the manifest gives; a participant may fill the directory with a
copy of the coordinator's `shards/`, nothing there is trusted by its name.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

import anyio
import httpx

from swarmhub.datasets import DatasetManifest, is_content_id, sha256_hex

from .console import Console, Download
from .progress import format_size


class DatasetError(RuntimeError):
    """The dataset could not be fetched, or what was served is not what the manifest names."""


def default_data_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "swarmhub" / "datasets"


class DatasetCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def shard_path(self, sha256: str) -> Path:
        return self.root / "shards" / sha256

    def read_verified(self, sha256: str, size: int) -> bytes | None:
        """The cached shard if its bytes are the ones named; a mismatching file is removed."""
        path = self.shard_path(sha256)
        try:
            data = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return None
        if len(data) == size and sha256_hex(data) == sha256:
            return data
        with contextlib.suppress(OSError):  # a read-only copy: the download goes to the same name
            path.unlink(missing_ok=True)
        return None

    def store(self, sha256: str, data: bytes) -> None:
        target = self.shard_path(sha256)
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{sha256}.{secrets.token_hex(4)}.part")
        try:
            temp.write_bytes(data)
            os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text[:500] or response.reason_phrase


async def load_dataset(
    client: httpx.AsyncClient,
    base_url: str,
    dataset: str,
    *,
    peer_id: int,
    credential: str,
    data_dir: Path,
    console: Console | None = None,
) -> bytes:
    """The dataset's bytes: cached shards that check out, the others downloaded, checked and cached;
    `console` shows what is downloaded, with a bar."""
    headers = {"X-Peer-Id": str(peer_id), "X-Peer-Credential": credential}
    url = f"{base_url.rstrip('/')}/api/datasets/{dataset}"
    response = await client.get(url, headers=headers)
    if not response.is_success:
        raise DatasetError(f"dataset {dataset}: HTTP {response.status_code}: {_detail(response)}")
    resolved = dataset if is_content_id(dataset) else response.headers.get("X-Dataset-Id", "")
    if not is_content_id(resolved) or sha256_hex(response.content) != resolved:
        raise DatasetError(f"dataset {dataset}: the manifest served does not hash to its id")
    try:
        manifest = DatasetManifest.model_validate_json(response.content)
    except ValueError as exc:
        raise DatasetError(f"dataset {dataset}: malformed manifest: {exc}") from None
    cache = DatasetCache(data_dir)
    parts: dict[str, bytes] = {}
    for shard in manifest.shards:
        data = await anyio.to_thread.run_sync(cache.read_verified, shard.sha256, shard.bytes)
        if data is not None:
            parts[shard.sha256] = data
    missing = [shard for shard in manifest.shards if shard.sha256 not in parts]
    total = sum(shard.bytes for shard in manifest.shards)
    if console is not None:
        cached = f", {len(parts)} cached" if parts else ""
        console.say(f"dataset {dataset}: {len(manifest.shards)} shards{cached}, {format_size(total)}")
    bar = None
    if console is not None and missing:
        bar = console.download(f"downloading dataset {dataset}", sum(shard.bytes for shard in missing))
    for shard in missing:
        data = await _download_shard(client, f"{url}/shards/{shard.sha256}", headers, shard.bytes, bar)
        if len(data) != shard.bytes or sha256_hex(data) != shard.sha256:
            raise DatasetError(f"shard {shard.sha256} as served does not match its hash; refused")
        await anyio.to_thread.run_sync(cache.store, shard.sha256, data)
        parts[shard.sha256] = data
    if bar is not None:
        bar.finish()
    return b"".join(parts[shard.sha256] for shard in manifest.shards)


async def _download_shard(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], size: int, bar: Download | None
) -> bytes:
    """A shard's bytes, read no further than its manifest size plus one (which then fails its check)."""
    chunks: list[bytes] = []
    received = 0
    async with client.stream("GET", url, headers=headers) as response:
        if not response.is_success:
            await response.aread()
            raise DatasetError(
                f"shard {url.rsplit('/', 1)[-1]}: HTTP {response.status_code}: {_detail(response)}"
            )
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            received += len(chunk)
            if bar is not None:
                bar.advance(len(chunk))
            if received > size:
                break
    return b"".join(chunks)
