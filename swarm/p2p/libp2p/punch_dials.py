"""`PunchDials`: the dials of hole punching (`holepunch.py`) and what follows them.

A plain dial to a peer's direct addresses first (a reachable peer needs no punch); the
punch's dials, from our listen port to each of the peer's addresses at once (SO_REUSEPORT,
and as the handshake's responder on one end of a simultaneous open); and, once a direct
connection is up, closing the relayed one when it carries no exchange any more.
"""

from __future__ import annotations

import logging

import multiaddr
import trio
from libp2p.abc import IHost, INetConn
from libp2p.peer.id import ID

from swarm.core.errors import TransportError
from swarm.p2p.libp2p.dcutr import (
    MAX_ADDRS,
    direct_connections,
    relayed_connections,
    unspecified_or_loopback,
)
from swarm.p2p.libp2p.framing import NET_ERRORS
from swarm.p2p.libp2p.host import is_dialable_tcp, peer_addrs
from swarm.p2p.libp2p.patches import dial_as_server, lift_dial_block
from swarm.p2p.libp2p.stats import Counters

logger = logging.getLogger(__name__)

PUNCH_S = 5.0  # one round of dials
UNILATERAL_S = 3.0  # a plain dial to the peer's direct addresses, before punching
RELAYED_CLOSE_S = 30.0  # the relayed connection is closed once idle, or after this
LONG_LIVED = ("/meshsub/", "/floodsub/", "/ipfs/id/", "/ipfs/ping/")  # streams that never end


class PunchDials:
    """Dials to one host's peers for hole punching (network thread)."""

    def __init__(self, host: IHost, counters: Counters) -> None:
        self._host = host
        self._counters = counters

    def listen(self) -> tuple[str, int] | None:
        """The (ip, port) we listen on, which punches dial from."""
        for addr in self._host.get_transport_addrs():
            names = [p.name for p in addr.protocols()]
            if names[:2] == ["ip4", "tcp"] or names[:2] == ["ip6", "tcp"]:
                return str(addr.value_for_protocol(names[0])), int(addr.value_for_protocol("tcp"))
        return None

    async def unilateral(self, peer_id: ID) -> bool:
        """A plain dial to the peer's direct addresses: a peer that is reachable needs no
        punch (and a punch would give both ends the server's role)."""
        addrs = [
            a
            for a in peer_addrs(self._host, peer_id)
            if is_dialable_tcp(a) and not unspecified_or_loopback(a)
        ][:MAX_ADDRS]
        if not addrs:
            return False
        with trio.move_on_after(UNILATERAL_S):
            async with trio.open_nursery() as nursery:
                for addr in addrs:
                    nursery.start_soon(self._dial, peer_id, addr, None, False, nursery)
        return bool(direct_connections(self._host, peer_id))

    async def punch(self, peer_id: ID, addrs: list[multiaddr.Multiaddr], *, server: bool) -> bool:
        """Dial each address from our listen port at once; True once a direct connection is
        up. `server`: upgrade as the handshake's responder (B), which a simultaneous open
        needs on one end."""
        source = self.listen()
        if source is None:
            return False
        with trio.move_on_after(PUNCH_S):
            async with trio.open_nursery() as nursery:
                for addr in addrs:
                    nursery.start_soon(self._dial, peer_id, addr, source, server, nursery)
        return bool(direct_connections(self._host, peer_id))

    async def _dial(
        self,
        peer_id: ID,
        addr: multiaddr.Multiaddr,
        source: tuple[str, int] | None,
        server: bool,
        nursery: trio.Nursery,
    ) -> None:
        network = self._host.get_network()
        lift_dial_block(network, peer_id)
        try:
            if server and source is not None:
                await dial_as_server(network, addr, peer_id, source)
            else:
                await network.dial_addr(addr, peer_id, source)
        except (*NET_ERRORS, TransportError) as exc:  # TransportError: a PSK that differs
            logger.debug("punch dial to %s at %s: %s", peer_id, addr, exc)
            return
        except Exception as exc:  # noqa: BLE001 - library boundary: dial errors vary; counted
            self._counters.handler_error("hole_punch_dial", exc)
            return
        with self._counters.locked() as stats:
            stats.hole_punch_dials += 1
        nursery.cancel_scope.cancel()

    async def close_relayed(self, peer_id: ID) -> None:
        """Close the relayed connections to a peer now reached directly, once idle."""
        deadline = trio.current_time() + RELAYED_CLOSE_S
        for conn in relayed_connections(self._host, peer_id):
            while _carries_exchanges(conn) and trio.current_time() < deadline:
                await trio.sleep(0.5)
            if direct_connections(self._host, peer_id):
                try:
                    await conn.close()
                except NET_ERRORS as exc:
                    logger.debug("closing the relayed connection to %s: %s", peer_id, exc)


def _carries_exchanges(conn: INetConn) -> bool:
    """Whether a connection carries a stream that ends (a blob fetch, say), not only the
    ones that last as long as it does (gossip, identify, ping), which move with the peer."""
    for stream in conn.get_streams():
        protocol = str(stream.get_protocol() or "")
        if not protocol.startswith(LONG_LIVED):
            return True
    return False
