"""`swarmhub export --format hf` and `swarmhub sample`: the exported model is the swarm's model."""

from __future__ import annotations

import io
import json

import pytest
import torch
from safetensors import safe_open

from launch.cli import main
from peer.data import bytes_to_tokens
from peer.sampling import PROMPTS, generate, load_stages
from swarmhub.hf_export import tokenizer_config_json, tokenizer_json
from swarmhub.presets import get_preset
from tests.stored_model import perturbed_model, write_stored_checkpoint

transformers = pytest.importorskip("transformers")

RUN, STEP = 7, 30


@pytest.fixture
def stored(tmp_path):
    stages = perturbed_model("tiny", num_stages=3, seed=11)
    write_stored_checkpoint(tmp_path / "checkpoints", RUN, STEP, stages, "tiny")
    return tmp_path / "checkpoints", stages


@pytest.fixture
def offline(monkeypatch):
    # Any attempt to reach the Hub fails instead of downloading.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _export(root, out) -> None:
    args = ["export", str(RUN), "--step", str(STEP), "--format", "hf", "--checkpoint-dir", str(root)]
    assert main([*args, "--out", str(out)]) == 0


def _load(path):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, trust_remote_code=True, local_files_only=True
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        path, trust_remote_code=True, local_files_only=True
    )
    return model.eval(), tokenizer


def test_the_export_loads_in_transformers_and_computes_the_swarms_logits(stored, offline, tmp_path):
    root, stages = stored
    out = tmp_path / "hf"
    _export(root, out)
    assert {p.name for p in out.iterdir()} == {
        "README.md",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "modeling_swarmhub.py",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        assert not any(name.startswith("optim") for name in f.keys())  # noqa: SIM118 (safe_open has no __iter__)
    model, tokenizer = _load(out)

    text = "Once upon a time, the swarm trained a model.\n" * 3
    ids = tokenizer(text, return_tensors="pt").input_ids  # [1, T]
    assert ids[0].tolist() == bytes_to_tokens(text.encode(), 1).tolist()
    batch = torch.cat([ids, ids.flip(1)])  # [2, T]
    expected = batch
    with torch.no_grad():
        for stage in stages:
            expected = stage(expected)
        logits = model(batch).logits
    torch.testing.assert_close(logits, expected, rtol=1e-6, atol=1e-6)
    assert tokenizer.decode(ids[0]) == text


def test_transformers_generates_what_swarmhub_samples(stored, offline, tmp_path):
    root, stages = stored
    _export(root, tmp_path / "hf")
    model, tokenizer = _load(tmp_path / "hf")
    inputs = tokenizer("In the beginning", return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    ours = generate(stages, b"In the beginning", max_new_tokens=12)
    assert tokenizer.decode(output[0, inputs.input_ids.shape[1] :]) == ours.decode(errors="replace")


def test_the_pair_tokenizer_gives_the_swarms_ids(tmp_path):
    """token_bytes=2: ids are pairs of bytes read big-endian, a trailing odd byte dropped as in training."""
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer_json(2)))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config_json(get_preset("swarm-ref")))
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    for text in ["Hello, wörld!\n", "abcd", "abc", "", " \x00\xff日本語"]:
        ids = tokenizer(text).input_ids
        assert ids == bytes_to_tokens(text.encode(), 2).tolist(), text
        whole = len(text.encode()) // 2 * 2
        assert tokenizer.decode(ids) == text.encode()[:whole].decode(errors="replace"), text


def test_export_refuses_a_checkpoint_that_is_not_there(stored, tmp_path, capsys):
    root, _ = stored
    assert (
        main(["export", str(RUN), "--step", "31", "--checkpoint-dir", str(root), "--out", str(tmp_path)]) == 1
    )
    assert "no checkpoint" in capsys.readouterr().err


def test_swarmhub_sample_prints_the_models_greedy_text(stored, capsys):
    root, stages = stored
    base = ["sample", str(RUN), "--checkpoint-dir", str(root), "--max-new-tokens", "10"]
    assert main([*base, "--prompt", "The swarm", "--prompt", "ab", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["step"] == STEP and result["temperature"] == 0
    assert [s["prompt"] for s in result["samples"]] == ["The swarm", "ab"]
    loaded = load_stages(
        sorted((root / f"run-{RUN}" / f"step-{STEP}").glob("stage-*.safetensors")), get_preset("tiny")
    )
    for sample in result["samples"]:
        greedy = generate(stages, sample["prompt"].encode(), max_new_tokens=10)
        # The stored checkpoint holds the same model: loading it gives the same text.
        assert greedy == generate(loaded, sample["prompt"].encode(), max_new_tokens=10)
        assert sample["text"] == greedy.decode(errors="replace")
        # Greedy: every new byte is the argmax after the prompt and the bytes before it.
        context = sample["prompt"].encode()
        for byte in greedy:
            with torch.no_grad():
                x = torch.tensor([list(context)])
                for stage in stages:
                    x = stage(x)
            assert int(x[0, -1].argmax()) == byte
            context += bytes([byte])

    # Without --prompt: the fixed prompt set, and the plain output shows each prompt with its text.
    assert main(base) == 0
    out = capsys.readouterr().out
    assert all(f"--- {prompt!r}" in out for prompt in PROMPTS)


def test_swarmhub_sample_is_reproducible_with_a_seed(stored, capsys):
    root, _ = stored
    args = [
        "sample",
        str(RUN),
        "--step",
        str(STEP),
        "--checkpoint-dir",
        str(root),
        "--prompt",
        "The ",
        "--json",
    ]
    runs = []
    for seed in ("1", "1", "2"):
        assert main([*args, "--temperature", "1.0", "--seed", seed]) == 0
        runs.append(json.loads(capsys.readouterr().out)["samples"][0]["text"])
    assert runs[0] == runs[1] != runs[2]


def test_loading_without_the_head_bias_code_fails_loudly(stored, offline, tmp_path, monkeypatch):
    """The config names its own model type: plain GPT-2 (which would drop the head's bias and compute
    other logits) is never picked silently; transformers asks for trust_remote_code instead."""
    root, _ = stored
    _export(root, tmp_path / "hf")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # nobody answers transformers' prompt
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", local_files_only=True)
