"""A bound on connections: close the least recently used ones beyond `max_connections`.

A node speaking the pull exchange asks a few different peers each round and pulls from a
few more, dialling each one it is not connected to; peers dial it just as often. Left
alone, its connections would grow towards the whole swarm. Like libp2p's connection
managers (go's high and low watermarks), the trimmer lets the count reach
`max_connections`, then closes connections down to three quarters of it: never a bootstrap
peer's while the node knows few others (`bootstrap_kept`), never one with a blob fetch
running, never one used (a fetch either way) or opened within `idle_s`, the least recently
used first. Before a dial at the bound the transport makes room (`make_room`: the least recently used
connection without a fetch running goes), and the node's dialer fills only half the bound
with peers it learned (`Libp2pTransport._dial_target`), so its own connections keep to the
bound and the other half is left for peers dialling in. Those are never refused (a cap that
refused them kept newcomers out: 60 of 100 processes could join a swarm through one
address): the trimmer starts at the bound; if the idle ones do not bring the count under it,
the least recently used of the others go too, except one with a fetch running or opened or
used in the last `GRACE_S` (2 s, time for a dial's fetch to start), so the count passes the
bound only by connections that young.
It runs on the network thread, from the dialer's maintenance loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID

from swarm.p2p.libp2p.host import connected_peers, is_connected
from swarm.p2p.libp2p.patches import abort_peer_connections
from swarm.p2p.libp2p.stats import Counters

logger = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = 64
IDLE_S = 10.0
GRACE_S = 2.0  # a connection just opened or used gets this long to start its fetch
LOW_WATERMARK = 0.75
SETTLED_PEERS = 4  # connected peers besides the bootstrap ones: the node has found the swarm


def bootstrap_kept(connected: Collection[ID], bootstrap: Collection[ID]) -> bool:
    """Whether bootstrap peers stay special (redialled, never trimmed): only while the node
    is connected to fewer than `SETTLED_PEERS` others. Past that the bootstrap peer is a
    peer like any other, so it is not every joiner's connection forever."""
    return sum(p not in bootstrap for p in connected) < SETTLED_PEERS


class ConnectionTrimmer:
    """Keeps the number of connected peers under `max_connections` (see the module docstring)."""

    def __init__(self, max_connections: int, counters: Counters, *, idle_s: float = IDLE_S):
        self.max_connections = max_connections
        self.idle_s = idle_s
        self._counters = counters
        self._last_used: dict[ID, float] = {}  # connected peers: last use, or when first seen

    def touch(self, peer_id: ID, now: float | None = None) -> None:
        """`peer_id` was just used (a blob fetched from it or served to it)."""
        self._last_used[peer_id] = trio.current_time() if now is None else now

    def victims(
        self, connected: list[ID], protected: Collection[ID], busy: Callable[[ID], bool], now: float
    ) -> list[ID]:
        """The peers to disconnect now (pure apart from remembering first sightings)."""
        for peer_id in connected:
            self._last_used.setdefault(peer_id, now)
        alive = set(connected)
        for peer_id in [p for p in self._last_used if p not in alive]:
            del self._last_used[peer_id]
        if len(connected) < self.max_connections:  # at the bound: room for the next inbound one
            return []
        target = int(self.max_connections * LOW_WATERMARK)
        idle = sorted(
            (
                p
                for p in connected
                if p not in protected and not busy(p) and now - self._last_used[p] >= self.idle_s
            ),
            key=lambda p: self._last_used[p],
        )
        victims = idle[: max(0, len(connected) - target)]
        over = len(connected) - len(victims) - self.max_connections
        if over > 0:  # a hard bound: the least recently used of the rest go too
            chosen = set(victims)
            rest = sorted(
                (
                    p
                    for p in connected
                    if p not in protected
                    and not busy(p)
                    and p not in chosen
                    and now - self._last_used[p] >= GRACE_S
                ),
                key=lambda p: self._last_used[p],
            )
            victims += rest[:over]
        return victims

    def room_victim(self, connected: list[ID], busy: Callable[[ID], bool]) -> ID | None:
        """Before a dial at the bound: the least recently used connected peer without a fetch
        running (None if every one is busy)."""
        free = [p for p in connected if not busy(p)]
        return min(free, key=lambda p: self._last_used.get(p, 0.0), default=None)

    async def make_room(self, host: IHost, peer_id: ID, busy: Callable[[ID], bool]) -> None:
        """Close one peer's connections if a dial to `peer_id` would pass the bound."""
        connected = connected_peers(host)
        if is_connected(host, peer_id) or len(connected) < self.max_connections:
            return
        victim = self.room_victim(connected, busy)
        if victim is None:
            return  # the dial fails at the bound: every connection is in use
        logger.debug("closing the connection to %s to make room for a dial", victim)
        await abort_peer_connections(host.get_network(), victim)
        self._last_used.pop(victim, None)
        with self._counters.locked() as stats:
            stats.connections_trimmed += 1

    async def trim(self, host: IHost, protected: Collection[ID], busy: Callable[[ID], bool]) -> int:
        """Close the connections `victims` names; returns how many peers were disconnected."""
        victims = self.victims(connected_peers(host), protected, busy, trio.current_time())
        for peer_id in victims:
            logger.debug("closing the idle connection to %s (over the connection limit)", peer_id)
            await abort_peer_connections(host.get_network(), peer_id)
            self._last_used.pop(peer_id, None)
        if victims:
            with self._counters.locked() as stats:
                stats.connections_trimmed += len(victims)
        return len(victims)
