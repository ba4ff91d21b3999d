"""SwarmHub's language model for Hugging Face transformers: GPT-2 with a bias on the vocabulary head.

Shipped inside every export as `modeling_swarmhub.py` and loaded with
`AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)`. SwarmHub's model is GPT-2's
architecture except that its head is untied from the token embedding and has a bias; GPT-2's
head has none, so this subclass adds it and changes nothing else.
"""

from __future__ import annotations

from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel


class SwarmHubConfig(GPT2Config):
    model_type = "swarmhub_gpt2"


class SwarmHubForCausalLM(GPT2LMHeadModel):
    config_class = SwarmHubConfig
    _tied_weights_keys: dict[str, str] = {}  # noqa: RUF012 (the base class's attribute, emptied)

    def __init__(self, config: SwarmHubConfig) -> None:
        super().__init__(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=True)
        self.post_init()
