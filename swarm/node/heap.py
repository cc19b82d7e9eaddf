"""Handing the memory a round freed back to the operating system.

A round allocates and frees a few hundred MB (generation's caches, training's activations).
glibc keeps freed blocks in its heap for reuse, so a node's resident memory creeps up to
the sum of its rounds' fragmentation. `malloc_trim(0)` returns the free pages, but the next
round then faults them in again: trimmed after every round, the solo-cpu round took 1.54 s
instead of 1.36 s (`scripts/bench_round.py --rounds 10`), for a peak of 590 MB instead of
686 MB over 12 rounds of the default config (`scripts/bench_footprint.py --only tiny
--rounds 12`). So the node trims every `TRIM_EVERY` rounds (`swarm.node.lifecycle`), which
keeps the speed and still bounds the creep.

Within a round trimming comes too late: glibc raises its mmap threshold to the size of the
largest block freed so far (up to 32 MB), so after the first large tensor every block below
it comes from the heap, and a real model's training pass leaves hundreds of MB there that the
next pass cannot always reuse. `map_large_blocks` fixes the threshold at `MMAP_THRESHOLD`:
a block that large is mapped on its own and unmapped when freed. With SmolLM2-135M (micro-
batches of 16) resident memory after an update fell from 3.3-3.4 GB to 2.0 GB, and the
update's peak by ~0.5 GB (with the gradients freed between steps, `swarm.policy.trainer`).
The built-in tiny models' tensors are almost all smaller, and stay on the heap.

A real model's pass also frees many blocks between 64 KB and 1 MB (a layer's activations
for a micro-batch) that the heap keeps: with SmolLM2-135M, bf16 moments and micro-batches of
8, a threshold of 64 KB (`REAL_MODEL_MMAP_THRESHOLD`, taken for a model of `REAL_MODEL_PARAMS`
weights or more) cut the second update's peak from 2,923 to 2,695 MiB and resident memory
after it from 2,075 to 1,434 MiB, the update no slower (54 s against 58 s); 16 KB gave the
same. The tiny models keep 1 MB: their many small tensors would each be mapped apart.
Elsewhere than glibc both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

from swarm.policy.memory import CHECKPOINTING_PARAMS

MMAP_THRESHOLD = 1 << 20  # bytes: blocks this large are mapped apart and unmapped when freed
REAL_MODEL_MMAP_THRESHOLD = 64 << 10  # the same for a model of REAL_MODEL_PARAMS or more
# any real LM (the size from which "auto" checkpoints); the built-in tiny ones have < 1 M
REAL_MODEL_PARAMS = CHECKPOINTING_PARAMS
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc's malloc.h)


@functools.lru_cache(maxsize=2)
def _libc_function(name: str):
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        return getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):  # not glibc
        return None


def _malloc_trim():
    return _libc_function("malloc_trim")


def map_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Map blocks of at least `threshold` bytes apart, so freeing one returns it to the OS at
    once (a fixed threshold: glibc's own rises with the blocks freed). Process-wide; False
    where that is not possible."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


def mmap_threshold(parameters: int) -> int:
    """The block size from which a node with a model of `parameters` weights maps blocks
    apart (see the module docstring)."""
    return REAL_MODEL_MMAP_THRESHOLD if parameters >= REAL_MODEL_PARAMS else MMAP_THRESHOLD


def release_free_memory() -> bool:
    """Return the C heap's free pages to the OS; False where that is not possible."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
