"""Pulling the chosen groups: from whom, in what order, and what each answer means.

A chosen group is pulled from its sender and up to `max_holders` of its hinted holders, all
in one random order (the load of a popular group spreads over whoever holds it), in waves:
each wave fetches every pending group from its next source, side by side, by the round's
deadline (`swarm.exchange.pull_fetch`). Exact blame: served bytes of another size or hash
are the serving peer's fault alone (refused before decoding; the next source is tried; when
they prove it, `wrong_bytes`, which bans the peer at once); the
announced bytes are the sender's, so whatever is wrong with them is blamed on the sender; a
pull that admits nothing counts as failed; a sender that announces and does not serve leaves
the view, and past `unserved_ban_after` such pulls in a row each is a hard rejection
(`not_served`); a sender that takes a group fetch and sends nothing is refused hard
(`fetch_too_slow`) and suspended (`stalled_senders`: the caller drops its other
announcements). An admitted group passes `Verifier.admit_pulled` and is served on
(`swarm.exchange.pull_serve`).

A round never waits a whole fetch timeout on a source that left: a wave stops waiting on a
fetch whose source has not answered within its patience (`swarm.exchange.answer_times`,
from its measured answers), and the group's next source is tried at once (a hedge: the
first fetch runs on). A group whose sources are all tried, one of them still running, is
left to a later round: its fetches are taken when they end (at the start of the next
`pull_all`, or at the end of this one if they ended meanwhile), judged exactly as if the
round had waited (a stall still refused hard, bytes still checked, a failure counted), and
a group served late is admitted then. A group already served by another source is not
admitted twice; bytes served for it late are still checked against its hash. While such a
fetch runs, no group is pulled from its source (`unanswered`): rounds neither wait on it
again nor pile fetches up behind its own.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable

from swarm.core.errors import RejectedMessage, TransportError
from swarm.core.reasons import Reason
from swarm.exchange.peer_view import PeerView
from swarm.exchange.pull_choice import Attempt
from swarm.exchange.pull_fetch import Fetcher, Outcome, Request
from swarm.exchange.pull_serve import PullServer
from swarm.exchange.pull_settings import HINT_MEMORY, PullCounters, PullSettings
from swarm.verify.announcements import check_matches, check_served, wrong_bytes_proven
from swarm.verify.gate import Verifier
from swarm.verify.message import Accepted, Rejection
from swarm.wire import (
    GroupAnnouncement,
    RolloutGroup,
    SignedGroup,
    decode_group,
    decode_signed_group,
    group_key,
)

HOLDER_TIMEOUT_S = 1.0  # a hinted holder not vouched for: the time it gets before the next


class GroupPuller:
    """Pulls a round's chosen groups (see the module docstring)."""

    def __init__(
        self,
        fetcher: Fetcher,
        view: PeerView,
        verifier: Verifier,
        server: PullServer,
        counters: PullCounters,
        settings: PullSettings,
        own_id: str,
        monotonic: Callable[[], float],
    ):
        self.fetcher = fetcher
        self.view = view
        self.verifier = verifier
        self.server = server
        self.counters = counters
        self.settings = settings
        self.own_id = own_id
        self.monotonic = monotonic
        self.round = 0
        self.stalled_senders: set[str] = set()  # senders that stalled in the last pull_all
        self._running: list[Attempt] = []  # attempts with a fetch no round waits on any more
        self._busy: set[str] = set()  # `unanswered()` as the pull began
        # senders' announced groups not served, in a row (hard rejections past a bound)
        self._unserved: collections.OrderedDict[str, int] = collections.OrderedDict()

    def _sources(self, announcement: GroupAnnouncement) -> list[str]:
        """Whom to pull a group from, in turn: its sender and up to `max_holders` of its known
        holders, all in one random order. The load of a popular group spreads over everyone
        who holds it instead of falling on its sender first."""
        hinted = self.server.holders.get(announcement.blob_hash, {})
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
                self.view.learned.learn(peer, tuple(hinted[peer]))
        return sources

    def _may_ask_holder(self, peer: str) -> bool:
        """A hinted holder may be asked unless banned or suspended (one not vouched for is
        asked within `HOLDER_TIMEOUT_S`), or a fetch of it no round waits on runs."""
        return (
            not self.view.excluded(peer)
            and not self.view.backoff.suspended(peer, self.view.refreshes)
            and peer not in self._busy
        )

    def unanswered(self) -> set[str]:
        """Sources of the fetches rounds stopped waiting on that still run: no group is
        pulled from them until those end (and are judged). Not a judgement: a round only
        does not wait on them again, nor pile fetches up behind theirs."""
        return {peer for a in self._running for peer, f in a.running if not f.done()}

    def take_late(self, round_: int) -> tuple[list[Accepted], list[Rejection]]:
        """What the fetches earlier rounds stopped waiting on gave since they ended (judged
        as any other: senders that stalled are in `stalled_senders`, to be dropped before
        this round chooses); round `round_` serves what it admits."""
        self.round = round_
        self.stalled_senders = set()
        earlier, self._running = self._running, []
        return self._settle_all(earlier)

    def pull_all(
        self, chosen: list[GroupAnnouncement], deadline: float, round_: int
    ) -> tuple[list[Accepted], list[Rejection]]:
        """Pull every chosen group by `deadline`: each wave fetches every pending group from
        its next source, side by side; a source that fails or serves other bytes is passed
        over for the next, and one that has not answered within its patience is not waited
        on (it runs on; the next source is tried). Round `round_` serves what it admits (a
        holder now). (`take_late` first: what earlier rounds' fetches gave.)"""
        self.round = round_
        self._busy = self.unanswered()
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
            outcomes = self.fetcher.fetch_all(requests, deadline, cut=True)
            for (attempt, source), outcome in zip(wave, outcomes, strict=True):
                if outcome.late is not None:  # no answer within its patience: runs on
                    self.counters.unwaited += 1
                    attempt.running.append((source, outcome.late))
                else:
                    self._take_group(attempt, source, outcome)
                self._take_ended(attempt)  # a fetch that ran on may have ended meanwhile
            pending = [a for a in pending if not a.done and a.sources]
        return self._settle_all(attempts)

    def _settle_all(self, attempts: list[Attempt]) -> tuple[list[Accepted], list[Rejection]]:
        accepted: list[Accepted] = []
        rejected: list[Rejection] = []
        for attempt in attempts:
            ok, bad = self._settle(attempt)
            accepted += ok
            rejected += bad
        return accepted, rejected

    def _settle(self, attempt: Attempt) -> tuple[list[Accepted], list[Rejection]]:
        """What an attempt gave that was not handed on yet: its fetches that ran on and have
        ended are taken; once no source it waits on is left (served, or every fetch ended),
        its outcome is counted (`_outcome`) and its groups handed on; a fetch still running
        keeps it for a later round (its refusals, if any, handed on then)."""
        self._take_ended(attempt)
        if attempt.running:
            self._running.append(attempt)
        accepted: list[Accepted] = []
        if not attempt.settled and (attempt.done or not attempt.running):
            attempt.settled = True
            accepted = attempt.accepted
            self._outcome(attempt)
        refused = attempt.refused[attempt.told :] if attempt.settled else []
        attempt.told += len(refused)
        return accepted, refused

    def _take_ended(self, attempt: Attempt) -> None:
        """Take the attempt's fetches that ran on and have ended (judged as any other)."""
        running = []
        for source, future in attempt.running:
            if future.done():
                self.counters.late += 1
                self._take_group(attempt, source, future.result())
            else:
                running.append((source, future))
        attempt.running = running

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
            attempt.error = str(outcome.error)
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
            sized = outcome.error is None  # the bytes came, of the announced size
            proof = wrong_bytes_proven(a, source, e, sized)
            reason = Reason.WRONG_BYTES if proof else e.reason
            attempt.refused.append(Rejection(reason, e.detail, source, digest, ""))
            return
        if attempt.done:  # the same bytes came from another source first (this one ran on)
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
        self.stalled_senders.add(sender)

    def _outcome(self, attempt: Attempt) -> None:
        """A pull's outcome, counted: a pull that admitted nothing failed; a sender that
        announced a group and did not serve it leaves the view, and past
        `unserved_ban_after` such pulls in a row each one is a hard rejection (towards a
        ban, added to the attempt's rejections)."""
        if attempt.accepted:
            return
        self.counters.pulls_failed += 1
        if attempt.done or attempt.stalled:  # the announced bytes came, and were refused
            self.counters.pulls_refused += attempt.done
            return
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
        detail = f"neither the sender nor a known holder served it in time ({attempt.error})"
        attempt.refused.append(Rejection(reason, detail, sender, digest, sender))

    def _admit(
        self, signed: SignedGroup, group: RolloutGroup, data: bytes, blob_hash: str
    ) -> tuple[list[Accepted], list[Rejection]]:
        """The gossip validator's checks on a pulled group (its sender as the source: the
        announced hash pins every byte a holder served); an admitted one is served on."""
        ok, bad = self.verifier.admit_pulled(signed, group, group.sender)
        if ok:
            self.server.serve(group_key(blob_hash), data, self.round)  # a holder now
        return ok, bad
