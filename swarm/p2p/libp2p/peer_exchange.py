"""Peer exchange (`/swarm/px/1.0.0`): ask connected peers for theirs; one bootstrap peer is enough.

The asker opens a stream; the answerer writes one length-prefixed JSON frame,
`{"peers": [{"id": <peer id>, "addrs": [<tcp multiaddr>, ...]}, ...]}`, and closes it.
What comes back is only a hint list: malformed entries are skipped, unlisted peers are
ignored, and the dial loop (connections.py) decides when to dial the rest.
"""

from __future__ import annotations

import logging
import random

import multiaddr
import trio
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from swarm.p2p.libp2p.connections import Dialer
from swarm.p2p.libp2p.framing import (
    NET_ERRORS,
    STREAM_IO_TIMEOUT_S,
    StreamProtocolError,
    close_quietly,
    frame,
    read_frame,
    reset_quietly,
)
from swarm.p2p.libp2p.host import AccessPolicy, connected_peers, is_dialable_tcp, peer_addrs
from swarm.p2p.libp2p.patches import is_protocol_not_supported
from swarm.p2p.libp2p.peer_costs import Cost
from swarm.p2p.libp2p.stats import Counters
from swarm.wire import streams as wire_streams
from swarm.wire.streams import (
    PX_MAX_PEERS,
    PX_MAX_RESPONSE,
    PeerEntry,
    decode_peer_exchange,
    encode_peer_exchange,
)

logger = logging.getLogger(__name__)

PEER_EXCHANGE_PROTOCOL = TProtocol(wire_streams.PEER_EXCHANGE_PROTOCOL)
# Every peer is asked once, soon after start, then one random peer per interval: each ask
# opens a stream, and stream opens are not free (see gossip.SEND_STALL_S).
PX_FIRST_DELAY_S, PX_INTERVAL_S = 0.5, 5.0


class PeerExchange:
    """Both ends of peer exchange: the answering stream handler and the asking loop."""

    def __init__(
        self, host: IHost, policy: AccessPolicy, dialer: Dialer, counters: Counters
    ) -> None:
        self._host = host
        self._policy = policy
        self._dialer = dialer
        self._counters = counters
        self._no_px: set[ID] = set()  # connected peers that do not speak our peer exchange

    def register(self) -> None:
        """Answer other peers' requests from now on."""
        self._host.set_stream_handler(PEER_EXCHANGE_PROTOCOL, self._handle_stream)

    async def run(self) -> None:
        """Ask peers for their peers, forever; the dialer then dials the new ones.

        Every peer connected by the first round is asked once; after that, one peer we
        have not asked yet (or, when there is none, a random one) per PX_INTERVAL_S.
        """
        await trio.sleep(PX_FIRST_DELAY_S)
        asked: set[ID] = set()
        while True:
            connected = [p for p in connected_peers(self._host) if p not in self._no_px]
            fresh = [peer_id for peer_id in connected if peer_id not in asked]
            targets = fresh or connected
            if asked and len(targets) > 1:
                targets = [random.choice(targets)]
            async with trio.open_nursery() as nursery:
                for peer_id in targets:
                    asked.add(peer_id)
                    nursery.start_soon(self._ask, peer_id)
            asked &= set(connected)
            self._no_px &= set(connected_peers(self._host))  # asked again after a reconnect
            await trio.sleep(PX_INTERVAL_S)

    async def _ask(self, peer_id: ID) -> None:
        try:
            with trio.fail_after(STREAM_IO_TIMEOUT_S):
                stream = await self._host.new_stream(peer_id, [PEER_EXCHANGE_PROTOCOL])
                try:
                    payload = await read_frame(stream, PX_MAX_RESPONSE)
                finally:
                    await close_quietly(stream)
        except (*NET_ERRORS, StreamProtocolError) as exc:
            if is_protocol_not_supported(exc):
                # Normal for other libp2p implementations: noted once, not asked again.
                self._no_px.add(peer_id)
                logger.debug("peer %s does not speak peer exchange; not asking it again", peer_id)
            else:
                logger.debug("peer exchange with %s failed: %s", peer_id, exc)
            return
        except Exception as exc:  # noqa: BLE001 - library boundary: never stop the host; counted
            self._counters.handler_error("peer_exchange_ask", exc)
            return
        for found_id, addrs in parse_px_payload(payload):
            self._dialer.learn(found_id, addrs)

    async def _handle_stream(self, stream: INetStream) -> None:
        remote = stream.muxed_conn.peer_id
        self._policy.charge(remote, Cost.STREAM)
        try:
            if not self._policy.allows(remote):
                await reset_quietly(stream)
                return
            payload = encode_peer_exchange(self._entries(exclude=remote))
            with trio.fail_after(STREAM_IO_TIMEOUT_S):
                await stream.write(frame(payload))
            await close_quietly(stream)
        except Exception as exc:  # noqa: BLE001 - a peer's request must never stop the host
            self._counters.handler_error("peer_exchange", exc)
            await reset_quietly(stream)

    def _entries(self, exclude: ID) -> list[PeerEntry]:
        entries: list[PeerEntry] = []
        for peer_id in connected_peers(self._host):
            if peer_id == exclude or len(entries) >= PX_MAX_PEERS:
                continue
            addrs = [str(a) for a in peer_addrs(self._host, peer_id) if is_dialable_tcp(a)]
            if addrs:
                entries.append(PeerEntry(peer_id.to_base58(), tuple(addrs)))
        return entries


def parse_px_payload(payload: bytes) -> list[tuple[ID, list[multiaddr.Multiaddr]]]:
    """Peers from a peer-exchange answer. Malformed entries are skipped: it is only a hint list."""
    found = []
    for entry in decode_peer_exchange(payload):
        try:
            peer_id = ID.from_base58(entry.id)
            addrs = [multiaddr.Multiaddr(a) for a in entry.addrs]
        except (TypeError, ValueError):
            continue
        addrs = [a for a in addrs if is_dialable_tcp(a)]
        if addrs:
            found.append((peer_id, addrs))
    return found
