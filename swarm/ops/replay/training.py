"""Training a fresh model on verified groups offline, one update per recorded round, with the
node's own batch choice and GRPO step, and held-out accuracy before and after.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from swarm.core.errors import SwarmError
from swarm.core.reasons import Direction
from swarm.ops.replay.reading import StoredGroup


@dataclass(frozen=True)
class TrainReport:
    """A fresh model trained on stored groups: held-out accuracy before and after."""

    model: str
    groups: int
    updates: int
    skipped_updates: int
    groups_trained: int
    accuracy_before: float
    accuracy_after: float
    reward_before: float
    reward_after: float
    eval_questions: int
    seconds: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def plan_updates(
    groups: list[StoredGroup],
) -> list[tuple[int, list[StoredGroup], list[StoredGroup]]]:
    """The recorded rounds to replay, in order: (round, own candidates, shared candidates).

    A round's own candidates are the groups the node sent in it, its shared candidates the
    peers' groups it accepted in it. Groups accepted after the node's last round (its final
    drain) were never trained on, so rounds without sent groups are not replayed. A ledger
    with no sent groups at all (an observer's) replays the accepted groups as own ones.
    """
    sent_any = any(g.direction == Direction.SENT for g in groups)
    rounds: dict[int, tuple[list, list]] = {}
    for g in groups:
        own, shared = rounds.setdefault(g.local_round, ([], []))
        (own if g.direction == Direction.SENT or not sent_any else shared).append(g)
    return [(r, *rounds[r]) for r in sorted(rounds) if rounds[r][0]]


def train_samples(
    tokenizer, prompt_format, item: StoredGroup, scale_advantages: bool, max_tokens: int
):
    """Per-completion samples of one group, re-tokenized with our tokenizer (as the node does for shared groups)."""
    from swarm.policy.grpo import group_advantages
    from swarm.policy.prompts import build_prompt
    from swarm.policy.trainer import retokenized_samples

    prompt = build_prompt(tokenizer, item.rollout.question, prompt_format)
    advantages = group_advantages(item.rewards, scale_by_std=scale_advantages)
    return retokenized_samples(
        tokenizer, prompt, item.rollout.completions, item.rollout.finished, advantages, max_tokens
    )


def train_offline(
    groups: list[StoredGroup],
    config,
    passes: int = 1,
    eval_size: int | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> TrainReport:
    """Train a fresh `config.policy.model` on `groups`, one update per recorded round, and
    evaluate it before and after on the config's held-out questions.

    Each update offers the round's groups to `choose_batch` exactly as the node does
    (training.own_groups own + sharing.shared_groups shared, per_peer_cap, same seed
    scheme; no staleness bound: the replayed model is not the one that sampled them).
    """
    import torch

    from swarm.batch_choice import Candidate, choose_batch
    from swarm.config import task_mix
    from swarm.node import evaluate_policy, make_generator, trainer_settings
    from swarm.policy.model import load_policy
    from swarm.policy.trainer import GRPOTrainer
    from swarm.tasks import build_task, eval_specs, validate_mix

    if not groups:
        raise SwarmError("no verified groups to train on")
    start = time.perf_counter()
    torch.manual_seed(config.node.seed)
    policy = load_policy(config.policy.model, config.policy.device, config.policy.dtype)
    generator = make_generator(config, policy)
    trainer = GRPOTrainer(
        policy.model, policy.tokenizer.pad_token_id, trainer_settings(config, policy)
    )
    mix = validate_mix(task_mix(config))
    size = config.tasks.eval_size if eval_size is None else eval_size
    eval_tasks = [build_task(s) for s in eval_specs(mix, config.tasks.eval_seed, size)]
    if not eval_tasks:
        raise SwarmError("replay --train needs held-out questions: eval size must be at least 1")
    try:
        acc_before, reward_before = evaluate_policy(policy, generator, eval_tasks, config)
        updates = skipped = trained = 0
        max_tokens = 4 * config.generation.max_new_tokens
        for _ in range(passes):
            for round_index, own, shared in plan_updates(groups):
                batch = choose_batch(
                    [Candidate(g, g.rewards) for g in own],
                    [Candidate(g, g.rewards, sender=g.rollout.sender) for g in shared],
                    config.training.own_groups,
                    config.sharing.shared_groups,
                    seed=f"{config.node.seed}:batch:{round_index}",
                    per_peer_cap=config.sharing.per_peer_cap or None,
                )
                chosen = batch.own + batch.shared
                samples = [
                    s
                    for g in chosen
                    for s in train_samples(
                        policy.tokenizer,
                        config.policy.prompt_format(),
                        g,
                        config.training.scale_advantages,
                        max_tokens,
                    )
                ]
                result = trainer.update(samples)
                updates += 1
                skipped += int(result.skipped)
                trained += 0 if result.skipped else len(chosen)
                if progress is not None:
                    progress("train", 1)
        generator.sync_weights(policy.model)
        acc_after, reward_after = evaluate_policy(policy, generator, eval_tasks, config)
    finally:
        generator.close()
    return TrainReport(
        model=config.policy.model,
        groups=len(groups),
        updates=updates,
        skipped_updates=skipped,
        groups_trained=trained,
        accuracy_before=acc_before,
        accuracy_after=acc_after,
        reward_before=reward_before,
        reward_after=reward_after,
        eval_questions=len(eval_tasks),
        seconds=time.perf_counter() - start,
    )
