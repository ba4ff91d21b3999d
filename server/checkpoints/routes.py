"""Stage checkpoints: peers upload and fetch stage files; owners list them and download the model.

Peers authenticate with the credential their registration returned, in the `X-Peer-Id` and
`X-Peer-Credential` headers; owners and admins with their session, as everywhere else.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Annotated

import anyio
from anyio import from_thread
from fastapi import APIRouter, Depends, Header, Request, status
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel
from sqlalchemy.orm import Session

from server.auth import CurrentUser, _bearer_scheme, _cookie_scheme, get_caller
from server.checkpoints import service
from server.checkpoints.sampler import Sampler, SamplesOut, get_sampler
from server.checkpoints.store import CheckpointStore, check_safetensors, max_stage_bytes
from server.deps import MAX_ID, FeedDep, LiveDep, RunId, SessionDep
from server.errors import Conflict, NotFound, ServiceError, Unprocessable
from server.models import Run
from server.publish import commit_and_publish
from server.schemas import ErrorOut
from server.services import runs
from server.services.events import record_event
from server.services.runs import JOINABLE_STATUSES, run_spec
from swarmhub.checkpoint_readme import hf_readme, stages_readme
from swarmhub.hf_export import export_files
from swarmhub.presets import get_preset

router = APIRouter(
    prefix="/api/runs/{run_id}/checkpoints",
    tags=["checkpoints"],
    responses={401: {"model": ErrorOut}, 404: {"model": ErrorOut}},
)

Step = Annotated[int, PathParam(ge=0, le=MAX_ID)]
Stage = Annotated[int, PathParam(ge=0, le=MAX_ID)]
PeerIdHeader = Annotated[int | None, Header(alias="X-Peer-Id", ge=1, le=MAX_ID)]
PeerCredentialHeader = Annotated[str | None, Header(alias="X-Peer-Credential", max_length=256)]
CHUNK = 1024 * 1024


class PayloadTooLarge(ServiceError):
    status_code = status.HTTP_413_CONTENT_TOO_LARGE


class CheckpointStageOut(BaseModel):
    stage: int
    bytes: int
    sha256: str
    created_at: datetime


class CheckpointStepOut(BaseModel):
    run_id: int
    step: int
    num_stages: int
    complete: bool
    bytes: int
    stages: list[CheckpointStageOut]


class CheckpointRequested(BaseModel):
    run_id: int
    current_step: int


def _step_out(checkpoint: service.StepCheckpoint) -> CheckpointStepOut:
    return CheckpointStepOut(
        run_id=checkpoint.run_id,
        step=checkpoint.step,
        num_stages=checkpoint.num_stages,
        complete=checkpoint.complete,
        bytes=sum(row.bytes for row in checkpoint.rows),
        stages=[
            CheckpointStageOut(stage=r.stage, bytes=r.bytes, sha256=r.sha256, created_at=r.created_at)
            for r in checkpoint.rows
        ],
    )


def get_store(request: Request) -> CheckpointStore:
    return request.app.state.checkpoints


StoreDep = Annotated[CheckpointStore, Depends(get_store)]


def run_for_owner_or_peer(
    request: Request,
    run_id: RunId,
    session: SessionDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
    cookie: Annotated[str | None, Depends(_cookie_scheme)],
    peer_id: PeerIdHeader = None,
    credential: PeerCredentialHeader = None,
) -> Run:
    """The run, for a peer of it (X-Peer-Id + X-Peer-Credential) or for its owner or an admin."""
    if peer_id is not None or credential is not None:
        service.peer_for_run(session, run_id, peer_id or 0, credential or "")
        return service.get_run(session, run_id)
    caller = get_caller(request, session, bearer, cookie)
    return runs.get_run_for(session, caller.user, run_id)


OwnerOrPeerRun = Annotated[Run, Depends(run_for_owner_or_peer)]


@router.put(
    "/{step}/stages/{stage}",
    responses={
        403: {"model": ErrorOut},
        409: {"model": ErrorOut},
        413: {"model": ErrorOut},
        422: {"model": ErrorOut},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload_stage_checkpoint(
    request: Request,
    run_id: RunId,
    step: Step,
    stage: Stage,
    peer_id: Annotated[int, Header(alias="X-Peer-Id", ge=1, le=MAX_ID)],
    credential: Annotated[str, Header(alias="X-Peer-Credential", max_length=256)],
) -> CheckpointStepOut:
    """Store one stage's safetensors file (model and optimizer tensors) for `step`; raw bytes body."""
    settings = request.app.state.settings
    store: CheckpointStore = request.app.state.checkpoints
    factory = request.app.state.session_factory

    def authorize() -> int:
        with factory() as session:
            peer = service.peer_for_run(session, run_id, peer_id, credential)
            run = service.get_run(session, run_id)
            service.check_upload(session, run, step, stage, keep=settings.checkpoint_keep)
            # Before a byte of the body is read: a peer uploads only what the coordinator asked of it.
            service.check_asked(session, run, peer, step, stage)
            left = service.quota_left(session, run, step, stage, quota=settings.checkpoint_quota_bytes)
            return min(max_stage_bytes(run.model_preset), left if left is not None else MAX_ID**2)

    limit = await anyio.to_thread.run_sync(authorize)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"checkpoint of {declared} bytes exceeds this run's limit of {limit} bytes"
            " (the stage's largest possible size, or what is left of the run's checkpoint quota)"
        )

    temp = await anyio.to_thread.run_sync(store.new_incoming, run_id)
    try:
        size, sha256 = await _receive(request, temp, limit)
        await anyio.to_thread.run_sync(check_safetensors, temp)
        ready = await anyio.to_thread.run_sync(store.make_ready, temp, run_id, step, stage, sha256)

        def commit() -> CheckpointStepOut:
            # Recorded first, then moved into place: a failed commit leaves the stored file and its
            # row as they were; a crash between the two is finished by recovery at start.
            with store.lock, factory() as session:
                try:
                    run = service.get_run(session, run_id)
                    peer = service.peer_for_run(session, run_id, peer_id, credential)
                    current, pruned = service.record_upload(
                        session,
                        store,
                        run=run,
                        peer=peer,
                        step=step,
                        stage=stage,
                        size=size,
                        sha256=sha256,
                        keep=settings.checkpoint_keep,
                        quota=settings.checkpoint_quota_bytes,
                    )
                    commit_and_publish(session, request.app.state.feed)
                except BaseException:
                    ready.unlink(missing_ok=True)
                    raise
                store.install(ready, run_id, step, stage)
                store.write_manifest(run_id, step, service.manifest(run, current))
                for old in pruned:
                    store.delete_step(run_id, old)
                return _step_out(current)

        return await anyio.to_thread.run_sync(commit)
    finally:
        temp.unlink(missing_ok=True)


async def _receive(request: Request, temp: Path, limit: int) -> tuple[int, str]:
    """Stream the body into `temp`, hashing it; 413 as soon as it passes `limit`."""
    digest = hashlib.sha256()
    size = 0
    pending: list[bytes] = []
    pending_bytes = 0
    with temp.open("wb") as f:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"checkpoint exceeds this run's limit of {limit} bytes")
            digest.update(chunk)
            pending.append(chunk)
            pending_bytes += len(chunk)
            if pending_bytes >= CHUNK:
                await anyio.to_thread.run_sync(f.write, b"".join(pending))
                pending, pending_bytes = [], 0
        if pending:
            await anyio.to_thread.run_sync(f.write, b"".join(pending))
    return size, digest.hexdigest()


@router.get("")
def list_checkpoints(run_id: RunId, caller: CurrentUser, session: SessionDep) -> list[CheckpointStepOut]:
    """Every step with at least one stage file, newest first, with whether all stages are in."""
    run = runs.get_run_for(session, caller.user, run_id)
    return [_step_out(checkpoint) for checkpoint in service.steps(session, run)]


@router.post("", status_code=status.HTTP_202_ACCEPTED, responses={409: {"model": ErrorOut}})
def request_checkpoint(
    live: LiveDep, run_id: RunId, caller: CurrentUser, session: SessionDep, feed: FeedDep
) -> CheckpointRequested:
    """Ask the run's peers to save their stages at the next step; they upload when they have."""
    run = runs.get_run_for(session, caller.user, run_id)
    if run.status not in JOINABLE_STATUSES:
        raise Conflict(f"run {run.id} is {run.status}; it has no peers to save a checkpoint")
    record_event(
        session,
        run_id=run.id,
        kind="checkpoint_requested",
        message=f"checkpoint requested by {caller.user.username} at step {run.current_step}",
        data={"step": run.current_step},
    )
    commit_and_publish(session, feed)
    # Routes run in a worker thread; the live swarm lives on the event loop.
    from_thread.run(live.request_checkpoint, run.id)
    return CheckpointRequested(run_id=run.id, current_step=run.current_step)


@router.get("/latest")
def latest_checkpoint(run: OwnerOrPeerRun, session: SessionDep) -> CheckpointStepOut:
    """The newest step whose every stage is stored; 404 while there is none."""
    return _step_out(service.latest_complete(session, run))


def _stream(handle: IO[bytes]) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def _open(store: CheckpointStore, relative: str) -> IO[bytes]:
    # Opened before the response starts: retention may unlink the file, the open handle still reads.
    try:
        return store.path(relative).open("rb")
    except FileNotFoundError:
        raise NotFound(f"checkpoint file {relative} is missing from the store") from None


@router.get(
    "/{step}/stages/{stage}",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The stage's safetensors file"},
        403: {"model": ErrorOut},
    },
)
def download_stage_checkpoint(
    step: Step, stage: Stage, run: OwnerOrPeerRun, session: SessionDep, store: StoreDep
) -> StreamingResponse:
    """One stage's safetensors file, for the run's peers (to resume a stage) or its owner."""
    row = service.stage_row(session, run, step, stage)
    handle = _open(store, row.path)
    return StreamingResponse(
        _stream(handle),
        media_type="application/octet-stream",
        headers={
            "Content-Length": str(row.bytes),
            "Content-Disposition": f'attachment; filename="run-{run.id}-step-{step}-{Path(row.path).name}"',
            "X-Checkpoint-SHA256": row.sha256,
        },
    )


def model_config_json(run: Run, step: int) -> dict[str, object]:
    preset = get_preset(run.model_preset)
    return {
        "format": "swarmhub-checkpoint",
        "run_id": run.id,
        "step": step,
        "model_preset": preset.name,
        "d_model": preset.d_model,
        "n_layer": preset.n_layer,
        "n_head": preset.n_head,
        "max_seq_len": preset.max_seq_len,
        "vocab_size": preset.vocab_size,
        "token_bytes": preset.token_bytes,
        "parameter_count": preset.parameter_count,
        "num_stages": run.num_stages,
        "stage_files": [f"stage-{s}.safetensors" for s in range(run.num_stages)],
        "tensor_prefixes": {"model.": "module parameters", "optim.<index>.": "optimizer state"},
        "run": run_spec(run).model_dump(mode="json"),
    }


class _Sink:
    """An unseekable file for zipfile to write into; the stream takes what it wrote so far."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._chunks.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data


def _zip_stream(entries: list[tuple[str, int, Iterator[bytes]]], handles: list[IO[bytes]]) -> Iterator[bytes]:
    """A stored (uncompressed) zip of `entries` (name, size, bytes) written as it streams; `handles`
    (the files the entries read) are closed at the end, or when the client goes away."""
    sink = _Sink()
    try:
        with zipfile.ZipFile(sink, "w", zipfile.ZIP_STORED) as archive:  # type: ignore[arg-type]
            for name, size, chunks in entries:
                info = zipfile.ZipInfo(name, date_time=(2025, 1, 1, 0, 0, 0))
                info.file_size = size  # decides zip64 up front, which an unseekable stream needs
                with archive.open(info, "w") as entry:
                    for chunk in chunks:
                        entry.write(chunk)
                        yield sink.take()
        yield sink.take()
    finally:
        for handle in handles:
            handle.close()


def _complete_checkpoint(session: Session, run: Run, step: int) -> service.StepCheckpoint:
    checkpoint = service.step_checkpoint(session, run, step)
    if not checkpoint.complete:
        missing = sorted(set(range(run.num_stages)) - {r.stage for r in checkpoint.rows})
        raise Conflict(f"checkpoint of step {step} is incomplete: stages {missing} are missing")
    return checkpoint


def _open_stages(store: CheckpointStore, checkpoint: service.StepCheckpoint) -> list[IO[bytes]]:
    handles: list[IO[bytes]] = []
    try:
        for row in checkpoint.rows:
            handles.append(_open(store, row.path))
    except NotFound:
        for handle in handles:
            handle.close()
        raise
    return handles


@router.get(
    "/{step}/model",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/zip": {}}, "description": "config.json and every stage's file"},
        409: {"model": ErrorOut},
    },
)
def download_model(
    run_id: RunId, step: Step, caller: CurrentUser, session: SessionDep, store: StoreDep
) -> StreamingResponse:
    """The whole model at `step` as a zip (stored, not compressed): README.md, config.json and
    stage-<s>.safetensors."""
    run = runs.get_run_for(session, caller.user, run_id)
    checkpoint = _complete_checkpoint(session, run, step)
    handles = _open_stages(store, checkpoint)
    config = json.dumps(model_config_json(run, step), indent=2).encode() + b"\n"
    readme = stages_readme(run.id, step, get_preset(run.model_preset), run.num_stages).encode()
    entries = [
        ("README.md", len(readme), iter([readme])),
        ("config.json", len(config), iter([config])),
        *(
            (f"stage-{row.stage}.safetensors", row.bytes, _stream(handle))
            for row, handle in zip(checkpoint.rows, handles, strict=True)
        ),
    ]
    return StreamingResponse(
        _zip_stream(entries, handles),
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="run-{run.id}-step-{step}.zip"'},
    )


@router.get(
    "/{step}/hf",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/zip": {}}, "description": "A Hugging Face transformers model"},
        409: {"model": ErrorOut},
        422: {"model": ErrorOut},
    },
)
def download_hf_model(
    run_id: RunId, step: Step, caller: CurrentUser, session: SessionDep, store: StoreDep
) -> StreamingResponse:
    """The model at `step` for Hugging Face transformers, as a zip: what `swarmhub export --format hf`
    writes (config, weights, tokenizer, modeling code, README.md)."""
    run = runs.get_run_for(session, caller.user, run_id)
    checkpoint = _complete_checkpoint(session, run, step)
    preset = get_preset(run.model_preset)
    handles = _open_stages(store, checkpoint)
    try:
        files = export_files(
            handles,
            preset,
            {"swarmhub_run": str(run.id), "swarmhub_step": str(step)},
            hf_readme(run.id, step, preset),
        )
    except (ValueError, KeyError) as e:
        for handle in handles:
            handle.close()
        raise Unprocessable(f"checkpoint of step {step} is not this run's model: {e}") from None
    return StreamingResponse(
        _zip_stream([(f.name, f.size, f.chunks()) for f in files], handles),
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="run-{run.id}-step-{step}-hf.zip"'},
    )


@router.get("/{step}/samples", responses={409: {"model": ErrorOut}})
def checkpoint_samples(
    run_id: RunId,
    step: Step,
    caller: CurrentUser,
    session: SessionDep,
    sampler: Annotated[Sampler, Depends(get_sampler)],
) -> SamplesOut:
    """Text the model at `step` writes after a fixed set of prompts (greedy). The first request starts
    generating them: `status` is "generating" until they are "ready"."""
    run = runs.get_run_for(session, caller.user, run_id)
    _complete_checkpoint(session, run, step)
    return sampler.samples(run.id, step).model_copy(update={"loss": service.loss_at(session, run, step)})
