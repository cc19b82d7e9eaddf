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

Pure core (`merge`, `oldest`, `sample`) over plain data; `PeerView.refresh` does the I/O
through a `Transport`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from swarm.core.errors import RejectedMessage, TransportError
from swarm.exchange.history_sample import DEFAULT_SKETCH, HistorySample, views_to_hear
from swarm.exchange.pull_fetch import SizeCap
from swarm.p2p.transport import FetchLimits, Transport
from swarm.wire import ANNOUNCEMENTS_KEY
from swarm.wire.streams import VIEW_KEY, VIEW_MAX_BYTES, ViewEntry, decode_view, encode_view

DEFAULT_CAPACITY = 64
SHUFFLE_LENGTH = 8  # entries taken from one partner's view, and fetchers entered, a refresh
DEFAULT_SAMPLED_VIEWS = 1  # views fetched a refresh from peers of the history sample
MOST_SAMPLED_VIEWS = 16  # ... at most, while the node is still learning the swarm's IDs

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
    ):
        self.transport = transport
        self.own_id = own_id
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

    def peers(self) -> list[str]:
        return sorted(self.view)

    def sample(self, k: int) -> list[str]:
        """`k` peers to ask: drawn from the history sample (`swarm.exchange.history_sample`),
        topped up from the view while that holds fewer (a node that just joined)."""
        chosen = self.history.sample(k)
        rest = [p for p in self.view if p not in chosen]
        return chosen + sample(rest, k - len(chosen), self.rng)

    def forget(self, peer: str) -> None:
        """`peer` did not answer: out of the view and the history sample (it comes back to
        the view if it asks us or is passed on as alive)."""
        self.view.pop(peer, None)
        self.history.drop(peer)

    def refresh(self, timeout: float = 5.0) -> None:
        """Age, take in who asked us, serve our view, shuffle with our oldest entry."""
        self.view = {peer: (addrs, age + 1) for peer, (addrs, age) in self.view.items()}
        asked = self.transport.served_blobs(VIEW_KEY) + self.transport.served_blobs(
            ANNOUNCEMENTS_KEY
        )
        self.history.tick()
        if asked or not self.view:
            connected = {p.peer_id: p.addrs for p in self.transport.peers()}
            # where each fetcher listens: as known when it fetched, else if still connected
            where = connected | {f.peer_id: f.addrs for f in asked if f.addrs}
            fetchers = sorted({f.peer_id for f in asked})
            self.history.feed(fetchers)
            # limited pushes: however many peers fetched from us, a few enter the view
            pushed = self.rng.sample(fetchers, min(SHUFFLE_LENGTH, len(fetchers)))
            fresh = [ViewEntry(p, tuple(where.get(p, ())), 0) for p in pushed]
            if not self.view:  # a newcomer: its bootstrap peers
                fresh += [ViewEntry(peer, tuple(addrs), 0) for peer, addrs in connected.items()]
                self.history.feed(connected)
            self.view = merge(self.view, fresh, self.own_id, self.capacity, self.rng, hop=0)
        self.transport.serve_blob(VIEW_KEY, encode_view(self.entries()))
        partner = oldest(self.view, self.rng)
        answer = self._fetch_view(partner, timeout) if partner is not None else None
        if answer is not None:
            self.shuffles += 1
            # a shuffle takes a few of the partner's entries (its own first), not all of them
            rest = answer[1:]
            taken = answer[:1] + self.rng.sample(rest, min(SHUFFLE_LENGTH, len(rest)))
            self.view = merge(self.view, taken, self.own_id, self.capacity, self.rng)
            self.hear((e.id, e.addrs) for e in answer)
        # heard of, not taken in: views of peers drawn from the history sample spread the
        # swarm's IDs faster than the view's neighbourhood does (see `hear`); more of them
        # while they still teach the node many new IDs (`views_to_hear`)
        before, entries = self.history.heard.estimate(), 0
        for peer in self.history.sample(self.hearing):
            if peer != partner and (answer := self._fetch_view(peer, timeout)) is not None:
                self.hear((e.id, e.addrs) for e in answer)
                entries += len(answer)
        novel = (self.history.heard.estimate() - before) / max(entries, 1)
        self.hearing = views_to_hear(
            self.hearing, novel, self.sampled_views, self.most_sampled_views
        )

    def _fetch_view(self, peer: str, timeout: float) -> list[ViewEntry] | None:
        """`peer`'s view; None if it does not answer (then it leaves ours and the sample)."""
        try:
            limits = FetchLimits(check=SizeCap(VIEW_MAX_BYTES))
            return decode_view(self.transport.fetch_blob(peer, VIEW_KEY, timeout, limits))
        except (TransportError, RejectedMessage):
            self.failed_fetches += 1
            self.forget(peer)  # unreachable: make room for peers that answer
            return None

    def hear(self, peers: Iterable[tuple[str, Sequence[str]]]) -> None:
        """Peers heard of (the entries of a fetched view):
        into the history sample, and their addresses learned where they may be asked (in
        the view or a sketch). An ID without addresses could not be asked: it is not fed."""
        known = [(p, tuple(a)) for p, a in peers if p and p != self.own_id and a]
        self.history.feed(p for p, _ in known)
        for peer, addrs in known:
            if peer in self.view or self.history.holds(peer):
                self.transport.learn_peer(peer, addrs)

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
