"""The pull exchange's fetches that run off the round (over libp2p): views and lists.

A round must not wait on a peer that is gone or slow. Over libp2p the only fetches a round
waits for are the groups it pulls, from senders whose lists have just answered; the view's
shuffle, the views it only hears (and so the probes of peers not vouched for yet) and the
lists of the peers asked are started at the end of one round's collection and taken at the
next one: whatever has arrived by then (the first time, after at most `wait_s`; a fetch is
never waited for twice, and not at all once one list has come), the rest when it arrives
or fails. A list older than `PullSettings.fresh_list_s` by then (a round longer than that)
is asked again in the round, of that peer only: it answered a moment ago, and its groups of
that moment may no longer be served. A peer has at most one such
fetch of each kind running. A peer that vanishes, a view of addresses that drop SYNs, or a
view request never answered then cost a round nothing; each fails in the background and the
peer is suspended (`swarm.exchange.peer_backoff`).

In memory (`Fetcher.threaded` false) nothing runs off the round: `swarm.exchange.pull`
fetches in turn, as the simulation charges them.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_any
from dataclasses import dataclass

from swarm.exchange.peer_view import PeerView
from swarm.exchange.pull_fetch import Fetcher, Outcome, Request
from swarm.wire import ANNOUNCEMENTS_KEY, MAX_ANNOUNCEMENTS_MESSAGE_BYTES
from swarm.wire.streams import VIEW_KEY, VIEW_MAX_BYTES


@dataclass
class _Pending:
    peer: str
    future: Future
    partner: bool = False  # the view's shuffle partner (its entries are merged in)
    waited: bool = False  # a round already waited for it once
    started: float = 0.0  # (monotonic)


class OffRound:
    """Views and lists fetched between two rounds' collections (see the module docstring)."""

    def __init__(self, fetcher: Fetcher, view: PeerView, most_views: int):
        self.fetcher = fetcher
        self.view = view
        self.most_views = most_views
        self._views: list[_Pending] = []
        self._lists: list[_Pending] = []
        self.probes = 0  # views started
        self.probes_failed = 0

    def start(self, lists: int, view_timeout: float, skip: Collection[str] = ()) -> list[str]:
        """Refresh the view (`PeerView.plan`) and start its shuffle, the views it hears and
        the lists of `lists` peers sampled from it, none of `skip` (resting: their lists
        offered nothing); the peers newly asked for lists."""
        partner = self.view.plan()
        busy = {p.peer for p in self._views}
        if partner is not None and partner not in busy:
            request = Request(partner, VIEW_KEY, VIEW_MAX_BYTES, timeout=view_timeout)
            self._views.append(_Pending(partner, self.fetcher.later(request), partner=True))
            busy.add(partner)
        room = max(self.most_views - len(self._views), 0)
        hearing = [p for p in self.view.to_hear(exclude=partner) if p not in busy][:room]
        for peer in hearing:
            request = Request(peer, VIEW_KEY, VIEW_MAX_BYTES)
            self._views.append(_Pending(peer, self.fetcher.later(request)))
        self.probes += len(hearing) + (partner is not None)
        asking = {p.peer for p in self._lists}
        asked = self.view.sample(lists, busy=asking | set(skip))
        for peer in asked:
            request = Request(peer, ANNOUNCEMENTS_KEY, MAX_ANNOUNCEMENTS_MESSAGE_BYTES)
            started = time.monotonic()
            self._lists.append(_Pending(peer, self.fetcher.later(request), started=started))
        return asked

    def adopt(self, peer: str, future: Future) -> None:
        """A list asked again in a round that stopped waiting on it: taken when it ends,
        as one asked off the round (never waited for again)."""
        self._lists.append(_Pending(peer, future, waited=True, started=time.monotonic()))

    def drop_lists(self, peers: set[str]) -> None:
        """Never take the lists asked of `peers` so far (they stalled a group fetch, judged
        once it ended: a list asked before must not clear the suspension that followed)."""
        self._lists = [p for p in self._lists if p.peer not in peers]

    def take_views(self) -> None:
        """Take in the views that arrived (or failed) since."""
        done = [p for p in self._views if p.future.done()]
        self._views = [p for p in self._views if not p.future.done()]
        heard = []
        for pending in done:
            outcome: Outcome = pending.future.result()
            answer = self.view.take_view(pending.peer, outcome.data, outcome.slow)
            self.probes_failed += answer is None
            if pending.partner:
                self.view.shuffle(pending.peer, answer)
            else:
                heard.append(answer)
        if heard:
            self.view.heard_views(heard)

    def take_lists(self, wait_s: float) -> list[tuple[Outcome, float]]:
        """The lists that arrived (or failed) since, each with its age (seconds since it
        was asked); if none of those never waited for before has, the first of them is
        waited for up to `wait_s` (once)."""
        fresh = [p.future for p in self._lists if not p.waited]
        if fresh and wait_s > 0 and not any(f.done() for f in fresh):
            wait_any(fresh, timeout=wait_s, return_when=FIRST_COMPLETED)
        for pending in self._lists:
            pending.waited = True
        done = [p for p in self._lists if p.future.done()]
        self._lists = [p for p in self._lists if not p.future.done()]
        now = time.monotonic()
        return [(p.future.result(), now - p.started) for p in done]
