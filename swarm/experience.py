"""The experience pool: peers' accepted rollout groups, re-scored locally, waiting to be trained on.

SAPO trains on other nodes' completions, but never on their word: a shared group enters the
pool only after `swarm.verify` rebuilt its task and re-scored every completion with this
node's own verifier (`swarm.verify.rescore`). Those local rewards are what the batch choice
and the advantages use; the sender's claimed rewards are kept only for comparison. When a
shared group is trained on, its completions are re-tokenized with this node's tokenizer
(senders may run other models), and it leaves the pool: each shared group is learned from
at most once.

Deliberately not here: any check of a group (`swarm.verify`), choosing the batch
(`swarm.sampling`), or computing log-probs (the trainer).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from swarm.sampling import Candidate
from swarm.tasks import Task


@dataclass(frozen=True)
class SharedGroup:
    """A peer's group as this node will train on it."""

    row_id: int  # the ledger row that recorded its arrival
    content_hash: str
    sender: str
    task: Task
    completions: tuple[str, ...]
    finished: tuple[bool, ...]
    rewards: tuple[float, ...]  # re-scored locally
    claimed_rewards: tuple[float, ...]
    policy_version: int
    same_model: bool
    received_at: float
    round: int = 0  # the sender's round when it generated the group
    family: str = ""  # the task's dataset



class ExperiencePool:
    """A bounded FIFO of shared groups waiting to be trained on (oldest evicted first, counted)."""

    def __init__(self, capacity: int = 4096):
        self._groups: collections.OrderedDict[str, SharedGroup] = collections.OrderedDict()
        self.capacity = capacity
        self.evicted = 0

    def add(self, group: SharedGroup) -> None:
        self._groups[group.content_hash] = group
        while len(self._groups) > self.capacity:
            self._groups.popitem(last=False)
            self.evicted += 1

    def candidates(self) -> list[Candidate[SharedGroup]]:
        return [
            Candidate(
                g,
                g.rewards,
                sender=g.sender,
                same_model=g.same_model,
                policy_version=g.policy_version,
                received_at=g.received_at,
                round=g.round,
                family=g.family or g.task.spec.dataset,
            )
            for g in self._groups.values()
        ]

    def take(self, groups: list[SharedGroup]) -> None:
        """Remove groups that were trained on."""
        for g in groups:
            self._groups.pop(g.content_hash, None)

    def __len__(self) -> int:
        return len(self._groups)
