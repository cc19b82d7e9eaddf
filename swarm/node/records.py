"""The node's ledger rows: rounds, updates, groups, uses of shared groups, deltas, evaluations.

`Records` writes what the other parts report, each call in one transaction: a round with
its update, its sent groups and the shared groups it trained on; what the sharing part
received (accepted groups, rejected ones as rows or counts, automatic bans), checked before
the transaction opens; the weight-delta events of the sync parts; an evaluation; and it
applies the ledger's retention. The rows themselves, and what a round's rows say (mean
reward, accuracy, tokens...), are built apart from plain data (`swarm.node.ledger_rows`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from swarm.core.reasons import Direction, Reason, Status
from swarm.ledger import (
    DeltaRow,
    EvalRow,
    Ledger,
    add_ban,
    add_rejection_counts,
    touch_peer,
)
from swarm.ledger.retention import Pruned, Retention, prune
from swarm.monitor.display import Reporter, RoundReport
from swarm.node.ledger_rows import (
    At,
    group_row,
    rejected_row,
    round_metrics,
    round_report,
    round_row,
    update_row,
    use_row,
)
from swarm.node.rejection_log import signed_by_sender
from swarm.p2p.transport import PeerInfo
from swarm.policy.trainer import UpdateResult
from swarm.sync.rules import DeltaEvent
from swarm.tasks import Scoring
from swarm.verify.message import Accepted, Rejection

if TYPE_CHECKING:
    from swarm.node.state import NodeState, SharingStats


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
        at = self._at()
        update = update_row(metrics, result, version_before, at)
        with self.ledger.transaction() as session:
            for group, advantages in zip(shared, shared_advantages, strict=True):
                session.add(use_row(group, advantages, result.skipped, at))
            for peer in peers:  # connected peers and where they are reachable
                touch_peer(session, peer.peer_id, time.time(), addrs=json.dumps(list(peer.addrs)))
            for g in groups:
                session.add(group_row(g.signed, g.wire, Direction.SENT, Status.SENT, at.round))
            session.add(round_row(metrics, started, times, at))
            session.add(update)
        self.state.rewards.append(metrics.mean_reward)
        return round_report(metrics, result, times, shared, len(peers), sharing, at)

    def _at(self) -> At:
        return At(self.state.round, self.state.policy_version)

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
                row = group_row(
                    item.signed,
                    item.group,
                    Direction.RECEIVED,
                    Status.ACCEPTED,
                    self.state.round,
                    source=item.source,
                )
                session.add(row)
                rows.append(row)
            session.flush()  # assigns the rows' ids, which records of their later use refer to
            for r in rejected:
                for peer in {r.source, r.sender if signed_by_sender(r) else ""} - {""}:
                    touch_peer(session, peer, now)  # the transport's peer; a sender only if signed
                session.add(rejected_row(r, self.state.round))
            add_rejection_counts(session, counted, now, count_window_s)
            for peer, reason in bans:
                add_ban(session, peer, "auto", reason, now)
            return [row.id for row in rows]

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
