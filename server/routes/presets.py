"""Model presets, for the create-run form. Public: they are the same for everyone and reveal nothing."""

from __future__ import annotations

from fastapi import APIRouter

from server.schemas import PresetOut
from swarmhub.presets import PRESETS

router = APIRouter(prefix="/api/presets", tags=["presets"])


@router.get("")
def list_presets() -> list[PresetOut]:
    """Every model preset, smallest first, with its parameter count; no sign-in needed."""
    return [PresetOut.model_validate(preset) for preset in PRESETS.values()]
