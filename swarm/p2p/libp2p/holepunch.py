"""Hole punching: DCUtR (`/libp2p/dcutr`, the libp2p spec) over a relayed connection.

Two nodes behind NAT meet through a relay (`relay.py`); every byte between them then
crosses the relay. DCUtR moves them onto a direct TCP connection: the node that *received*
the relayed connection (B, the one holding the reservation) opens a `/libp2p/dcutr`
stream over it and sends CONNECT with its addresses; the other (A) answers CONNECT with
its own; B measures the round trip, sends SYNC and waits half of it; A dials B's addresses
as soon as SYNC arrives, B dials A's when its wait ends. The two SYNs cross, each opens
its own router's NAT mapping for the other, and TCP's simultaneous open joins them into
one connection, on which A is the security handshake's client and B its server. Up to
`ATTEMPTS` tries; the relayed connection is closed once the direct one is up and idle.

What each side needs (checked, and said in one WARNING when missing):
- a TCP listen port: both dial *from* it (SO_REUSEPORT, py-libp2p 0.8.1's TCP transport),
  so each router maps the punch to the port the other side was told about;
- its outside IP: the address its relay saw it connect from (Identify's observed address,
  kept by `dcutr.ObservedIps` and never advertised), from its own relays and the relay
  the connection runs through only.
Routers that give each outgoing connection a new port (symmetric NAT, carrier-grade NAT)
cannot be punched; the relayed connection then stays. The dials themselves (the plain one,
the punch's, closing the relayed connection after) are `punch_dials.PunchDials`.

py-libp2p 0.8.1's `relay/circuit_v2/dcutr.py` is not used: its service starts a punch to
every relayed peer from both ends every 2 s (two sessions dialling from one port collide),
answers peers off the allow-list and bills them nothing, logs a malformed message without
recording it, and learns the outside IP only with Identify's address discovery on, which
would advertise ephemeral ports (docs/LIBP2P.md, pitfall 13). Its wire messages
(`HolePunch`) and the swarm's dial from the listen port (`dial_addr(..., source)`,
`dial_addr_as_responder`) are used.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Sequence

import multiaddr
import trio
from libp2p.abc import IHost, INetConn, INetStream
from libp2p.connection_types import ConnectionType
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.dcutr_pb2 import HolePunch

from swarm.p2p.libp2p.dcutr import (
    DCUTR_PROTOCOL,
    ExchangeBudget,
    InboundRelayed,
    ObservedIps,
    dialable,
    direct_connections,
    leads,
    message,
    predicted,
    read_message,
    relay_of,
    relayed_connections,
)
from swarm.p2p.libp2p.framing import NET_ERRORS, StreamProtocolError, close_quietly
from swarm.p2p.libp2p.host import AccessPolicy
from swarm.p2p.libp2p.peer_costs import Cost
from swarm.p2p.libp2p.punch_dials import PunchDials
from swarm.p2p.libp2p.stats import Counters
from swarm.p2p.transport import RefusalReason

logger = logging.getLogger(__name__)

ATTEMPTS = 3  # the spec's: one try and two retries
EXCHANGE_TIMEOUT_S = 10.0  # each read or write of the exchange
RETRY_S = 1.0  # between attempts (and time for a peer's own exchange to make us yield)
SESSIONS_PER_MINUTE = ATTEMPTS + 1  # exchanges one peer may start with us a minute

Refuse = Callable[[ID, RefusalReason, str, None], None]


class Outcome(enum.StrEnum):
    """How one upgrade of a relayed connection ended."""

    DIRECT = "direct"  # hole punched: a direct connection is up
    UNILATERAL = "unilateral"  # the peer was reachable directly: a plain dial did it
    NO_PORT = "no_listen_port"  # we listen on no TCP port to dial from
    NO_ADDRESSES = "no_addresses"  # the peer sent no address we could dial
    FAILED = "failed"  # every attempt ended without a direct connection
    ALREADY = "already_direct"  # a direct connection was there (the peer's punch, say)
    YIELDED = "yielded"  # the peer started one at the same time, and leads (lower peer ID)


# ------------------------------------------------------------------ the service


class HolePunching:
    """Both sides of DCUtR on one host (network thread)."""

    def __init__(
        self,
        host: IHost,
        policy: AccessPolicy,
        counters: Counters,
        observed: ObservedIps,
        *,
        relays: Sequence[ID],
        announce: Sequence[str],
        enabled: bool = True,
    ) -> None:
        self._host = host
        self._policy = policy
        self._counters = counters
        self._observed = observed
        self._relays = list(relays)
        self._announce = list(announce)
        self._enabled = enabled
        self._refuse: Refuse | None = None
        self._nursery: trio.Nursery | None = None
        self._sessions: dict[ID, trio.CancelScope] = {}  # our upgrades running, by peer
        self._budget = ExchangeBudget(SESSIONS_PER_MINUTE)
        self._dials = PunchDials(host, counters)
        self._warned_no_port = False

    def register(self, refuse: Refuse) -> None:
        """Answer peers' DCUtR streams; start our own on each inbound relayed connection."""
        self._refuse = refuse
        self._host.set_stream_handler(DCUTR_PROTOCOL, self._handle)
        if self._enabled:
            self._host.get_network().register_notifee(InboundRelayed(self._on_relayed))

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await trio.sleep_forever()

    def _on_relayed(self, peer_id: ID, conn: INetConn) -> None:
        if self._nursery is not None and peer_id not in self._sessions:
            self._nursery.start_soon(self.upgrade, peer_id)

    # -------------------------------------------------------------- addresses

    def _our_addrs(self, peer_id: ID) -> list[multiaddr.Multiaddr]:
        observers = list(self._relays)
        for conn in relayed_connections(self._host, peer_id):
            relay = relay_of(conn)
            if relay is not None and relay not in observers:
                observers.append(relay)
        return predicted(self._observed.ips(observers), self._dials.listen(), self._announce)

    # -------------------------------------------------------------- B: we were reached

    async def upgrade(self, peer_id: ID) -> Outcome:
        """Move a peer that reached us through a relay onto a direct connection. When two
        peers reached each other through relays at once, both start; the one with the
        higher peer ID yields to the other's (`_yield_to`), so only one punch runs."""
        if peer_id in self._sessions:
            return Outcome.YIELDED
        began = time.monotonic()
        outcome = Outcome.YIELDED
        with trio.CancelScope() as scope:
            self._sessions[peer_id] = scope
            try:
                outcome = await self._upgrade(peer_id)
            except Exception as exc:  # noqa: BLE001 - a punch must never stop the host; counted
                self._counters.handler_error("hole_punch", exc)
                outcome = Outcome.FAILED
            finally:
                del self._sessions[peer_id]
        self._report(peer_id, outcome, time.monotonic() - began)
        direct = (Outcome.DIRECT, Outcome.UNILATERAL, Outcome.ALREADY)
        if outcome in direct and self._nursery is not None:
            self._nursery.start_soon(self._dials.close_relayed, peer_id)
        return outcome

    async def _upgrade(self, peer_id: ID) -> Outcome:
        if direct_connections(self._host, peer_id):
            return Outcome.ALREADY
        if await self._dials.unilateral(peer_id):
            return Outcome.UNILATERAL
        if self._dials.listen() is None:
            return Outcome.NO_PORT
        outcome = Outcome.FAILED
        for attempt in range(ATTEMPTS):
            if attempt:
                await trio.sleep(RETRY_S)
            if direct_connections(self._host, peer_id):
                return Outcome.ALREADY
            if not relayed_connections(self._host, peer_id):
                return Outcome.FAILED  # the peer left
            try:
                outcome = await self._attempt(peer_id)
            except (*NET_ERRORS, StreamProtocolError) as exc:
                logger.debug("hole punch with %s: %s", peer_id, exc)
                outcome = Outcome.FAILED
            if outcome in (Outcome.DIRECT, Outcome.NO_ADDRESSES):
                return outcome
        return Outcome.ALREADY if direct_connections(self._host, peer_id) else outcome

    async def _attempt(self, peer_id: ID) -> Outcome:
        stream = await self._host.new_stream(peer_id, [DCUTR_PROTOCOL])
        try:
            with trio.fail_after(EXCHANGE_TIMEOUT_S):
                sent = trio.current_time()
                await stream.write(message(HolePunch.CONNECT, self._our_addrs(peer_id)))
                answer = await read_message(stream, HolePunch.CONNECT)
                rtt = trio.current_time() - sent
                addrs = dialable(list(answer.ObsAddrs))
                await stream.write(message(HolePunch.SYNC))
        finally:
            await close_quietly(stream)
        if not addrs:
            return Outcome.NO_ADDRESSES
        await trio.sleep(min(rtt / 2, 2.0))
        return (
            Outcome.DIRECT
            if await self._dials.punch(peer_id, addrs, server=True)
            else Outcome.FAILED
        )

    # -------------------------------------------------------------- A: we reached it

    async def _handle(self, stream: INetStream) -> None:
        peer_id = stream.muxed_conn.peer_id
        self._policy.charge(peer_id, Cost.STREAM)
        try:
            if not self._policy.allows(peer_id) or not self._budget.allow(
                peer_id, time.monotonic()
            ):
                return
            relayed = stream.muxed_conn.get_connection_type() == ConnectionType.RELAYED
            if not relayed or direct_connections(self._host, peer_id):
                return  # nothing to upgrade: we are connected directly already
            if not self._yield_to(peer_id):
                return  # ours leads: theirs fails, and theirs yields to ours
            try:
                with trio.fail_after(EXCHANGE_TIMEOUT_S):
                    offer = await read_message(stream, HolePunch.CONNECT)
                    addrs = dialable(list(offer.ObsAddrs))
                    await stream.write(message(HolePunch.CONNECT, self._our_addrs(peer_id)))
                    await read_message(stream, HolePunch.SYNC)
            except StreamProtocolError as exc:
                if self._refuse is not None:
                    self._refuse(peer_id, RefusalReason.BAD_HOLE_PUNCH, str(exc)[:200], None)
                return
            if addrs and await self._dials.punch(peer_id, addrs, server=False):
                logger.info("hole punched: direct connection to %s (it asked)", peer_id)
        except NET_ERRORS as exc:
            logger.debug("DCUtR exchange with %s ended: %s", peer_id, exc)
        except Exception as exc:  # noqa: BLE001 - a peer's request must never stop the host
            self._counters.handler_error("hole_punch_serve", exc)
        finally:
            await close_quietly(stream)

    def _yield_to(self, peer_id: ID) -> bool:
        """Whether to answer a peer's exchange while ours with it runs: both ends started
        one (each reached the other through a relay); the lower peer ID leads, the other
        cancels its own."""
        mine = self._sessions.get(peer_id)
        if mine is None:
            return True
        if leads(self._host.get_id(), peer_id):
            return False
        mine.cancel()
        return True

    def _report(self, peer_id: ID, outcome: Outcome, seconds: float) -> None:
        with self._counters.locked() as stats:
            stats.hole_punches[outcome.value] += 1
        if outcome in (Outcome.ALREADY, Outcome.YIELDED):
            logger.debug("no hole punch of ours with %s: %s", peer_id, outcome.value)
        elif outcome in (Outcome.DIRECT, Outcome.UNILATERAL):
            logger.info(
                "direct connection to %s after %.1f s (%s); the relayed one closes when idle",
                peer_id,
                seconds,
                "hole punched" if outcome == Outcome.DIRECT else "it is reachable",
            )
        elif outcome == Outcome.NO_PORT:
            if not self._warned_no_port:
                self._warned_no_port = True
                logger.warning(
                    "no hole punching: this node listens on no TCP port, so traffic with "
                    "peers behind NAT stays on the relay; set p2p.listen (e.g. "
                    "/ip4/0.0.0.0/tcp/4001) to punch from it"
                )
        elif outcome == Outcome.NO_ADDRESSES:
            logger.warning(
                "no hole punch with %s: it sent no address to dial (it listens on no port, "
                "or no relay told it its outside IP); traffic with it stays on the relay",
                peer_id,
            )
        else:
            logger.warning(
                "hole punch with %s failed %d times in %.1f s: traffic with it stays on the "
                "relay. Routers that give each connection a new port (symmetric or "
                "carrier-grade NAT) cannot be punched; forward a port and set p2p.announce",
                peer_id,
                ATTEMPTS,
                seconds,
            )
