"""What one pipeline stage of a preset costs: compute per sample, and the state a peer copies to serve it.

The cut follows `peer/model.py` exactly (without torch, so the coordinator can use it): each stage
gets consecutive blocks, as even as possible with the remainder on the earliest stages; the first
stage also holds the token and position embeddings, the last the final LayerNorm and the vocabulary
head. Stages differ in cost mostly through that head: with a large vocabulary the last stage can
cost several times the first, so a peer's rate on one stage says little about its rate on another
until it is scaled by the two stages' costs.
"""

from __future__ import annotations

from collections.abc import Sequence

from swarmhub.presets import ModelPreset

TRAINING_PASSES = 3
"""A training sample costs about one forward and two forward-sized passes back (input and weight
gradients). The same factor for every stage, so it cancels in any ratio between stages; a backward
call that recomputes its forward adds one more pass to the stages before the last."""
STATE_BYTES_PER_PARAMETER = 12
"""float32 parameters plus AdamW's two moments: what a peer copies to join a stage."""


def stage_layers(n_layer: int, num_stages: int, stage: int) -> range:
    """The blocks of `stage`, as `peer.model.stage_layers` cuts them."""
    if not 1 <= num_stages <= n_layer:
        raise ValueError(f"cannot cut {n_layer} layers into {num_stages} stages")
    if not 0 <= stage < num_stages:
        raise ValueError(f"stage {stage} is out of range for {num_stages} stages")
    base, extra = divmod(n_layer, num_stages)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))


def _blocks(preset: ModelPreset, num_stages: int) -> list[int]:
    """Blocks per stage; a cut the model refuses is refused here too."""
    stage_layers(preset.n_layer, num_stages, 0)
    return [len(stage_layers(preset.n_layer, num_stages, s)) for s in range(num_stages)]


def stage_parameters(preset: ModelPreset, num_stages: int) -> list[int]:
    """Parameters each stage holds."""
    counts = []
    for stage, blocks in enumerate(_blocks(preset, num_stages)):
        count = blocks * preset.block_parameters
        if stage == 0:
            count += preset.embedding_parameters
        if stage == num_stages - 1:
            count += preset.head_parameters
        counts.append(count)
    return counts


def stage_state_bytes(preset: ModelPreset, num_stages: int) -> list[int]:
    """Bytes a peer copies to serve each stage: its parameters and optimizer state, float32."""
    return [STATE_BYTES_PER_PARAMETER * n for n in stage_parameters(preset, num_stages)]


def stage_flops(preset: ModelPreset, num_stages: int, seq_len: int) -> list[float]:
    """Training FLOPs per sample (a sequence of `seq_len` tokens) of each stage.

    Per token, a block multiplies by its four weight matrices (12 d^2 multiply-adds) and attends
    causally over (seq_len + 1) / 2 positions on average (two products of d each); the embeddings
    are a lookup and an add (d); the head is the d x vocabulary product plus the softmax and loss
    over the vocabulary (about one operation per logit). A multiply-add is two FLOPs.
    """
    d, vocab = preset.d_model, preset.vocab_size
    block = _block_per_token(preset, seq_len)
    costs = []
    for stage, blocks in enumerate(_blocks(preset, num_stages)):
        per_token = blocks * block
        if stage == 0:
            per_token += d
        if stage == num_stages - 1:
            per_token += d * vocab + vocab
        costs.append(float(TRAINING_PASSES * 2 * per_token * seq_len))
    return costs


def _block_per_token(preset: ModelPreset, seq_len: int) -> int:
    """Multiply-adds per token of one block's forward (see `stage_flops`)."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    d = preset.d_model
    return 12 * d * d + d * (seq_len + 1)


def stage_rate_from_block(
    block_rate: float, preset: ModelPreset, num_stages: int, seq_len: int, stage: int
) -> float:
    """A device's samples/s on `stage`, from its samples/s through one block (the start-up benchmark).

    By cost, not block count: the last stage's vocabulary head can cost several blocks, and a peer that
    claimed a block count's rate there (until its calls are measured) would be sent several times the
    calls it serves, which then queue past their callers' timeouts.
    """
    block = float(TRAINING_PASSES * 2 * _block_per_token(preset, seq_len) * seq_len)
    return block_rate * block / stage_flops(preset, num_stages, seq_len)[stage]


CODEC_BYTES_PER_ELEMENT: dict[str, float] = {"none": 4.0, "float16": 2.0, "int8": 1.0 + 4 / 2048}
"""Wire bytes per float32 activation element (peer/compression.py; int8 adds one absmax per 2048)."""
WIRE_TOKEN_BYTES = 8
"""Token ids and targets travel as int64, never compressed."""


def stage_bytes_per_sample(num_stages: int, seq_len: int, d_model: int, compression: str) -> list[float]:
    """Data-plane bytes through a stage's peer per sample, as the trainers' calls move them: the
    first stage gets tokens (forward and backward calls) and returns activations and takes their
    gradient; a middle one gets activations twice and a gradient, and returns activations and an
    input gradient; the last gets activations and targets and returns an input gradient."""
    act = seq_len * d_model * CODEC_BYTES_PER_ELEMENT[compression]
    tokens = seq_len * WIRE_TOKEN_BYTES
    if num_stages == 1:
        return [2.0 * tokens]
    middle = [5 * act] * (num_stages - 2)
    return [2 * tokens + 2 * act, *middle, 2 * act + tokens]


def stage_push_bytes(parameters: Sequence[int], compression: str) -> list[float]:
    """Wire bytes of each stage's gradient sum (`parameters` per stage) as a member pushes it to
    another (`peer/averaging.py` sends sums in the run's codec)."""
    return [n * CODEC_BYTES_PER_ELEMENT[compression] for n in parameters]
