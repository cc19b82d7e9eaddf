"""Handing the memory a round freed back to the operating system.

A round allocates and frees a few hundred MB (generation's caches, training's activations).
glibc keeps freed blocks in its heap for reuse, so a node's resident memory creeps up to
the sum of its rounds' fragmentation. `malloc_trim(0)` returns the free pages, but the next
round then faults them in again: trimmed after every round, the solo-cpu round took 1.54 s
instead of 1.36 s (`scripts/bench_round.py --rounds 10`), for a peak of 590 MB instead of
686 MB over 12 rounds of the default config (`scripts/bench_footprint.py --only tiny
--rounds 12`). So the node trims every `TRIM_EVERY` rounds (`swarm.node.lifecycle`), which
keeps the speed and still bounds the creep. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def release_free_memory() -> bool:
    """Return the C heap's free pages to the OS; False where that is not possible."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
