"""The cache of built reasoning-gym datasets, bounded in bytes rather than in entries.

Building a dataset object for a (name, config, seed) can be cheap or hold hundreds of MB
(a sieve of primes, a word list, a big precomputed table), and a peer's groups choose the
seed. An LRU of a fixed number of entries then holds whatever the costliest entries weigh,
so this one counts what each entry holds: the size of every object reachable from the
built dataset (`deep_size`: modules, classes and functions, which every entry shares, are
not counted; what else entries share is counted in each, which errs on the safe side).
It matches what the process allocated for a build to within a few KB for the datasets
measured, and costs about 0.1 s for a 10 MB dataset of 150,000 objects, once per build;
measuring the allocations themselves (`tracemalloc`) would slow the build's imports
five-fold. Least recently used entries leave once the total passes the budget; one entry
larger than the whole budget is used once and not kept.

The budget is `verify.task_cache_mb` (`configure`, called when a node or its verification
worker starts); the default suits a process that configured nothing (tools, tests).

Deliberately not here: building datasets (`swarm.tasks.build`) or guarding their scorers
(`swarm.tasks.guard`, applied to every dataset this cache builds).
"""

from __future__ import annotations

import collections
import functools
import gc
import sys
import threading
import types
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from swarm.tasks.guard import guard_dataset

DEFAULT_BUDGET_BYTES = 256 << 20
MIN_ENTRY_BYTES = 1024  # bookkeeping of an entry whose build allocated nothing measurable

V = TypeVar("V")


@dataclass(frozen=True)
class CacheInfo:
    entries: int
    bytes: int
    budget: int
    hits: int
    misses: int
    evictions: int
    too_large: int  # values larger than the whole budget, used once and not kept


class ByteLRU:
    """An LRU map whose values carry a size; the total stays within `budget` bytes.

    Thread-safe. Sizes are the caller's estimate (`put(key, value, nbytes)`).
    """

    def __init__(self, budget: int):
        self._budget = int(budget)
        self._items: collections.OrderedDict[Hashable, tuple[Any, int]] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._hits = self._misses = self._evictions = self._too_large = 0

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self._misses += 1
                return default
            self._items.move_to_end(key)
            self._hits += 1
            return item[0]

    def put(self, key: Hashable, value: Any, nbytes: int) -> bool:
        """Keep `value` (evicting the least recently used as needed); False if it alone is
        larger than the budget (then it is not kept)."""
        nbytes = max(int(nbytes), MIN_ENTRY_BYTES)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if nbytes > self._budget:
                self._too_large += 1
                return False
            self._items[key] = (value, nbytes)
            self._bytes += nbytes
            self._shrink()
            return True

    def set_budget(self, budget: int) -> None:
        with self._lock:
            self._budget = int(budget)
            self._shrink()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def _shrink(self) -> None:
        while self._bytes > self._budget and self._items:
            _, (_, size) = self._items.popitem(last=False)
            self._bytes -= size
            self._evictions += 1

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(
                len(self._items),
                self._bytes,
                self._budget,
                self._hits,
                self._misses,
                self._evictions,
                self._too_large,
            )


SHARED_TYPES = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    types.FrameType,
)
MAX_OBJECTS = 5_000_000  # past this many objects an entry is surely over any budget


def deep_size(root: object) -> int:
    """Bytes of `root` and of every object reachable from it, shared code left out."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack and len(seen) < MAX_OBJECTS:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, SHARED_TYPES):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj, 0)
        stack.extend(gc.get_referents(obj))
    return total


_DATASETS = ByteLRU(DEFAULT_BUDGET_BYTES)


def configure(budget_bytes: int) -> None:
    """Set the budget of this process's dataset cache (entries over it leave at once)."""
    _DATASETS.set_budget(budget_bytes)


def cache_info() -> CacheInfo:
    return _DATASETS.info()


def clear() -> None:
    _DATASETS.clear()


def dataset_cache(build: Callable[..., V]) -> Callable[..., V]:
    """Decorator: cache `build(*args)` in the process's byte-bounded dataset cache, and
    guard the scorer of what it returns (`swarm.tasks.guard`). Exceptions are not cached."""
    missing = object()

    @functools.wraps(build)
    def cached(*args: Hashable) -> V:
        key = (build.__qualname__, *args)
        value = _DATASETS.get(key, missing)
        if value is not missing:
            return value
        value = guard_dataset(build(*args))
        _DATASETS.put(key, value, deep_size(value))
        return value

    return cached
