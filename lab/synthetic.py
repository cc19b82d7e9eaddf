"""Synthetic rollout groups: real tasks and real rewards, completions made up, no model.

What a network-only node shares instead of a model's output, so that networking and
verification can be measured with many processes on one machine. Everything a receiver
checks is real: the task specs come from the node's task stream over a real task mix
(`swarm.tasks.sample_specs`), each task is rebuilt with reasoning-gym, and every claimed
reward is what this node's scoring gives the completion, so a peer's verifier re-scores
the group exactly as it would a model's. Only the completion texts are made up: filler of
a chosen length followed by a tagged answer that is right with probability
`correct_share` (else off by one, or untagged), so groups carry learning signal.
Token ids are random, of a chosen count, as a model's would travel.

Deterministic in (seed, round, index): two runs make the same groups, timestamps and
nonces aside.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from swarm.tasks import MixEntry, Scoring, Task, build_task, sample_specs
from swarm.wire import MAX_TEXT_CHARS, RolloutGroup, Sampling

_WORDS = (
    "so the sum is then we add carry one check the digits again first term second value "
    "total result step next consider answer because therefore compute"
).split()


@dataclass(frozen=True)
class SyntheticShape:
    """How big and how good the made-up groups are."""

    completions: int = 8  # G
    completion_chars: int = 600  # filler before the answer, per completion
    tokens_per_completion: int = 150  # random token ids travelling with each completion
    correct_share: float = 0.4  # completions whose tagged answer is right
    untagged_share: float = 0.1  # completions that give no tagged answer


@dataclass(frozen=True)
class SyntheticGroup:
    """One made-up group: its task and what the wire group needs besides identity fields."""

    task: Task
    completions: tuple[str, ...]
    rewards: tuple[float, ...]
    token_ids: tuple[tuple[int, ...], ...]


class SyntheticRollouts:
    """Makes a round's groups for one node (task stream `task_seed` over `mix`)."""

    def __init__(
        self, mix: tuple[MixEntry, ...], task_seed: int, shape: SyntheticShape, scoring: Scoring
    ):
        self.mix = mix
        self.task_seed = task_seed
        self.shape = shape
        self.scoring = scoring
        self._filler = _filler(task_seed % FILLER_VARIANTS, shape.completion_chars)

    def round_groups(self, round_index: int, count: int) -> list[SyntheticGroup]:
        """`count` groups for round `round_index`."""
        specs = sample_specs(self.mix, self.task_seed, round_index, count)
        return [self._group(build_task(spec), round_index, i) for i, spec in enumerate(specs)]

    def _group(self, task: Task, round_index: int, index: int) -> SyntheticGroup:
        rng = random.Random(f"{self.task_seed}:{round_index}:{index}")
        shape = self.shape
        texts = tuple(self._completion(task, rng) for _ in range(shape.completions))
        rewards = tuple(self.scoring.reward(task, t) for t in texts)
        token_ids = tuple(
            tuple(rng.randrange(32_000) for _ in range(shape.tokens_per_completion)) for _ in texts
        )
        return SyntheticGroup(task, texts, rewards, token_ids)

    def _completion(self, task: Task, rng: random.Random) -> str:
        start = rng.randrange(max(1, len(self._filler) - self.shape.completion_chars))
        filler = self._filler[start : start + self.shape.completion_chars]
        draw = rng.random()
        if draw < self.shape.untagged_share:
            return filler[:MAX_TEXT_CHARS]
        answer = task.answer or ""
        if draw >= self.shape.untagged_share + self.shape.correct_share:
            answer = _wrong(answer)
        return f"{filler}\n<answer>{answer}</answer>"[-MAX_TEXT_CHARS:]


FILLER_VARIANTS = 16  # texts shared by all nodes of a process (10,000 nodes, 16 texts)


@functools.lru_cache(maxsize=FILLER_VARIANTS)
def _filler(variant: int, completion_chars: int) -> str:
    """A long filler text to cut completions from (one of a few per process)."""
    rng = random.Random(f"filler:{variant}")
    text = " ".join(rng.choice(_WORDS) for _ in range(4096))
    return (text + " ") * (1 + completion_chars // max(len(text), 1))


def _wrong(answer: str) -> str:
    try:
        return str(int(answer) + 1)
    except ValueError:
        return answer + "x"


def wire_group(
    group: SyntheticGroup,
    *,
    swarm_id: str,
    sender: str,
    model: str,
    base_hash: str,
    policy_version: int,
    round_index: int,
    created_at: float,
    format_bonus: float,
) -> RolloutGroup:
    """The wire struct of a synthetic group, as `Sharing` builds a model's."""
    return RolloutGroup(
        swarm_id=swarm_id,
        sender=sender,
        task=group.task.spec,
        question=group.task.question,
        completions=group.completions,
        rewards=group.rewards,
        finished=tuple(True for _ in group.completions),
        model=model,
        base_hash=base_hash,
        policy_version=policy_version,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=512),
        round=round_index,
        created_at=created_at,
        token_ids=group.token_ids,
        format_bonus=format_bonus,
    )
