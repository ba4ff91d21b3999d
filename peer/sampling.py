"""Text from a checkpoint: the whole model in one process, greedy or seeded sampling, a fixed prompt set.

Run as `python -m peer.sampling STEP_DIR` (the coordinator does, in a subprocess: it never imports
torch) to write the checkpoint's samples next to its stage files, as `samples.json`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from peer.data import bytes_to_tokens, tokens_to_bytes
from peer.model import PipelineStage, load_stage_state
from swarmhub.presets import ModelPreset
from swarmhub.samples import SAMPLES_FILE, CheckpointSamples, Sample
from swarmhub.stored_checkpoint import read_stored

PROMPTS: tuple[str, ...] = (
    "The ",
    "Once upon a time",
    "In the beginning",
    "def main():\n    ",
    "The meaning of life is",
)
"""Every checkpoint's samples start from these, so steps of a run (and runs) compare side by side."""

MAX_NEW_TOKENS = 64


def load_stages(stage_files: Sequence[Path], preset: ModelPreset) -> list[PipelineStage]:
    """The model from a checkpoint's stage files (stage s in stage_files[s]), in eval mode on the CPU."""
    stages = []
    for index, path in enumerate(stage_files):
        stage = PipelineStage(preset, index, len(stage_files))
        state, _ = load_stage_state(path)
        stage.load_state_dict(
            {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}, strict=True
        )
        stages.append(stage.eval())
    return stages


@torch.no_grad()
def next_token_logits(stages: Sequence[PipelineStage], ids: torch.Tensor) -> torch.Tensor:
    """[B, T] ids -> [B, vocab] logits of the token after them."""
    x = ids
    for stage in stages:
        x = stage(x)
    return x[:, -1, :]


@torch.no_grad()
def generate(
    stages: Sequence[PipelineStage],
    prompt: bytes,
    *,
    max_new_tokens: int = MAX_NEW_TOKENS,
    temperature: float = 0.0,
    seed: int = 0,
) -> bytes:
    """The bytes the model writes after `prompt`: greedy at temperature 0, else seeded sampling.

    The prompt's trailing partial token (token_bytes > 1) is dropped, as in training; the context
    is the last max_seq_len tokens.
    """
    preset = stages[0].preset
    ids = torch.from_numpy(bytes_to_tokens(prompt, preset.token_bytes).astype("int64"))[None, :]
    if ids.shape[1] == 0:
        raise ValueError(f"the prompt needs at least one whole token ({preset.token_bytes} bytes)")
    generator = torch.Generator().manual_seed(seed)
    new: list[int] = []
    for _ in range(max_new_tokens):
        logits = next_token_logits(stages, ids[:, -preset.max_seq_len :])[0]
        if temperature == 0:
            token = int(logits.argmax())
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            token = int(torch.multinomial(probs, 1, generator=generator))
        new.append(token)
        ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return tokens_to_bytes(torch.tensor(new), preset.token_bytes)


def checkpoint_samples(
    stages: Sequence[PipelineStage],
    step: int,
    prompts: Sequence[str] = PROMPTS,
    *,
    max_new_tokens: int = MAX_NEW_TOKENS,
    temperature: float = 0.0,
    seed: int = 0,
) -> CheckpointSamples:
    samples = [
        Sample(
            prompt=prompt,
            text=generate(
                stages, prompt.encode(), max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
            ).decode(errors="replace"),
        )
        for prompt in prompts
    ]
    return CheckpointSamples(
        step=step, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, samples=samples
    )


def write_samples(step_dir: Path) -> CheckpointSamples:
    """Generate the fixed prompts' samples of a stored checkpoint into `step_dir/samples.json`."""
    stored = read_stored(step_dir)
    result = checkpoint_samples(load_stages(stored.stage_files, stored.preset), stored.step)
    temp = step_dir / f".{SAMPLES_FILE}.{os.getpid()}.part"
    temp.write_text(result.model_dump_json(indent=2) + "\n")
    temp.replace(step_dir / SAMPLES_FILE)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m peer.sampling", description=__doc__)
    parser.add_argument("step_dir", type=Path, help="run-<id>/step-<n> in the coordinator's checkpoint store")
    args = parser.parse_args(argv)
    # One thread: the coordinator's host is busy serving, and a sample set is small work.
    torch.set_num_threads(1)
    try:
        write_samples(args.step_dir)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
