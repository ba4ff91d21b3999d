"""Datasets over HTTP: owners upload and list them; peers of runs that train on one read it.

Peers authenticate with their registration's credential in the `X-Peer-Id` and
`X-Peer-Credential` headers (as for checkpoints); owners and admins with their session.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, Header, Query, Request, status
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel

from server.auth import CurrentUser, _bearer_scheme, _cookie_scheme, get_caller
from server.datasets import service
from server.datasets.formats import UnsupportedFile, check_name, file_bytes
from server.datasets.store import DatasetStore
from server.deps import MAX_ID, SessionDep
from server.errors import NotFound, ServiceError, Unprocessable
from server.models import Dataset, User
from server.schemas import ErrorOut
from swarmhub.datasets import BUNDLED_DATASET, DATASET_ID_PATTERN, SHA256_PATTERN, DatasetManifest

router = APIRouter(
    prefix="/api/datasets",
    tags=["datasets"],
    responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}},
)

DatasetId = Annotated[str, PathParam(pattern=DATASET_ID_PATTERN)]
ShardId = Annotated[str, PathParam(pattern=SHA256_PATTERN)]
PeerIdHeader = Annotated[int | None, Header(alias="X-Peer-Id", ge=1, le=MAX_ID)]
PeerCredentialHeader = Annotated[str | None, Header(alias="X-Peer-Credential", max_length=256)]
CHUNK = 1024 * 1024


class PayloadTooLarge(ServiceError):
    status_code = status.HTTP_413_CONTENT_TOO_LARGE


class DatasetOut(BaseModel):
    id: str
    """What a run's `dataset` names: the sha256 of the dataset's manifest."""
    name: str
    bytes: int
    """Training bytes after reading the files (JSONL: the records' text)."""
    shards: int
    files: int
    owner_id: int
    created_at: datetime


def _out(row: Dataset) -> DatasetOut:
    return DatasetOut(
        id=row.digest,
        name=row.name,
        bytes=row.bytes,
        shards=row.shards,
        files=row.files,
        owner_id=row.owner_id,
        created_at=row.created_at,
    )


def get_store(request: Request) -> DatasetStore:
    return request.app.state.datasets


StoreDep = Annotated[DatasetStore, Depends(get_store)]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={413: {"model": ErrorOut}, 422: {"model": ErrorOut}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload_dataset(
    request: Request,
    filename: Annotated[str, Query(min_length=1, max_length=255)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
    cookie: Annotated[str | None, Depends(_cookie_scheme)],
    name: Annotated[str, Query(max_length=200)] = "",
) -> DatasetOut:
    """Upload one text, JSONL or Parquet file as a dataset (raw bytes body; `filename` says how to read it).

    Several files go in through a draft (`POST /api/datasets/drafts`); larger datasets, and
    directories of files, with `swarmhub dataset add` on the coordinator."""
    store: DatasetStore = request.app.state.datasets
    factory = request.app.state.session_factory
    user_id = await uploader(request, bearer, cookie, filename)
    limit = request.app.state.settings.dataset_upload_max_bytes
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise PayloadTooLarge(
            f"upload of {declared} bytes exceeds the limit of {limit} bytes; "
            "add big datasets with `swarmhub dataset add` on the coordinator"
        )
    temp = await anyio.to_thread.run_sync(store.new_incoming)
    try:
        await _receive(request, temp, limit)

        def pack_and_record() -> DatasetOut:
            try:
                manifest = store.pack(file_bytes(temp, filename))
            except ValueError as exc:
                raise Unprocessable(str(exc)) from None
            with factory() as session:
                owner = session.get_one(User, user_id)
                row = service.record(session, owner, name=name or filename, manifest=manifest, files=1)
                out = _out(row)
                session.commit()
                return out

        return await anyio.to_thread.run_sync(pack_and_record)
    finally:
        temp.unlink(missing_ok=True)


async def uploader(
    request: Request, bearer: HTTPAuthorizationCredentials | None, cookie: str | None, filename: str
) -> int:
    """The signed-in caller's id (checked off the event loop), once `filename` names a type we read."""

    def authorize() -> int:
        with request.app.state.session_factory() as session:
            return get_caller(request, session, bearer, cookie).user.id

    user_id = await anyio.to_thread.run_sync(authorize)
    try:
        check_name(filename)
    except UnsupportedFile as exc:
        raise Unprocessable(str(exc)) from None
    return user_id


def declared_length(request: Request) -> int | None:
    """The body's length as the client declared it, if it did (the stream is counted as well)."""
    declared = request.headers.get("content-length")
    return int(declared) if declared is not None and declared.isdigit() else None


async def _receive(request: Request, temp: Path, limit: int) -> None:
    size = 0
    with temp.open("wb") as f:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"upload exceeds the limit of {limit} bytes")
            await anyio.to_thread.run_sync(f.write, chunk)


@router.get("")
def list_datasets(caller: CurrentUser, session: SessionDep) -> list[DatasetOut]:
    """The caller's datasets (an admin's: everyone's), newest first; the bundled corpus is not listed."""
    return [_out(row) for row in service.visible(session, caller.user)]


def readable_manifest(
    request: Request,
    dataset_id: DatasetId,
    session: SessionDep,
    store: StoreDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
    cookie: Annotated[str | None, Depends(_cookie_scheme)],
    peer_id: PeerIdHeader = None,
    credential: PeerCredentialHeader = None,
) -> tuple[str, bytes]:
    """The dataset's id (the bundled corpus's resolved) and manifest bytes, if the caller may read it."""
    if peer_id is not None or credential is not None:
        service.check_peer_may_read(session, peer_id or 0, credential or "", dataset_id)
    else:
        service.check_user_may_read(session, get_caller(request, session, bearer, cookie).user, dataset_id)
    resolved = store.bundled_id() if dataset_id == BUNDLED_DATASET else dataset_id
    try:
        data = store.manifest_path(resolved).read_bytes()
    except FileNotFoundError:
        raise NotFound(f"dataset {dataset_id}'s manifest is missing from the store") from None
    if hashlib.sha256(data).hexdigest() != resolved:
        raise NotFound(f"dataset {dataset_id}'s manifest in the store does not match its id")
    return resolved, data


ReadableManifest = Annotated[tuple[str, bytes], Depends(readable_manifest)]


@router.get(
    "/{dataset_id}",
    response_class=Response,
    responses={
        200: {"content": {"application/json": {}}, "description": "The manifest; its sha256 is the id"},
        403: {"model": ErrorOut},
    },
)
def get_dataset_manifest(manifest: ReadableManifest) -> Response:
    """The dataset's manifest, byte for byte as stored, so readers can check it against the id."""
    resolved, data = manifest
    return Response(content=data, media_type="application/json", headers={"X-Dataset-Id": resolved})


@router.get(
    "/{dataset_id}/shards/{sha256}",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, 403: {"model": ErrorOut}},
)
def get_dataset_shard(sha256: ShardId, manifest: ReadableManifest, store: StoreDep) -> FileResponse:
    """One shard of the dataset, by its sha256 (only shards its manifest lists)."""
    parsed = DatasetManifest.model_validate_json(manifest[1])
    if sha256 not in {shard.sha256 for shard in parsed.shards}:
        raise NotFound(f"dataset has no shard {sha256}")
    path = store.shard_path(sha256)
    if not path.is_file():
        raise NotFound(f"shard {sha256} is missing from the store")
    return FileResponse(path, media_type="application/octet-stream")
