"""Choosing what to train on each round: the SAPO mix of local and shared groups.

Pure functions over plain data. A round's batch is I local groups plus J shared groups
(from the experience pool). Groups whose rewards are all equal carry zero advantage and are
dropped first; the rest are sampled uniformly, deterministically under a seed. If fewer
useful shared groups exist than J, the batch is simply smaller: local groups never stand in
for missing shared ones (that would change the mix being measured).

Deliberately not here: where groups come from, verification, or tokenization.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from swarm.policy.grpo import has_signal

G = TypeVar("G")


@dataclass(frozen=True)
class Candidate(Generic[G]):
    """A group offered for training: its payload and its rewards as scored locally."""

    group: G
    rewards: tuple[float, ...]


@dataclass(frozen=True)
class BatchChoice(Generic[G]):
    """The groups chosen for one update, and how many were passed over and why."""

    local: list[G]
    shared: list[G]
    dropped_zero_advantage: int
    not_sampled: int


def choose_batch(
    local: Sequence[Candidate[G]],
    shared: Sequence[Candidate[G]],
    local_groups: int,
    shared_groups: int,
    seed: int | str,
) -> BatchChoice[G]:
    """Pick up to `local_groups` local and `shared_groups` shared groups with learning signal."""
    rng = random.Random(seed)
    useful_local = [c for c in local if has_signal(c.rewards)]
    useful_shared = [c for c in shared if has_signal(c.rewards)]
    dropped = (len(local) - len(useful_local)) + (len(shared) - len(useful_shared))
    chosen_local = _uniform(useful_local, local_groups, rng)
    chosen_shared = _uniform(useful_shared, shared_groups, rng)
    not_sampled = len(useful_local) + len(useful_shared) - len(chosen_local) - len(chosen_shared)
    return BatchChoice(
        local=[c.group for c in chosen_local],
        shared=[c.group for c in chosen_shared],
        dropped_zero_advantage=dropped,
        not_sampled=not_sampled,
    )


def _uniform(items: list, k: int, rng: random.Random) -> list:
    if k >= len(items):
        return list(items)
    return rng.sample(items, k)
