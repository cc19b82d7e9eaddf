"""A model's weights written to one safetensors file a tensor at a time, for an engine to reload.

The safetensors layout (an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the bytes) is fixed by the tensors' shapes alone,
so the header is written first and each tensor is cast, moved to the CPU, written and freed
before the next: at most one tensor is copied at a time, never the whole state dict.
Tensors that share storage (a tied output head) are written once, under their first name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import torch

from swarm.core.errors import GeneratorError

DTYPE_NAMES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}


def distinct_tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's state dict in order, each storage once (tied weights under their first name)."""
    seen: set[tuple[int, int]] = set()
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if key in seen:
            continue
        seen.add(key)
        yield name, tensor.detach()


def header(tensors: list[tuple[str, tuple[int, ...]]], dtype: torch.dtype) -> bytes:
    """The length-prefixed safetensors header for `tensors` (name, shape) stored as `dtype`."""
    size = torch.empty((), dtype=dtype).element_size()
    entries: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors:
        count = 1
        for d in shape:
            count *= d
        entries[name] = {
            "dtype": DTYPE_NAMES[dtype],
            "shape": list(shape),
            "data_offsets": [offset, offset + count * size],
        }
        offset += count * size
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def to_host(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One tensor, cast and in CPU memory, contiguous: the only copy alive while writing."""
    return tensor.to("cpu", dtype).contiguous()


def write_weights(model: torch.nn.Module, path: Path, dtype: torch.dtype) -> int:
    """Write `model`'s weights to `path` as `dtype`, one tensor at a time; returns bytes written.

    The file is written beside `path` and renamed over it, so a reader never sees half of it.
    """
    if dtype not in DTYPE_NAMES:
        raise GeneratorError(f"weights cannot be written as {dtype}")
    tensors = list(distinct_tensors(model))
    partial = path.with_name(path.name + ".partial")
    written = 0
    try:
        with open(partial, "wb") as f:
            written += f.write(header([(n, tuple(t.shape)) for n, t in tensors], dtype))
            for _, tensor in tensors:
                host = to_host(tensor, dtype)
                written += f.write(host.reshape(-1).view(torch.uint8).numpy().data)
                del host
        os.replace(partial, path)
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise GeneratorError(f"cannot write the engine's weights to {path}: {e}") from None
    return written
