"""The history sample's parts: the min-wise sketch, the count of IDs heard of, and how many
views a node hears a refresh (`swarm.exchange.history_sample`)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from swarm.exchange.history_sample import NOVEL, BottomK, DistinctCount, views_to_hear


def test_repetition_does_not_bias_the_sketch():
    """An ID fed a thousand times counts once: the sketch is the same set either way."""
    ids = [f"peer-{i}" for i in range(1000)]
    once, loud = BottomK(32, b"k" * 16), BottomK(32, b"k" * 16)
    for peer in ids:
        once.feed(peer)
    for peer in ids:
        for _ in range(1 if peer != "peer-7" else 1000):
            loud.feed(peer)
    assert set(once.kept) == set(loud.kept) and len(once.kept) == 32


def test_the_sketch_is_a_uniform_subset_over_keys():
    """Over many keys, the first 100 of 1,000 IDs hold about 10 % of the sketch."""
    ids = [f"peer-{i}" for i in range(1000)]
    rng, first = random.Random(0), 0
    for _ in range(200):
        sketch = BottomK(16, rng.randbytes(16))
        for peer in ids:
            sketch.feed(peer)
        first += sum(int(p.split("-")[1]) < 100 for p in sketch.kept)
    assert 0.08 < first / (200 * 16) < 0.12


def test_distinct_count_is_exact_below_k_and_close_above():
    count = DistinctCount(b"c" * 16, k=512)
    for i in range(300):
        count.feed(f"peer-{i}")
        count.feed(f"peer-{i}")  # heard twice, counted once
    assert count.estimate() == 300
    for i in range(300, 10_000):
        count.feed(f"peer-{i}")
    assert abs(count.estimate() / 10_000 - 1) < 0.15  # about 4 % error; 3.5 sigma


@given(st.lists(st.integers(0, 5000), max_size=400))
def test_distinct_count_never_shrinks(ids):
    count, last = DistinctCount(b"d" * 16, k=16), 0.0
    for i in ids:
        count.feed(f"peer-{i}")
        assert count.estimate() >= last
        last = count.estimate()


def test_views_heard_double_while_they_teach_and_halve_once_they_do_not():
    assert views_to_hear(1, NOVEL, base=1, most=16) == 2
    assert views_to_hear(8, 0.5, base=1, most=16) == 16
    assert views_to_hear(16, 0.9, base=1, most=16) == 16  # never above `most`
    assert views_to_hear(16, NOVEL / 2, base=1, most=16) == 8
    assert views_to_hear(1, 0.0, base=1, most=16) == 1  # never below `base`
    assert views_to_hear(0, 1.0, base=0, most=0) == 0  # hearing switched off stays off


@given(st.integers(0, 64), st.floats(0, 1), st.integers(0, 8), st.integers(0, 64))
def test_views_heard_stay_within_base_and_most(now, novel, base, most):
    most = max(most, base)
    assert base <= views_to_hear(now, novel, base, most) <= most
