"""Peers' groups as training samples, under the chosen sharing channel (docs/SAPO.md).

Plain GRPO gives a shared completion its own group's advantage, which sums to zero over the
group: whatever all of a peer's completions share (the answer tag, the kind of answer) gets
no net push. The channels here change that, each a `[sharing]` option:

- `shared_advantage = "joint"`: the node generates G completions of its own for each shared
  task; one baseline covers the peer's and its own (`grpo.joint_advantages`), and its own
  completions are trained on too (on-policy, unshaped).
- `shared_advantage = "receiver"`: the baseline is the node's own recent mean reward on the
  task's family (`grpo.receiver_advantages`), no extra generation.
- `shared_shaping = γ`: the shared tokens' loss is LUFFY's regularised importance weight.
- `shared_normalizer = "parts"`: own and shared tokens are normalised apart, the shared part
  weighing `shared_weight` times the own part (`grpo.part_weights`); with
  `shared_weight_control = "own-signal"` each shared group weighs by its task family, less
  where the node is learning the family by itself (`batch_choice.own_signal_weights`).
- `shuffle_rewards` (no config key: an experiment's negative control, set through
  `RoundLoop.shuffle_shared_rewards`): rewards shuffled within each shared group.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from swarm.config import SharingSection
from swarm.experience import SharedGroup
from swarm.policy.generator import Completion, Generator, SamplingParams
from swarm.policy.grpo import (
    group_advantages,
    joint_advantages,
    part_weights,
    receiver_advantages,
)
from swarm.policy.prompts import PromptFormat, build_prompt
from swarm.policy.trainer import TrainSample, retokenized_samples
from swarm.tasks import Scoring


@dataclass
class SharedPart:
    """What the shared groups of one update turn into."""

    samples: list[TrainSample] = field(default_factory=list)  # peers' completions
    own_samples: list[TrainSample] = field(default_factory=list)  # joint: ours on their tasks
    advantages: list[list[float]] = field(default_factory=list)  # per group, as recorded
    families: list[str] = field(default_factory=list)  # each sample's task family
    generated: int = 0  # completions generated for the joint baseline


def own_samples(
    completions: Sequence[Completion], advantages: Sequence[float], eos: int | None
) -> list[TrainSample]:
    """Samples of our own completions; the stop token is trained where one was produced: the
    one sampled (a model may have several), `eos` only for a completion that names none."""
    return [
        TrainSample(c.prompt_ids, c.token_ids + _stop(c, eos), a, sampler_logprobs=c.logprobs)
        for c, a in zip(completions, advantages, strict=True)
    ]


def _stop(completion: Completion, eos: int | None) -> tuple[int, ...]:
    """The stop token to train after a finished completion (none for a cut one)."""
    if not completion.finished:
        return ()
    stop = completion.stop_id if completion.stop_id is not None else eos
    return () if stop is None else (stop,)


def shuffled(rewards: Sequence[float], seed: str) -> tuple[float, ...]:
    """`rewards` in an order drawn from `seed` (the negative control's reward shuffle)."""
    out = list(rewards)
    random.Random(seed).shuffle(out)
    return tuple(out)


def shared_part(
    groups: Sequence[SharedGroup],
    *,
    settings: SharingSection,
    scale_advantages: bool = True,
    tokenizer,
    prompt_format: PromptFormat,
    max_tokens: int,
    baselines: dict[str, float],
    generate=None,
    scoring: Scoring | None = None,
    seed: str = "",
    shuffle_rewards: bool = False,
) -> SharedPart:
    """Training samples for `groups` under `settings`' channel; `scale_advantages` is
    `training.scale_advantages`.

    `baselines`: the node's recent mean reward per family (for `receiver`; a family missing
    from it falls back to the group's own mean). `generate(prompts) -> completions per prompt`
    and `scoring` are needed for `joint` only. `shuffle_rewards`: the negative control, each
    group's rewards shuffled (under `seed`) before anything else.
    """
    part = SharedPart()
    prompts = [build_prompt(tokenizer, g.task.question, prompt_format) for g in groups]
    rewards = [
        shuffled(g.rewards, f"{seed}:{g.content_hash}") if shuffle_rewards else g.rewards
        for g in groups
    ]
    joint = settings.shared_advantage == "joint" and bool(groups)
    if joint and (generate is None or scoring is None):
        raise ValueError("the joint baseline needs a generator and a scoring")
    own_groups = generate(prompts) if joint else [()] * len(groups)
    eos = tokenizer.eos_token_id
    for group, prompt, group_rewards, mine in zip(
        groups, prompts, rewards, own_groups, strict=True
    ):
        if joint:
            own_rewards = [scoring.reward(group.task, c.text) for c in mine]  # type: ignore[union-attr]
            advantages, own_advantages = joint_advantages(
                group_rewards, own_rewards, scale_advantages
            )
            part.own_samples += own_samples(mine, own_advantages, eos)
            part.generated += len(mine)
        else:
            advantages = _advantages(
                group_rewards, group.family, settings, scale_advantages, baselines
            )
        part.advantages.append(advantages)
        samples = retokenized_samples(
            tokenizer, prompt, group.completions, group.finished, advantages, max_tokens
        )
        part.samples += [replace(s, shaping=settings.shared_shaping) for s in samples]
        part.families += [group.family] * len(samples)
    return part


def _advantages(
    rewards: Sequence[float],
    family: str,
    settings: SharingSection,
    scale_advantages: bool,
    baselines: dict[str, float],
) -> list[float]:
    if settings.shared_advantage == "receiver" and family in baselines:
        return receiver_advantages(rewards, baselines[family])
    return group_advantages(rewards, scale_by_std=scale_advantages)


def weighted(
    own: list[TrainSample],
    shared: list[TrainSample],
    settings: SharingSection,
    relative: Sequence[float] | None = None,
) -> list[TrainSample]:
    """`own + shared`, with the per-token weights of `shared_normalizer = "parts"`.

    Only completions that train (non-zero advantage, non-empty) count as tokens, as in the
    trainer's normaliser. `relative`: each shared sample's weight relative to the own part
    (`shared_weight_control = "own-signal"`); None: `shared_weight` for every one. The loss
    is then sum(own)/N_own + sum_i relative_i * loss_i / N_shared: own tokens keep their
    weight whatever the shared part holds.
    """
    if settings.shared_normalizer != "parts":
        return own + shared

    def tokens(samples: list[TrainSample]) -> int:
        return sum(len(s.completion_ids) for s in samples if s.advantage != 0.0)

    if relative is None:
        w_own, w_shared = part_weights(tokens(own), tokens(shared), settings.shared_weight)
        return [replace(s, weight=w_own) for s in own] + [
            replace(s, weight=w_shared) for s in shared
        ]
    w_own, unit = part_weights(tokens(own), tokens(shared), 1.0)
    return [replace(s, weight=w_own) for s in own] + [
        replace(s, weight=unit * r) for s, r in zip(shared, relative, strict=True)
    ]


def generate_for(generator: Generator, completions: int, sampling: SamplingParams):
    """A `generate(prompts)` for `shared_part`: `completions` per prompt, `sampling`'s way."""
    return lambda prompts: generator.generate(prompts, completions, sampling)
