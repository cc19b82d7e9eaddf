"""`swarm-node replay`: re-verify a ledger's stored rollout groups offline, export or train on them.

A ledger stores every group a node sent and every group it received, as the exact signed
bytes. Replay trusts none of the ledger's own columns: for each stored group it checks the
body against its recorded content hash, decodes it and checks the Ed25519 signature of its
sender (`swarm.wire.signing.verify_signed`), optionally the swarm id, rebuilds the task from
its spec and re-scores every completion (in the verification worker, within `verify`'s
deadline and memory limit, as a live node does), and compares those rewards with the ones
the sender claimed (`swarm.verify.rules.check_rewards`, with the format bonus the sender
declared). No network, no run folder: a ledger copied from another machine is enough.

What passes can be exported (one JSON line per completion: the prompt formatted for
`policy.model`, the completion, ground truth, reward and advantage, flat columns that
`datasets` and TRL read as they are) or used to train a fresh model
with the node's own GRPO path: one update per recorded round, its batch chosen from that
round's sent (own) and accepted (shared) groups by `swarm.batch_choice.choose_batch` with the
config's I, J and per-peer cap (groups without learning signal dropped), advantages from the
locally re-scored rewards, completions re-tokenized with the model's own tokenizer, and
`swarm.policy.trainer.GRPOTrainer` for the step. Replaying a node's own ledger with its own
config and base model thus retraces its training, offline.

Deliberately not here: the node's round loop, or deciding whether a peer is trustworthy.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sqlalchemy import select

from swarm.core.errors import RejectedMessage, SwarmError
from swarm.core.reasons import Direction, Reason, Status
from swarm.ledger import GroupRow, Ledger
from swarm.tasks import Task
from swarm.verify.rescore_pool import InProcess, Rescorer
from swarm.verify.rules import check_rewards
from swarm.wire import RolloutGroup, SignedGroup
from swarm.wire.signing import verify_signed

REWARD_TOLERANCE = 1e-6
TRAINABLE_STATUSES = (Status.SENT, Status.ACCEPTED)  # our own groups and peers' groups we accepted
WITHOUT_BYTES = (Reason.BODY_PRUNED, Reason.NEVER_STORED)  # rows that cannot be re-verified
RETENTION_KEYS = "ledger.keep_bodies_days, ledger.max_mb"  # what drops accepted groups' bytes


@dataclass(frozen=True)
class StoredGroup:
    """A ledger row's group after offline verification (`reason` is "" when it passed)."""

    row_id: int
    direction: str
    status: str
    content_hash: str
    reason: Reason | Literal[""]
    local_round: int = -1  # the recording node's round when it stored the group
    detail: str = ""
    group: RolloutGroup | None = None
    task: Task | None = None
    rewards: tuple[float, ...] = ()  # re-scored here

    @property
    def passed(self) -> bool:
        return not self.reason

    @property
    def without_bytes(self) -> bool:
        """The ledger holds no bytes of it (pruned, or never stored): nothing to re-verify."""
        return self.reason in WITHOUT_BYTES

    @property
    def rollout(self) -> RolloutGroup:
        """The verified group (only a group that passed has one)."""
        if self.group is None:
            raise SwarmError(
                f"group {self.content_hash[:12]} did not pass verification: {self.reason}"
            )
        return self.group


@dataclass
class VerifyReport:
    """What offline verification found, by the row's recorded status and by failure reason.

    Every row passes, fails (`failed_by_reason`), or has no bytes to check
    (`without_bytes`: `body_pruned` for a sent or accepted group whose bytes retention
    dropped, `never_stored` for a rejected one refused before its bytes were fetched or
    decoded); `total` is their sum."""

    total: int = 0
    passed: int = 0
    failed_by_reason: Counter = field(default_factory=Counter)
    without_bytes: Counter = field(default_factory=Counter)
    by_status: dict[str, dict[str, int]] = field(
        default_factory=dict
    )  # status -> {"passed": n, "failed": n, "without_bytes": n}
    trainable_lost: Counter = field(default_factory=Counter)  # why sent/accepted rows did not pass
    trainable: int = 0  # passed, sent or accepted, distinct content

    @property
    def failed(self) -> int:
        return sum(self.failed_by_reason.values())

    def add(self, item: StoredGroup) -> None:
        """Count one row's outcome."""
        self.total += 1
        counts = self.by_status.setdefault(
            item.status, {"passed": 0, "failed": 0, "without_bytes": 0}
        )
        if item.passed:
            self.passed += 1
            counts["passed"] += 1
            return
        if item.without_bytes:
            self.without_bytes[item.reason] += 1
            counts["without_bytes"] += 1
        else:
            self.failed_by_reason[item.reason] += 1
            counts["failed"] += 1
        if item.status in TRAINABLE_STATUSES:
            self.trainable_lost[item.reason] += 1

    def summary(self) -> str:
        """One line: passed, failed (by reason), and the rows without bytes, told apart."""
        failed = ", ".join(f"{r} {n}" for r, n in self.failed_by_reason.most_common()) or "none"
        line = f"{self.total} stored groups: {self.passed} pass, {self.failed} fail ({failed})"
        pruned, never = (self.without_bytes[r] for r in WITHOUT_BYTES)
        if pruned or never:
            line += f"; {pruned + never} without bytes to check: "
            line += "; ".join(
                text
                for n, text in (
                    (
                        pruned,
                        f"{pruned} sent or accepted whose bytes were pruned ({RETENTION_KEYS})",
                    ),
                    (never, f"{never} rejected before their bytes were fetched or decoded"),
                )
                if n
            )
        return f"{line}; {self.trainable} distinct sent or accepted groups verified"

    def as_dict(self) -> dict:
        return {
            "total": self.total,
            "passed": self.passed,
            "failed": self.failed,
            "failed_by_reason": dict(self.failed_by_reason),
            "without_bytes": dict(self.without_bytes),
            "by_status": self.by_status,
            "trainable": self.trainable,
        }


def empty_export_reason(report: VerifyReport, swarm_id: str | None = None) -> str:
    """Why no group can be exported (or trained on), in one clause; "" when one can."""
    if report.trainable:
        return ""
    if report.total == 0:
        return "the ledger holds no rollout groups"
    kept = sum(sum(report.by_status.get(s, {}).values()) for s in TRAINABLE_STATUSES)
    if kept == 0:
        return (
            f"its {report.total} stored groups are all rejected ones, and only groups this "
            "node sent or accepted are exported"
        )
    lost = Counter(report.trainable_lost)
    pruned = lost.pop(Reason.BODY_PRUNED, 0)
    parts = [f"{pruned} had their bytes pruned ({RETENTION_KEYS})"] if pruned else []
    if lost:
        reasons = ", ".join(f"{r} {n}" for r, n in lost.most_common())
        parts.append(f"{sum(lost.values())} failed verification ({reasons})")
    if swarm_id is not None and lost.get(Reason.WRONG_SWARM):
        parts[-1] += f"; --swarm-id {swarm_id} keeps only that swarm's groups"
    return f"none of its {kept} sent or accepted groups passed: {'; '.join(parts)}"


def verify_row(
    row: GroupRow,
    format_weight: float,
    swarm_id: str | None = None,
    tolerance: float = REWARD_TOLERANCE,
    rescorer: Rescorer | None = None,
) -> StoredGroup:
    """Re-verify one stored group from its bytes alone. Never raises for bad data.

    `rescorer` rebuilds the task and re-scores the completions: a `RescoreWorker` bounds that
    in time and memory as a live node does (a stored group may be a peer's costly task),
    `None` re-scores in this thread with no bound.

    The claimed rewards are checked with the sender's declared format bonus (as a live node
    checks them); the rewards kept for training use `format_weight`, this node's own bonus.
    """

    def stored(reason: Reason | Literal[""], detail: str = "", **verified) -> StoredGroup:
        return StoredGroup(
            row_id=row.id,
            direction=row.direction,
            status=row.status,
            content_hash=row.content_hash,
            local_round=row.local_round,
            reason=reason,
            detail=detail,
            **verified,
        )

    if row.body is None or row.signature is None:
        if row.status == Status.REJECTED:  # the node kept only what it knew when it refused it
            detail = f"refused ({row.reason}) before its bytes were fetched or decoded"
            return stored(Reason.NEVER_STORED, detail)
        detail = f"its bytes were pruned by the ledger's retention ({RETENTION_KEYS})"
        return stored(Reason.BODY_PRUNED, detail)
    signed = SignedGroup(bytes(row.body), bytes(row.signature))
    if signed.content_hash != row.content_hash:
        detail = "body does not hash to the recorded content hash"
        return stored(Reason.HASH_MISMATCH, detail)
    try:
        group = verify_signed(signed)
        if swarm_id is not None and group.swarm_id != swarm_id:
            raise RejectedMessage(
                Reason.WRONG_SWARM, f"group is for swarm {group.swarm_id!r}, not {swarm_id!r}"
            )
        rescored = (rescorer or InProcess())(group).result()
        check_rewards(group.rewards, rescored.rewards(group.format_bonus), tolerance)
    except RejectedMessage as e:
        return stored(e.reason, e.detail)
    return stored("", group=group, task=rescored.task, rewards=rescored.rewards(format_weight))


def iter_rows(url: str, batch: int = 500) -> Iterator[GroupRow]:
    """Every stored group row, in the order it was recorded (read in batches)."""
    ledger = Ledger(url, create=False)
    try:
        last = 0
        while True:
            with ledger.reader() as session:
                rows = list(
                    session.scalars(
                        select(GroupRow)
                        .where(GroupRow.id > last)
                        .order_by(GroupRow.id)
                        .limit(batch)
                    )
                )
            if not rows:
                return
            yield from rows
            last = rows[-1].id
    finally:
        ledger.close()


def count_rows(url: str) -> int:
    from sqlalchemy import func

    ledger = Ledger(url, create=False)
    try:
        with ledger.reader() as session:
            return session.scalar(select(func.count()).select_from(GroupRow)) or 0
    finally:
        ledger.close()


def verify_ledger(
    url: str,
    format_weight: float,
    swarm_id: str | None = None,
    progress: Callable[[int], None] | None = None,
    rescorer: Rescorer | None = None,
) -> tuple[VerifyReport, list[StoredGroup]]:
    """Verify every stored group; return the report and the trainable groups (passed, sent or
    accepted, deduplicated). `rescorer`: as in `verify_row`."""
    report, trainable, seen = VerifyReport(), [], set()
    for row in iter_rows(url):
        item = verify_row(row, format_weight, swarm_id, rescorer=rescorer)
        report.add(item)
        if item.passed and item.status in TRAINABLE_STATUSES and item.content_hash not in seen:
            seen.add(item.content_hash)
            trainable.append(item)
        if progress is not None:
            progress(1)
    report.trainable = len(trainable)
    return report, trainable


# ---------------------------------------------------------------------------------------------
# Export


def export_records(
    groups: list[StoredGroup], format_prompt: Callable[[str], str], scale_advantages: bool = True
) -> Iterator[dict]:
    """One flat record per completion of each verified group, ready for a training library:
    `prompt` (the question as `format_prompt` formats it for a model) and `completion`,
    `ground_truth`, the re-scored `reward` and the group-relative `advantage`, then where
    the completion came from. Flat columns of one type each, so `datasets.load_dataset("json")`
    reads a file of several datasets' groups; the task config is a JSON string."""
    from swarm.policy.grpo import group_advantages

    for item in groups:
        g = item.rollout
        prompt = format_prompt(g.question)
        advantages = group_advantages(item.rewards, scale_by_std=scale_advantages)
        for i, completion in enumerate(g.completions):
            yield {
                "prompt": prompt,
                "completion": completion,
                "question": g.question,
                "ground_truth": item.task.answer if item.task is not None else None,
                "reward": item.rewards[i],
                "advantage": advantages[i],
                "claimed_reward": g.rewards[i],
                "dataset": g.task.dataset,
                "task_config": g.task.config_json,
                "task_seed": g.task.seed,
                "task_index": g.task.index,
                "completion_index": i,
                "finished": g.finished[i],
                "content_hash": item.content_hash,
                "direction": item.direction,
                "sender": g.sender,
                "swarm_id": g.swarm_id,
                "model": g.model,
                "policy_version": g.policy_version,
                "round": g.round,
                "created_at": g.created_at,
            }


def write_jsonl(
    path: Path,
    groups: list[StoredGroup],
    format_prompt: Callable[[str], str],
    scale_advantages: bool = True,
) -> int:
    """Write the export atomically (temporary file, then rename); return the number of records."""
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    try:
        with tmp.open("w") as f:
            for record in export_records(groups, format_prompt, scale_advantages):
                f.write(json.dumps(record, sort_keys=True) + "\n")
                count += 1
        tmp.replace(path)
    except OSError as e:
        raise SwarmError(f"cannot write {path}: {e.strerror or e}") from None
    return count


def prompt_formatter(config) -> Callable[[str], str]:
    """How `config.policy.model` is prompted with a question (its chat template, the
    config's system prompt), as the node formats its own prompts."""
    from swarm.policy.model import load_tokenizer, resolve_model_path
    from swarm.policy.prompts import build_prompt

    tokenizer = load_tokenizer(resolve_model_path(config.policy.model))
    return lambda question: build_prompt(tokenizer, question, config.policy.system_prompt)


# ---------------------------------------------------------------------------------------------
# Offline training


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
    tokenizer, system_prompt: str, item: StoredGroup, scale_advantages: bool, max_tokens: int
):
    """Per-completion samples of one group, re-tokenized with our tokenizer (as the node does for shared groups)."""
    from swarm.policy.grpo import group_advantages
    from swarm.policy.prompts import build_prompt
    from swarm.policy.trainer import retokenized_samples

    prompt = build_prompt(tokenizer, item.rollout.question, system_prompt)
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
                        config.policy.system_prompt,
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
