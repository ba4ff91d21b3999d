"""What every benchmark does with its figures: print a table, write JSON (with the full config and
versions) and a plot next to it, named <benchmark>_<hardware>_<date>."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import platform
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def hardware_tag() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name().replace(" ", "-").lower()
    except ImportError:
        pass
    cpus = len(__import__("os").sched_getaffinity(0))
    return f"cpu{cpus}-{platform.machine()}"


def describe_tree() -> str | None:
    """The checkout's commit, with "-dirty" when it has uncommitted changes; None outside git."""
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return described.stdout.strip() or None


TREE_AT_START = describe_tree()
"""The tree this process measures: read when this module is imported, as a benchmark starts, not
when it writes its results. A benchmark runs for minutes, and a commit made meanwhile was recorded
as the tree measured (a `sim.figures scale` run of 2026-12-01)."""


def environment() -> dict[str, Any]:
    versions: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine()}
    for name in ("torch", "bitsandbytes", "fastapi", "sqlalchemy", "websockets"):
        # Read from the installed metadata: importing bitsandbytes to ask costs seconds and logs noise.
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    versions["commit"] = TREE_AT_START
    written_at = describe_tree()
    if written_at != TREE_AT_START:
        # The modules were loaded from the first tree; the second is only where the results landed.
        versions["commit_when_written"] = written_at
    return versions


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    def cell(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    widths = [max(len(c), *(len(cell(r.get(c, ""))) for r in rows)) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(cell(row.get(c, "")).ljust(w) for c, w in zip(columns, widths, strict=True)))


def write_results(
    name: str,
    *,
    config: dict[str, Any],
    rows: Sequence[dict[str, Any]],
    plot: Callable[[Any], None] | None = None,
    out_dir: Path = RESULTS_DIR,
) -> Path:
    """Write `<name>_<hardware>_<date>.json` (and `.png` via `plot(axes)`); returns the JSON path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{name}_{hardware_tag()}_{dt.date.today().isoformat()}"
    path = out_dir / f"{stem}.json"
    payload = {"benchmark": name, "config": config, "environment": environment(), "rows": list(rows)}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(figsize=(7, 4))
        plot(axes)
        fig.tight_layout()
        fig.savefig(out_dir / f"{stem}.png", dpi=100)
        plt.close(fig)
    return path


def plot_measured_against_ideal(
    ax: Any, rows: Sequence[dict[str, Any]], labels: Sequence[str], *, ideal_label: str, title: str
) -> None:
    """Each row's measured samples/s as a bar, its `ideal_samples_per_s` (if any) as an outline
    around it."""
    ax.barh(labels, [r["samples_per_s"] for r in rows], color="tab:blue", label="measured")
    ideal = [r.get("ideal_samples_per_s") or 0 for r in rows]
    ax.barh(labels, ideal, fill=False, edgecolor="tab:red", label=ideal_label)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=6)
    ax.set_xlabel("samples/s")
    ax.set_title(title)
    ax.legend(fontsize=7)
