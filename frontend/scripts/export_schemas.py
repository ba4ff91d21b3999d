"""Write the schemas the dashboard's TypeScript is generated from (`make generate`).

- `openapi.json`: the coordinator's REST API, from `create_app().openapi()` (no server, no database).
- `feed.json`: JSON schema of the dashboard feed's websocket frames (`server.schemas.FeedFrame`),
  which OpenAPI does not describe.

`npm run generate` (frontend/scripts/generate.mjs) turns both into frontend/src/generated/.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import core_schema

from server.app import create_app
from server.schemas import FeedFrame

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "schema"


class _SentFieldsRequired(GenerateJsonSchema):
    """Frames go out through `model_dump(mode="json")`, which writes every field, defaults included.

    Pydantic's serialization schema still calls a field with a default optional; the frames'
    `type` literals have defaults, and an optional discriminator would defeat narrowing in TypeScript.
    """

    def field_is_required(
        self,
        field: core_schema.ModelField | core_schema.DataclassField | core_schema.TypedDictField,
        total: bool,
    ) -> bool:
        if self.mode == "serialization":
            return not field.get("serialization_exclude")
        return super().field_is_required(field, total)

    def field_title_should_be_set(self, schema: core_schema.CoreSchemaOrField) -> bool:
        # Titles derived from field names ("Run Id") would become one named TypeScript alias per field.
        return False


def openapi_document() -> dict[str, Any]:
    return create_app().openapi()


def feed_schema() -> dict[str, Any]:
    schema = TypeAdapter(FeedFrame).json_schema(mode="serialization", schema_generator=_SentFieldsRequired)
    return {"title": "FeedFrame", **schema}


def write(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help="folder to write into")
    out: Path = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    write(out / "openapi.json", openapi_document())
    write(out / "feed.json", feed_schema())


if __name__ == "__main__":
    main()
