"""A run's settings, defined once: what its owner chooses when creating it.

The wire's `RunSpec`, the API's `RunCreate` and `RunOut` and the coordinator's `runs` table all
build on `RunSettings`; the dashboard's form and types are generated from the OpenAPI document
these fields produce, so each field's default, bounds and docstring here are what users see.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from swarmhub import setting_messages as say
from swarmhub.datasets import BUNDLED_DATASET, DATASET_ID_PATTERN
from swarmhub.presets import PRESETS
from swarmhub.resources import MAX_ACTIVATION_ELEMENTS, activation_elements

OptimizerName = Literal["adamw", "sgd"]
CompressionName = Literal["none", "float16", "int8"]
CODEC_ERROR: dict[str, float] = {"none": 0.0, "float16": 2.5e-4, "int8": 2e-2}
"""Each codec's own relative L2 error on activations and gradients (measured on Gaussian tensors with
outliers, `tests/peer/test_spot_checks.py`). Two honest results of one spot-checked call differ by
at most twice it (each side may round the same value into a neighbouring bucket); a butterfly
round's summed part is off by at most it (`server.policies.part_check`)."""


class RunSettings(BaseModel):
    """Every setting a run's owner chooses; fixed for the run's lifetime."""

    # Docstrings become the fields' descriptions in OpenAPI. In responses every setting is present,
    # so generated clients type them as required there (defaults apply only to requests).
    model_config = ConfigDict(use_attribute_docstrings=True, json_schema_serialization_defaults_required=True)

    name: str = Field(min_length=1, max_length=200)
    """Shown on the dashboard; need not be unique."""
    model_preset: str = Field(default="tiny", min_length=1, max_length=32)
    """One of the presets of `GET /api/presets` (swarmhub/presets.py)."""
    dataset: str = Field(default=BUNDLED_DATASET, min_length=1, max_length=1000)
    """A dataset the coordinator holds: 'python-stdlib' (the bundled corpus) or the id of an uploaded
    one (`GET /api/datasets`). Peers download it from the coordinator; they never read a path."""
    num_stages: int = Field(default=2, ge=1, le=64)
    """Pipeline stages the model's blocks are split into; at most the preset's number of blocks."""
    target_batch_size: int = Field(default=32, ge=1, le=1_000_000)
    """Samples per global step, summed over the whole swarm; a multiple of microbatch_size."""
    microbatch_size: int = Field(default=8, ge=1, le=65_536)
    """Samples a trainer drives through the pipeline at once."""
    seq_len: int = Field(default=64, ge=8)
    """Tokens (bytes) per sample; at most the preset's max_seq_len."""
    optimizer: OptimizerName = "adamw"
    """AdamW, or SGD with momentum; each stage's peers keep its optimizer state."""
    learning_rate: float = Field(default=3e-3, gt=0, le=10, allow_inf_nan=False)
    """Peak rate, reached after warm-up; cosine decay follows when max_steps is set."""
    warmup_steps: int = Field(default=10, ge=0, le=1_000_000)
    """Steps of linear warm-up to the peak learning rate."""
    weight_decay: float = Field(default=0.01, ge=0, le=10, allow_inf_nan=False)
    """Decoupled weight decay (AdamW) or L2 penalty (SGD) coefficient."""
    compression: CompressionName = "none"
    """Codec for float tensors on the data plane (activations and gradients between peers)."""
    max_steps: int | None = Field(default=None, ge=1, le=100_000_000)
    """The run finishes after this many steps; None trains until it is archived."""
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    """Seeds the stages' initialization and the order of the data."""
    rebalance: bool = True
    """Move peers toward the bottleneck stage as measured throughputs change."""
    spot_check_fraction: float = Field(default=0.02, ge=0, le=1, allow_inf_nan=False)
    """Share of stage calls a trainer also sends to a second peer of the stage to compare results;
    a mismatch is arbitrated by a third peer and the peer found wrong is banned (0 turns checks off)."""

    @model_validator(mode="wrap")
    @classmethod
    def _in_plain_words(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        """Every refusal in the words of `swarmhub/setting_messages.py`, at the setting it is about
        (the checks that relate settings to each other and to the preset too), so that an API client
        and the dashboard's form place and phrase them alike."""
        try:
            settings = handler(data)
        except ValidationError as exc:
            raise ValidationError.from_exception_data(
                exc.title, [_reworded(error) for error in exc.errors()]
            ) from None
        problems = settings._inconsistencies()
        if problems:
            raise ValidationError.from_exception_data(
                cls.__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError("run_settings", message),
                        loc=(field,),
                        input=getattr(settings, field),
                    )
                    for field, message in problems.items()
                ],
            )
        return settings

    def _inconsistencies(self) -> dict[str, str]:
        """Settings that are each within bounds but do not go together (or with the preset)."""
        preset = PRESETS.get(self.model_preset)
        if preset is None:
            return {"model_preset": say.unknown_preset(self.model_preset, list(PRESETS))}
        problems: dict[str, str] = {}
        if self.num_stages > preset.n_layer:
            problems["num_stages"] = say.stages_over_blocks(preset.n_layer, preset.name)
        if self.seq_len > preset.max_seq_len:
            problems["seq_len"] = say.seq_len_over(preset.max_seq_len, preset.name)
        elif activation_elements(preset, self.microbatch_size, self.seq_len) > MAX_ACTIVATION_ELEMENTS:
            problems["microbatch_size"] = say.activations_too_large(
                self.microbatch_size, self.seq_len, preset.d_model, MAX_ACTIVATION_ELEMENTS
            )
        if self.target_batch_size % self.microbatch_size:
            problems["target_batch_size"] = say.not_a_multiple(self.microbatch_size)
        return problems

    @field_validator("dataset")
    @classmethod
    def _dataset_id(cls, dataset: str) -> str:
        # Checked here rather than by a pattern so the refusal says why: a path would make every
        # participant's peer read that file on its own machine.
        if not re.fullmatch(DATASET_ID_PATTERN, dataset):
            raise ValueError(
                f"dataset must be {BUNDLED_DATASET!r} or the id of a dataset uploaded to the coordinator"
                " (64 hex digits); paths on the participants' machines are not accepted"
            )
        return dataset


def _reworded(error: Any) -> InitErrorDetails:
    """A field's error with the form's words where it has them; pydantic's own for the rest."""
    field = str(error["loc"][-1]) if error["loc"] else ""
    ctx = error.get("ctx", {})
    if error["type"] == "value_error":
        message: str | None = str(ctx["error"])
    else:
        message = say.bound_message(error["type"], ctx, field)
    details = InitErrorDetails(type=error["type"], loc=error["loc"], input=error["input"])
    if message is not None:
        details["type"] = PydanticCustomError("run_settings", message)
    elif ctx:
        details["ctx"] = ctx
    return details
