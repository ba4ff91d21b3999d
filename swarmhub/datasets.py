"""Datasets the coordinator holds: content-addressed shards and the manifest that lists them.

A dataset is one byte string (the model is byte-level) cut into shards of at most `SHARD_BYTES`;
each shard is named by the sha256 of its bytes, and the manifest (canonical JSON) by the sha256
of its own bytes, which is the dataset's id. A peer that knows an id can check everything it is
served, whoever served it: the manifest against the id, each shard against the manifest.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

BUNDLED_DATASET = "python-stdlib"
"""The corpus every coordinator packs from its own standard library's sources."""
SHA256_PATTERN = r"^[0-9a-f]{64}$"
DATASET_ID_PATTERN = rf"^({BUNDLED_DATASET}|[0-9a-f]{{64}})$"
SHARD_BYTES = 4 * 1024 * 1024
MANIFEST_FORMAT = "swarmhub-dataset/1"
MAX_SHARDS = 1_000_000

Sha256 = Annotated[str, Field(pattern=SHA256_PATTERN)]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_content_id(dataset: str) -> bool:
    """A dataset id that names a manifest by its hash (every id but the bundled corpus's)."""
    return re.fullmatch(SHA256_PATTERN, dataset) is not None


class ShardRef(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: Sha256
    bytes: int = Field(ge=1, le=SHARD_BYTES)


class DatasetManifest(BaseModel):
    """The shards of one dataset, in order; their concatenation is the training corpus."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["swarmhub-dataset/1"] = MANIFEST_FORMAT
    bytes: int = Field(ge=1)
    shards: list[ShardRef] = Field(min_length=1, max_length=MAX_SHARDS)

    @model_validator(mode="after")
    def _sizes_add_up(self) -> DatasetManifest:
        if sum(shard.bytes for shard in self.shards) != self.bytes:
            raise ValueError("the shards' sizes do not add up to the dataset's size")
        return self

    def encode(self) -> bytes:
        """Canonical bytes: the same shards always give the same manifest, hence the same id."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()

    @property
    def id(self) -> str:
        return sha256_hex(self.encode())
