"""The parts of the vLLM stand-in that hold weights and cross the engine-core process boundary.

Read from the vllm-0.32.0 wheel:

- `utility_call`: in multiprocess mode (`VLLM_ENABLE_V1_MULTIPROCESSING=1`, vLLM's default)
  `LLM.collective_rpc` is a utility call to the engine core process. The client encodes
  `(method, timeout, args, kwargs)` with `MsgpackEncoder` (vllm/v1/serial_utils.py): a tensor
  becomes `(dtype, shape, data)`, data inline below `VLLM_MSGPACK_ZERO_COPY_THRESHOLD` (256
  bytes) or the index of a side buffer; a CUDA tensor has no side buffer without an
  out-of-band consumer; anything msgpack cannot carry (a generator, a custom object) is a
  TypeError unless VLLM_ALLOW_INSECURE_SERIALIZATION is set. The core decodes it with its
  untyped `generic_decoder` (vllm/v1/engine/core.py), and `_convert_msgspec_args` converts
  only msgspec Structs, so the worker gets lists: `[dtype, shape, buffer index]`.
- `Worker.reload_weights`: vllm/model_executor/model_loader/reload/inplace.py and
  layerwise.py. From a weights iterator, or with none from the safetensors files of
  `weights_path` (or the model's folder), which then becomes the model's path. Checkpoint
  names map onto vLLM's fused layers (q/k/v -> qkv_proj, gate/up -> gate_up_proj, as
  `packed_modules_mapping` of Llama and Qwen2); each layer buffers what it is given and is
  processed only when all its elements have arrived. At the end, a layer given only some of
  its parts is processed anyway from uninitialised memory (NaN here), and a layer given
  nothing keeps its weights. A name the model lacks is a ValueError and a value that is not
  a tensor a TypeError (the weight loader's `copy_`).
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import msgspec
import torch

ZERO_COPY_THRESHOLD = 256  # VLLM_MSGPACK_ZERO_COPY_THRESHOLD's default
RAW_VIEW = 3  # CUSTOM_TYPE_RAW_VIEW
PACKED = {
    "q_proj": "qkv_proj",
    "k_proj": "qkv_proj",
    "v_proj": "qkv_proj",
    "gate_proj": "gate_up_proj",
    "up_proj": "gate_up_proj",
}


class _Encoder:
    """MsgpackEncoder without an out-of-band consumer: tensors inline or as side buffers."""

    def __init__(self) -> None:
        self.buffers: list[bytes] = []
        self.encoder = msgspec.msgpack.Encoder(enc_hook=self._hook)

    def encode(self, obj) -> list[bytes]:
        self.buffers = [b""]
        self.buffers[0] = self.encoder.encode(obj)
        return self.buffers

    def _hook(self, obj):
        if isinstance(obj, torch.Tensor):
            if not obj.is_cpu:  # tensor_data(): .numpy() of a CUDA tensor
                raise TypeError(
                    "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to "
                    "copy the tensor to host memory first."
                )
            raw = obj.flatten().contiguous().view(torch.uint8).numpy().tobytes()
            if obj.nbytes < ZERO_COPY_THRESHOLD:
                data = msgspec.msgpack.Ext(RAW_VIEW, raw)
            else:
                data = len(self.buffers)
                self.buffers.append(raw)
            return str(obj.dtype).removeprefix("torch."), tuple(obj.shape), data
        raise TypeError(
            f"Object of type {type(obj)} is not serializable"
            "Set VLLM_ALLOW_INSECURE_SERIALIZATION=1 to allow "
            "fallback to pickle-based serialization."
        )


def _ext_hook(code: int, data: memoryview):
    if code == RAW_VIEW:
        return data
    raise NotImplementedError(f"Extension type code {code} is not supported")


def utility_call(method: str, timeout, args: tuple, kwargs: dict | None):
    """`(method, timeout, args, kwargs)` as the engine core process receives them."""
    frames = _Encoder().encode((method, timeout, args, kwargs))
    decoded = msgspec.msgpack.Decoder(ext_hook=_ext_hook).decode(frames[0])
    return decoded[0], decoded[1], tuple(decoded[2]), decoded[3]


def _layer_of(name: str) -> tuple[str, str]:
    """A checkpoint name's vLLM layer (module path, packed names fused) and parameter."""
    module, _, param = name.rpartition(".")
    parent, _, leaf = module.rpartition(".")
    return (f"{parent}.{PACKED[leaf]}" if leaf in PACKED else module), param


def model_shapes(model_path: str) -> tuple[dict[str, tuple[int, ...]], bool]:
    """Every checkpoint tensor's shape, from the model folder's config.json (built on meta)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    shapes = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    return shapes, tied


def read_safetensors(folder: str):
    """(name, tensor) of every *.safetensors file in `folder`, one tensor at a time."""
    from safetensors import safe_open

    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with safe_open(path, framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                yield name, f.get_tensor(name)


class Worker:
    """The GPU worker's weights and its in-place reload, over checkpoint-named tensors."""

    def __init__(self, model_path: str, dtype: torch.dtype) -> None:
        self.model_path = model_path
        self.dtype = dtype
        self.shapes, self.tied = model_shapes(model_path)
        self.layers: dict[str, list[str]] = {}
        for name in self.shapes:
            if not (self.tied and name == "lm_head.weight"):
                self.layers.setdefault(_layer_of(name)[0], []).append(name)
        self.weights = {n: torch.zeros(s, dtype=dtype) for n, s in self.shapes.items()}
        self.reloads = 0
        self.processed_early: list[str] = []  # layers processed as soon as they were complete
        self.peak_buffered = 0  # most elements buffered at once by incomplete layers

    def reload_weights(
        self,
        weights_iterator=None,
        weights_path: str | None = None,
        is_checkpoint_format: bool = True,
    ) -> None:
        if weights_iterator is None:
            if weights_path is not None:
                self.model_path = weights_path
            weights_iterator = read_safetensors(self.model_path)
        if not is_checkpoint_format:
            raise NotImplementedError("the stand-in reloads checkpoint-format weights only")
        self.processed_early = []
        pending: dict[str, dict[str, torch.Tensor]] = {}
        for name, tensor in weights_iterator:
            self._load_one(pending, name, tensor)
        for layer, parts in pending.items():  # finalize: incomplete layers from empty memory
            for name in self.layers[layer]:
                self.weights[name] = (
                    parts[name].to(self.dtype).clone()
                    if name in parts
                    else torch.full(self.shapes[name], float("nan"), dtype=self.dtype)
                )
        self.reloads += 1

    def _load_one(self, pending: dict, name: str, tensor) -> None:
        if name not in self.shapes:
            raise ValueError(f"There is no module or parameter named '{name}' in the model")
        if self.tied and name == "lm_head.weight":
            return  # the head is the embedding: its checkpoint copy is skipped
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(
                f"copy_(): argument 'src' (position 1) must be Tensor, not {type(tensor).__name__}"
            )
        if tuple(tensor.shape) != self.shapes[name]:
            raise ValueError(
                f"{name}: shape {tuple(tensor.shape)} is not the model's {self.shapes[name]}"
            )
        layer = _layer_of(name)[0]
        parts = pending.setdefault(layer, {})
        parts[name] = tensor
        self.peak_buffered = max(
            self.peak_buffered, sum(t.numel() for p in pending.values() for t in p.values())
        )
        if all(n in parts for n in self.layers[layer]):
            for part, value in parts.items():
                self.weights[part] = value.to(self.dtype).clone()
            del pending[layer]
            self.processed_early.append(layer)


def model_folder_config(model_path: str) -> dict:
    """The model folder's config.json."""
    return json.loads((Path(model_path) / "config.json").read_text())
