"""Sharing: publishing this node's groups, and receiving its peers'.

Publishing signs a round's groups and sends them in batches; a failure is counted, never
fatal. With an exchange protocol other than gossip (`p2p.exchange = "pull"`), the groups go
to `exchange.publish` and arrive from `exchange.collect` (`swarm.exchange.base`); everything
after that (verification, ledger, pool, reputation) is the same. Receiving has two halves. The gossip validator (`validate`, on the transport's
thread) runs the verifier's cheap checks and notes the rejections. Once a round, `receive`
drains the inbox, gives each group that passed the expensive checks (copycat, task
rebuild, question, every claimed reward, and the token spot check on groups of this
node's exact model and version), records every group in the ledger, and pools the good
ones for training. Rejections are stored as rows within each peer's quota and counted
beyond it (`swarm.node.rejection_log`), as is what the transport refuses by itself
(`refused`, its rejection hook). Outcomes feed the peers' reputations; a peer they
condemn is banned.
"""

from __future__ import annotations

import collections
import logging
import time

from swarm.config import Config
from swarm.core.errors import RejectedMessage, SwarmError, TransportError
from swarm.core.reasons import Direction, Reason, Status
from swarm.exchange.base import Exchange
from swarm.experience import ExperiencePool, SharedGroup
from swarm.ledger import (
    Ledger,
    add_ban,
    add_rejection_counts,
    banned_peers,
    group_known,
    received_outcomes,
    recent_accepted,
    rejected_rows_since,
    touch_peer,
)
from swarm.monitor.display import Reporter
from swarm.node.records import Records
from swarm.node.refusals import transport_reason
from swarm.node.rejection_log import RejectionLog, Taken
from swarm.node.state import LocalGroup, NodeState, SharingStats
from swarm.p2p.transport import InboundMessage, PeerRejection, Transport
from swarm.policy.model import Policy
from swarm.policy.prompts import build_prompt
from swarm.policy.source import same_model
from swarm.tasks import Task
from swarm.verify.gate import Verifier, blamed_peer
from swarm.verify.message import Accepted, Rejection
from swarm.verify.spotcheck import SpotChecker
from swarm.verify.state import NONCE_MEMORY
from swarm.wire import RolloutGroup, Sampling, pack_messages, stored_nonce
from swarm.wire.signing import check_group_signature, sign_group

_log = logging.getLogger(__name__)  # node.log under `swarm-node join` (it captures the process)


class Sharing:
    """Publishes this node's groups and receives its peers' (see the module docstring)."""

    def __init__(
        self,
        *,
        config: Config,
        key_pair,
        peer_id: str,
        topic: str,
        transport: Transport,
        verifier: Verifier,
        pool: ExperiencePool,
        spot_checker: SpotChecker | None,
        policy: Policy | None,
        sampling,
        state: NodeState,
        ledger: Ledger,
        records: Records,
        reporter: Reporter,
        exchange: Exchange | None = None,
    ):
        self.config = config
        self.exchange = exchange  # None: gossip through `validate` and the transport's inbox
        self.key_pair = key_pair
        self.peer_id = peer_id
        self.topic = topic
        self.transport = transport
        self.verifier = verifier
        self.pool = pool  # peers' groups, re-scored, awaiting training
        self.spot_checker = spot_checker
        self.policy = policy
        self.sampling = sampling
        self.state = state
        self.ledger = ledger
        self.records = records
        self.reporter = reporter
        self.stats = SharingStats()
        self.rejections = RejectionLog(
            config.ledger.rejected_rows_per_peer, config.ledger.count_window_s
        )
        self._spot_checks_left = config.verify.spot_check_groups_per_round

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
        """A new round: its budget of spot checks."""
        self._spot_checks_left = self.config.verify.spot_check_groups_per_round

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

    def refused(self, rejection: PeerRejection) -> None:
        """The transport's rejection hook (its thread): what it refused from a peer by itself,
        counted against the peer like a rejected group (`swarm.node.refusals`)."""
        self.rejections.refused(
            rejection.peer_id, transport_reason(rejection.reason), rejection.count
        )

    def publish(self, groups: list[LocalGroup]) -> None:
        """Sign this round's groups and publish them in batches; failures are counted, not fatal."""
        signed, pairs = [], []
        for group in groups:
            group.wire = wire = self._wire_group(group)
            group.signed = sign_group(wire, self.key_pair)
            signed.append(group.signed)
            pairs.append((group.signed, wire))
            self.verifier.note_own(wire)  # a peer re-signing it is then a copycat
        if self.exchange is not None:
            self.exchange.publish(pairs)
            self.stats.published_groups += len(groups)
            return
        for message in pack_messages(signed):
            try:
                self.transport.publish(self.topic, message)
            except TransportError as e:
                self.stats.publish_failures += 1
                self.reporter.message(f"publish failed: {e}")
        self.stats.published_groups += len(groups)

    def _wire_group(self, group: LocalGroup) -> RolloutGroup:
        policy = self.policy
        if policy is None:
            raise SwarmError("a node without a model has no groups to publish")
        return RolloutGroup(
            swarm_id=self.config.p2p.swarm_id,
            sender=self.peer_id,
            task=group.task.spec,
            question=group.task.question,
            completions=tuple(c.text for c in group.completions),
            rewards=tuple(group.rewards),
            finished=tuple(c.finished for c in group.completions),
            model=policy.model_id,  # by content: never a local path
            base_hash=policy.base_hash,
            policy_version=self.state.policy_version,
            sampling=Sampling(
                temperature=float(self.sampling.temperature),
                top_p=float(self.sampling.top_p),
                top_k=int(self.sampling.top_k),
                max_new_tokens=int(self.sampling.max_new_tokens),
            ),
            round=self.state.round,
            created_at=time.time(),
            token_ids=tuple(tuple(c.token_ids) for c in group.completions),
            format_bonus=float(self.config.tasks.format_reward),
        )

    def receive(self) -> None:
        """Drain the inbox and store what arrived (accepted, rejected, counted) in one transaction."""
        accepted = self._drain_inbox()
        if accepted or self.rejections.waiting():
            with self.ledger.transaction() as session:
                self._store_received(session, accepted)

    def final_drain(self, wait_s: float = 1.0) -> None:
        """Record what peers sent during the last round, so nothing received goes unrecorded.

        (The pull exchange receives only what it asks for, in its rounds: nothing to drain.)"""
        if self.exchange is not None:
            return
        if self.transport.peers():
            time.sleep(wait_s)  # messages of the last round may still be in flight
        self.receive()

    def _drain_inbox(self) -> list[Accepted]:
        """The groups received since the last round that the validator passed (rejections,
        including those of senders banned since, go to the rejection log)."""
        accepted: list[Accepted] = []
        with self.ledger.reader() as session:  # bans set or lifted by `swarm-node ban/unban`
            self.verifier.set_bans(banned_peers(session))
        now = time.time()
        if self.exchange is not None:
            pulled, refused = self.exchange.collect()
            self.stats.exchange.update(self.exchange.take_counters())
            for r in refused:
                self.rejections.note(r, now)
            return pulled
        for message in self.transport.receive():
            ok, bad = self.verifier.recheck(message.data, message.source)
            accepted += ok
            for r in bad:  # normally none: the validator already refused such messages
                self.rejections.note(r, now)
        return accepted

    def _store_received(self, session, accepted: list[Accepted]) -> list[Accepted]:
        """Record received groups in the ledger and pool the good ones; return the new accepted ones.

        A group that passed the cheap checks gets the expensive ones here (copycat, the
        peer's verification share, task rebuild, question, every claimed reward); a failing
        one is rejected like any other. Rejections are stored as rows or counted
        (`swarm.node.rejection_log`). Outcomes feed the peers' reputation; a peer it
        condemns is banned in the ledger.
        """
        now = time.time()
        fresh, seen = [], set()
        for item in accepted:
            digest = item.signed.content_hash
            if digest in seen or group_known(session, digest):
                self.rejections.note(
                    Rejection(
                        Reason.DUPLICATE,
                        "already received",
                        item.source,
                        digest,
                        item.group.sender,
                        item.signed,
                        item.group,
                    ),
                    now,
                )
                continue
            seen.add(digest)
            try:
                task, rewards = self.verifier.verify_content(
                    item.group,
                    self.config.tasks.format_reward,
                    self.config.tasks.scoring(),
                    peer=blamed_peer(item.source, item.group.sender),
                )
                self._spot_check(item)
            except RejectedMessage as e:
                self.rejections.note(
                    Rejection(
                        e.reason,
                        e.detail,
                        item.source,
                        digest,
                        item.group.sender,
                        item.signed,
                        item.group,
                    ),
                    now,
                )
                continue
            touch_peer(session, item.group.sender, now, model=item.group.model)
            row = self.records.group_row(
                item.signed, item.group, Direction.RECEIVED, Status.ACCEPTED, source=item.source
            )
            session.add(row)
            session.flush()  # assigns row.id, which records of its later use refer to
            self.pool.add(self._shared_group(row.id, item, task, rewards, now))
            fresh.append(item)
        taken = self.rejections.take()
        for r in taken.rows:
            for peer in {r.source, r.sender if signed_by_sender(r) else ""} - {""}:
                touch_peer(session, peer, now)  # the transport's peer; a sender only if signed
            session.add(
                self.records.group_row(
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
            )
        counted = collections.Counter(taken.counts) + collections.Counter(taken.refused)
        add_rejection_counts(session, counted, now, self.config.ledger.count_window_s)
        for peer, reason in self.verifier.record(fresh, taken.rows, counted):
            add_ban(session, peer, "auto", reason, now)
            self.reporter.message(f"banned {peer}: {reason}")
        self._count(fresh, taken)
        self._log_refusals(taken)
        return fresh

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

    def _spot_check(self, item: Accepted) -> None:
        """Re-score a sample of the group's tokens if it claims our exact model and version.

        At most `verify.spot_check_groups_per_round` groups a round: each costs a forward pass.
        A node without a model (an observer) has no spot checker and checks none.
        """
        group, policy = item.group, self.policy
        if self.spot_checker is None or policy is None or self._spot_checks_left <= 0:
            return
        if not same_model(group.model, policy.model_id) or (
            group.base_hash,
            group.policy_version,
        ) != (policy.base_hash, self.state.policy_version):
            return
        self._spot_checks_left -= 1
        prompt = build_prompt(policy.tokenizer, group.question, self.config.policy.system_prompt)
        self.spot_checker.check(group, item.signed.content_hash, prompt)

    def _shared_group(
        self, row_id: int, item: Accepted, task: Task, rewards, received_at: float
    ) -> SharedGroup:
        group = item.group
        ours = (
            self.policy is not None
            and same_model(group.model, self.policy.model_id)
            and group.base_hash == self.policy.base_hash
        )
        return SharedGroup(
            row_id=row_id,
            content_hash=item.signed.content_hash,
            sender=group.sender,
            task=task,
            completions=group.completions,
            finished=group.finished,
            rewards=rewards,
            claimed_rewards=group.rewards,
            policy_version=group.policy_version,
            same_model=ours,
            received_at=received_at,
            round=group.round,
            family=group.task.dataset,
        )


def signed_by_sender(rejection: Rejection) -> bool:
    """Whether a rejected group's claimed sender signed it (else the claim means nothing)."""
    if not rejection.sender or rejection.signed is None:
        return False
    try:
        check_group_signature(rejection.signed, rejection.sender)
    except RejectedMessage:
        return False
    return True
