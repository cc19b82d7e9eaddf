"""The pull exchange: announce groups, sample peers, pull only the groups chosen for training.

Gossiping every group to every node makes a node's cost grow with the swarm: at 1,000
nodes sharing 16 groups a round it would receive and verify 16,000 groups a round to train
on J of them. Here a node's cost per round depends on its own settings only
(docs/SCALE.md):

- publishing (`swarm.exchange.pull_serve`): each of its groups is served under
  `group_key(blob_hash)` (the SHA-256 of the signed group exactly as served), and a small
  signed `GroupAnnouncement` of each (blob hash, size, task, claimed rewards, version) goes
  into the list it serves under `ANNOUNCEMENTS_KEY` (its latest round), with hints of the
  peers that fetched each group in full (holders: they serve it too);
- collecting, within one time budget a round (`round_budget_s`; fetches side by side,
  `swarm.exchange.pull_fetch`, each capped at the size it may have): it refreshes its view of
  the swarm (`swarm.exchange.peer_view`), asks `pull_lists` peers sampled from it for
  their lists, checks each announcement cheaply (`swarm.verify.announcements`), keeps the
  fresh ones as candidates (a list taken again unchanged is not checked again, and a peer
  whose list offers nothing it would pull is asked less often: `swarm.exchange.pull_lists`),
  chooses `pull_groups` of them with the trainer's sampler
  (uniform, at most `per_peer_cap` per sender, only groups whose claimed rewards carry
  signal, none the batch would skip as more than `max_version_lag` versions behind the
  version of this node's latest published groups) taken one sender at a time
  (`balanced`), and pulls them, content-addressed, from their sender and its known
  holders in a random order (the load spreads over holders; `swarm.exchange.pull_groups`);
- exact blame: served bytes of another size or hash are the serving peer's fault alone
  (refused before decoding; the next source is tried), and when they prove it (bytes of
  the announced size that do not hash to the key they were served under, or a sender
  serving another size than it signed: `wrong_bytes`) it is banned at once; the announced
  bytes are the
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

Here: the round's collection (views and lists, candidates, the choice); its settings and
counters are in `swarm.exchange.pull_settings`. Deliberately not here: full verification,
pooling, ledgers (the caller's), or the transport.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable

from swarm.core.errors import RejectedMessage, TransportError
from swarm.core.reasons import Reason
from swarm.exchange.peer_backoff import PeerBackoff
from swarm.exchange.peer_view import PeerView
from swarm.exchange.pull_candidates import Candidates
from swarm.exchange.pull_choice import OwnVersion
from swarm.exchange.pull_fetch import Fetcher, Outcome, Request
from swarm.exchange.pull_groups import GroupPuller
from swarm.exchange.pull_later import OffRound
from swarm.exchange.pull_lists import ListBackoff, ListVerdicts, Verdict
from swarm.exchange.pull_serve import PullServer
from swarm.exchange.pull_settings import PullCounters, PullSettings
from swarm.p2p.transport import Transport
from swarm.verify.announcements import AnnouncementGate
from swarm.verify.gate import Verifier
from swarm.verify.message import Accepted, Rejection
from swarm.wire import (
    ANNOUNCEMENTS_KEY,
    MAX_ANNOUNCEMENTS_MESSAGE_BYTES,
    GroupAnnouncement,
    RolloutGroup,
    SignedGroup,
    unpack_announcements,
)

__all__ = ["PullCounters", "PullExchange", "PullSettings"]

REFETCH_TIMEOUT_S = 1.0  # a list asked again in the round, of a peer that answered just before


class PullExchange:
    """The pull exchange of one node (see the module docstring)."""

    def __init__(
        self,
        transport: Transport,
        verifier: Verifier,
        swarm_id: str,
        key_pair,
        own_id: str,
        settings: PullSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.transport = transport
        self.verifier = verifier
        self.swarm_id = swarm_id
        self.key_pair = key_pair
        self.own_id = own_id
        self.settings = settings = settings or PullSettings()
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
        self.counters = PullCounters()
        # over libp2p peers pull from lists up to `fresh_list_s` old (`swarm.exchange.pull_later`),
        # within a fetch's timeout: a group stays served that long after it left the list
        linger_s = settings.fresh_list_s + settings.fetch_timeout_s if self.later else 0.0
        self.server = PullServer(
            transport,
            key_pair,
            own_id,
            settings,
            self.counters,
            linger_s=linger_s,
            monotonic=monotonic,
        )
        self.puller = GroupPuller(
            self.fetcher,
            self.view,
            verifier,
            self.server,
            self.counters,
            settings,
            own_id,
            monotonic,
        )
        self.candidates = Candidates(settings, own_id, v.max_age_s, clock)
        self.last_asked: list[str] = []  # the peers asked for their lists in the last round
        self.verdicts = ListVerdicts()  # each peer's last list, checked once
        self.rests = ListBackoff()  # peers whose lists offered nothing, asked less often

    @property
    def own(self) -> OwnVersion | None:
        """This node's model and version, as its latest published groups state them."""
        return self.candidates.own

    def start(self) -> None:
        self.server.start()
        s = self.settings
        self.view.refresh(s.fetch_timeout_s)
        self._ask_later(s.pull_lists if s.pull_groups else 0, s.fetch_timeout_s)

    def close(self) -> None:
        """Stop the fetch workers (the transport is the caller's)."""
        self.fetcher.close()

    def announced(self) -> list[str]:
        """Blob hashes of the groups this node announces now (its last `announce_rounds`
        rounds, newest last)."""
        return self.server.announced()

    def take_counters(self) -> dict:
        return self.counters.take()

    # -- publishing (`swarm.exchange.pull_serve`) ----------------------------------------

    def announcement_of(
        self, signed: SignedGroup, group: RolloutGroup, served: bytes
    ) -> GroupAnnouncement:
        """What this node says of a group it serves as `served` (`encode_signed_group`)."""
        return self.server.announcement_of(signed, group, served)

    def publish(self, groups: list[tuple[SignedGroup, RolloutGroup]]) -> None:
        """Serve this round's groups and the list announcing them (`PullServer.publish`);
        their version is this node's, that the round's pulls are chosen against."""
        if groups:
            self.candidates.own = OwnVersion.of(groups[-1][1])
        self.server.publish(groups, self.round)

    # -- collecting -----------------------------------------------------------------------

    def collect(self) -> tuple[list[Accepted], list[Rejection]]:
        """Ask sampled peers for announcements, choose, pull and admit, all within the
        round's time budget (lists by half of it); then a new round. Over libp2p the view
        and the lists are fetched off the round (`swarm.exchange.pull_later`): this round
        takes the lists that arrived since the last one, and starts the next ones."""
        self.server.serve_list()
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
            resting = self.rests.resting_peers(self.round)
            asked = self.last_asked = self.view.sample(lists, busy=resting)
            self.counters.lists_asked += len(asked)
            requests = [
                Request(p, ANNOUNCEMENTS_KEY, MAX_ANNOUNCEMENTS_MESSAGE_BYTES) for p in asked
            ]
            outcomes = self.fetcher.fetch_all(requests, started + s.round_budget_s / 2)
        for outcome in outcomes:
            rejected += self._take_list(outcome)
        accepted, refused = self.puller.pull_all(
            self._choose(), started + s.round_budget_s, self.round
        )
        rejected += refused
        self.candidates.drop_senders(self.puller.stalled_senders)
        self.counters.cheap_checked += len(accepted) + sum(
            r.reason != Reason.PULL_FAILED for r in rejected
        )
        self.round += 1
        self.candidates.expire(self.round)
        self._ask_later(lists, view_timeout)
        self.counters.suspended = self.view.backoff.count(self.view.refreshes)
        self.counters.resting = len(self.rests.resting_peers(self.round))
        return accepted, rejected

    def _fresh_lists(self, started: float) -> list[Outcome]:
        """The lists fetched off the round; those older than `fresh_list_s` asked again
        now, of the peers that sent them (alive a moment ago), but for an unchanged list
        that offered nothing (asked again, it would offer nothing either)."""
        s = self.settings
        assert self.later is not None
        outcomes: list[Outcome] = []
        stale: list[Request] = []
        for o, age in self.later.take_lists(s.list_wait_s):
            if o.data is None or age <= s.fresh_list_s or self._offers_nothing(o):
                outcomes.append(o)
            else:
                timeout = min(s.fetch_timeout_s, REFETCH_TIMEOUT_S)
                stale.append(dataclasses.replace(o.request, timeout=timeout))
        self.counters.lists_refreshed += len(stale)
        return outcomes + self.fetcher.fetch_all(stale, started + s.round_budget_s / 2)

    def _offers_nothing(self, outcome: Outcome) -> bool:
        """Whether this list is one taken before, unchanged, that offers nothing now."""
        assert outcome.data is not None
        digest = hashlib.sha256(outcome.data).hexdigest()
        verdict = self._known(outcome.request.peer, digest)
        return verdict is not None and not self._offers(verdict)

    def _ask_later(self, lists: int, view_timeout: float) -> None:
        """Over libp2p: start the next round's view refresh and lists off the round."""
        if self.later is None:
            return
        probes, failed = self.later.probes, self.later.probes_failed
        resting = self.rests.resting_peers(self.round)
        asked = self.last_asked = self.later.start(lists, view_timeout, skip=resting)
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
        try:
            verdict, rejected = self._verdict(peer, outcome.data, outcome.error)
        except RejectedMessage as e:
            self.counters.lists_failed += 1
            digest = hashlib.sha256(outcome.data).hexdigest()
            return [Rejection(e.reason, e.detail, peer, digest)]
        self._take_verdict(peer, verdict)
        return rejected

    def _verdict(
        self, peer: str, data: bytes, error: RejectedMessage | None
    ) -> tuple[Verdict, list[Rejection]]:
        """A list's verdict: kept from before if the list is unchanged (not checked again,
        `ListVerdicts`), else checked and kept; `RejectedMessage` if it does not decode."""
        digest = hashlib.sha256(data).hexdigest()
        known = self._known(peer, digest)
        if known is not None:
            self.counters.lists_unchanged += 1
            return known, []
        if error is not None:
            raise error
        verdict, rejected = self._check_list(peer, data)
        self.verdicts.put(peer, digest, verdict)
        return verdict, rejected

    def _take_verdict(self, peer: str, verdict: Verdict) -> None:
        """A list's announcements become candidates (but those chosen already), with their
        holder hints; a peer whose list offers nothing rests (`ListBackoff`)."""
        self.candidates.learn(verdict.announcements, self.round)
        for hint in verdict.hints:
            if hint.content_hash in self.candidates:
                self.server.hint(hint.content_hash, hint.peer_id, hint.addrs)
        self.rests.offered(peer, self._offers(verdict), self.round)

    def _known(self, peer: str, digest: str) -> Verdict | None:
        """The verdict of `peer`'s list if it is unchanged (and the peer not banned since:
        then its announcements are checked, and refused, again)."""
        return None if peer in self.verifier.banned else self.verdicts.get(peer, digest)

    def _check_list(self, peer: str, data: bytes) -> tuple[Verdict, list[Rejection]]:
        """Every announcement of a list through the cheap checks; `RejectedMessage` if the
        list itself does not decode."""
        items, hints = unpack_announcements(data)
        kept: list[GroupAnnouncement] = []
        rejected: list[Rejection] = []
        now = self.clock()
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
            kept.append(announcement)
        return Verdict(tuple(kept), tuple(hints)), rejected

    def _offers(self, verdict: Verdict) -> bool:
        """Whether a list offers a group this node would pull now (one not pulled yet)."""
        return self.candidates.offers(verdict.announcements, self.round)

    def _choose(self) -> list[GroupAnnouncement]:
        """This round's pulls: the trainer's uniform, per-sender-capped draw over candidates."""
        self.candidates.expire(self.round)
        self.counters.candidates = len(self.candidates)
        return self.candidates.choose(self.round)
