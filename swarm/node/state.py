"""The node's plain state and records of one run: where it is, its groups, its counters.

Plain data shared by the node's parts (no behaviour), so that the parts depend on it and
never on each other's modules for types.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from swarm.policy.generator import Completion
from swarm.tasks import Task
from swarm.wire import RolloutGroup, SignedGroup


@dataclass
class OwnGroup:
    """One question's group as this node generated and scored it."""

    task: Task
    completions: list[Completion]
    rewards: tuple[float, ...]
    signed: SignedGroup | None = None
    wire: RolloutGroup | None = None


@dataclass
class RoundTimes:
    generate: float = 0.0
    score: float = 0.0
    train: float = 0.0
    verify: float = 0.0  # checking peers' groups (re-scoring, spot checks): part of other
    total: float = 0.0

    @property
    def other(self) -> float:
        return max(0.0, self.total - self.generate - self.score - self.train)


@dataclass
class NodeState:
    """Where the node is: rounds completed and updates applied since the base model."""

    round: int = 0
    policy_version: int = 0
    rewards: list[float] = field(default_factory=list)  # mean reward per round, this run


@dataclass
class SharingStats:
    """What this node exchanged with the swarm during this run."""

    published_groups: int = 0
    publish_failures: int = 0
    received_groups: int = 0
    accepted_groups: int = 0
    rejected_groups: int = 0
    duplicates: int = 0
    rejections_dropped: int = 0  # validator rejections lost because the pending queue was full
    # received groups refused, by `Reason` code (duplicates included, as "duplicate")
    rejected_by_reason: collections.Counter = field(default_factory=collections.Counter)
    # what the exchange protocol did (the pull exchange's counters), summed over rounds
    exchange: collections.Counter = field(default_factory=collections.Counter)
    # what the transport refused from peers by itself (not groups), by `Reason` code
    refused_by_reason: collections.Counter = field(default_factory=collections.Counter)
