"""A node's bounded random view of the swarm, from which it samples whom to ask each round.

The pull exchange asks a few peers a round for their latest announcements. For the groups
it trains on to be a fair sample of the swarm, those peers must be a uniform sample of the
swarm, not of its neighbours: not the peers it happens to be connected to (the bootstrap
peers and whoever dialled in), not the most talkative ones. So each node keeps a *view*:
at most `capacity` peer IDs (with addresses), a random subset of the swarm kept fresh by
shuffling. Each round it serves its view (`VIEW_KEY`, the peer-exchange JSON format), asks
one random view member for its view, and merges: new entries in, then random entries out
down to the capacity, so no peer (and no attacker naming itself many times, as a view
holds each ID once) gains weight by being repeated. A node that knows nobody yet starts
from its connected peers (the bootstrap peers).

The view is bounded whatever the swarm's size; so are the connections a node makes (the
peers it asks plus the senders it pulls from, a few per round).

Pure core (`merge`, `sample`) over plain data; `PeerView.refresh` does the I/O through a
`Transport`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from swarm.errors import TransportError
from swarm.p2p.transport import Transport
from swarm.wire_streams import PeerEntry, decode_peer_exchange, encode_peer_exchange

VIEW_KEY = "pull/view"
DEFAULT_CAPACITY = 64  # the peer-exchange format's limit (PX_MAX_PEERS)


def merge(
    view: dict[str, tuple[str, ...]], entries: Iterable[PeerEntry], own_id: str, capacity: int,
    rng: random.Random,
) -> dict[str, tuple[str, ...]]:
    """`view` with `entries` added (each ID once, never our own), then random ones dropped
    down to `capacity`."""
    merged = dict(view)
    for entry in entries:
        if entry.id and entry.id != own_id:
            merged[entry.id] = tuple(entry.addrs) or merged.get(entry.id, ())
    if len(merged) > capacity:
        keep = rng.sample(sorted(merged), capacity)
        merged = {peer: merged[peer] for peer in keep}
    return merged


def sample(view: Sequence[str], k: int, rng: random.Random) -> list[str]:
    """`k` distinct peers drawn uniformly from the view (all of them if it holds fewer)."""
    ordered = sorted(view)
    return rng.sample(ordered, min(k, len(ordered)))


class PeerView:
    """A node's view of the swarm (see the module docstring)."""

    def __init__(
        self, transport: Transport, own_id: str, *, capacity: int = DEFAULT_CAPACITY,
        seed: str = "",
    ):
        self.transport = transport
        self.own_id = own_id
        self.capacity = capacity
        self.rng = random.Random(f"view:{own_id}:{seed}")
        self.view: dict[str, tuple[str, ...]] = {}
        self.failed_fetches = 0

    def peers(self) -> list[str]:
        return sorted(self.view)

    def sample(self, k: int) -> list[str]:
        return sample(list(self.view), k, self.rng)

    def refresh(self, timeout: float = 5.0) -> None:
        """Serve our view, seed it from connected peers if empty, shuffle with one member."""
        self.transport.serve_blob(VIEW_KEY, encode_peer_exchange(self.entries()))
        if len(self.view) < self.capacity:
            connected = [PeerEntry(p.peer_id, tuple(p.addrs)) for p in self.transport.peers()]
            self.view = merge(self.view, connected, self.own_id, self.capacity, self.rng)
        if not self.view:
            return
        (partner,) = self.sample(1)
        try:
            answer = self.transport.fetch_blob(partner, VIEW_KEY, timeout=timeout)
        except TransportError:
            self.failed_fetches += 1
            self.view.pop(partner, None)  # unreachable: make room for peers that answer
            return
        learned = decode_peer_exchange(answer)
        for entry in learned:
            if entry.addrs:
                self.transport.learn_peer(entry.id, entry.addrs)
        self.view = merge(self.view, learned, self.own_id, self.capacity, self.rng)

    def entries(self) -> list[PeerEntry]:
        own = [PeerEntry(self.own_id, tuple(self._own_addrs()))]
        return own + [PeerEntry(peer, addrs) for peer, addrs in sorted(self.view.items())]

    def _own_addrs(self) -> list[str]:
        try:
            return [a.rsplit("/p2p/", 1)[0] for a in self.transport.listen_addrs()]
        except TransportError:
            return []
