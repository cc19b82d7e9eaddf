"""The experience pool: peers' accepted rollout groups, re-scored locally, waiting to be trained on.

SAPO trains on other nodes' completions, but never on their word: a shared group enters the
pool only after `swarm.verify` rebuilt its task and re-scored every completion with this
node's own verifier (`swarm.verify.rescore`). Those local rewards are what the batch choice
and the advantages use; the sender's claimed rewards are kept only for comparison. When a
shared group is trained on, its completions are re-tokenized with this node's tokenizer
(senders may run other models), and it leaves the pool: each shared group is learned from
at most once.

Deliberately not here: any check of a group (`swarm.verify`), choosing the batch
(`swarm.batch_choice`), or computing log-probs (the trainer).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from swarm.batch_choice import Candidate
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


def group_bytes(group: SharedGroup) -> int:
    """What a pooled group holds in text, in UTF-8 bytes (its question and completions)."""
    texts = (group.task.question, *group.completions)
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)


class ExperiencePool:
    """A FIFO of shared groups waiting to be trained on, bounded in groups and in bytes of
    text (oldest evicted first, counted): accepted groups at a peer's rate limit cannot
    grow a node's memory past the budget."""

    def __init__(self, capacity: int = 4096, max_bytes: int = 64 << 20):
        self._groups: collections.OrderedDict[str, SharedGroup] = collections.OrderedDict()
        self._sizes: dict[str, int] = {}
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.evicted = 0

    def add(self, group: SharedGroup) -> None:
        size = group_bytes(group)
        self.nbytes += size - self._sizes.get(group.content_hash, 0)
        self._groups[group.content_hash] = group  # a group already here keeps its place
        self._sizes[group.content_hash] = size
        while len(self._groups) > self.capacity or (
            self.nbytes > self.max_bytes and len(self._groups) > 1
        ):
            oldest = next(iter(self._groups))
            self._drop(oldest)
            self.evicted += 1

    def _drop(self, content_hash: str) -> None:
        if self._groups.pop(content_hash, None) is not None:
            self.nbytes -= self._sizes.pop(content_hash)

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
            self._drop(g.content_hash)

    def __len__(self) -> int:
        return len(self._groups)
