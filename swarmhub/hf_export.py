"""A checkpoint as a Hugging Face transformers model directory, built without torch or numpy.

The coordinator builds the export for the dashboard's download and never imports torch, so the
conversion reads the stages' safetensors files by their headers and writes the export's own
safetensors file by hand, one tensor at a time (memory stays at the largest tensor).

The project's model (`peer/model.py`) is GPT-2's architecture in every respect that computes:
learned absolute position embeddings added to the token embeddings, pre-LayerNorm blocks
(eps 1e-5) with a fused qkv projection and biases everywhere, scaled dot-product causal attention,
a 4x MLP with exact (erf) GELU, a final LayerNorm, no dropout. The one difference is the vocabulary
head: untied from the token embedding (GPT-2 allows that) and with a bias, which GPT-2's head and
every other transformers architecture with learned absolute positions lack. So the export is a GPT-2
checkpoint plus `modeling_swarmhub.py`, a GPT-2 subclass whose only change is the head's bias,
loaded with `trust_remote_code=True`. The config names its own model type, so loading without
that flag fails loudly instead of silently dropping the bias.

GPT-2 keeps its projections as `Conv1D` ([in, out] weights) where the project has `nn.Linear`
([out, in]), so those four weights per block are transposed on the way.

The tokenizer is the project's byte tokens (`peer/data.py`): a token is `token_bytes` bytes read as
a big-endian number. `tokenizer.json` maps bytes to GPT-2's byte-level characters, cuts them into
groups of `token_bytes` (dropping a trailing partial token, as training did) and looks each group up
in a vocabulary whose ids are exactly the project's.
"""

from __future__ import annotations

import json
import math
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from swarmhub.presets import ModelPreset

WEIGHTS = "model.safetensors"
MODELING = "modeling_swarmhub.py"
MODEL_TYPE = "swarmhub_gpt2"
_MODELING_SOURCE = Path(__file__).with_name("hf_modeling.py")
_TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_ITEM_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}
_DTYPE_BYTES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
_READ_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class SourceTensor:
    """One tensor of a stage file: where its bytes are and what it becomes in the export."""

    source: IO[bytes]
    """The open stage file (seekable); tensors of one file share it, read one after another."""
    start: int
    """Absolute byte offset of the tensor's data in `source`."""
    dtype: str
    shape: tuple[int, ...]
    transpose: bool

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _DTYPE_BYTES[self.dtype]

    @property
    def out_shape(self) -> list[int]:
        return list(reversed(self.shape)) if self.transpose else list(self.shape)


def read_header(source: IO[bytes]) -> tuple[int, dict[str, Any]]:
    """(offset of the data section, header without `__metadata__`) of a safetensors file."""
    source.seek(0)
    (header_len,) = struct.unpack("<Q", source.read(8))
    header = json.loads(source.read(header_len))
    header.pop("__metadata__", None)
    return 8 + header_len, header


def hf_name(stage_key: str) -> str | None:
    """The export's name for a stage file's tensor; None for what the export leaves out (optimizer state)."""
    if not stage_key.startswith("model."):
        return None
    key = stage_key.removeprefix("model.")
    if key.startswith("blocks."):
        return "transformer.h." + key.removeprefix("blocks.")
    if key.startswith("head."):
        return "lm_head." + key.removeprefix("head.")
    if key.split(".")[0] in ("wte", "wpe", "ln_f"):
        return "transformer." + key
    raise ValueError(f"unexpected tensor {stage_key!r} in a stage file")


def collect_tensors(stage_files: list[IO[bytes]]) -> dict[str, SourceTensor]:
    """Every model tensor of the stages, under its export name."""
    tensors: dict[str, SourceTensor] = {}
    for source in stage_files:
        data_start, header = read_header(source)
        for key, info in header.items():
            name = hf_name(key)
            if name is None:
                continue
            if info["dtype"] not in _DTYPE_BYTES:
                raise ValueError(f"{key} has dtype {info['dtype']}, not a float type")
            if name in tensors:
                raise ValueError(f"{key} appears in more than one stage file")
            tensors[name] = SourceTensor(
                source=source,
                start=data_start + info["data_offsets"][0],
                dtype=info["dtype"],
                shape=tuple(info["shape"]),
                transpose=name.endswith(_TRANSPOSED),
            )
    return tensors


def check_complete(tensors: dict[str, SourceTensor], preset: ModelPreset) -> None:
    """Raise ValueError unless the tensors are exactly the preset's model, each of its shape."""
    expected = expected_shapes(preset)
    missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or extra:
        raise ValueError(f"stage files do not hold the model: missing {missing[:5]}, unexpected {extra[:5]}")
    for name, shape in expected.items():
        if tensors[name].out_shape != shape:
            raise ValueError(f"{name} has shape {tensors[name].out_shape}, expected {shape}")


def expected_shapes(preset: ModelPreset) -> dict[str, list[int]]:
    """The export's tensors and shapes (GPT-2 layout: Conv1D weights are [in, out])."""
    d, v = preset.d_model, preset.vocab_size
    shapes = {
        "transformer.wte.weight": [v, d],
        "transformer.wpe.weight": [preset.max_seq_len, d],
        "transformer.ln_f.weight": [d],
        "transformer.ln_f.bias": [d],
        "lm_head.weight": [v, d],
        "lm_head.bias": [v],
    }
    for i in range(preset.n_layer):
        block = {
            "ln_1.weight": [d],
            "ln_1.bias": [d],
            "attn.c_attn.weight": [d, 3 * d],
            "attn.c_attn.bias": [3 * d],
            "attn.c_proj.weight": [d, d],
            "attn.c_proj.bias": [d],
            "ln_2.weight": [d],
            "ln_2.bias": [d],
            "mlp.c_fc.weight": [d, 4 * d],
            "mlp.c_fc.bias": [4 * d],
            "mlp.c_proj.weight": [4 * d, d],
            "mlp.c_proj.bias": [d],
        }
        shapes.update({f"transformer.h.{i}.{k}": s for k, s in block.items()})
    return shapes


class WeightsFile:
    """The export's `model.safetensors`: its size is known up front, its bytes come as a stream."""

    def __init__(self, tensors: dict[str, SourceTensor], metadata: dict[str, str]) -> None:
        self.order = sorted(tensors)
        self.tensors = tensors
        header: dict[str, Any] = {"__metadata__": metadata}
        offset = 0
        for name in self.order:
            t = tensors[name]
            header[name] = {
                "dtype": t.dtype,
                "shape": t.out_shape,
                "data_offsets": [offset, offset + t.nbytes],
            }
            offset += t.nbytes
        encoded = json.dumps(header, separators=(",", ":")).encode()
        # safetensors aligns the data section to 8 bytes by padding the header with spaces.
        encoded += b" " * (-len(encoded) % 8)
        self.prefix = struct.pack("<Q", len(encoded)) + encoded
        self.size = len(self.prefix) + offset

    def chunks(self) -> Iterator[bytes]:
        yield self.prefix
        for name in self.order:
            yield from _tensor_bytes(self.tensors[name])


def _tensor_bytes(tensor: SourceTensor) -> Iterator[bytes]:
    tensor.source.seek(tensor.start)
    if not tensor.transpose:
        left = tensor.nbytes
        while left:
            chunk = tensor.source.read(min(left, _READ_CHUNK))
            if not chunk:
                raise ValueError("a stage file ends inside a tensor")
            left -= len(chunk)
            yield chunk
        return
    data = tensor.source.read(tensor.nbytes)
    if len(data) != tensor.nbytes:
        raise ValueError("a stage file ends inside a tensor")
    _, cols = tensor.shape
    # Elements as fixed-size integers: a strided slice picks one column in C, no float decoding.
    elements = array(_ITEM_CODES[_DTYPE_BYTES[tensor.dtype]], data)
    transposed = array(elements.typecode)
    for col in range(cols):
        transposed.extend(elements[col::cols])
    yield transposed.tobytes()


def config_json(preset: ModelPreset, dtype: str) -> dict[str, Any]:
    """GPT2Config's fields for the preset, under the export's own model type (see the module doc)."""
    return {
        "architectures": ["SwarmHubForCausalLM"],
        "auto_map": {
            "AutoConfig": "modeling_swarmhub.SwarmHubConfig",
            "AutoModelForCausalLM": "modeling_swarmhub.SwarmHubForCausalLM",
        },
        "model_type": MODEL_TYPE,
        "vocab_size": preset.vocab_size,
        "n_positions": preset.max_seq_len,
        "n_embd": preset.d_model,
        "n_layer": preset.n_layer,
        "n_head": preset.n_head,
        "n_inner": 4 * preset.d_model,
        "activation_function": "gelu",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
        "dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}[dtype],
        "token_bytes": preset.token_bytes,
        "swarmhub_preset": preset.name,
    }


def _byte_chars() -> list[str]:
    """GPT-2's byte-level alphabet: byte b is shown as this printable character (tokenizers' ByteLevel)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tokenizer_json(token_bytes: int) -> dict[str, Any]:
    """A `tokenizers` definition whose ids are the project's byte-token ids."""
    chars = _byte_chars()
    vocab = {"".join(chars[b] for b in i.to_bytes(token_bytes, "big")): i for i in range(256**token_bytes)}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    group = "[\\s\\S]" * token_bytes
    pre_tokenizers: list[dict[str, Any]] = [
        byte_level,
        {"type": "Split", "pattern": {"Regex": group}, "behavior": "Isolated", "invert": False},
    ]
    if token_bytes > 1:
        # After the groups are isolated only the last piece can be short: a partial token, dropped.
        short = f"^[\\s\\S]{{1,{token_bytes - 1}}}$"
        pre_tokenizers.append(
            {"type": "Split", "pattern": {"Regex": short}, "behavior": "Removed", "invert": False}
        )
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre_tokenizers},
        "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": ""},
    }


def tokenizer_config_json(preset: ModelPreset) -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": preset.max_seq_len,
        "clean_up_tokenization_spaces": False,
    }


def generation_config_json() -> dict[str, Any]:
    # No end-of-text token exists in a byte vocabulary: generation stops at max_new_tokens.
    return {"do_sample": False, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}


def modeling_source() -> bytes:
    return _MODELING_SOURCE.read_bytes()


def _json_bytes(value: dict[str, Any]) -> bytes:
    return json.dumps(value, indent=2, ensure_ascii=False).encode() + b"\n"


@dataclass(frozen=True)
class ExportFile:
    """One file of the export: its name, size, and a way to produce its bytes."""

    name: str
    size: int
    data: bytes | WeightsFile

    def chunks(self) -> Iterator[bytes]:
        if isinstance(self.data, bytes):
            yield self.data
        else:
            yield from self.data.chunks()


def export_files(
    stage_files: list[IO[bytes]], preset: ModelPreset, metadata: dict[str, str], readme: str
) -> list[ExportFile]:
    """Every file of the export, weights last (the others are small and in memory).

    The weights are read from `stage_files` (open, seekable) while they are streamed: keep them open
    until then."""
    tensors = collect_tensors(stage_files)
    check_complete(tensors, preset)
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) != 1:
        raise ValueError(f"stage files mix dtypes {sorted(dtypes)}")
    weights = WeightsFile(tensors, {"format": "pt", **metadata})
    small = {
        "README.md": readme.encode(),
        "config.json": _json_bytes(config_json(preset, dtypes.pop())),
        "generation_config.json": _json_bytes(generation_config_json()),
        MODELING: modeling_source(),
        "tokenizer.json": json.dumps(tokenizer_json(preset.token_bytes), ensure_ascii=False).encode(),
        "tokenizer_config.json": _json_bytes(tokenizer_config_json(preset)),
    }
    files = [ExportFile(name, len(data), data) for name, data in small.items()]
    return [*files, ExportFile(WEIGHTS, weights.size, weights)]


def write_export(files: list[ExportFile], out: Path) -> None:
    """Write the export's files into directory `out` (created if missing)."""
    out.mkdir(parents=True, exist_ok=True)
    for file in files:
        temp = out / f".{file.name}.part"
        with temp.open("wb") as f:
            for chunk in file.chunks():
                f.write(chunk)
        temp.replace(out / file.name)
