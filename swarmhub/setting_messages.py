"""The words an owner reads when a run setting is refused, located at the setting they are about.

The coordinator's 422 says exactly what the dashboard's own checks say before sending
(frontend/src/validation.ts builds the same sentences; frontend/tests/run-settings-messages.json holds
cases both sides are tested against), so a message does not change wording depending on who caught it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MISSING = {
    "name": "Give the run a name.",
    "model_preset": "Choose a model preset.",
    "dataset": "Choose a dataset.",
}
"""An empty or absent setting that has no default, in words that say what to do."""
PERCENT_FIELDS = frozenset({"spot_check_fraction"})
"""Fractions on the wire that the form shows as percentages: their bounds are said in percent."""


def number(value: float, field: str = "") -> str:
    """A bound as the form shows it: whole numbers without a decimal point, percentages with '%'."""
    if field in PERCENT_FIELDS:
        return f"{number(round(value * 100, 6))}%"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def choices(options: Sequence[str]) -> str:
    """'Choose 'a', 'b' or 'c'.'"""
    quoted = [f"'{option}'" for option in options]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"Choose {listed}."


def bound_message(kind: str, ctx: dict[str, Any], field: str) -> str | None:
    """The words for a pydantic error `kind` on `field`, or None for kinds the form never meets."""
    match kind:
        case "greater_than_equal":
            return f"Must be at least {number(ctx['ge'], field)}."
        case "less_than_equal":
            return f"Must be at most {number(ctx['le'], field)}."
        case "greater_than":
            return f"Must be greater than {number(ctx['gt'], field)}."
        case "less_than":
            return f"Must be less than {number(ctx['lt'], field)}."
        case "string_too_short" | "missing":
            return MISSING.get(field, "Required.")
        case "string_too_long":
            return f"At most {ctx['max_length']} characters."
        case "int_type" | "int_parsing" | "int_from_float":
            return "Enter a whole number."
        case "float_type" | "float_parsing" | "finite_number":
            return "Enter a number."
        case "literal_error":
            return choices(
                [option.strip("'") for option in ctx["expected"].replace(" or ", ", ").split(", ")]
            )
    return None


def unknown_preset(name: str, presets: Sequence[str]) -> str:
    return f"Unknown preset '{name}': choose one of {', '.join(presets)}."


def stages_over_blocks(n_layer: int, preset: str) -> str:
    return f"Must be at most {n_layer}: preset '{preset}' has {n_layer} blocks."


def seq_len_over(max_seq_len: int, preset: str) -> str:
    return f"Must be at most {max_seq_len} for preset '{preset}'."


def activations_too_large(microbatch_size: int, seq_len: int, d_model: int, limit: int) -> str:
    elements = microbatch_size * seq_len * d_model
    return (
        f"microbatch_size x seq_len x d_model is {microbatch_size} x {seq_len} x {d_model} = {elements:,},"
        f" over the limit of {limit:,} (every peer would have to hold activations of that size):"
        " lower microbatch_size or seq_len."
    )


def not_a_multiple(microbatch_size: int) -> str:
    return f"Must be a multiple of microbatch_size ({microbatch_size})."
