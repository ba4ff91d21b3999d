"""A trained-looking checkpoint of a real model, written the way the coordinator's store holds one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from peer.model import PipelineStage, build_full_model, state_to_bytes
from swarmhub.presets import get_preset


def perturbed_model(preset_name: str, num_stages: int, seed: int) -> list[PipelineStage]:
    """The model with every parameter moved off its init (LayerNorms away from 1/0, biases nonzero),
    so an export that dropped or misplaced any tensor would compute something else."""
    stages = build_full_model(get_preset(preset_name), num_stages, seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for stage in stages:
            for param in stage.parameters():
                param.add_(0.1 * torch.randn(param.shape, generator=g))
    return [stage.eval() for stage in stages]


def write_stored_checkpoint(
    root: Path, run_id: int, step: int, stages: list[PipelineStage], preset_name: str
) -> Path:
    """run-<id>/step-<n>/ with stage files (model and optimizer tensors) and a complete manifest."""
    step_dir = root / f"run-{run_id}" / f"step-{step}"
    step_dir.mkdir(parents=True)
    entries = {}
    for stage in stages:
        state = {f"model.{k}": v for k, v in stage.state_dict().items()}
        state["optim.0.exp_avg"] = torch.ones(3)
        blob = state_to_bytes(state, {"step": str(step)})
        name = f"stage-{stage.stage}.safetensors"
        (step_dir / name).write_bytes(blob)
        entries[str(stage.stage)] = {
            "file": name,
            "bytes": len(blob),
            "sha256": hashlib.sha256(blob).hexdigest(),
        }
    manifest = {
        "run_id": run_id,
        "step": step,
        "num_stages": len(stages),
        "model_preset": preset_name,
        "complete": True,
        "stages": entries,
    }
    (step_dir / "manifest.json").write_text(json.dumps(manifest))
    return step_dir
