"""The verifier: every check on a peer's rollout groups, in cost order, with the state they need.

Three entry points, one per place a group passes through the node:

1. `admit` runs in the gossip validator (the network thread), so it is cheap: the wire
   checks of `check_message` (size, msgpack, schema, types and bounds, swarm id, Ed25519
   signature, sender == libp2p source), then allow-list, bans, age and clock skew,
   duplicates and replayed nonces, policy-version staleness and the sender's rate limit.
   A message is accepted or rejected whole (gossip forwards whole messages); only an
   accepted one leaves a trace in the state (nonces, rate tokens, versions).
2. `recheck` runs when the round loop drains the inbox: bans imposed since. The groups
   `admit` decoded travel with the message (kept by its bytes and source until then), so a
   message is decoded once; one whose entry was evicted under load gets the wire checks
   again. The Ed25519 check is repeated only with `recheck_signatures`.
3. `verify_content` runs in the round loop (it costs a task rebuild and re-scoring):
   copycat detection, the peer's share of verification time, rebuilding the task from its
   spec, the question text, and every claimed reward recomputed with the sender's declared
   format bonus. The rebuild and scoring run in the rescorer: a node's bounded worker
   process (`swarm.verify.rescore_pool`), or in this thread.

`record` feeds outcomes to the reputation, which throttles bad peers and names those to
ban. Thread-safe: the validator and the round loop call in from different threads.

The verifier holds its parts under one lock: the cheap checks' state (`swarm.verify.admission`),
each peer's reputation and the bans (`swarm.verify.standing`), each peer's share of
verification time (`swarm.verify.budget`); its settings are `swarm.verify.settings`'s.
Deliberately not here: the ledger (the node stores rejections and bans) and the transport.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.tasks import Scoring, Task, claim_rules
from swarm.verify import rules
from swarm.verify.admission import Admission
from swarm.verify.budget import VerifyBudget
from swarm.verify.message import Accepted, Rejection, check_group, check_message, collateral
from swarm.verify.reputation import Reputation
from swarm.verify.rescore_pool import InProcess, Rescorer
from swarm.verify.settings import VerifySettings, auto_byte_burst, task_catalogue
from swarm.verify.standing import PeerStanding, blamed_peer
from swarm.verify.tracking import DecodedMessages, RecentGroups
from swarm.wire import RolloutGroup, SignedGroup
from swarm.wire.signing import check_group_signature

__all__ = [
    "Verifier",
    "VerifySettings",
    "auto_byte_burst",
    "blamed_peer",
    "task_catalogue",
]


class Verifier:
    """Checks peers' groups and keeps what the checks need to remember (bounded)."""

    def __init__(
        self,
        settings: VerifySettings,
        clock: Callable[[], float] = time.time,
        own_peer_id: str = "",
        rescorer: Rescorer | None = None,
    ):
        """`rescorer` rebuilds and scores a group (`swarm.verify.rescore_pool`): a node's
        `RescoreWorker`; by default `InProcess`, unbounded."""
        self.settings = settings
        self.clock = clock
        self.own_peer_id = own_peer_id
        self._rescorer = rescorer or InProcess()
        self._budget = VerifyBudget(settings.peer_verify_share, settings.peer_verify_burst_s)
        self._standing = PeerStanding(settings.reputation, own_peer_id, settings.allow_list)
        self._admission = Admission(settings, self._standing.reputation)
        self._lock = threading.Lock()  # over all of the above: two threads call in
        self._recent = RecentGroups()
        self._admitted: DecodedMessages[list[Accepted]] = DecodedMessages()

    @property
    def reputation(self) -> Reputation:
        """Each peer's record and score (`swarm.verify.reputation`)."""
        return self._standing.reputation

    # -- 1. the gossip validator -----------------------------------------------------------------

    def admit(self, data: bytes, source: str) -> tuple[list[Accepted], list[Rejection]]:
        """All cheap checks on one gossip message. Never raises.

        A message published by a banned peer is refused before it is even decoded."""
        if source and source in self.banned:
            return [], [Rejection(Reason.BANNED, "the publisher is banned", source, "")]
        accepted, rejected = check_message(data, source, self.settings.swarm_id)
        if rejected:
            return [], rejected
        now = self.clock()
        with self._lock:
            problem = self._admission.first_problem(accepted, now, self.banned)
            if problem is None:
                self._admission.commit(accepted, now)
                self._admitted.put(source, data, accepted)
                return accepted, []
        bad, error = problem
        out = [
            Rejection(
                error.reason,
                error.detail,
                source,
                bad.signed.content_hash,
                bad.group.sender,
                bad.signed,
                bad.group,
            )
        ]
        return [], out + collateral([a for a in accepted if a is not bad])

    def admit_pulled(
        self, signed: SignedGroup, group: RolloutGroup, source: str
    ) -> tuple[list[Accepted], list[Rejection]]:
        """The cheap checks of `admit` on one group pulled alone (it may be larger than a
        gossip message: `swarm.wire.MAX_PULLED_GROUP_BYTES`). Never raises."""
        if source in self.banned:
            return [], [Rejection(Reason.BANNED, "the sender is banned", source, "")]
        try:
            check_group(signed, group, source, self.settings.swarm_id)
        except RejectedMessage as e:
            digest = signed.content_hash
            return [], [Rejection(e.reason, e.detail, source, digest, group.sender, signed)]
        item = Accepted(signed, group, source)
        now = self.clock()
        with self._lock:
            problem = self._admission.first_problem([item], now, self.banned)
            if problem is None:
                self._admission.commit([item], now)
                return [item], []
        _, error = problem
        rejection = Rejection(
            error.reason, error.detail, source, signed.content_hash, group.sender, signed, group
        )
        return [], [rejection]

    def remember(
        self, sender: str, nonce: bytes, content_hash: str, policy_version: int, seen_at: float
    ) -> None:
        """Restore what an accepted group taught the checks (its nonce, its sender's version).

        A node calls this on start for groups its ledger accepted within the age limit, so a
        restart does not reopen the window for replayed nonces or version rollbacks.
        """
        with self._lock:
            self._admission.remember(sender, nonce, content_hash, policy_version, seen_at)

    # -- 2. draining the inbox ---------------------------------------------------------------------

    def recheck(self, data: bytes, source: str) -> tuple[list[Accepted], list[Rejection]]:
        """The groups of a message the validator passed, less senders banned since. No raise."""
        with self._lock:
            admitted = self._admitted.take(source, data)
        if admitted is None:  # evicted under load: decode again
            accepted, rejected = check_message(
                data, source, self.settings.swarm_id, self.settings.recheck_signatures
            )
        else:
            accepted, rejected = self._signatures_again(admitted)
        banned = self.banned
        ok = []
        for item in accepted:
            if item.group.sender in banned:
                rejected.append(
                    Rejection(
                        Reason.BANNED,
                        "banned after the message arrived",
                        source,
                        item.signed.content_hash,
                        item.group.sender,
                        item.signed,
                        item.group,
                    )
                )
            else:
                ok.append(item)
        return ok, rejected

    def _signatures_again(self, admitted: list[Accepted]) -> tuple[list[Accepted], list[Rejection]]:
        """With `recheck_signatures`, the Ed25519 check once more (the message is refused whole)."""
        if not self.settings.recheck_signatures:
            return admitted, []
        good, bad = [], []
        for item in admitted:
            try:
                check_group_signature(item.signed, item.group.sender)
            except RejectedMessage as e:
                bad.append(
                    Rejection(
                        e.reason,
                        e.detail,
                        item.source,
                        item.signed.content_hash,
                        item.group.sender,
                        item.signed,
                    )
                )
            else:
                good.append(item)
        return (good, []) if not bad else ([], bad + collateral(good))

    # -- 3. the expensive checks -------------------------------------------------------------------

    def verify_content(
        self,
        group: RolloutGroup,
        format_weight: float,
        scoring: Scoring | None = None,
        peer: str = "",
    ) -> tuple[Task, tuple[float, ...]]:
        """Copycat, task rebuild, question and reward checks; returns the task and *our* rewards
        (under `scoring`, else the lenient rule with partial credit and `format_weight`).

        Claimed rewards must match one of the scorings the sender may have used
        (`claim_rules`). The rebuild and scoring run in the rescorer, charged to `peer` (the
        publisher; the sender if not given), which must have verification time left.
        Raises `RejectedMessage` (copycat, verify_budget, bad_task, question_mismatch,
        verify_timeout, verify_memory, verify_crashed, reward_mismatch).
        """
        prints = rules.fingerprint(group.completions)
        peer = peer or group.sender
        with self._lock:
            earlier = self._recent.get(group.task)
            allowed = self._budget.allows(peer, self.clock())
        rules.check_not_copy(group.sender, prints, earlier, self.settings.copycat_overlap)
        if not allowed:
            raise RejectedMessage(
                Reason.VERIFY_BUDGET,
                f"{peer[:16]}... used its share of verification time; refills at "
                f"{self.settings.peer_verify_share:g} s/s",
            )
        attempt = self._rescorer(group)
        with self._lock:
            self._budget.charge(peer, attempt.seconds, self.clock())
        rescored = attempt.result()
        rules.check_rewards_any(
            group.rewards,
            [rescored.scored(s) for s in claim_rules(group.format_bonus)],
            self.settings.reward_tolerance,
        )
        with self._lock:
            self._recent.add(group.task, (group.sender, prints))
        return rescored.task, rescored.scored(scoring or Scoring(format_weight))

    @property
    def rescorer(self) -> Rescorer:
        """What rebuilds and scores peers' groups (a node's `RescoreWorker`, or `InProcess`)."""
        return self._rescorer

    def start(self) -> None:
        """Start the rescorer's worker process, if it has one (it gets ready in the background)."""
        self._rescorer.start()

    def close(self) -> None:
        """Stop the rescorer's worker process, if it has one."""
        self._rescorer.close()

    def note_own(self, group: RolloutGroup) -> None:
        """Remember a group this node published, so a peer re-signing it is caught as a copycat."""
        with self._lock:
            self._recent.add(group.task, (group.sender, rules.fingerprint(group.completions)))

    # -- reputation and bans -----------------------------------------------------------------------

    def record(
        self,
        accepted: Iterable[Accepted],
        rejected: Iterable[Rejection],
        counted: Mapping[tuple[str, Reason], int] | None = None,
    ) -> list[tuple[str, str]]:
        """Feed outcomes to the reputation (`PeerStanding.record`): accepted and rejected
        groups, and rejections `counted` by (blamed peer, reason). Return (peer, reason) of
        peers to ban now (already refused)."""
        with self._lock:
            return self._standing.record(accepted, rejected, counted)

    def restore_reputation(self, outcomes: Iterable[tuple[str, str, str, str, int]]) -> None:
        """Rebuild reputations from (source, sender, status, reason, count) rows of the ledger."""
        with self._lock:
            self._standing.restore(outcomes)

    def set_bans(self, peers: Iterable[str]) -> None:
        """Replace the ban set (as read from the ledger); a peer whose ban was lifted starts afresh."""
        with self._lock:
            self._standing.set_bans(peers)

    @property
    def banned(self) -> frozenset[str]:
        return self._standing.banned
