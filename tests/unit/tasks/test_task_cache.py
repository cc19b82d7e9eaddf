"""The dataset cache is bounded in bytes, not entries (swarm.tasks.cache)."""

from __future__ import annotations

import sys

import pytest

from swarm.tasks import TaskSpec, build_task
from swarm.tasks import cache as task_cache
from swarm.tasks.cache import ByteLRU, deep_size


def test_least_recently_used_entries_leave_once_over_the_budget():
    cache = ByteLRU(10_000)
    cache.put("a", 1, 4000)
    cache.put("b", 2, 4000)
    assert cache.get("a") == 1  # a is now the most recently used
    cache.put("c", 3, 4000)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    info = cache.info()
    assert info.entries == 2 and info.bytes == 8000 and info.evictions == 1


def test_an_entry_larger_than_the_budget_is_not_kept():
    cache = ByteLRU(10_000)
    cache.put("small", 1, 2000)
    assert cache.put("huge", 2, 50_000) is False
    assert cache.get("huge") is None and cache.get("small") == 1
    assert cache.info().too_large == 1


def test_a_smaller_budget_evicts_at_once():
    cache = ByteLRU(10_000)
    for i in range(5):
        cache.put(i, i, 2000)
    cache.set_budget(4500)
    assert cache.info().entries == 2 and cache.get(4) == 4


def test_deep_size_counts_what_an_object_holds_and_not_shared_code():
    words = [f"word{i}" for i in range(10_000)]
    held = {"words": words, "table": bytearray(1 << 20), "helper": deep_size, "kind": dict}
    size = deep_size(held)
    assert (1 << 20) + sum(map(sys.getsizeof, words)) <= size < (1 << 20) + (1 << 20)
    assert deep_size([words, words]) < deep_size(words) + 1024  # counted once


@pytest.fixture
def small_budget():
    task_cache.clear()
    task_cache.configure(4 << 20)
    yield
    task_cache.configure(task_cache.DEFAULT_BUDGET_BYTES)
    task_cache.clear()


def test_datasets_heavy_per_seed_stay_within_the_budget(small_budget):
    # spell_backward holds a word list per (config, seed): ~10 MB each, over this 4 MB budget
    for seed in range(3):
        build_task(TaskSpec.make("spell_backward", {}, seed=seed, index=0))
        build_task(TaskSpec.make("chain_sum", {}, seed=seed, index=0))
    info = task_cache.cache_info()
    assert info.bytes <= 4 << 20 and info.too_large == 3
    assert info.entries == 3  # the three small chain_sum datasets are kept
