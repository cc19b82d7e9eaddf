"""The node's ledger rows and round report, built from plain data (pure: no ledger, no clock
but the `recorded_at`/`created_at` stamps).

`round_metrics` says what a round's groups and training batch amount to; `round_row`,
`update_row`, `use_row` and `round_report` turn them, with the update's result, into the
rows and the report; `group_row` is a group's row, sent or received (accepted or rejected).
`Records` (`swarm.node.records`) adds them to the ledger, one transaction a call.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from swarm.core.reasons import Direction, Status
from swarm.ledger import GroupRow, GroupUseRow, RoundRow, UpdateRow
from swarm.monitor.display import RoundReport
from swarm.policy.trainer import UpdateResult
from swarm.tasks import Scoring, extract_answer
from swarm.verify.message import Rejection

if TYPE_CHECKING:
    from swarm.node.state import SharingStats


@dataclass(frozen=True)
class RoundMetrics:
    """What a round's rows and report say about its groups and its training batch."""

    questions: int  # groups generated
    completions: int
    mean_reward: float  # over the generated completions
    accuracy: float  # share of generated completions scored correct
    tagged: float  # share of generated completions with a tagged answer
    tokens: int  # generated
    trained_groups: int  # own groups trained on
    shared_groups: int  # peers' groups trained on
    samples: int  # completions in the training batch
    batch_reward: float  # mean reward over the training batch


def round_metrics(groups, trained, shared, scoring: Scoring) -> RoundMetrics:
    """A round's metrics from its generated `groups` (`.task`, `.rewards`, `.completions` with
    `.text` and `.token_ids`), the own groups `trained` on and the peers' groups `shared`
    (`.rewards`). Pure."""
    completions = [c for g in groups for c in g.completions]
    rewards = [r for g in groups for r in g.rewards]
    correct = sum(scoring.correct(g.task, c.text) for g in groups for c in g.completions)
    trained, shared = list(trained), list(shared)
    trained_rewards = [r for g in trained + shared for r in g.rewards]
    n = max(len(completions), 1)
    return RoundMetrics(
        questions=len(groups),
        completions=len(completions),
        mean_reward=sum(rewards) / max(len(rewards), 1),
        accuracy=correct / n,
        tagged=sum(extract_answer(c.text)[1] for c in completions) / n,
        tokens=sum(len(c.token_ids) for c in completions),
        trained_groups=len(trained),
        shared_groups=len(shared),
        samples=len(trained_rewards),
        batch_reward=sum(trained_rewards) / max(len(trained_rewards), 1),
    )


@dataclass(frozen=True)
class At:
    """Where a row belongs: the node's round and its policy version after the round's update."""

    round: int
    version: int


def round_row(metrics: RoundMetrics, started: float, times, at: At) -> RoundRow:
    """The round: what it generated and how long its parts took (`times`)."""
    return RoundRow(
        round=at.round,
        policy_version=at.version,
        started_at=started,
        questions=metrics.questions,
        completions=metrics.completions,
        mean_reward=metrics.mean_reward,
        accuracy=metrics.accuracy,
        tokens_generated=metrics.tokens,
        generate_s=times.generate,
        score_s=times.score,
        train_s=times.train,
        other_s=times.other,
        total_s=times.total,
    )


def use_row(group, advantages, skipped: bool, at: At) -> GroupUseRow:
    """A shared group's use in the round's update, with the advantages it got."""
    return GroupUseRow(
        group_id=group.row_id,
        content_hash=group.content_hash,
        sender=group.sender,
        round=at.round,
        version_after=at.version,
        skipped_update=skipped,
        advantages=json.dumps([round(a, 6) for a in advantages]),
        advantage_abs_sum=sum(abs(a) for a in advantages),
        mean_reward=sum(group.rewards) / len(group.rewards),
    )


def update_row(
    metrics: RoundMetrics, result: UpdateResult, version_before: int, at: At
) -> UpdateRow:
    """The round's update: what it trained on and what the step did."""
    return UpdateRow(
        round=at.round,
        version_before=version_before,
        version_after=at.version,
        skipped=result.skipped,
        skip_reason=result.skip_reason,
        local_groups=metrics.trained_groups,
        shared_groups=metrics.shared_groups,
        samples=metrics.samples,
        tokens=result.tokens,
        mean_reward=metrics.batch_reward,
        loss=result.loss,
        grad_norm=result.grad_norm,
        clip_fraction=result.clip_fraction,
        kl=result.kl,
        seconds=result.seconds,
        created_at=time.time(),
    )


def round_report(
    metrics: RoundMetrics,
    result: UpdateResult,
    times,
    shared,
    peers: int,
    sharing: SharingStats,
    at: At,
) -> RoundReport:
    """The round as the reporters show it, with `sharing`'s totals so far."""
    return RoundReport(
        round=at.round,
        policy_version=at.version,
        mean_reward=metrics.mean_reward,
        accuracy=metrics.accuracy,
        groups=metrics.questions,
        trained_groups=metrics.trained_groups,
        shared_groups=metrics.shared_groups,
        skipped=result.skipped,
        loss=result.loss,
        generate_s=times.generate,
        train_s=times.train,
        total_s=times.total,
        tokens_generated=metrics.tokens,
        peers=peers,
        received=sharing.received_groups,
        accepted=sharing.accepted_groups,
        rejected=sharing.rejected_groups,
        refused=sum(sharing.refused_by_reason.values()),
        optimizer_steps=result.steps,
        batch_reward=metrics.batch_reward,
        tagged=metrics.tagged,
        shared_families=tuple(g.family for g in shared),
        score_s=times.score,
        verify_s=times.verify,
    )


def rejected_row(r: Rejection, local_round: int) -> GroupRow:
    """A received group refused with a reason, as a row."""
    return group_row(
        r.signed,
        r.group,
        Direction.RECEIVED,
        Status.REJECTED,
        local_round,
        source=r.source,
        reason=r.reason,
        detail=r.detail[:500],
        content_hash=r.content_hash,
        sender=r.sender,
    )


def group_row(
    signed,
    group,
    direction,
    status,
    local_round: int,
    source="",
    reason="",
    detail="",
    content_hash="",
    sender="",
) -> GroupRow:
    """A group's row (sent, or received and accepted or rejected) in the node's round
    `local_round`."""
    row = GroupRow(
        content_hash=content_hash or signed.content_hash,
        direction=direction,
        status=status,
        reason=reason,
        detail=detail,
        sender=sender or (group.sender if group else ""),
        source=source,
        recorded_at=time.time(),
        local_round=local_round,
        body=signed.body if signed else None,
        signature=signed.signature if signed else None,
    )
    if group is not None:
        row.swarm_id, row.dataset, row.model = group.swarm_id, group.task.dataset, group.model
        row.task = json.dumps(group.task.as_dict(), sort_keys=True)
        row.policy_version, row.round, row.created_at = (
            group.policy_version,
            group.round,
            group.created_at,
        )
        row.completions = len(group.completions)
        row.mean_reward = sum(group.rewards) / len(group.rewards)
    return row
