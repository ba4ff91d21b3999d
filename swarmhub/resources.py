"""What a run asks of a participant's machine, computed from its settings alone (no torch).

The coordinator bounds a run's activation size when it is created; a peer compares the memory
estimate with what its machine has free before it allocates anything; both sides of the data plane
bound each frame kind by the run's real shapes instead of one limit for everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarmhub.presets import ModelPreset

FLOAT_BYTES = 4
MAX_ACTIVATION_ELEMENTS = 1 << 24
"""Bound on microbatch_size x seq_len x d_model: one activation tensor of at most 64 MiB (float32),
so that a stage's kept activations stay within what a large GPU or a big host can hold."""
FRAME_SLACK_BYTES = 1 << 20
"""Room for a frame's header (tensor names, counted microbatch ids) on top of its tensors."""
OPTIMIZER_MOMENTS = {"adamw": 2, "sgd": 1}


def stage_blocks(n_layer: int, num_stages: int, stage: int) -> int:
    """How many blocks `stage` holds: as even as possible, the remainder on the earliest stages
    (the same cut as `peer/model.py` `stage_layers`)."""
    base, extra = divmod(n_layer, num_stages)
    return base + (1 if stage < extra else 0)


def stage_parameters(preset: ModelPreset, num_stages: int, stage: int) -> int:
    """Parameters of one stage: its blocks, plus the embeddings on the first and the head on the last."""
    count = stage_blocks(preset.n_layer, num_stages, stage) * preset.block_parameters
    if stage == 0:
        count += preset.embedding_parameters
    if stage == num_stages - 1:
        count += preset.head_parameters
    return count


def largest_stage_parameters(preset: ModelPreset, num_stages: int) -> int:
    """A peer may be given any stage (and moved by rebalancing), so it must fit the largest."""
    return max(stage_parameters(preset, num_stages, s) for s in range(num_stages))


def activation_elements(preset: ModelPreset, microbatch_size: int, seq_len: int) -> int:
    """Elements of one activation tensor between stages: microbatch x seq_len x d_model."""
    return microbatch_size * seq_len * preset.d_model


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a peer needs to serve the run's largest stage and drive its own microbatches."""

    parameters: int
    optimizer: int
    gradients: int
    """The gradient accumulator, the averaged sum and the copy the optimizer step takes."""
    activations: int
    """Kept for backward by one call (calls run one at a time), plus the call's input and output."""

    @property
    def total(self) -> int:
        return self.parameters + self.optimizer + self.gradients + self.activations


def estimate_memory(
    preset: ModelPreset, *, num_stages: int, microbatch_size: int, seq_len: int, optimizer: str
) -> MemoryEstimate:
    """An estimate of a peer's peak memory for a run, from its preset, microbatch, seq_len and stage size.
    A peer may be given any stage, so the largest stage's parameters, the most blocks of any stage and
    the head's logits count together."""
    blocks = max(stage_blocks(preset.n_layer, num_stages, s) for s in range(num_stages))
    return _estimate(
        preset,
        params=largest_stage_parameters(preset, num_stages),
        blocks=blocks,
        head=True,
        microbatch_size=microbatch_size,
        seq_len=seq_len,
        optimizer=optimizer,
    )


def estimate_stage_memory(
    preset: ModelPreset, *, stage: int, num_stages: int, microbatch_size: int, seq_len: int, optimizer: str
) -> MemoryEstimate:
    """The same estimate for a peer serving `stage` only: its own parameters and blocks, the logits only
    on the last stage."""
    return _estimate(
        preset,
        params=stage_parameters(preset, num_stages, stage),
        blocks=stage_blocks(preset.n_layer, num_stages, stage),
        head=stage == num_stages - 1,
        microbatch_size=microbatch_size,
        seq_len=seq_len,
        optimizer=optimizer,
    )


def _estimate(
    preset: ModelPreset,
    *,
    params: int,
    blocks: int,
    head: bool,
    microbatch_size: int,
    seq_len: int,
    optimizer: str,
) -> MemoryEstimate:
    tokens = microbatch_size * seq_len
    # Per block, autograd keeps about 16 d-wide tensors per token (attention projections, MLP's 4d
    # hidden and its activation, LayerNorms, residuals) and the attention scores and probabilities.
    per_block = tokens * 16 * preset.d_model + 2 * microbatch_size * preset.n_head * seq_len * seq_len
    # The last stage's logits, their softmax and their gradient; the call's input, output and grad.
    logits = 3 * tokens * preset.vocab_size if head else 0
    io = 4 * tokens * preset.d_model
    return MemoryEstimate(
        parameters=FLOAT_BYTES * params,
        optimizer=FLOAT_BYTES * OPTIMIZER_MOMENTS[optimizer] * params,
        gradients=FLOAT_BYTES * 3 * params,
        activations=FLOAT_BYTES * (blocks * per_block + logits + io),
    )


@dataclass(frozen=True)
class FrameLimits:
    """Byte bounds of the data plane's frames for one run, by what they carry."""

    activations: int
    """Stage calls and their replies: at most two activation tensors (a backward's input and grad)."""
    gradients: int
    """A stage's gradient sum pushed during averaging."""
    state: int
    """A stage's whole state (parameters and optimizer moments), fetched by a joining peer."""

    @property
    def served(self) -> int:
        """The largest frame a peer's server accepts: calls and gradient pushes, never a state."""
        return max(self.activations, self.gradients)

    @property
    def largest(self) -> int:
        return max(self.activations, self.gradients, self.state)

    def for_kind(self, kind: str) -> int:
        """The bound of one frame kind (`peer/frame_headers.py`)."""
        if kind == "push_grads":
            return self.gradients
        if kind == "fetch_state_reply":
            return self.state
        if kind == "arbitrate":
            # Two calls and their two replies, each within a stage call's bound, and the forward call
            # whose kept graph a cached backward used.
            return 5 * self.activations
        return self.activations


def frame_limits(
    preset: ModelPreset, *, num_stages: int, microbatch_size: int, seq_len: int, optimizer: str
) -> FrameLimits:
    params = largest_stage_parameters(preset, num_stages)
    activation = FLOAT_BYTES * activation_elements(preset, microbatch_size, seq_len)
    return FrameLimits(
        activations=2 * activation + FRAME_SLACK_BYTES,
        gradients=FLOAT_BYTES * params + FRAME_SLACK_BYTES,
        state=FLOAT_BYTES * (1 + OPTIMIZER_MOMENTS[optimizer]) * params + FRAME_SLACK_BYTES,
    )


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"
