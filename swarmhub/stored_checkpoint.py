"""A complete checkpoint in the coordinator's store, read from its manifest (no database, no torch).

`server/checkpoints/store.py` writes the layout: run-<id>/step-<n>/manifest.json beside the stage
files. The command line (`swarmhub export`, `swarmhub sample`) and the sampler subprocess read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from swarmhub.presets import ModelPreset, get_preset


@dataclass(frozen=True)
class StoredCheckpoint:
    run_id: int
    step: int
    preset: ModelPreset
    directory: Path
    stage_files: list[Path]
    """Stage s's safetensors file at index s."""


def read_stored(step_dir: Path) -> StoredCheckpoint:
    """The checkpoint in `step_dir`; ValueError if it has no manifest or misses a stage."""
    try:
        manifest = json.loads((step_dir / "manifest.json").read_text())
    except FileNotFoundError:
        raise ValueError(f"no checkpoint in {step_dir}") from None
    stages = manifest["stages"]
    missing = [s for s in range(manifest["num_stages"]) if str(s) not in stages]
    if not manifest["complete"] or missing:
        raise ValueError(f"checkpoint in {step_dir} is incomplete: stages {missing} are missing")
    return StoredCheckpoint(
        run_id=manifest["run_id"],
        step=manifest["step"],
        preset=get_preset(manifest["model_preset"]),
        directory=step_dir,
        stage_files=[step_dir / stages[str(s)]["file"] for s in range(manifest["num_stages"])],
    )


def find_stored(root: Path, run_id: int, step: int | None) -> StoredCheckpoint:
    """Run `run_id`'s checkpoint of `step` under store `root`, or its newest complete one if step is None."""
    run_dir = root / f"run-{run_id}"
    if step is not None:
        return read_stored(run_dir / f"step-{step}")
    steps = sorted(
        (int(d.name.removeprefix("step-")) for d in run_dir.glob("step-*") if d.name[5:].isdigit()),
        reverse=True,
    )
    for candidate in steps:
        try:
            return read_stored(run_dir / f"step-{candidate}")
        except ValueError:
            continue
    raise ValueError(f"run {run_id} has no complete checkpoint in {root}")
