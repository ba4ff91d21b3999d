"""A run's settings are defined once (swarmhub/run_settings.py): the `runs` table, the API bodies
and the wire spec must all carry every field, and the status enums must match what the tables allow."""

from __future__ import annotations

import types
from typing import Literal, Union, get_args, get_origin

import annotated_types
import pytest
import sqlalchemy as sa
from pydantic import ValidationError
from pydantic_core import PydanticUndefined

from server.models import Peer, Run, fill_run_settings, run_settings
from server.schemas import RunCreate, RunOut
from server.services.runs import run_spec
from swarmhub.run_settings import RunSettings
from swarmhub.status import PeerState, RunStatus
from swarmhub.wire import CoordinatorToPeer, RunSpec

SETTINGS = list(RunSettings.model_fields.items())


def _optional(annotation: object) -> tuple[object, bool]:
    """(the annotation without None, whether None was allowed)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        assert len(args) == 1, annotation
        return args[0], True
    return annotation, False


def _check_constraint_values(table: sa.Table, column: str) -> set[str]:
    (text,) = [
        str(c.sqltext)
        for c in table.constraints
        if isinstance(c, sa.CheckConstraint) and str(c.sqltext).startswith(f"{column} IN ")
    ]
    return {part.strip().strip("'") for part in text[text.index("(") + 1 : text.rindex(")")].split(",")}


@pytest.mark.parametrize(("name", "field"), SETTINGS, ids=[name for name, _ in SETTINGS])
def test_the_runs_table_has_a_compatible_column_for_every_setting(name, field):
    assert name in Run.__table__.c, f"RunSettings.{name} has no column in the runs table"
    column = Run.__table__.c[name]
    annotation, nullable = _optional(field.annotation)
    assert column.nullable == nullable
    if get_origin(annotation) is Literal:
        values = get_args(annotation)
        assert column.type.python_type is str
        assert column.type.length >= max(len(v) for v in values)
        assert _check_constraint_values(Run.__table__, name) == set(values)
        return
    assert column.type.python_type is annotation
    max_length = next((m.max_length for m in field.metadata if isinstance(m, annotated_types.MaxLen)), None)
    if annotation is str:
        assert max_length is not None and column.type.length >= max_length
    if annotation is int and any(
        isinstance(m, annotated_types.Le) and m.le > 2**31 - 1 for m in field.metadata
    ):
        assert isinstance(column.type, sa.BigInteger)


@pytest.mark.parametrize(
    ("column", "enum"), [(Run.__table__.c.status, RunStatus), (Peer.__table__.c.state, PeerState)]
)
def test_status_columns_allow_exactly_the_enums_values(column, enum):
    assert _check_constraint_values(column.table, column.name) == {member.value for member in enum}
    assert column.type.length >= max(len(member) for member in enum)


def test_api_bodies_and_wire_spec_carry_every_setting():
    for model in (RunCreate, RunOut, RunSpec):
        assert issubclass(model, RunSettings)
        for name, field in RunSettings.model_fields.items():
            assert model.model_fields[name].default == field.default, (model.__name__, name)


def test_a_row_gives_back_the_settings_it_was_filled_with():
    settings = RunCreate(
        name="round trip",
        model_preset="small",
        dataset="ab" * 32,
        num_stages=3,
        target_batch_size=48,
        microbatch_size=6,
        seq_len=128,
        optimizer="sgd",
        learning_rate=0.1,
        warmup_steps=0,
        weight_decay=0.0,
        compression="int8",
        max_steps=7,
        seed=42,
        rebalance=False,
    )
    run = Run(id=5)
    fill_run_settings(run, settings)
    assert run_settings(run) == RunSettings.model_validate(settings.model_dump())
    assert run_spec(run) == RunSpec(run_id=5, **settings.model_dump())


def test_settings_that_do_not_fit_their_preset_are_refused_everywhere():
    too_many = {"name": "x", "model_preset": "tiny", "num_stages": 5}
    for model, extra in ((RunSettings, {}), (RunCreate, {}), (RunSpec, {"run_id": 1})):
        with pytest.raises(ValidationError, match=r"Must be at most 4: preset .tiny. has 4 blocks"):
            model.model_validate(too_many | extra)


def test_openapi_carries_each_settings_default_bound_and_description(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    create = schemas["RunCreate"]
    assert create["required"] == ["name"]
    for name, field in RunSettings.model_fields.items():
        prop = create["properties"][name]
        assert prop["description"] == field.description
        # FastAPI leaves out null defaults (max_steps): absent means None.
        if field.default not in (PydanticUndefined, None):
            assert prop["default"] == field.default
    assert create["properties"]["num_stages"]["maximum"] == 64
    assert set(schemas["RunOut"]["required"]) >= set(RunSettings.model_fields)
    assert schemas["RunStatus"]["enum"] == [s.value for s in RunStatus]
    assert schemas["PeerState"]["enum"] == [s.value for s in PeerState]
    assert schemas["RunOut"]["properties"]["status"] == {"$ref": "#/components/schemas/RunStatus"}


def test_rows_give_back_enum_members_and_refuse_unknown_states(app, client, owner_headers):
    run_id = client.post("/api/runs", json={"name": "enums"}, headers=owner_headers).json()["id"]
    with app.state.session_factory() as session:
        run = session.get_one(Run, run_id)
        assert run.status is RunStatus.ACTIVE
        assert session.scalar(sa.select(Run.id).where(Run.status == "active")) == run_id
        run.status = "done"  # type: ignore[assignment]
        with pytest.raises(sa.exc.StatementError, match="'done' is not a valid RunStatus"):
            session.flush()


def test_run_status_frames_carry_the_enum():
    frame = CoordinatorToPeer.validate_json('{"type": "run_status", "status": "finished"}')
    assert frame.status is RunStatus.FINISHED
    with pytest.raises(ValidationError):
        CoordinatorToPeer.validate_json('{"type": "run_status", "status": "done"}')
