"""An in-memory transport with connections: what a node of a large swarm actually has.

`MemoryTransport` connects every member of its hub to every other: fine for a few nodes,
but a node of a 10,000-node swarm is connected to a few dozen peers, and listing 10,000
peers a round would cost more than everything else it does. `LinkedMemoryTransport` keeps
libp2p's shape instead:

- it starts connected to its bootstrap peers only (a *link*, both ways), and dials them
  again whenever it has no link left;
- fetching a blob from a peer it is not linked to dials it (a new link), as libp2p's
  `fetch_blob` does with an address learned from a peer;
- `peers()` lists its links, and gossip reaches linked peers only (no forwarding: the
  pull exchange does not gossip, and a gossip swarm uses `MemoryTransport`);
- at most `max_links` links: a new one closes the least recently used (on both ends),
  like a connection manager trimming idle connections;
- with `addressed=True`, a peer can be dialled only once its address is known, as over
  libp2p: a bootstrap peer, a peer once linked (identify told us where it listens), or
  one handed to `learn_peer` with addresses. A peer ID heard of without its addresses
  cannot be reached.

Both kinds share a hub's blob semantics: synchronous, lossless, bytes counted.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from swarm.core.errors import TransportError
from swarm.p2p.transport import FetchLimits, MemoryHub, MemoryTransport, PeerInfo

DEFAULT_MAX_LINKS = 64


class LinkedMemoryTransport(MemoryTransport):
    """A `MemoryTransport` with bounded connections (see the module docstring)."""

    def __init__(
        self,
        peer_id: str,
        hub: MemoryHub | None = None,
        inbox_capacity: int = 4096,
        *,
        bootstrap: Sequence[str] = (),
        max_links: int = DEFAULT_MAX_LINKS,
        addressed: bool = False,
    ):
        super().__init__(peer_id, hub, inbox_capacity)
        if max_links < 1:
            raise TransportError("max_links must be at least 1")
        self.bootstrap = [p for p in bootstrap if p != peer_id]
        self.max_links = max_links
        self.links: collections.OrderedDict[str, None] = collections.OrderedDict()  # LRU first
        self.dials = 0  # links this node opened
        self.trimmed = 0  # links closed to stay within max_links
        self.addressed = addressed
        self.known: set[str] = set(self.bootstrap)  # peers whose addresses we hold

    def start(self) -> None:
        super().start()
        for peer in self.bootstrap:
            self._dial(peer)

    def close(self) -> None:
        for peer in list(self.links):
            self._unlink(peer)
        super().close()

    def publish(self, topic: str, data: bytes) -> None:
        if not self._started:
            raise TransportError("publish on a transport that is not started")
        self._stats.published += 1
        self._stats.gossip_bytes_out += len(data)
        for peer in list(self.links):
            member = self._hub.member(peer)
            if member is not None:
                member._deliver(topic, bytes(data), self.peer_id)

    def peers(self) -> list[PeerInfo]:
        if not self.links:  # like libp2p's dialer, which redials bootstrap peers forever
            for peer in self.bootstrap:
                self._dial(peer)
        return [PeerInfo(p, (f"/memory/{p}",)) for p in self.links]

    def fetch_blob(
        self, peer_id: str, key: str, timeout: float = 30.0, limits: FetchLimits | None = None
    ) -> bytes:
        if peer_id not in self.links and not self._dial(peer_id):
            raise TransportError(f"cannot reach peer {peer_id}")
        self.links.move_to_end(peer_id)
        return super().fetch_blob(peer_id, key, timeout, limits)

    def learn_peer(self, peer_id: str, addrs: Sequence[str]) -> None:
        if addrs:
            self.known.add(peer_id)

    def reachable(self, peer_id: str) -> bool:
        """Linked, or dialable: its addresses are known (always, unless `addressed`)."""
        return peer_id in self.links or not self.addressed or peer_id in self.known

    def _dial(self, peer_id: str) -> bool:
        member = self._hub.member(peer_id)
        if not isinstance(member, LinkedMemoryTransport) or member is self:
            return False
        if not self.reachable(peer_id):
            return False
        self.dials += 1
        self._link(peer_id)
        member._link(self.peer_id)
        return True

    def _link(self, peer_id: str) -> None:
        self.known.add(peer_id)
        self.links[peer_id] = None
        self.links.move_to_end(peer_id)
        while len(self.links) > self.max_links:
            oldest = next(iter(self.links))
            self.trimmed += 1
            self._unlink(oldest)

    def _unlink(self, peer_id: str) -> None:
        self.links.pop(peer_id, None)
        member = self._hub.member(peer_id)
        if isinstance(member, LinkedMemoryTransport):
            member.links.pop(self.peer_id, None)
