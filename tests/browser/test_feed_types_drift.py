"""The dashboard's TypeScript mirror of the feed frames must match the server's pydantic models.

Websocket frames are not in OpenAPI, so frontend/src/feed-types.ts copies them by hand. This test
walks the `FeedFrame` union in server/schemas.py (and every model nested in it), and compares each
model's field names with the TypeScript interface of the same name, including inherited fields
(`interface RunDetail extends RunOut`). It also checks each frame's `type` literal, the TS
`FeedFrame` union, and the REST models the dashboard mirrors in frontend/src/types.ts (presets from
GET /api/presets, checkpoints). Fast, no browser: runs in every `pytest`.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from server import schemas
from server.routes import checkpoints

FRONTEND_SRC = Path(__file__).resolve().parents[2] / "frontend" / "src"
FEED_TYPES = FRONTEND_SRC / "feed-types.ts"
REST_TYPES = FRONTEND_SRC / "types.ts"

REST_MODELS: list[type[BaseModel]] = [
    schemas.PresetOut,
    checkpoints.CheckpointStepOut,
    checkpoints.CheckpointStageOut,
    checkpoints.CheckpointRequested,
]
"""REST bodies the dashboard reads, mirrored as interfaces of the same name in types.ts."""

_INTERFACE = re.compile(
    r"export\s+interface\s+(\w+)(?:\s+extends\s+([\w\s,]+?))?\s*\{(.*?)\n\s*\}", re.DOTALL
)
_FIELD = re.compile(r"^\s*(\w+)\??\s*:\s*(.+?);\s*$", re.MULTILINE)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)


def parse_ts_interfaces(source: str) -> dict[str, dict[str, str]]:
    """Interface name -> {field: TS type}, with the fields of `extends` bases merged in."""
    source = _COMMENT.sub("", source)
    own: dict[str, tuple[list[str], dict[str, str]]] = {}
    for name, bases, body in _INTERFACE.findall(source):
        fields = {field: ts_type.strip() for field, ts_type in _FIELD.findall(body)}
        own[name] = ([b.strip() for b in bases.split(",") if b.strip()], fields)

    def resolve(name: str, seen: tuple[str, ...] = ()) -> dict[str, str]:
        assert name not in seen, f"interface inheritance cycle through {name}"
        bases, fields = own[name]
        merged: dict[str, str] = {}
        for base in bases:
            merged.update(resolve(base, (*seen, name)))
        merged.update(fields)
        return merged

    return {name: resolve(name) for name in own}


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found.extend(_models_in(arg))
    return found


def feed_models() -> tuple[list[type[BaseModel]], list[type[BaseModel]]]:
    """(frame models in the FeedFrame union, every model reachable from them), each once."""
    frames = _models_in(schemas.FeedFrame)
    reachable: list[type[BaseModel]] = []
    queue = list(frames)
    while queue:
        model = queue.pop(0)
        if model in reachable:
            continue
        reachable.append(model)
        for field in model.model_fields.values():
            queue.extend(_models_in(field.annotation))
    return frames, reachable


def test_parser_reads_interfaces_with_inheritance() -> None:
    source = """
    export interface A {
      x: number;
      // a comment: not_a_field: string;
      y?: string | null;
    }
    export interface B extends A {
      /** doc */
      z: Record<string, number>;
    }
    """
    assert parse_ts_interfaces(source) == {
        "A": {"x": "number", "y": "string | null"},
        "B": {"x": "number", "y": "string | null", "z": "Record<string, number>"},
    }


def test_feed_frame_union_is_not_empty() -> None:
    frames, reachable = feed_models()
    assert len(frames) >= 2, "schemas.FeedFrame no longer looks like a union of frame models"
    assert set(frames) <= set(reachable)


def test_every_feed_model_has_a_matching_ts_interface() -> None:
    interfaces = parse_ts_interfaces(FEED_TYPES.read_text())
    _frames, reachable = feed_models()
    problems: list[str] = []
    for model in reachable:
        name = model.__name__
        if name not in interfaces:
            problems.append(f"{name}: no `export interface {name}` in {FEED_TYPES.name}")
            continue
        python_fields = set(model.model_fields)
        ts_fields = set(interfaces[name])
        if missing := sorted(python_fields - ts_fields):
            problems.append(f"{name}: fields missing in TypeScript: {missing}")
        if extra := sorted(ts_fields - python_fields):
            problems.append(f"{name}: TypeScript has fields the server does not send: {extra}")
    assert not problems, "feed-types.ts drifted from server/schemas.py:\n" + "\n".join(problems)


def test_frame_type_literals_and_union_match() -> None:
    source = FEED_TYPES.read_text()
    interfaces = parse_ts_interfaces(source)
    frames, _ = feed_models()
    for model in frames:
        literal = model.model_fields["type"].default
        assert interfaces[model.__name__].get("type") == f'"{literal}"', (
            f"{model.__name__}.type should be the literal {literal!r} in feed-types.ts"
        )
    union = re.search(r"export\s+type\s+FeedFrame\s*=\s*([^;]+);", _COMMENT.sub("", source))
    assert union, "feed-types.ts lost `export type FeedFrame = ...;`"
    members = {m.strip() for m in union.group(1).split("|") if m.strip()}
    assert members == {m.__name__ for m in frames}


def _field_problems(model: type[BaseModel], interfaces: dict[str, dict[str, str]], where: str) -> list[str]:
    name = model.__name__
    if name not in interfaces:
        return [f"{name}: no `export interface {name}` in {where}"]
    problems = []
    if missing := sorted(set(model.model_fields) - set(interfaces[name])):
        problems.append(f"{name}: fields missing in TypeScript: {missing}")
    if extra := sorted(set(interfaces[name]) - set(model.model_fields)):
        problems.append(f"{name}: TypeScript has fields the server does not send: {extra}")
    return problems


def test_rest_models_the_dashboard_reads_match_types_ts() -> None:
    interfaces = parse_ts_interfaces(REST_TYPES.read_text())
    problems = [p for model in REST_MODELS for p in _field_problems(model, interfaces, REST_TYPES.name)]
    assert not problems, "types.ts drifted from the server's models:\n" + "\n".join(problems)


def test_the_dashboard_takes_presets_from_the_api_not_a_copy() -> None:
    """Presets come from GET /api/presets; a hand-kept table would drift from swarmhub/presets.py."""
    assert not (FRONTEND_SRC / "presets.ts").exists()
    form = (FRONTEND_SRC / "pages" / "CreateRunPage.tsx").read_text()
    assert '"/api/presets"' in form
