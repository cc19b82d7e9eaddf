"""Choosing what to train on each round: the SAPO mix of local and shared groups.

Pure functions over plain data. A round's batch is up to I local groups plus up to J shared
groups from the experience pool:

1. shared groups that are too stale are dropped: by policy-version gap when the sender runs
   the same model as we do (its version numbers mean something to us), and by age always;
2. groups whose rewards are all equal carry zero advantage and are dropped;
3. the rest are sampled uniformly, deterministically under a seed, with at most
   `per_peer_cap` shared groups from any one sender, so no single peer dominates a batch.

If fewer useful shared groups exist than J, the batch is simply smaller: local groups never
stand in for missing shared ones (that would change the mix being measured).

Deliberately not here: where groups come from, verification, re-scoring or tokenization.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from swarm.policy.grpo import has_signal

G = TypeVar("G")


@dataclass(frozen=True)
class Candidate(Generic[G]):
    """A group offered for training: its payload, its rewards as scored locally, its origin."""

    group: G
    rewards: tuple[float, ...]
    sender: str = ""  # "" for local groups
    same_model: bool = True  # the sender runs our model, so version gaps are comparable
    policy_version: int = 0  # the sender's policy version when it generated the group
    received_at: float = 0.0  # local clock, seconds


@dataclass(frozen=True)
class Staleness:
    """How old a shared group may be. None disables a bound."""

    max_version_gap: int | None = 8
    max_age_s: float | None = 600.0


@dataclass(frozen=True)
class BatchChoice(Generic[G]):
    """The groups chosen for one update, and how many were passed over and why."""

    local: list[G]
    shared: list[G]
    dropped: Counter = field(default_factory=Counter)  # reason -> count
    not_sampled: int = 0

    @property
    def dropped_zero_advantage(self) -> int:
        return self.dropped["zero_advantage"]


def is_stale(c: Candidate, local_version: int, now: float, staleness: Staleness) -> str | None:
    """Why a shared candidate is too stale to train on, or None."""
    if c.same_model and staleness.max_version_gap is not None and local_version - c.policy_version > staleness.max_version_gap:
        return "stale_version"
    if staleness.max_age_s is not None and now - c.received_at > staleness.max_age_s:
        return "stale_age"
    return None


def choose_batch(
    local: Sequence[Candidate[G]],
    shared: Sequence[Candidate[G]],
    local_groups: int,
    shared_groups: int,
    seed: int | str,
    *,
    local_version: int = 0,
    now: float = 0.0,
    staleness: Staleness = Staleness(max_version_gap=None, max_age_s=None),
    per_peer_cap: int | None = None,
) -> BatchChoice[G]:
    """Pick up to `local_groups` local and `shared_groups` shared groups with learning signal."""
    rng = random.Random(seed)
    dropped: Counter = Counter()
    fresh_shared = []
    for c in shared:
        reason = is_stale(c, local_version, now, staleness)
        if reason:
            dropped[reason] += 1
        else:
            fresh_shared.append(c)
    useful_local = [c for c in local if has_signal(c.rewards)]
    useful_shared = [c for c in fresh_shared if has_signal(c.rewards)]
    dropped["zero_advantage"] += (len(local) - len(useful_local)) + (len(fresh_shared) - len(useful_shared))
    chosen_local = _uniform(useful_local, local_groups, rng)
    chosen_shared = _uniform_capped(useful_shared, shared_groups, rng, per_peer_cap)
    not_sampled = len(useful_local) + len(useful_shared) - len(chosen_local) - len(chosen_shared)
    return BatchChoice(
        local=[c.group for c in chosen_local],
        shared=[c.group for c in chosen_shared],
        dropped=dropped,
        not_sampled=not_sampled,
    )


def _uniform(items: list, k: int, rng: random.Random) -> list:
    if k >= len(items):
        return list(items)
    return rng.sample(items, k)


def _uniform_capped(items: list[Candidate], k: int, rng: random.Random, cap: int | None) -> list[Candidate]:
    """A uniform sample of `k` items taking at most `cap` from any one sender."""
    order = list(items)
    rng.shuffle(order)
    taken: list[Candidate] = []
    per_sender: Counter = Counter()
    for c in order:
        if len(taken) >= k:
            break
        if cap is not None and per_sender[c.sender] >= cap:
            continue
        per_sender[c.sender] += 1
        taken.append(c)
    return taken
