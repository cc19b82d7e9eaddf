"""The node's ledger rows: rounds, updates, groups, uses of shared groups, deltas, evaluations.

`Records` writes what the other parts report, each call in one transaction: a round with
its update, its sent groups and the shared groups it trained on; what the sharing part
received (accepted groups, rejected ones as rows or counts, automatic bans), checked before
the transaction opens; the weight-delta events of the sync parts; an evaluation. What a
round's rows say (mean reward, accuracy, tokens...) is computed apart, by the pure
`round_metrics`, from plain data.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from swarm.core.reasons import Direction, Reason, Status
from swarm.ledger import (
    DeltaRow,
    EvalRow,
    GroupRow,
    GroupUseRow,
    Ledger,
    RoundRow,
    UpdateRow,
    add_ban,
    add_rejection_counts,
    touch_peer,
)
from swarm.ledger.retention import Pruned, Retention, prune
from swarm.monitor.display import Reporter, RoundReport
from swarm.node.rejection_log import signed_by_sender
from swarm.p2p.transport import PeerInfo
from swarm.policy.trainer import UpdateResult
from swarm.sync.rules import DeltaEvent
from swarm.tasks import Scoring, extract_answer
from swarm.verify.message import Accepted, Rejection

if TYPE_CHECKING:
    from swarm.node.state import NodeState, SharingStats


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


class Records:
    """Writes the node's rows to its ledger; `state` gives the round and version they belong to."""

    def __init__(
        self,
        ledger: Ledger,
        state: NodeState,
        reporter: Reporter,
        scoring: Scoring | None = None,
        retention: Retention | None = None,
    ):
        self.ledger = ledger
        self.state = state
        self.reporter = reporter
        self.scoring = scoring or Scoring()
        self.retention = retention or Retention()
        self._over_cap_said = False

    def prune(self) -> Pruned:
        """Apply the ledger's retention (`ledger.keep_days`, `ledger.max_mb`); say what went,
        and (once) if the ledger stays over its cap with nothing prunable left."""
        pruned = (
            prune(self.ledger, self.retention, time.time()) if self.retention.active else Pruned()
        )
        if pruned.total:
            what = ", ".join(f"{n} {kind}" for kind, n in pruned.rows.items())
            self.reporter.message(f"ledger pruned: {what}")
        if pruned.over_bytes and not self._over_cap_said:
            self._over_cap_said = True
            self.reporter.message(
                f"ledger stays {pruned.over_bytes / 1e6:.0f} MB over ledger.max_mb: what is left is "
                "rounds, accepted groups and their uses, which replay needs; not pruned"
            )
        return pruned

    def record_round(
        self,
        groups,
        trained,
        result: UpdateResult,
        version_before,
        started,
        times,
        shared=(),
        shared_advantages=(),
        *,
        peers: Sequence[PeerInfo],
        sharing: SharingStats,
    ) -> RoundReport:
        """One transaction: the shared groups used, the `peers` seen, the groups sent, the round
        and its update. Returns the round's report (with `sharing`'s totals so far)."""
        metrics = round_metrics(groups, trained, shared, self.scoring)
        round_row = RoundRow(
            round=self.state.round,
            policy_version=self.state.policy_version,
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
        update_row = self._update_row(metrics, result, version_before)
        with self.ledger.transaction() as session:
            for group, advantages in zip(shared, shared_advantages, strict=True):
                session.add(self._use_row(group, advantages, result.skipped))
            for peer in peers:  # connected peers and where they are reachable
                touch_peer(session, peer.peer_id, time.time(), addrs=json.dumps(list(peer.addrs)))
            for g in groups:
                session.add(self.group_row(g.signed, g.wire, Direction.SENT, Status.SENT))
            session.add(round_row)
            session.add(update_row)
        self.state.rewards.append(metrics.mean_reward)
        return self._report(metrics, result, times, shared, len(peers), sharing)

    def _use_row(self, group, advantages, skipped: bool) -> GroupUseRow:
        """A shared group's use in this round's update, with the advantages it got."""
        return GroupUseRow(
            group_id=group.row_id,
            content_hash=group.content_hash,
            sender=group.sender,
            round=self.state.round,
            version_after=self.state.policy_version,
            skipped_update=skipped,
            advantages=json.dumps([round(a, 6) for a in advantages]),
            advantage_abs_sum=sum(abs(a) for a in advantages),
            mean_reward=sum(group.rewards) / len(group.rewards),
        )

    def _update_row(
        self, metrics: RoundMetrics, result: UpdateResult, version_before: int
    ) -> UpdateRow:
        return UpdateRow(
            round=self.state.round,
            version_before=version_before,
            version_after=self.state.policy_version,
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

    def _report(
        self,
        metrics: RoundMetrics,
        result: UpdateResult,
        times,
        shared,
        peers: int,
        sharing: SharingStats,
    ) -> RoundReport:
        return RoundReport(
            round=self.state.round,
            policy_version=self.state.policy_version,
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
        )

    def record_received(
        self,
        accepted: Sequence[Accepted],
        rejected: Sequence[Rejection],
        counted: Mapping[tuple[str, Reason], int],
        bans: Sequence[tuple[str, str]],
        *,
        now: float,
        count_window_s: float,
    ) -> list[int]:
        """One transaction: peers' `accepted` groups (their row ids returned, in order), the
        `rejected` ones as rows, the rejections `counted` by (peer, reason) in the window
        holding `now`, and the (peer, reason) `bans` the reputation decided."""
        with self.ledger.transaction() as session:
            rows = []
            for item in accepted:
                touch_peer(session, item.group.sender, now, model=item.group.model)
                row = self.group_row(
                    item.signed, item.group, Direction.RECEIVED, Status.ACCEPTED, source=item.source
                )
                session.add(row)
                rows.append(row)
            session.flush()  # assigns the rows' ids, which records of their later use refer to
            for r in rejected:
                for peer in {r.source, r.sender if signed_by_sender(r) else ""} - {""}:
                    touch_peer(session, peer, now)  # the transport's peer; a sender only if signed
                session.add(self._rejected_row(r))
            add_rejection_counts(session, counted, now, count_window_s)
            for peer, reason in bans:
                add_ban(session, peer, "auto", reason, now)
            return [row.id for row in rows]

    def _rejected_row(self, r: Rejection) -> GroupRow:
        return self.group_row(
            r.signed,
            r.group,
            Direction.RECEIVED,
            Status.REJECTED,
            source=r.source,
            reason=r.reason,
            detail=r.detail[:500],
            content_hash=r.content_hash,
            sender=r.sender,
        )

    def group_row(
        self,
        signed,
        group,
        direction,
        status,
        source="",
        reason="",
        detail="",
        content_hash="",
        sender="",
    ):
        """A group's row (sent, or received and accepted or rejected), for the caller's transaction."""
        row = GroupRow(
            content_hash=content_hash or signed.content_hash,
            direction=direction,
            status=status,
            reason=reason,
            detail=detail,
            sender=sender or (group.sender if group else ""),
            source=source,
            recorded_at=time.time(),
            local_round=self.state.round,
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

    def record_deltas(self, events: list[DeltaEvent]) -> None:
        """The sync parts' events; a refused delta or anchor is also reported."""
        if not events:
            return
        now = time.time()
        with self.ledger.transaction() as session:
            for e in events:
                session.add(
                    DeltaRow(
                        direction=e.direction,
                        peer=e.peer,
                        kind=e.kind,
                        from_version=e.from_version,
                        to_version=e.to_version,
                        bytes=e.nbytes,
                        seconds=e.seconds,
                        status=e.status,
                        reason=e.reason,
                        recorded_at=now,
                    )
                )
        for e in events:
            if e.status == Status.REJECTED:
                self.reporter.message(
                    f"{e.kind} v{e.from_version}->v{e.to_version} from {e.peer[:16]} rejected: {e.reason}: {e.detail[:200]}"
                )

    def record_eval(self, questions: int, accuracy: float, mean_reward: float) -> None:
        """An evaluation on `questions` held-out questions at the current round and version."""
        with self.ledger.transaction() as session:
            session.add(
                EvalRow(
                    round=self.state.round,
                    policy_version=self.state.policy_version,
                    questions=questions,
                    accuracy=accuracy,
                    mean_reward=mean_reward,
                    created_at=time.time(),
                )
            )
