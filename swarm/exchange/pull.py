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
  bytes) and suspended;
- a round never waits a whole fetch timeout on a peer that left since it last answered
  (over libp2p): it waits for a group or a list asked again only as long as the peer's
  measured answers say it should (its patience, `swarm.exchange.answer_times`: TCP's
  retransmission timeout over its answer times, at least 0.25 s), then tries the group's
  next source (a holder) at once; the fetch itself runs on and, when it ends, is taken and
  judged exactly as if the round had waited (a stall refused hard, bytes checked, a failure
  counted; a group served late admitted then), in a later round if need be
  (`swarm.exchange.pull_groups`, `OffRound.adopt`); until it ends no group is pulled from
  that peer.

Why this is a fair sample of the swarm: the peers asked are a uniform sample of a view that
is itself a random subset of the swarm, so every sender is equally likely to be asked, and
each of its groups is as likely to be chosen as another's of the same sender, whoever is
connected to whom; a sender that announces more groups gains nothing (`balanced`), and no
sender gets more than `per_peer_cap` a round.

Here: the round's collection (views and lists, then the choice and the pulls); lists are
taken by `swarm.exchange.pull_intake`, candidates kept and chosen by
`swarm.exchange.pull_candidates`; its settings and counters are in
`swarm.exchange.pull_settings`. Deliberately not here: full verification,
pooling, ledgers (the caller's), or the transport.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from swarm.core.reasons import Reason
from swarm.exchange.peer_backoff import PeerBackoff
from swarm.exchange.peer_view import PeerView
from swarm.exchange.pull_candidates import Candidates
from swarm.exchange.pull_choice import OwnVersion
from swarm.exchange.pull_fetch import Fetcher, Outcome, Request
from swarm.exchange.pull_groups import GroupPuller
from swarm.exchange.pull_intake import ListIntake
from swarm.exchange.pull_later import OffRound
from swarm.exchange.pull_serve import PullServer
from swarm.exchange.pull_settings import PullCounters, PullSettings
from swarm.p2p.transport import Transport
from swarm.verify.gate import Verifier
from swarm.verify.message import Accepted, Rejection
from swarm.wire import (
    ANNOUNCEMENTS_KEY,
    MAX_ANNOUNCEMENTS_MESSAGE_BYTES,
    GroupAnnouncement,
    RolloutGroup,
    SignedGroup,
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
        self.candidates = Candidates(settings, own_id, verifier.settings.max_age_s, clock)
        self.last_asked: list[str] = []  # the peers asked for their lists in the last round
        self.intake = ListIntake(
            swarm_id,
            verifier,
            settings,
            self.counters,
            self.candidates,
            self.view,
            self.server,
            clock,
        )
        self.rests = self.intake.rests  # peers whose lists offered nothing, asked less often

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
        self.intake.round = self.round
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
            rejected += self.intake.take(outcome)
        pulling = self.monotonic()
        accepted, refused = self.puller.take_late(self.round)  # what earlier fetches gave
        rejected += refused
        ok, refused = self.puller.pull_all(self._choose(), started + s.round_budget_s, self.round)
        accepted += ok
        rejected += refused
        self.counters.lists_s += pulling - started
        self.counters.pulls_s += self.monotonic() - pulling
        self.candidates.drop_senders(self.puller.stalled_senders)
        if self.later is not None:
            self.later.drop_lists(self.puller.stalled_senders)
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
        that offered nothing (asked again, it would offer nothing either). One asked again
        whose peer does not answer within its patience is not waited on: taken when it
        ends, as a list asked off the round (`OffRound.adopt`)."""
        s = self.settings
        assert self.later is not None
        outcomes: list[Outcome] = []
        stale: list[Request] = []
        for o, age in self.later.take_lists(s.list_wait_s):
            if o.data is None or age <= s.fresh_list_s or self.intake.offers_nothing(o):
                outcomes.append(o)
            else:
                timeout = min(s.fetch_timeout_s, REFETCH_TIMEOUT_S)
                stale.append(dataclasses.replace(o.request, timeout=timeout))
        self.counters.lists_refreshed += len(stale)
        for o in self.fetcher.fetch_all(stale, started + s.round_budget_s / 2, cut=True):
            if o.late is None:
                outcomes.append(o)
            else:
                self.counters.unwaited += 1
                self.later.adopt(o.request.peer, o.late)
        return outcomes

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

    def _choose(self) -> list[GroupAnnouncement]:
        """This round's pulls: the trainer's uniform, per-sender-capped draw over candidates
        (none of a sender that stalled, or whose fetch a round stopped waiting on runs)."""
        self.candidates.drop_senders(self.puller.stalled_senders | self.puller.unanswered())
        self.candidates.expire(self.round)
        self.counters.candidates = len(self.candidates)
        return self.candidates.choose(self.round)
