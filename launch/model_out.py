"""`swarmhub export` and `swarmhub sample`: a stored checkpoint as a transformers model, or as text."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

from swarmhub.settings import ServerSettings
from swarmhub.stored_checkpoint import StoredCheckpoint, find_stored


def _stored(args: argparse.Namespace) -> StoredCheckpoint:
    root = args.checkpoint_dir or ServerSettings().checkpoint_dir
    return find_stored(Path(root), args.run, args.step)


def export(args: argparse.Namespace) -> int:
    from swarmhub.checkpoint_readme import hf_readme
    from swarmhub.hf_export import export_files, write_export

    try:
        stored = _stored(args)
        out = Path(args.out or f"run-{stored.run_id}-step-{stored.step}-hf")
        with ExitStack() as stack:
            handles = [stack.enter_context(path.open("rb")) for path in stored.stage_files]
            files = export_files(
                handles,
                stored.preset,
                {"swarmhub_run": str(stored.run_id), "swarmhub_step": str(stored.step)},
                hf_readme(stored.run_id, stored.step, stored.preset),
            )
            write_export(files, out)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"run {stored.run_id} step {stored.step} exported to {out} (Hugging Face transformers format)")
    return 0


def sample(args: argparse.Namespace) -> int:
    # torch only here: `swarmhub export` and the coordinator work without it.
    from peer.sampling import PROMPTS, checkpoint_samples, load_stages

    try:
        stored = _stored(args)
        stages = load_stages(stored.stage_files, stored.preset)
        result = checkpoint_samples(
            stages,
            stored.step,
            args.prompt or PROMPTS,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            seed=args.seed,
        )
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(result.model_dump_json(indent=2))
        return 0
    for item in result.samples:
        print(f"--- {item.prompt!r}")
        print(item.prompt + item.text)
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    def checkpoint_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", type=int, help="the run's id")
        parser.add_argument(
            "--step", type=int, help="the checkpoint's step (default: the newest complete one)"
        )
        parser.add_argument(
            "--checkpoint-dir", help="the coordinator's checkpoint store (SWARMHUB_CHECKPOINT_DIR)"
        )

    exporter = commands.add_parser(
        "export", help="write a stored checkpoint as a Hugging Face transformers model directory"
    )
    checkpoint_args(exporter)
    exporter.add_argument("--format", choices=["hf"], default="hf", help="hf: transformers (the only one)")
    exporter.add_argument("--out", help="directory to write (default: run-<id>-step-<n>-hf)")
    exporter.set_defaults(handler=export)

    sampler = commands.add_parser("sample", help="print text a stored checkpoint writes after prompts")
    checkpoint_args(sampler)
    sampler.add_argument(
        "--prompt", action="append", help="a prompt (repeatable; default: the fixed prompt set)"
    )
    sampler.add_argument("--max-new-tokens", type=int, default=64)
    sampler.add_argument("--temperature", type=float, default=0.0, help="0 (default) is greedy decoding")
    sampler.add_argument("--seed", type=int, default=0, help="seeds sampling at temperature > 0")
    sampler.add_argument("--json", action="store_true", help="print one JSON object")
    sampler.set_defaults(handler=sample)
