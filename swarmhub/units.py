"""Quantities in words people read (event messages): bytes in SI units, per-stage counts spelled out."""

from __future__ import annotations

from collections.abc import Mapping

_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")


def format_bytes(count: int | float) -> str:
    """Decimal units, one digit after the point past bytes: 3012000 -> '3.0 MB', 999 -> '999 B'."""
    value = float(count)
    unit = 0
    while abs(value) >= 999.95 and unit < len(_UNITS) - 1:
        value /= 1000
        unit += 1
    return f"{int(count)} B" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def per_stage(counts: Mapping[int, int]) -> str:
    """{1: 32, 3: 8} -> 'stage 1: 32, stage 3: 8', stages in order."""
    return ", ".join(f"stage {stage}: {counts[stage]}" for stage in sorted(counts))
