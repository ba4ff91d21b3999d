"""Model presets, for the create-run form. Public: they are the same for everyone and reveal nothing."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from server.errors import NotFound, Unprocessable
from server.schemas import ErrorOut, PresetOut
from swarmhub import setting_messages as say
from swarmhub.presets import PRESETS
from swarmhub.resources import MemoryEstimate, estimate_memory, estimate_stage_memory, stage_parameters
from swarmhub.run_settings import OptimizerName, RunSettings

router = APIRouter(prefix="/api/presets", tags=["presets"])


class MemoryOut(BaseModel):
    """Estimated bytes a peer needs (`swarmhub/resources.py`), by what holds them."""

    parameters: int
    optimizer: int
    gradients: int
    activations: int
    total: int

    @classmethod
    def of(cls, estimate: MemoryEstimate) -> MemoryOut:
        return cls(
            parameters=estimate.parameters,
            optimizer=estimate.optimizer,
            gradients=estimate.gradients,
            activations=estimate.activations,
            total=estimate.total,
        )


class StageEstimateOut(BaseModel):
    stage: int
    parameter_count: int
    memory: MemoryOut
    """A peer serving this stage only."""


class RunEstimateOut(BaseModel):
    """What a run of this preset and shape asks of its peers' machines."""

    stages: list[StageEstimateOut]
    any_stage: MemoryOut
    """What a peer must hold to be given any stage (rebalancing moves peers): the bound a joining peer
    checks against its free memory before it allocates anything."""


def _bound(field: str) -> dict[str, float]:
    """A query parameter's bounds: those of the run setting of the same name."""
    bounds: dict[str, float] = {}
    for constraint in RunSettings.model_fields[field].metadata:
        for key in ("ge", "le"):
            if (value := getattr(constraint, key, None)) is not None:
                bounds[key] = value
    return bounds


@router.get("")
def list_presets() -> list[PresetOut]:
    """Every model preset, smallest first, with its parameter count; no sign-in needed."""
    return [PresetOut.model_validate(preset) for preset in PRESETS.values()]


@router.get("/{name}/estimate", responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def estimate(
    name: str,
    num_stages: Annotated[int, Query(**_bound("num_stages"))],
    microbatch_size: Annotated[int, Query(**_bound("microbatch_size"))],
    seq_len: Annotated[int, Query(**_bound("seq_len"))],
    optimizer: OptimizerName = "adamw",
) -> RunEstimateOut:
    """Memory per stage of a run with these settings (the create-run form shows it as it is filled in)."""
    preset = PRESETS.get(name)
    if preset is None:
        raise NotFound(say.unknown_preset(name, list(PRESETS)))
    if num_stages > preset.n_layer:
        raise Unprocessable(say.stages_over_blocks(preset.n_layer, preset.name))
    if seq_len > preset.max_seq_len:
        raise Unprocessable(say.seq_len_over(preset.max_seq_len, preset.name))
    shape = {"num_stages": num_stages, "microbatch_size": microbatch_size, "seq_len": seq_len}
    return RunEstimateOut(
        stages=[
            StageEstimateOut(
                stage=stage,
                parameter_count=stage_parameters(preset, num_stages, stage),
                memory=MemoryOut.of(estimate_stage_memory(preset, stage=stage, optimizer=optimizer, **shape)),
            )
            for stage in range(num_stages)
        ],
        any_stage=MemoryOut.of(estimate_memory(preset, optimizer=optimizer, **shape)),
    )
