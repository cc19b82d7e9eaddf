"""The pull exchange: announce groups, sample peers, pull only the groups chosen for training.

Gossiping every group to every node makes a node's cost grow with the swarm: at 1,000
nodes sharing 16 groups a round it would receive and verify 16,000 groups a round to train
on J of them. Here a node's cost per round depends on its own settings only
(docs/SCALE.md):

- publishing: each of its groups is served under `group_key(content_hash)`, and a small
  signed `GroupAnnouncement` of each (content hash, task, claimed rewards, version, size)
  goes into the list it serves under `ANNOUNCEMENTS_KEY` (its latest round), with hints of
  the peers that fetched each group in full (holders: they serve it too);
- collecting: it refreshes its random view of the swarm (`swarm.node.peer_view`), asks
  `lists_per_round` peers drawn uniformly from the view for their lists, checks each
  announcement cheaply (`swarm.verify.announcements`), keeps the fresh ones as candidates,
  chooses `pull_groups` of them with the trainer's sampler (uniform, at most
  `per_sender_cap` per sender, only groups whose claimed rewards carry signal) taken one
  sender at a time (`balanced`), and pulls
  them, content-addressed, from their sender or, when it fails, from a holder;
- a pulled group must be exactly the announced one (else it is refused and the peer that
  served it is blamed), then passes `Verifier.admit` like a gossiped group, and the caller
  verifies it fully (task rebuilt, rewards re-scored) before training, as always.

Why this is a fair sample of the swarm: the peers asked are a uniform sample of a view that
is itself a random subset of the swarm, so every sender is equally likely to be asked, and
each of its groups is as likely to be chosen as another's of the same sender, whoever is
connected to whom; a sender that announces more groups gains nothing (`balanced`), and no
sender gets more than `per_sender_cap` a round.

Deliberately not here: full verification, pooling, ledgers (the caller's), or the transport.
"""

from __future__ import annotations

import collections
import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from swarm.errors import RejectedMessage, TransportError
from swarm.node.peer_view import DEFAULT_CAPACITY, PeerView
from swarm.p2p.transport import Transport
from swarm.sampling import Candidate, Staleness, choose_batch
from swarm.verify.announcements import AnnouncementGate, check_matches
from swarm.verify.gate import Verifier
from swarm.verify.message import Accepted, Rejection
from swarm.verify.reasons import Reason
from swarm.wire import (
    ANNOUNCEMENTS_KEY,
    MAX_HOLDER_HINTS,
    GroupAnnouncement,
    HolderHint,
    RolloutGroup,
    SignedAnnouncement,
    SignedGroup,
    decode_group,
    decode_signed_group,
    encode_signed_group,
    group_key,
    pack_announcements,
    pack_messages,
    unpack_announcements,
)
from swarm.wire.signing import sign_announcement

GROUP_KEY_PREFIX = group_key("")
HINT_MEMORY = 4096  # content hashes whose holder hints a node remembers


@dataclass(frozen=True)
class PullSettings:
    """How much a node asks and pulls per round (its whole cost; nothing depends on N)."""

    lists_per_round: int = 8  # peers asked for their announcements each round
    pull_groups: int = 10  # groups pulled each round (J plus a margin for failures)
    per_sender_cap: int = 2  # of those, at most this many from one sender
    keep_rounds: int = 3  # own and pulled groups stay served this many rounds
    candidate_rounds: int = 1  # announcements stay candidates this many rounds
    max_age_s: float = 600.0  # older announcements are not pulled
    fetch_timeout_s: float = 5.0
    view_capacity: int = DEFAULT_CAPACITY
    max_holders: int = 4  # holder hints kept (and tried) per group
    seed_salt: int = 0  # this node's task seed, hashed with its peer ID into its task stream


@dataclass
class PullCounters:
    """What the pull exchange did since the last `take_counters`."""

    cheap_checked: int = 0  # announcements checked, plus pulled groups admitted or refused
    lists_asked: int = 0
    lists_failed: int = 0
    announcements_refused: int = 0
    candidates: int = 0
    pulls: int = 0
    pulls_failed: int = 0  # no source served the group
    pulled_from_holders: int = 0
    holder_misses: int = 0  # a hinted holder did not serve the group
    bad_holders: int = 0  # a source served bytes that are not the announced group
    served: int = 0  # own or held groups peers fetched in full from this node


class PullExchange:
    """The pull exchange of one node (see the module docstring)."""

    def __init__(
        self,
        transport: Transport,
        verifier: Verifier,
        swarm_id: str,
        key_pair,
        own_id: str,
        settings: PullSettings = PullSettings(),
        *,
        clock: Callable[[], float] = time.time,
    ):
        self.transport = transport
        self.verifier = verifier
        self.swarm_id = swarm_id
        self.key_pair = key_pair
        self.own_id = own_id
        self.settings = settings
        self.clock = clock
        v = verifier.settings
        self.gate = AnnouncementGate(
            swarm_id,
            allow_list=v.allow_list,
            banned=lambda: verifier.banned,
            catalogue=v.task_catalogue,
            max_age_s=v.max_age_s,
            max_future_s=v.max_future_s,
            rate_per_s=v.rate_groups_per_s,
            burst=v.rate_burst,
        )
        self.view = PeerView(transport, own_id, capacity=settings.view_capacity)
        self.round = 0
        # content hash -> (announcement, round it was learned)
        self.candidates: collections.OrderedDict[str, tuple[GroupAnnouncement, int]] = (
            collections.OrderedDict()
        )
        # content hash -> {holder peer ID: addrs}, for own groups (who fetched them) and
        # for candidates (hints from their senders' lists)
        self.holders: collections.OrderedDict[str, dict[str, tuple[str, ...]]] = (
            collections.OrderedDict()
        )
        self._announced: list[tuple[str, SignedAnnouncement]] = []  # (content hash, signed)
        self._served: collections.deque[tuple[int, str]] = collections.deque()  # (round, key)
        self.counters = PullCounters()

    def start(self) -> None:
        self.transport.serve_blob(ANNOUNCEMENTS_KEY, pack_announcements([]))
        self.view.refresh(self.settings.fetch_timeout_s)

    def announced(self) -> list[str]:
        """Content hashes of the groups this node announces now (its latest round)."""
        return [digest for digest, _ in self._announced]

    def take_counters(self) -> dict:
        out, self.counters = self.counters, PullCounters()
        return asdict(out)

    # -- publishing -----------------------------------------------------------------------

    def announcement_of(self, signed: SignedGroup, group: RolloutGroup) -> GroupAnnouncement:
        return GroupAnnouncement(
            base_hash=group.base_hash,
            content_hash=signed.content_hash,
            created_at=group.created_at,
            model=group.model,
            policy_version=group.policy_version,
            rewards=tuple(group.rewards),
            round=group.round,
            seed_salt=self.settings.seed_salt,
            sender=group.sender,
            size=len(signed.body),
            swarm_id=group.swarm_id,
            task=group.task,
        )

    def publish(self, groups: list[tuple[SignedGroup, RolloutGroup]]) -> None:
        """Serve this round's groups and the list announcing them (it replaces the last)."""
        self._announced = []
        for signed, group in groups:
            self._serve(group_key(signed.content_hash), encode_signed_group(signed))
            announcement = self.announcement_of(signed, group)
            self._announced.append(
                (signed.content_hash, sign_announcement(announcement, self.key_pair))
            )
        self._serve_list()

    def _serve_list(self) -> None:
        """Serve the announcements with hints of who fetched each group since (holders)."""
        self._note_fetches()
        hints = [
            HolderHint(digest, peer, addrs)
            for digest, _ in self._announced
            for peer, addrs in self.holders.get(digest, {}).items()
        ]
        items = [signed for _, signed in self._announced]
        self.transport.serve_blob(
            ANNOUNCEMENTS_KEY, pack_announcements(items, hints[:MAX_HOLDER_HINTS])
        )

    def _note_fetches(self) -> None:
        fetches = self.transport.served_blobs(GROUP_KEY_PREFIX)
        if not fetches:
            return
        addrs = {p.peer_id: p.addrs for p in self.transport.peers()}
        for fetch in fetches:
            self.counters.served += 1
            digest = fetch.key[len(GROUP_KEY_PREFIX) :]
            self._hint(digest, fetch.peer_id, addrs.get(fetch.peer_id, ()))

    def _hint(self, content_hash: str, peer: str, addrs: tuple[str, ...]) -> None:
        if peer == self.own_id:
            return
        known = self.holders.setdefault(content_hash, {})
        self.holders.move_to_end(content_hash)
        if peer in known or len(known) < self.settings.max_holders:
            known[peer] = tuple(addrs)
        while len(self.holders) > HINT_MEMORY:
            self.holders.popitem(last=False)

    def _serve(self, key: str, data: bytes) -> None:
        self.transport.serve_blob(key, data)
        self._served.append((self.round, key))
        while self._served and self._served[0][0] <= self.round - self.settings.keep_rounds:
            self.transport.unserve_blob(self._served.popleft()[1])

    # -- collecting -----------------------------------------------------------------------

    def collect(self) -> tuple[list[Accepted], list[Rejection]]:
        """Ask sampled peers for announcements, choose, pull and admit; then a new round."""
        self._serve_list()
        rejected: list[Rejection] = []
        self.view.refresh(self.settings.fetch_timeout_s)
        for peer in self.view.sample(self.settings.lists_per_round):
            rejected += self._ask(peer)
        accepted: list[Accepted] = []
        for announcement in self._choose():
            ok, bad = self._pull(announcement)
            accepted += ok
            rejected += bad
        self.counters.cheap_checked += len(accepted) + sum(
            r.reason != Reason.PULL_FAILED for r in rejected
        )
        self.round += 1
        for digest, (_, learned) in list(self.candidates.items()):
            if learned <= self.round - self.settings.candidate_rounds:
                del self.candidates[digest]
        return accepted, rejected

    def _ask(self, peer: str) -> list[Rejection]:
        """Fetch one peer's announcements; keep the fresh ones as candidates."""
        self.counters.lists_asked += 1
        try:
            data = self.transport.fetch_blob(peer, ANNOUNCEMENTS_KEY, self.settings.fetch_timeout_s)
        except TransportError:
            self.counters.lists_failed += 1
            self.view.forget(peer)
            return []
        try:
            items, hints = unpack_announcements(data)
        except RejectedMessage as e:
            return [Rejection(e.reason, e.detail, peer, hashlib.sha256(data).hexdigest())]
        rejected, now = [], self.clock()
        for signed in items:
            self.counters.cheap_checked += 1
            try:
                announcement = self.gate.check(signed, peer, now)
            except RejectedMessage as e:
                if e.reason != Reason.DUPLICATE:  # asked again before it announced anew
                    self.counters.announcements_refused += 1
                    digest = hashlib.sha256(signed.body).hexdigest()
                    rejected.append(Rejection(e.reason, e.detail, peer, digest, peer))
                continue
            self.candidates[announcement.content_hash] = (announcement, self.round)
        for hint in hints:
            if hint.content_hash in self.candidates:
                self._hint(hint.content_hash, hint.peer_id, hint.addrs)
        return rejected

    def _choose(self) -> list[GroupAnnouncement]:
        """This round's pulls: the trainer's uniform, per-sender-capped draw over candidates."""
        s = self.settings
        for digest, (_, learned) in list(self.candidates.items()):
            if learned <= self.round - s.candidate_rounds:
                del self.candidates[digest]
        self.counters.candidates = len(self.candidates)
        offered = [
            Candidate(
                a,
                a.rewards,
                sender=a.sender,
                policy_version=a.policy_version,
                received_at=a.created_at,
                round=a.round,
                family=a.task.dataset,
            )
            for a, _ in self.candidates.values()
        ]
        shuffled = choose_batch(
            [],
            offered,
            0,
            len(offered),
            seed=f"{self.own_id}:pull:{self.round}",
            now=self.clock(),
            staleness=Staleness(max_version_gap=None, max_age_s=s.max_age_s),
            per_peer_cap=s.per_sender_cap or None,
        ).shared
        chosen = balanced(shuffled, s.pull_groups)
        for announcement in chosen:
            self.candidates.pop(announcement.content_hash, None)
        return chosen

    def _sources(self, announcement: GroupAnnouncement) -> list[str]:
        """Whom to pull a group from: its sender, then its known holders in random order."""
        hinted = self.holders.get(announcement.content_hash, {})
        holders = [p for p in hinted if p not in (announcement.sender, self.own_id)]
        random.Random(f"{self.own_id}:{announcement.content_hash}").shuffle(holders)
        for peer in holders:
            if hinted[peer]:
                self.transport.learn_peer(peer, hinted[peer])
        return [announcement.sender] + holders[: self.settings.max_holders]

    def _pull(self, announcement: GroupAnnouncement) -> tuple[list[Accepted], list[Rejection]]:
        """Fetch an announced group (sender first, then holders), check it is the announced
        one, admit it; a source that serves other bytes is refused and blamed."""
        self.counters.pulls += 1
        sender, digest = announcement.sender, announcement.content_hash
        refused: list[Rejection] = []
        for source in self._sources(announcement):
            try:
                data = self.transport.fetch_blob(
                    source, group_key(digest), self.settings.fetch_timeout_s
                )
            except TransportError:
                self.counters.holder_misses += source != sender
                continue
            try:
                signed = decode_signed_group(data)
                check_matches(announcement, signed, decode_group(signed.body))
            except RejectedMessage as e:
                self.counters.bad_holders += 1
                refused.append(Rejection(e.reason, e.detail, source, digest, ""))
                continue
            self.counters.pulled_from_holders += source != sender
            ok, bad = self._admit(signed, data, sender)
            return ok, refused + bad
        self.counters.pulls_failed += 1
        if refused:  # what was served is on record, blamed on whoever served it
            return [], refused
        detail = "neither the sender nor a known holder served it"
        return [], [Rejection(Reason.PULL_FAILED, detail, sender, digest, sender)]

    def _admit(
        self, signed: SignedGroup, data: bytes, sender: str
    ) -> tuple[list[Accepted], list[Rejection]]:
        """The gossip validator's checks on a pulled group (its sender as the source: a
        holder only relayed what the content hash pins); an admitted one is served on."""
        message = pack_messages([signed])[0]
        ok, bad = self.verifier.admit(message, sender)
        if ok:
            ok, bad = self.verifier.recheck(message, sender)
        if ok:
            self._serve(group_key(signed.content_hash), data)  # a holder now
        return ok, bad


def balanced(shuffled: list[GroupAnnouncement], k: int) -> list[GroupAnnouncement]:
    """`k` of `shuffled` (a uniform order), one per sender in turn: every sender asked counts
    the same, however many groups it announced (a loud sender gains nothing)."""
    by_sender: dict[str, list[GroupAnnouncement]] = {}
    for announcement in shuffled:
        by_sender.setdefault(announcement.sender, []).append(announcement)
    queues = list(by_sender.values())
    chosen: list[GroupAnnouncement] = []
    while len(chosen) < k and queues:
        for queue in queues:
            if len(chosen) < k:
                chosen.append(queue.pop(0))
        queues = [q for q in queues if q]
    return chosen
