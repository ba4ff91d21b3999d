"""Datasets of several files over HTTP: start a draft, add files to it one by one, seal it.

    POST   /api/datasets/drafts?name=                     start a draft (201)
    POST   /api/datasets/drafts/{draft}/files?filename=   add one file (raw body; 413/409 past the limits)
    GET    /api/datasets/drafts/{draft}                   the draft's files so far
    POST   /api/datasets/drafts/{draft}/seal              pack the files, in upload order, into a dataset
    DELETE /api/datasets/drafts/{draft}                   drop it

Only the draft's owner sees it (others get a 404, admins included).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, Query, Request, status
from fastapi import Path as PathParam
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel

from server.auth import CurrentUser, _bearer_scheme, _cookie_scheme
from server.datasets import service
from server.datasets.drafts import DRAFT_ID_PATTERN, Draft, DraftFile, DraftStore, utcnow
from server.datasets.formats import UnsupportedFile, file_bytes, files_bytes
from server.datasets.routes import (
    DatasetOut,
    PayloadTooLarge,
    StoreDep,
    _out,
    _receive,
    declared_length,
    uploader,
)
from server.deps import SessionDep
from server.errors import Unprocessable
from server.schemas import ErrorOut

router = APIRouter(
    prefix="/api/datasets/drafts",
    tags=["datasets"],
    responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}},
)

DraftId = Annotated[str, PathParam(pattern=DRAFT_ID_PATTERN)]


class DraftOut(BaseModel):
    id: str
    name: str
    files: list[DraftFile]
    bytes: int
    expires_at: datetime
    """When the draft is deleted unless a file is added (which moves this on) or it is sealed."""


def get_drafts(request: Request) -> DraftStore:
    return request.app.state.dataset_drafts


DraftsDep = Annotated[DraftStore, Depends(get_drafts)]


def _draft_out(drafts: DraftStore, draft: Draft) -> DraftOut:
    return DraftOut(
        id=draft.id,
        name=draft.name,
        files=draft.files,
        bytes=draft.bytes,
        expires_at=drafts.expires_at(draft),
    )


@router.post("", status_code=status.HTTP_201_CREATED, responses={409: {"model": ErrorOut}})
def start_draft(
    caller: CurrentUser, drafts: DraftsDep, name: Annotated[str, Query(max_length=200)] = ""
) -> DraftOut:
    """Start a dataset of several files; the caller may hold `dataset_drafts_per_owner` at a time."""
    return _draft_out(drafts, drafts.create(caller.user.id, name, utcnow()))


@router.get("/{draft_id}")
def get_draft(draft_id: DraftId, caller: CurrentUser, drafts: DraftsDep) -> DraftOut:
    return _draft_out(drafts, drafts.get(draft_id, caller.user.id))


@router.delete("/{draft_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_draft(draft_id: DraftId, caller: CurrentUser, drafts: DraftsDep) -> None:
    drafts.delete(draft_id, caller.user.id)


@router.post(
    "/{draft_id}/files",
    responses={409: {"model": ErrorOut}, 413: {"model": ErrorOut}, 422: {"model": ErrorOut}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def add_draft_file(
    request: Request,
    draft_id: DraftId,
    filename: Annotated[str, Query(min_length=1, max_length=255)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
    cookie: Annotated[str | None, Depends(_cookie_scheme)],
) -> DraftOut:
    """Add one text, JSONL or Parquet file (raw bytes body; `filename` decides how it is read).

    Refused past `dataset_upload_max_bytes` for the file, `dataset_draft_max_bytes` for the draft
    (413), or `dataset_draft_max_files` files (409); a file that cannot be read is a 422."""
    drafts: DraftStore = request.app.state.dataset_drafts
    store = request.app.state.datasets
    user_id = await uploader(request, bearer, cookie, filename)
    draft = await anyio.to_thread.run_sync(drafts.get, draft_id, user_id)
    limit = drafts.room(draft, per_file=request.app.state.settings.dataset_upload_max_bytes)
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise PayloadTooLarge(f"{filename} has {declared} bytes; this draft takes at most {limit} more")
    temp = await anyio.to_thread.run_sync(store.new_incoming)
    try:
        await _receive(request, temp, limit)

        def check_and_add() -> Draft:
            # Read it through once now, so an unreadable file is refused here, by name, not at sealing.
            try:
                for _ in file_bytes(temp, filename):
                    pass
            except UnsupportedFile as exc:
                raise Unprocessable(str(exc)) from None
            return drafts.add_file(draft_id, user_id, filename, temp, utcnow())

        return _draft_out(drafts, await anyio.to_thread.run_sync(check_and_add))
    finally:
        temp.unlink(missing_ok=True)


@router.post(
    "/{draft_id}/seal",
    status_code=status.HTTP_201_CREATED,
    responses={409: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)
def seal_draft(
    draft_id: DraftId, caller: CurrentUser, session: SessionDep, drafts: DraftsDep, store: StoreDep
) -> DatasetOut:
    """Pack the draft's files, in upload order, into a content-addressed dataset; the draft goes."""
    draft = drafts.begin_seal(draft_id, caller.user.id)
    sealed = False
    try:
        try:
            manifest = store.pack(files_bytes(drafts.file_paths(draft)))
        except ValueError as exc:
            raise Unprocessable(str(exc)) from None
        name = draft.name or draft.files[0].name
        row = service.record(session, caller.user, name=name, manifest=manifest, files=len(draft.files))
        out = _out(row)
        session.commit()
        sealed = True
    finally:
        if not sealed:
            drafts.abort_seal(draft)
    drafts.delete(draft_id, caller.user.id)
    return out
