"""Circuit relay v2 (py-libp2p 0.8.1's `libp2p.relay.circuit_v2`): relay for others, hold
reservations on relays, dial peers through them.

A node that cannot be dialled (behind NAT or a firewall, or listening on nothing) names
relays in `p2p.relays`; it keeps a connection and a reservation on each, and its circuit
addresses, `<relay addr>/p2p-circuit/p2p/<own id>`, come first in its `listen_addrs()`,
which the pull exchange's view hands to other peers (`Transport.learn_peer`). A peer that
is not connected to a peer whose peerstore entry holds a circuit address dials it through
that relay before it opens a stream (the swarm's own dial skips circuit addresses). A
node with `p2p.relay_service` runs the library's hop protocol under `RELAY_LIMITS`.

Hole punching (DCUtR), which moves a relayed connection onto a direct one, is
`holepunch.py`; reachability detection (AutoNAT) is `reachability.py`. The gossip dial loop and peer exchange (`connections.py`,
`peer_exchange.py`) still pass on direct TCP addresses only.
"""

from __future__ import annotations

import logging
import random
import socket
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import multiaddr
import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import InvalidAddrError, info_from_p2p_addr
from libp2p.peer.peerinfo import PeerInfo as Libp2pPeerInfo
from libp2p.relay.circuit_v2.config import (
    DEFAULT_MAX_CIRCUIT_BYTES,
    DEFAULT_MAX_CIRCUIT_CONNS,
    DEFAULT_MAX_CIRCUIT_DURATION,
    MAX_RESERVATIONS_TOTAL,
    RelayConfig,
    RelayRole,
)
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL_ID
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.resources import RelayLimits
from libp2p.relay.circuit_v2.transport import CircuitV2Transport
from libp2p.tools.anyio_service import background_trio_service

from swarm.core.errors import TransportError
from swarm.p2p.libp2p.framing import NET_ERRORS, close_quietly
from swarm.p2p.libp2p.host import is_connected, is_dialable_tcp, parse_peers, peer_addrs
from swarm.p2p.libp2p.patches import guard_relay_streams, lift_dial_block
from swarm.p2p.libp2p.pnet import protect

if TYPE_CHECKING:
    from trio_typing import TaskStatus  # trio's stubs name it here

logger = logging.getLogger(__name__)

# The library's per-circuit defaults (an hour, 1 GiB, 8 circuits per reserving peer), and
# its own figure for a relay's total reservations instead of its default of 4: a
# reservation holds its slot until it expires (an hour), even after its peer has left.
RELAY_LIMITS = RelayLimits(
    duration=DEFAULT_MAX_CIRCUIT_DURATION,
    data=DEFAULT_MAX_CIRCUIT_BYTES,
    max_circuit_conns=DEFAULT_MAX_CIRCUIT_CONNS,
    max_reservations=MAX_RESERVATIONS_TOTAL,
)
CHECK_INTERVAL_S = 5.0  # how often a node checks that it is still connected to its relays
BACKOFF_MAX_S = 30.0


# ------------------------------------------------------------------ addresses


def parse_relays(addrs: Iterable[str]) -> list[Libp2pPeerInfo]:
    """Relays from "/ip4/<ip>/tcp/<port>/p2p/<relay id>" multiaddrs (ip6, and dns4 or dns6
    with a host name, too), merged per relay."""
    relays = parse_peers(addrs, "relay address", "needs /ip4/<ip>/tcp/<port>/p2p/<peer id>")
    for relay in relays:
        if not relay.addrs or not all(_relay_addr(a) for a in relay.addrs):
            raise TransportError(
                f"relay address {relay.addrs} of {relay.peer_id} must be "
                "/ip4|ip6|dns4|dns6/<host>/tcp/<port>/p2p/<id>"
            )
    return relays


def _relay_addr(addr: multiaddr.Multiaddr) -> bool:
    names = [p.name for p in addr.protocols()]
    return is_dialable_tcp(addr) or (names[:1] in (["dns4"], ["dns6"]) and names[1:] == ["tcp"])


async def resolve(relay: Libp2pPeerInfo) -> Libp2pPeerInfo:
    """The relay with each /dns4 or /dns6 address replaced by the addresses its name resolves
    to now (the node resolves again at each reservation, so a relay that moves is followed);
    raises `OSError` when a name does not resolve."""
    addrs = []
    for addr in relay.addrs:
        names = [p.name for p in addr.protocols()]
        if names[0] not in ("dns4", "dns6"):
            addrs.append(addr)
            continue
        family = socket.AF_INET if names[0] == "dns4" else socket.AF_INET6
        port = int(addr.value_for_protocol("tcp"))
        found = await trio.socket.getaddrinfo(
            addr.value_for_protocol(names[0]), port, family, socket.SOCK_STREAM
        )
        ips = dict.fromkeys(str(entry[4][0]) for entry in found)
        addrs += [multiaddr.Multiaddr(f"/ip{names[0][3:]}/{ip}/tcp/{port}") for ip in ips]
    if not addrs:
        raise OSError(f"no address for relay {relay.peer_id}")
    return Libp2pPeerInfo(relay.peer_id, addrs)


def is_circuit(addr: multiaddr.Multiaddr) -> bool:
    """`/ip4|ip6/<ip>/tcp/<port>/p2p/<relay>/p2p-circuit`, with or without a trailing `/p2p/<peer>`."""
    names = [p.name for p in addr.protocols()]
    return (
        len(names) in (4, 5)
        and names[0] in ("ip4", "ip6")
        and names[1:4] == ["tcp", "p2p", "p2p-circuit"]
        and names[4:] in ([], ["p2p"])
    )


def circuit_to(addr: multiaddr.Multiaddr, peer_id: ID) -> multiaddr.Multiaddr:
    """A circuit address ending in `/p2p/<peer_id>` (view entries carry it without)."""
    if [p.name for p in addr.protocols()][-1] == "p2p-circuit":
        return addr.encapsulate(multiaddr.Multiaddr(f"/p2p/{peer_id.to_base58()}"))
    return addr


def circuit_addr(relay: Libp2pPeerInfo, peer_id: ID) -> str:
    """The address at which `peer_id` is reached through `relay` (its first address)."""
    return f"{relay.addrs[0]}/p2p/{relay.peer_id.to_base58()}/p2p-circuit/p2p/{peer_id.to_base58()}"


# ------------------------------------------------------------------ the relay roles


class Relaying:
    """The relay parts of one host (on the network thread): the library's hop/stop protocol
    (hop only with `service`), reservations on `relays`, and dials through circuit addresses.

    `addresses` (the circuit addresses of the relays that hold a reservation for us) is
    replaced whole, never mutated, so the node thread may read it.
    """

    def __init__(
        self,
        host: IHost,
        *,
        service: bool,
        relays: list[Libp2pPeerInfo],
        psk: str | None,
        dial_timeout: float,
        admit: Callable[[ID], bool] = lambda peer_id: True,
    ) -> None:
        self._host = host
        self._admit = admit  # each relay stream a peer opens: billed, allowed?
        self._service = service
        self._relays = relays
        self._psk = psk
        self._dial_timeout = dial_timeout
        self._protocol = CircuitV2Protocol(host, limits=RELAY_LIMITS, allow_hop=service)
        # STOP only: a dial through a relay never asks it for a reservation (CLIENT would).
        self._circuits = CircuitV2Transport(
            host, self._protocol, RelayConfig(roles=RelayRole.STOP, limits=RELAY_LIMITS)
        )
        self._reserved: dict[ID, str] = {}
        self._state: dict[ID, bool] = {}  # each relay's last answer, for logging changes
        self.addresses: tuple[str, ...] = ()
        self._dialing: dict[ID, trio.Event] = {}

    @property
    def active(self) -> bool:
        return self._service or bool(self._relays)

    def keeps(self, peer_id: ID) -> bool:
        """Whether the connection to `peer_id` must not be trimmed: one of our relays, or
        (as a relay) a peer holding a reservation with us."""
        if any(relay.peer_id == peer_id for relay in self._relays):
            return True
        return self._service and self._protocol.resource_manager.has_reservation(peer_id)

    async def run(self, *, task_status: TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the relay protocols and keep the reservations, forever. Reports started once
        each relay has been tried once, so that `addresses` names the relays that said yes."""
        if not self.active:
            task_status.started()
            return
        quiet_hop_stream_eof()
        async with background_trio_service(self._protocol), trio.open_nursery() as nursery:
            await self._protocol.event_started.wait()
            guard_relay_streams(self._host, self._protocol, hop=self._service, admit=self._admit)
            async with trio.open_nursery() as first:
                for relay in self._relays:
                    first.start_soon(self._reserve, relay, nursery)
            if self._relays and not self._reserved:
                logger.warning(
                    "no relay of %d holds a reservation for this node: peers that cannot "
                    "dial it cannot reach it; it keeps asking (check p2p.relays, and that "
                    "each relay runs with p2p.relay_service = true)",
                    len(self._relays),
                )
            task_status.started()
            for relay in self._relays:
                nursery.start_soon(self._keep, relay, nursery)
            await trio.sleep_forever()  # the protocol serves until the host stops

    async def _keep(self, relay: Libp2pPeerInfo, nursery: trio.Nursery) -> None:
        """Reserve again whenever the connection to `relay` is gone (the library's own
        refresher renews a reservation before it expires), with capped backoff."""
        failures = 0
        while True:
            if not is_connected(self._host, relay.peer_id) or relay.peer_id not in self._reserved:
                failures = 0 if await self._reserve(relay, nursery) else failures + 1
            delay = CHECK_INTERVAL_S if not failures else min(2.0**failures, BACKOFF_MAX_S)
            await trio.sleep(delay * random.uniform(0.8, 1.2))

    async def _reserve(self, relay: Libp2pPeerInfo, nursery: trio.Nursery) -> bool:
        """Connect to `relay` and ask it for a reservation; True if it granted one."""
        lift_dial_block(self._host.get_network(), relay.peer_id)
        granted, step = False, "cannot connect to it (is it up, at that address?)"
        try:
            with trio.fail_after(self._dial_timeout):
                relay = await resolve(relay)
                await self._host.connect(relay)
                step = "it did not answer a reservation request (is p2p.relay_service on there?)"
                stream = await self._host.new_stream(relay.peer_id, [HOP_PROTOCOL_ID])
                try:
                    granted = await self._circuits.reserve(stream, relay.peer_id, nursery)
                finally:
                    await close_quietly(stream)
        except NET_ERRORS as exc:
            failure = f"{step}: {type(exc).__name__}"
        else:
            failure = "" if granted else "it refused (is p2p.relay_service on there, with room?)"
        self._log_change(relay, granted, failure)
        if granted:
            self._reserved[relay.peer_id] = circuit_addr(relay, self._host.get_id())
        else:
            self._reserved.pop(relay.peer_id, None)
        self.addresses = tuple(self._reserved.values())
        return granted

    def _log_change(self, relay: Libp2pPeerInfo, granted: bool, failure: str) -> None:
        """INFO when a relay grants a reservation; WARNING the first time it fails (and each
        time a reservation is lost), DEBUG while it keeps failing."""
        had = self._state.get(relay.peer_id)
        self._state[relay.peer_id] = granted
        where = f"{relay.addrs[0]}/p2p/{relay.peer_id}"
        if granted and had is not True:
            logger.info(
                "relay %s holds a reservation for this node: peers reach it at %s",
                where,
                circuit_addr(relay, self._host.get_id()),
            )
        elif not granted and had is not False:
            logger.warning(
                "no reservation on relay %s: %s; peers reach this node through it only once "
                "it answers (it asks again with backoff up to %.0f s)",
                where,
                failure,
                BACKOFF_MAX_S,
            )
        elif not granted:
            logger.debug("still no reservation on relay %s: %s", where, failure)

    async def connect(self, peer_id: ID, within: float) -> None:
        """Dial `peer_id` through a relay, for at most `within` s (and the dial timeout), if
        we are not connected to it and the peerstore holds circuit addresses for it;
        failures are left to the caller's own stream open."""
        if is_connected(self._host, peer_id):
            return
        circuits = [
            circuit_to(a, peer_id) for a in peer_addrs(self._host, peer_id) if is_circuit(a)
        ]
        if not circuits:
            return
        running = self._dialing.get(peer_id)
        if running is not None:
            await running.wait()
            return
        done = self._dialing[peer_id] = trio.Event()
        try:
            with trio.move_on_after(min(within, self._dial_timeout)):
                for addr in circuits:
                    if await self._dial_circuit(peer_id, addr):
                        return
        finally:
            del self._dialing[peer_id]
            done.set()

    async def _dial_circuit(self, peer_id: ID, addr: multiaddr.Multiaddr) -> bool:
        """One connection to `peer_id` through the relay `addr` names; True if it is up."""
        try:
            relay_addr, _ = self._circuits.parse_circuit_ma(addr)
            relay = info_from_p2p_addr(relay_addr)
            lift_dial_block(self._host.get_network(), relay.peer_id)
            await self._host.connect(relay)
            raw = await self._circuits.dial_peer_info(
                Libp2pPeerInfo(peer_id, [addr]), relay_info=relay
            )
            if self._psk is not None:  # the swarm protects what it dials itself, not this
                raw = protect(raw, self._psk)
            await self._host.upgrade_outbound_connection(raw, peer_id)
            return True
        except (*NET_ERRORS, InvalidAddrError, TransportError) as exc:
            logger.debug("dial of %s through %s failed: %s", peer_id, addr, exc)
            return False


class _HopStreamEofFilter(logging.Filter):
    """Drops the relay's ERROR lines for a stream that simply ended: a client that closed
    its hop stream after its one exchange (a reservation), for which the library reads on
    and logs the EOF as "Error reading from hop stream from <peer>: " with an empty
    reason, and a circuit one of whose ends closed ("Unexpected error reading from
    stream: ", no reason either)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not message.endswith(": ") or not message.startswith(
            ("Error reading from hop stream", "Unexpected error reading from stream")
        )


def quiet_hop_stream_eof() -> None:
    hop_logger = logging.getLogger("libp2p.relay.circuit_v2.protocol")
    if not any(isinstance(f, _HopStreamEofFilter) for f in hop_logger.filters):
        hop_logger.addFilter(_HopStreamEofFilter())
