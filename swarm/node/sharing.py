"""Sharing: receiving peers' groups and recording what became of them.

The gossip validator (`validate`, on the transport's thread) runs the verifier's cheap
checks and notes the rejections; the transport's refusal hook (`refused`) counts what the
transport refused by itself (`swarm.node.refusals`). Once a round, `receive`:

1. drains the inbox (`Verifier.recheck`: bans set since admission), or, with an exchange
   protocol other than gossip (`p2p.exchange = "pull"`), collects what `exchange.collect`
   pulled (`swarm.exchange.base`);
2. reads which of those groups the ledger already holds (a short read, no write lock);
3. has the intake run the expensive checks (`swarm.node.intake`: copycat, task rebuild,
   question, every claimed reward, the token spot check on a node with a model) with no
   transaction open;
4. feeds the outcomes to the peers' reputations, then stores them in ONE short transaction
   (`Records.record_received`: rows, rejection rows within each peer's quota and counts
   beyond it, `swarm.node.rejection_log`; bans of the peers the reputation condemns), and
   pools the accepted groups for training.

So `swarm-node ban` (another process, same ledger) never waits on re-scoring. Publishing
this node's own groups is `swarm.node.publishing`'s; `publish` hands the round's groups to
it (a node without a model has none).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Sequence

from swarm.config import Config
from swarm.core.errors import RejectedMessage, SwarmError
from swarm.core.reasons import Reason
from swarm.exchange.base import Exchange
from swarm.experience import ExperiencePool, SharedGroup
from swarm.ledger import (
    Ledger,
    banned_peers,
    group_known,
    received_outcomes,
    recent_accepted,
    rejected_rows_since,
)
from swarm.monitor.display import Reporter
from swarm.node.intake import Intake, Verified
from swarm.node.publishing import Publishing
from swarm.node.records import Records
from swarm.node.refusals import transport_reason
from swarm.node.rejection_log import RejectionLog, Taken
from swarm.node.state import OwnGroup, SharingStats
from swarm.p2p.transport import InboundMessage, Refusal, Transport
from swarm.verify.gate import Verifier
from swarm.verify.message import Accepted
from swarm.verify.tracking import NONCE_MEMORY
from swarm.wire import stored_nonce

_log = logging.getLogger(__name__)  # node.log under `swarm-node join` (it captures the process)

QUIET_S = 0.25  # final drain: the inbox quiet this long means nothing more is on its way
FINAL_WAIT_S = 1.0  # final drain: the longest it waits for peers' last messages


class Sharing:
    """Receives peers' groups and records them; publishes through `publishing` (see the
    module docstring)."""

    def __init__(
        self,
        *,
        config: Config,
        transport: Transport,
        verifier: Verifier,
        intake: Intake,
        pool: ExperiencePool,
        ledger: Ledger,
        records: Records,
        reporter: Reporter,
        exchange: Exchange | None = None,
        publishing: Publishing | None = None,
    ):
        self.config = config
        self.exchange = exchange  # None: gossip through `validate` and the transport's inbox
        self.transport = transport
        self.verifier = verifier
        self.intake = intake
        self.pool = pool  # peers' groups, re-scored, awaiting training
        self.ledger = ledger
        self.records = records
        self.reporter = reporter
        self.publishing = publishing  # None: a node without a model publishes nothing
        self.stats = SharingStats()
        self.verify_s = 0.0  # this round's time in `Intake.verify`
        self.rejections = RejectionLog(
            config.ledger.rejected_rows_per_peer, config.ledger.count_window_s
        )

    def restore_memory(self) -> None:
        """Feed the verifier what the ledger remembers: peers' reputations, and the groups
        accepted within its age limit (their nonces and versions), oldest first; and the
        rejection log the rows already written about each peer in this window."""
        now, max_age = time.time(), self.config.verify.max_age_s
        since = now - max_age if max_age > 0 else 0.0
        with self.ledger.reader() as session:
            rows = recent_accepted(session, since, NONCE_MEMORY)
            self.verifier.restore_reputation(received_outcomes(session))
            written = rejected_rows_since(session, self.rejections.window_start(now))
        self.rejections.restore(written, now)
        for body, sender, content_hash, policy_version, recorded_at in rows:
            try:
                nonce = stored_nonce(body)
            except RejectedMessage:
                continue  # cannot happen to a body this node stored; never worth failing a start
            self.verifier.remember(sender, nonce, content_hash, policy_version, recorded_at)

    def new_round(self) -> None:
        """A new round: its budget of spot checks, its verification time from 0."""
        self.intake.new_round()
        self.verify_s = 0.0

    def validate(self, message: InboundMessage) -> str | None:
        """Gossip validator (runs on the transport's thread): cheap checks, rejections noted
        (as rows within the peer's quota, counted beyond: `swarm.node.rejection_log`)."""
        _, rejected = self.verifier.admit(message.data, message.source)
        if not rejected:
            return None
        now = time.time()
        for r in rejected:
            self.rejections.note(r, now)
        return rejected[0].reason

    def refused(self, refusal: Refusal) -> None:
        """The transport's refusal hook (its thread): what it refused from a peer by itself,
        counted against the peer like a rejected group (`swarm.node.refusals`)."""
        self.rejections.refused(refusal.peer_id, transport_reason(refusal.reason), refusal.count)

    def publish(self, groups: list[OwnGroup]) -> None:
        """Sign this round's groups and publish them (`swarm.node.publishing`), counted."""
        if self.publishing is None:
            raise SwarmError("a node without a model has no groups to publish")
        done = self.publishing.publish(groups)
        self.stats.published_groups += done.groups
        self.stats.publish_failures += done.failures

    def receive(self) -> None:
        """Drain what arrived, check it with no transaction open, store every outcome in one."""
        self._take_in(self._collect())

    def final_drain(self, quiet_s: float = QUIET_S, wait_s: float = FINAL_WAIT_S) -> None:
        """Record what peers sent during the last round, so nothing received goes unrecorded.

        Peers' last messages may still be on their way, and no transport can say whether a
        peer is about to send: the transport's inbox is the only signal there is. So with
        peers connected this waits on the inbox (woken by each arrival, no polling) until it
        has been quiet for `quiet_s`, and never longer than `wait_s` in all; with none, or
        once nothing comes, it ends at once. (The pull exchange receives only what it asks
        for, in its rounds: nothing to drain.)"""
        if self.exchange is not None:
            return
        waited = self._until_quiet(quiet_s, wait_s) if self.transport.peers() else []
        self._take_in(self._collect(waited))

    def _until_quiet(self, quiet_s: float, wait_s: float) -> list[InboundMessage]:
        """Messages taken from the inbox until none came for `quiet_s` (at most `wait_s`)."""
        messages: list[InboundMessage] = []
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            batch = self.transport.receive(timeout=min(quiet_s, left))
            if not batch:
                break
            messages += batch
        return messages

    def _collect(self, waited: Sequence[InboundMessage] = ()) -> list[Accepted]:
        """The groups received since the last round that the validator passed (rejections,
        including those of senders banned since, go to the rejection log)."""
        with self.ledger.reader() as session:  # bans set or lifted by `swarm-node ban/unban`
            self.verifier.set_bans(banned_peers(session))
        now = time.time()
        if self.exchange is not None:
            pulled, refused = self.exchange.collect()
            self.stats.exchange.update(self.exchange.take_counters())
            for r in refused:
                self.rejections.note(r, now)
            return pulled
        accepted: list[Accepted] = []
        for message in [*waited, *self.transport.receive()]:
            ok, bad = self.verifier.recheck(message.data, message.source)
            accepted += ok
            for r in bad:  # normally none: the validator already refused such messages
                self.rejections.note(r, now)
        return accepted

    def _take_in(self, items: list[Accepted]) -> None:
        """Check `items` (no transaction open), then store every outcome in one transaction."""
        started = time.perf_counter()
        outcome = self.intake.verify(items, self._known(items))
        self.verify_s += time.perf_counter() - started
        now = time.time()
        for r in outcome.rejected + outcome.duplicates:
            self.rejections.note(r, now)
        if outcome.accepted or self.rejections.waiting():
            self._store(outcome.accepted, now)

    def _known(self, items: list[Accepted]) -> frozenset[str]:
        """Which of the groups' content hashes the ledger already holds (one short read)."""
        if not items:
            return frozenset()
        hashes = {item.signed.content_hash for item in items}
        with self.ledger.reader() as session:
            return frozenset(h for h in hashes if group_known(session, h))

    def _store(self, accepted: list[Verified], now: float) -> None:
        """Reputations first (in memory), then one short transaction for every row; the
        accepted groups go to the pool once their rows exist."""
        taken = self.rejections.take()
        counted = collections.Counter(taken.counts) + collections.Counter(taken.refused)
        fresh = [v.item for v in accepted]
        bans = self.verifier.record(fresh, taken.rows, counted)
        row_ids = self.records.record_received(
            fresh,
            taken.rows,
            counted,
            bans,
            now=now,
            count_window_s=self.config.ledger.count_window_s,
        )
        for verified, row_id in zip(accepted, row_ids, strict=True):
            self.pool.add(_shared_group(row_id, verified, now))
        for peer, reason in bans:
            self.reporter.message(f"banned {peer}: {reason}")
        self._count(fresh, taken)
        self._log_refusals(taken)

    def _log_refusals(self, taken: Taken) -> None:
        """What the transport refused by itself this round, per peer, to node.log."""
        for (peer, reason), n in sorted(taken.refused.items()):
            _log.info("transport refused %d from %s: %s", n, peer, reason)

    def _count(self, fresh: list[Accepted], taken: Taken) -> None:
        """This run's totals. Each group ends in one outcome: accepted, rejected or a duplicate
        (a group that passed the gate and then failed a check here is rejected only)."""
        by_reason = collections.Counter(r.reason for r in taken.rows)
        for (_, reason), n in taken.counts.items():
            by_reason[reason] += n
        duplicates = by_reason[Reason.DUPLICATE]
        rejected = sum(by_reason.values()) - duplicates
        self.stats.received_groups += len(fresh) + rejected
        self.stats.accepted_groups += len(fresh)
        self.stats.rejected_groups += rejected
        self.stats.duplicates += duplicates
        self.stats.rejected_by_reason.update(by_reason)
        for (_, reason), n in taken.refused.items():
            self.stats.refused_by_reason[reason] += n


def _shared_group(row_id: int, verified: Verified, received_at: float) -> SharedGroup:
    """An accepted group as the pool holds it (`row_id`: its ledger row)."""
    item, group = verified.item, verified.item.group
    return SharedGroup(
        row_id=row_id,
        content_hash=item.signed.content_hash,
        sender=group.sender,
        task=verified.task,
        completions=group.completions,
        finished=group.finished,
        rewards=verified.rewards,
        claimed_rewards=group.rewards,
        policy_version=group.policy_version,
        same_model=verified.ours,
        received_at=received_at,
        round=group.round,
        family=group.task.dataset,
    )
