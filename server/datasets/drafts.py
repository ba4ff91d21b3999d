"""Dataset drafts: the files an owner uploads one by one before sealing them into one dataset.

Layout under `<dataset_dir>/drafts/<id>/`: `draft.json` (owner, name, the files in upload order)
and one `<index>` file per upload. The id is 128 random bits, and only the owner's requests see a
draft at all. Bounded by the settings: files and bytes per draft, drafts per owner; a draft no
file was added to for `dataset_draft_ttl_s` is pruned (when any owner starts a draft, and at start).

A coordinator runs one process, so one lock orders every change to the drafts.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, Field

from server.errors import Conflict, NotFound, ServiceError
from swarmhub.settings import ServerSettings

DRAFT_ID_PATTERN = r"^[0-9a-f]{32}$"
RECORD = "draft.json"


class DraftTooLarge(ServiceError):
    status_code = 413


class DraftFile(BaseModel):
    name: str
    bytes: int


class Draft(BaseModel):
    id: str = Field(pattern=DRAFT_ID_PATTERN)
    owner_id: int
    name: str
    created_at: datetime
    updated_at: datetime
    files: list[DraftFile] = []
    sealing: bool = False
    """Being packed: no more files are accepted (a file added now would be lost with the draft)."""

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)


class DraftStore:
    def __init__(self, settings: ServerSettings) -> None:
        self.root = settings.dataset_dir / "drafts"
        self.max_files = settings.dataset_draft_max_files
        self.max_bytes = settings.dataset_draft_max_bytes
        self.per_owner = settings.dataset_drafts_per_owner
        self.ttl = timedelta(seconds=settings.dataset_draft_ttl_s)
        self._lock = threading.Lock()

    def expires_at(self, draft: Draft) -> datetime:
        return draft.updated_at + self.ttl

    def _record_path(self, draft_id: str) -> Path:
        return self.root / draft_id / RECORD

    def _load(self, draft_id: str) -> Draft | None:
        try:
            return Draft.model_validate_json(self._record_path(draft_id).read_bytes())
        except (FileNotFoundError, ValueError):
            return None

    def _save(self, draft: Draft) -> None:
        target = self._record_path(draft.id)
        temp = target.with_suffix(".part")
        temp.write_text(draft.model_dump_json())
        os.replace(temp, target)

    def _all(self) -> list[tuple[Path, Draft | None]]:
        if not self.root.is_dir():
            return []
        return [(folder, self._load(folder.name)) for folder in self.root.iterdir() if folder.is_dir()]

    def prune(self, now: datetime) -> None:
        """Delete abandoned drafts, and folders a crash left without a readable record."""
        with self._lock:
            self._prune(now)

    def _prune(self, now: datetime) -> None:
        for folder, draft in self._all():
            if draft is None or self.expires_at(draft) <= now:
                shutil.rmtree(folder, ignore_errors=True)

    def create(self, owner_id: int, name: str, now: datetime) -> Draft:
        with self._lock:
            self._prune(now)
            held = sum(1 for _, draft in self._all() if draft is not None and draft.owner_id == owner_id)
            if held >= self.per_owner:
                raise Conflict(
                    f"you already hold {held} unsealed dataset drafts, the limit; seal or delete one first"
                )
            draft = Draft(
                id=secrets.token_hex(16), owner_id=owner_id, name=name, created_at=now, updated_at=now
            )
            (self.root / draft.id).mkdir(parents=True)
            self._save(draft)
            return draft

    def get(self, draft_id: str, owner_id: int) -> Draft:
        """The owner's draft; another owner's is reported as missing, so ids cannot be probed."""
        draft = self._load(draft_id)
        if draft is None or draft.owner_id != owner_id:
            raise NotFound(f"dataset draft {draft_id} not found")
        return draft

    def room(self, draft: Draft, per_file: int) -> int:
        """The most bytes the draft's next file may have; refuses when the draft is full."""
        if len(draft.files) >= self.max_files:
            raise Conflict(f"the draft already holds {len(draft.files)} files, the limit of a dataset")
        room = min(per_file, self.max_bytes - draft.bytes)
        if room <= 0:
            raise DraftTooLarge(f"the draft already holds {draft.bytes} bytes, the limit of a dataset")
        return room

    def add_file(self, draft_id: str, owner_id: int, name: str, received: Path, now: datetime) -> Draft:
        """Move a received upload into the draft, checking the limits again (uploads may race)."""
        size = received.stat().st_size
        with self._lock:
            draft = self.get(draft_id, owner_id)
            self._check_open(draft)
            if size > self.room(draft, per_file=size):
                raise DraftTooLarge(
                    f"{name} would take the draft to {draft.bytes + size} bytes, "
                    f"over the limit of {self.max_bytes} bytes per dataset"
                )
            os.replace(received, self.root / draft_id / str(len(draft.files)))
            draft = draft.model_copy(
                update={"files": [*draft.files, DraftFile(name=name, bytes=size)], "updated_at": now}
            )
            self._save(draft)
            return draft

    def _check_open(self, draft: Draft) -> None:
        if draft.sealing:
            raise Conflict(f"dataset draft {draft.id} is being sealed")

    def begin_seal(self, draft_id: str, owner_id: int) -> Draft:
        with self._lock:
            draft = self.get(draft_id, owner_id)
            self._check_open(draft)
            if not draft.files:
                raise Conflict(f"dataset draft {draft_id} has no files yet")
            draft = draft.model_copy(update={"sealing": True})
            self._save(draft)
            return draft

    def abort_seal(self, draft: Draft) -> None:
        """Packing failed (a file is unreadable): the owner may delete the draft or start over."""
        with self._lock:
            self._save(draft.model_copy(update={"sealing": False}))

    def file_paths(self, draft: Draft) -> list[tuple[Path, str]]:
        return [(self.root / draft.id / str(index), f.name) for index, f in enumerate(draft.files)]

    def delete(self, draft_id: str, owner_id: int) -> None:
        with self._lock:
            self.get(draft_id, owner_id)
            shutil.rmtree(self.root / draft_id, ignore_errors=True)


def utcnow() -> datetime:
    return datetime.now(UTC)
