"""A peer's side of the coordinator's checkpoint store: upload a stage's state, fetch one back.

Every call authenticates with the peer's id and the credential its registration returned
(`X-Peer-Id`, `X-Peer-Credential`). Serialization runs in a worker thread, so a large stage
does not stall the peer's event loop.
"""

from __future__ import annotations

import hashlib
import hmac

import anyio
import httpx
from torch import Tensor

from peer.console import Console
from peer.model import state_from_bytes, state_to_bytes

SHA256_HEADER = "X-Checkpoint-SHA256"


class CheckpointError(RuntimeError):
    """The coordinator refused or failed a checkpoint request; `status_code` and `detail` say why."""

    def __init__(self, action: str, status_code: int, detail: str) -> None:
        super().__init__(f"{action} failed: HTTP {status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


def _base(base_url: str, run_id: int) -> str:
    return f"{base_url.rstrip('/')}/api/runs/{run_id}/checkpoints"


def _headers(peer_id: int, credential: str) -> dict[str, str]:
    return {"X-Peer-Id": str(peer_id), "X-Peer-Credential": credential}


def _raise_for(action: str, response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        detail = str(response.json().get("detail", response.text))
    except ValueError:
        detail = response.text[:500] or response.reason_phrase
    raise CheckpointError(action, response.status_code, detail)


def verify_sha256(action: str, response: httpx.Response, body: bytes | None = None) -> None:
    """Raise unless the body's SHA-256 is the one the coordinator recorded for the file (its
    X-Checkpoint-SHA256 header): a file damaged on disk or cut short in transit is never loaded.
    `body`: the response's body where it was streamed rather than read."""
    expected = response.headers.get(SHA256_HEADER, "").lower()
    if not expected:
        raise CheckpointError(action, response.status_code, f"the response has no {SHA256_HEADER} header")
    content = response.content if body is None else body
    actual = hashlib.sha256(content).hexdigest()
    if not hmac.compare_digest(actual, expected):
        raise CheckpointError(
            action,
            response.status_code,
            f"the file's SHA-256 is {actual}, not the {expected} the coordinator recorded"
            f" ({len(content)} bytes received): damaged or cut short, not loaded",
        )


async def upload_stage_checkpoint(
    client: httpx.AsyncClient,
    base_url: str,
    run_id: int,
    step: int,
    stage: int,
    peer_id: int,
    credential: str,
    state: dict[str, Tensor],
    metadata: dict[str, str],
) -> None:
    """Store `state` (model + optimizer tensors) as stage `stage`'s checkpoint at `step`.

    The run, step and stage are added to the file's metadata (they win over the same keys in
    `metadata`), so a file read on its own still says what it is.
    """
    metadata = {**metadata, "run_id": str(run_id), "step": str(step), "stage": str(stage)}
    data = await anyio.to_thread.run_sync(state_to_bytes, state, metadata)
    response = await client.put(
        f"{_base(base_url, run_id)}/{step}/stages/{stage}",
        content=data,
        headers={**_headers(peer_id, credential), "Content-Type": "application/octet-stream"},
    )
    _raise_for(f"uploading stage {stage} of step {step} (run {run_id})", response)


async def download_stage_checkpoint(
    client: httpx.AsyncClient,
    base_url: str,
    run_id: int,
    step: int,
    stage: int,
    peer_id: int,
    credential: str,
    console: Console | None = None,
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Stage `stage`'s tensors and metadata as checkpointed at `step`; with a `console`, a progress
    bar of the download (a big stage takes a while on a home link)."""
    action = f"downloading stage {stage} of step {step} (run {run_id})"
    url = f"{_base(base_url, run_id)}/{step}/stages/{stage}"
    async with client.stream("GET", url, headers=_headers(peer_id, credential)) as response:
        if not response.is_success:
            await response.aread()
            _raise_for(action, response)
        length = response.headers.get("content-length")
        bar = console.download(action, int(length) if length else None) if console is not None else None
        chunks = []
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            if bar is not None:
                bar.advance(len(chunk))
        if bar is not None:
            bar.finish()
    body = b"".join(chunks)
    await anyio.to_thread.run_sync(verify_sha256, action, response, body)
    try:
        return await anyio.to_thread.run_sync(state_from_bytes, body)
    except ValueError as e:
        raise CheckpointError(
            f"downloading stage {stage} of step {step} (run {run_id})", response.status_code, str(e)
        ) from e


async def latest_checkpoint_step(
    client: httpx.AsyncClient, base_url: str, run_id: int, peer_id: int, credential: str
) -> int | None:
    """The newest step whose every stage is checkpointed, or None while there is none."""
    response = await client.get(f"{_base(base_url, run_id)}/latest", headers=_headers(peer_id, credential))
    if response.status_code == 404:
        return None
    _raise_for(f"asking for the latest checkpoint of run {run_id}", response)
    return int(response.json()["step"])
