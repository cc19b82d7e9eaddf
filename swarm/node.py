"""The node daemon: wires the round loop to the policy, tasks, transport and ledger.

One round (no global barrier; peers never wait for each other):

1. draw Q task specs from this node's task stream and rebuild the tasks;
2. generate G completions per question and score them with the local verifier;
3. (with peers) publish the groups and drain the inbox into the experience pool;
4. choose the batch (I local + J shared groups with learning signal) and apply one GRPO
   update, which bumps the policy version unless it was skipped;
5. record the round and the update in the ledger in one transaction; evaluate and
   checkpoint when due.

With `sync.publish_deltas` a trainer also publishes a sparse bf16 delta after each update
(`swarm.sync`). A generator-role node (`node.role = "generator"`) has no optimizer: each
round it first applies what the trainer named in `sync.follow` published, then generates
and shares at that policy version, and skips step 4.

A solo node is this same loop with a transport that has no peers. Stopping (Ctrl-C or
`request_stop`) takes effect at the next round boundary and always leaves a checkpoint.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from swarm.config import Config, task_mix
from swarm.display import EvalReport, Reporter, RoundReport, RunInfo, SilentReporter
from swarm.errors import CheckpointError, ConfigError, RejectedMessage, TransportError
from swarm.experience import ExperiencePool, SharedGroup
from swarm.ledger import (
    DeltaRow,
    EvalRow,
    GroupRow,
    GroupUseRow,
    Ledger,
    RoundRow,
    UpdateRow,
    add_ban,
    banned_peers,
    get_meta,
    group_known,
    received_outcomes,
    recent_accepted,
    set_meta,
    supersede_after,
    touch_peer,
)
from swarm.p2p.identity import load_or_create_identity, peer_id_of, public_key_from_peer_id
from swarm.p2p.transport import InboundMessage, Transport
from swarm.policy.checkpoint import (
    CheckpointState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from swarm.policy.delta import bf16_state_dict
from swarm.policy.generator import Completion, Generator, SamplingParams, TransformersGenerator
from swarm.policy.grpo import group_advantages
from swarm.policy.model import Policy, load_policy
from swarm.policy.prompts import build_prompt
from swarm.policy.trainer import (
    GRPOTrainer,
    TrainerSettings,
    TrainSample,
    UpdateResult,
    retokenized_samples,
)
from swarm.sampling import BatchChoice, Candidate, Staleness, choose_batch
from swarm.signing import sign_group
from swarm.sync import DeltaEvent, DeltaFollower, DeltaPublisher, Expectation, TopicTap, load_into
from swarm.tasks import (
    Task,
    build_task,
    eval_specs,
    is_correct,
    sample_specs,
    score_completion,
    validate_mix,
)
from swarm.verify.gate import Verifier, VerifySettings
from swarm.verify.message import Accepted, Rejection
from swarm.verify.reasons import Direction, Reason, Status
from swarm.verify.spotcheck import SpotChecker, SpotCheckSettings
from swarm.verify.state import NONCE_MEMORY
from swarm.wire import (
    RolloutGroup,
    Sampling,
    SignedGroup,
    pack_messages,
    rollout_topic,
    stored_nonce,
)

MAX_PENDING_REJECTIONS = 10_000  # rejections noted by the validator, waiting for the ledger


@dataclass
class LocalGroup:
    """One question's group as this node generated and scored it."""

    task: Task
    completions: list[Completion]
    rewards: tuple[float, ...]
    signed: SignedGroup | None = None
    wire: RolloutGroup | None = None


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


def make_transport(config: Config, key_pair) -> Transport:
    """The libp2p transport this config describes (imported lazily: it pulls in trio and libp2p)."""
    from swarm.p2p.libp2p_transport import Libp2pTransport

    return Libp2pTransport(
        key_pair=key_pair,
        listen_addr=config.p2p.listen,
        bootstrap=list(config.p2p.bootstrap),
        psk=read_psk(config.p2p.psk_file) if config.p2p.psk_file else None,
        allow_list=list(config.p2p.allow_list) or None,
    )


def read_psk(path: str) -> str:
    """The private swarm key in `path` (64 hex characters, surrounding whitespace ignored)."""
    try:
        text = Path(path).read_text().strip()
    except OSError as e:
        raise ConfigError(f"p2p.psk_file: cannot read {path}: {e.strerror or e}") from None
    if len(text) != 64 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise ConfigError(f"p2p.psk_file: {path} must hold exactly 64 hex characters (a 32-byte key)")
    return text.lower()


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
        minibatch_size=t.minibatch_size,
        epochs=t.epochs,
        autocast_bf16=bf16 and policy.dtype == torch.float32,
    )


class Node:
    """A swarm node. Build with a config (and optionally a transport and a reporter), then `run()`."""

    def __init__(
        self,
        config: Config,
        transport: Transport | None = None,
        reporter: Reporter | None = None,
        key_pair=None,
    ):
        """`transport` defaults to libp2p as configured; `key_pair` to the run folder's identity."""
        if config.node.role not in ("trainer", "generator"):
            raise ConfigError(f"node.role = {config.node.role!r} is not available in this version; use 'trainer' or 'generator'")
        self.config = config
        self.reporter = reporter or SilentReporter()
        config.run_dir.mkdir(parents=True, exist_ok=True)
        self.key_pair = key_pair or load_or_create_identity(config.run_dir / "identity.key")
        self.peer_id = peer_id_of(self.key_pair)
        self.transport = transport or make_transport(config, self.key_pair)
        if self.transport.peer_id != self.peer_id:
            raise ConfigError("the transport's peer ID differs from the node's identity")
        self.topic = rollout_topic(config.p2p.swarm_id)
        self.sharing = SharingStats()
        self._pending_rejections: collections.deque[Rejection] = collections.deque()
        self._pending_lock = threading.Lock()
        self.pool = ExperiencePool(config.training.pool_size)  # peers' groups, re-scored, awaiting training
        self.verifier = Verifier(VerifySettings.from_config(config), own_peer_id=self.peer_id)  # every check on peers' groups
        self.mix = validate_mix(task_mix(config))
        self.sampling = SamplingParams(
            temperature=config.generation.temperature,
            top_p=config.generation.top_p,
            top_k=config.generation.top_k,
            max_new_tokens=config.generation.max_new_tokens,
        )
        self.state = NodeState()
        self._stop = threading.Event()
        self.ledger = Ledger(config.ledger_url)
        torch.manual_seed(config.node.seed)
        self.policy = load_policy(config.policy.model, config.policy.device, config.policy.dtype)
        self.generator = make_generator(config, self.policy)
        # A generator has no optimizer: the trainer it follows makes its new versions.
        self.trainer = None if config.node.role == "generator" else GRPOTrainer(
            self.policy.model, self.policy.tokenizer.pad_token_id, trainer_settings(config, self.policy)
        )
        self._spot_checks_left = config.verify.spot_check_groups_per_round
        self.spot_checker = SpotChecker(self.policy.model, self.policy.tokenizer, SpotCheckSettings(
            completions=config.verify.spot_check_completions, min_prob=config.verify.spot_check_min_prob))
        self.eval_tasks = [build_task(s) for s in eval_specs(self.mix, config.tasks.eval_seed, config.tasks.eval_size)]
        self._resume()
        self._restore_verifier_memory()
        self.publisher, self.follower = self._make_sync()

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
            state = load_checkpoint(path, self.policy.model, self.trainer.optimizer if self.trainer else None)
            if state.model_name != self.config.policy.model:
                raise CheckpointError(f"{path} is a checkpoint of {state.model_name!r}, not {self.config.policy.model!r}")
            self.state.round, self.state.policy_version = state.round, state.policy_version
            supersede_after(session, state.round - 1)
        self.generator.sync_weights(self.policy.model)

    def _restore_verifier_memory(self) -> None:
        """Feed the verifier what the ledger remembers: peers' reputations, and the groups
        accepted within its age limit (their nonces and versions), oldest first."""
        max_age = self.config.verify.max_age_s
        since = time.time() - max_age if max_age > 0 else 0.0
        with self.ledger.reader() as session:
            rows = recent_accepted(session, since, NONCE_MEMORY)
            self.verifier.restore_reputation(received_outcomes(session))
        for body, sender, content_hash, policy_version, recorded_at in rows:
            try:
                nonce = stored_nonce(body)
            except RejectedMessage:
                continue  # cannot happen to a body this node stored; never worth failing a start
            self.verifier.remember(sender, nonce, content_hash, policy_version, recorded_at)

    def run(self) -> NodeState:
        """Run rounds until `node.rounds` rounds exist in total, or until stopped."""
        target = self.config.node.rounds
        self.transport.start()
        self.transport.subscribe(self.topic, self._validate)
        self._start_sync()
        self._write_node_info()
        self.reporter.start(
            RunInfo(
                name=self.config.node.name, model=self.config.policy.model, device=str(self.policy.device),
                run_dir=str(self.config.run_dir), peer_id=self.peer_id,
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
            self._final_drain()
            if self.state.round % self.config.tasks.eval_every != 0:
                self.evaluate()
            self.checkpoint()
        finally:
            self.reporter.stop()
            self.transport.close()
        return self.state

    def close(self) -> None:
        if self.publisher is not None:
            self._record_deltas(self.publisher.served_events())  # fetches since the last update
        self.generator.close()
        self.ledger.close()

    def _write_node_info(self) -> None:
        """node.json in the run folder: how other nodes (and `swarm-node demo`) reach this one."""
        import os

        info = {"peer_id": self.peer_id, "addrs": self.transport.listen_addrs(), "pid": os.getpid(), "name": self.config.node.name}
        path = self.config.run_dir / "node.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(info, indent=2))
        os.replace(tmp, path)

    # -- sharing ------------------------------------------------------------------------------------

    def _validate(self, message: InboundMessage) -> str | None:
        """Gossip validator (runs on the transport's thread): cheap checks, rejections noted."""
        _, rejected = self.verifier.admit(message.data, message.source)
        if not rejected:
            return None
        with self._pending_lock:
            room = MAX_PENDING_REJECTIONS - len(self._pending_rejections)
            self._pending_rejections.extend(rejected[: max(room, 0)])
            self.sharing.rejections_dropped += max(0, len(rejected) - max(room, 0))
        return rejected[0].reason

    def _publish(self, groups: list[LocalGroup]) -> None:
        """Sign this round's groups and publish them in batches; failures are counted, not fatal."""
        for group in groups:
            group.wire = self._wire_group(group)
            group.signed = sign_group(group.wire, self.key_pair)
            self.verifier.note_own(group.wire)  # a peer re-signing it is then a copycat
        for message in pack_messages([g.signed for g in groups]):
            try:
                self.transport.publish(self.topic, message)
            except TransportError as e:
                self.sharing.publish_failures += 1
                self.reporter.message(f"publish failed: {e}")
        self.sharing.published_groups += len(groups)

    def _wire_group(self, group: LocalGroup) -> RolloutGroup:
        return RolloutGroup(
            swarm_id=self.config.p2p.swarm_id,
            sender=self.peer_id,
            task=group.task.spec,
            question=group.task.question,
            completions=tuple(c.text for c in group.completions),
            rewards=tuple(group.rewards),
            finished=tuple(c.finished for c in group.completions),
            model=self.config.policy.model,
            base_hash=self.policy.base_hash,
            policy_version=self.state.policy_version,
            sampling=Sampling(
                temperature=float(self.sampling.temperature), top_p=float(self.sampling.top_p),
                top_k=int(self.sampling.top_k), max_new_tokens=int(self.sampling.max_new_tokens),
            ),
            round=self.state.round,
            created_at=time.time(),
            token_ids=tuple(tuple(c.token_ids) for c in group.completions),
            format_bonus=float(self.config.tasks.format_reward),
        )

    def _final_drain(self, wait_s: float = 1.0) -> None:
        """Record what peers sent during the last round, so nothing received goes unrecorded."""
        if self.transport.peers():
            time.sleep(wait_s)  # messages of the last round may still be in flight
        accepted, rejected = self._drain_inbox()
        if accepted or rejected:
            with self.ledger.transaction() as session:
                self._store_received(session, accepted, rejected)

    def _drain_inbox(self) -> tuple[list[Accepted], list[Rejection]]:
        """Everything received since the last round: accepted groups and all noted rejections."""
        accepted: list[Accepted] = []
        rejected: list[Rejection] = []
        with self.ledger.reader() as session:  # bans set or lifted by `swarm-node ban/unban`
            self.verifier.set_bans(banned_peers(session))
        for message in self.transport.receive():
            ok, bad = self.verifier.recheck(message.data, message.source)
            accepted += ok
            rejected += bad  # normally empty: the validator already refused such messages
        with self._pending_lock:
            rejected += list(self._pending_rejections)
            self._pending_rejections.clear()
        return accepted, rejected

    def _store_received(self, session, accepted: list[Accepted], rejected: list[Rejection]) -> list[Accepted]:
        """Record received groups in the ledger and pool the good ones; return the new accepted ones.

        A group that passed the cheap checks gets the expensive ones here (copycat, task
        rebuild, question, every claimed reward); a failing one is rejected like any other.
        Outcomes feed the peers' reputation; a peer it condemns is banned in the ledger.
        """
        now = time.time()
        fresh, seen = [], set()
        for item in accepted:
            digest = item.signed.content_hash
            if digest in seen or group_known(session, digest):
                rejected.append(Rejection(Reason.DUPLICATE, "already received", item.source, digest, item.group.sender, item.signed, item.group))
                continue
            seen.add(digest)
            try:
                task, rewards = self.verifier.verify_content(item.group, self.config.tasks.format_reward)
                self._spot_check(item)
            except RejectedMessage as e:
                rejected.append(Rejection(e.reason, e.detail, item.source, digest, item.group.sender, item.signed, item.group))
                continue
            touch_peer(session, item.group.sender, now, model=item.group.model)
            row = self._group_row(item.signed, item.group, Direction.RECEIVED, Status.ACCEPTED, source=item.source)
            session.add(row)
            session.flush()  # assigns row.id, which records of its later use refer to
            self.pool.add(self._shared_group(row.id, item, task, rewards, now))
            fresh.append(item)
        for r in rejected:
            if r.sender:
                touch_peer(session, r.sender, now)
            session.add(
                self._group_row(r.signed, r.group, Direction.RECEIVED, Status.REJECTED, source=r.source, reason=r.reason,
                                detail=r.detail[:500], content_hash=r.content_hash, sender=r.sender)
            )
        for peer, reason in self.verifier.record(fresh, rejected):
            add_ban(session, peer, "auto", reason, now)
            self.reporter.message(f"banned {peer}: {reason}")
        self.sharing.received_groups += len(accepted) + len([r for r in rejected if r.reason != Reason.DUPLICATE])
        self.sharing.accepted_groups += len(fresh)
        self.sharing.rejected_groups += len([r for r in rejected if r.reason != Reason.DUPLICATE])
        self.sharing.duplicates += len([r for r in rejected if r.reason == Reason.DUPLICATE])
        return fresh

    def _spot_check(self, item: Accepted) -> None:
        """Re-score a sample of the group's tokens if it claims our exact model and version.

        At most `verify.spot_check_groups_per_round` groups a round: each costs a forward pass.
        """
        group = item.group
        if self._spot_checks_left <= 0 or (group.model, group.base_hash, group.policy_version) != (
            self.config.policy.model, self.policy.base_hash, self.state.policy_version
        ):
            return
        self._spot_checks_left -= 1
        prompt = build_prompt(self.policy.tokenizer, group.question, self.config.policy.system_prompt)
        self.spot_checker.check(group, item.signed.content_hash, prompt)

    def _shared_group(self, row_id: int, item: Accepted, task: Task, rewards, received_at: float) -> SharedGroup:
        group = item.group
        same_model = group.model == self.config.policy.model and group.base_hash == self.policy.base_hash
        return SharedGroup(
            row_id=row_id, content_hash=item.signed.content_hash, sender=group.sender, task=task,
            completions=group.completions, finished=group.finished, rewards=rewards,
            claimed_rewards=group.rewards, policy_version=group.policy_version, same_model=same_model,
            received_at=received_at,
        )

    def _group_row(self, signed, group, direction, status, source="", reason="", detail="", content_hash="", sender=""):
        row = GroupRow(
            content_hash=content_hash or signed.content_hash, direction=direction, status=status, reason=reason,
            detail=detail, sender=sender or (group.sender if group else ""), source=source,
            recorded_at=time.time(), local_round=self.state.round,
            body=signed.body if signed else None, signature=signed.signature if signed else None,
        )
        if group is not None:
            row.swarm_id, row.dataset, row.model = group.swarm_id, group.task.dataset, group.model
            row.task = json.dumps(group.task.as_dict(), sort_keys=True)
            row.policy_version, row.round, row.created_at = group.policy_version, group.round, group.created_at
            row.completions = len(group.completions)
            row.mean_reward = sum(group.rewards) / len(group.rewards)
        return row

    # -- following and publishing weight deltas ------------------------------------------

    def _make_sync(self) -> tuple[DeltaPublisher | None, DeltaFollower | None]:
        """The trainer's delta publisher (with sync.publish_deltas) or the generator's follower."""
        sync = self.config.sync
        if self.config.node.role == "generator":
            try:
                public_key_from_peer_id(sync.follow)
            except TransportError:
                raise ConfigError(f"sync.follow = {sync.follow!r} is not an Ed25519 peer ID") from None
            if sync.follow == self.peer_id:
                raise ConfigError("sync.follow names this node itself; give the peer ID of a trainer")
            if self.policy.dtype == torch.float16:  # bf16 values do not all fit in fp16
                raise ConfigError("a generator holds the trainer's bf16 weights exactly only with policy.dtype float32 or bfloat16")
            expect = Expectation(
                provider=sync.follow, swarm_id=self.config.p2p.swarm_id, model=self.config.policy.model,
                base_hash=self.policy.base_hash, max_bytes=sync.max_blob_mb * 1024 * 1024,
            )
            follower = DeltaFollower(
                self.transport, expect, bf16_state_dict(self.policy.model), self.state.policy_version,
                fetch_timeout=sync.fetch_timeout_s,
            )
            # Delta manifests go to the follower, never into the rollout inbox.
            self.transport = TopicTap(self.transport, follower.topic, follower.offer)
            return None, follower
        if sync.publish_deltas:
            publisher = DeltaPublisher(
                self.transport, self.key_pair, peer_id=self.peer_id, swarm_id=self.config.p2p.swarm_id,
                model=self.config.policy.model, base_hash=self.policy.base_hash, anchor_every=sync.anchor_every,
                keep_deltas=sync.keep_deltas, level=sync.zstd_level,
            )
            # The reference of the first delta. A resumed trainer's anchor is served (and listed
            # in the index followers read first) even though gossip cannot carry it yet.
            self._record_deltas(publisher.start(bf16_state_dict(self.policy.model), self.state.policy_version))
            return publisher, None
        return None, None

    def _start_sync(self) -> None:
        """Once the transport runs: a follower listens for its trainer's manifests."""
        if self.follower is not None:
            self.transport.subscribe(self.follower.topic, self.follower.validator)

    def _publish_delta(self) -> None:
        """Trainer: announce the bf16 change of this update to followers."""
        if self.publisher is not None:
            events = self.publisher.publish(bf16_state_dict(self.policy.model), self.state.policy_version)
            self._record_deltas(events + self.publisher.served_events())

    def _follow(self) -> None:
        """Generator: apply what the followed trainer published since the last round."""
        self.transport.pump()  # manifests that arrived since the last drain
        result = self.follower.sync()
        if result.changed:
            load_into(self.policy.model, self.follower.weights, result.changed)
            self.generator.update_weights(self.policy.model, result.changed)
        self.state.policy_version = result.version
        self._record_deltas(result.events)

    def _record_deltas(self, events: list[DeltaEvent]) -> None:
        if not events:
            return
        now = time.time()
        with self.ledger.transaction() as session:
            for e in events:
                session.add(
                    DeltaRow(
                        direction=e.direction, peer=e.peer, kind=e.kind, from_version=e.from_version,
                        to_version=e.to_version, bytes=e.nbytes, seconds=e.seconds, status=e.status,
                        reason=e.reason, recorded_at=now,
                    )
                )
        for e in events:
            if e.status == Status.REJECTED:
                self.reporter.message(f"{e.kind} v{e.from_version}->v{e.to_version} from {e.peer[:16]} rejected: {e.reason}: {e.detail[:200]}")

    # -- one round -------------------------------------------------------------------------------

    def run_round(self) -> RoundReport:
        times = RoundTimes()
        self._spot_checks_left = self.config.verify.spot_check_groups_per_round
        started = time.time()
        t0 = time.perf_counter()
        if self.follower is not None:
            self._follow()
        groups = self._generate_groups(times)
        self._publish(groups)
        accepted, rejected = self._drain_inbox()
        if accepted or rejected:
            with self.ledger.transaction() as session:
                self._store_received(session, accepted, rejected)
        if self.trainer is None:  # generator role: nothing to train, the followed trainer does it
            batch, shared_advantages = BatchChoice(local=[], shared=[]), []
            result = UpdateResult(skipped=True, skip_reason="generator role: follows a trainer")
        else:
            batch = self._choose_batch(groups)
            local_samples = self._train_samples(batch.local)
            shared_samples, shared_advantages = self._shared_samples(batch.shared)
            t = time.perf_counter()
            result = self.trainer.update(local_samples + shared_samples)
            times.train = time.perf_counter() - t
        self.pool.take(batch.shared)
        version_before = self.state.policy_version
        if not result.skipped:
            self.state.policy_version += 1
            self.generator.sync_weights(self.policy.model)
            self._publish_delta()
        times.total = time.perf_counter() - t0
        report = self._record_round(groups, batch.local, result, version_before, started, times, batch.shared, shared_advantages)
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

    def _choose_batch(self, groups: list[LocalGroup]):
        t = self.config.training
        staleness = Staleness(
            max_version_gap=None if t.max_version_gap < 0 else t.max_version_gap,
            max_age_s=None if t.max_age_s == 0 else t.max_age_s,
        )
        return choose_batch(
            [Candidate(g, g.rewards) for g in groups],
            self.pool.candidates() if t.shared_groups else [],
            t.local_groups,
            t.shared_groups,
            seed=f"{self.config.node.seed}:batch:{self.state.round}",
            local_version=self.state.policy_version,
            now=time.time(),
            staleness=staleness,
            per_peer_cap=t.per_peer_cap or None,
        )

    def _shared_samples(self, groups: list[SharedGroup]) -> tuple[list[TrainSample], list[list[float]]]:
        """Re-tokenize peers' completions with our tokenizer; advantages from our own rewards.

        Completions longer than 4x our own generation budget are left out (`retokenized_samples`).
        """
        tok = self.policy.tokenizer
        limit = 4 * self.config.generation.max_new_tokens
        samples, advantages_per_group = [], []
        for group in groups:
            prompt = build_prompt(tok, group.task.question, self.config.policy.system_prompt)
            advantages = group_advantages(group.rewards, scale_by_std=self.config.training.scale_advantages)
            advantages_per_group.append(advantages)
            samples += retokenized_samples(tok, prompt, group.completions, group.finished, advantages, limit)
        return samples, advantages_per_group

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

    def _record_round(
        self, groups, trained, result: UpdateResult, version_before, started, times, shared=(), shared_advantages=()
    ) -> RoundReport:
        rewards = [r for g in groups for r in g.rewards]
        completions = [c for g in groups for c in g.completions]
        correct = sum(is_correct(g.task, c.text) for g in groups for c in g.completions)
        mean_reward = sum(rewards) / max(len(rewards), 1)
        accuracy = correct / max(len(completions), 1)
        tokens = sum(len(c.token_ids) for c in completions)
        trained_rewards = [r for g in list(trained) + list(shared) for r in g.rewards]
        with self.ledger.transaction() as session:
            for group, advantages in zip(shared, shared_advantages, strict=True):
                session.add(
                    GroupUseRow(
                        group_id=group.row_id, content_hash=group.content_hash, sender=group.sender,
                        round=self.state.round, version_after=self.state.policy_version, skipped_update=result.skipped,
                        advantages=json.dumps([round(a, 6) for a in advantages]),
                        advantage_abs_sum=sum(abs(a) for a in advantages),
                        mean_reward=sum(group.rewards) / len(group.rewards),
                    )
                )
            for peer in self.transport.peers():  # connected peers and where they are reachable
                touch_peer(session, peer.peer_id, time.time(), addrs=json.dumps(list(peer.addrs)))
            for g in groups:
                session.add(self._group_row(g.signed, g.wire, Direction.SENT, Status.SENT))
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
                    skip_reason=result.skip_reason, local_groups=len(trained), shared_groups=len(shared),
                    samples=len(trained_rewards), tokens=result.tokens,
                    mean_reward=sum(trained_rewards) / max(len(trained_rewards), 1), loss=result.loss,
                    grad_norm=result.grad_norm, clip_fraction=result.clip_fraction, kl=result.kl,
                    seconds=result.seconds, created_at=time.time(),
                )
            )
        self.state.rewards.append(mean_reward)
        return RoundReport(
            round=self.state.round, policy_version=self.state.policy_version, mean_reward=mean_reward,
            accuracy=accuracy, groups=len(groups), trained_groups=len(trained), shared_groups=len(shared),
            skipped=result.skipped, loss=result.loss, generate_s=times.generate, train_s=times.train,
            total_s=times.total, tokens_generated=tokens, peers=len(self.transport.peers()),
            received=self.sharing.received_groups, accepted=self.sharing.accepted_groups,
            rejected=self.sharing.rejected_groups, optimizer_steps=result.steps,
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
            self.checkpoint_dir, self.policy.model, self.trainer.optimizer if self.trainer else None, state,
            keep=self.config.node.keep_checkpoints,
        )


def evaluate_policy(policy: Policy, generator: Generator, tasks: list[Task], config: Config) -> tuple[float, float]:
    """(accuracy, mean reward) of greedy completions on `tasks`."""
    prompts = [build_prompt(policy.tokenizer, t.question, config.policy.system_prompt) for t in tasks]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=config.generation.max_new_tokens)
    outputs = generator.generate(prompts, 1, greedy)
    correct = [is_correct(t, out[0].text) for t, out in zip(tasks, outputs, strict=True)]
    rewards = [score_completion(t, out[0].text, config.tasks.format_reward) for t, out in zip(tasks, outputs, strict=True)]
    return sum(correct) / len(tasks), sum(rewards) / len(tasks)
