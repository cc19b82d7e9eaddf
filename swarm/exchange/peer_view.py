"""A node's bounded random view of the swarm, from which it samples whom to ask each round.

The pull exchange asks a few peers a round for their latest announcements. For the groups
it trains on to be a fair sample of the swarm, those peers must be a uniform sample of the
swarm, not of its neighbours: not the peers it happens to be connected to (the bootstrap
peers and whoever dialled in), not the best-known ones. So each node keeps a *view*: at
most `capacity` peers (ID, addresses, age), refreshed once a round by a shuffle in the
manner of Cyclon and Newscast, over blob fetches only:

1. every entry ages by one;
2. the peers that fetched our view (or our announcements) since the last refresh are
   entered at age 0: a fetch
   tells the server that the fetcher is alive, which makes the exchange two-way although
   only one side asks (without it, a peer would spread only by being asked, and the
   best-known peers, such as everyone's bootstrap peer, would become ever better known);
3. we serve our view, our own entry first at age 0 (`VIEW_KEY`, `swarm.wire.streams`);
4. we fetch the view of our *oldest* entry (the one heard of least recently: dead peers
   leave fast, and every entry gets its turn) and merge it: each peer at its youngest age
   (+1 for the hop), never ourselves, then the youngest `capacity` entries kept, ties
   broken at random. A partner that does not answer leaves the view.

It also hears (feeds its history sample with, `swarm.exchange.history_sample`) the views
of peers drawn from that sample: one a refresh, up to `most_sampled_views` while they still
bring many IDs it had not heard of, so that it hears of most of the swarm within a few
refreshes of joining.

A node that knows nobody yet starts from its connected peers (its bootstrap peers). The
view is bounded whatever the swarm's size, so is what a refresh costs (two fetches of at
most 65 entries, up to 17 while the node is still learning IDs), and so are the
connections it makes.

A peer that does not answer is suspended (`swarm.exchange.peer_backoff`): not asked, not
passed on, not taken back from a view or from the connected peers until its backoff has
passed and it is heard of anew. Banned peers (`excluded`) are never asked nor passed on. With
`vouching` (over libp2p), only peers seen alive are asked in the round; the others are probed
off the round by the pull exchange.

Pure core (`merge`, `oldest`, `sample`) over plain data; `PeerView.refresh` does the I/O
through a `Transport` (`plan`, `shuffle`, `to_hear` and `heard_views` around the fetches, for
a caller that runs them side by side with others, or off the round).
"""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Callable, Collection, Iterable, Sequence

from swarm.core.errors import FetchTooSlow, NoFetchSlot, RejectedMessage, TransportError
from swarm.exchange.history_sample import DEFAULT_SKETCH, HistorySample, views_to_hear
from swarm.exchange.peer_backoff import PeerBackoff
from swarm.exchange.pull_fetch import SLOW_S, SizeCap
from swarm.p2p.transport import FetchLimits, Transport
from swarm.wire import ANNOUNCEMENTS_KEY
from swarm.wire.streams import VIEW_KEY, VIEW_MAX_BYTES, ViewEntry, decode_view, encode_view

DEFAULT_CAPACITY = 64
SHUFFLE_LENGTH = 8  # entries taken from one partner's view, and fetchers entered, a refresh
DEFAULT_SAMPLED_VIEWS = 1  # views fetched a refresh from peers of the history sample
MOST_SAMPLED_VIEWS = 16  # ... at most, while the node is still learning the swarm's IDs

LEARN_AGAIN_S = 600.0  # addresses told to the transport again after this long (it keeps them 1 h)
LEARNED_MEMORY = 4096  # peers whose last told addresses a view remembers

View = dict[str, tuple[tuple[str, ...], int]]  # peer ID -> (addrs, age)


def merge(
    view: View,
    entries: Iterable[ViewEntry],
    own_id: str,
    capacity: int,
    rng: random.Random,
    hop: int = 1,
) -> View:
    """`view` with `entries` added (each at its youngest age, `hop` added to theirs; never
    `own_id`), then only the `capacity` youngest kept, ties broken at random."""
    merged = dict(view)
    for entry in entries:
        if not entry.id or entry.id == own_id:
            continue
        age = entry.age + hop
        known = merged.get(entry.id)
        if known is None or age < known[1]:
            merged[entry.id] = (tuple(entry.addrs) or (known[0] if known else ()), age)
    if len(merged) > capacity:
        ranked = sorted(merged, key=lambda peer: (merged[peer][1], rng.random()))
        merged = {peer: merged[peer] for peer in ranked[:capacity]}
    return merged


def oldest(view: View, rng: random.Random) -> str | None:
    """The entry heard of least recently (ties at random): the next shuffle partner."""
    if not view:
        return None
    return max(sorted(view), key=lambda peer: (view[peer][1], rng.random()))


def sample(view: Sequence[str], k: int, rng: random.Random) -> list[str]:
    """`k` distinct peers drawn uniformly from the view (all of them if it holds fewer)."""
    ordered = sorted(view)
    return rng.sample(ordered, min(k, len(ordered)))


class PeerView:
    """A node's view of the swarm (see the module docstring)."""

    def __init__(
        self,
        transport: Transport,
        own_id: str,
        *,
        capacity: int = DEFAULT_CAPACITY,
        seed: str = "",
        sketch: int = DEFAULT_SKETCH,
        sampled_views: int = DEFAULT_SAMPLED_VIEWS,
        most_sampled_views: int = MOST_SAMPLED_VIEWS,
        backoff: PeerBackoff | None = None,
        excluded: Callable[[str], bool] = lambda peer: False,
    ):
        self.transport = transport
        self.own_id = own_id
        self.backoff = backoff or PeerBackoff()
        self.excluded = excluded  # banned peers: never asked nor passed on
        self.refreshes = 0  # the backoff's clock: rounds, not seconds (`PeerBackoff`)
        self.vouching = False  # only peers seen alive are asked (the rest probed off the round)
        self.capacity = capacity
        self.rng = random.Random(f"view:{own_id}:{seed}")
        self.view: View = {}
        self.history = HistorySample(self.rng, sketch)
        self.sampled_views = sampled_views
        self.most_sampled_views = max(sampled_views, most_sampled_views)
        # views heard from sampled peers this refresh: as many as allowed on joining, when
        # nearly every ID is new (then fewer as they stop bringing new ones)
        self.hearing = self.most_sampled_views if sampled_views else 0
        self.failed_fetches = 0
        self.shuffles = 0
        self.learned = LearnedAddrs(transport)

    def peers(self) -> list[str]:
        return sorted(self.view)

    def askable(self, peer: str) -> bool:
        """Whether the round may ask `peer` now: not banned, not suspended, and (`vouching`)
        seen alive."""
        if self.excluded(peer) or self.backoff.suspended(peer, self.refreshes):
            return False
        return not self.vouching or self.backoff.vouched(peer)

    def sample(self, k: int, busy: Collection[str] = ()) -> list[str]:
        """`k` peers to ask: drawn from the history sample (`swarm.exchange.history_sample`),
        topped up from the view while that holds fewer (a node that just joined); only peers
        the round may ask (`askable`) and not `busy` (asked already, no answer yet)."""

        def allowed(peer: str) -> bool:
            return peer not in busy and self.askable(peer)

        chosen = self.history.sample(k, allowed)
        rest = [p for p in self.view if p not in chosen and allowed(p)]
        return chosen + sample(rest, k - len(chosen), self.rng)

    def forget(self, peer: str, slow: bool = True, stalled: bool = False) -> None:
        """`peer` did not answer: out of the view and the history sample (it comes back to
        the view if it asks us or is passed on as alive); if it cost the round time (`slow`:
        it timed out, or took long to fail), also suspended (`PeerBackoff`: back once its
        backoff has passed and it is heard of anew)."""
        self.view.pop(peer, None)
        self.history.drop(peer)
        self.learned.drop(peer)  # heard again, its addresses are told again
        if slow or stalled:
            self.backoff.failed(peer, self.refreshes, stalled)

    def refresh(self, timeout: float = 5.0) -> None:
        """Age, take in who asked us, serve our view, shuffle with our oldest entry, then
        hear sampled peers' views (fetched one after another; see `plan`, `shuffle`,
        `to_hear` and `heard_views` for a caller that fetches them otherwise)."""
        partner = self.plan()
        if partner is not None:
            self.shuffle(partner, self._fetch_view(partner, timeout))
        peers = self.to_hear(exclude=partner)
        self.heard_views([self._fetch_view(peer, timeout) for peer in peers])

    def plan(self) -> str | None:
        """Age, take in who asked us, serve our view; the shuffle partner (our oldest entry
        the round may ask), if any."""
        self.refreshes += 1
        self._drop_unaskable()
        self.view = {peer: (addrs, age + 1) for peer, (addrs, age) in self.view.items()}
        asked = self.transport.served_blobs(VIEW_KEY) + self.transport.served_blobs(
            ANNOUNCEMENTS_KEY
        )
        self.history.tick()
        if asked or not self.view:
            connected = {p.peer_id: p.addrs for p in self.transport.peers()}
            # where each fetcher listens: as known when it fetched, else if still connected
            where = connected | {f.peer_id: f.addrs for f in asked if f.addrs}
            fetchers = sorted({f.peer_id for f in asked if not self.excluded(f.peer_id)})
            for fetcher in fetchers:  # alive: it fetched from us
                self.backoff.vouch(fetcher)
            fetchers = [f for f in fetchers if self.askable(f)]
            self.history.feed(fetchers)
            # limited pushes: however many peers fetched from us, a few enter the view
            pushed = self.rng.sample(fetchers, min(SHUFFLE_LENGTH, len(fetchers)))
            fresh = [ViewEntry(p, tuple(where.get(p, ())), 0) for p in pushed]
            if not self.view:  # a newcomer: its bootstrap peers (not those that failed)
                for peer in connected:  # a peer that vanished keeps its connection open:
                    if not self.backoff.suspended(peer, self.refreshes):  # not news of it
                        self.backoff.vouch(peer)
                connected = {p: a for p, a in connected.items() if self.askable(p)}
                fresh += [ViewEntry(peer, tuple(addrs), 0) for peer, addrs in connected.items()]
                self.history.feed(connected)
            self.view = merge(self.view, fresh, self.own_id, self.capacity, self.rng, hop=0)
        self.transport.serve_blob(VIEW_KEY, encode_view(self.entries()))
        return oldest({p: e for p, e in self.view.items() if self.askable(p)}, self.rng)

    def shuffle(self, partner: str, answer: list[ViewEntry] | None) -> None:
        """Take in a few of the partner's entries (None: it did not answer, forgotten)."""
        if answer is None:
            return
        self.shuffles += 1
        # a shuffle takes a few of the partner's entries (its own first), not all of them
        rest = answer[1:]
        taken = answer[:1] + self.rng.sample(rest, min(SHUFFLE_LENGTH, len(rest)))
        self.hear((e.id, e.addrs) for e in answer)
        taken = [e for e in taken if not self.excluded(e.id) and self._may_hear(e.id)]
        self.view = merge(self.view, taken, self.own_id, self.capacity, self.rng)

    def to_hear(self, exclude: str | None = None) -> list[str]:
        """Peers drawn from the history sample whose views to hear this refresh (not banned
        nor suspended; with `vouching` also peers not yet vouched for: hearing them is how
        they are probed, off the round)."""
        allowed = self._may_probe if self.vouching else self.askable
        return [p for p in self.history.sample(self.hearing, allowed) if p != exclude]

    def heard_views(self, answers: Sequence[list[ViewEntry] | None]) -> None:
        """Views heard of, not taken in (None: that peer did not answer, forgotten): views of
        peers drawn from the history sample spread the swarm's IDs faster than the view's
        neighbourhood does (see `hear`); more of them while they still teach the node many
        new IDs (`views_to_hear`)."""
        before, entries = self.history.heard.estimate(), 0
        for heard in answers:
            if heard is not None:
                self.hear((e.id, e.addrs) for e in heard)
                entries += len(heard)
        novel = (self.history.heard.estimate() - before) / max(entries, 1)
        self.hearing = views_to_hear(
            self.hearing, novel, self.sampled_views, self.most_sampled_views
        )

    def _fetch_view(self, peer: str, timeout: float) -> list[ViewEntry] | None:
        """`peer`'s view; None if it does not answer (then it leaves ours and the sample)."""
        began = time.monotonic()
        try:
            limits = FetchLimits(check=SizeCap(VIEW_MAX_BYTES))
            data = self.transport.fetch_blob(peer, VIEW_KEY, timeout, limits)
        except NoFetchSlot:  # our own fetches to the peer held its slots: not its doing
            return None
        except FetchTooSlow:
            return self.take_view(peer, None, slow=True)
        except (TransportError, RejectedMessage):
            data = None
        return self.take_view(peer, data, slow=time.monotonic() - began >= SLOW_S)

    def take_view(self, peer: str, data: bytes | None, slow: bool) -> list[ViewEntry] | None:
        """A fetched view's entries; None (and `peer` forgotten, suspended if it cost the
        round time) if it did not answer or answered with something that is not a view."""
        try:
            if data is None:
                raise TransportError("no answer")
            entries = decode_view(data)
        except (TransportError, RejectedMessage):
            self.failed_fetches += 1
            self.forget(peer, slow)  # unreachable: make room for peers that answer
            return None
        self.backoff.answered(peer)
        return entries

    def _drop_unaskable(self) -> None:
        """Banned peers leave the view and the sample (they are not passed on either)."""
        for peer in [p for p in self.view if self.excluded(p)]:
            self.view.pop(peer, None)
            self.history.drop(peer)

    def hear(self, peers: Iterable[tuple[str, Sequence[str]]]) -> None:
        """Peers heard of (the entries of a fetched view):
        into the history sample, and their addresses learned where they may be asked (in
        the view or a sketch). An ID without addresses could not be asked: it is not fed."""
        known = [(p, tuple(a)) for p, a in peers if p and p != self.own_id and a]
        for peer, _ in known:
            self.backoff.heard(peer)
        known = [(p, a) for p, a in known if not self.excluded(p) and self._may_hear(p)]
        self.history.feed(p for p, _ in known)
        for peer, addrs in known:
            if peer in self.view or self.history.holds(peer):
                self.learned.learn(peer, addrs)

    def _may_hear(self, peer: str) -> bool:
        return not self.backoff.suspended(peer, self.refreshes)

    def _may_probe(self, peer: str) -> bool:
        return not self.excluded(peer) and self._may_hear(peer)

    def entries(self) -> list[ViewEntry]:
        own = [ViewEntry(self.own_id, tuple(self._own_addrs()), 0)]
        return own + [
            ViewEntry(peer, addrs, age) for peer, (addrs, age) in sorted(self.view.items())
        ]

    def _own_addrs(self) -> list[str]:
        try:
            return [a.rsplit("/p2p/", 1)[0] for a in self.transport.listen_addrs()][:4]
        except TransportError:
            return []


class LearnedAddrs:
    """Addresses told to the transport (`Transport.learn_peer`), each told again only when it
    changed or `LEARN_AGAIN_S` later: the same view heard every round would otherwise cost a
    call into the network thread per entry, every round (64 a round for a view of 64 peers)."""

    def __init__(self, transport: Transport, monotonic: Callable[[], float] = time.monotonic):
        self.transport = transport
        self.monotonic = monotonic
        self._told: collections.OrderedDict[str, tuple[tuple[str, ...], float]] = (
            collections.OrderedDict()
        )
        self.told = 0  # calls made into the transport

    def learn(self, peer: str, addrs: tuple[str, ...]) -> None:
        now = self.monotonic()
        known = self._told.get(peer)
        if known is not None and known[0] == addrs and now - known[1] < LEARN_AGAIN_S:
            return
        self.transport.learn_peer(peer, addrs)
        self.told += 1
        self._told[peer] = (addrs, now)
        self._told.move_to_end(peer)
        while len(self._told) > LEARNED_MEMORY:
            self._told.popitem(last=False)

    def drop(self, peer: str) -> None:
        self._told.pop(peer, None)
