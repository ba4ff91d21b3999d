"""What an uploaded file contributes to a dataset's bytes, by its name's suffix.

Text files contribute their bytes as they are (the model is byte-level); JSONL files the `text`
field of each record, each followed by a newline. Parquet files, read with `pyarrow`, contribute
their documents the same way: the `text` column's values if the file has a column of that name
(it must hold strings), otherwise the values of every string column, row by row and in the
schema's column order; each non-null value is followed by a newline, nulls are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

TEXT_SUFFIXES = (".txt", ".text", ".md", ".rst", ".py", ".csv")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
SUPPORTED = TEXT_SUFFIXES + JSONL_SUFFIXES + PARQUET_SUFFIXES
READ_BYTES = 1024 * 1024
# Rows per batch read from a Parquet file: bounds what one batch holds in memory for typical rows.
PARQUET_BATCH_ROWS = 1024


class UnsupportedFile(ValueError):
    """A file the coordinator will not turn into training bytes; the message says why."""


def check_name(name: str) -> str:
    """The suffix that decides how `name` is read."""
    suffix = Path(name).suffix.lower()
    if suffix not in SUPPORTED:
        raise UnsupportedFile(f"{name}: unsupported file type; use one of {', '.join(SUPPORTED)}")
    return suffix


def file_bytes(path: Path, name: str) -> Iterator[bytes]:
    """The training bytes of the file at `path`, read as its `name` says."""
    suffix = check_name(name)
    if suffix in JSONL_SUFFIXES:
        yield from _jsonl_text(path, name)
        return
    if suffix in PARQUET_SUFFIXES:
        yield from _parquet_text(path, name)
        return
    with path.open("rb") as f:
        while chunk := f.read(READ_BYTES):
            yield chunk


def _jsonl_text(path: Path, name: str) -> Iterator[bytes]:
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise UnsupportedFile(f"{name} line {number}: not a JSON value") from None
            text = record.get("text") if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise UnsupportedFile(f"{name} line {number}: a record needs a string 'text' field")
            yield text.encode("utf-8", errors="surrogatepass") + b"\n"


def _is_string(field: pa.Field) -> bool:
    return pa.types.is_string(field.type) or pa.types.is_large_string(field.type)


def parquet_text_columns(schema: pa.Schema, name: str) -> list[str]:
    """The columns whose values are a Parquet file's documents (see the module's docstring)."""
    if "text" in schema.names:
        if not _is_string(schema.field("text")):
            raise UnsupportedFile(f"{name}: the 'text' column holds {schema.field('text').type}, not strings")
        return ["text"]
    columns = [field.name for field in schema if _is_string(field)]
    if not columns:
        raise UnsupportedFile(f"{name}: no string column to read documents from")
    return columns


def _parquet_text(path: Path, name: str) -> Iterator[bytes]:
    try:
        parquet = pq.ParquetFile(path)
        columns = parquet_text_columns(parquet.schema_arrow, name)
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns):
            yield b"".join(
                value.encode("utf-8", errors="surrogatepass") + b"\n"
                for row in zip(*(batch.column(c).to_pylist() for c in columns), strict=True)
                for value in row
                if value is not None
            )
    except (pa.ArrowException, OSError) as exc:
        raise UnsupportedFile(f"{name}: not a readable Parquet file ({exc})") from None


def directory_files(root: Path) -> list[tuple[Path, str]]:
    """The supported files under `root`, in path order, each with its name relative to `root`."""
    found = sorted(
        (path.relative_to(root).as_posix(), path)
        for path in root.rglob("*")
        if path.is_file() and path.suffix.lower() in SUPPORTED
    )
    if not found:
        raise UnsupportedFile(f"{root} has no {', '.join(SUPPORTED)} files")
    return [(path, name) for name, path in found]


def path_files(path: Path) -> list[tuple[Path, str]]:
    """A file, or the supported files of a directory, each with the name that decides how it is read."""
    if path.is_dir():
        return directory_files(path)
    if path.is_file():
        check_name(path.name)
        return [(path, path.name)]
    raise UnsupportedFile(f"{path} is neither a file nor a directory")


def files_bytes(files: list[tuple[Path, str]]) -> Iterator[bytes]:
    for path, name in files:
        yield from file_bytes(path, name)
