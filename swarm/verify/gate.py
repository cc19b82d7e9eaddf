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

Deliberately not here: the ledger (the node stores rejections and bans) and the transport.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from swarm.config import GenerationSection, VerifySection
from swarm.config.peers import AUTO_BYTE_BURST
from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason, Status
from swarm.tasks import Scoring, Task, canonical_config, claim_rules
from swarm.verify import rules
from swarm.verify.budget import VerifyBudget
from swarm.verify.message import Accepted, Rejection, check_group, check_message, collateral
from swarm.verify.reputation import Reputation, ReputationSettings
from swarm.verify.rescore_pool import InProcess, Rescorer
from swarm.verify.tracking import DecodedMessages, NonceCache, RateLimits, RecentGroups
from swarm.wire import RolloutGroup, SignedGroup
from swarm.wire.signing import check_group_signature


def blamed_peer(source: str, sender: str, reason: Reason | None = None) -> str:
    """Whom a group counts for: the publishing peer, else a claimed sender its signature proved.

    A rejection before the signature was known to be good (`Reason.unsigned`) proves nothing
    about the claimed sender, so only the (transport-authenticated) source is blamed.
    """
    return source or ("" if reason is not None and reason.unsigned else sender)


BYTES_PER_TOKEN = 16  # a completion's text and token ids on the wire, generously
MIN_BYTE_BURST = 8 * 1024 * 1024


def auto_byte_burst(generation) -> int:
    """`verify.rate_bytes_burst = -1`: what two of our own rounds would send, at least 8 MiB."""
    g = generation
    tokens = g.questions_per_round * g.completions_per_question * g.max_new_tokens
    return max(MIN_BYTE_BURST, 2 * tokens * BYTES_PER_TOKEN)


def byte_burst(burst: int, generation) -> int:
    """`verify.rate_bytes_burst` in bytes: `AUTO` resolved from the node's own rounds."""
    return auto_byte_burst(generation) if burst == AUTO_BYTE_BURST else burst


# The defaults below are the config's (`swarm.config.VerifySection`): one source for each.
_CONFIG = VerifySection()


@dataclass(frozen=True)
class VerifySettings:
    """What the verifier enforces (built from the config's [verify] and [p2p] sections;
    each default is the config key's, `rate_bytes_burst` resolved for the default rounds)."""

    swarm_id: str
    allow_list: frozenset[str] = frozenset()
    max_age_s: float = _CONFIG.max_age_s
    max_future_s: float = _CONFIG.max_future_s
    max_version_rewind: int = _CONFIG.max_version_rewind
    reward_tolerance: float = _CONFIG.reward_tolerance
    rate_groups_per_s: float = _CONFIG.rate_groups_per_s
    rate_burst: int = _CONFIG.rate_burst
    rate_bytes_per_s: float = _CONFIG.rate_bytes_per_s
    rate_bytes_burst: int = byte_burst(_CONFIG.rate_bytes_burst, GenerationSection())
    copycat_overlap: float = _CONFIG.copycat_overlap
    recheck_signatures: bool = _CONFIG.recheck_signatures
    # (dataset, canonical config JSON) a peer's task may name; None: any (offline tools, tests;
    # a node's is its own mix and verify.task_catalogue)
    task_catalogue: frozenset[tuple[str, str]] | None = None
    reputation: ReputationSettings = field(default_factory=ReputationSettings)
    peer_verify_share: float = _CONFIG.peer_verify_share  # seconds of re-scoring a second
    peer_verify_burst_s: float = _CONFIG.peer_verify_burst_s  # 0: no per-peer limit

    @classmethod
    def from_config(cls, config) -> VerifySettings:
        v = config.verify
        return cls(
            swarm_id=config.p2p.swarm_id,
            allow_list=frozenset(config.p2p.allow_list),
            max_age_s=v.max_age_s,
            max_future_s=v.max_future_s,
            max_version_rewind=v.max_version_rewind,
            reward_tolerance=v.reward_tolerance,
            rate_groups_per_s=v.rate_groups_per_s,
            rate_burst=v.rate_burst,
            rate_bytes_per_s=v.rate_bytes_per_s,
            rate_bytes_burst=byte_burst(v.rate_bytes_burst, config.generation),
            copycat_overlap=v.copycat_overlap,
            recheck_signatures=v.recheck_signatures,
            task_catalogue=task_catalogue(config),
            reputation=ReputationSettings.from_config(config),
            peer_verify_share=v.peer_verify_share,
            peer_verify_burst_s=v.peer_verify_burst_s,
        )


def task_catalogue(config) -> frozenset[tuple[str, str]]:
    """The tasks peers' groups may name: the node's own mix and `verify.task_catalogue`."""
    from swarm.config import task_mix

    entries = [(e.dataset, dict(e.config)) for e in task_mix(config)]
    entries += [
        (str(e["dataset"]), dict(e.get("config", {}))) for e in config.verify.task_catalogue
    ]
    return frozenset((dataset, canonical_config(cfg)) for dataset, cfg in entries)


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
        self.reputation = Reputation(settings.reputation)
        self._lock = threading.Lock()
        self._nonces = NonceCache(ttl_s=settings.max_age_s)
        self._rates = RateLimits(settings.rate_groups_per_s, settings.rate_burst)
        self._byte_rates = RateLimits(settings.rate_bytes_per_s, settings.rate_bytes_burst)
        self._versions: collections.OrderedDict[str, int] = (
            collections.OrderedDict()
        )  # newest per sender
        self._recent = RecentGroups()
        self._banned: frozenset[str] = frozenset()
        self._admitted: DecodedMessages[list[Accepted]] = DecodedMessages()

    # -- 1. the gossip validator -----------------------------------------------------------------

    def admit(self, data: bytes, source: str) -> tuple[list[Accepted], list[Rejection]]:
        """All cheap checks on one gossip message. Never raises.

        A message published by a banned peer is refused before it is even decoded."""
        if source and source in self._banned:
            return [], [Rejection(Reason.BANNED, "the publisher is banned", source, "")]
        accepted, rejected = check_message(data, source, self.settings.swarm_id)
        if rejected:
            return [], rejected
        now = self.clock()
        with self._lock:
            problem = self._first_problem(accepted, now)
            if problem is None:
                self._commit(accepted, now)
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
        if source in self._banned:
            return [], [Rejection(Reason.BANNED, "the sender is banned", source, "")]
        try:
            check_group(signed, group, source, self.settings.swarm_id)
        except RejectedMessage as e:
            digest = signed.content_hash
            return [], [Rejection(e.reason, e.detail, source, digest, group.sender, signed)]
        item = Accepted(signed, group, source)
        now = self.clock()
        with self._lock:
            problem = self._first_problem([item], now)
            if problem is None:
                self._commit([item], now)
                return [item], []
        _, error = problem
        rejection = Rejection(
            error.reason, error.detail, source, signed.content_hash, group.sender, signed, group
        )
        return [], [rejection]

    def _first_problem(
        self, accepted: list[Accepted], now: float
    ) -> tuple[Accepted, RejectedMessage] | None:
        s = self.settings
        nonces: dict[tuple[str, bytes], str] = {}
        wanted: collections.Counter[str] = collections.Counter()
        wanted_bytes: collections.Counter[str] = collections.Counter()
        for item in accepted:
            group, digest = item.group, item.signed.content_hash
            try:
                rules.check_allowed(group.sender, s.allow_list)
                rules.check_not_banned(group.sender, self._banned)
                rules.check_task_listed(group.task, s.task_catalogue)
                key = (group.sender, bytes(group.nonce))
                first = nonces.get(key) or self._nonces.lookup(*key)
                if first == digest:
                    raise RejectedMessage(Reason.DUPLICATE, "already received")
                if first is not None:
                    raise RejectedMessage(
                        Reason.REPLAYED_NONCE,
                        "the sender already used this nonce for another group",
                    )
                rules.check_age(group.created_at, now, s.max_age_s, s.max_future_s)
                rules.check_version(
                    group.policy_version, self._versions.get(group.sender), s.max_version_rewind
                )
            except RejectedMessage as e:
                return item, e
            nonces[key] = digest
            wanted[group.sender] += 1
            wanted_bytes[group.sender] += len(item.signed.body)
        for sender, n in wanted.items():
            factor = self.reputation.rate_factor(sender)
            if not self._rates.allows(sender, n, now, factor):
                what = "groups"
            elif not self._byte_rates.allows(sender, wanted_bytes[sender], now, factor):
                what = "bytes"
            else:
                continue
            item = next(a for a in accepted if a.group.sender == sender)
            return item, RejectedMessage(
                Reason.RATE_LIMITED, f"{sender[:16]}... sent more {what} than its rate limit allows"
            )
        return None

    def _commit(self, accepted: list[Accepted], now: float) -> None:
        for item in accepted:
            group = item.group
            self._nonces.add(group.sender, bytes(group.nonce), item.signed.content_hash, now)
            newest = self._versions.get(group.sender, -1)
            self._versions[group.sender] = max(newest, group.policy_version)
            self._versions.move_to_end(group.sender)
        while len(self._versions) > 100_000:
            self._versions.popitem(last=False)

    def remember(
        self, sender: str, nonce: bytes, content_hash: str, policy_version: int, seen_at: float
    ) -> None:
        """Restore what an accepted group taught the checks (its nonce, its sender's version).

        A node calls this on start for groups its ledger accepted within the age limit, so a
        restart does not reopen the window for replayed nonces or version rollbacks.
        """
        with self._lock:
            self._nonces.add(sender, bytes(nonce), content_hash, seen_at)
            self._versions[sender] = max(self._versions.get(sender, -1), policy_version)
            self._versions.move_to_end(sender)

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
        banned = self._banned
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
        """Feed outcomes to the reputation: accepted and rejected groups, and rejections
        `counted` by (blamed peer, reason). Return (peer, reason) of peers to ban now (already
        refused)."""
        to_ban: dict[str, str] = {}
        penalties = collections.Counter(
            (blamed_peer(r.source, r.sender, r.reason), r.reason) for r in rejected
        )
        penalties.update(counted or {})
        with self._lock:
            for item in accepted:
                self.reputation.accepted(
                    blamed_peer(item.source, item.group.sender), item.group.finished
                )
            for (peer, reason), n in penalties.items():
                if not peer or peer == self.own_peer_id:
                    continue
                self.reputation.rejected(peer, reason, n)
                if (
                    peer not in self._banned
                    and peer not in self.settings.allow_list
                    and self.reputation.should_ban(peer)
                ):
                    rec = self.reputation.record(peer)
                    to_ban[peer] = (
                        f"score {rec.score:.3f} after {sum(rec.rejected.values())} rejected groups"
                    )
            if to_ban:
                self._banned = self._banned | frozenset(to_ban)
        return list(to_ban.items())

    def restore_reputation(self, outcomes: Iterable[tuple[str, str, str, str, int]]) -> None:
        """Rebuild reputations from (source, sender, status, reason, count) rows of the ledger.

        Restores counts only: whether accepted groups' completions terminated is not kept
        apart in the ledger, and bans come back from the ledger's own table.
        """
        with self._lock:
            for source, sender, status, code, n in outcomes:
                reason = Reason.from_stored(code) if status == Status.REJECTED else None
                peer = blamed_peer(source, sender, reason)
                if not peer or peer == self.own_peer_id:
                    continue
                if status == Status.ACCEPTED:
                    self.reputation.record(peer).accepted += n
                elif reason is not None:
                    self.reputation.record(peer).rejected[reason] += n

    def set_bans(self, peers: Iterable[str]) -> None:
        """Replace the ban set (as read from the ledger); a peer whose ban was lifted starts afresh."""
        new = frozenset(peers)
        with self._lock:
            for peer in self._banned - new:
                self.reputation.forget(peer)
            self._banned = new

    @property
    def banned(self) -> frozenset[str]:
        return self._banned
