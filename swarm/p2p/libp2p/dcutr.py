"""Hole punching's parts that hold no state of the service (`holepunch.py`): DCUtR's wire
messages (py-libp2p 0.8.1's `HolePunch` protobuf, varint-prefixed, at most 4 KiB), which
addresses of a CONNECT are dialled and which of ours are sent, the outside IPs peers saw
us at (`ObservedIps`), and which connections are relayed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence

import multiaddr
from google.protobuf.message import DecodeError
from libp2p.abc import IHost, INetConn, INetStream, INetwork, INotifee
from libp2p.connection_types import ConnectionType
from libp2p.custom_types import TProtocol
from libp2p.host.observed_addr_manager import NATDeviceType
from libp2p.network.connection.swarm_connection import Direction
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.dcutr_pb2 import HolePunch
from libp2p.utils.varint import encode_varint_prefixed

from swarm.p2p.libp2p.framing import StreamProtocolError, read_exactly, read_uvarint
from swarm.p2p.libp2p.host import is_dialable_tcp

DCUTR_PROTOCOL = TProtocol("/libp2p/dcutr")
MAX_MESSAGE = 4096  # the spec's bound on one message
MAX_ADDRS = 8  # addresses of one CONNECT dialled at most


# ------------------------------------------------------------------ pure rules


def message(kind: int, addrs: Sequence[multiaddr.Multiaddr] = ()) -> bytes:
    msg = HolePunch()
    msg.type = kind  # type: ignore[assignment]
    msg.ObsAddrs.extend(a.to_bytes() for a in addrs)
    return encode_varint_prefixed(msg.SerializeToString())


def dialable(raw: Sequence[bytes]) -> list[multiaddr.Multiaddr]:
    """The TCP addresses of a CONNECT worth dialling (`/p2p/..` stripped), at most
    `MAX_ADDRS`: not a circuit, not "all interfaces", not loopback or multicast (a peer
    must not point our dials at this machine's own services). Raises `StreamProtocolError`
    for bytes that are no multiaddr; other transports' addresses (QUIC) are skipped."""
    keep: list[multiaddr.Multiaddr] = []
    for data in raw[: 4 * MAX_ADDRS]:
        try:
            addr = multiaddr.Multiaddr(bytes(data))
            names = [p.name for p in addr.protocols()]
            if not is_dialable_tcp(addr):
                continue
            ip = ipaddress.ip_address(addr.value_for_protocol(names[0]))
        except (ValueError, TypeError, multiaddr.exceptions.Error) as exc:
            raise StreamProtocolError(f"not an address: {bytes(data)[:32]!r}") from exc
        if ip.is_unspecified or ip.is_loopback or ip.is_multicast:
            continue
        bare = multiaddr.Multiaddr(f"/{names[0]}/{ip}/tcp/{addr.value_for_protocol('tcp')}")
        if bare not in keep:
            keep.append(bare)
    return keep[:MAX_ADDRS]


def predicted(
    observed_ips: Sequence[str], listen: tuple[str, int] | None, announce: Sequence[str]
) -> list[multiaddr.Multiaddr]:
    """Where a peer can reach us once our router has a mapping: the announced addresses,
    each outside IP a relay saw us at with our listen port (routers that keep ports map a
    dial from it there), and the listen address itself when it names a specific IP."""
    addrs = [multiaddr.Multiaddr(a.rsplit("/p2p/", 1)[0]) for a in announce]
    if listen is not None:
        ip, port = listen
        for seen in observed_ips:
            family = "ip6" if ":" in seen else "ip4"
            addrs.append(multiaddr.Multiaddr(f"/{family}/{seen}/tcp/{port}"))
        if not ipaddress.ip_address(ip).is_unspecified and not ipaddress.ip_address(ip).is_loopback:
            addrs.append(multiaddr.Multiaddr(f"/{'ip6' if ':' in ip else 'ip4'}/{ip}/tcp/{port}"))
    return list(dict.fromkeys(addrs))[:MAX_ADDRS]


# ------------------------------------------------------------------ outside IPs


class ObservedIps:
    """Where peers saw our connections come from (Identify's observed address), by peer.

    Installed as the host's observed-address manager (`patches.keep_observed_ips`): the
    host records into it, but `addrs()` hands the host nothing to advertise, since the
    observed port of an outbound connection is an ephemeral one (pitfall 13)."""

    def __init__(self) -> None:
        self._by_peer: dict[ID, str] = {}

    def record_observation(
        self, conn: INetConn, observed: multiaddr.Multiaddr, local_addrs: object = None
    ) -> None:
        try:
            peer_id = conn.muxed_conn.peer_id
            names = [p.name for p in observed.protocols()]
            ip = str(ipaddress.ip_address(observed.value_for_protocol(names[0])))
        except (AttributeError, ValueError, TypeError, multiaddr.exceptions.Error):
            return
        if len(self._by_peer) > 256:
            self._by_peer.clear()
        self._by_peer[peer_id] = ip

    def remove_conn(self, conn: INetConn) -> None:
        return None  # an observation outlives its connection: the IP stays ours

    def addrs(self, min_observers: int = 0) -> list[multiaddr.Multiaddr]:
        return []

    def get_nat_type(self) -> tuple[NATDeviceType, NATDeviceType]:
        return (NATDeviceType.UNKNOWN, NATDeviceType.UNKNOWN)

    def ips(self, observers: Sequence[ID]) -> list[str]:
        """The outside IPs `observers` saw, first seen first."""
        return list(dict.fromkeys(self._by_peer[p] for p in observers if p in self._by_peer))


# ------------------------------------------------------------------ connections


def direct_connections(host: IHost, peer_id: ID) -> list[INetConn]:
    conns = host.get_network().connections.get(peer_id, ())
    return [
        c for c in conns if not c.is_closed and c.get_connection_type() != ConnectionType.RELAYED
    ]


def relayed_connections(host: IHost, peer_id: ID) -> list[INetConn]:
    conns = host.get_network().connections.get(peer_id, ())
    return [
        c for c in conns if not c.is_closed and c.get_connection_type() == ConnectionType.RELAYED
    ]


def relay_of(conn: INetConn) -> ID | None:
    """The relay a relayed connection runs through (`/p2p/<relay>/p2p-circuit/...`)."""
    for addr in conn.get_transport_addresses():
        text = str(addr)
        if "/p2p-circuit" in text:
            try:
                return ID.from_base58(text.split("/p2p-circuit")[0].rsplit("/p2p/", 1)[1])
            except (IndexError, ValueError):
                return None
    return None


class InboundRelayed(INotifee):
    """Calls `on_relayed(peer)` for each relayed connection a peer opened to us."""

    def __init__(self, on_relayed: Callable[[ID, INetConn], None]) -> None:
        self._on_relayed = on_relayed

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        if (
            conn.get_connection_type() == ConnectionType.RELAYED
            and getattr(conn, "direction", None) == Direction.INBOUND
        ):
            self._on_relayed(conn.muxed_conn.peer_id, conn)

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        return None

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def listen(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None

    async def listen_close(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None


async def read_message(stream: INetStream, kind: int) -> HolePunch:
    size = await read_uvarint(stream)
    if size is None or size > MAX_MESSAGE:
        raise StreamProtocolError(f"a message of {size} bytes")
    msg = HolePunch()
    try:
        msg.ParseFromString(await read_exactly(stream, size))
    except DecodeError as exc:
        raise StreamProtocolError("not a HolePunch message") from exc
    if msg.type != kind:
        raise StreamProtocolError(f"message type {msg.type} where {kind} was due")
    return msg


def unspecified_or_loopback(addr: multiaddr.Multiaddr) -> bool:
    names = [p.name for p in addr.protocols()]
    try:
        ip = ipaddress.ip_address(addr.value_for_protocol(names[0]))
    except ValueError:
        return True
    return ip.is_unspecified or ip.is_loopback


def leads(me: ID, peer: ID) -> bool:
    """When both ends of a relayed connection start an upgrade at once, the one with the
    lower peer ID (by its bytes) leads and the other yields."""
    return me.to_bytes() < peer.to_bytes()


class ExchangeBudget:
    """At most `per_minute` exchanges a peer may start with us a minute (each makes us dial
    addresses the peer chose); at most `MAX_TRACKED` peers remembered."""

    MAX_TRACKED = 1024

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._started: dict[ID, list[float]] = {}

    def allow(self, peer_id: ID, now: float) -> bool:
        recent = [t for t in self._started.get(peer_id, []) if now - t < 60.0]
        if len(recent) >= self.per_minute:
            return False
        if len(self._started) > self.MAX_TRACKED:
            self._started = {p: ts for p, ts in self._started.items() if now - ts[-1] < 60.0}
        self._started[peer_id] = [*recent, now]
        return True
