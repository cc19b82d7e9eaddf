"""Choosing what to train on each round: the SAPO mix of own and shared groups.

Pure functions over plain data. A round's batch is up to I own groups plus up to J shared
groups from the experience pool:

1. shared groups that are too stale are dropped: by how many policy versions they lag
   behind ours when the sender runs the same model as we do (its version numbers mean
   something to us), and by how long this node has held them (since it received them) always;
   optionally also every group older than its sender's freshest round(s) (`fresh_rounds`;
   the paper samples the current round only);
2. groups whose rewards are all equal carry zero advantage and are dropped: own and
   shared ones (`SignalFilter.ALL`), or shared ones only (`SignalFilter.SHARED`, the paper's
   protocol: a node trains on all of its own groups);
3. the rest are sampled deterministically under a seed, with at most `per_peer_cap` shared
   groups from any one sender, so no single peer dominates a batch: uniformly, or (given the
   node's recent success per task family, `need`) preferring shared groups of the families
   the node does worst on (`need_weight`).

If fewer useful shared groups exist than J, the batch is simply smaller: own groups never
stand in for missing shared ones (that would change the mix being measured).

Deliberately not here: where groups come from, verification, re-scoring or tokenization.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, TypeVar

from swarm.core.errors import ConfigError
from swarm.policy.grpo import has_signal

G = TypeVar("G")


class DropReason(StrEnum):
    """Why a candidate group was passed over (keys of `BatchChoice.dropped`)."""

    ZERO_ADVANTAGE = "zero_advantage"
    STALE_VERSION = "stale_version"
    HELD_TOO_LONG = "held_too_long"  # held (since received) past max_held_s
    OLD_ROUND = "old_round"  # older than its sender's freshest rounds (fresh_rounds)


class SignalFilter(StrEnum):
    """Which groups the zero-advantage filter drops."""

    ALL = "all"  # own and shared groups
    SHARED = "shared"  # shared groups only; every own group is kept (the paper's protocol)


@dataclass(frozen=True)
class Candidate(Generic[G]):
    """A group offered for training: its payload, its rewards as scored locally, its origin."""

    group: G
    rewards: tuple[float, ...]
    sender: str = ""  # "" for own groups
    same_model: bool = True  # the sender runs our model, so version gaps are comparable
    policy_version: int = 0  # the sender's policy version when it generated the group
    received_at: float = 0.0  # local clock, seconds
    round: int = 0  # the sender's round when it generated the group (used by fresh_rounds)
    family: str = ""  # task family, e.g. the dataset name (used by need-based sampling)


@dataclass(frozen=True)
class Staleness:
    """How stale a shared group may be (`[sharing]`'s max_version_lag and max_held_s). None
    disables a bound."""

    max_version_lag: int | None = 8  # policy versions behind ours (same model only)
    max_held_s: float | None = 600.0  # seconds since this node received it


@dataclass(frozen=True)
class BatchChoice(Generic[G]):
    """The groups chosen for one update, and how many were passed over and why."""

    own: list[G]
    shared: list[G]
    dropped: Counter = field(default_factory=Counter)  # reason -> count
    not_sampled: int = 0

    @property
    def dropped_zero_advantage(self) -> int:
        return self.dropped[DropReason.ZERO_ADVANTAGE]


def is_stale(
    c: Candidate, local_version: int, now: float, staleness: Staleness
) -> DropReason | None:
    """Why a shared candidate is too stale to train on, or None."""
    lag = staleness.max_version_lag
    if c.same_model and lag is not None and local_version - c.policy_version > lag:
        return DropReason.STALE_VERSION
    if staleness.max_held_s is not None and now - c.received_at > staleness.max_held_s:
        return DropReason.HELD_TOO_LONG
    return None


def freshest_rounds(candidates: Sequence[Candidate[G]], rounds: int) -> list[Candidate[G]]:
    """The candidates from each sender's `rounds` newest rounds among them (1: its latest)."""
    newest: dict[str, int] = {}
    for c in candidates:
        newest[c.sender] = max(newest.get(c.sender, c.round), c.round)
    return [c for c in candidates if newest[c.sender] - c.round < rounds]


def family_success(
    groups: Iterable[tuple[str, Sequence[float]]], max_reward: float = 1.0
) -> dict[str, float]:
    """Mean reward per family, as a share of `max_reward`, over (family, rewards) pairs.

    What a node feeds `need` from its own recent groups: 0 where it never succeeds, 1 where
    it always does. Families it has not seen are absent (`need_weight` treats them as 0).
    """
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for family, rewards in groups:
        total[family] += math.fsum(rewards)
        count[family] += len(rewards)
    return {f: min(1.0, max(0.0, total[f] / (count[f] * max_reward))) for f in total if count[f]}


def learning_families(groups: Iterable[tuple[str, Sequence[float]]]) -> frozenset[str]:
    """Families on which at least one of these (family, rewards) groups carries learning
    signal (rewards that differ). Fed a node's own recent groups, these are the families it
    is learning by itself, where `sharing.shared_weight_control = "own-signal"` gives peers'
    groups `own_signal_weight`: a node's own evidence, nothing a peer says."""
    return frozenset(family for family, rewards in groups if has_signal(rewards))


def own_signal_weights(
    families: Sequence[str], learning: Iterable[str], weight: float, learning_weight: float
) -> list[float]:
    """Each shared sample's weight relative to the own part, by its task family:
    `learning_weight` on a family in `learning` (`learning_families`), `weight` elsewhere."""
    mine = frozenset(learning)
    return [learning_weight if f in mine else weight for f in families]


def has_signal_against(rewards: Sequence[float], baseline: float | None, eps: float = 1e-6) -> bool:
    """Whether a shared group can teach a node whose mean reward on its family is `baseline`:
    its rewards differ from each other or from the baseline (None: the group's own rule)."""
    if baseline is None:
        return has_signal(rewards, eps)
    return has_signal(rewards, eps) or any(abs(r - baseline) > eps for r in rewards)


def need_weight(success: float, floor: float) -> float:
    """Sampling weight of a shared group whose family the node succeeds on `success` of the time.

    Linear in the failure rate, never below `floor`, so mastered families still get a little.
    """
    return floor + (1.0 - floor) * (1.0 - min(1.0, max(0.0, success)))


def choose_batch(
    own: Sequence[Candidate[G]],
    shared: Sequence[Candidate[G]],
    own_groups: int,
    shared_groups: int,
    seed: int | str,
    *,
    local_version: int = 0,
    now: float = 0.0,
    staleness: Staleness = Staleness(max_version_lag=None, max_held_s=None),
    per_peer_cap: int | None = None,
    signal_filter: SignalFilter = SignalFilter.ALL,
    fresh_rounds: int | None = None,
    need: Mapping[str, float] | None = None,
    need_floor: float = 0.05,
    baselines: Mapping[str, float] | None = None,
) -> BatchChoice[G]:
    """Pick up to `own_groups` own and `shared_groups` shared groups with learning signal.

    `fresh_rounds`: keep only shared groups from each sender's newest rounds (None: any).
    `need`: the node's recent success per family (`family_success`); when given, shared
    groups are drawn with probability growing with the node's failure rate on their family
    (`need_weight`, at least `need_floor`) instead of uniformly.
    `baselines`: the node's own mean reward per family, for sharing channels whose baseline
    is not the group's (receiver, joint): a shared group then has signal when any reward
    differs from the node's baseline on its family (`has_signal_against`), so a peer's
    all-right group where the node is usually wrong is kept.
    """
    if not 0.0 < need_floor <= 1.0:
        raise ConfigError(f"need_floor must be in (0, 1], got {need_floor}")
    rng = random.Random(seed)
    dropped: Counter = Counter()
    fresh_shared = _recent_enough(shared, local_version, now, staleness, fresh_rounds, dropped)
    if signal_filter == SignalFilter.SHARED:
        useful_own = list(own)
    else:
        useful_own = [c for c in own if has_signal(c.rewards)]
    if baselines is None:
        useful_shared = [c for c in fresh_shared if has_signal(c.rewards)]
    else:
        useful_shared = [
            c for c in fresh_shared if has_signal_against(c.rewards, baselines.get(c.family))
        ]
    filtered = len(own) - len(useful_own) + len(fresh_shared) - len(useful_shared)
    dropped[DropReason.ZERO_ADVANTAGE] += filtered
    chosen_own = _uniform(useful_own, own_groups, rng)
    if need is None:
        chosen_shared = _uniform_capped(useful_shared, shared_groups, rng, per_peer_cap)
    else:
        weights = [need_weight(need.get(c.family, 0.0), need_floor) for c in useful_shared]
        chosen_shared = _weighted_capped(useful_shared, weights, shared_groups, rng, per_peer_cap)
    not_sampled = len(useful_own) + len(useful_shared) - len(chosen_own) - len(chosen_shared)
    return BatchChoice(
        own=[c.group for c in chosen_own],
        shared=[c.group for c in chosen_shared],
        dropped=dropped,
        not_sampled=not_sampled,
    )


def _recent_enough(shared, local_version, now, staleness, fresh_rounds, dropped: Counter) -> list:
    """The shared candidates neither stale nor (with `fresh_rounds`) from an old round."""
    fresh = []
    for c in shared:
        reason = is_stale(c, local_version, now, staleness)
        if reason:
            dropped[reason] += 1
        else:
            fresh.append(c)
    if fresh_rounds is None:
        return fresh
    recent = freshest_rounds(fresh, fresh_rounds)
    dropped[DropReason.OLD_ROUND] += len(fresh) - len(recent)
    return recent


def _uniform(items: list, k: int, rng: random.Random) -> list:
    if k >= len(items):
        return list(items)
    return rng.sample(items, k)


def _uniform_capped(
    items: list[Candidate], k: int, rng: random.Random, cap: int | None
) -> list[Candidate]:
    """A uniform sample of `k` items taking at most `cap` from any one sender."""
    order = list(items)
    rng.shuffle(order)
    return _take_capped(order, k, cap)


def _weighted_capped(
    items: list[Candidate], weights: list[float], k: int, rng: random.Random, cap: int | None
) -> list[Candidate]:
    """A weighted sample of `k` items without replacement, at most `cap` from any one sender.

    Each item gets the key u ** (1 / weight) for a uniform u (Efraimidis and Spirakis); taking
    items by decreasing key draws them one by one with probability proportional to weight.
    """
    keys = [rng.random() ** (1.0 / w) for w in weights]
    ranked = sorted(range(len(items)), key=lambda i: (-keys[i], i))
    return _take_capped([items[i] for i in ranked], k, cap)


def _take_capped(order: list[Candidate], k: int, cap: int | None) -> list[Candidate]:
    """The first `k` items of `order`, skipping a sender's items beyond `cap`."""
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
