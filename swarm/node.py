"""The node daemon: wires the round loop to the policy, tasks, transport and ledger.

One round (no global barrier; peers never wait for each other):

1. draw Q task specs from this node's task stream and rebuild the tasks;
2. generate G completions per question and score them with the local verifier;
3. (with peers) publish the groups and drain the inbox into the experience pool;
4. choose the batch (I local + J shared groups with learning signal) and apply one GRPO
   update, which bumps the policy version unless it was skipped;
5. record the round and the update in the ledger in one transaction; evaluate and
   checkpoint when due.

A solo node is this same loop with a transport that has no peers. Stopping (Ctrl-C or
`request_stop`) takes effect at the next round boundary and always leaves a checkpoint.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import torch

from swarm.config import Config, task_mix
from swarm.display import EvalReport, Reporter, RoundReport, RunInfo, SilentReporter
from swarm.errors import CheckpointError, ConfigError
from swarm.ledger import EvalRow, Ledger, RoundRow, UpdateRow, get_meta, set_meta, supersede_after
from swarm.p2p.transport import MemoryTransport, Transport
from swarm.policy.checkpoint import (
    CheckpointState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from swarm.policy.generator import Completion, Generator, SamplingParams, TransformersGenerator
from swarm.policy.grpo import group_advantages
from swarm.policy.model import Policy, load_policy
from swarm.policy.prompts import build_prompt
from swarm.policy.trainer import GRPOTrainer, TrainerSettings, TrainSample, UpdateResult
from swarm.sampling import Candidate, choose_batch
from swarm.tasks import (
    Task,
    build_task,
    eval_specs,
    is_correct,
    sample_specs,
    score_completion,
    validate_mix,
)


@dataclass
class LocalGroup:
    """One question's group as this node generated and scored it."""

    task: Task
    completions: list[Completion]
    rewards: tuple[float, ...]


@dataclass
class RoundTimes:
    generate: float = 0.0
    score: float = 0.0
    train: float = 0.0
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


def make_generator(config: Config, policy: Policy) -> Generator:
    """The configured generator backend for `policy`."""
    if config.generation.backend == "vllm":
        from swarm.policy.vllm_generator import VLLMGenerator

        return VLLMGenerator(policy, gpu_memory_utilization=config.generation.gpu_memory_utilization)
    return TransformersGenerator(policy.model, policy.tokenizer, policy.stop_token_ids, config.generation.batch_size)


def trainer_settings(config: Config, policy: Policy) -> TrainerSettings:
    t = config.training
    bf16 = t.precision == "bf16" or (t.precision == "auto" and policy.device.type == "cuda")
    return TrainerSettings(
        lr=t.lr,
        weight_decay=t.weight_decay,
        clip_low=t.clip_low,
        clip_high=t.clip_high,
        kl_coef=t.kl_coef,
        max_grad_norm=t.max_grad_norm,
        micro_batch_size=t.micro_batch_size,
        epochs=t.epochs,
        autocast_bf16=bf16 and policy.dtype == torch.float32,
    )


class Node:
    """A swarm node. Build with a config (and optionally a transport and a reporter), then `run()`."""

    def __init__(self, config: Config, transport: Transport | None = None, reporter: Reporter | None = None):
        if config.node.role != "trainer":
            raise ConfigError(f"node.role = {config.node.role!r} is not available in this version; use 'trainer'")
        self.config = config
        self.reporter = reporter or SilentReporter()
        self.transport = transport or MemoryTransport(peer_id=config.node.name)
        self.mix = validate_mix(task_mix(config))
        self.sampling = SamplingParams(
            temperature=config.generation.temperature,
            top_p=config.generation.top_p,
            top_k=config.generation.top_k,
            max_new_tokens=config.generation.max_new_tokens,
        )
        self.state = NodeState()
        self._stop = threading.Event()
        self.config.run_dir.mkdir(parents=True, exist_ok=True)
        self.ledger = Ledger(config.ledger_url)
        torch.manual_seed(config.node.seed)
        self.policy = load_policy(config.policy.model, config.policy.device, config.policy.dtype)
        self.generator = make_generator(config, self.policy)
        self.trainer = GRPOTrainer(self.policy.model, self.policy.tokenizer.pad_token_id, trainer_settings(config, self.policy))
        self.eval_tasks = [build_task(s) for s in eval_specs(self.mix, config.tasks.eval_seed, config.tasks.eval_size)]
        self._resume()

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def checkpoint_dir(self):
        return self.config.run_dir / "checkpoints"

    def request_stop(self) -> None:
        """Finish the current round, checkpoint, and return from `run()`."""
        self._stop.set()

    def _resume(self) -> None:
        """Load the newest checkpoint, if any; mark ledger rounds after it as superseded."""
        path = latest_checkpoint(self.checkpoint_dir)
        with self.ledger.transaction() as session:
            model = get_meta(session, "model")
            if model is not None and model != self.config.policy.model:
                raise ConfigError(
                    f"{self.config.run_dir} belongs to a node of model {model!r}, not {self.config.policy.model!r}: "
                    "use another node.run_dir"
                )
            set_meta(session, "model", self.config.policy.model)
            set_meta(session, "node_name", self.config.node.name)
            if path is None:
                supersede_after(session, -1)
                return
            state = load_checkpoint(path, self.policy.model, self.trainer.optimizer)
            if state.model_name != self.config.policy.model:
                raise CheckpointError(f"{path} is a checkpoint of {state.model_name!r}, not {self.config.policy.model!r}")
            self.state.round, self.state.policy_version = state.round, state.policy_version
            supersede_after(session, state.round - 1)
        self.generator.sync_weights(self.policy.model)

    def run(self) -> NodeState:
        """Run rounds until `node.rounds` rounds exist in total, or until stopped."""
        target = self.config.node.rounds
        self.transport.start()
        self.reporter.start(
            RunInfo(
                name=self.config.node.name, model=self.config.policy.model, device=str(self.policy.device),
                run_dir=str(self.config.run_dir), peer_id=self.transport.peer_id,
                start_round=self.state.round, target_rounds=target,
                notes=[f"resumed from round {self.state.round}, policy v{self.state.policy_version}"] if self.state.round else [],
            )
        )
        try:
            if self.state.round == 0:
                self.evaluate()
            while not self._stop.is_set() and (target == 0 or self.state.round < target):
                self.run_round()
                if self.state.round % self.config.tasks.eval_every == 0:
                    self.evaluate()
                if self.state.round % self.config.node.checkpoint_every == 0:
                    self.checkpoint()
            if self.state.round % self.config.tasks.eval_every != 0:
                self.evaluate()
            self.checkpoint()
        finally:
            self.reporter.stop()
            self.transport.close()
        return self.state

    def close(self) -> None:
        self.generator.close()
        self.ledger.close()

    # -- one round -------------------------------------------------------------------------------

    def run_round(self) -> RoundReport:
        times = RoundTimes()
        started = time.time()
        t0 = time.perf_counter()
        groups = self._generate_groups(times)
        batch = choose_batch(
            [Candidate(g, g.rewards) for g in groups],
            [],
            self.config.training.local_groups,
            self.config.training.shared_groups,
            seed=f"{self.config.node.seed}:batch:{self.state.round}",
        )
        samples = self._train_samples(batch.local)
        t = time.perf_counter()
        result = self.trainer.update(samples)
        times.train = time.perf_counter() - t
        version_before = self.state.policy_version
        if not result.skipped:
            self.state.policy_version += 1
            self.generator.sync_weights(self.policy.model)
        times.total = time.perf_counter() - t0
        report = self._record_round(groups, batch.local, result, version_before, started, times)
        self.state.round += 1
        self.reporter.round(report)
        return report

    def _generate_groups(self, times: RoundTimes) -> list[LocalGroup]:
        specs = sample_specs(self.mix, self.config.task_seed, self.state.round, self.config.generation.questions_per_round)
        tasks = [build_task(spec) for spec in specs]
        prompts = [build_prompt(self.policy.tokenizer, task.question, self.config.policy.system_prompt) for task in tasks]
        t = time.perf_counter()
        completions = self.generator.generate(prompts, self.config.generation.completions_per_question, self.sampling)
        times.generate = time.perf_counter() - t
        t = time.perf_counter()
        groups = []
        for task, group in zip(tasks, completions, strict=True):
            rewards = tuple(score_completion(task, c.text, self.config.tasks.format_reward) for c in group)
            groups.append(LocalGroup(task, group, rewards))
        times.score = time.perf_counter() - t
        return groups

    def _train_samples(self, groups: list[LocalGroup]) -> list[TrainSample]:
        """Turn groups into per-completion samples; the stop token is trained when it was produced."""
        eos = self.policy.tokenizer.eos_token_id
        samples = []
        for group in groups:
            advantages = group_advantages(group.rewards, scale_by_std=self.config.training.scale_advantages)
            for completion, advantage in zip(group.completions, advantages, strict=True):
                ids = completion.token_ids + ((eos,) if completion.finished and eos is not None else ())
                samples.append(TrainSample(completion.prompt_ids, ids, advantage))
        return samples

    def _record_round(self, groups, trained, result: UpdateResult, version_before, started, times) -> RoundReport:
        rewards = [r for g in groups for r in g.rewards]
        completions = [c for g in groups for c in g.completions]
        correct = sum(is_correct(g.task, c.text) for g in groups for c in g.completions)
        mean_reward = sum(rewards) / max(len(rewards), 1)
        accuracy = correct / max(len(completions), 1)
        tokens = sum(len(c.token_ids) for c in completions)
        trained_rewards = [r for g in trained for r in g.rewards]
        with self.ledger.transaction() as session:
            session.add(
                RoundRow(
                    round=self.state.round, policy_version=self.state.policy_version, started_at=started,
                    questions=len(groups), completions=len(completions), mean_reward=mean_reward,
                    accuracy=accuracy, tokens_generated=tokens, generate_s=times.generate,
                    score_s=times.score, train_s=times.train, other_s=times.other, total_s=times.total,
                )
            )
            session.add(
                UpdateRow(
                    round=self.state.round, version_before=version_before,
                    version_after=self.state.policy_version, skipped=result.skipped,
                    skip_reason=result.skip_reason, local_groups=len(trained), shared_groups=0,
                    samples=len(trained_rewards), tokens=result.tokens,
                    mean_reward=sum(trained_rewards) / max(len(trained_rewards), 1), loss=result.loss,
                    grad_norm=result.grad_norm, clip_fraction=result.clip_fraction, kl=result.kl,
                    seconds=result.seconds, created_at=time.time(),
                )
            )
        self.state.rewards.append(mean_reward)
        return RoundReport(
            round=self.state.round, policy_version=self.state.policy_version, mean_reward=mean_reward,
            accuracy=accuracy, groups=len(groups), trained_groups=len(trained), shared_groups=0,
            skipped=result.skipped, loss=result.loss, generate_s=times.generate, train_s=times.train,
            total_s=times.total, tokens_generated=tokens, peers=len(self.transport.peers()),
        )

    # -- evaluation and checkpoints ----------------------------------------------------------------

    def evaluate(self) -> EvalReport | None:
        """Greedy accuracy on the fixed held-out questions; recorded in the ledger."""
        if not self.eval_tasks:
            return None
        accuracy, mean_reward = evaluate_policy(self.policy, self.generator, self.eval_tasks, self.config)
        with self.ledger.transaction() as session:
            session.add(
                EvalRow(
                    round=self.state.round, policy_version=self.state.policy_version,
                    questions=len(self.eval_tasks), accuracy=accuracy, mean_reward=mean_reward, created_at=time.time(),
                )
            )
        report = EvalReport(self.state.round, self.state.policy_version, accuracy, len(self.eval_tasks))
        self.reporter.evaluation(report)
        return report

    def checkpoint(self):
        state = CheckpointState(
            policy_version=self.state.policy_version, round=self.state.round,
            model_name=self.config.policy.model, base_hash=self.policy.base_hash,
        )
        return save_checkpoint(
            self.checkpoint_dir, self.policy.model, self.trainer.optimizer, state, keep=self.config.node.keep_checkpoints
        )


def evaluate_policy(policy: Policy, generator: Generator, tasks: list[Task], config: Config) -> tuple[float, float]:
    """(accuracy, mean reward) of greedy completions on `tasks`."""
    prompts = [build_prompt(policy.tokenizer, t.question, config.policy.system_prompt) for t in tasks]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=config.generation.max_new_tokens)
    outputs = generator.generate(prompts, 1, greedy)
    correct = [is_correct(t, out[0].text) for t, out in zip(tasks, outputs, strict=True)]
    rewards = [score_completion(t, out[0].text, config.tasks.format_reward) for t, out in zip(tasks, outputs, strict=True)]
    return sum(correct) / len(tasks), sum(rewards) / len(tasks)
