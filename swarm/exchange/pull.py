"""The pull exchange: announce groups, sample peers, pull only the groups chosen for training.

Gossiping every group to every node makes a node's cost grow with the swarm: at 1,000
nodes sharing 16 groups a round it would receive and verify 16,000 groups a round to train
on J of them. Here a node's cost per round depends on its own settings only
(docs/SCALE.md):

- publishing: each of its groups is served under `group_key(blob_hash)` (the SHA-256 of
  the signed group exactly as served), and a small signed `GroupAnnouncement` of each
  (blob hash, size, task, claimed rewards, version) goes into the list it serves under
  `ANNOUNCEMENTS_KEY` (its latest round), with hints of the peers that fetched each group
  in full (holders: they serve it too);
- collecting, within one time budget a round (`round_budget_s`; fetches side by side,
  `swarm.exchange.pull_fetch`, each capped at the size it may have): it refreshes its view of
  the swarm (`swarm.exchange.peer_view`), asks `pull_lists` peers sampled from it for
  their lists, checks each announcement cheaply (`swarm.verify.announcements`), keeps the
  fresh ones as candidates, chooses `pull_groups` of them with the trainer's sampler
  (uniform, at most `per_peer_cap` per sender, only groups whose claimed rewards carry
  signal) taken one sender at a time (`balanced`), and pulls them, content-addressed, from
  their sender and its known holders in a random order (the load spreads over holders);
- exact blame: served bytes of another size or hash are the serving peer's fault alone
  (refused before decoding; the next source is tried); the announced bytes are the
  sender's, so whatever is wrong with them (signature, fields) is blamed on the sender; a
  pull that admits nothing counts as failed; a sender that announces and does not serve
  leaves the view, and past `unserved_ban_after` such pulls in a row each is a hard
  rejection (`not_served`), towards a ban;
- an admitted group passes `Verifier.admit` like a gossiped group, and the caller verifies
  it fully (task rebuilt, rewards re-scored) before training, as always;
- a round never waits twice on a peer that is gone or slow: a peer that failed to answer is
  suspended until its backoff has passed and it is heard of anew
  (`swarm.exchange.peer_backoff`); over libp2p the round asks only peers seen alive (vouched
  for), and hears the views of the others off the round (probes, `Fetcher.later`), so
  addresses learned from a view are never dialled in the round before they answered; a
  banned peer is neither asked nor passed on; a sender that takes a group fetch and sends
  nothing is refused hard (`fetch_too_slow`, towards a ban, like one that serves other
  bytes) and suspended.

Why this is a fair sample of the swarm: the peers asked are a uniform sample of a view that
is itself a random subset of the swarm, so every sender is equally likely to be asked, and
each of its groups is as likely to be chosen as another's of the same sender, whoever is
connected to whom; a sender that announces more groups gains nothing (`balanced`), and no
sender gets more than `per_peer_cap` a round.

Deliberately not here: full verification, pooling, ledgers (the caller's), or the transport.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from swarm.core.errors import RejectedMessage, TransportError
from swarm.core.reasons import Reason
from swarm.exchange.history_sample import DEFAULT_SKETCH
from swarm.exchange.peer_backoff import PeerBackoff
from swarm.exchange.peer_view import (
    DEFAULT_CAPACITY,
    DEFAULT_SAMPLED_VIEWS,
    MOST_SAMPLED_VIEWS,
    PeerView,
)
from swarm.exchange.pull_choice import Attempt, choose_pulls
from swarm.exchange.pull_fetch import Fetcher, Outcome, Request
from swarm.exchange.pull_later import OffRound
from swarm.p2p.transport import Transport
from swarm.verify.announcements import AnnouncementGate, check_matches, check_served
from swarm.verify.gate import Verifier
from swarm.verify.message import Accepted, Rejection
from swarm.wire import (
    ANNOUNCEMENTS_KEY,
    MAX_ANNOUNCEMENTS_MESSAGE_BYTES,
    MAX_ANNOUNCEMENTS_PER_MESSAGE,
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
    unpack_announcements,
)
from swarm.wire.signing import sign_announcement

GROUP_KEY_PREFIX = group_key("")
REFETCH_TIMEOUT_S = 1.0  # a list asked again in the round, of a peer that answered just before
HOLDER_TIMEOUT_S = 1.0  # a hinted holder not vouched for: the time it gets before the next
HINT_MEMORY = 4096  # blob hashes whose holder hints a node remembers (and senders' misses)


@dataclass(frozen=True)
class PullSettings:
    """How much a node asks and pulls per round (its whole cost; nothing depends on N)."""

    pull_lists: int = 8  # peers asked for their announcements each round
    pull_groups: int = 10  # groups pulled each round (J plus a margin for failures)
    per_peer_cap: int = 2  # of those, at most this many from one sender
    keep_rounds: int = 3  # own and pulled groups stay served this many rounds
    # Own groups stay announced this many rounds (at most keep_rounds): a list then names the
    # holders of the previous round's groups, who fetched them after they were first announced.
    announce_rounds: int = 2
    candidate_rounds: int = 1  # announcements stay candidates this many rounds
    fetch_timeout_s: float = 5.0  # one fetch at most
    list_wait_s: float = 0.25  # over libp2p: a round waits this long, once, for lists asked
    fresh_list_s: float = 0.5  # ... and asks again, in the round, lists older than this
    round_budget_s: float = 15.0  # every fetch of a round (view, lists by half of it, groups)
    parallel_fetches: int = 8  # fetches side by side (over libp2p; in memory one at a time)
    unserved_ban_after: int = 8  # announced groups a sender did not serve in a row, then hard
    view_capacity: int = DEFAULT_CAPACITY
    view_sketch: int = DEFAULT_SKETCH  # IDs in the history sample asked peers come from (0: view)
    sampled_views: int = DEFAULT_SAMPLED_VIEWS  # views heard a refresh from the sample's peers
    most_sampled_views: int = MOST_SAMPLED_VIEWS  # ... while they still teach the node new IDs
    max_holders: int = 4  # holder hints kept (and tried) per group
    seed_salt: int = 0  # this node's task seed, hashed with its peer ID into its task stream
    every_group: bool = False  # pull any fresh group, signal or not (an observer records them)
    family: str = ""  # this node's model family, announced with its groups (family_digest)
    same_family: bool = False  # pull only groups announced with this node's family


@dataclass
class PullCounters:
    """What the pull exchange did since the last `take_counters`."""

    cheap_checked: int = 0  # announcements checked, plus pulled groups admitted or refused
    lists_asked: int = 0
    lists_failed: int = 0
    lists_refreshed: int = 0  # lists asked off the round, asked again in it (too old)
    announcements_refused: int = 0
    candidates: int = 0
    other_family: int = 0  # announcements skipped: another model family (same_family)
    pulls: int = 0
    pulls_failed: int = 0  # no group admitted: nothing served in time, or refused
    pulls_refused: int = 0  # of those, the announced bytes came and were refused
    pulled_from_holders: int = 0
    pulls_with_holders: int = 0  # pulls for which a holder besides the sender was known
    holder_misses: int = 0  # a hinted holder did not serve the group
    bad_holders: int = 0  # a source served bytes that are not the announced group
    stalled: int = 0  # a sender took a group fetch and sent nothing in time (refused hard)
    served: int = 0  # own or held groups peers fetched in full from this node
    probes: int = 0  # views fetched off the round (peers not vouched for, or only heard)
    probes_failed: int = 0
    suspended: int = 0  # peers not asked now: they failed to answer (`PeerBackoff`)


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
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.transport = transport
        self.verifier = verifier
        self.swarm_id = swarm_id
        self.key_pair = key_pair
        self.own_id = own_id
        self.settings = settings
        self.clock = clock
        self.monotonic = monotonic
        self.fetcher = Fetcher(
            transport,
            settings.parallel_fetches,
            fetch_timeout_s=settings.fetch_timeout_s,
            monotonic=monotonic,
        )
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
        self.view = PeerView(
            transport,
            own_id,
            capacity=settings.view_capacity,
            sketch=settings.view_sketch,
            sampled_views=settings.sampled_views,
            most_sampled_views=settings.most_sampled_views,
            backoff=PeerBackoff(),
            excluded=lambda peer: peer in verifier.banned,
        )
        # over libp2p views and lists are fetched off the round, lists only from peers seen
        # alive (vouched for); the others are heard (probed) first
        self.view.vouching = self.fetcher.threaded
        self.later = (
            OffRound(self.fetcher, self.view, settings.most_sampled_views)
            if self.fetcher.threaded
            else None
        )
        self.round = 0
        # blob hash -> (announcement, round it was learned)
        self.candidates: collections.OrderedDict[str, tuple[GroupAnnouncement, int]] = (
            collections.OrderedDict()
        )
        # blob hash -> {holder peer ID: addrs}, for own groups (who fetched them) and
        # for candidates (hints from their senders' lists)
        self.holders: collections.OrderedDict[str, dict[str, tuple[str, ...]]] = (
            collections.OrderedDict()
        )
        # (round, blob hash, signed) of the own groups announced, newest last
        self._announced: collections.deque[tuple[int, str, SignedAnnouncement]] = (
            collections.deque()
        )
        self._served: collections.deque[tuple[int, str]] = collections.deque()  # (round, key)
        self.counters = PullCounters()
        self._unserved: collections.OrderedDict[str, int] = collections.OrderedDict()
        # blob hashes this node chose to pull (never candidates again, whoever announces them)
        self._chosen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.last_asked: list[str] = []  # the peers asked for their lists in the last round

    def start(self) -> None:
        self.transport.serve_blob(ANNOUNCEMENTS_KEY, pack_announcements([]))
        s = self.settings
        self.view.refresh(s.fetch_timeout_s)
        self._ask_later(s.pull_lists if s.pull_groups else 0, s.fetch_timeout_s)

    def close(self) -> None:
        """Stop the fetch workers (the transport is the caller's)."""
        self.fetcher.close()

    def announced(self) -> list[str]:
        """Blob hashes of the groups this node announces now (its last `announce_rounds`
        rounds, newest last)."""
        return [digest for _, digest, _ in self._announced]

    def take_counters(self) -> dict:
        out, self.counters = self.counters, PullCounters()
        return asdict(out)

    # -- publishing -----------------------------------------------------------------------

    def announcement_of(
        self, signed: SignedGroup, group: RolloutGroup, served: bytes
    ) -> GroupAnnouncement:
        """What this node says of a group it serves as `served` (`encode_signed_group`)."""
        return GroupAnnouncement(
            base_hash=group.base_hash,
            blob_hash=hashlib.sha256(served).hexdigest(),
            created_at=group.created_at,
            family=self.settings.family,
            model=group.model,
            policy_version=group.policy_version,
            rewards=tuple(group.rewards),
            round=group.round,
            seed_salt=self.settings.seed_salt,
            sender=group.sender,
            size=len(served),
            swarm_id=group.swarm_id,
            task=group.task,
        )

    def publish(self, groups: list[tuple[SignedGroup, RolloutGroup]]) -> None:
        """Serve this round's groups and the list announcing them with those of the last
        `announce_rounds` - 1 rounds (still served), newest first past the list's bound."""
        window = max(1, min(self.settings.announce_rounds, self.settings.keep_rounds))
        while self._announced and self._announced[0][0] <= self.round - window:
            self._announced.popleft()
        for signed, group in groups:
            served = encode_signed_group(signed)
            announcement = self.announcement_of(signed, group, served)
            self._serve(group_key(announcement.blob_hash), served)
            signed_announcement = sign_announcement(announcement, self.key_pair)
            self._announced.append((self.round, announcement.blob_hash, signed_announcement))
        while len(self._announced) > MAX_ANNOUNCEMENTS_PER_MESSAGE:
            self._announced.popleft()
        self._serve_list()

    def _serve_list(self) -> None:
        """Serve the announcements with hints of who fetched each group since (holders)."""
        self._note_fetches()
        hints = [
            HolderHint(digest, peer, addrs)
            for _, digest, _ in self._announced  # oldest first: their holders are known by now
            for peer, addrs in self.holders.get(digest, {}).items()
        ]
        items = [signed for _, _, signed in self._announced]
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
        """Ask sampled peers for announcements, choose, pull and admit, all within the
        round's time budget (lists by half of it); then a new round. Over libp2p the view
        and the lists are fetched off the round (`swarm.exchange.pull_later`): this round
        takes the lists that arrived since the last one, and starts the next ones."""
        self._serve_list()
        s = self.settings
        started = self.monotonic()
        view_timeout = min(s.fetch_timeout_s, s.round_budget_s / 4)
        # a node that pulls nothing (sharing.shared_groups = 0) asks for no lists either
        lists = s.pull_lists if s.pull_groups else 0
        rejected: list[Rejection] = []
        if self.later is not None:
            self.later.take_views()
            outcomes = self._fresh_lists(started)
        else:  # in memory: one after another, as the simulation charges them
            self.view.refresh(view_timeout)
            asked = self.last_asked = self.view.sample(lists)
            self.counters.lists_asked += len(asked)
            requests = [
                Request(p, ANNOUNCEMENTS_KEY, MAX_ANNOUNCEMENTS_MESSAGE_BYTES) for p in asked
            ]
            outcomes = self.fetcher.fetch_all(requests, started + s.round_budget_s / 2)
        for outcome in outcomes:
            rejected += self._take_list(outcome)
        accepted, refused = self._pull_all(self._choose(), started + s.round_budget_s)
        rejected += refused
        self.counters.cheap_checked += len(accepted) + sum(
            r.reason != Reason.PULL_FAILED for r in rejected
        )
        self.round += 1
        for digest, (_, learned) in list(self.candidates.items()):
            if learned <= self.round - s.candidate_rounds:
                del self.candidates[digest]
        self._ask_later(lists, view_timeout)
        self.counters.suspended = self.view.backoff.count(self.view.refreshes)
        return accepted, rejected

    def _fresh_lists(self, started: float) -> list[Outcome]:
        """The lists fetched off the round; those older than `fresh_list_s` asked again
        now, of the peers that sent them (alive a moment ago)."""
        s = self.settings
        assert self.later is not None
        taken = self.later.take_lists(s.list_wait_s)
        stale = [
            dataclasses.replace(o.request, timeout=min(s.fetch_timeout_s, REFETCH_TIMEOUT_S))
            for o, age in taken
            if o.data is not None and age > s.fresh_list_s
        ]
        outcomes = [o for o, age in taken if not (o.data is not None and age > s.fresh_list_s)]
        self.counters.lists_refreshed += len(stale)
        return outcomes + self.fetcher.fetch_all(stale, started + s.round_budget_s / 2)

    def _ask_later(self, lists: int, view_timeout: float) -> None:
        """Over libp2p: start the next round's view refresh and lists off the round."""
        if self.later is None:
            return
        probes, failed = self.later.probes, self.later.probes_failed
        asked = self.last_asked = self.later.start(lists, view_timeout)
        self.counters.lists_asked += len(asked)
        self.counters.probes += self.later.probes - probes
        self.counters.probes_failed += self.later.probes_failed - failed
        self.later.probes = self.later.probes_failed = 0

    def _take_list(self, outcome: Outcome) -> list[Rejection]:
        """One peer's announcements: keep the fresh ones as candidates."""
        peer = outcome.request.peer
        if isinstance(outcome.error, TransportError) or outcome.data is None:
            self.counters.lists_failed += 1
            self.view.forget(peer, outcome.slow)  # if slow, not asked until heard of anew
            return []
        self.view.backoff.answered(peer)
        data = outcome.data
        try:
            if outcome.error is not None:
                raise outcome.error
            items, hints = unpack_announcements(data)
        except RejectedMessage as e:
            self.counters.lists_failed += 1
            return [Rejection(e.reason, e.detail, peer, hashlib.sha256(data).hexdigest())]
        rejected, now = [], self.clock()
        for signed in items:
            self.counters.cheap_checked += 1
            try:  # seen before and not pulled: a candidate again, now with its holders
                announcement = self.gate.check(signed, peer, now, again=True)
            except RejectedMessage as e:
                self.counters.announcements_refused += 1
                digest = hashlib.sha256(signed.body).hexdigest()
                rejected.append(Rejection(e.reason, e.detail, peer, digest, peer))
                continue
            if self.settings.same_family and announcement.family != self.settings.family:
                self.counters.other_family += 1  # not wanted, not wrong: never pulled
                continue
            if announcement.blob_hash not in self._chosen:
                self.candidates[announcement.blob_hash] = (announcement, self.round)
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
        chosen = choose_pulls(
            [a for a, _ in self.candidates.values()],
            s.pull_groups,
            seed=f"{self.own_id}:pull:{self.round}",
            now=self.clock(),
            max_age_s=self.verifier.settings.max_age_s,  # older would be rejected (stale)
            per_peer_cap=s.per_peer_cap,
            every_group=s.every_group,
        )
        for announcement in chosen:
            self.candidates.pop(announcement.blob_hash, None)
            self._chosen[announcement.blob_hash] = None
        while len(self._chosen) > HINT_MEMORY:
            self._chosen.popitem(last=False)
        return chosen

    def _sources(self, announcement: GroupAnnouncement) -> list[str]:
        """Whom to pull a group from, in turn: its sender and up to `max_holders` of its known
        holders, all in one random order. The load of a popular group spreads over everyone
        who holds it instead of falling on its sender first."""
        hinted = self.holders.get(announcement.blob_hash, {})
        holders = [
            p
            for p in hinted
            if p not in (announcement.sender, self.own_id) and self._may_ask_holder(p)
        ]
        rng = random.Random(f"{self.own_id}:{announcement.blob_hash}")
        rng.shuffle(holders)
        sources = [announcement.sender] + holders[: self.settings.max_holders]
        self.counters.pulls_with_holders += len(sources) > 1
        rng.shuffle(sources)
        for peer in sources:
            if hinted.get(peer):
                self.transport.learn_peer(peer, hinted[peer])
        return sources

    def _may_ask_holder(self, peer: str) -> bool:
        """A hinted holder may be asked unless banned or suspended (one not vouched for is
        asked within `HOLDER_TIMEOUT_S`)."""
        return not self.view.excluded(peer) and not self.view.backoff.suspended(
            peer, self.view.refreshes
        )

    def _pull_all(
        self, chosen: list[GroupAnnouncement], deadline: float
    ) -> tuple[list[Accepted], list[Rejection]]:
        """Pull every chosen group by `deadline`: each wave fetches every pending group from
        its next source, side by side; a source that fails or serves other bytes is passed
        over for the next."""
        attempts = [Attempt(a, self._sources(a)) for a in chosen]
        self.counters.pulls += len(attempts)
        pending = list(attempts)
        while pending and self.monotonic() < deadline:
            wave = [(attempt, attempt.sources.pop(0)) for attempt in pending]
            requests = [
                Request(
                    source,
                    group_key(a.announcement.blob_hash),
                    a.announcement.size,
                    True,
                    self._source_timeout(a.announcement, source),
                )
                for a, source in wave
            ]
            for (attempt, source), outcome in zip(
                wave, self.fetcher.fetch_all(requests, deadline), strict=True
            ):
                self._take_group(attempt, source, outcome)
            pending = [a for a in pending if not a.done and a.sources]
        accepted: list[Accepted] = []
        rejected: list[Rejection] = []
        for attempt in attempts:
            accepted += attempt.accepted
            rejected += self._outcome(attempt)
        return accepted, rejected

    def _source_timeout(self, announcement: GroupAnnouncement, source: str) -> float | None:
        """The sender answered its list this round; a holder not vouched for (its address
        comes from the sender's hints) gets a small budget before the next source."""
        if source == announcement.sender or not self.fetcher.threaded:
            return None
        return None if self.view.backoff.vouched(source) else HOLDER_TIMEOUT_S

    def _take_group(self, attempt: Attempt, source: str, outcome: Outcome) -> None:
        """One source's answer for one group. Bytes that are not the announced ones (size
        or hash) are the serving peer's fault alone; the announced bytes are the sender's
        own (it signed their hash): whatever is wrong with them is blamed on the sender, and
        no other source is tried (it would serve the same bytes)."""
        a = attempt.announcement
        sender, digest = a.sender, a.blob_hash
        if isinstance(outcome.error, TransportError):
            self.counters.holder_misses += source != sender
            attempt.sender_missed |= source == sender
            if outcome.stalled and source == sender:
                self._stalled(attempt, outcome)
            elif outcome.slow:
                self.view.forget(source)  # suspended: the round does not wait on it again
            return
        data = outcome.data or b""
        try:
            if outcome.error is not None:
                raise outcome.error
            check_served(a, data)
        except RejectedMessage as e:
            self.counters.bad_holders += 1
            attempt.refused.append(Rejection(e.reason, e.detail, source, digest, ""))
            return
        attempt.done = True
        self.counters.pulled_from_holders += source != sender
        self._unserved.pop(sender, None)
        try:
            signed = decode_signed_group(data)
            group = decode_group(signed.body)
            check_matches(a, group)
        except RejectedMessage as e:
            attempt.refused.append(Rejection(e.reason, e.detail, sender, digest, sender))
            return
        ok, bad = self._admit(signed, group, data, digest)
        attempt.accepted, attempt.refused = ok, attempt.refused + bad

    def _stalled(self, attempt: Attempt, outcome: Outcome) -> None:
        """The sender, which answered its list this round, took the fetch of a group it
        announced and sent nothing: refused hard (towards a ban, like serving other bytes),
        suspended, and its other announcements dropped (the round waits on it no more); a holder
        may still serve this one."""
        sender = attempt.announcement.sender
        self.counters.stalled += 1
        attempt.stalled = True
        detail = f"took the fetch and sent nothing ({outcome.error})"
        digest = attempt.announcement.blob_hash
        attempt.refused.append(Rejection(Reason.FETCH_TOO_SLOW, detail, sender, digest, sender))
        self.view.forget(sender, stalled=True)
        for key, (a, _) in list(self.candidates.items()):
            if a.sender == sender:
                del self.candidates[key]

    def _outcome(self, attempt: Attempt) -> list[Rejection]:
        """The rejections of a pull; a sender that announced a group and did not serve it
        leaves the view, and past `unserved_ban_after` such pulls in a row each one is a
        hard rejection (towards a ban)."""
        if attempt.accepted:
            return attempt.refused
        self.counters.pulls_failed += 1
        if attempt.done or attempt.stalled:  # the announced bytes came, and were refused
            self.counters.pulls_refused += attempt.done
            return attempt.refused
        sender, digest = attempt.announcement.sender, attempt.announcement.blob_hash
        reason = Reason.PULL_FAILED
        if attempt.sender_missed:
            self.view.forget(sender, slow=False)  # (suspended already if it cost time)
            misses = self._unserved.pop(sender, 0) + 1
            self._unserved[sender] = misses
            while len(self._unserved) > HINT_MEMORY:
                self._unserved.popitem(last=False)
            if misses > self.settings.unserved_ban_after > 0:
                reason = Reason.NOT_SERVED
        detail = "neither the sender nor a known holder served it in time"
        return attempt.refused + [Rejection(reason, detail, sender, digest, sender)]

    def _admit(
        self, signed: SignedGroup, group: RolloutGroup, data: bytes, blob_hash: str
    ) -> tuple[list[Accepted], list[Rejection]]:
        """The gossip validator's checks on a pulled group (its sender as the source: the
        announced hash pins every byte a holder served); an admitted one is served on."""
        ok, bad = self.verifier.admit_pulled(signed, group, group.sender)
        if ok:
            self._serve(group_key(blob_hash), data)  # a holder now
        return ok, bad
