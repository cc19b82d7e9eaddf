"""The experience pool: peers' accepted rollout groups, rebuilt and re-scored locally.

SAPO trains on other nodes' completions, but never on their word: a shared group enters the
pool only after its task was rebuilt from the spec (the question text must match) and every
completion was re-scored with this node's own verifier. Those local rewards are what the
batch choice and the advantages use; the sender's claimed rewards are kept only for
comparison. When a shared group is trained on, its completions are re-tokenized with this
node's tokenizer (senders may run other models), and it leaves the pool: each shared group
is learned from at most once.

Deliberately not here: signatures and wire checks (`swarm.verify.message`), choosing the
batch (`swarm.sampling`), or computing log-probs (the trainer).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from swarm.errors import RejectedMessage, TaskError
from swarm.rollout import RolloutGroup
from swarm.sampling import Candidate
from swarm.tasks import Task, build_task, score_completion, well_formatted


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


@dataclass(frozen=True)
class Rescored:
    """A peer's group as this node's verifier sees it: the rebuilt task and per-completion scores."""

    task: Task
    correctness: tuple[float, ...]  # dataset score in [0, 1], without any format bonus
    well_formatted: tuple[bool, ...]  # whether the completion ends with its answer (earns the bonus)

    def rewards(self, format_weight: float) -> tuple[float, ...]:
        """The rewards with a given format bonus (ours for training, the sender's for its claims)."""
        return tuple(c + (format_weight if ok else 0.0) for c, ok in zip(self.correctness, self.well_formatted, strict=True))


def rescore_group(group: RolloutGroup) -> Rescored:
    """Rebuild the group's task and score its completions locally; reject what does not rebuild.

    A spec naming an unknown dataset or a config the dataset refuses is a rejection
    (`bad_task`), as is a question text other than the one the spec rebuilds.
    """
    try:
        task = build_task(group.task)
    except TaskError as e:
        raise RejectedMessage("bad_task", str(e)[:300]) from None
    if task.question != group.question:
        raise RejectedMessage("question_mismatch", "the question text is not the one the task spec rebuilds")
    correctness = tuple(score_completion(task, c, 0.0) for c in group.completions)
    formatted = tuple(well_formatted(c) for c in group.completions)
    return Rescored(task, correctness, formatted)


def rescore(group: RolloutGroup, format_weight: float) -> tuple[Task, tuple[float, ...]]:
    """The rebuilt task and the rewards this node's verifier gives the group's completions."""
    result = rescore_group(group)
    return result.task, result.rewards(format_weight)


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
            Candidate(g, g.rewards, sender=g.sender, same_model=g.same_model, policy_version=g.policy_version,
                      received_at=g.received_at)
            for g in self._groups.values()
        ]

    def take(self, groups: list[SharedGroup]) -> None:
        """Remove groups that were trained on."""
        for g in groups:
            self._groups.pop(g.content_hash, None)

    def prune(self, keep) -> int:
        """Drop groups for which `keep(group)` is false (e.g. hopelessly stale); return how many."""
        gone = [h for h, g in self._groups.items() if not keep(g)]
        for h in gone:
            del self._groups[h]
        return len(gone)

    def __len__(self) -> int:
        return len(self._groups)
