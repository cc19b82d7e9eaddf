"""One round of the node (no global barrier; peers never wait for each other).

1. (generator role) apply what the followed trainer published since the last round;
2. draw Q task specs from this node's task stream, rebuild the tasks, generate G
   completions per question and score them with the local verifier;
3. publish the groups and receive peers' into the experience pool;
4. choose the batch (I own + J shared groups with learning signal) and apply one GRPO
   update, which bumps the policy version unless it was skipped (a generator skips this);
5. record the round and the update in the ledger in one transaction, and report it.
"""

from __future__ import annotations

import collections
import dataclasses
import time

from swarm.batch_choice import (
    BatchChoice,
    Candidate,
    SignalFilter,
    Staleness,
    choose_batch,
    family_success,
    learning_families,
    own_signal_weights,
)
from swarm.config import Config
from swarm.experience import ExperiencePool, SharedGroup
from swarm.monitor.display import Reporter, RoundReport
from swarm.node.delta_sync import DeltaSync
from swarm.node.records import Records
from swarm.node.shared_samples import SharedPart, generate_for, own_samples, shared_part, weighted
from swarm.node.sharing import Sharing
from swarm.node.state import NodeState, OwnGroup, RoundTimes
from swarm.p2p.transport import Transport
from swarm.policy.generator import Generator, SamplingParams
from swarm.policy.grpo import group_advantages
from swarm.policy.model import Policy
from swarm.policy.prompts import build_prompt
from swarm.policy.trainer import GRPOTrainer, TrainSample, UpdateResult
from swarm.tasks import Task, build_task, sample_specs


class RoundLoop:
    """Runs the node's rounds over its parts (see the module docstring)."""

    def __init__(
        self,
        *,
        config: Config,
        state: NodeState,
        mix,
        sampling: SamplingParams,
        policy: Policy,
        generator: Generator,
        trainer: GRPOTrainer | None,
        pool: ExperiencePool,
        transport: Transport,
        sharing: Sharing,
        delta_sync: DeltaSync,
        records: Records,
        reporter: Reporter,
        task_seed: int | None = None,
    ):
        # the seed of this node's task stream (`makers.task_stream_seed`)
        self.task_seed = config.task_seed if task_seed is None else task_seed
        self.config = config
        self.state = state
        self.mix = mix
        self.sampling = sampling
        self.policy = policy
        self.generator = generator
        self.trainer = trainer
        self.pool = pool
        self.transport = transport
        self.sharing = sharing
        self.delta_sync = delta_sync
        self.records = records
        self.reporter = reporter
        self.scoring = config.tasks.scoring()
        # (family, rewards) of this node's own groups over the last need_window rounds
        self._recent_own: collections.deque[list[tuple[str, tuple[float, ...]]]] = (
            collections.deque(maxlen=config.sharing.need_window)
        )
        # An experiment's negative control, no config key (lab.experiment, the 'shuf'
        # option): each shared group's rewards shuffled over its completions before training,
        # so sharing should teach nothing. Set before the first round.
        self.shuffle_shared_rewards = False
        # Families this node was learning by itself at its last update, whose shared groups
        # weighed sharing.own_signal_weight (shared_weight_control = "own-signal"; else empty).
        self.learning: frozenset[str] = frozenset()

    def run_round(self) -> RoundReport:
        times = RoundTimes()
        self.sharing.new_round()
        started = time.time()
        t0 = time.perf_counter()
        if self.delta_sync.follows:
            self.delta_sync.follow()
        groups = self.generate_groups(times)
        self.sharing.publish(groups)
        self.sharing.receive()
        times.verify = self.sharing.verify_s
        if self.trainer is None:  # generator role: nothing to train, the followed trainer does it
            batch: BatchChoice = BatchChoice(own=[], shared=[])
            shared_advantages: list[list[float]] = []
            result = UpdateResult(skipped=True, skip_reason="generator role: follows a trainer")
        else:
            batch = self._choose_batch(groups)
            own_group_samples = self._train_samples(batch.own)
            t = time.perf_counter()
            shared = self._shared_part(batch.shared)
            times.generate += time.perf_counter() - t if shared.generated else 0.0
            shared_advantages = shared.advantages
            samples = weighted(
                own_group_samples + shared.own_samples,
                shared.samples,
                self.config.sharing,
                self._relative_weights(shared.families),
            )
            t = time.perf_counter()
            result = self.trainer.update(samples)
            times.train = time.perf_counter() - t
        self.pool.take(batch.shared)
        version_before = self.state.policy_version
        if not result.skipped:
            self.state.policy_version += 1
            self.generator.sync_weights(self.policy.model)
            self.delta_sync.publish_delta()
        times.total = time.perf_counter() - t0
        report = self.records.record_round(
            groups,
            batch.own,
            result,
            version_before,
            started,
            times,
            batch.shared,
            shared_advantages,
            peers=self.transport.peers(),
            sharing=self.sharing.stats,
        )
        self.state.round += 1
        report = dataclasses.replace(report, spot_checks=self.sharing.intake.spot_checks)
        self.reporter.round(report)
        return report

    def generate_groups(self, times: RoundTimes | None = None) -> list[OwnGroup]:
        """This round's questions, G completions each, scored; `times` gets the time spent."""
        times = times if times is not None else RoundTimes()
        specs = sample_specs(
            self.mix, self.task_seed, self.state.round, self.config.generation.questions_per_round
        )
        tasks = [build_task(spec) for spec in specs]
        prompts = [
            build_prompt(self.policy.tokenizer, task.question, self.config.policy.prompt_format())
            for task in tasks
        ]
        t = time.perf_counter()
        completions = self.generator.generate(
            prompts, self.config.generation.completions_per_question, self.sampling
        )
        times.generate = time.perf_counter() - t
        t = time.perf_counter()
        groups = []
        for task, group in zip(tasks, completions, strict=True):
            rewards = tuple(self.scoring.reward(task, c.text) for c in group)
            groups.append(OwnGroup(task, group, rewards))
        times.score = time.perf_counter() - t
        return groups

    def _choose_batch(self, groups: list[OwnGroup]):
        """The round's batch (`swarm.batch_choice.choose_batch` under the training settings)."""
        t, s = self.config.training, self.config.sharing
        staleness = Staleness(
            max_version_lag=None if s.max_version_lag < 0 else s.max_version_lag,
            max_held_s=None if s.max_held_s == 0 else s.max_held_s,
        )
        own = [(g.task.spec.dataset, g.rewards) for g in groups]
        self._recent_own.append(own)
        need = None
        if s.shared_sampling == "need":
            max_reward = 1.0 + self.scoring.format_weight
            need = family_success((pair for rnd in self._recent_own for pair in rnd), max_reward)
        return choose_batch(
            [Candidate(g, g.rewards, family=f) for g, (f, _) in zip(groups, own, strict=True)],
            self.pool.candidates() if s.shared_groups else [],
            t.own_groups,
            s.shared_groups,
            seed=f"{self.config.node.seed}:batch:{self.state.round}",
            local_version=self.state.policy_version,
            now=time.time(),
            staleness=staleness,
            per_peer_cap=s.per_peer_cap or None,
            signal_filter=SignalFilter(t.signal_filter),
            fresh_rounds=s.fresh_rounds or None,
            need=need,
            need_floor=s.need_floor,
            baselines=self._family_baselines() if s.shared_advantage != "group" else None,
        )

    def _family_baselines(self) -> dict[str, float]:
        """This node's mean reward per family over its last `need_window` rounds of own groups."""
        top = 1.0 + self.scoring.format_weight  # family_success is a share of the top reward
        success = family_success((pair for rnd in self._recent_own for pair in rnd), top)
        return {f: share * top for f, share in success.items()}

    def _relative_weights(self, families: list[str]) -> list[float] | None:
        """Each shared sample's weight under `shared_weight_control = "own-signal"`, from this
        node's own groups of the last `need_window` rounds (None under "fixed")."""
        s = self.config.sharing
        if s.shared_weight_control != "own-signal":
            self.learning = frozenset()
            return None
        self.learning = learning_families(pair for rnd in self._recent_own for pair in rnd)
        return own_signal_weights(families, self.learning, s.shared_weight, s.own_signal_weight)

    def _shared_part(self, groups: list[SharedGroup]) -> SharedPart:
        """Peers' completions re-tokenized with our tokenizer, under the sharing channel
        (`swarm.node.shared_samples`); advantages from our own re-scored rewards.

        Completions longer than 4x our own generation budget are left out (`retokenized_samples`).
        """
        s = self.config.sharing
        baselines = self._family_baselines() if s.shared_advantage == "receiver" else {}
        return shared_part(
            groups,
            settings=s,
            scale_advantages=self.config.training.scale_advantages,
            tokenizer=self.policy.tokenizer,
            prompt_format=self.config.policy.prompt_format(),
            max_tokens=4 * self.config.generation.max_new_tokens,
            baselines=baselines,
            generate=generate_for(
                self.generator, self.config.generation.completions_per_question, self.sampling
            ),
            scoring=self.scoring,
            seed=f"{self.config.node.seed}:shuffle:{self.state.round}",
            shuffle_rewards=self.shuffle_shared_rewards,
        )

    def _train_samples(self, groups: list[OwnGroup]) -> list[TrainSample]:
        """Turn groups into per-completion samples; the stop token is trained when it was produced."""
        eos = self.policy.tokenizer.eos_token_id
        samples = []
        for group in groups:
            advantages = group_advantages(
                group.rewards, scale_by_std=self.config.training.scale_advantages
            )
            samples += own_samples(group.completions, advantages, eos)
        return samples


def evaluate_policy(
    policy: Policy, generator: Generator, tasks: list[Task], config: Config
) -> tuple[float, float]:
    """(accuracy, mean reward) of greedy completions on `tasks`."""
    accuracy, mean_reward, _ = evaluate_by_family(policy, generator, tasks, config)
    return accuracy, mean_reward


def evaluate_by_family(
    policy: Policy, generator: Generator, tasks: list[Task], config: Config
) -> tuple[float, float, dict[str, float]]:
    """(accuracy, mean reward, accuracy per dataset) of greedy completions on `tasks`,
    scored under the node's own rule (`tasks.answer_rule`)."""
    prompts = [
        build_prompt(policy.tokenizer, t.question, config.policy.prompt_format()) for t in tasks
    ]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=config.generation.max_new_tokens)
    outputs = generator.generate(prompts, 1, greedy)
    scoring = config.tasks.scoring()
    texts = [out[0].text for out in outputs]
    correct = [scoring.correct(t, text) for t, text in zip(tasks, texts, strict=True)]
    rewards = [scoring.reward(t, text) for t, text in zip(tasks, texts, strict=True)]
    per_family: dict[str, list[bool]] = collections.defaultdict(list)
    for t, ok in zip(tasks, correct, strict=True):
        per_family[t.spec.dataset].append(ok)
    by_family = {f: sum(oks) / len(oks) for f, oks in sorted(per_family.items())}
    return sum(correct) / len(tasks), sum(rewards) / len(tasks), by_family
