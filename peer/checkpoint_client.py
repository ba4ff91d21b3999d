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


def verify_sha256(action: str, response: httpx.Response) -> None:
    """Raise unless the body's SHA-256 is the one the coordinator recorded for the file (its
    X-Checkpoint-SHA256 header): a file damaged on disk or cut short in transit is never loaded."""
    expected = response.headers.get(SHA256_HEADER, "").lower()
    if not expected:
        raise CheckpointError(action, response.status_code, f"the response has no {SHA256_HEADER} header")
    actual = hashlib.sha256(response.content).hexdigest()
    if not hmac.compare_digest(actual, expected):
        raise CheckpointError(
            action,
            response.status_code,
            f"the file's SHA-256 is {actual}, not the {expected} the coordinator recorded"
            f" ({len(response.content)} bytes received): damaged or cut short, not loaded",
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
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Stage `stage`'s tensors and metadata as checkpointed at `step`."""
    response = await client.get(
        f"{_base(base_url, run_id)}/{step}/stages/{stage}", headers=_headers(peer_id, credential)
    )
    action = f"downloading stage {stage} of step {step} (run {run_id})"
    _raise_for(action, response)
    await anyio.to_thread.run_sync(verify_sha256, action, response)
    try:
        return await anyio.to_thread.run_sync(state_from_bytes, response.content)
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
