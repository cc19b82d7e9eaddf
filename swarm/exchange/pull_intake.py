"""Taking a peer's announcement list: checked once, its announcements candidates.

A list the pull exchange took (`swarm.exchange.pull`) is checked cheaply, announcement by
announcement (`swarm.verify.announcements.AnnouncementGate`); the fresh ones of this node's
family become candidates (`swarm.exchange.pull_candidates`), with their holder hints. A list
taken again unchanged (the same bytes) keeps its verdict and is not checked again, unless its
peer was banned since (`ListVerdicts`), and a peer whose lists offer nothing rests
(`ListBackoff`, `swarm.exchange.pull_lists`). A list that did not come is counted failed and
its peer is suspended if it cost the round time (`swarm.exchange.peer_backoff`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from swarm.core.errors import RejectedMessage, TransportError
from swarm.exchange.peer_view import PeerView
from swarm.exchange.pull_candidates import Candidates
from swarm.exchange.pull_fetch import Outcome
from swarm.exchange.pull_lists import ListBackoff, ListVerdicts, Verdict
from swarm.exchange.pull_serve import PullServer
from swarm.exchange.pull_settings import PullCounters, PullSettings
from swarm.verify.announcements import AnnouncementGate
from swarm.verify.gate import Verifier
from swarm.verify.message import Rejection
from swarm.wire import GroupAnnouncement, unpack_announcements


class ListIntake:
    """Takes the lists of one pull node (see the module docstring)."""

    def __init__(
        self,
        swarm_id: str,
        verifier: Verifier,
        settings: PullSettings,
        counters: PullCounters,
        candidates: Candidates,
        view: PeerView,
        server: PullServer,
        clock: Callable[[], float],
    ):
        self.verifier = verifier
        self.settings = settings
        self.counters = counters
        self.candidates = candidates
        self.view = view
        self.server = server
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
        self.verdicts = ListVerdicts()  # each peer's last list, checked once
        self.rests = ListBackoff()  # peers whose lists offered nothing, asked less often
        self.round = 0  # the exchange's round, that lists are taken in

    def offers_nothing(self, outcome: Outcome) -> bool:
        """Whether this list is one taken before, unchanged, that offers nothing now."""
        assert outcome.data is not None
        digest = hashlib.sha256(outcome.data).hexdigest()
        verdict = self._known(outcome.request.peer, digest)
        return verdict is not None and not self._offers(verdict)

    def take(self, outcome: Outcome) -> list[Rejection]:
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
