"""Weight sets as bf16 bit patterns: layout checks, tied names, content hashes, snapshots."""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import blake3
import msgpack
import numpy as np
import torch

from swarm.policy.delta.container import _DTYPE, DeltaError, Weights

# -- tensors


def _check_tensor(name: object, t: object, what: str) -> None:
    if not isinstance(name, str):
        raise DeltaError(f"{what}: tensor names must be str, got {type(name).__name__}")
    if not isinstance(t, torch.Tensor):
        raise DeltaError(f"{what}: {name!r} is a {type(t).__name__}, not a torch.Tensor")
    if t.dtype != torch.bfloat16:
        raise DeltaError(f"{what}: dtype mismatch for {name!r}: expected bfloat16, got {t.dtype}")
    if t.device.type != "cpu" or t.layout != torch.strided:
        raise DeltaError(f"{what}: {name!r} must be a dense CPU tensor, got {t.device}/{t.layout}")
    if t.numel() > 1 and any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride(), strict=True)):
        # Writing one element of an expanded view would change several: no in-place apply.
        raise DeltaError(f"{what}: {name!r} is an expanded view whose elements share memory")


def _bits(t: torch.Tensor) -> np.ndarray:
    """Flat uint16 bit patterns of a bf16 tensor: a view when contiguous, else a copy."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.view(torch.int16).numpy().reshape(-1).view(np.uint16)


def _span(t: torch.Tensor) -> tuple[int, int]:
    """Byte range [start, end) a non-empty tensor covers inside its storage."""
    extent = 1 + sum(
        (size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True)
    )
    start = int(t.storage_offset()) * t.element_size()
    return start, start + int(extent) * t.element_size()


def _layout(weights: Weights, what: str) -> dict[str, str]:
    """Map every name to its canonical name (itself, or the first name sharing its storage).

    Tied weights (two names, one storage, same offset/shape/stride) are one tensor to
    encode and to write. Tensors that partly overlap in a storage cannot be handled
    bit-exactly and are refused rather than guessed at.
    """
    canonical: dict[str, str] = {}
    by_view: dict[tuple, str] = {}
    spans: dict[int, list[tuple[int, int, str]]] = {}
    for name in sorted(weights):
        t = weights[name]
        _check_tensor(name, t, what)
        canonical[name] = name
        if t.numel() == 0:
            continue
        ptr = t.untyped_storage().data_ptr()
        key = (ptr, t.storage_offset(), tuple(t.shape), t.stride())
        if key in by_view:
            canonical[name] = by_view[key]
            continue
        by_view[key] = name
        spans.setdefault(ptr, []).append((*_span(t), name))
    for group in spans.values():
        group.sort()
        for (_, end, first), (start, _, second) in zip(group, group[1:], strict=False):
            if start < end:
                raise DeltaError(
                    f"{what}: {first!r} and {second!r} overlap in one storage without being "
                    "the same tensor; pass unique tensors"
                )
    return canonical


def _groups(canonical: dict[str, str]) -> dict[str, list[str]]:
    """Canonical name -> every name tied to it (itself first)."""
    groups: dict[str, list[str]] = {}
    for name in sorted(canonical):
        groups.setdefault(canonical[name], []).append(name)
    return groups


def _pool(threads: int | None) -> ThreadPoolExecutor:
    # numpy, zstd and blake3 release the GIL on large buffers, so threads use every core
    # this process may run on.
    return ThreadPoolExecutor(max_workers=max(1, threads or len(os.sched_getaffinity(0))))


# -- hashing


def _content_digest(bits: np.ndarray) -> bytes:
    """blake3 of a tensor's little-endian bit patterns (name and shape not included)."""
    return blake3.blake3(_le_bytes(bits)).digest()


def _le_bytes(bits: np.ndarray) -> memoryview:
    # Feeding blake3 slice by slice gives the same digest as one call over the whole.
    return np.ascontiguousarray(bits.astype("<u2", copy=False)).view(np.uint8).data


def _entry_digest(name: str, shape: tuple[int, ...], content: bytes) -> bytes:
    meta = msgpack.packb([name, _DTYPE, list(shape)])
    return blake3.blake3(b"swarm/policy/tensor/1\0" + meta + content).digest()


def _overall_digest(entries: dict[str, bytes]) -> bytes:
    h = blake3.blake3(b"swarm/policy/weights/1\0")
    for name in sorted(entries):
        h.update(msgpack.packb([name, entries[name]]))
    return h.digest()


def _entries(
    weights: Weights, contents: dict[str, bytes], canonical: dict[str, str]
) -> dict[str, bytes]:
    return {
        name: _entry_digest(name, tuple(weights[name].shape), contents[canonical[name]])
        for name in weights
    }


def _hash_contents(
    weights: Weights, names: Iterable[str], pool: ThreadPoolExecutor
) -> dict[str, bytes]:
    """Content digests of the named tensors, largest first across the pool's threads."""
    order = sorted(names, key=lambda n: -weights[n].numel())
    digests = pool.map(lambda n: _content_digest(_bits(weights[n])), order)
    return dict(zip(order, digests, strict=True))


def weights_hash(weights: Weights, *, threads: int | None = None) -> bytes:
    """The 32-byte identity of a bf16 weight set, as carried in delta headers.

    blake3 over every name in sorted order with its dtype, shape and raw bit patterns
    (tied names are each listed, their storage is read once). It is what `apply_delta`
    compares against ``base_hash`` before and ``result_hash`` after applying.
    """
    canonical = _layout(weights, "weights_hash")
    with _pool(threads) as pool:
        contents = _hash_contents(weights, set(canonical.values()), pool)
    return _overall_digest(_entries(weights, contents, canonical))


# -- publishing


def bf16_state_dict(source: torch.nn.Module | Weights) -> dict[str, torch.Tensor]:
    """Snapshot a model's weights (e.g. fp32 masters) as contiguous CPU bf16 copies to publish.

    Casting rounds to nearest-even, as `Tensor.to(torch.bfloat16)` does. Names that share
    storage in the source (tied weights) share one bf16 tensor in the result, so deltas
    encode them once. Always copies, so later training steps do not alter the snapshot.
    Refuses non-floating entries (integer buffers) instead of silently dropping them.
    """
    state = source.state_dict() if isinstance(source, torch.nn.Module) else source
    out: dict[str, torch.Tensor] = {}
    seen: dict[tuple, torch.Tensor] = {}
    for name, t in state.items():
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise DeltaError(f"bf16_state_dict: {name!r} is not a floating-point tensor")
        key = (
            t.device,
            t.untyped_storage().data_ptr(),
            t.storage_offset(),
            tuple(t.shape),
            t.stride(),
        )
        if t.numel() and key in seen:
            out[name] = seen[key]
            continue
        copy = torch.empty(tuple(t.shape), dtype=torch.bfloat16)
        copy.copy_(t.detach())
        out[name] = seen[key] = copy
    return out
