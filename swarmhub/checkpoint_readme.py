"""The README.md inside every downloaded checkpoint: what the files are and how to use them."""

from __future__ import annotations

from swarmhub.presets import ModelPreset


def _model_line(preset: ModelPreset) -> str:
    return (
        f"a GPT-style transformer LM, preset `{preset.name}`: {preset.n_layer} layers, d_model "
        f"{preset.d_model}, {preset.n_head} heads, context {preset.max_seq_len} tokens, "
        f"{preset.parameter_count:,} parameters, vocabulary {preset.vocab_size:,} "
        f"({_tokens(preset)})"
    )


def _tokens(preset: ModelPreset) -> str:
    if preset.token_bytes == 1:
        return "a token is one byte of UTF-8 text, its id the byte's value"
    return (
        f"a token is {preset.token_bytes} consecutive bytes of UTF-8 text read as one big-endian "
        "number; a trailing partial token is dropped"
    )


def stages_readme(run_id: int, step: int, preset: ModelPreset, num_stages: int) -> str:
    """For the stage-files zip (`/api/runs/{id}/checkpoints/{step}/model`)."""
    stage_list = ", ".join(f"`stage-{s}.safetensors`" for s in range(num_stages))
    return f"""# SwarmHub checkpoint: run {run_id}, step {step}

The model: {_model_line(preset)}. It was trained cut into {num_stages} pipeline stages and is
stored that way.

## Files

- `config.json`: the model's shape, the run's settings, and which file holds which stage.
- {stage_list}: one stage each, safetensors. Tensors named `model.<name>` are the stage's
  parameters (`wte`/`wpe` embeddings on the first stage, `blocks.<layer>` in the middle, `ln_f`
  and `head` on the last); `optim.<index>.<name>` is the optimizer's state, for resuming training.
- `README.md`: this file.

## Use it with Hugging Face transformers

Export this checkpoint as a transformers model (on the coordinator's host, or download the
"Hugging Face" zip from the run page instead of this one):

```sh
swarmhub export {run_id} --step {step} --format hf --out run-{run_id}-step-{step}-hf
```

## Use it with SwarmHub

Text from the checkpoint, on the coordinator's host:

```sh
swarmhub sample {run_id} --step {step} --prompt "Once upon a time"
```

Or in Python, with this zip unpacked in the current directory:

```python
import torch
from peer.model import PipelineStage, load_stage_state
from peer.sampling import generate
from swarmhub.presets import get_preset

preset = get_preset("{preset.name}")
stages = []
for s in range({num_stages}):
    stage = PipelineStage(preset, s, {num_stages})
    state, _ = load_stage_state(f"stage-{{s}}.safetensors")
    stage.load_state_dict({{k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}})
    stages.append(stage.eval())
print(generate(stages, "Once upon a time".encode(), max_new_tokens=64).decode(errors="replace"))
```
"""


def hf_readme(run_id: int, step: int, preset: ModelPreset) -> str:
    """For the Hugging Face export (`swarmhub export --format hf` and its zip download)."""
    return f"""# SwarmHub model for Hugging Face transformers: run {run_id}, step {step}

The model: {_model_line(preset)}.

## Files

- `config.json`, `generation_config.json`: the model's configuration.
- `model.safetensors`: the weights (GPT-2 layout and names; no optimizer state).
- `modeling_swarmhub.py`: the model class. The architecture is GPT-2's (learned positions,
  pre-LayerNorm, exact GELU) with one difference: the vocabulary head is not tied to the token
  embedding and has a bias, which GPT-2's head lacks. This file adds that bias to
  `GPT2LMHeadModel`, hence `trust_remote_code=True` below (the code is this one short file; read it).
- `tokenizer.json`, `tokenizer_config.json`: the byte tokenizer. No end-of-text token exists,
  so generation runs for `max_new_tokens`.
- `README.md`: this file.

## Use it

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

path = "."  # this directory
tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
inputs = tokenizer("Once upon a time", return_tensors="pt")
output = model.generate(**inputs, max_new_tokens=64, do_sample=False)
print(tokenizer.decode(output[0]))
```

Nothing is downloaded: everything the model needs is in this directory. The context is
{preset.max_seq_len} tokens; longer inputs must be cut to their last {preset.max_seq_len} tokens.

## Use it with SwarmHub

`swarmhub sample {run_id} --step {step}` prints text from the same checkpoint with SwarmHub's own
model (the same numbers, to float precision).
"""
